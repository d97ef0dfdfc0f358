"""The compiled per-row passes of a pack step on a CPU (docs/packs.md, "Fused row passes"): the two-class Lagrangian
residual and release (raco_bench/methods/lagrangian/fused.py), the clipping of rank-one gradients
(raco_bench/privacy/clip_noise.py: clip_rank_one) and the dual quantities (raco_bench/constraints/problem.py).

Each is checked against a reference written in plain torch, and one step of a pack with the compiled passes releases
what the same step releases with the torch passes (the form a GPU runs), tensor by tensor: gradient sums, the noisy
histogram and Γ̂. The pack-versus-alone tests (tests/test_packs.py, tests/test_shared_batches.py) run the compiled
passes wherever they apply, so these tests also tie the torch form to the runs alone."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from test_packs import _runs

from raco_bench.constraints.builders import demographic_parity, equalized_odds, false_negative_rate
from raco_bench.methods.lagrangian import fused
from raco_bench.methods.lagrangian.engine import LagrangianEngine, pack_step, step_release
from raco_bench.packs.rows import GatheredRows, IndexedRows
from raco_bench.privacy import clip_noise


def _clip_reference(r: torch.Tensor, row_sq: torch.Tensor, clip: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Each record's gradient scaled to norm at most C, in float64, one record at a time."""
    out = torch.zeros_like(r, dtype=torch.float64)
    G, k, M = r.shape
    for g in range(G):
        for j in range(k):
            for i in range(M):
                norm = float(abs(r[g, j, i]) * row_sq[g, 0, i].sqrt())
                out[g, j, i] = float(r[g, j, i]) * min(1.0, float(clip[g, j, 0]) / norm if norm > 0 else 1.0) * float(mask[g, 0, i])
    return out


def test_compiled_clipping_scales_every_record_to_at_most_its_configuration_norm():
    gen = torch.Generator().manual_seed(3)
    G, k, M = 3, 4, 37
    r = torch.randn(1, G, k, M, generator=gen) * torch.logspace(-3, 2, M)
    r[0, 0, 0, :5] = 0.0  # zero gradients keep factor 1 (no 0/0)
    row_sq = 2 * (1 + torch.rand(G, 1, M, generator=gen) * 20)
    clip = torch.tensor([[0.5, 2.0, float("inf"), 1e-3]] * G).view(G, k, 1)  # inf: no clipping (SGDA, SGD)
    mask = (torch.rand(G, 1, M, generator=gen) > 0.2).float()
    want = _clip_reference(r[0], row_sq, clip, mask)
    torch_form, torch_sums = clip_noise.clip_rank_one(r.clone(), row_sq, clip, mask, compiled=False)
    got, sums = clip_noise.clip_rank_one(r.clone(), row_sq, clip, mask)
    for out, total in ((got, sums), (torch_form, torch_sums)):
        torch.testing.assert_close(out[0].double(), want, rtol=2e-6, atol=1e-12)
        torch.testing.assert_close(total[0].double(), want.sum(-1), rtol=1e-5, atol=1e-6)
    norms = got[0].abs() * row_sq.sqrt()
    assert bool((norms <= clip * (1 + 1e-6)).all())
    assert bool((got[0] * (1 - mask) == 0).all())  # padding slots contribute nothing


def test_the_torch_form_clips_gradients_of_several_rows_to_their_configuration_norm():
    """More classes (R_i of several rows) take the torch form on any device: each record's ‖R_i‖·‖[x_i; 1]‖ at most C."""
    gen = torch.Generator().manual_seed(8)
    j, G, k, M = 3, 2, 3, 23
    r = torch.randn(j, G, k, M, generator=gen) * torch.logspace(-2, 2, M)
    row_sq = 1 + torch.rand(G, 1, M, generator=gen) * 20
    clip = torch.tensor([[0.5, float("inf"), 1e-2]] * G).view(G, k, 1)
    mask = (torch.rand(G, 1, M, generator=gen) > 0.2).float()
    got, sums = clip_noise.clip_rank_one(r, row_sq, clip, mask)
    norm = (r.double().square().sum(0) * row_sq).sqrt()
    want = r.double() * torch.where(norm > clip, clip / norm, torch.ones_like(norm)) * mask
    torch.testing.assert_close(got.double(), want, rtol=2e-6, atol=1e-12)
    torch.testing.assert_close(sums.double(), want.sum(-1), rtol=1e-5, atol=1e-6)


def test_the_compiled_residual_is_the_lagrangian_gradient_of_eq_13():
    gen = torch.Generator().manual_seed(4)
    G, k, M, P = 2, 3, 29, 2
    p0 = torch.rand(G, k, M, generator=gen)
    y0 = (torch.rand(G, 1, M, generator=gen) > 0.5).float()
    part1 = (torch.rand(G, 1, M, generator=gen) > 0.4).float()
    coef = torch.randn(G * k, P, 2, generator=gen)
    tau = 0.5 + torch.rand(G, k, 1, generator=gen)
    gap = (coef[..., 0] - coef[..., 1]).view(G, k, P)
    row_gap = torch.where(part1.bool(), gap[..., 1:], gap[..., :1])  # the row's a₀ − a₁ by its part
    want = (p0 - y0 + p0 * (1 - p0) * row_gap) * tau
    torch.testing.assert_close(fused.two_class_residual(p0, y0, part1, coef.numpy(), tau), want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(fused.two_class_residual(p0, y0, part1, None, tau), (p0 - y0) * tau)  # no constraint term
    one_part = fused.two_class_residual(p0, y0, part1, coef[:, :1].contiguous().numpy(), tau)
    torch.testing.assert_close(one_part, (p0 - y0 + p0 * (1 - p0) * gap[..., :1]) * tau, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("parts", [2, 1])
def test_the_compiled_histogram_sums_each_part_and_adds_each_configuration_its_own_laplace_draws(parts):
    gen = torch.Generator().manual_seed(5)
    G, k, M, K = 2, 3, 41, 7
    p0 = torch.rand(G, k, M, generator=gen)
    p0[0, 1, :4] = 0.5  # ties of the hard update count as class 0, as argmax picks the first of tied classes
    part1 = (torch.rand(G, 1, M, generator=gen) > 0.5).float() if parts == 2 else torch.zeros(G, 1, M)
    mask = torch.ones(G, 1, M)
    mask[1, 0, -9:] = 0.0  # padding slots
    hard = np.array([False, True, False, False, False, False, True])
    laplace = torch.randn(K, 2 * parts, generator=gen, dtype=torch.float64)
    scale = torch.rand(K, generator=gen) * 3
    index = np.array([6, 0, 0, 3, 5, 1])  # a chunk's configurations in the pack (one repeated, as padding repeats it)
    soft = torch.where(torch.from_numpy(hard[index]).view(G, k, 1), (p0 >= 0.5).float(), p0)
    onehot = torch.cat([mask * (1 - part1), mask * part1], 1)[:, :parts] if parts == 2 else mask  # G × P × M
    class0 = torch.einsum("gkm,gpm->gkp", soft.double(), onehot.double()).reshape(G * k, parts)
    rows = onehot.double().sum(-1).repeat_interleave(k, 0)
    exact = torch.stack([class0, rows - class0], -1)
    want = exact + scale[index, None, None].double() * laplace[index].float().double().view(-1, parts, 2)
    got = fused.noisy_histogram(p0, part1, mask, hard, laplace.numpy(), scale.numpy(), index, parts)
    torch.testing.assert_close(torch.from_numpy(got).double(), want, rtol=1e-6, atol=1e-4)
    exact_got = fused.noisy_histogram(p0, part1, mask, hard, None, scale.numpy(), index, parts)
    torch.testing.assert_close(torch.from_numpy(exact_got).double(), exact, rtol=1e-6, atol=1e-4)


@pytest.mark.parametrize("problem", [demographic_parity(2, 2, 0.05), false_negative_rate(2, 0.3), equalized_odds(4, 3, 0.1)],
                         ids=["demographic-parity", "false-negative-rate", "equalized-odds-3-classes"])
@pytest.mark.parametrize("stacked", [True, False], ids=["a pack's K histograms", "one histogram"])
def test_compiled_dual_quantities_equal_the_torch_form(problem, stacked):
    gen = torch.Generator().manual_seed(6)
    rates = problem.compile(dtype=torch.float32)
    K, P, c, J = 9, rates.n_parts, rates.n_classes, rates.weights.shape[0]
    H = 40 * torch.rand(K, P, c, generator=gen) - 4  # noisy: may be < 0
    H[::3] = 2 * torch.rand(H[::3].shape, generator=gen) - 0.5  # subsets of about one row and below: n̂ floored at 1
    lam = torch.rand(K, J, generator=gen)
    scale = 100 + 1000 * torch.rand(K, generator=gen)
    MH = rates.membership @ H
    inv = MH.sum(-1, keepdim=True).clamp_min(1.0).reciprocal()
    want_est = (MH * inv).flatten(-2) @ rates.weights.T
    want_coef = rates.membership.T @ ((lam @ rates.weights).unflatten(-1, (-1, c)) * (inv * scale[:, None, None]))
    if not stacked:
        H, lam, scale, want_coef, want_est = H[2], lam[2], float(scale[2]), want_coef[2], want_est[2]
    coef, est = rates.dual_quantities(H, lam, scale)
    torch.testing.assert_close(coef, want_coef, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(est, want_est, rtol=1e-5, atol=1e-6)


SPECS = {
    "raco-dp": [
        ("raco-dp", dict(batch_size=512, noise_multiplier=2.0, laplace_scale=1.0, temperature=2.0, lr=0.5, dual_lr=2.0), 0.02, 30, 7),
        ("raco-dp", dict(batch_size=512, noise_multiplier=4.0, laplace_scale=3.0, dual_update="hard", dual_lr=3.0), 0.01, 30, 7),
        ("raco-dp", dict(batch_size=1024, noise_multiplier=1.0, laplace_scale=0.5, clip_norm=0.3, dual_lr=2.0), 0.02, 30, 8),
    ],
    "sgda": [("sgda", dict(batch_size=512, dual_lr=2.0), 0.01, 30, 7), ("sgda", dict(batch_size=640, dual_update="hard", dual_lr=2.0), 0.02, 30, 8)],
    "dp-sgd": [("dp-sgd", dict(batch_size=512, noise_multiplier=2.0, clip_norm=0.3), 0.05, 30, 7), ("dp-sgd", dict(batch_size=700), 0.05, 30, 8)],
}


@pytest.mark.parametrize("constraint", ["demographic-parity", "false-negative-rate"])
@pytest.mark.parametrize("draws", ["shared", "own"])
@pytest.mark.parametrize("products", [IndexedRows, GatheredRows], ids=["indexed", "gathered"])
@pytest.mark.parametrize("method", list(SPECS))
def test_a_step_with_compiled_passes_releases_what_the_torch_passes_release(adult, method, products, draws, constraint):
    """After 12 steps (multipliers away from zero), step 13's release from the compiled passes and from the torch passes:
    the same draws, so the same numbers up to float32 rounding."""
    engine = LagrangianEngine(_runs(adult, SPECS[method], constraint=constraint, draws=draws), products)
    assert engine.data.fused and (engine.data.few_parts or not engine.settings.constrained)  # the compiled passes apply
    torch_data = dataclasses.replace(engine.data, fused=False)
    state = engine.state
    for _ in range(12):
        state = pack_step(state, engine.data, engine.settings, engine.rates, products)
    compiled = step_release(state, engine.data, engine.settings, engine.rates, products)
    plain = step_release(state, torch_data, engine.settings, engine.rates, products)
    scale = float(plain.grad_w.abs().max())
    torch.testing.assert_close(compiled.grad_w, plain.grad_w, rtol=1e-4, atol=1e-5 * scale)
    torch.testing.assert_close(compiled.grad_b, plain.grad_b, rtol=1e-4, atol=1e-5 * scale)
    if engine.settings.constrained:
        assert bool((state.lam > 0).any())  # the constraint term is in the residual
        torch.testing.assert_close(compiled.histogram, plain.histogram, rtol=1e-5, atol=1e-3)
        torch.testing.assert_close(compiled.estimates, plain.estimates, rtol=1e-4, atol=1e-5)
    else:
        assert compiled.histogram is None and plain.histogram is None
