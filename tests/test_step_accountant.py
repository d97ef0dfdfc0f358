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
import sys
from pathlib import Path

import pytest
import torch
from torch.func import grad, vmap

from raco_bench.constraints import build_constraint
from raco_bench.data import load_dataset
from raco_bench.methods.base import Context
from raco_bench.objective import lagrangian_value, tempered_softmax
from raco_bench.privacy.accounting import StepMechanism, epsilon, plan_epsilon
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
TOL = {"sampling rate": 0.01, "noise multiplier": 0.02, "Laplace scale": 0.015, "count noise": 0.02}
LAGRANGIAN_RUN = {"constraint": "equalized-odds", "epsilon": 1000.0, "steps": STEPS,
                  "params": {"batch_size": 128, "noise_multiplier": 2.0, "laplace_scale": 3.0, "clip_norm": 0.5, "lr": 0.05, "dual_lr": 0.2}}
FERMI_RUN = {"constraint": "equalized-odds", "epsilon": 1000.0, "steps": 10, "params": {"noise_multiplier": 1.0, "count_noise": 20.0}}
FERMI_RELEASES = 4000  # count releases (4 cells each: standard error of the std 0.56 %)




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


def assert_close(measured: float, expected: float, what: str) -> None:
    assert abs(measured / expected - 1) <= TOL[what], f"{what}: measured {measured:.5g}, the accountant composed {expected:.5g}"


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


def observe_lagrangian(method, constrained: bool) -> dict[str, float]:
    """Train a real run; return the measured sampling rate, noise multiplier and Laplace scale, and the accounted ones."""
    ctx = planned(method, **LAGRANGIAN_RUN)
    mech = accounted_mechanism(ctx)
    h, data, model = ctx.hyper, ctx.plan.data, ctx.plan.model
    B, tau = float(h.batch_size), h.temperature
    rates = ctx.problem.compile(dtype=torch.float64)
    state = method.init_state(ctx, ctx.stream())
    drawn, gauss, lap = 0, [], []
    for t in range(ctx.steps):
        before = state
        state = method.step(ctx, state)
        rel = state.last_release
        idx = rel.batch
        drawn += len(idx)
        rows = data.table[idx]
        probs = tempered_softmax(model.logits(before.params, data.X[idx]), tau)
        coef = torch.zeros(len(idx), data.n_classes, dtype=torch.float64)
        if constrained:
            lap.append((rel.histogram.double() - data.parts_onehot(rows).T.double() @ probs.double()).reshape(-1))
            coef = data.parts_onehot(rows).double() @ reference_coefficients(rates, rel.histogram.double(), before.lam.double(), B)
        if t < GAUSSIAN_STEPS:
            delta = torch.cat([(state.params[k] - before.params[k]).reshape(-1).double() for k in before.params])
            noisy_sum = -delta * B / h.lr
            gauss.append(noisy_sum - clipped_sum(model, before.params, data.X[idx], data.y[idx], coef, tau, h.clip_norm))
    out = {"sampling rate": (drawn / (data.n * ctx.steps), mech.sampling_rate),
           "noise multiplier": (float(torch.cat(gauss).std()) / h.clip_norm, mech.noise_multiplier)}
    if constrained:
        out["Laplace scale"] = (float(torch.cat(lap).abs().mean()), mech.laplace_scale)
    return out


def check_lagrangian(module, cls: str = "RacoDP", constrained: bool = True) -> None:
    for what, (measured, expected) in observe_lagrangian(getattr(module, cls)(), constrained).items():
        assert_close(measured, expected, what)


def check_fermi_counts(module) -> None:
    """DP-FERMI's one release of the (context, group) counts: its noise against the count noise the accountant composed."""
    method = module.DPFermi()
    ctx = planned(method, **FERMI_RUN)
    h = ctx.hyper
    plan = method.privacy_plan(h, ctx.n_train, ctx.steps, ctx.config.selection)
    assert plan.count_noise == ctx.privacy["count_noise"]
    assert plan_epsilon(plan, ctx.privacy["noise_multiplier"], DELTA) == pytest.approx(ctx.privacy["epsilon_spent"], rel=1e-9)
    noise = torch.stack([method.init_state(ctx, Stream(i)).released_counts - ctx.plan.counts for i in range(FERMI_RELEASES)])
    assert_close(float(noise.double().std()), plan.count_noise, "count noise")


def test_raco_dp_step_matches_its_accountant():
    check_lagrangian(importlib.import_module("raco_bench.methods.lagrangian.plugin"))


def test_dp_sgd_step_matches_its_accountant():
    check_lagrangian(importlib.import_module("raco_bench.methods.lagrangian.plugin"), "DPSGD", constrained=False)


def test_dp_fermi_count_release_matches_its_accountant():
    check_fermi_counts(importlib.import_module("baselines.dp_fermi.plugin"))


CHECKS = {"raco_bench.methods.lagrangian.plugin": check_lagrangian, "baselines.dp_fermi.plugin": check_fermi_counts}


@pytest.mark.parametrize("name", list(SETTINGS_BUGS))
def test_each_planted_settings_bug_turns_a_check_red(name):
    bug = SETTINGS_BUGS[name]
    real = importlib.import_module(bug.module)
    module = load_mutant(Path(real.__file__).read_text(), list(bug.edits), name, "settings_mutant_", bug.module)
    caught = first_catch(module, [CHECKS[bug.module]])
    print(f"{name}: caught by {caught}")
    assert caught, f"no check caught the planted bug {name!r} ({bug.effect})"
