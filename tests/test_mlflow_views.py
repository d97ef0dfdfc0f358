"""What a user finds in the MLflow UI: runs named and tagged by what they are, a run per γ for a γ-free winner,
phase-1 configurations as runs (created in bulk), dataset inputs, named and registered models, and the randomised
DP post-processing predictor as a loadable model (real SQLite stores, real training)."""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pandas as pd
import pytest

from raco_bench import tracking
from raco_bench.sweeps import SweepSpec
from raco_bench.sweeps.configurations import CONFIG_RUNS_TAG, configuration_records, log_configuration_runs
from raco_bench.sweeps.plan import Selection, make_packs, phase1_trials, phase2_trials

KEY = bytes(range(32))


def _store(tmp_path, spec: SweepSpec):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    exp = tracking.get_or_create_experiment(uri, spec.experiment)
    return uri, exp


def test_phase2_trials_list_every_gamma_a_gamma_free_winner_won():
    spec = SweepSpec(dataset="parkinsons", epsilons=(1.0,), gammas=(0.1, 0.2, 0.3), methods=("sgd", "raco-dp"), n_configs=2, phase2_seeds=2)
    sels = [Selection("sgd", None, g, 1, {"lr": 0.1}, 0.8, 0.05, 2, 2) for g in (0.1, 0.3)]
    sels += [Selection("sgd", None, 0.2, 0, {"lr": 0.2}, 0.8, 0.15, 2, 2)]
    sels += [Selection("raco-dp", 1.0, g, 0, {"lr": 0.1}, 0.8, 0.05, 2, 2) for g in (0.1, 0.2)]
    trials = phase2_trials(spec, sels)
    sgd = [t for t in trials if t["method"] == "sgd"]
    assert len(sgd) == 4 and all(t["gamma"] is None for t in sgd)  # config 1 trained once for 0.1 and 0.3, config 0 once
    assert sorted(tuple(t["selected_gammas"]) for t in sgd) == [(0.1, 0.3), (0.1, 0.3), (0.2,), (0.2,)]
    raco = [t for t in trials if t["method"] == "raco-dp"]
    assert len(raco) == 4 and all(t["selected_gammas"] == [t["gamma"]] for t in raco)


def test_a_gamma_free_winner_has_a_run_per_gamma_with_its_dataset_and_model(tmp_path):
    """Filtering tags.gamma finds a γ-free method at every γ it won; the views repeat the trained run's results; each run
    names its method first, is a top-level run linked to its phase parent, says what it is, records the dataset as an input
    and logs a model named for its method."""
    from raco_bench.sweeps.trial import execute_pack

    spec = SweepSpec(dataset="parkinsons", epsilons=(1.0,), gammas=(0.1, 0.2), methods=("sgd",), n_configs=1, phase2_seeds=1,
                     max_steps=40, eval_every=20)
    uri, exp = _store(tmp_path, spec)
    parent = tracking.get_or_create_parent(uri, exp, spec.sweep_id, 2, {"experiment": spec.experiment})
    sels = [Selection("sgd", None, g, 0, phase1_trials(spec, 3745)[0]["params"], 0.8, 0.05, 1, 1) for g in (0.1, 0.2)]
    (trial,) = phase2_trials(spec, sels)
    (pack,) = make_packs([trial], 1)
    for _ in range(2):  # a retried attempt creates nothing new
        execute_pack(pack, uri, exp, parent, flush_every_s=0, key=KEY)
    c = tracking.client(uri)
    runs = tracking.search_all(uri, [exp], f"tags.`{tracking.KIND}` = 'trial'")
    assert len(runs) == 2
    by_gamma = {r.data.tags["gamma"]: r for r in runs}
    assert set(by_gamma) == {"0.1", "0.2"}
    trained, view = by_gamma["0.1"], by_gamma["0.2"]
    assert tracking.VIEW_OF not in trained.data.tags and view.data.tags[tracking.VIEW_OF] == trained.info.run_id
    assert view.data.metrics == trained.data.metrics  # the same training, under its other γ
    curve = lambda run: [(m.step, m.value) for m in c.get_metric_history(run.info.run_id, "eval/val_accuracy")]  # noqa: E731
    assert curve(view) == curve(trained) and len(curve(view)) == 3
    filtered = tracking.search_all(uri, [exp], "tags.gamma = '0.2' and tags.method = 'sgd'")
    assert [r.info.run_id for r in filtered] == [view.info.run_id]
    for run in runs:
        t = run.data.tags
        assert run.info.run_name.startswith(f"sgd eps=inf gamma={t['gamma']} config=0 seed=1000")  # the method first: the UI cuts names
        assert "mlflow.parentRunId" not in t and t[tracking.PHASE_PARENT] == parent  # top-level: in view without expanding a parent
        assert t["trained_with_gamma"] == "no" and "run.gamma" not in run.data.params
        assert run.data.params["selection.gamma"] == t["gamma"]
        assert "Selected on validation for gamma=" + t["gamma"] in t[tracking.DESCRIPTION]
        (inp,) = run.inputs.dataset_inputs
        profile = json.loads(inp.dataset.profile)
        assert inp.dataset.name == "parkinsons" and len(inp.dataset.digest) == 16 and profile["train_rows"] == 3745
        assert {"val_rows", "test_rows", "features", "groups"} <= set(profile)
        (model,) = c.search_logged_models([exp], filter_string=f"source_run_id = '{run.info.run_id}'")
        assert model.name == "sgd" and model.tags[tracking.SOURCE_NAME] == f"raco-bench sweep {spec.experiment}"
    assert tracking.get_or_create_parent(uri, exp, spec.sweep_id, 2, {}) == parent
    assert c.get_run(parent).info.run_name == f"phase 2: selected configurations (sweep {spec.sweep_id[:8]})"
    (pack_run,) = tracking.search_all(uri, [exp], f"tags.`{tracking.KIND}` = 'pack'")
    assert pack_run.inputs.dataset_inputs[0].dataset.name == "parkinsons"

    # a killed attempt after the view completed, retried under another key (a resume without --key-file): the trained
    # run is logged again, and so is the view, which must repeat the new training, never keep the old one
    for run_id in (trained.info.run_id, pack_run.info.run_id):
        tracking.set_tags(uri, run_id, {tracking.COMPLETE: "0"})
    execute_pack(pack, uri, exp, parent, flush_every_s=0, key=bytes(range(1, 33)))
    runs = tracking.search_all(uri, [exp], f"tags.`{tracking.KIND}` = 'trial'")
    assert len(runs) == 2
    by_gamma = {r.data.tags["gamma"]: r for r in runs}
    trained2, view2 = by_gamma["0.1"], by_gamma["0.2"]
    assert trained2.info.run_id != trained.info.run_id and view2.data.tags[tracking.VIEW_OF] == trained2.info.run_id
    assert view2.data.metrics == trained2.data.metrics and trained2.data.tags[tracking.KEY_ID] == view2.data.tags[tracking.KEY_ID]

    # the experiment opens on its runs (a classic ML experiment, with a description); the sweep's ready links name them
    from raco_bench.sweeps.registry import register_selected
    from raco_bench.sweeps.runner import sweep_description, ui_links

    experiment = c.get_experiment(exp)
    assert experiment.tags[tracking.EXPERIMENT_KIND] == "custom_model_development"
    tracking.get_or_create_experiment(uri, spec.experiment, sweep_description(spec))
    description = c.get_experiment(exp).tags[tracking.DESCRIPTION]
    assert "top-level runs named like 'raco-dp eps=1 gamma=0.05" in description and "<" not in description  # the UI renders <…> as HTML
    register_selected(uri, exp, spec, sels)
    links = ui_links(uri, exp, spec)
    assert links[0].startswith(f"[sweep] MLflow UI (start `mlflow ui --backend-store-uri {uri}`")
    at = [line for line in links if line.startswith("  phase 2 at gamma ")]
    assert [line.split(" (")[0] for line in at] == ["  phase 2 at gamma 0.1", "  phase 2 at gamma 0.2"] and all("(1 runs)" in x for x in at)
    assert all(f"http://127.0.0.1:5000/#/experiments/{exp}/runs?workflowType=machine_learning&searchFilter=" in x for x in at)
    assert "tags.gamma%20%3D%20%270.1%27" in at[0]
    compare = [line for line in links if line.startswith("    compared: ")]
    assert len(compare) == 2 and trained2.info.run_id in compare[0] and view2.info.run_id in compare[1]
    models = [line for line in links if line.startswith("  registry: ")]
    assert [m.split(": ")[1] for m in models] == [f"sgd.eps=inf.gamma=0.1.{spec.experiment}", f"sgd.eps=inf.gamma=0.2.{spec.experiment}"]
    assert all("/#/models/sgd.eps%3Dinf.gamma%3D0." in m for m in models)


def _results(spec: SweepSpec, n_configs: int, seeds: int) -> list[dict]:
    rng = np.random.default_rng(0)
    return [{"method": "raco-dp", "epsilon": 1.0, "gamma": 0.05, "config_id": c, "seed": s, "params": {"lr": 0.01 * (c + 1)},
             "val_accuracy": float(rng.uniform(0.7, 0.85)), "val_max_constraint": float(rng.uniform(0, 0.1)),
             "test_accuracy": float(rng.uniform(0.7, 0.85)), "test_max_constraint": float(rng.uniform(0, 0.1)), "epsilon_spent": 0.99,
             "labels": {"privacy_notion": "record-level add/remove DP", "outside_budget": "none", "randomness": "secret"}}
            for c in range(n_configs) for s in range(seeds)]


def test_phase1_configurations_become_runs_in_bulk_sortable_and_created_once(tmp_path):
    """1,000 configurations: created as runs in seconds (the rate is printed), sortable by validation accuracy in a
    search as in the UI, the mean over seeds exact, the winner tagged; a second call creates none; over the limit,
    none is created and the parent says why."""
    spec = SweepSpec(dataset="adult", epsilons=(1.0,), gammas=(0.05,), methods=("raco-dp",), n_configs=1000, phase1_seeds=2)
    uri, exp = _store(tmp_path, spec)
    parent = tracking.get_or_create_parent(uri, exp, spec.sweep_id, 1, {"experiment": spec.experiment})
    results = _results(spec, 1000, 2)
    sels = [Selection("raco-dp", 1.0, 0.05, 7, {"lr": 0.08}, 0.8, 0.05, 900, 1000)]
    started = time.perf_counter()
    assert log_configuration_runs(uri, exp, spec, parent, results, sels) == 1000
    seconds = time.perf_counter() - started
    print(f"1,000 configuration runs in {seconds:.1f}s ({1000 * seconds / 1000:.1f} ms each)")
    query = f"tags.`{tracking.KIND}` = 'configuration'"
    runs = tracking.search_all(uri, [exp], query, order_by=["metrics.val_accuracy DESC"])
    assert len(runs) == 1000
    accuracies = [r.data.metrics["val_accuracy"] for r in runs]
    assert accuracies == sorted(accuracies, reverse=True)
    frame = pd.DataFrame(results).groupby("config_id")["val_accuracy"].agg(["mean", "std"])
    best = runs[0]
    cid = int(best.data.tags["config_id"])
    assert best.data.metrics["val_accuracy"] == pytest.approx(frame.loc[cid, "mean"])
    assert best.data.metrics["val_accuracy_sd"] == pytest.approx(frame.loc[cid, "std"])
    assert best.data.params == {"lr": str(0.01 * (cid + 1))} and best.data.tags["mlflow.parentRunId"] == parent
    (won,) = tracking.search_all(uri, [exp], query + " and tags.selected_for_gamma = '0.05'")
    assert won.data.tags["config_id"] == "7" and won.info.run_name == "raco-dp eps=1 gamma=0.05 config=7 (mean of 2 seeds)"
    assert all(r.info.status == "FINISHED" for r in runs)
    assert best.data.tags["privacy_notion"] == "record-level add/remove DP" and best.data.tags["outside_budget"] == "none"
    assert log_configuration_runs(uri, exp, spec, parent, results, sels) == 0  # a resumed sweep: nothing twice
    tracking.set_status(uri, won.info.run_id, "RUNNING")  # a creation the killed driver did not finish
    assert log_configuration_runs(uri, exp, spec, parent, results, sels) == 1  # created anew, once
    again = tracking.search_all(uri, [exp], query + " and tags.selected_for_gamma = '0.05'")
    assert len(again) == 1 and again[0].info.status == "FINISHED" and again[0].info.run_id != won.info.run_id
    assert tracking.client(uri).get_run(parent).data.tags[CONFIG_RUNS_TAG] == "1000"
    other = SweepSpec(dataset="adult", epsilons=(1.0,), gammas=(0.05,), methods=("raco-dp",), n_configs=10, phase1_seeds=2, sample_seed=1)
    parent2 = tracking.get_or_create_parent(uri, exp, other.sweep_id, 1, {})
    assert log_configuration_runs(uri, exp, other, parent2, _results(other, 10, 2), [], limit=5) == 0
    assert "exceed the limit of 5" in tracking.client(uri).get_run(parent2).data.tags[CONFIG_RUNS_TAG]


def test_configuration_records_mark_failed_metrics_as_absent():
    spec = SweepSpec(dataset="adult", epsilons=(1.0,), gammas=(0.05,), methods=("raco-dp",), n_configs=1, phase1_seeds=2)
    results = _results(spec, 1, 2)
    results[1]["val_accuracy"] = math.nan  # a diverged seed
    (record,) = configuration_records(spec, "p", results, []).values()
    assert record.metrics["val_accuracy"] == results[0]["val_accuracy"] and math.isnan(record.metrics["val_accuracy_sd"])
    assert record.tags["selected_for_gamma"] == "no" and record.metrics["seeds"] == 2


def test_the_post_processed_predictor_loads_with_a_group_column(tmp_path):
    """DP post-processing's model: input = features + group, probability_1 = the table at (group, base prediction),
    prediction a draw from it; labelled as randomised and using the group; refused without the group column."""
    import mlflow

    from raco_bench.tracking import model as mlflow_model

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    exp = tracking.get_or_create_experiment(uri, "pp")
    run = tracking.client(uri).create_run(exp)
    weights = {"weight": np.array([[1.0, 0.0], [-1.0, 0.0]]), "bias": np.zeros(2), "postprocess": np.array([[0.0, 1.0], [0.25, 0.75]])}
    path = tmp_path / "weights.npz"
    np.savez(path, **weights)
    mlflow_model.log_model(uri, run.info.run_id, path, ["x0", "x1"], 2, name="dp-postprocess")
    (logged,) = tracking.client(uri).search_logged_models([exp])
    assert logged.name == "dp-postprocess" and "uses the group at prediction time" in logged.tags["predictor"]
    with tracking.fluent_uri(uri):
        model = mlflow.pyfunc.load_model(f"models:/{logged.model_id}")
    assert model.metadata.signature.inputs.input_names() == ["x0", "x1", "group"]
    x = pd.DataFrame({"x0": [-1.0, 1.0, -1.0, 1.0] * 500, "x1": 0.0, "group": [0, 0, 1, 1] * 500})
    out = model.predict(x)
    # base prediction: class 1 when x0 < 0; P(Y=1) = table[group, base]
    np.testing.assert_allclose(out["probability_1"][:4], [1.0, 0.0, 0.75, 0.25])
    assert out["prediction"][x["group"] == 0].tolist() == [1, 0] * 500  # probabilities 0 and 1: deterministic
    drawn = out["prediction"][(x["group"] == 1) & (x["x0"] < 0)].mean()
    assert 0.68 < drawn < 0.82  # a draw with probability 0.75 (500 rows: 5 sd ≈ 0.1)
    with pytest.raises(Exception, match="group"):
        model.predict(x.drop(columns=["group"]))


def test_registering_a_model_works_with_the_store_outside_the_working_directory(tmp_path, monkeypatch):
    """MLflow's registry resolves a models:/ source through the process-wide tracking URI: registration must point it at
    the sweep's store (a sweep run with --tracking-uri elsewhere than ./mlflow.db failed here), then put it back."""
    import os

    from raco_bench.tracking import model as mlflow_model

    store = tmp_path / "store"
    store.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = f"sqlite:///{store / 'mlflow.db'}"
    exp = tracking.get_or_create_experiment(uri, "registry")
    run = tracking.client(uri).create_run(exp)
    np.savez(tmp_path / "w.npz", weight=np.ones((2, 3)), bias=np.zeros(2))
    mlflow_model.log_model(uri, run.info.run_id, tmp_path / "w.npz", ["a", "b", "c"], 2, name="raco-dp")
    version = tracking.register_model(uri, "exp.raco-dp.eps=1.gamma=0.05", run.info.run_id, {"seed": "1000"}, "d", {"method": "raco-dp"}, "m")
    assert str(version) == "1" and not (elsewhere / "mlflow.db").exists() and "MLFLOW_TRACKING_URI" not in os.environ
    assert str(tracking.register_model(uri, "exp.raco-dp.eps=1.gamma=0.05", run.info.run_id, {}, "d", {}, "m")) == "1"  # once
