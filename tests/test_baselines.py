"""Baselines: DP-FERMI's ERMI algebra, gradients and noise; DP-SGD against Opacus."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from baselines.dp_fermi.ermi import (
    ermi,
    linear_coefficients,
    optimal_w,
    per_sample_w_gradients,
    project_frobenius,
    psi_mean,
    w_gradient_sum,
)
from baselines.dp_fermi.plugin import theorem_3_3_noise
from raco_bench.privacy.accounting import gaussian_epsilon
from raco_bench.privacy.counter_rng import Stream
from raco_bench.training.config import RunConfig
from raco_bench.training.loop import prepare_run, train


def _soft(n=400, c=2, G=3, seed=0):
    gen = torch.Generator().manual_seed(seed)
    s = torch.randint(0, G, (n,), generator=gen)
    logits = torch.randn(n, c, generator=gen, dtype=torch.float64) + 0.8 * s[:, None].double() * torch.arange(c, dtype=torch.float64)
    return torch.softmax(logits, 1), s


@pytest.mark.parametrize("c,G", [(2, 2), (2, 3), (4, 3)])
def test_min_max_objective_at_its_maximiser_equals_ermi(c, G):
    F, s = _soft(c=c, G=G)
    p_s = torch.bincount(s, minlength=G).double() / len(s)
    W_star = optimal_w(F, s, G)
    assert float(psi_mean(F, s, W_star, p_s)) == pytest.approx(float(ermi(F, s, G)), rel=1e-10)
    # and it is the maximum: gradient ascent from W = 0 reaches it, random perturbations only lower it
    W = torch.zeros(G, c, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.SGD([W], lr=0.5)
    for _ in range(3000):
        opt.zero_grad()
        (-psi_mean(F, s, W, p_s)).backward()
        opt.step()
    assert float(psi_mean(F, s, W.detach(), p_s)) == pytest.approx(float(ermi(F, s, G)), abs=1e-8)
    gen = torch.Generator().manual_seed(1)
    for _ in range(10):
        assert psi_mean(F, s, W_star + 0.05 * torch.randn(G, c, generator=gen, dtype=torch.float64), p_s) < psi_mean(F, s, W_star, p_s)


def test_ermi_is_zero_when_predictions_are_independent_of_the_group():
    F, _ = _soft(n=200, c=3, G=1)
    F_all = torch.cat([F, F, F])  # every group sees exactly the same predictions
    s = torch.repeat_interleave(torch.arange(3), 200)
    assert float(ermi(F_all, s, 3)) == pytest.approx(0.0, abs=1e-12)
    F2, s2 = _soft(c=3, G=3)
    assert float(ermi(F2, s2, 3)) > 1e-3


def test_binary_ermi_closed_form():
    F, s = _soft(n=1000, c=2, G=4, seed=3)
    p_s = torch.bincount(s, minlength=4).double() / len(s)
    a = torch.stack([F[s == r, 1].mean() for r in range(4)])
    a_bar = F[:, 1].mean()
    var = (p_s * (a - a_bar) ** 2).sum()
    assert float(ermi(F, s, 4)) == pytest.approx(float(var / (a_bar * (1 - a_bar))), rel=1e-10)


def test_linear_coefficients_and_w_gradients_match_autograd():
    n, c, G, n_ctx = 30, 3, 2, 3
    F, s = _soft(n=n, c=c, G=G, seed=4)
    gen = torch.Generator().manual_seed(5)
    ctx = torch.randint(0, n_ctx, (n,), generator=gen)
    inv_sqrt_p = 1 + torch.rand(n, generator=gen, dtype=torch.float64)
    W = torch.randn(n_ctx, G, c, generator=gen, dtype=torch.float64)
    a = linear_coefficients(W, ctx, s, inv_sqrt_p)
    grads = per_sample_w_gradients(W, F, ctx, s, inv_sqrt_p)
    for i in range(n):
        Wi = W.clone().requires_grad_(True)
        psi = (-(Wi[ctx[i]] ** 2) * F[i]).sum() + 2 * inv_sqrt_p[i] * (Wi[ctx[i], s[i]] * F[i]).sum() - 1
        (g,) = torch.autograd.grad(psi, Wi)
        torch.testing.assert_close(grads[i], g)
        assert float(psi) == pytest.approx(float((a[i] * F[i]).sum() - 1))
    norms = grads.flatten(1).norm(dim=1)
    for clip in (None, float(norms.median())):
        factor = torch.ones(n, dtype=torch.float64) if clip is None else (clip / norms).clamp(max=1)
        torch.testing.assert_close(w_gradient_sum(W, F, ctx, s, inv_sqrt_p, clip), torch.tensordot(factor, grads, dims=1))


def test_projection_onto_frobenius_ball():
    W = torch.tensor([[[3.0, 4.0]], [[0.3, 0.4]]])
    P = project_frobenius(W, 1.0)
    assert float(P[0].norm()) == pytest.approx(1.0) and torch.equal(P[1], W[1])


def test_theorem_3_3_noise_matches_the_spec_table():
    # DP-FERMI's published Adult setting: eps 1, batch 1024, n 33916, T 6800, rho 0.3245, delta 8.69e-10 -> 1.9495, 0.07798
    sigma_theta, sigma_w = theorem_3_3_noise(5.0, 5.0, 1 / 33916**2, 6800, 1.0, 33916, 0.3245)
    assert sigma_theta == pytest.approx(1.9495, rel=2e-3) and sigma_w == pytest.approx(0.07798, rel=2e-3)


@pytest.mark.slow
def test_raising_lambda_lowers_the_parity_gap_without_privacy(adult):
    gaps = []
    for lam in (0.0, 1.0, 2.0):
        cfg = RunConfig(method="dp-fermi", steps=1500, seed=0, params={"privacy": "none", "fairness": lam})
        result = train(cfg, adult)
        assert result.last["test"]["accuracy"] > 0.8  # a real trade-off, not a collapse to one class
        gaps.append(result.last["test"]["dp_gap"])
    assert gaps[0] > gaps[1] > gaps[2], gaps
    assert gaps[0] - gaps[2] > 0.05


def test_dp_fermi_full_mode_calibration_is_tight(adult):
    run = prepare_run(RunConfig(method="dp-fermi", epsilon=1.0, steps=300), adult)
    p = run.ctx.privacy
    sigma = p["noise_multiplier"]
    assert p["epsilon_spent"] <= 1.0
    assert gaussian_epsilon(0.99 * sigma / math.sqrt(2), p["sampling_rate"], 300, 1e-5) > 1.0  # 1% less noise overspends


def _labels(plan):
    return plan.data.labels_onehot(plan.data.table)


def _sq_norms(plan):
    return plan.data.sq_norms(plan.data.table)


@pytest.mark.parametrize("mode", ["full", "sensitive-attribute"])
def test_dp_fermi_noise_scales(adult, mode):
    """q = 1 on a small slice: recover the Gaussian noise of both blocks from the updates (σ·C_θ, σ·C_W)."""
    from dataclasses import replace

    small = replace(adult, train=replace(adult.train, X=adult.train.X[:200], y=adult.train.y[:200], group=adult.train.group[:200]))
    run = prepare_run(RunConfig(method="dp-fermi", epsilon=1.0, steps=5,
                                params={"batch_size": 200, "w_radius": 1e6, "privacy": mode, "clip_theta": 0.7, "clip_w": 1.3, "fairness": 0.8}), small)
    ctx, method = run.ctx, run.method
    h, e = ctx.hyper, ctx.plan
    m = float(h.batch_size)
    z_theta, z_w = [], []
    for seed in range(300):
        state = method.init_state(ctx, Stream(seed))
        new = method.step(ctx, state)
        F = torch.softmax(e.model.logits(state.params, e.data.X), 1)
        ip = state.inv_sqrt_p[e.ctx_ids, e.s]
        coef = h.fairness * linear_coefficients(state.W, e.ctx_ids, e.s, ip)
        from raco_bench.objective import lagrangian_residual

        g = e.model.clipped_grad_sum(state.params, e.data.X, lagrangian_residual(F, _labels(e), coef, 1.0), h.clip_theta, _sq_norms(e))
        for k in state.params:
            z_theta.append(((state.params[k] - new.params[k]) / h.lr * m - g[k]).reshape(-1))
        gw = w_gradient_sum(state.W, F, e.ctx_ids, e.s, ip, h.clip_w)
        z_w.append(((new.W - state.W) / (h.lr_w * h.fairness) * m - gw).reshape(-1))
    zt, zw = torch.cat(z_theta).double().numpy(), torch.cat(z_w).double().numpy()
    assert zt.std() == pytest.approx(e.sigma * h.clip_theta, rel=0.02)
    assert zw.std() == pytest.approx(e.sigma * h.clip_w, rel=0.05)
    assert stats.kstest(zt / zt.std(), "norm").pvalue > 1e-3


@pytest.mark.parametrize("mode", ["full", "sensitive-attribute"])
def test_dp_fermi_sensitivities_and_epsilon_recomputed(adult, mode):
    """Through the real gradient code: one record's (full) or one attribute's (sensitive-attribute) effect on
    the two released sums, scaled by their clip norms, stays within what the accountant assumes, on a
    trained (not initial) state; the reported ε equals an independent recomputation with dp-accounting's
    event API from those sensitivities."""
    from dataclasses import replace

    import dp_accounting

    from baselines.dp_fermi.plugin import cell_counts
    from raco_bench.models import Batch

    n = 400
    small = replace(adult, train=replace(adult.train, X=adult.train.X[:n], y=adult.train.y[:n], group=adult.train.group[:n]))
    run = prepare_run(RunConfig(method="dp-fermi", epsilon=1.0, steps=40, constraint="equalized-odds",
                                params={"batch_size": 100, "privacy": mode, "clip_theta": 0.5, "clip_w": 0.5, "fairness": 2.0}), small)
    ctx, method = run.ctx, run.method
    h, e = ctx.hyper, ctx.plan
    state = method.init_state(ctx, Stream(0))
    for _ in range(40):
        state = method.step(ctx, state)

    def scaled_sums(s_vec, rows):
        X, ctx_ids = e.data.X[rows], e.ctx_ids[rows]
        F = torch.softmax(e.model.logits(state.params, X), 1)
        ip = state.inv_sqrt_p[ctx_ids, s_vec[rows]]
        coef = h.fairness * linear_coefficients(state.W, ctx_ids, s_vec[rows], ip)
        table = e.data.table[rows]
        batch = Batch(X, e.data.y[rows], e.data.labels_onehot(table), e.data.sq_norms(table))
        g = method.theta_gradient_sum(ctx, state.params, batch, F, coef)
        gw = w_gradient_sum(state.W, F, ctx_ids, s_vec[rows], ip, h.clip_w)
        return torch.cat([torch.cat([v.reshape(-1) for v in g.values()]) / h.clip_theta, gw.reshape(-1) / h.clip_w])

    s = e.s
    batch = torch.arange(0, n, 3)
    worst = 0.0
    for i in batch[:60].tolist():
        if mode == "full":  # remove record i from the batch
            diff = scaled_sums(s, batch) - scaled_sums(s, batch[batch != i])
        else:  # flip record i's sensitive attribute
            flipped = s.clone()
            flipped[i] = 1 - flipped[i]
            diff = scaled_sums(s, batch) - scaled_sums(flipped, batch)
        worst = max(worst, float(diff.norm()))
    bound = math.sqrt(2.0) * (1.0 if mode == "full" else 2.0)  # two blocks of norm <= 1 each; a replace moves across the ball
    assert 0.5 * bound < worst <= bound * (1 + 1e-5)
    counts = cell_counts(small.train.y, small.train.group, 2, 2)
    flipped_counts = counts.copy()
    flipped_counts[1, 0] -= 1
    flipped_counts[1, 1] += 1
    count_sensitivity = float(np.linalg.norm(counts - flipped_counts)) if mode != "full" else 1.0
    assert ctx.privacy["neighbour_relation"] == ("add-remove" if mode == "full" else "replace")

    relation = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE if mode == "full" else dp_accounting.NeighboringRelation.REPLACE_ONE
    sigma, q, T = e.sigma, h.batch_size / n, ctx.steps
    # dp-accounting's REPLACE_ONE Gaussian (no sampling) doubles the unit sensitivity: express the count
    # release with sensitivity count_sensitivity as a noise multiplier per that unit
    unit = 2.0 if mode != "full" else 1.0
    accountant = dp_accounting.pld.PLDAccountant(relation, value_discretization_interval=1e-4)
    accountant.compose(dp_accounting.ComposedDpEvent([
        dp_accounting.GaussianDpEvent(h.count_noise * unit / count_sensitivity),
        dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma / math.sqrt(2))), T),
    ]))
    assert ctx.privacy["epsilon_spent"] == pytest.approx(accountant.get_epsilon(1e-5), rel=1e-3)
    assert ctx.privacy["epsilon_spent"] <= 1.0


def test_dp_sgd_update_follows_opacus_semantics(adult):
    """Same batch, no noise: our DP-SGD step equals Opacus' GradSampleModule + DPOptimizer (flat clipping,
    sum, divide by the expected batch size)."""
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer

    n = 300
    X = torch.as_tensor(adult.train.X[:n])
    y = torch.as_tensor(adult.train.y[:n])
    from dataclasses import replace

    small = replace(adult, train=replace(adult.train, X=adult.train.X[:n], y=adult.train.y[:n], group=adult.train.group[:n]))
    run = prepare_run(RunConfig(method="dp-sgd", epsilon=1e4, steps=1, params={"batch_size": n, "clip_norm": 0.3, "lr": 0.7}), small)
    ctx = run.ctx
    ctx.plan = replace(ctx.plan, settings=replace(ctx.plan.settings, noise_std=0.0))  # compare the deterministic part
    state = run.method.init_state(ctx, Stream(0))
    ours = run.method.step(ctx, state).params
    lin = torch.nn.Linear(X.shape[1], 2)
    with torch.no_grad():
        lin.weight.copy_(state.params["weight"])
        lin.bias.copy_(state.params["bias"])
    gsm = GradSampleModule(lin)
    opt = DPOptimizer(torch.optim.SGD(gsm.parameters(), lr=0.7), noise_multiplier=0.0, max_grad_norm=0.3, expected_batch_size=n)
    opt.zero_grad()
    torch.nn.functional.cross_entropy(gsm(X), y, reduction="sum").backward()
    opt.step()
    torch.testing.assert_close(ours["weight"], lin.weight.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ours["bias"], lin.bias.detach(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("q,sigma,T", [(0.0178, 1.0, 858), (0.0355, 4.0, 2000), (0.01, 0.8, 300)])
def test_dp_sgd_epsilon_agrees_with_opacus_accountant(q, sigma, T):
    from opacus.accountants import PRVAccountant, RDPAccountant

    ours = gaussian_epsilon(sigma, q, T, 1e-5)
    prv = PRVAccountant()
    prv.history = [(sigma, q, T)]
    rdp = RDPAccountant()
    rdp.history = [(sigma, q, T)]
    assert ours == pytest.approx(prv.get_epsilon(1e-5), rel=0.05)
    assert ours <= rdp.get_epsilon(1e-5)  # RDP is a looser bound


