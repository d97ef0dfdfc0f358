"""Accounted tuning (raco_bench/sweeps/accounted.py): the two profile points the bound (1) needs, and the claim that
matters: the model each private search releases spends at most the stated end-to-end ε, recomputed here from every
run the search trains (its own PLD, at its own T and calibrated noise). Planted bugs in the plan turn that check red.
A real sweep end to end (slow)."""

from __future__ import annotations

import functools
import pathlib
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
from mutants import first_catch, load_mutant

from raco_bench.methods import get_method
from raco_bench.methods.base import Budget
from raco_bench.privacy.accounting import SelectionRelease, StepMechanism, selection_pld, step_pld
from raco_bench.privacy.rounds import Rounds
from raco_bench.privacy.tuning_profile import ProfilePoints, best_points, hockey_stick, pld_profile, release_epsilon, run_pld
from raco_bench.sweeps import accounted
from raco_bench.sweeps.plan import make_trial
from raco_bench.sweeps.spec import SweepSpec

ROOT = pathlib.Path(__file__).resolve().parents[1]
N_TRAIN = 28_829


def test_two_profile_points_carry_the_whole_bound():
    pld = step_pld(StepMechanism(1024 / N_TRAIN, 4.0, 2.0)).self_compose(100).compose(selection_pld(SelectionRelease(50.0, 5)))
    for rounds in (Rounds("tnb", 10.0, 1.0), Rounds("tnb", 4.0, 0.0), Rounds("poisson", 3.0)):
        p, eps = best_points(pld_profile(pld), rounds, 1e-5)
        assert (p.delta_tilde, p.delta_hat) == tuple(hockey_stick(pld, [p.eps_tilde, p.eps_hat]))
        # a run below the reference at those two points only is covered; one above at either is not
        assert release_epsilon(rounds, ProfilePoints(p.eps_tilde, p.delta_tilde * 0.9, p.eps_hat, p.delta_hat), 1e-5) < eps
        assert release_epsilon(rounds, ProfilePoints(p.eps_tilde, p.delta_tilde, p.eps_hat, p.delta_hat * 1.1), 1e-5) > eps
        assert p.covers(p.delta_tilde, p.delta_hat) and not p.covers(p.delta_tilde, p.delta_hat * 1.01)


SPEC = SweepSpec(dataset="adult", epsilons=(1.0,), gammas=(0.05,), methods=("raco-dp", "dp-sgd"), tuning="accounted",
                 checkpoint="private", tuning_repeats=1, tuning_mean=4.0, tuning_shape=float("inf"), max_steps=5000)  # K ~ Poisson(4)


def _plan(module, spec=SPEC):
    if module is accounted:  # the correct plan, computed once per spec for every test that reads it
        return _correct_plan(spec)
    return module.accounted_trials(spec, N_TRAIN, lambda m, e, g, c, p, s: make_trial(spec, 1, m, e, g, c, p, s))


@functools.lru_cache(maxsize=4)
def _correct_plan(spec):
    return accounted.accounted_trials(spec, N_TRAIN, lambda m, e, g, c, p, s: make_trial(spec, 1, m, e, g, c, p, s))


def run_event(plugin, trial: dict, spec):
    """A planned run's own privacy event, from its method at the T and calibrated parameters the plan gave it."""
    hyper = plugin.hyperparameters({**trial["params"], **trial.get("calibrated", {})})
    return plugin.privacy_event(hyper, N_TRAIN, Budget(trial["epsilon"], spec.delta, spec.max_steps, trial.get("steps"), spec.selection))


def worst_release(plugin, runs: list[dict], spec, ref) -> float:
    """The bound (1) at the plan's two points, from the largest δ any of ``runs`` has there by its own PLD."""
    deltas = np.max([hockey_stick(run_pld(run_event(plugin, t, spec)), [ref.points.eps_tilde, ref.points.eps_hat]) for t in runs], axis=0)
    return release_epsilon(spec.rounds, ProfilePoints(ref.points.eps_tilde, float(deltas[0]), ref.points.eps_hat, float(deltas[1])), spec.delta)


def check_every_release_within_its_claim(module, spec=SPEC) -> None:
    """From each trained run's own PLD (T steps and its selection's releases), the end-to-end ε of each search's release,
    through (1) at the plan's two profile points, must not exceed the ε the plan states, nor the target."""
    trials, refs = _plan(module, spec)
    assert trials, "the plan has no runs"
    for (method, eps), ref in refs.items():
        runs = [t for t in trials if t["method"] == method and t["epsilon"] == eps and not t.get("skip")]
        assert runs, f"{method} at {eps}: no run to check (every search drew K = 0 or every run was skipped)"
        assert all(t["epsilon_end_to_end"] == ref.epsilon_end_to_end for t in runs)
        e2e = worst_release(get_method(method), runs, spec, ref)
        assert e2e <= ref.epsilon_end_to_end + 1e-9, f"{method} at {eps}: the runs spend {e2e:.4f} > the stated {ref.epsilon_end_to_end:.4f}"
        assert ref.epsilon_end_to_end <= eps, f"{method}: the stated end-to-end {ref.epsilon_end_to_end:.4f} exceeds the target {eps}"
        assert ref.epsilon_rdp > ref.epsilon_end_to_end and all(t["epsilon_end_to_end_rdp"] == ref.epsilon_rdp for t in runs)
        if ref.knob == "steps" and ref.value < spec.max_steps:
            assert any(t["steps"] != ref.value for t in runs)  # the runs are not all held to the reference's T


def test_every_release_spends_at_most_its_stated_end_to_end_epsilon():
    check_every_release_within_its_claim(accounted)
    trials, _ = _plan(accounted)
    assert {t["checkpoint"] for t in trials} == {"private"}  # each run releases its noisy validation scores inside its budget
    assert len({t["trial_key"] for t in trials}) == len(trials)


PLAN_BUGS = {
    "selection releases left out of a run's event": [("    return Budget(epsilon, spec.delta, spec.max_steps, None, spec.selection)",
                                                      "    return Budget(epsilon, spec.delta, spec.max_steps, None, None)")],
    "only the point eps_tilde checked": [("family.most_within(lambda event: covered(event, ref.points))",
                                          "family.most_within(lambda event: covered(event, replace(ref.points, delta_hat=1.0)))")],
    "reference calibrated for fewer runs than drawn": [("    rounds = spec.rounds\n    try:", "    rounds = replace(spec.rounds, mean=1.5)\n    try:")],
    "reference without tuning": [("family.most_within(lambda event: search_epsilon(event, rounds, spec.delta)[0] <= epsilon)",
                                  "family.most_within(lambda event: events.epsilon(event, spec.delta) <= epsilon)")],
}
OTHERS = SweepSpec(dataset="adult", epsilons=(3.0,), gammas=(0.05,), methods=("dp-fermi", "dp-postprocess", "budget-tailoring"), tuning="accounted",
                   checkpoint="private", tuning_repeats=1, tuning_mean=1.5, max_steps=1000)
# the planted bug's faster plan: the knobs T and ρ. (The one-point bug sits in the same method-free code, caught above on RaCO-DP and
# DP-SGD, whose drawn runs have profiles of other shapes than the reference's; DP-FERMI's noise knob shows it too, in a minute.)
BUG_SPECS = {"selection releases left out of a run's event": replace(OTHERS, epsilons=(1.0,), methods=("dp-postprocess", "budget-tailoring"))}


def test_every_private_record_level_method_is_tuned_within_its_claim():
    """DP-FERMI (its knob: σ), DP post-processing (T) and budget tailoring (ρ): the same guarantee through their events."""
    trials, refs = _plan(accounted, OTHERS)
    check_every_release_within_its_claim(accounted, OTHERS)
    assert {ref.knob for ref in refs.values()} == {"noise_multiplier", "steps", "rho"}
    fermi = [t for t in trials if t["method"] == "dp-fermi" and not t.get("skip")]
    assert fermi and all(t["calibrated"]["noise_multiplier"] > 0 for t in fermi)


@pytest.mark.parametrize("bug", list(BUG_SPECS))
def test_a_planted_bug_in_the_plan_is_caught_for_other_methods(bug):
    source = (ROOT / "raco_bench/sweeps/accounted.py").read_text()
    module = load_mutant(source, PLAN_BUGS[bug], bug, "accounted_mutant_", "raco_bench/sweeps/accounted.py")
    assert first_catch(module, [lambda m: check_every_release_within_its_claim(m, BUG_SPECS[bug])]), f"planted bug not caught: {bug}"


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
    # the runs trained for the T the plan gave them: their own PLDs, from the logged T, fit the stated end-to-end ε
    import json

    spec = SweepSpec(dataset="adult", epsilons=(1.0,), gammas=(0.1,), methods=("raco-dp", "sgda"), tuning="accounted", checkpoint="private",
                     tuning_mean=3.0, tuning_repeats=2, max_steps=300)
    ref = accounted.reference(spec, "raco-dp", 1.0, N_TRAIN)
    trained = private[private["phase"] == 1]
    runs = [{"params": json.loads(p), "steps": int(t), "epsilon": 1.0} for p, t in zip(trained["params"], trained["steps"])]
    e2e = worst_release(get_method("raco-dp"), runs, spec, ref)
    assert e2e <= float(trained["epsilon_end_to_end"].max()) + 1e-9 <= 1.0 + 1e-9
    index = (tmp_path / "report" / "index.md").read_text()
    assert "Hyperparameter tuning IS privacy-accounted" in index and "not privacy-accounted" not in index
    assert any(p.name == "pareto.png" for p in report.files)
