"""Privacy checks of the RaCO-DP training step, written against any implementation of ``sgda_step``.

Each check raises AssertionError when the step's noise, clipping, sensitivity or normalisation is not
what the accountant assumes (docs/privacy.md, "How the step is tested"). tests/test_step_privacy.py
runs them on the real step, and on mutated copies of it, each with one planted privacy bug, where at
least one check must fail.

The checks observe only what a white-box auditor can: the state before and after the step, the
released histogram and the sampled batch (``StepRelease.batch``), and recompute the exact part of the
step with independent code (autograd per sample, explicit clipping, the unfused n̂ and coefficients).
"""

from __future__ import annotations

import math

import torch

from raco_bench.constraints import demographic_parity
from raco_bench.models import LogisticRegression
from raco_bench.objective import lagrangian_value, tempered_softmax
from raco_bench.privacy.counter_rng import Stream

# Tolerances: the Gaussian check estimates a standard deviation from 134,200 draws (standard error
# 1/sqrt(2N) = 0.19 %), the Laplace check a mean absolute value from 200,000 cells (|Lap| is
# exponential: standard error 1/sqrt(N) = 0.22 %). A 1 % tolerance is 4.5 to 5 standard errors; the
# seeds are fixed, so the checks are deterministic for a given torch random stream.
REL_TOL = 0.01


def toy_problem(n: int = 900, d: int = 60, groups: int = 3, seed: int = 0, problem=None):
    """A small data set with one small group (so n̂ matters) and feature norms around the clip, under ``problem`` (a
    :class:`~raco_bench.constraints.problem.RateProblem` on ``groups`` groups and two classes; default demographic parity)."""
    from raco_bench.data.tensors import TrainData

    gen = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=gen, dtype=torch.float64) * 0.4
    y = torch.randint(0, 2, (n,), generator=gen)
    group = torch.multinomial(torch.tensor([0.6, 0.35, 0.05][:groups] if groups == 3 else [1.0] * groups), n, True, generator=gen)
    problem = problem if problem is not None else demographic_parity(groups, 2, 0.02)
    parts = torch.as_tensor(problem.partition.assign(y.numpy(), group.numpy()))
    data = TrainData.build(X, y, 2, parts, problem.partition.n_parts)
    return data, problem.compile(dtype=torch.float64), problem


def settings(step_mod, n: int, *, q: float = 0.3, sigma: float = 0.8, clip: float = 1.0, laplace: float = 2.0, **kw):
    base = dict(sampling_rate=q, expected_batch=q * n, clip_norm=clip, noise_std=sigma * clip, laplace_scale=laplace,
                temperature=1.3, lr=1.0, dual_lr=0.1)
    base.update(kw)
    return step_mod.StepSettings(**base)


def state(step_mod, model, J: int, lam: float, seed: int):
    """Multipliers λ on every other constraint: demographic parity's constraints come in ± pairs, and equal
    multipliers on a pair cancel in the regulariser, which would leave nothing for the checks to see."""
    params = {k: v.double() * 3 for k, v in model.init(Stream(123)).items()}
    lam_vec = lam * (torch.arange(J) % 2 == 0).double()
    return step_mod.TrainState(params, lam_vec, torch.zeros(J, dtype=torch.float64), 0, Stream(seed))


def reference_coefficients(rates, H: torch.Tensor, lam: torch.Tensor, B: float) -> torch.Tensor:
    """coef[part, k] = B Σ_j λ_j Σ_{u∋part} w_j[u, k] / n̂_u with n̂_u = max(1, Σ_{l∈u} Σ_k Ĥ[l, k]) (eqs. 10, 12)."""
    sizes = (rates.membership @ H.sum(1)).clamp_min(1.0)
    per_subset = (lam @ rates.weights).reshape(-1, rates.n_classes) / sizes[:, None]
    return B * (rates.membership.T @ per_subset)


def reference_clipped_sum(model, params, X, y, coef, tau: float, clip: float) -> torch.Tensor:
    """Σ_i min(1, C/‖g_i‖) g_i with g_i = ∇_θ u_i by autograd, one sample at a time (flattened, parameter order)."""
    flat = []
    for i in range(X.shape[0]):
        p = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
        u = lagrangian_value(model.logits(p, X[i : i + 1])[0], y[i], coef[i], tau)
        grads = torch.autograd.grad(u, list(p.values()))
        g = torch.cat([t.reshape(-1) for t in grads])
        flat.append(g * min(1.0, clip / max(float(g.norm()), 1e-300)))
    n_params = sum(v.numel() for v in params.values())
    return torch.stack(flat).sum(0) if flat else torch.zeros(n_params, dtype=torch.float64)


def _flat(params: dict) -> torch.Tensor:
    return torch.cat([v.reshape(-1) for v in params.values()])


def check_gaussian_noise(step_mod, steps: int = 1100) -> None:
    """At q < 1 and λ ≠ 0: θ' = θ − (lr/B)(Σ clip(g_i, C) + N(0, σ²C²)) with the expected B; the recovered
    noise, divided by σC, has mean 0 and standard deviation 1 within 1 %."""
    data, rates, problem = toy_problem()
    model = LogisticRegression(data.X.shape[1], 2)
    s = settings(step_mod, data.n)
    zs = []
    for seed in range(steps):
        st = state(step_mod, model, problem.n_constraints, 4.0, seed)
        new, rel = step_mod.sgda_step(st, data, model, s, rates)
        idx = rel.batch
        coef = reference_coefficients(rates, rel.histogram, st.lam, s.expected_batch)
        part = data.parts_onehot(data.table[idx]).argmax(1)
        ref = reference_clipped_sum(model, st.params, data.X[idx], data.y[idx], coef[part], s.temperature, s.clip_norm) if seed < 40 else None
        if ref is None:  # the rank-1 form of the same sum is exact for logistic regression; the first 40 steps check it
            ref = _rank1_clipped_sum(model, st.params, data, idx, coef[part], s)
        z = (-(_flat(new.params) - _flat(st.params)) * s.expected_batch / s.lr - ref) / s.noise_std
        zs.append(z)
    z = torch.cat(zs)
    se = 1 / math.sqrt(z.numel())
    assert abs(float(z.mean())) < 5 * se, f"gradient noise has mean {float(z.mean()):.4f} (a bias in the clipped sum or its normalisation)"
    assert abs(float(z.std()) - 1) < REL_TOL, f"gradient noise std is {float(z.std()):.4f} x sigma*C (expected 1 within {REL_TOL})"


def _rank1_clipped_sum(model, params, data, idx, coef_rows, s) -> torch.Tensor:
    X = data.X[idx]
    z = model.logits(params, X).detach().requires_grad_(True)
    u = lagrangian_value(z, data.y[idx], coef_rows, s.temperature).sum()
    (r,) = torch.autograd.grad(u, z)  # ∂u_i/∂z_i per sample (samples are independent)
    norms = r.norm(dim=1) * torch.sqrt((X**2).sum(1) + 1)
    r = r * torch.clamp(s.clip_norm / norms.clamp_min(1e-300), max=1.0)[:, None]
    return torch.cat([(r.T @ X).reshape(-1), r.sum(0)])


def check_laplace_noise(step_mod, steps: int = 5000) -> None:
    """At q < 1 and λ ≠ 0: Ĥ − H(batch) is Laplace(0, s_L): E|noise| = s_L within 1 %, mean 0."""
    data, rates, problem = toy_problem(n=300, d=5, groups=20, seed=1)
    model = LogisticRegression(data.X.shape[1], 2)
    s = settings(step_mod, data.n, q=0.2, laplace=1.7)
    noise = []
    for seed in range(steps):
        st = state(step_mod, model, problem.n_constraints, 2.0, seed)
        _, rel = step_mod.sgda_step(st, data, model, s, rates)
        idx = rel.batch
        probs = tempered_softmax(model.logits(st.params, data.X[idx]), s.temperature)
        exact = data.parts_onehot(data.table[idx]).T @ probs
        noise.append((rel.histogram - exact).reshape(-1))
    e = torch.cat(noise)
    scale = float(e.abs().mean())
    assert abs(scale / s.laplace_scale - 1) < REL_TOL, f"histogram noise scale {scale:.4f} vs s_L = {s.laplace_scale}"
    assert abs(float(e.mean())) < 5 * math.sqrt(2) * s.laplace_scale / math.sqrt(e.numel())


def check_sensitivity(step_mod, trials: int = 40, problem=None) -> None:
    """D versus D ∪ {x} through the real step with the same draws and the released Ĥ held fixed (the
    Laplace draw absorbs x's histogram row): the released Ĥ and Γ̂ are identical and the parameters
    differ by at most (lr/B)·C, i.e. the clipped gradient sum has L2 sensitivity C given the release. ``problem``: the
    constraint (three groups, two classes; default demographic parity), e.g. a custom family's."""
    data, rates, problem = toy_problem(n=400, d=30, seed=2, problem=problem)
    model = LogisticRegression(data.X.shape[1], 2)
    s = settings(step_mod, data.n, q=0.25)
    # x: a large-norm row in the smallest group, so that an unclipped or misnormalised term shows
    small_group_rows = torch.nonzero(data.parts_onehot(data.table)[:, -1] > 0).flatten()
    x_row = int(small_group_rows[0])
    X2 = torch.cat([data.X, 4.0 * data.X[x_row : x_row + 1]])
    y2 = torch.cat([data.y, data.y[x_row : x_row + 1]])
    parts2 = torch.cat([data.parts_onehot(data.table).argmax(1), data.parts_onehot(data.table)[x_row : x_row + 1].argmax(1)])
    data2 = type(data).build(X2, y2, 2, parts2, data.n_parts)
    n_params = sum(v.numel() for v in model.init(Stream(0)).values())
    worst = 0.0
    for seed in range(trials):
        gen = torch.Generator().manual_seed(10_000 + seed)
        st = state(step_mod, model, problem.n_constraints, 6.0, seed)
        batch = torch.nonzero(torch.rand(data.n, generator=gen, dtype=torch.float64) < s.sampling_rate).flatten()
        z = torch.randn(n_params, generator=gen, dtype=torch.float64)
        e = torch.empty(2, data.n_parts, 2, dtype=torch.float64).exponential_(generator=gen)
        lap = e[0] - e[1]  # unit Laplace
        probs_x = tempered_softmax(model.logits(st.params, X2[-1:]), s.temperature)
        hx = data2.parts_onehot(data2.table[-1:]).T @ probs_x
        new1, rel1 = step_mod.sgda_step(st, data, model, s, rates, step_mod.StepDraws(batch, z, lap))
        st2 = state(step_mod, model, problem.n_constraints, 6.0, seed)
        draws2 = step_mod.StepDraws(torch.cat([batch, torch.tensor([data.n])]), z, lap - hx / s.laplace_scale)
        new2, rel2 = step_mod.sgda_step(st2, data2, model, s, rates, draws2)
        torch.testing.assert_close(rel1.histogram, rel2.histogram, rtol=0, atol=1e-9)
        torch.testing.assert_close(rel1.constraint_estimates, rel2.constraint_estimates, rtol=0, atol=1e-9)
        torch.testing.assert_close(new1.lam, new2.lam, rtol=0, atol=1e-12)
        change = (_flat(new2.params) - _flat(new1.params)) * s.expected_batch / s.lr
        worst = max(worst, float(change.norm()))
        assert float(change.norm()) <= s.clip_norm * (1 + 1e-6), (
            f"one record moved the clipped sum by {float(change.norm()):.4f} > C = {s.clip_norm} with the release held fixed")
        # exactly x's own clipped gradient, with coefficients from the (fixed) release: nothing else moved
        coef = reference_coefficients(rates, rel1.histogram, st.lam, s.expected_batch)
        part_x = data2.parts_onehot(data2.table[-1:]).argmax(1)
        own = reference_clipped_sum(model, st.params, X2[-1:], y2[-1:], coef[part_x], s.temperature, s.clip_norm)
        gap = float((change + own).norm())
        assert gap <= 1e-6 * max(1.0, float(own.norm())), (
            f"adding one record changed other records' contributions by {gap:.3g} with the release held fixed")
    assert worst > 0.5 * s.clip_norm  # x's own clipped gradient is there (the check can see a change)
