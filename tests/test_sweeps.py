"""Sweeps: cluster.yaml against Ray's schema, the two-phase plan, idempotent MLflow logging, and real
multi-node Ray clusters on loopback (`ray start`), including a killed worker node and a killed driver."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import ray_nodes  # noqa: E402  (tests/ is on sys.path)
import yaml

from raco_bench import tracking
from raco_bench.sweeps import SweepSpec
from raco_bench.sweeps.plan import phase1_trials, phase2_trials, select

ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------------------- cluster.yaml
def _ray_schema() -> dict:
    import ray

    return json.loads((Path(ray.__file__).parent / "autoscaler" / "ray-schema.json").read_text())


def test_cluster_yaml_validates_against_rays_schema():
    import jsonschema

    text = (ROOT / "cluster.yaml").read_text()
    config = yaml.safe_load(text)
    jsonschema.validate(config, _ray_schema())
    assert config["provider"]["type"] == "aws"
    assert any("GPU" in t.get("resources", {}) for t in config["available_node_types"].values())
    assert "~/.ray/auth_token" in config["file_mounts"]  # Ray 2.60 token auth distributed to every node
    assert any("mlflow server" in c for c in config["head_start_ray_commands"])
    assert all("RAY_AUTH_MODE=token" in c for c in config["head_start_ray_commands"] + config["worker_start_ray_commands"] if "ray start" in c)
    # the commented on-premise variant
    block = text.split("# --- on-premise begin\n")[1].split("# --- on-premise end")[0]
    local = yaml.safe_load("\n".join(line[2:] for line in block.splitlines()))
    onprem = {k: v for k, v in config.items() if k not in ("provider", "auth", "available_node_types", "head_node_type")}
    onprem.update(local)
    jsonschema.validate(onprem, _ray_schema())
    assert onprem["provider"]["type"] == "local"
    with pytest.raises(jsonschema.ValidationError):  # the schema really constrains: cluster_name is required
        jsonschema.validate({k: v for k, v in config.items() if k != "cluster_name"}, _ray_schema())


# ------------------------------------------------------------------------------------------- plan
SPEC = SweepSpec(dataset="adult", epsilons=(1.0, 3.0), gammas=(0.05, 0.1), methods=("raco-dp", "dp-fermi", "sgda"), n_configs=3,
                 phase1_seeds=2, phase2_seeds=4)


def test_phase1_plan_counts_and_keys():
    trials = phase1_trials(SPEC, n_train=28829)
    count = Counter(t["method"] for t in trials)
    assert count["raco-dp"] == 2 * 2 * 3 * 2  # ε × γ × configs × seeds
    assert count["dp-fermi"] == 2 * 3 * 2  # γ enters only at selection
    assert count["sgda"] == 2 * 3 * 2  # non-private: no ε axis
    keys = [t["trial_key"] for t in trials]
    assert len(set(keys)) == len(keys)
    assert [t["trial_key"] for t in phase1_trials(SPEC, n_train=28829)] == keys  # deterministic
    assert trials[0]["params"] == {"batch_size": 1024}  # config 0 is the method's defaults


def test_a_trial_is_its_sweep_identity_and_its_runconfig_and_the_table_and_params_come_from_runconfig_fields():
    """One configuration shape: a trial is the sweep's identity (``PlannedTrial``) plus every RunConfig field a plan
    sets, taken from the sweep's template (``SweepSpec.run``); its run is those fields back; its pack-table row and
    its MLflow params are RunConfig's column / recorded fields; the reader's columns include every column field."""
    from dataclasses import asdict, replace

    from raco_bench.records.results import columns
    from raco_bench.sweeps.plan import PlannedTrial, Trial
    from raco_bench.sweeps.trial import run_config, run_params, table_row
    from raco_bench.training.config import RunConfig, run_fields

    trial = phase1_trials(SPEC, n_train=28829)[0]
    assert set(trial) == set(PlannedTrial.__annotations__) | set(run_fields("planned"))
    assert "device" not in trial and set(Trial.__optional_keys__) >= {"calibrated", "skip", "repeat", "tuning"}
    template = SPEC.run
    for name in run_fields("planned"):
        if name not in ("method", "epsilon", "gamma", "seed", "params"):
            assert trial[name] == getattr(template, name), name  # the sweep's settings, not restated by the plan
    config = run_config(trial, "cpu")
    assert asdict(config) == {**asdict(template), "method": trial["method"], "epsilon": trial["epsilon"], "gamma": trial["gamma"],
                              "seed": trial["seed"], "params": trial["params"], "device": "cpu"}
    spare = {k: v for k, v in trial.items() if k not in ("preprocessing", "checkpoint", "selection_noise", "selection_checkpoints", "randomness")}
    config, default = run_config(spare, "cpu"), RunConfig()  # a trial that does not say (an older store's): RunConfig's defaults
    for name in ("preprocessing", "checkpoint", "selection_noise", "selection_checkpoints", "randomness"):
        assert getattr(config, name) == getattr(default, name)
    row = table_row(trial, "run")
    assert set(row) <= set(columns())  # what a pack records of a trial, the one reader reads
    assert set(run_fields("column")) - {"constraint_spec", "schema", "selection_noise", "selection_checkpoints"} <= set(row)  # where they apply
    assert set(run_fields("column")) <= set(columns())
    private = table_row({**trial, "checkpoint": "private", "constraint_spec": "FNR(1) - FNR(0) <= gamma"}, "run")
    assert {"selection_noise", "selection_checkpoints", "constraint_spec"} <= set(private)
    params = run_params(asdict(config), private=True)
    assert {f"run.{k}" for k in ("dataset", "method", "epsilon", "delta", "seed", "max_steps", "batch_draws")} <= set(params)
    assert not {"run.params", "run.schema", "run.data", "run.constraint_spec", "run.selection_noise"} & set(params)
    assert not {"run.epsilon", "run.delta"} & set(run_params(asdict(config), private=False))
    # a sweep setting reaches its trials through the template: the trials of a sweep with another δ carry it
    assert phase1_trials(replace(SPEC, delta=1e-6), n_train=28829)[0]["delta"] == 1e-6


def test_every_configuration_and_seed_draws_its_own_streams():
    """No two trials of a sweep share a noise or batch stream: configurations that share a seed (every phase-1
    configuration uses seeds 0, 1, ...) still get distinct stream ids, and a trial maps to the same id every time."""
    from dataclasses import asdict

    from raco_bench.methods import get_method
    from raco_bench.sweeps.trial import run_config
    from raco_bench.training.config import stream_id

    def ids(trials):
        out = []
        for t in trials:
            cfg = run_config(t, "cpu")
            out.append(stream_id(cfg, asdict(get_method(cfg.method).hyperparameters(cfg.params))))
        return out

    trials = phase1_trials(SPEC, n_train=28829)
    first = ids(trials)
    assert len(set(first)) == len(first) == len(trials) and ids(trials) == first
    seed0 = [i for i, t in zip(first, trials) if t["seed"] == 0 and t["method"] == "raco-dp"]
    assert len(set(seed0)) == len(seed0) > 1


def test_selection_and_phase2():
    trials = [t for t in phase1_trials(SPEC, 28829) if t["method"] == "dp-fermi" and t["epsilon"] == 1.0]
    results = []
    for t in trials:  # config 2: most accurate but violates; config 1 best feasible for γ=0.1; nothing meets 0.05 except config 0
        acc, con = {0: (0.80, 0.04), 1: (0.83, 0.09), 2: (0.85, 0.20)}[t["config_id"]]
        results.append({**t, "val_accuracy": acc + 0.001 * t["seed"], "val_max_constraint": con})
    sel = {(s.method, s.epsilon, s.gamma): s for s in select(SPEC, results)}
    assert sel[("dp-fermi", 1.0, 0.05)].config_id == 0 and sel[("dp-fermi", 1.0, 0.1)].config_id == 1
    assert sel[("dp-fermi", 3.0, 0.05)].config_id is None  # no results at all for ε = 3
    trials2 = phase2_trials(SPEC, list(sel.values()))
    assert len(trials2) == 2 * SPEC.phase2_seeds
    assert all(t["seed"] >= 1000 and t["phase"] == 2 for t in trials2)
    assert not {t["seed"] for t in trials2} & {t["seed"] for t in trials}


def test_a_configuration_that_collapses_on_a_seed_cannot_win():
    """Config 1 has the best mean validation accuracy and meets γ on average, but one of its seeds collapsed below the
    constant predictor (a collapsed model meets parity trivially): the user of it would get that seed at random."""
    trials = [t for t in phase1_trials(SPEC, 28829) if t["method"] == "dp-fermi" and t["epsilon"] == 1.0]
    results = []
    for t in trials:
        acc = {0: 0.80, 1: 0.95 if t["seed"] == 0 else 0.70, 2: 0.81}[t["config_id"]]  # config 1: 0.825 on average
        results.append({**t, "val_accuracy": acc, "val_max_constraint": 0.01})
    chosen = {s.gamma: s for s in select(SPEC, results, lambda gamma: 0.76) if s.method == "dp-fermi" and s.epsilon == 1.0}
    assert all(s.config_id == 2 and s.n_failed == 1 for s in chosen.values())
    assert {s.config_id for s in select(SPEC, results) if s.method == "dp-fermi" and s.epsilon == 1.0} == {1}  # without the rule
    diverged = [{**r, "val_accuracy": float("nan")} if r["config_id"] == 2 and r["seed"] == 1 else r for r in results]
    assert {s.config_id for s in select(SPEC, diverged, lambda gamma: 0.76) if s.method == "dp-fermi" and s.epsilon == 1.0} == {0}


def test_the_failure_bar_is_the_best_constant_predictor_that_meets_the_constraint():
    """Under an FNR bound a useful model must trade accuracy below the majority rate (Heart: 91 % negatives; the
    papers' SGDA reaches 87.5 % at FNR 58 %), so the bar is the best randomised constant predictor meeting FNR <= γ,
    not the majority rate; with the majority rate every Heart configuration would count as failed."""
    from raco_bench.constraints.families import FAMILIES, Task, custom_family
    from raco_bench.sweeps.plan import failure_baseline

    task = Task(("a", "b"), ("no", "yes"))
    labels = [1] * 9 + [0] * 91  # 9 % positives, like Heart
    bar = {name: failure_baseline(fam, task, labels) for name, fam in FAMILIES.items()}
    assert bar["demographic-parity"](0.05) == pytest.approx(0.91)
    assert bar["equalized-odds"](0.05) == pytest.approx(0.91)
    assert bar["false-negative-rate"](0.5) == pytest.approx(0.5 * 0.91 + 0.5 * 0.09)  # p = 1 - γ
    assert bar["false-negative-rate"](1.0) == pytest.approx(0.91)  # no bound: always negative
    assert failure_baseline(FAMILIES["false-negative-rate"], task, [1] * 70 + [0] * 30)(0.2) == pytest.approx(0.70)  # positives dominate
    assert failure_baseline(custom_family("gap", "FNR(group=a) - FNR(group=b)"), task, labels)(0.1) == pytest.approx(0.91)  # a difference
    assert failure_baseline(custom_family("fnr-a", "FNR(group=a)"), task, labels)(0.5) == pytest.approx(0.5 * 0.91 + 0.5 * 0.09)  # a bound
    assert failure_baseline(custom_family("both", "FNR(group=a) <= gamma; FPR(group=a)"), task, labels)(0.2) is None  # no constant meets both

    spec = SweepSpec(dataset="heart", constraint="false-negative-rate", gammas=(0.5,), methods=("sgda",), n_configs=2, phase1_seeds=2)
    trials = phase1_trials(spec, 161722)
    results = [{**t, "val_accuracy": 0.85 if t["config_id"] == 0 else 0.40, "val_max_constraint": 0.45} for t in trials]
    chosen = select(spec, results, bar["false-negative-rate"])
    assert [(s.config_id, s.n_failed) for s in chosen] == [(0, 1)]  # 0.85 < 0.91 is a useful FNR model; 0.40 < 0.50 collapsed


BAD_GRIDS = [dict(gammas=(-1.0,)), dict(gammas=(1.5,)), dict(gammas=(float("nan"),)), dict(epsilons=(float("inf"),)), dict(epsilons=(0.0,))]


@pytest.mark.parametrize("bad", BAD_GRIDS)
def test_bad_grids_are_refused_before_anything_runs(bad):
    with pytest.raises(ValueError, match="gammas|epsilons"):
        SweepSpec(dataset="adult", **bad)


def test_a_report_never_creates_a_store(tmp_path, monkeypatch):
    from raco_bench.report.build import build_report

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with pytest.raises(ValueError, match="no MLflow store"):
        build_report("anything", None, tmp_path / "out")
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "out").exists()


def test_file_store_is_refused():
    for uri in ("file:///tmp/mlruns", "./mlruns"):
        with pytest.raises(ValueError, match="file store"):
            tracking.resolve_tracking_uri(uri)
    assert tracking.resolve_tracking_uri("sqlite:////tmp/x.db") == "sqlite:////tmp/x.db"


# ------------------------------------------------------------------------------------ calibration
def _one_step_too_many():
    from raco_bench.privacy.calibration import StepsProblem

    class OneStepTooMany(StepsProblem):
        def solve(self) -> float:
            return StepsProblem.solve(self) + 1

    return OneStepTooMany


@pytest.mark.slow
def test_calibration_tasks_check_their_values_and_keep_what_they_solved(tmp_path):
    """A sweep's calibration runs in Ray tasks that check each value against its budget where it is computed: a solver
    one step too many fails the calibration (nothing of it stored), while the values other tasks solved are kept.

    The test's own local Ray runs in this process, without token authentication (Ray would otherwise switch it on in
    this process's environment, which the later tests' loopback clusters inherit), and the environment is restored."""
    import ray
    import ray.cloudpickle

    from raco_bench.privacy.accounting import StepMechanism, max_steps
    from raco_bench.privacy.calibration import CalibrationCache, StepsProblem
    from raco_bench.sweeps.calibration import solve_all

    broken_type = _one_step_too_many()
    module = sys.modules[__name__]
    saved = dict(os.environ)
    os.environ["RAY_AUTH_MODE"] = "disabled"
    ray.cloudpickle.register_pickle_by_value(module)  # the planted solver travels to the task by value
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        mech = StepMechanism(256 / 20000, 1.7, 6.0, "shared")
        good = StepsProblem(mech, 1.0, 1e-5, 100_000)
        cache = CalibrationCache(path=tmp_path / "cal.json")
        values, computed = solve_all({good.key(): good}, cache)
        assert computed == 1 and values[good.key()] == max_steps(mech, 1.0, 1e-5) == CalibrationCache(path=tmp_path / "cal.json").lookup(good.key())
        broken = broken_type(mech, 0.5, 1e-5, 100_000)
        other = StepsProblem(mech, 2.0, 1e-5, 100_000)
        cache = CalibrationCache(path=tmp_path / "other.json")
        with pytest.raises(RuntimeError, match="does not meet its own budget"):
            solve_all({other.key(): other, broken.key(): broken}, cache)
        stored = CalibrationCache(path=tmp_path / "other.json")
        assert stored.lookup(broken.key()) is None
        assert stored.lookup(other.key()) in (None, max_steps(mech, 2.0, 1e-5))  # kept if its task ended first
    finally:
        ray.shutdown()
        ray.cloudpickle.unregister_pickle_by_value(module)
        os.environ.clear()
        os.environ.update(saved)


# ---------------------------------------------------------------------------- idempotent logging
TEST_KEY = bytes(range(32))  # the sweep's secret key (a retried attempt draws from the same key, as a sweep's trials do)

def _run_alone(trial: dict, uri: str, exp: str, parent: str, flush_every_s: float = 10.0) -> dict:
    """One configuration as a pack of one, with its own run (as phase 2 logs every configuration)."""
    from raco_bench.sweeps.plan import make_packs
    from raco_bench.sweeps.trial import execute_pack

    (pack,) = make_packs([trial], 1)
    return execute_pack({**pack, "child_runs": True}, uri, exp, parent, flush_every_s=flush_every_s, key=TEST_KEY)


def test_trial_logging_is_idempotent(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spec = SweepSpec(dataset="parkinsons", epsilons=(3.0,), gammas=(0.1,), methods=("sgda", "raco-dp"), n_configs=1, phase1_seeds=1,
                     max_steps=40, eval_every=20)
    exp = tracking.get_or_create_experiment(uri, spec.experiment)
    assert tracking.get_or_create_experiment(uri, spec.experiment) == exp
    parent = tracking.get_or_create_parent(uri, exp, spec.sweep_id, 1, {})
    assert tracking.get_or_create_parent(uri, exp, spec.sweep_id, 1, {}) == parent
    sgda, raco = phase1_trials(spec, n_train=3745)  # no "steps": the trial calibrates T itself (cap 40)
    first = _run_alone(sgda, uri, exp, parent)
    again = _run_alone(sgda, uri, exp, parent)  # complete: read back, not retrained
    assert again["val_accuracy_best"] == pytest.approx(first["val_accuracy_best"])
    assert len(tracking.completed_packs(uri, exp)) == 1
    # a killed attempt leaves an incomplete run: the retry reuses it instead of creating another
    run_id, done, reused = tracking.get_or_create_trial_run(uri, exp, parent, raco)
    assert done is None and not reused
    _run_alone(raco, uri, exp, parent)
    runs = tracking.client(uri).search_runs([exp], "tags.`raco_bench.kind` = 'trial'")
    assert Counter(r.data.tags[tracking.TRIAL_KEY] for r in runs) == {sgda["trial_key"]: 1, raco["trial_key"]: 1}
    raco_run = next(r for r in runs if r.data.tags[tracking.TRIAL_KEY] == raco["trial_key"])
    assert raco_run.info.run_id == run_id and raco_run.data.tags[tracking.COMPLETE] == "1"
    assert raco_run.data.tags["mlflow.parentRunId"] == parent
    assert 0 < raco_run.data.metrics["epsilon_spent"] <= 3.0
    history = tracking.client(uri).get_metric_history(run_id, "eval/val_accuracy")
    T = int(raco_run.data.metrics["steps"])
    assert 1 < T <= 40
    assert sorted(m.step for m in history) == sorted({1, T} | set(range(20, T + 1, 20)))  # step-indexed evaluations, each once
    assert len(tracking.client(uri).get_metric_history(run_id, "val_accuracy")) == 1
    arts = {a.path for a in tracking.client(uri).list_artifacts(run_id)}
    assert {"config.json", "weights.npz", "weights_last.npz"} <= arts
    tags = raco_run.data.tags
    assert tags["checkpoint"] == "last" and tags["preprocessing"] == "public"
    assert tags["outside_budget"].startswith("task definition: the label threshold")  # Parkinsons' median label, labelled
    # the default checkpoint rule is the last iterate: the saved model is it, and its step is T
    assert raco_run.data.metrics["reported_step"] == T


def test_a_killed_attempt_leaves_no_duplicate_and_no_lost_metric_point(tmp_path):
    """Curves stream while a trial trains; a retry of a killed attempt that had already streamed some points and
    some final metrics writes each (metric, step) once, with the values an uninterrupted run logs."""
    spec = SweepSpec(dataset="parkinsons", epsilons=(3.0,), gammas=(0.1,), methods=("raco-dp",), n_configs=1, phase1_seeds=1,
                     max_steps=60, eval_every=20)
    (trial,) = phase1_trials(spec, n_train=3745)
    stores = {}
    for name in ("clean", "killed"):
        uri = f"sqlite:///{tmp_path / name}.db"
        exp = tracking.get_or_create_experiment(uri, spec.experiment)
        parent = tracking.get_or_create_parent(uri, exp, spec.sweep_id, 1, {})
        stores[name] = (uri, exp, parent)
    _run_alone(trial, *stores["clean"], flush_every_s=0)
    clean_uri = stores["clean"][0]
    clean = tracking.client(clean_uri).search_runs([stores["clean"][1]], "tags.`raco_bench.kind` = 'trial'")[0]
    keys = [k for k in clean.data.metrics if k.startswith("eval/")]
    want = {k: sorted((m.step, m.value) for m in tracking.client(clean_uri).get_metric_history(clean.info.run_id, k)) for k in keys}
    # the killed attempt: it streamed the step-1 and step-20 points of every curve and one final metric, then died
    uri, exp, parent = stores["killed"]
    run_id, _, _ = tracking.get_or_create_trial_run(uri, exp, parent, trial)
    live = tracking.LiveMetrics(uri, run_id, flush_every_s=0)
    live.add([(k, v, s) for k, pts in want.items() for s, v in pts if s in (1, 20)])
    assert len(tracking.client(uri).get_metric_history(run_id, keys[0])) == 2  # written at once, not at the end
    tracking.client(uri).log_metric(run_id, "test_accuracy", clean.data.metrics["test_accuracy"])
    _run_alone(trial, uri, exp, parent, flush_every_s=0)
    c = tracking.client(uri)
    for k, pts in want.items():
        assert sorted((m.step, m.value) for m in c.get_metric_history(run_id, k)) == pts, k
    assert len(c.get_metric_history(run_id, "test_accuracy")) == 1
    timing = {"ms_per_step", "eval_s"}  # wall-clock times differ between attempts
    got = {k: v for k, v in c.get_run(run_id).data.metrics.items() if k not in timing}
    assert got == pytest.approx({k: v for k, v in clean.data.metrics.items() if k not in timing})


def test_the_reported_model_is_a_loadable_mlflow_model_with_its_signature(tmp_path):
    import mlflow
    import numpy as np
    import torch

    from raco_bench.data import load_dataset
    from raco_bench.models import LogisticRegression
    from raco_bench.tracking import model as mlflow_model
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spec = SweepSpec(dataset="parkinsons", epsilons=(3.0,), gammas=(0.1,), methods=("raco-dp",), n_configs=1, phase1_seeds=1,
                     max_steps=40, eval_every=20)
    exp = tracking.get_or_create_experiment(uri, spec.experiment)
    parent = tracking.get_or_create_parent(uri, exp, spec.sweep_id, 1, {})
    (trial,) = phase1_trials(spec, n_train=3745)
    _run_alone(trial, uri, exp, parent)
    run = tracking.client(uri).search_runs([exp], "tags.`raco_bench.kind` = 'trial'")[0]
    run_id = run.info.run_id
    ds = load_dataset("parkinsons", seed=0)
    before = os.environ.get("MLFLOW_TRACKING_URI")
    with tracking.fluent_uri(uri):
        model = mlflow.pyfunc.load_model(f"runs:/{run_id}/raco-dp")  # the model is named for its method
    assert os.environ.get("MLFLOW_TRACKING_URI") == before  # nothing leaks into later subprocesses
    sig = model.metadata.signature
    assert sig.inputs.input_names() == list(ds.feature_names)
    assert sig.outputs.input_names() == ["prediction", "probability_0", "probability_1"]
    import pandas as pd

    out = model.predict(pd.DataFrame(ds.test.X.astype(np.float64), columns=list(ds.feature_names)))
    weights = np.load(tracking.client(uri).download_artifacts(run_id, "weights.npz", str(tmp_path)))
    params = {k: torch.as_tensor(weights[k], dtype=torch.float64) for k in weights.files}
    logits = LogisticRegression(ds.n_features, ds.n_classes).logits(params, torch.as_tensor(ds.test.X, dtype=torch.float64)).numpy()
    np.testing.assert_array_equal(out["prediction"].to_numpy(), logits.argmax(1))
    test_accuracy = float((out["prediction"].to_numpy() == ds.test.y).mean())
    assert test_accuracy == pytest.approx(run.data.metrics["test_accuracy"], abs=1e-6)
    # logging again (a retried attempt) keeps the one model the run has
    mlflow_model.log_model(uri, run_id, tmp_path / "weights.npz", list(ds.feature_names), ds.n_classes)
    assert len(mlflow_model.logged_model_ids(uri, exp, run_id)) == 1


def test_paper_rules_are_labelled_outside_the_budget_on_the_run(tmp_path):
    """preprocessing=paper and checkpoint=paper: the trial's MLflow tags say what was read outside the budget,
    and the saved weights are the reported checkpoint's (the last iterate beside them)."""
    import numpy as np

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spec = SweepSpec(dataset="parkinsons", epsilons=(3.0,), gammas=(0.1,), methods=("sgda",), n_configs=1, phase1_seeds=1,
                     max_steps=60, eval_every=10, preprocessing="paper", checkpoint="paper")
    exp = tracking.get_or_create_experiment(uri, spec.experiment)
    parent = tracking.get_or_create_parent(uri, exp, spec.sweep_id, 1, {})
    (trial,) = phase1_trials(spec, n_train=3745)
    _run_alone(trial, uri, exp, parent)
    (run,) = tracking.client(uri).search_runs([exp], "tags.`raco_bench.kind` = 'trial'")
    tags = run.data.tags
    assert tags["preprocessing"] == "paper" and tags["checkpoint"] == "paper"
    assert "preprocessing=paper" in tags["outside_budget"] and "checkpoint=paper" in tags["outside_budget"]
    c = tracking.client(uri)
    reported = np.load(c.download_artifacts(run.info.run_id, "weights.npz", str(tmp_path)))
    last = np.load(c.download_artifacts(run.info.run_id, "weights_last.npz", str(tmp_path)))
    if run.data.metrics["reported_step"] < run.data.metrics["steps"]:
        assert not np.array_equal(reported["weight"], last["weight"])
    else:
        np.testing.assert_array_equal(reported["weight"], last["weight"])


# ------------------------------------------------------------------------ real Ray clusters
CLUSTER_METHODS = ("raco-dp", "dp-fermi", "sgda")  # the distribution tests' fixed method set (their pack counts depend on it)
SMOKE = ["--smoke", "--max-steps", "100", "--methods", *CLUSTER_METHODS]


def _pack_rows(db: Path) -> list[tuple[str, str, str]]:
    """(pack_key, complete, node) of every pack run, read straight from the SQLite store."""
    if not db.exists():
        return []
    con = sqlite3.connect(db)
    try:
        rows = con.execute(
            "select r.run_uuid, t.key, t.value from runs r join tags t on r.run_uuid = t.run_uuid where r.lifecycle_stage = 'active'"
        ).fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        con.close()
    by_run: dict[str, dict] = {}
    for run, key, value in rows:
        by_run.setdefault(run, {})[key] = value
    return [(t.get(tracking.PACK_KEY), t.get(tracking.COMPLETE, "0"), t.get("ray_node_id", "")) for t in by_run.values() if t.get(tracking.KIND) == "pack"]


def _sweep(cwd: Path, env: dict, *args: str, wait: bool = True):
    cmd = [sys.executable, str(ROOT / "sweeps" / "adult.py"), *SMOKE, *args]
    if wait:
        return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    return subprocess.Popen(cmd, cwd=cwd, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait_for_completed_packs(db: Path, n: int, timeout: float = 300, nodes: int = 1) -> None:
    """Until ``n`` packs are complete, recorded by at least ``nodes`` distinct Ray nodes."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        done = [node for _, c, node in _pack_rows(db) if c == "1"]
        if len(done) >= n and len(set(done)) >= nodes:
            return
        time.sleep(0.5)


def _check_each_configuration_once(cwd: Path) -> list[tuple[str, str, str]]:
    """Every pack run complete and unique; every configuration in exactly one pack table (no dedupe needed);
    every phase-2 configuration with exactly one complete run of its own."""
    import pandas as pd

    rows = _pack_rows(cwd / "mlflow.db")
    keys = Counter(k for k, _, _ in rows)
    assert all(n == 1 for n in keys.values()), keys
    assert all(c == "1" for _, c, _ in rows)
    uri = f"sqlite:///{cwd / 'mlflow.db'}"
    spec = SweepSpec(dataset="adult", methods=CLUSTER_METHODS).smoke()
    from dataclasses import replace

    spec = replace(spec, max_steps=100)
    exp = tracking.get_or_create_experiment(uri, spec.experiment)
    c = tracking.client(uri)
    tables = {1: [], 2: []}
    for run in tracking.completed_packs(uri, exp, spec.sweep_id):
        tables[int(run.data.tags[tracking.PHASE])].append(pd.read_csv(c.download_artifacts(run.info.run_id, tracking.PACK_TABLE, str(cwd))))
    phase1, phase2 = pd.concat(tables[1]), pd.concat(tables[2])
    assert phase1["trial_key"].is_unique and phase2["trial_key"].is_unique
    assert len(phase1) == len(phase1_trials(spec, 28829)) == 12
    assert set(phase1["method"]) == {"raco-dp", "dp-fermi", "sgda"}
    winners = set(zip(phase2["method"], phase2["config_id"]))
    assert len(phase2) == spec.phase2_seeds * len(winners) and len(winners) >= 1
    children = tracking.search_all(uri, [exp], f"tags.`{tracking.KIND}` = 'trial'")
    assert Counter(r.data.tags[tracking.TRIAL_KEY] for r in children) == Counter(phase2["trial_key"])
    assert all(r.data.tags[tracking.COMPLETE] == "1" for r in children) and set(phase2["run_id"]) == {r.info.run_id for r in children}
    return rows


def _assert_key_written_nowhere(key: bytes, root: Path, console: str) -> None:
    """Secret randomness: the sweep's key is in no file it wrote (MLflow store and artifacts, Ray Tune's trial configs
    and results) and not on its console, raw, in hex or in base64."""
    import base64

    forms = [key, key.hex().encode(), key.hex().upper().encode(), base64.b64encode(key), base64.b64encode(key).rstrip(b"=")]
    files = [p for p in root.rglob("*") if p.is_file()]
    assert any(p.name == "mlflow.db" for p in files) and any("ray_results" in p.parts for p in files)
    for path in files:
        data = path.read_bytes()
        assert not any(f in data for f in forms), f"the secret key is written in {path}"
    assert not any(f.decode("latin-1") in console for f in forms)


@pytest.fixture(scope="module")
def loopback_cluster(tmp_path_factory):
    """A two-node loopback cluster (head + worker, 1 CPU each) with token authentication on every process,
    as cluster.yaml sets it up (Ray 2.60). The module's multi-node tests share it (starting one takes seconds):
    each leaves it as it found it, but the one that kills its worker node, which runs last. Only its own nodes
    are stopped afterwards."""
    import secrets

    # HOME is the cluster's own: in token mode Ray may write ~/.ray/auth_token, which would then
    # require a token of every other Ray instance of the user
    home = tmp_path_factory.mktemp("ray-home")
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32), "HOME": str(home)}
    cluster = ray_nodes.start_cluster(env)
    yield cluster
    cluster.stop()


def test_tests_stop_only_the_ray_they_started(tmp_path, loopback_cluster):
    """A Ray instance that is not the test's own (another user's sweep, say; here the module's cluster) survives
    a loopback cluster's whole life cycle, and the cluster leaves no process behind."""
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "HOME": str(home)}
    bystander = loopback_cluster
    cluster = ray_nodes.start_cluster(env)
    nodes = list(cluster.nodes)
    cluster.stop()
    assert all(not node.pids() and node.process.poll() is not None for node in nodes)
    assert ray_nodes.alive(bystander.address, bystander.env)
    assert all(node.pids() and node.process.poll() is None for node in bystander.nodes)


@pytest.mark.slow
def test_gpu_requests_come_from_the_configuration_and_wait_for_gpu_nodes(tmp_path, loopback_cluster, started):
    """A cluster with no GPU when the sweep starts (min_workers: 0): trials still ask for the configured GPU
    share, wait, and run on the GPU node once it joins (a fake GPU: `ray start --num-gpus=1` on loopback;
    torch sees no CUDA, so the trial falls back to the CPU and records the GPU Ray assigned it). The GPU node
    leaves the cluster afterwards."""
    cluster = loopback_cluster
    env = {**cluster.env, "RAY_ADDRESS": cluster.address, "RACO_BENCH_GPUS_PER_TRIAL": "0.5"}
    proc = _sweep(tmp_path, env, wait=False)
    started.append(proc)
    # the first pack asks for 1 CPU and the configured 0.5 GPU, and waits: the cluster has none yet
    missing = ray_nodes.wait_for_demand(cluster.address, cluster.env, {"CPU": 1.0, "GPU": 0.5})
    assert not missing, f"no trial asks for the configured GPU share; pending: {missing}"
    assert proc.poll() is None and not any(c == "1" for _, c, _ in _pack_rows(tmp_path / "mlflow.db"))  # nothing ran: no GPU yet
    gpu_node = ray_nodes.start_node(cluster.env, f"--address={cluster.address}", "--num-cpus=2", "--num-gpus=1")
    try:
        out, _ = proc.communicate(timeout=900)
    finally:
        gpu_node.stop()
    assert proc.returncode == 0, out[-4000:]
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    exp = tracking.client(uri).get_experiment_by_name("adult-demographic-parity-smoke").experiment_id
    runs = tracking.search_all(uri, [exp], f"tags.`{tracking.KIND}` = 'pack'") + tracking.search_all(uri, [exp], f"tags.`{tracking.KIND}` = 'trial'")
    assert runs and all(r.data.tags["ray_gpu_ids"] != "none" and r.data.tags["device"] == "cpu" for r in runs)
    assert len(out.splitlines()) < 60, out  # the compact console


@pytest.mark.slow
def test_killed_driver_resumes_with_exactly_one_run_per_trial(tmp_path, loopback_cluster, started):
    env = {**loopback_cluster.env, "RAY_ADDRESS": loopback_cluster.address}
    proc = _sweep(tmp_path, env, wait=False)
    started.append(proc)
    _wait_for_completed_packs(tmp_path / "mlflow.db", 2)
    os.killpg(proc.pid, signal.SIGKILL)  # the driver dies mid-sweep
    proc.wait()
    done_before = sum(c == "1" for _, c, _ in _pack_rows(tmp_path / "mlflow.db"))
    assert 2 <= done_before < 6  # phase 1 has 6 packs (12 configurations in packs of up to 3)
    resumed = _sweep(tmp_path, env, "--resume")
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "resuming" in resumed.stdout
    _check_each_configuration_once(tmp_path)


@pytest.mark.slow
def test_multinode_smoke_sweep_through_ray_address_loses_no_trial_when_a_worker_node_dies(tmp_path, loopback_cluster, started):
    """A smoke sweep joins the cluster through RAY_ADDRESS and trains packs on both nodes, then the worker node dies
    mid-sweep (once each node has recorded a pack): every configuration is still recorded once, and the sweep's
    secret key is written nowhere."""
    env = {**loopback_cluster.env, "RAY_ADDRESS": loopback_cluster.address}
    keys = tmp_path.parent / f"{tmp_path.name}-keys"
    keys.mkdir()
    proc = _sweep(tmp_path, env, "--key-file", str(keys / "sweep.key"), wait=False)
    started.append(proc)
    _wait_for_completed_packs(tmp_path / "mlflow.db", 2, nodes=2)
    assert proc.poll() is None, "the sweep ended before the worker node could be killed mid-sweep"
    loopback_cluster.worker.kill()  # the worker node dies mid-sweep
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-4000:]
    assert "Selected configurations" in out and "configurations/minute" in out
    rows = _check_each_configuration_once(tmp_path)
    assert len({node for _, _, node in rows}) == 2  # packs ran on both nodes
    _assert_key_written_nowhere(bytes.fromhex((keys / "sweep.key").read_text().strip()), tmp_path, out)
