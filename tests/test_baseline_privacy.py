"""Privacy checks of the seed papers' other methods (PF-LD, DP post-processing, budget tailoring), and a
mutation check: each planted privacy bug in a copy of a method's module must turn one of its checks red
(docs/privacy.md, "How the step is tested"; the same scheme as tests/test_step_privacy.py).

Each check receives the method's module (the real one, or a mutant), measures the noise its releases
carry against a scale recomputed here from the budget by independent formulas, bounds what one
neighbour changes against the sensitivity the module claims, and validates the accountant against
dp-accounting.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import sys
from pathlib import Path

import dp_accounting
import numpy as np
import pytest
import torch

from raco_bench.constraints import build_constraint
from raco_bench.data import load_dataset
from raco_bench.methods.base import Context
from raco_bench.privacy.calibration import CalibrationCache
from raco_bench.privacy.counter_rng import Stream
from raco_bench.training.config import RunConfig

sys.path.insert(0, str(Path(__file__).parent))
from mutants import first_catch, load_mutant  # noqa: E402

DELTA = 1e-5


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


_DATA = {}


def synthetic():
    if "synthetic" not in _DATA:
        _DATA["synthetic"] = load_dataset("synthetic")
    return _DATA["synthetic"]


def make_ctx(method, constraint: str = "demographic-parity", **run) -> Context:
    """A planned run of ``method`` (an instance from the module under test) on the synthetic data set."""
    ds = synthetic()
    cfg = RunConfig(dataset=ds.name, method=method.name, constraint=constraint, delta=DELTA, **run)
    problem = build_constraint(cfg.constraint, ds.n_groups, ds.n_classes, cfg.gamma)
    ctx = Context(dataset=ds, config=cfg, hyper=method.hyperparameters(cfg.params), problem=problem, rates=problem.compile("cpu"),
                  device=torch.device("cpu"), cache=CalibrationCache(path=None))
    method.prepare(ctx)
    return ctx


def flat(params: dict) -> torch.Tensor:
    return torch.cat([v.reshape(-1).double() for v in params.values()])


def assert_close(measured: float, expected: float, tol: float, what: str) -> None:
    assert abs(measured / expected - 1) <= tol, f"{what}: measured {measured:.5g}, expected {expected:.5g} (tolerance {tol:.0%})"


def gaussian_epsilon_dp_accounting(events: list, delta: float) -> float:
    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    for event, count in events:
        acc.compose(event, count)
    return acc.get_epsilon(delta)


# ------------------------------------------------------------------ PF-LD
PFLD_RUN = {"epsilon": 2.0, "steps": 200, "params": {"batch_size": 256, "lambda_max": 2.0, "clip_primal": 0.05, "count_noise": 10.0}}


def _pfld(mod):
    method = mod.PFLD()
    ctx = make_ctx(method, **PFLD_RUN)
    state = method.init_state(ctx, Stream(0))
    G = state.n_hat.numel()
    state.lam = torch.full((G,), ctx.hyper.lambda_max)
    state.sign = torch.tensor([1.0, -1.0] * (G // 2))
    return method, ctx, state


def _with_plan(ctx: Context, **changes) -> Context:
    return dataclasses.replace(ctx, plan=dataclasses.replace(ctx.plan, **changes))


def revealed_batch_epsilon(T: int, q: float, sigma_p: float, fixed_mu2: float, delta: float) -> float:
    """ε of T Poisson-sampled Gaussian releases with the batch revealed (a Binomial(T, q) mixture of Gaussian
    compositions) plus fixed Gaussian releases, written independently of raco_bench.privacy.batch_revealed."""
    from scipy.stats import binom, norm

    k = np.arange(T + 1)
    w = binom.pmf(k, T, q)
    mu = np.sqrt(k / sigma_p**2 + fixed_mu2)

    def dlt(eps: float) -> float:
        with np.errstate(divide="ignore", invalid="ignore"):
            d = norm.cdf(-eps / mu + mu / 2) - np.exp(eps) * norm.cdf(-eps / mu - mu / 2)
        return float(np.dot(w, np.where(mu > 0, d, 0.0)))

    lo, hi = 0.0, 50.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if dlt(mid) <= delta else (mid, hi)
    return hi


def check_pfld_accountant(mod):
    """The printed ε is the exact batch-revealed composition of every release the run makes (no amplification claimed)."""
    method, ctx, _ = _pfld(mod)
    h, plan = ctx.hyper, ctx.plan
    E = ctx.steps // plan.epoch
    reference = revealed_batch_epsilon(ctx.steps, h.batch_size / ctx.n_train, plan.sigma_primal,
                                       E / plan.sigma_dual**2 + 2 / h.count_noise**2, DELTA)
    assert abs(ctx.privacy["epsilon_spent"] - reference) <= 0.005 * reference, (ctx.privacy["epsilon_spent"], reference)
    assert ctx.privacy["epsilon_spent"] <= ctx.config.epsilon


def check_pfld_primal_noise(mod):
    """The primal release's noise std is σ_p · 2 λ_max C_p / min_i(q n̂_i), σ_p = σ √(T / (1 − dual_share))."""
    method, ctx, state = _pfld(mod)
    h = ctx.hyper
    clean = _with_plan(ctx, sigma_primal=0.0)
    diffs = []
    for t in range(150):
        st = dataclasses.replace(state, step=t)
        diffs.append((flat(method.step(ctx, st).params) - flat(method.step(clean, st).params)) / h.lr)
    sigma_p = ctx.plan.sigma * math.sqrt(ctx.plan.q * ctx.steps / (1 - h.dual_share))
    expected = sigma_p * 2 * h.lambda_max * h.clip_primal / float((ctx.plan.q * state.n_hat).clamp_min(1.0).min())
    assert_close(float(torch.cat(diffs).std()), expected, 0.05, "PF-LD primal noise std")


def check_pfld_dual_noise(mod):
    """The dual release's noise std is σ_d · √2 C_d / min_i n̂_i, σ_d = σ √(E / dual_share)."""
    method, ctx, state = _pfld(mod)
    h = ctx.hyper
    clean = _with_plan(ctx, sigma_dual=0.0)
    diffs = [method.dual_step(ctx, dataclasses.replace(state, step=t)).last_violation
             - method.dual_step(clean, dataclasses.replace(state, step=t)).last_violation for t in range(1, 601)]
    sigma_d = ctx.plan.sigma * math.sqrt((ctx.steps // ctx.plan.epoch) / h.dual_share)
    expected = sigma_d * math.sqrt(2) * h.clip_dual / float(state.n_hat.min())
    assert_close(float(torch.cat(diffs).std()), expected, 0.08, "PF-LD dual noise std")


def check_pfld_count_release(mod):
    """The normalisers are released: n̂ − n has std count_noise (where not floored)."""
    method, ctx, _ = _pfld(mod)
    diffs = torch.cat([method.init_state(ctx, Stream(seed)).n_hat - ctx.plan.counts for seed in range(400)])
    assert_close(float(diffs.std()), ctx.hyper.count_noise, 0.08, "PF-LD count noise std")


def check_pfld_sensitivity(mod):
    """Moving one sampled record to another group changes the (noiseless) update by at most Δ_p · η."""
    method, ctx, state = _pfld(mod)
    h, plan = ctx.hyper, ctx.plan
    clean = _with_plan(ctx, sigma_primal=0.0)
    worst = 0.0
    for t in range(5):
        idx = state.stream.batch(t + 1, ctx.n_train, plan.q)
        for j in idx[:8].tolist():
            cells = plan.cells.clone()
            cells[j] = cells[j] ^ 1  # the other group (demographic parity: two cells)
            st = dataclasses.replace(state, step=t)
            a = flat(method.step(clean, st).params)
            b = flat(method.step(_with_plan(clean, cells=cells), st).params)
            worst = max(worst, float((a - b).norm()) / h.lr)
    bound = mod.primal_sensitivity(h.lambda_max, h.clip_primal, (plan.q * state.n_hat).clamp_min(1.0))
    assert 0 < worst <= bound * (1 + 1e-5), f"one record's group moves the update by {worst:.4g} > the claimed sensitivity {bound:.4g}"


PFLD_CHECKS = (check_pfld_accountant, check_pfld_primal_noise, check_pfld_dual_noise, check_pfld_count_release, check_pfld_sensitivity)


# ------------------------------------------------------------------ DP post-processing
def _postprocess_noise(mod, privacy: str, epsilon: float, share: float) -> float:
    method = mod.DPPostprocess()
    ctx = make_ctx(method, epsilon=epsilon, steps=3, params={"privacy": privacy, "histogram_share": share, "batch_size": 256,
                                                             "noise_multiplier": 5.0})
    state = method.init_state(ctx, Stream(0))
    for _ in range(ctx.steps - 1):
        state = method.step(ctx, state)
    base = state.base
    with torch.no_grad():
        pred = ctx.plan.model.logits(base.params, ctx.plan.data.X).argmax(1)
    exact = mod.confusion_counts(ctx.plan.data.y, ctx.plan.group, pred, ctx.dataset.n_groups)
    noise = torch.cat([(method.postprocess(ctx, dataclasses.replace(base, step=t)).released - exact).reshape(-1) for t in range(400)])
    return float(noise.abs().mean())


def check_postprocess_laplace_full(mod):
    """Record-level mode: every histogram cell + Laplace(1 / (share · ε)) (L1 sensitivity 1)."""
    assert_close(_postprocess_noise(mod, "full", 1.0, 0.2), 1 / (0.2 * 1.0), 0.06, "histogram Laplace scale (full)")


def check_postprocess_laplace_group(mod):
    """Sensitive-attribute mode: Laplace(2 / ε) (one group flip moves one count between two cells)."""
    assert_close(_postprocess_noise(mod, "sensitive-attribute", 2.0, 0.2), 2 / 2.0, 0.06, "histogram Laplace scale (group)")


def check_postprocess_accountant(mod):
    """The printed ε is dp-accounting's composition of the T base steps and the one histogram release."""
    method = mod.DPPostprocess()
    ctx = make_ctx(method, epsilon=1.0, params={"batch_size": 256})
    h = ctx.hyper
    q = h.batch_size / ctx.n_train
    events = [(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(h.noise_multiplier)), ctx.steps),
              (dp_accounting.LaplaceDpEvent(1 / (h.histogram_share * ctx.config.epsilon)), 1)]
    reference = gaussian_epsilon_dp_accounting(events, DELTA)
    assert abs(ctx.privacy["epsilon_spent"] - reference) <= 0.01 * reference, (ctx.privacy["epsilon_spent"], reference)
    assert ctx.privacy["epsilon_spent"] <= ctx.config.epsilon
    spent = mod.postprocess_epsilon(None, 0, 2 / 0.7, 2.0, DELTA, relation="replace")  # sensitive-attribute: pure 0.7-DP
    assert abs(spent - 0.7) <= 0.01, spent


def check_postprocess_sensitivity(mod):
    """One record removed changes the exact histogram by 1 in L1; its group changed, by 2."""
    y = torch.tensor([0, 1, 1, 0, 1])
    group = torch.tensor([0, 1, 0, 1, 1])
    pred = torch.tensor([1, 1, 0, 0, 1])
    full = mod.confusion_counts(y, group, pred, 2)
    removed = mod.confusion_counts(y[1:], group[1:], pred[1:], 2)
    flipped = mod.confusion_counts(y, torch.tensor([1, 1, 0, 1, 1]), pred, 2)
    assert float((full - removed).abs().sum()) == 1.0 and float((full - flipped).abs().sum()) == 2.0


POSTPROCESS_CHECKS = (check_postprocess_laplace_full, check_postprocess_laplace_group, check_postprocess_accountant, check_postprocess_sensitivity)


# ------------------------------------------------------------------ budget tailoring
def rho_of(epsilon: float, delta: float) -> float:
    """ρ with ρ + 2√(ρ log 1/δ) = ε, by bisection (independent of the module's closed form)."""
    lo, hi = 0.0, epsilon
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mid + 2 * math.sqrt(mid * math.log(1 / delta)) <= epsilon else (lo, mid)
    return lo


def _tailoring(mod, **params):
    method = mod.BudgetTailoring()
    ctx = make_ctx(method, epsilon=1.0, steps=20, params={"grad_clip": 0.1, "loss_clip": 0.2, **params})
    return method, ctx, method.init_state(ctx, Stream(0))


def check_tailoring_stage2_noise(mod):
    """Group k's gradient and loss releases carry N(0, Δ²/(2ρ_k,t)) and N(0, L²/(2ρ_k,t)), ρ_k,t = μ w_k / (2T)."""
    method, ctx, state = _tailoring(mod)
    h = ctx.hyper
    rest = rho_of(1.0, DELTA) - 1 / (2 * h.count_noise**2)
    mu = (1 - h.stage1_share) * rest
    rho_kt = mu * state.weights / (2 * ctx.steps)
    exact_g, exact_l = method.group_sums(ctx, state.params)
    g_noise, l_noise = [], []
    for t in range(1, 301):
        g, loss = method.noisy_group_sums(ctx, state, t)
        g_noise.append((g - exact_g) / (h.grad_clip / torch.sqrt(2 * rho_kt))[:, None])
        l_noise.append((loss - exact_l) / (h.loss_clip / torch.sqrt(2 * rho_kt)))
    assert_close(float(torch.cat(g_noise, 1).std()), 1.0, 0.05, "gradient noise std / its zCDP scale")
    assert_close(float(torch.cat(l_noise).std()), 1.0, 0.1, "loss noise std / its zCDP scale")


def check_tailoring_stage1_noise(mod):
    """Analyze-Gauss: symmetric noise of std U²/√(2ρ) on the moment matrix."""
    gen = torch.Generator().manual_seed(0)
    Z = torch.randn(50, 4, generator=gen, dtype=torch.float64)
    U, rho = 2.0, 0.05
    clipped = mod.clip_rows(Z, U)
    draws = [mod.noisy_moments(Z, U, rho, lambda k: torch.randn(k, generator=gen, dtype=torch.float64)) - clipped.T @ clipped
             for _ in range(300)]
    noise = torch.stack(draws)
    assert torch.allclose(noise, noise.transpose(1, 2))
    upper = noise[:, torch.triu(torch.ones(4, 4, dtype=torch.bool))]
    assert_close(float(upper.std()), U**2 / math.sqrt(2 * rho), 0.06, "Analyze-Gauss noise std")


def check_tailoring_sensitivity(mod):
    """One record removed moves its group's gradient sum by ≤ Δ and its loss sum by ≤ L."""
    method, ctx, state = _tailoring(mod)
    h = ctx.hyper
    params = {k: v + 3.0 for k, v in state.params.items()}  # far from the optimum: gradients well above the clip
    g, loss = method.group_sums(ctx, params)
    worst_g = worst_l = 0.0
    for k, rows in enumerate(ctx.plan.rows):
        for drop in range(3):
            keep = torch.cat([rows[:drop], rows[drop + 1:]])
            fewer = _with_plan(ctx, rows=tuple(keep if i == k else r for i, r in enumerate(ctx.plan.rows)))
            g2, loss2 = method.group_sums(fewer, params)
            worst_g = max(worst_g, float((g - g2).norm()))
            worst_l = max(worst_l, float((loss - loss2).abs().max()))
    assert 0 < worst_g <= h.grad_clip * (1 + 1e-4), f"gradient sensitivity {worst_g} > Δ = {h.grad_clip}"
    assert 0 < worst_l <= h.loss_clip * (1 + 1e-4), f"loss sensitivity {worst_l} > L = {h.loss_clip}"


def check_tailoring_accountant(mod):
    """ε = ρ + 2√(ρ log 1/δ) upper-bounds dp-accounting's RDP ε of Gaussians of the same total ρ, and is close to it;
    the run's releases add up to its ρ and the printed ε is the budget."""
    for rho in (0.005, 0.02, 0.2, 1.5):
        acc = dp_accounting.rdp.RdpAccountant()
        acc.compose(dp_accounting.GaussianDpEvent(1 / math.sqrt(2 * rho)))
        reference = acc.get_epsilon(DELTA)
        ours = mod.epsilon_for(rho, DELTA)
        assert reference <= ours <= 1.3 * reference, (rho, ours, reference)
    method, ctx, state = _tailoring(mod)
    b = ctx.plan.budget
    assert abs(b.counts + b.stage1 + b.stage2 + b.selection - rho_of(1.0, DELTA)) <= 1e-6
    assert ctx.privacy["epsilon_spent"] <= 1.0 + 1e-9


TAILORING_CHECKS = (check_tailoring_stage2_noise, check_tailoring_stage1_noise, check_tailoring_sensitivity, check_tailoring_accountant)

MODULES = {"pf_ld": PFLD_CHECKS, "dp_postprocess": POSTPROCESS_CHECKS, "budget_tailoring": TAILORING_CHECKS}


@pytest.mark.parametrize("check", [(m, c) for m, cs in MODULES.items() for c in cs], ids=lambda mc: f"{mc[0]}-{mc[1].__name__}")
def test_real_method_passes(check):
    module, fn = check
    fn(importlib.import_module(f"baselines.{module}.plugin"))


# (module, name, [(old, new), ...]): each `old` must occur exactly once in the module
MUTATIONS = {
    "pf-ld: primal sensitivity without its factor 2": ("pf_ld", [("return 2.0 * lambda_max * clip /", "return 1.0 * lambda_max * clip /")]),
    "pf-ld: group gradients not clipped": ("pf_ld", [("h.clip_primal if private else None)", "None)")]),
    "pf-ld: dual noise at 0.8 scale": ("pf_ld", [("std = plan.sigma_dual * dual_sensitivity", "std = 0.8 * plan.sigma_dual * dual_sensitivity")]),
    "pf-ld: accountant told half the sampling rate": ("pf_ld", [
        ("sampling_rate=hyper.batch_size / n_train, unsampled", "sampling_rate=hyper.batch_size / n_train / 2, unsampled")]),
    "pf-ld: normalisers from the exact counts": ("pf_ld", [("stream, counts.clamp_min(1.0))", "stream, plan.counts.clamp_min(1.0))")]),
    "pf-ld: count release left out of the accountant": ("pf_ld", [("fixed_mu2=COUNT_SENSITIVITY**2 / hyper.count_noise**2", "fixed_mu2=0.0")]),
    "dp-postprocess: histogram without noise": ("dp_postprocess", [("return counts + scale * stream.laplace(", "return counts + 0 * stream.laplace(")]),
    "dp-postprocess: histogram scale from the whole epsilon": ("dp_postprocess", [("        return 1.0 / (hyper.histogram_share * epsilon)",
                                                                                              "        return 1.0 / epsilon")]),
    "dp-postprocess: sensitivity 1 for a group flip": ("dp_postprocess", [
        ("2.0 / (run.epsilon - selection_eps), 2.0", "1.0 / (run.epsilon - selection_eps), 2.0")]),
    "dp-postprocess: accountant drops the histogram": ("dp_postprocess", [("pld = pld.compose(step_pld(mech).self_compose(steps))",
                                                                         "pld = step_pld(mech).self_compose(steps)")]),
    "budget-tailoring: gradient noise at half std": ("budget_tailoring", [
        ("grad_sums + state.grad_std[:, None] *", "grad_sums + 0.5 * state.grad_std[:, None] *")]),
    "budget-tailoring: per-step budget not split over T": ("budget_tailoring", [
        ("rho_kt = rho_stage2 * weights / (2 * steps)", "rho_kt = rho_stage2 * weights / 2")]),
    "budget-tailoring: losses not clipped": ("budget_tailoring", [('reduction="none").clamp(0.0, h.loss_clip)', 'reduction="none").clamp(0.0, None)')]),
    "budget-tailoring: Analyze-Gauss sensitivity U, not U^2": ("budget_tailoring", [("gaussian_std(row_bound**2, rho)", "gaussian_std(row_bound, rho)")]),
    "budget-tailoring: zCDP conversion without its factor 2": ("budget_tailoring", [("return rho + 2 * math.sqrt(", "return rho + math.sqrt(")]),
}


def mutant(name: str):
    module, edits = MUTATIONS[name]
    real = importlib.import_module(f"baselines.{module}.plugin")
    return load_mutant(Path(real.__file__).read_text(), edits, name, "baselines_mutant_", f"{module}/plugin.py")


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_each_planted_privacy_bug_turns_a_check_red(name):
    mod = mutant(name)
    caught = first_catch(mod, MODULES[MUTATIONS[name][0]], guard="spends epsilon")  # the guard: planning refuses an overspending run
    print(f"{name}: caught by {caught}")
    assert caught, f"no privacy check caught the planted bug {name!r}"
