"""Accounted tuning (raco_bench/sweeps/accounted.py): the two profile points the bound (1) needs, and the claim that
matters: the model each private search releases spends at most the stated end-to-end ε, recomputed here from every
run the search trains (its own PLD, at its own T and calibrated noise). Planted bugs in the plan turn that check red.
A real sweep end to end (slow)."""

from __future__ import annotations

import functools
import json
import pathlib
import subprocess
import sys
from dataclasses import asdict, replace

import numpy as np
import pytest
from mutants import first_catch, load_mutant

from raco_bench.methods import get_method
from raco_bench.methods.base import Budget
from raco_bench.privacy.accounting import SelectionRelease, StepMechanism, selection_pld, step_pld
from raco_bench.privacy.counter_rng import REPRODUCIBLE, Keystream
from raco_bench.privacy.rounds import Rounds
from raco_bench.privacy.tuning_profile import ProfilePoints, best_points, hockey_stick, pld_profile, release_epsilon, run_pld
from raco_bench.sweeps import accounted
from raco_bench.sweeps.plan import make_trial
from raco_bench.sweeps.spec import SweepSpec

ROOT = pathlib.Path(__file__).resolve().parents[1]
N_TRAIN = 28_829
KEY = Keystream(bytes(range(32)))  # a fixed secret key: the plans the tests read are the same in every session


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


def _plan(module, spec=SPEC, source=KEY):
    if module is accounted:  # the correct plan, computed once per spec for every test that reads it
        return _correct_plan(spec, source)
    return module.accounted_trials(spec, N_TRAIN, lambda m, e, g, c, p, s: make_trial(spec, 1, m, e, g, c, p, s), source)


@functools.lru_cache(maxsize=6)
def _correct_plan(spec, source):
    return accounted.accounted_trials(spec, N_TRAIN, lambda m, e, g, c, p, s: make_trial(spec, 1, m, e, g, c, p, s), source)


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
# the planted bug's faster plan: DP post-processing's knob T, three searches (a run its profile points bind, which the bug pushes
# past the claim; at ε = 1 budget tailoring's planned ρ is the same with or without the selection). (The one-point bug sits in the
# same method-free code, caught above on RaCO-DP and DP-SGD, whose drawn runs have profiles of other shapes than the reference's;
# DP-FERMI's noise knob shows it too, in a minute.)
BUG_SPECS = {"selection releases left out of a run's event": replace(OTHERS, epsilons=(1.0,), methods=("dp-postprocess",), tuning_repeats=3)}


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


# ------------------------------------------------ K and the configurations are secret (issue 45's review of the tuning bound)

DRAWS = SweepSpec(dataset="adult", epsilons=(1.0,), gammas=(0.05,), methods=("raco-dp",), tuning="accounted", checkpoint="private",
                  tuning_repeats=8)  # a geometric K of mean 10


def searches(module, source, spec=DRAWS, method="raco-dp") -> list:
    """Each repetition's search of (method, ε = 1, γ = 0.05), drawn by ``module`` from ``source``."""
    plugin = get_method(method)
    return [module.draw_search(spec, plugin, N_TRAIN, module.search_stream(spec, method, 1.0, 0.05, r), source)
            for r in range(spec.tuning_repeats)]


def check_searches_come_from_the_key(module) -> None:
    """One key draws the same searches (a --resume with the key file); another key draws another K, other configurations and
    other ids; the repetitions draw different K; and run i's draws do not depend on K (its ids are not its position)."""
    one = searches(module, KEY)
    assert one == searches(module, Keystream(KEY.secret)), "one key drew two different searches"
    other = searches(module, Keystream(bytes(range(1, 33))))
    ks, other_ks = [len(s.runs) for s in one], [len(s.runs) for s in other]
    assert ks != other_ks, f"K is {ks} under two keys: it is not drawn from the key"
    assert len(set(ks)) > 1, f"every repetition drew K = {ks[0]}"
    runs, other_runs = [r for s in one for r in s.runs], [r for s in other for r in s.runs]
    ids, other_ids = {(c, seed) for c, seed, _ in runs}, {(c, seed) for c, seed, _ in other_runs}
    assert len(ids) == len(runs) and not ids & other_ids, "runs share a config_id and seed across searches or keys: not keyed ids"
    params, other_params = ({json.dumps(p, sort_keys=True) for *_, p in rs} for rs in (runs, other_runs))
    assert len(params) == len(runs) and not params & other_params, "two keys drew the same configurations"
    for s, m in zip(one, searches(module, KEY, replace(DRAWS, tuning_mean=40.0))):  # other K from the same words
        n = min(len(s.runs), len(m.runs))
        assert s.runs[:n] == m.runs[:n], "a run's configuration or ids depend on its search's K"


def test_a_search_is_drawn_from_the_key():
    check_searches_come_from_the_key(accounted)
    assert searches(accounted, REPRODUCIBLE) != searches(accounted, KEY)  # the reproducible search is the one the logged seed gives


DRAW_BUGS = {
    "K drawn from the public search seed (issue 45's review)": [
        ("K = spec.rounds.sample(np.random.default_rng(_words(source, stream, 0, 4)))", "K = spec.rounds.sample(np.random.default_rng(abs(stream)))")],
    "the configurations drawn from the public search seed": [
        ("sample_config(space, np.random.default_rng(w[:4]))", "sample_config(space, np.random.default_rng([abs(stream), i]))")],
    "a run's config_id and seed its position in the search": [("runs.append((w[4] % SEARCH_IDS, w[5] % SEARCH_IDS, ", "runs.append((i, i, ")],
}


@pytest.mark.parametrize("bug", list(DRAW_BUGS))
def test_a_planted_bug_in_the_search_draws_is_caught(bug):
    module = load_mutant((ROOT / "raco_bench/sweeps/accounted.py").read_text(), DRAW_BUGS[bug], bug, "accounted_mutant_", "raco_bench/sweeps/accounted.py")
    assert first_catch(module, [check_searches_come_from_the_key]), f"planted bug not caught: {bug}"


# a cheap plan (DP-SGD's reference at T ≤ 300, SGDA spends nothing) with searches of several K in each cell
CHEAP = SweepSpec(dataset="adult", epsilons=(1.0,), gammas=(0.05, 0.1), methods=("dp-sgd", "sgda"), tuning="accounted", checkpoint="private",
                  tuning_repeats=3, tuning_mean=3.0, max_steps=300)
RUN_OWN = ("config_id", "seed", "params", "trial_key", "steps", "calibrated", "skip", "skipped", "repeat", "run_id")  # a run's own draws


def check_nothing_on_a_run_states_k(module) -> None:
    """Besides its own draws (configuration, keyed ids, T), a run's trial and the row its pack table gives it are the same in
    every search of its cell, whatever that search's K: nothing on the released run tells K."""
    from raco_bench.sweeps.trial import table_row

    trials, _ = _plan(module, CHEAP)
    cells: dict[tuple, list] = {}
    for t in trials:
        common = {k: v for k, v in {**t, **table_row(t, "run")}.items() if k not in RUN_OWN}
        cells.setdefault((t["method"], t["epsilon"], t["gamma"]), []).append((t["repeat"], common))
    for cell, rows in cells.items():
        assert len({sum(r == repeat for r, _ in rows) for repeat, _ in rows}) > 1, f"{cell}: every search drew the same K (no power)"
        for _, common in rows:
            differ = sorted(k for k in {*common, *rows[0][1]} if common.get(k) != rows[0][1].get(k))
            assert not differ, f"{cell}: runs of searches of different K differ in {differ}"


def check_a_reproducible_search_is_labelled(module) -> None:
    """Under randomness=reproducible, K and the configurations can be regenerated from the logged seed: every private run
    lists that outside the budget (OUTSIDE THE BUDGET on the run and every figure); a secret search's runs do not."""
    from raco_bench.sweeps.trial import outside_budget

    note = accounted.REPRODUCIBLE_SEARCH_NOTE
    assert note.startswith("K and the configurations can be regenerated from the logged seed")
    trials, _ = _plan(module, replace(CHEAP, randomness="reproducible"), REPRODUCIBLE)
    for t in trials:
        listed = outside_budget(t, {"outside_budget": []})
        assert (note in listed) == get_method(t["method"]).private and accounted.STORE_NOTE in listed, f"{t['method']}: {listed}"
    assert not any(note in outside_budget(t, {"outside_budget": []}) for t in _plan(module, CHEAP)[0])


def test_nothing_on_a_run_states_k_and_a_reproducible_search_is_labelled():
    check_nothing_on_a_run_states_k(accounted)
    check_a_reproducible_search_is_labelled(accounted)
    with pytest.raises(ValueError, match="randomness=secret needs the sweep secret key"):  # a planner that forgot the key
        accounted.accounted_trials(CHEAP, N_TRAIN, make_trial, REPRODUCIBLE)


RUN_BUGS = {
    "K recorded on every run": [('t.update(repeat=r, tuning="accounted", ', 't.update(repeat=r, tuning="accounted", tuning_runs=len(search.runs), ')],
    "a reproducible search not labelled": [("outside = [STORE_NOTE] + ([REPRODUCIBLE_SEARCH_NOTE] if method.private and source.secret is None else [])",
                                            "outside = [STORE_NOTE]")],
}


@pytest.mark.parametrize("bug", list(RUN_BUGS))
def test_a_planted_bug_in_what_a_run_carries_is_caught(bug):
    module = load_mutant((ROOT / "raco_bench/sweeps/accounted.py").read_text(), RUN_BUGS[bug], bug, "accounted_mutant_", "raco_bench/sweeps/accounted.py")
    assert first_catch(module, [check_nothing_on_a_run_states_k, check_a_reproducible_search_is_labelled]), f"planted bug not caught: {bug}"


def test_the_release_record_and_summary_state_no_k_and_name_joint_releases():
    """The released-models record and the summary state neither K nor the released run's position; a private method trained
    without γ is selected for each γ from the same runs, and both say that those models together are one joint release."""
    from raco_bench.report.figures import privacy_caption
    from raco_bench.sweeps.runner import summarize_released

    spec = replace(CHEAP, tuning_repeats=1)
    run = {"method": "dp-sgd", "epsilon": 1.0, "gamma": None, "repeat": 0, "noisy_val_max_constraint": 0.01, "epsilon_end_to_end": 0.99,
           "test_max_constraint": 0.02}
    results = [{**run, "trial_key": f"k{i}", "config_id": 900 + i, "noisy_val_accuracy": 0.8 + i / 100, "test_accuracy": 0.8} for i in range(3)]
    releases = accounted.select_released(spec, results)
    private = [r for r in releases if r.method == "dp-sgd"]
    assert [r.trial_key for r in private] == ["k2", "k2"] and [r.same_search_as for r in private] == [(0.1,), (0.05,)]
    assert all(not r.same_search_as for r in releases if r.method == "sgda")
    assert not {"runs", "config_id"} & set(asdict(private[0]))
    text, rows = summarize_released(spec, releases, results)
    assert "mean K" not in text and all("mean_K" not in r for r in rows)
    assert f"dp-sgd at epsilon 1 (gamma 0.05, 0.1): {accounted.JOINT_NOTE}" in text
    import pandas as pd

    df = pd.DataFrame([{**run, "phase": 1, "tuning": "accounted", "tuning_note": "a search", "delta": 1e-5, "privacy_notion": "record DP",
                        "checkpoint": "private"}] + [{**run, "gamma": g, "phase": 2, "tuning": "accounted", "tuning_note": "a search",
                                                      "delta": 1e-5, "privacy_notion": "record DP", "checkpoint": "private"} for g in (0.05, 0.1)])
    assert "dp-sgd is trained without γ" in privacy_caption(df) and "one joint release" in privacy_caption(df)
    assert "joint release" not in privacy_caption(df[df["gamma"] != 0.1])


@pytest.mark.slow
def test_an_accounted_sweep_releases_models_and_its_report_says_so(tmp_path):
    """A real sweep (local Ray, SQLite MLflow): each repetition releases one run, every run states the end-to-end ε, and the
    report draws the released models with a caption that says tuning is accounted. Its searches are the ones its key draws,
    and nothing in the store (tables, params, tags, metrics, artifacts) states K."""
    import gzip

    import pandas as pd
    from test_run_deletion import rows_holding

    from raco_bench import tracking
    from raco_bench.privacy.counter_rng import load_or_create_key
    from raco_bench.records.results import read_results
    from raco_bench.report.build import build_report

    key = tmp_path.parent / f"{tmp_path.name}.key"  # the sweep's key file, beside (not inside) its folder
    args = ["--methods", "raco-dp", "sgda", "--epsilons", "1", "--gammas", "0.1", "--tuning", "accounted", "--tuning-mean", "3",
            "--tuning-repeats", "2", "--max-steps", "300", "--key-file", str(key), "--yes"]
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
    # K and the configurations came from the key: the store holds exactly the searches the key draws, not the logged seed's
    table = read_results(uri, tracking.experiment_id(uri, "adult-demographic-parity-accounted"))
    source = Keystream(load_or_create_key(key))
    for method, eps in (("raco-dp", 1.0), ("sgda", None)):
        drawn = [accounted.draw_search(spec, get_method(method), N_TRAIN, accounted.search_stream(spec, method, eps, 0.1, r), s)
                 for s in (source, REPRODUCIBLE) for r in range(2)]
        keyed, seeded = ({(c, seed) for d in ds for c, seed, _ in d.runs} for ds in (drawn[:2], drawn[2:]))
        stored = set(zip(table.loc[table["method"] == method, "config_id"], table.loc[table["method"] == method, "seed"]))
        assert stored == keyed and not stored & seeded, f"{method}: the store's runs are not the searches the sweep's key draws"
    # nothing states K: no column, param, tag or metric of the store, no artifact, no summary line, no release record
    assert rows_holding(tmp_path / "mlflow.db", "tuning_runs") == [] and "mean K" not in proc.stdout
    for f in (tmp_path / "mlartifacts").rglob("*"):
        if f.suffix in (".csv", ".json", ".txt", ".gz"):
            text = gzip.decompress(f.read_bytes()).decode() if f.suffix == ".gz" else f.read_text()
            assert "tuning_runs" not in text and "mean_K" not in text, f"{f} states K"
    released = json.loads(next((tmp_path / "mlartifacts").rglob("released_models.json")).read_text())
    assert released and all(not {"runs", "config_id"} & set(r) for r in released)
