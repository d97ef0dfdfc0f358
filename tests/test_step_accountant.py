"""Each private method's step, trained as a real run plans it, against what its accountant composed.

The checks in tests/privacy_checks.py build their own step settings, and the white-box audit reads the noise
scale from the run's settings: neither sees a bug in the place where a method's plan becomes its step
settings. Here a run is planned by the method itself (``prepare``), trained by its own ``step``, and the noise
it actually added is recovered from what it recorded (the released histogram Ĥ, the sampled batch, the
parameters before and after each step, DP-FERMI's count release). The measured sampling rate, Gaussian noise
multiplier, Laplace scale and count noise must match the mechanism in the run's privacy plan, and the plan's ε
must be exactly what the accountant gives for that mechanism and T. Each bug of tests/planted_bugs.py
(``SETTINGS_BUGS``) must turn a check red (docs/privacy.md, "How the step is tested").
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import sys
from pathlib import Path

import pytest
import torch
from torch.func import grad, vmap

from raco_bench.constraints import build_constraint
from raco_bench.data import load_dataset
from raco_bench.methods.base import Context
from raco_bench.objective import lagrangian_value, tempered_softmax
from raco_bench.privacy.accounting import GaussianPlan, StepMechanism, epsilon, plan_epsilon
from raco_bench.privacy.calibration import CalibrationCache
from raco_bench.privacy.counter_rng import Stream
from raco_bench.training.config import RunConfig, stream_id

sys.path.insert(0, str(Path(__file__).parent))
from mutants import first_catch, load_mutant  # noqa: E402
from planted_bugs import SETTINGS_BUGS  # noqa: E402
from privacy_checks import reference_coefficients  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]  # a few thousand real steps per check, on real data

DELTA = 1e-5
STEPS = 2000  # ACS with equalized odds: 36 histogram cells and 32 parameters a step
GAUSSIAN_STEPS = STEPS  # steps whose Gaussian noise is recovered (64,000 draws: standard error of the std about 0.3 %)
# 2 % for σ: across 18 streams the recovered σ of 1,000 steps spread with sd 0.57 % (largest deviation 1.4 %); the planted
# 0.96 σ is 4 % off. 1.5 % for s_L (72,000 draws, sd 0.37 %; planted 3 %); 1 % for q (sd 0.2 %; planted 5 %).
TOL = {"sampling rate": 0.01, "noise multiplier": 0.02, "Laplace scale": 0.015, "count noise": 0.02, "stage-2 rho": 0.03,
       "loss noise over gradient noise": 0.03}
LAGRANGIAN_RUN = {"constraint": "equalized-odds", "epsilon": 1000.0, "steps": STEPS,
                  "params": {"batch_size": 128, "noise_multiplier": 2.0, "laplace_scale": 3.0, "clip_norm": 0.5, "lr": 0.05, "dual_lr": 0.2}}
FERMI_RUN = {"constraint": "equalized-odds", "epsilon": 1000.0, "steps": 10, "params": {"noise_multiplier": 1.0, "count_noise": 20.0}}
FERMI_RELEASES = 4000  # count releases (4 cells each: standard error of the std 0.56 %)
FERMI_STEPS = 800  # DP-FERMI steps in each notion (32 θ and 36 W draws each: standard errors of the stds 0.45 % and 0.42 %; q's 0.3 %)
PFLD_RUN = {"constraint": "demographic-parity", "epsilon": 1000.0, "steps": 400,
            "params": {"batch_size": 32, "noise_multiplier": 1.0, "lambda_max": 1.0, "clip_primal": 1.0, "count_noise": 2.0}}
PFLD_STREAMS = 12  # runs whose first epoch (99 steps of 32 primal draws, λ = 0) is observed: 38,000 draws (0.36 %), q over 38,000 rows (0.5 %)
PFLD_DUAL_RELEASES = 3000  # dual releases (9 cells each: standard error of the std 0.43 %)
PFLD_COUNT_RELEASES = 3000  # count releases (5 cells far from the floor: 0.58 %)
POSTPROCESS_RUN = {"constraint": "demographic-parity", "epsilon": 20.0, "steps": 800,
                   "params": {"batch_size": 128, "noise_multiplier": 2.0, "clip_norm": 0.5, "lr": 0.05}}
POSTPROCESS_RELEASES = 1500  # confusion histograms (36 cells each: standard error of the mean |noise| 0.43 %; one LP each)
TAILORING_RUN = {"constraint": "demographic-parity", "epsilon": 50.0, "steps": 300, "params": {"count_noise": 2.0}}
TAILORING_RELEASES = 1000  # stage-2 releases observed (32 gradient draws per group each: 0.4 %; one loss draw per group: pooled 0.75 %)
TAILORING_COUNT_RELEASES = 3000  # count releases (5 groups far from the floor: 0.58 %)




_DATA: dict = {}


def dataset():
    if "acs" not in _DATA:
        _DATA["acs"] = load_dataset("acs-employment")
    return _DATA["acs"]


def planned(method, constraint: str, **run) -> Context:
    """A run of ``method`` planned by the method itself, as ``prepare_run`` does (reproducible draws, so the check is
    deterministic)."""
    ds = dataset()
    cfg = RunConfig(dataset=ds.name, method=method.name, constraint=constraint, delta=DELTA, randomness="reproducible", **run)
    hyper = method.hyperparameters(cfg.params)
    problem = build_constraint(cfg.constraint, ds.n_groups, ds.n_classes, cfg.gamma)
    ctx = Context(dataset=ds, config=cfg, hyper=hyper, problem=problem, rates=problem.compile("cpu"), device=torch.device("cpu"),
                  cache=CalibrationCache(path=None), stream_id=stream_id(cfg, dataclasses.asdict(hyper)))
    method.prepare(ctx)
    return ctx


def assert_close(measured: float, expected: float, what: str, label: str | None = None) -> None:
    assert abs(measured / expected - 1) <= TOL[what], f"{label or what}: measured {measured:.5g}, the accountant composed {expected:.5g}"


def accounted_mechanism(ctx: Context) -> StepMechanism:
    """The mechanism the run's privacy plan states, checked to be the one its ε was composed from."""
    p = ctx.privacy
    mech = StepMechanism(sampling_rate=p["sampling_rate"], noise_multiplier=p["noise_multiplier"], laplace_scale=p.get("laplace_scale"),
                         histogram_batch=p.get("histogram_batch", "shared"))
    assert epsilon(mech, ctx.steps, ctx.config.delta, ctx.config.selection) == pytest.approx(p["epsilon_spent"], rel=1e-9)
    return mech


def clipped_sum(model, params: dict, X, y, coef, tau: float, clip: float) -> torch.Tensor:
    """Σ_i min(1, C/‖g_i‖) g_i with per-sample gradients of u_i by autograd (flattened, parameter order)."""
    def u(p, x, label, c):
        return lagrangian_value(model.logits(p, x[None])[0], label, c, tau)

    params = {k: v.detach().double() for k, v in params.items()}
    g = vmap(grad(u), in_dims=(None, 0, 0, 0))(params, X.double(), y, coef.double())
    flat = torch.cat([g[k].reshape(X.shape[0], -1) for k in params], 1)
    return (flat * (clip / flat.norm(dim=1).clamp_min(1e-300)).clamp(max=1.0)[:, None]).sum(0)


def observe_lagrangian(method, constrained: bool) -> dict[str, tuple[float, float]]:
    """Train a real run; return the measured sampling rate, noise multiplier and Laplace scale, and the accounted ones."""
    ctx = planned(method, **LAGRANGIAN_RUN)
    mech = accounted_mechanism(ctx)
    measured = observe_base_steps(method, ctx, lambda state: state, constrained)
    accounted = {"sampling rate": mech.sampling_rate, "noise multiplier": mech.noise_multiplier, "Laplace scale": mech.laplace_scale}
    return {what: (value, accounted[what]) for what, value in measured.items()}


def observe_base_steps(method, ctx: Context, base, constrained: bool = False) -> dict[str, float]:
    """Train the planned run ``ctx`` with the method's own step (``base(state)``: its Lagrangian-family state, whose
    ``last_release`` holds the sampled batch and the released Ĥ); the measured sampling rate, Gaussian noise multiplier
    and (``constrained``) Laplace scale. The exact part is recomputed here: the clipped sum by autograd per sample, the
    histogram of the drawn batch."""
    h, data, model = ctx.hyper, ctx.plan.data, ctx.plan.model
    B, tau = float(h.batch_size), ctx.plan.settings.temperature
    rates = ctx.problem.compile(dtype=torch.float64)
    state = method.init_state(ctx, ctx.stream())
    drawn, gauss, lap = 0, [], []
    for t in range(ctx.steps):
        before = base(state)
        state = method.step(ctx, state)
        rel = base(state).last_release
        idx = rel.batch
        drawn += len(idx)
        rows = data.table[idx]
        probs = tempered_softmax(model.logits(before.params, data.X[idx]), tau)
        coef = torch.zeros(len(idx), data.n_classes, dtype=torch.float64)
        if constrained:
            lap.append((rel.histogram.double() - data.parts_onehot(rows).T.double() @ probs.double()).reshape(-1))
            coef = data.parts_onehot(rows).double() @ reference_coefficients(rates, rel.histogram.double(), before.lam.double(), B)
        if t < GAUSSIAN_STEPS:
            after = base(state).params
            delta = torch.cat([(after[k] - before.params[k]).reshape(-1).double() for k in before.params])
            noisy_sum = -delta * B / h.lr
            gauss.append(noisy_sum - clipped_sum(model, before.params, data.X[idx], data.y[idx], coef, tau, h.clip_norm))
    out = {"sampling rate": drawn / (data.n * ctx.steps), "noise multiplier": float(torch.cat(gauss).std()) / h.clip_norm}
    if constrained:
        out["Laplace scale"] = float(torch.cat(lap).abs().mean())
    return out


def check_lagrangian(module, cls: str = "RacoDP", constrained: bool = True) -> None:
    for what, (measured, expected) in observe_lagrangian(getattr(module, cls)(), constrained).items():
        assert_close(measured, expected, what)


def fermi_run(mode: str) -> dict:
    """A DP-FERMI run whose step noise can be recovered: W never projected (the ball is huge), λ > 0 so that W moves."""
    return {"constraint": "equalized-odds", "epsilon": 1000.0, "steps": FERMI_STEPS,
            "params": {"privacy": mode, "batch_size": 128, "noise_multiplier": 1.5, "count_noise": 20.0, "fairness": 2.0, "w_radius": 1e6,
                       "clip_theta": 0.5, "clip_w": 0.7, "lr": 0.05, "lr_w": 0.05}}


def accounted_fermi_plan(module, ctx: Context):
    """The Gaussian plan the run's privacy record states (sampling rate, T, blocks, count noise and sensitivity, neighbour
    relation), checked to be the one its ε was composed from."""
    p = ctx.privacy
    plan = GaussianPlan(sampling_rate=p["sampling_rate"], steps=ctx.steps, blocks=module.BLOCKS, count_noise=p["count_noise"],
                        count_sensitivity=p["count_sensitivity"], relation=p["neighbour_relation"], selection=ctx.config.selection)
    assert plan_epsilon(plan, p["noise_multiplier"], DELTA) == pytest.approx(p["epsilon_spent"], rel=1e-9)
    return plan


def clip_rows(g: torch.Tensor, clip: float) -> torch.Tensor:
    """Σ_i min(1, C/‖g_i‖) g_i of per-sample gradients g (B × …)."""
    flat = g.flatten(1).double()
    return (flat * (clip / flat.norm(dim=1).clamp_min(1e-300)).clamp(max=1.0)[:, None]).sum(0)


def observe_fermi(module, mode: str) -> dict[str, tuple[float, float]]:
    """Train a real DP-FERMI run; (measured, accounted) sampling rate and noise multiplier of the θ and W blocks. The exact
    clipped sums are recomputed here: θ's by autograd per sample of ℓ_i + λψ̂_i, W's from the materialised ∇_W ψ̂_i."""
    from baselines.dp_fermi.ermi import linear_coefficients, per_sample_w_gradients

    method = module.DPFermi()
    ctx = planned(method, **fermi_run(mode))
    plan, sigma = accounted_fermi_plan(module, ctx), ctx.privacy["noise_multiplier"]
    h, e = ctx.hyper, ctx.plan
    m = float(h.batch_size)
    state = method.init_state(ctx, ctx.stream())
    drawn, z_theta, z_w = 0, [], []
    for _ in range(ctx.steps):
        before = state
        state = method.step(ctx, state)
        idx = state.batch
        drawn += len(idx)
        X, cb, sb = e.data.X[idx], e.ctx_ids[idx], e.s[idx]
        ip = before.inv_sqrt_p[cb, sb]
        coef = h.fairness * linear_coefficients(before.W, cb, sb, ip)
        g_theta = clipped_sum(e.model, before.params, X, e.data.y[idx], coef, 1.0, h.clip_theta)
        z_theta.append(-torch.cat([(state.params[k] - before.params[k]).reshape(-1).double() for k in before.params]) * m / h.lr - g_theta)
        F = torch.softmax(e.model.logits(before.params, X), 1).double()
        g_w = clip_rows(per_sample_w_gradients(before.W.double(), F, cb, sb, ip.double()), h.clip_w)
        z_w.append((state.W - before.W).reshape(-1).double() * m / (h.lr_w * h.fairness) - g_w)
    return {"sampling rate": (drawn / (ctx.n_train * ctx.steps), plan.sampling_rate),
            "noise multiplier": (float(torch.cat(z_theta).std()) / h.clip_theta, sigma),
            "noise multiplier (W block)": (float(torch.cat(z_w).std()) / h.clip_w, sigma)}


def check_fermi(module) -> None:
    """DP-FERMI in both privacy notions: its step's sampling rate and the noise of both blocks, and its count release,
    against the plan its ε was composed from."""
    for mode in ("full", "sensitive-attribute"):
        for what, (measured, expected) in observe_fermi(module, mode).items():
            assert_close(measured, expected, what.split(" (")[0], f"dp-fermi privacy={mode}: {what}")
        check_fermi_counts(module, mode)


def check_fermi_counts(module, mode: str = "full") -> None:
    """DP-FERMI's one release of the (context, group) counts: its noise against the count noise the accountant composed."""
    method = module.DPFermi()
    ctx = planned(method, **{**FERMI_RUN, "params": {**FERMI_RUN["params"], "privacy": mode}})
    plan = accounted_fermi_plan(module, ctx)
    noise = torch.stack([method.init_state(ctx, Stream(i)).released_counts - ctx.plan.counts for i in range(FERMI_RELEASES)])
    assert_close(float(noise.double().std()), plan.count_noise, "count noise", f"dp-fermi privacy={mode}: count noise")


# ---------------------------------------------------------------- PF-LD


def accounted_pfld(module, ctx: Context):
    """PF-LD's accountant as the run's privacy record states it (sampling rate, T, dual releases, count noise), checked to
    give the ε the run reports and the multipliers it records."""
    p, h = ctx.privacy, ctx.hyper
    acc = module.RevealedBatchNoise(steps=ctx.steps, sampling_rate=p["sampling_rate"], unsampled=ctx.steps // p["dual_every"],
                                    unsampled_share=h.dual_share, fixed_mu2=module.COUNT_SENSITIVITY**2 / p["count_noise"]**2,
                                    target_epsilon=ctx.config.epsilon, delta=DELTA)
    assert acc.spent(p["noise_multiplier"]) + module.selection_epsilon(ctx.config.selection) == pytest.approx(p["epsilon_spent"], rel=1e-9)
    assert acc.multipliers(p["noise_multiplier"]) == pytest.approx((p["noise_multiplier_primal"], p["noise_multiplier_dual"]), rel=1e-12)
    return acc


def observe_pfld(module):
    """Train real PF-LD runs. Until its first dual release every λ is 0, so a primal step's private part is its noise alone:
    (new θ − θ)/η + ∇ CE/B, the public gradient recomputed here by autograd. The dual releases' noise is the released
    violation minus the exact one (recomputed here from the released normalisers); the count noise is n̂ − n on cells far
    from the floor. Each is scaled by the sensitivity the module claims, read from the released n̂ and the accounted q.
    Yields (what, measured, accounted) as each is measured, so that a check stops at the first that differs."""
    method = module.PFLD()
    ctx = planned(method, **PFLD_RUN)
    acc = accounted_pfld(module, ctx)
    sigma_p, sigma_d = acc.multipliers(ctx.privacy["noise_multiplier"])
    h, e = ctx.hyper, ctx.plan
    drawn, steps, primal = 0, 0, []
    for stream in range(PFLD_STREAMS):
        state = method.init_state(ctx, Stream(stream))
        delta_p = 2.0 * h.lambda_max * h.clip_primal / float((acc.sampling_rate * state.n_hat).clamp_min(1.0).min())
        for _ in range(ctx.plan.epoch - 1):  # λ = 0 until the first dual release
            before = state
            state = method.step(ctx, state)
            idx = state.batch
            drawn, steps = drawn + len(idx), steps + 1
            params = {k: v.detach().double().requires_grad_(True) for k, v in before.params.items()}
            ce = torch.nn.functional.cross_entropy(e.model.logits(params, e.data.X[idx].double()), e.data.y[idx], reduction="sum") / h.batch_size
            public = torch.autograd.grad(ce, list(params.values()))
            primal.append(torch.cat([((state.params[k].double() - before.params[k].double()) / h.lr + g).reshape(-1)
                                     for k, g in zip(before.params, public)]) / delta_p)
    yield "sampling rate", drawn / (ctx.n_train * steps), acc.sampling_rate
    yield "noise multiplier", float(torch.cat(primal).std()), sigma_p
    dual = []
    for stream in range(PFLD_DUAL_RELEASES):
        state = method.init_state(ctx, Stream(stream))
        released = method.dual_step(ctx, dataclasses.replace(state, step=e.epoch)).last_violation
        with torch.no_grad():
            score = torch.softmax(e.model.logits(state.params, e.data.X), 1)[:, 1].double().clamp(max=h.clip_dual)
        cells = torch.bincount(e.cells, weights=score, minlength=len(state.n_hat)) / state.n_hat.double()
        pops = torch.bincount(e.row_population, weights=score, minlength=2) / torch.bincount(e.row_population, minlength=2).double()
        dual.append((released.double() - (pops[e.populations] - cells)) * float(state.n_hat.min()) / (math.sqrt(2.0) * h.clip_dual))
    far = e.counts > 10 * h.count_noise  # cells the floor at 1 never reaches
    yield "noise multiplier (dual releases)", float(torch.cat(dual).std()), sigma_d
    counts = torch.stack([method.init_state(ctx, Stream(i)).n_hat[far] - e.counts[far] for i in range(PFLD_COUNT_RELEASES)])
    yield "count noise", float(counts.double().std()), module.PFLD.accounted_count_noise(acc)


def check_pfld(module) -> None:
    for what, measured, expected in observe_pfld(module):
        assert_close(measured, expected, what.split(" (")[0], f"pf-ld: {what}")


# ---------------------------------------------------------------- DP post-processing


def accounted_postprocess(module, ctx: Context):
    """DP post-processing's base mechanism and histogram scale as the run's privacy record states them, checked to give
    the ε it reports (one PLD of the base steps, the histogram and the selection)."""
    p = ctx.privacy
    mech = StepMechanism(p["sampling_rate"], p["noise_multiplier"]) if "noise_multiplier" in p else None  # none: a public base model
    spent = module.postprocess_epsilon(mech, ctx.steps, p["histogram_laplace_scale"], p["histogram_sensitivity"], DELTA,
                                       module.DPPostprocess.selection(ctx.config.selection), p["neighbour_relation"])
    assert spent == pytest.approx(p["epsilon_spent"], rel=1e-9)
    return mech, p["histogram_laplace_scale"]


def check_postprocess(module) -> None:
    """Its DP-SGD base steps (sampling rate, noise multiplier, measured as DP-SGD's are; record-level mode) and, in both
    notions, its confusion histogram's Laplace scale (the release minus the exact counts of the base model's predictions,
    recomputed here), against what its accountant composed."""
    method = module.DPPostprocess()
    for mode in ("full", "sensitive-attribute"):
        ctx = planned(method, **{**POSTPROCESS_RUN, "params": {**POSTPROCESS_RUN["params"], "privacy": mode}})
        mech, scale = accounted_postprocess(module, ctx)
        if mode == "full":
            base_steps = observe_base_steps(method, ctx, lambda state: state.base)
            assert_close(base_steps["sampling rate"], mech.sampling_rate, "sampling rate", "dp-postprocess: base steps' sampling rate")
            assert_close(base_steps["noise multiplier"], mech.noise_multiplier, "noise multiplier", "dp-postprocess: base steps' noise multiplier")
        e, G = ctx.plan, ctx.dataset.n_groups
        base = method.init_state(ctx, ctx.stream()).base
        with torch.no_grad():
            pred = e.model.logits(base.params, e.data.X).argmax(1)
        exact = torch.bincount((e.data.y * G + e.group) * 2 + pred, minlength=4 * G).double()
        noise = torch.stack([method.postprocess(ctx, dataclasses.replace(base, stream=Stream(i), step=ctx.steps)).released.reshape(-1) - exact
                             for i in range(POSTPROCESS_RELEASES)])
        assert_close(float(noise.abs().mean()), scale, "Laplace scale", f"dp-postprocess privacy={mode}: the confusion histogram's Laplace scale")


# ---------------------------------------------------------------- budget tailoring


def check_tailoring(module) -> None:
    """Budget tailoring's releases against its zCDP budget: the count noise against ρ_counts = 1/(2·std²), and the noise
    of every stage-2 release (each group's clipped gradient and loss sums, recovered as the noisy sums minus the exact
    ones recomputed here), as the ρ it spends over the run's T steps, Σ_t Σ_k Δ²/(2·std²), against ρ_stage2. The record's
    ρ parts must add up to its ρ, whose conversion is the ε it reports."""
    method = module.BudgetTailoring()
    ctx = planned(method, **TAILORING_RUN)
    p, h, e = ctx.privacy, ctx.hyper, ctx.plan
    assert p["rho"] == pytest.approx(p["rho_counts"] + p["rho_stage1"] + p["rho_stage2"] + e.budget.selection, rel=1e-12)
    assert module.epsilon_for(p["rho"], DELTA) == pytest.approx(p["epsilon_spent"], rel=1e-12)
    G = ctx.dataset.n_groups
    group = e.group
    exact_counts = torch.bincount(group, minlength=G).double()
    far = exact_counts > 10 * h.count_noise
    counts = torch.stack([method.init_state(ctx, Stream(i)).n_hat[far] - exact_counts[far] for i in range(TAILORING_COUNT_RELEASES)])
    state = method.init_state(ctx, ctx.stream())
    params = {n: v.detach().double() for n, v in state.params.items()}

    def loss(prm, x, label):
        return torch.nn.functional.cross_entropy(e.model.logits(prm, x[None].double()), label[None])

    grads, losses = [], []
    for k in range(G):  # the exact sums of the state's parameters, by autograd per row
        rows = torch.nonzero(group == k)[:, 0]
        if len(rows) == 0:  # an empty group releases noise alone
            grads.append(torch.zeros(sum(v.numel() for v in params.values()), dtype=torch.float64))
            losses.append(torch.zeros((), dtype=torch.float64))
            continue
        g = vmap(grad(loss), in_dims=(None, 0, 0))(params, e.X[rows], e.y[rows])
        grads.append(clip_rows(torch.cat([g[n].reshape(len(rows), -1) for n in params], 1), h.grad_clip))
        with torch.no_grad():
            losses.append(torch.nn.functional.cross_entropy(e.model.logits(params, e.X[rows].double()), e.y[rows], reduction="none")
                          .clamp(0.0, h.loss_clip).sum())
    grads, losses = torch.stack(grads), torch.stack(losses)
    releases = [method.noisy_group_sums(ctx, state, t) for t in range(1, TAILORING_RELEASES + 1)]  # the step's releases, at step t
    grad_std = torch.stack([g - grads for g, _ in releases]).transpose(0, 1).reshape(G, -1).std(1)  # per group, over releases and coordinates
    loss_z = torch.stack([(noisy - losses) / grad_std for _, noisy in releases])  # loss noise in units of the group's gradient noise
    rho_stage2 = ctx.steps * float((h.grad_clip**2 / (2 * grad_std**2)).sum() * 2)  # two releases per group and step, one ρ_k,t each
    measured = {"count noise": (float(counts.double().std()), 1.0 / math.sqrt(2 * p["rho_counts"])),
                "stage-2 rho": (rho_stage2, p["rho_stage2"]),
                "loss noise over gradient noise": (float(loss_z.std()), h.loss_clip / h.grad_clip)}
    for what, (value, expected) in measured.items():
        assert_close(value, expected, what, f"budget-tailoring: {what}")


def test_raco_dp_step_matches_its_accountant():
    check_lagrangian(importlib.import_module("raco_bench.methods.lagrangian.plugin"))


def test_dp_sgd_step_matches_its_accountant():
    check_lagrangian(importlib.import_module("raco_bench.methods.lagrangian.plugin"), "DPSGD", constrained=False)


def test_dp_fermi_step_and_count_release_match_its_accountant():
    check_fermi(importlib.import_module("baselines.dp_fermi.plugin"))


def test_pf_ld_releases_match_its_accountant():
    check_pfld(importlib.import_module("baselines.pf_ld.plugin"))


def test_dp_postprocess_releases_match_its_accountant():
    check_postprocess(importlib.import_module("baselines.dp_postprocess.plugin"))


def test_budget_tailoring_releases_match_its_zcdp_budget():
    check_tailoring(importlib.import_module("baselines.budget_tailoring.plugin"))


CHECKS = {"raco_bench.methods.lagrangian.plugin": check_lagrangian, "baselines.dp_fermi.plugin": check_fermi,
          "baselines.pf_ld.plugin": check_pfld, "baselines.dp_postprocess.plugin": check_postprocess,
          "baselines.budget_tailoring.plugin": check_tailoring}


@pytest.mark.parametrize("name", list(SETTINGS_BUGS))
def test_each_planted_settings_bug_turns_a_check_red(name):
    bug = SETTINGS_BUGS[name]
    real = importlib.import_module(bug.module)
    module = load_mutant(Path(real.__file__).read_text(), list(bug.edits), name, "settings_mutant_", bug.module)
    caught = first_catch(module, [CHECKS[bug.module]])
    print(f"{name}: caught by {caught}")
    assert caught, f"no check caught the planted bug {name!r} ({bug.effect})"
