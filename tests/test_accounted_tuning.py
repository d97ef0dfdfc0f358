"""Accounted tuning (raco_bench/sweeps/accounted.py): K's distribution, the two orders Theorem 2 needs, and the claim
that matters: the model each private search releases spends at most the stated end-to-end ε, recomputed here from
every run the search trains. Planted bugs in the plan turn that check red. A real sweep end to end (slow)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np
import pytest
from mutants import first_catch, load_mutant

from raco_bench.methods import get_method
from raco_bench.methods.base import Budget
from raco_bench.privacy import events
from raco_bench.privacy.accounting import StepMechanism
from raco_bench.privacy.rdp import ORDERS, RdpCurve
from raco_bench.privacy.tuning import release_orders, repeat_and_select, tnb_mean, two_order_epsilon
from raco_bench.sweeps import accounted
from raco_bench.sweeps.plan import make_trial
from raco_bench.sweeps.spec import SweepSpec

ROOT = pathlib.Path(__file__).resolve().parents[1]
N_TRAIN = 28_829


@pytest.mark.parametrize("shape,mean", [(1.0, 10.0), (0.0, 5.0), (2.0, 3.0)])
def test_the_number_of_runs_follows_its_distribution(shape, mean):
    rng = np.random.default_rng(0)
    draws = np.array([accounted.sample_tnb(shape, mean, rng) for _ in range(20_000)])
    assert draws.min() >= 1
    assert draws.mean() == pytest.approx(mean, rel=0.04)
    from raco_bench.privacy.tuning import tnb_gamma

    assert tnb_mean(shape, tnb_gamma(shape, mean)) == pytest.approx(mean, rel=1e-6)


def test_two_orders_carry_the_whole_bound():
    curve = RdpCurve.of_run(StepMechanism(1024 / N_TRAIN, 4.0, 2.0), 300)
    for mean, shape in ((10.0, 1.0), (4.0, 0.0), (3.0, 2.0)):
        i, j, eps = release_orders(curve, mean, shape, 1e-5)
        assert eps == pytest.approx(repeat_and_select(curve, mean, shape).epsilon(1e-5), rel=1e-9)
        # a run below the curve at those two orders only is covered; one above at either is not
        assert two_order_epsilon(curve.orders, i, j, curve.values[i] * 0.9, curve.values[j], mean, shape, 1e-5) < eps
        assert two_order_epsilon(curve.orders, i, j, curve.values[i], curve.values[j] * 1.1, mean, shape, 1e-5) > eps


SPEC = SweepSpec(dataset="adult", epsilons=(1.0, 3.0), gammas=(0.05,), methods=("raco-dp", "dp-sgd"), tuning="accounted",
                 checkpoint="private", tuning_repeats=3, max_steps=5000)


def _plan(module, spec=SPEC):
    return module.accounted_trials(spec, N_TRAIN, lambda m, e, g, c, p, s: make_trial(spec, 1, m, e, g, c, p, s))


def run_curve(plugin, trial: dict, spec) -> np.ndarray:
    """A planned run's own RDP curve, from its method's events at the T and calibrated parameters the plan gave it."""
    hyper = plugin.hyperparameters({**trial["params"], **trial.get("calibrated", {})})
    return events.rdp(plugin.privacy_event(hyper, N_TRAIN, Budget(trial["epsilon"], spec.delta, spec.max_steps, trial.get("steps"), spec.selection)))


def check_every_release_within_its_claim(module, spec=SPEC) -> None:
    """From each trained run's own RDP curve (T steps and its selection's releases), the end-to-end ε of each search's
    release, through Theorem 2 at the plan's two orders, must not exceed the ε the plan states, nor the target."""
    trials, refs = _plan(module, spec)
    assert trials, "the plan has no runs"
    for (method, eps), ref in refs.items():
        runs = [t for t in trials if t["method"] == method and t["epsilon"] == eps and not t.get("skip")]
        assert runs and all(t["epsilon_end_to_end"] == ref.epsilon_end_to_end for t in runs)
        i, j = ref.orders
        worst = np.max([run_curve(get_method(method), t, spec) for t in runs], axis=0)
        e2e = two_order_epsilon(ORDERS, i, j, float(worst[i]), float(worst[j]), spec.tuning_mean, spec.tuning_shape, spec.delta)
        assert e2e <= ref.epsilon_end_to_end + 1e-9, f"{method} at {eps}: the runs spend {e2e:.4f} > the stated {ref.epsilon_end_to_end:.4f}"
        assert ref.epsilon_end_to_end <= eps, f"{method}: the stated end-to-end {ref.epsilon_end_to_end:.4f} exceeds the target {eps}"
        if ref.knob == "steps":
            assert max(t["steps"] for t in runs) > ref.value  # the runs are not all held to the reference's T


def test_every_release_spends_at_most_its_stated_end_to_end_epsilon():
    check_every_release_within_its_claim(accounted)
    trials, _ = _plan(accounted)
    assert {t["checkpoint"] for t in trials} == {"private"}  # each run releases its noisy validation scores inside its budget
    assert len({t["trial_key"] for t in trials}) == len(trials)


PLAN_BUGS = {
    "selection releases left out of a run's curve": [("    return Budget(epsilon, spec.delta, spec.max_steps, None, spec.selection)",
                                                      "    return Budget(epsilon, spec.delta, spec.max_steps, None, None)")],
    "only the order lambda checked": [("        return curve.values[i] <= ref.curve.values[i] and curve.values[j] <= ref.curve.values[j]",
                                       "        return curve.values[i] <= ref.curve.values[i]")],
    "reference calibrated for fewer runs than drawn": [("repeat_and_select(c, spec.tuning_mean, spec.tuning_shape)",
                                                        "repeat_and_select(c, 1.5, spec.tuning_shape)")],
    "reference without tuning": [("family.most_within(lambda c: repeat_and_select(c, spec.tuning_mean, spec.tuning_shape).epsilon(spec.delta) <= epsilon)",
                                  "family.most_within(lambda c: c.epsilon(spec.delta) <= epsilon)")],
}
OTHERS = SweepSpec(dataset="adult", epsilons=(3.0,), gammas=(0.05,), methods=("dp-fermi", "dp-postprocess", "budget-tailoring"), tuning="accounted",
                   checkpoint="private", tuning_repeats=1, tuning_mean=3.0, max_steps=1000)


def test_every_private_record_level_method_is_tuned_within_its_claim():
    """DP-FERMI (its knob: σ), DP post-processing (T) and budget tailoring (ρ): the same guarantee through their events."""
    check_every_release_within_its_claim(accounted, OTHERS)
    trials, refs = _plan(accounted, OTHERS)
    assert {ref.knob for ref in refs.values()} == {"noise_multiplier", "steps", "rho"}
    fermi = [t for t in trials if t["method"] == "dp-fermi" and not t.get("skip")]
    assert fermi and all(t["calibrated"]["noise_multiplier"] > 0 for t in fermi)


@pytest.mark.parametrize("bug", ["selection releases left out of a run's curve", "only the order lambda checked"])
def test_a_planted_bug_in_the_plan_is_caught_for_other_methods(bug):
    source = (ROOT / "raco_bench/sweeps/accounted.py").read_text()
    module = load_mutant(source, PLAN_BUGS[bug], bug, "accounted_mutant_", "raco_bench/sweeps/accounted.py")
    assert first_catch(module, [lambda m: check_every_release_within_its_claim(m, OTHERS)]), f"planted bug not caught: {bug}"


@pytest.mark.parametrize("bug", list(PLAN_BUGS))
def test_a_planted_bug_in_the_plan_is_caught(bug):
    source = (ROOT / "raco_bench/sweeps/accounted.py").read_text()
    module = load_mutant(source, PLAN_BUGS[bug], bug, "accounted_mutant_", "raco_bench/sweeps/accounted.py")
    caught = first_catch(module, [check_every_release_within_its_claim])
    assert caught, f"planted bug not caught: {bug}"


def test_a_private_search_selects_on_its_released_noisy_scores_only():
    """Where the exact validation (or test) ranking disagrees with the noisy one, a private method's release follows the noisy
    scores, which the runs released inside their budgets; a non-private method, which spends nothing, uses its exact scores."""
    spec = SweepSpec(dataset="adult", epsilons=(1.0,), gammas=(0.1,), methods=("raco-dp", "sgda"), tuning="accounted", checkpoint="private",
                     tuning_repeats=1)

    def run(method, eps, cid, noisy_acc, noisy_con, acc, test_acc):
        return {"trial_key": f"{method}{cid}", "method": method, "epsilon": eps, "gamma": 0.1, "repeat": 0, "config_id": cid,
                "noisy_val_accuracy": noisy_acc, "noisy_val_max_constraint": noisy_con, "val_accuracy": acc, "val_max_constraint": 0.05,
                "test_accuracy": test_acc, "epsilon_end_to_end": 0.99 if eps else None}

    results = [run("raco-dp", 1.0, 0, 0.80, 0.05, 0.85, 0.85), run("raco-dp", 1.0, 1, 0.82, 0.05, 0.70, 0.70),
               run("raco-dp", 1.0, 2, 0.90, 0.20, 0.90, 0.90),  # best noisy accuracy, but its noisy constraint misses γ
               run("sgda", None, 0, 0.90, 0.05, 0.75, 0.75), run("sgda", None, 1, 0.10, 0.05, 0.80, 0.80)]
    released = {r.method: r for r in accounted.select_released(spec, results)}
    assert released["raco-dp"].trial_key == "raco-dp1" and released["raco-dp"].epsilon_end_to_end == 0.99
    assert released["sgda"].trial_key == "sgda1"
    none = accounted.select_released(spec, [run("raco-dp", 1.0, 0, 0.8, 0.3, 0.8, 0.8)])
    assert [r.trial_key for r in none if r.method == "raco-dp"] == [None]


def test_bad_accounted_sweeps_are_refused_with_the_fix():
    with pytest.raises(ValueError, match="--checkpoint private"):
        SweepSpec(dataset="adult", tuning="accounted", checkpoint="last")
    with pytest.raises(ValueError, match="E\\[K\\]"):
        SweepSpec(dataset="adult", tuning="accounted", checkpoint="private", tuning_mean=1.0)
    spec = SweepSpec(dataset="adult", methods=("pf-ld",), tuning="accounted", checkpoint="private")
    with pytest.raises(ValueError, match="--tuning not-accounted"):
        _plan(accounted, spec)


def test_the_default_protocol_keeps_its_sweep_ids():
    """Adding accounted tuning must not change the id (and so the resumability) of a not-accounted sweep."""
    import hashlib
    import json
    from dataclasses import asdict

    from raco_bench.sweeps.spec import NEW_FIELDS

    spec = SweepSpec(dataset="adult")
    old = {k: v for k, v in asdict(spec).items() if not k.startswith("tuning") and k not in NEW_FIELDS}  # nor the search's fields
    assert spec.sweep_id == hashlib.sha256(json.dumps(old, sort_keys=True).encode()).hexdigest()[:12]
    assert SweepSpec(dataset="adult", tuning="accounted", checkpoint="private").sweep_id != SweepSpec(dataset="adult", checkpoint="private").sweep_id


@pytest.mark.slow
def test_an_accounted_sweep_releases_models_and_its_report_says_so(tmp_path):
    """A real sweep (local Ray, SQLite MLflow): each repetition releases one run, every run states the end-to-end ε, and the
    report draws the released models with a caption that says tuning is accounted."""
    import pandas as pd

    from raco_bench.report.build import build_report

    args = ["--methods", "raco-dp", "sgda", "--epsilons", "1", "--gammas", "0.1", "--tuning", "accounted", "--tuning-mean", "3",
            "--tuning-repeats", "2", "--max-steps", "300", "--yes"]
    proc = subprocess.run([sys.executable, str(ROOT / "sweeps" / "adult.py"), *args], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Released models of accounted tuning" in proc.stdout and "tuning included" in proc.stdout
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    report = build_report("adult-demographic-parity-accounted", uri, tmp_path / "report", log_to_mlflow=False)
    runs = pd.read_csv(tmp_path / "report" / "runs.csv")
    assert set(runs["tuning"]) == {"accounted"}
    private = runs[runs["method"] == "raco-dp"]
    assert (private["epsilon_end_to_end"] <= 1.0).all() and (private["checkpoint"] == "private").all()
    released = runs[runs["phase"] == 2]
    assert len(released[released["method"] == "raco-dp"]) <= 2 and (released["config_id"] == -1).all()
    # the runs trained for the T the plan gave them: their own RDP, from the logged T, fits the stated end-to-end ε
    import json

    spec = SweepSpec(dataset="adult", epsilons=(1.0,), gammas=(0.1,), methods=("raco-dp", "sgda"), tuning="accounted", checkpoint="private",
                     tuning_mean=3.0, tuning_repeats=2, max_steps=300)
    ref = accounted.reference(spec, "raco-dp", 1.0, N_TRAIN)
    plugin = get_method("raco-dp")
    trained = private[private["phase"] == 1]
    values = np.max([run_curve(plugin, {"params": json.loads(p), "steps": int(t), "epsilon": 1.0}, spec)
                     for p, t in zip(trained["params"], trained["steps"])], axis=0)
    i, j = ref.orders
    e2e = two_order_epsilon(ORDERS, i, j, float(values[i]), float(values[j]), spec.tuning_mean, spec.tuning_shape, spec.delta)
    assert e2e <= float(trained["epsilon_end_to_end"].max()) + 1e-9 <= 1.0 + 1e-9
    index = (tmp_path / "report" / "index.md").read_text()
    assert "Hyperparameter tuning IS privacy-accounted" in index and "not privacy-accounted" not in index
    assert any(p.name == "pareto.png" for p in report.files)
