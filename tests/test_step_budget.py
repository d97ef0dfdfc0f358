"""The second parametrisation of the step budget (``--step-budget steps|either``): T searched, σ calibrated to spend ε.

The calibrated σ is the smallest that fits (a little less overspends), a configuration whose Laplace histogram alone
spends the budget is skipped with its reason, and a run trains exactly T steps with that σ, its privacy plan and its
privacy event agreeing with the budget."""

from __future__ import annotations

import dataclasses

import pytest

from raco_bench.data import load_dataset
from raco_bench.methods import get_method
from raco_bench.methods.base import Budget
from raco_bench.methods.space import sample_configs
from raco_bench.privacy.accounting import StepMechanism, epsilon
from raco_bench.privacy.calibration import NO_NOISE_SUFFICES, CalibrationCache, StepNoiseProblem
from raco_bench.sweeps import SweepSpec
from raco_bench.sweeps.plan import phase1_trials
from raco_bench.training.config import RunConfig
from raco_bench.training.loop import execute, prepare_run


def test_the_calibrated_noise_is_the_smallest_that_fits():
    mech = StepMechanism(sampling_rate=0.05, noise_multiplier=1.0, laplace_scale=8.0, histogram_batch="shared")
    problem = StepNoiseProblem(mech, steps=400, target_epsilon=1.0, delta=1e-5)
    sigma = problem.solve()
    spent = epsilon(dataclasses.replace(mech, noise_multiplier=sigma), 400, 1e-5)
    assert spent <= 1.0 and problem.within_budget(sigma)
    assert epsilon(dataclasses.replace(mech, noise_multiplier=sigma * 0.99), 400, 1e-5) > 1.0  # a little less noise overspends
    assert not problem.within_budget(sigma * 0.99)
    # more steps need more noise; the mechanism's own σ is ignored (it is what is calibrated)
    assert StepNoiseProblem(mech, 1600, 1.0, 1e-5).solve() > sigma
    assert problem.key() == StepNoiseProblem(dataclasses.replace(mech, noise_multiplier=7.0), 400, 1.0, 1e-5).key()
    # a Laplace histogram that alone spends the budget: no σ suffices, and the configuration is skipped with the reason
    loud = StepNoiseProblem(dataclasses.replace(mech, laplace_scale=0.5, sampling_rate=0.5), 5000, 0.5, 1e-5)
    assert loud.solve() == NO_NOISE_SUFFICES and loud.within_budget(NO_NOISE_SUFFICES)
    assert "Laplace histogram alone" in get_method("raco-dp").calibrated(loud, NO_NOISE_SUFFICES)["skip"]
    assert not problem.within_budget(NO_NOISE_SUFFICES)  # a tampered cache entry cannot skip a feasible configuration


@pytest.mark.parametrize("name", ["raco-dp", "dp-sgd"])
def test_a_run_trains_the_searched_steps_with_the_calibrated_noise(name):
    ds = load_dataset("synthetic")
    params = {"batch_size": 128, "step_budget": "steps", "train_steps": 150, "laplace_scale": 10.0}
    cfg = RunConfig(dataset="synthetic", method=name, epsilon=1.0, max_steps=5000, eval_every=50, params=params)
    run = prepare_run(cfg, ds)
    method, ctx = get_method(name), run.ctx
    assert ctx.steps == 150
    sigma = ctx.hyper.noise_multiplier
    hyper = method.hyperparameters(params if name == "raco-dp" else {k: v for k, v in params.items() if k != "laplace_scale"})
    problem = method.calibration(hyper, len(ds.train), Budget(1.0, cfg.delta, 5000))
    assert isinstance(problem, StepNoiseProblem) and sigma == CalibrationCache().solve(problem)
    assert ctx.plan.settings.noise_std == pytest.approx(sigma * ctx.hyper.clip_norm)
    assert 0.99 <= ctx.privacy["epsilon_spent"] <= 1.0  # the budget is spent, not a twentieth of it
    event_budget = Budget(1.0, cfg.delta, 5000, steps=150)
    from raco_bench.privacy import events

    spent = events.epsilon(method.privacy_event(hyper, len(ds.train), event_budget), cfg.delta)
    assert 0.99 <= spent <= 1.0 + 1e-9  # the event (audits, accounted views) uses the calibrated σ too
    with pytest.raises(ValueError, match="calibrates σ for T = 150"):  # 300 steps at σ for 150 overspend: no such run is trained
        method.privacy_event(hyper, len(ds.train), Budget(1.0, cfg.delta, 5000, steps=300))
    fewer = events.epsilon(method.privacy_event(hyper, len(ds.train), Budget(1.0, cfg.delta, 5000, steps=100)), cfg.delta)
    assert fewer < spent  # a run stopped early (a fixed --steps below train_steps) spends less, with the same σ
    assert execute(run).steps == 150
    with pytest.raises(ValueError, match="step_budget"):
        method.hyperparameters({"step_budget": "both"})


def test_sweeps_search_the_steps_only_where_the_method_takes_t_from_the_accountant():
    spec = SweepSpec(dataset="adult", epsilons=(1.0,), gammas=(0.05,), methods=("raco-dp", "dp-fermi", "sgda"), n_configs=20, phase1_seeds=1,
                     step_budget="either", max_steps=3000)
    trials = phase1_trials(spec, 28829)
    raco = [t["params"] for t in trials if t["method"] == "raco-dp" and t["config_id"] > 0]
    assert {p["step_budget"] for p in raco} == {"noise", "steps"} and all(50 <= p["train_steps"] <= 3000 for p in raco)
    assert all("step_budget" not in t["params"] for t in trials if t["method"] != "raco-dp")  # σ of dp-fermi is calibrated already
    steps_only = sample_configs(get_method("raco-dp"), 10, 28829, 0, "steps", 3000)[1:]
    assert all(p["step_budget"] == "steps" and "noise_multiplier" not in p for p in steps_only)
    assert sample_configs(get_method("raco-dp"), 10, 28829, 0) == sample_configs(get_method("raco-dp"), 10, 28829, 0, "noise", 3000)
    with pytest.raises(ValueError, match="step-budget noise"):
        SweepSpec(dataset="adult", tuning="accounted", checkpoint="private", step_budget="steps")


def test_no_searched_step_budget_overspends_capped_selected_or_swept():
    """T beyond the cap trains the cap with its own σ; a private checkpoint selection is inside the budget; the sweep's
    calibration (T and σ into the trial) is what the run trains; and a run whose plan would overspend is refused."""
    from raco_bench.methods.lagrangian import plugin
    from raco_bench.privacy.accounting import SelectionRelease
    from raco_bench.sweeps.calibration import apply_calibrated
    from raco_bench.sweeps.plan import make_trial
    from raco_bench.sweeps.trial import run_config

    ds = load_dataset("synthetic")
    params = {"batch_size": 128, "step_budget": "steps", "train_steps": 3000, "laplace_scale": 10.0}
    capped = prepare_run(RunConfig(dataset="synthetic", method="raco-dp", epsilon=1.0, max_steps=400, eval_every=100, params=params), ds)
    assert capped.ctx.steps == 400 and 0.99 <= capped.ctx.privacy["epsilon_spent"] <= 1.0
    selected = prepare_run(RunConfig(dataset="synthetic", method="raco-dp", epsilon=1.0, max_steps=400, eval_every=100, params=params,
                                     checkpoint="private"), ds)
    assert selected.ctx.hyper.noise_multiplier > capped.ctx.hyper.noise_multiplier  # the selection's releases cost budget
    assert 0.99 <= selected.ctx.privacy["epsilon_spent"] <= 1.0
    # the sweep's path: calibrate into the trial, then the trial's run
    spec = SweepSpec(dataset="synthetic", epsilons=(1.0,), gammas=(0.1,), methods=("raco-dp",), max_steps=400, step_budget="steps")
    trial = make_trial(spec, 1, "raco-dp", 1.0, 0.1, 1, params, 0)
    method = get_method("raco-dp")
    problem = method.calibration(method.hyperparameters(params), len(ds.train), Budget(1.0, spec.delta, 400))
    apply_calibrated(trial, method.calibrated(problem, CalibrationCache().solve(problem)))
    assert trial["steps"] == 400 and trial["calibrated"]["noise_multiplier"] == capped.ctx.hyper.noise_multiplier
    swept = prepare_run(run_config(trial, "cpu"), ds)
    assert swept.ctx.steps == 400 and swept.ctx.hyper.noise_multiplier == capped.ctx.hyper.noise_multiplier
    # a resolved σ that overspends (a calibration bug) is refused before anything trains
    original = plugin.LagrangianSGDA.resolved
    try:
        plugin.LagrangianSGDA.resolved = lambda self, h, n, b, cache=None: dataclasses.replace(original(self, h, n, b, cache),
                                                                                                 noise_multiplier=1.0)
        with pytest.raises(ValueError, match="spends epsilon"):
            prepare_run(RunConfig(dataset="synthetic", method="raco-dp", epsilon=1.0, max_steps=400, eval_every=100, params=params), ds)
    finally:
        plugin.LagrangianSGDA.resolved = original
    # and a solver that returns a σ below what fits is never stored or used
    loose = StepNoiseProblem(StepMechanism(0.05, 1.0, 8.0, "shared"), 300, 1.0, 1e-5, SelectionRelease(200.0, 3))
    assert 0 < loose.solve() < NO_NOISE_SUFFICES
    broken = type("Broken", (StepNoiseProblem,), {"solve": lambda self: 0.5 * StepNoiseProblem.solve(self)})
    cache = CalibrationCache(path=None)
    with pytest.raises(RuntimeError, match="does not meet its own budget"):
        cache.solve(broken(loose.mechanism, loose.steps, loose.target_epsilon, loose.delta, loose.selection))
    assert cache.lookup(loose.key()) is None
