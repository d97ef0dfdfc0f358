"""End-to-end training on real Adult data, and the command line."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from raco_bench.data import load_dataset
from raco_bench.training.config import RunConfig
from raco_bench.training.loop import train


def _cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "raco_bench.cli", *args], capture_output=True, text=True, **kw)


FIXED_KEY = "7a" * 32  # tests that assert a trained model's accuracy draw under a fixed secret key: the same draw every time


def _fixed_key(folder) -> str:
    path = folder / "test.key"
    path.write_text(FIXED_KEY + "\n")
    return str(path)


@pytest.mark.slow
def test_non_private_sgda_meets_demographic_parity_on_adult(adult):
    result = train(RunConfig(method="sgda", gamma=0.05, steps=1500, randomness="reproducible"), adult)  # a fixed draw: the thresholds hold
    assert result.privacy["private"] is False and math.isinf(result.privacy["epsilon_spent"])
    assert result.last["test"]["dp_gap"] <= 0.06
    assert result.last["test"]["accuracy"] >= 0.80
    unconstrained = train(RunConfig(method="sgd", steps=1500, randomness="reproducible"), adult)
    assert unconstrained.last["test"]["dp_gap"] > 0.12  # the constraint is doing the work


@pytest.mark.slow
def test_raco_dp_cli_at_epsilon_one_on_adult(tmp_path):
    out = tmp_path / "run.json"
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    proc = _cli("train", "--dataset", "adult", "--method", "raco-dp", "--constraint", "demographic-parity", "--gamma", "0.05",
                "--epsilon", "1", "--delta", "1e-5", "--seed", "0", "--json", str(out), "--tracking-uri", uri, "--key-file", _fixed_key(tmp_path),
                timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "epsilon spent" in proc.stdout and "step" in proc.stderr
    result = json.loads(out.read_text())
    p = result["privacy"]
    assert p["epsilon_spent"] <= 1.0 and p["steps"] == result["steps"] > 0
    assert p["epsilon_separate_composition_reference"] < p["epsilon_spent"]  # shared batch: separate composition understates
    assert result["last"]["test"]["accuracy"] >= 0.80
    assert result["hyperparameters"]["noise_multiplier"] > 0 and result["timing"]["ms_per_step"] > 0
    assert result["selected"] is None or "not privacy-accounted" in result["selected"]["label"]
    assert p["preprocessing"] == "public" and p["checkpoint_rule"] == "last" and p["outside_budget"] == [] and p["end_to_end"]
    assert "OUTSIDE" not in proc.stdout
    assert "train" not in result["last"] and all("train" not in e for e in result["history"])  # no exact training-set metric by default
    # the run is in MLflow as a sweep logs a configuration: tags, final metrics, step-indexed curves, weights and its model
    from raco_bench import tracking

    c = tracking.client(uri)
    (run,) = c.search_runs([c.get_experiment_by_name("raco-bench-train").experiment_id])
    tags, metrics = run.data.tags, run.data.metrics
    assert tags["method"] == "raco-dp" and tags["epsilon"] == "1.0" and tags["randomness"] == "secret" and tags["outside_budget"] == "none"
    assert tags["raco_bench.key_id"] not in (FIXED_KEY, "") and FIXED_KEY not in json.dumps(run.to_dictionary())  # a fingerprint, never the key
    assert run.info.run_name.startswith("raco-dp eps=1 gamma=0.05") and run.info.status == "FINISHED"
    assert metrics["epsilon_spent"] == pytest.approx(p["epsilon_spent"]) and "test_accuracy" in metrics and "train_accuracy" not in metrics
    curve = c.get_metric_history(run.info.run_id, "eval/val_accuracy")
    assert [m.step for m in curve] == [e["step"] for e in result["history"]]
    assert {a.path for a in c.list_artifacts(run.info.run_id)} >= {"config.json", "weights.npz", "weights_last.npz"}


def test_checkpoint_rules_and_outside_budget_labels(adult):
    """One rule per run; the reported parameters are the reported checkpoint's; the paper rules are labelled."""
    import numpy as np

    from raco_bench.data import load_dataset as load

    last = train(RunConfig(method="sgda", gamma=0.05, steps=200, eval_every=20, checkpoint="last"), adult)
    assert last.reported["step"] == 200 and last.reported["rule"] == "last" and last.privacy["outside_budget"] == []
    for k in last.final_params:
        np.testing.assert_array_equal(last.reported_params[k], last.final_params[k])
    paper = train(RunConfig(method="sgda", gamma=0.05, steps=200, eval_every=20, checkpoint="paper"), adult)
    assert any("checkpoint=paper" in o for o in paper.privacy["outside_budget"]) and not paper.privacy["end_to_end"]
    if paper.selected is not None:
        assert paper.reported["step"] == paper.selected["step"] and paper.reported["test"] == paper.selected["test"]
    zscored = load("adult", preprocessing="paper")
    run = train(RunConfig(method="raco-dp", steps=5, eval_every=5, preprocessing="paper"), zscored)
    assert any("preprocessing=paper" in o for o in run.privacy["outside_budget"]) and run.privacy["private"] and not run.privacy["end_to_end"]
    with pytest.raises(ValueError, match="preprocessing"):
        train(RunConfig(method="raco-dp", steps=5, preprocessing="paper"), adult)  # a dataset encoded otherwise is refused


@pytest.mark.parametrize(
    "args,match",
    [
        (["--set", "noise_multiplier=-1"], "noise_multiplier"),
        (["--set", "batch_size=100000"], "q = batch_size / n_train"),
        (["--epsilon", "0"], "epsilon"),
        (["--epsilon", "inf"], "infinite budget is no privacy"),
        (["--gamma", "-1"], "gamma=-1.0"),
        (["--gamma", "1.5"], "must be in [0, 1]"),
        (["--randomness", "reproducible", "--key-file", "k"], "applies only to --randomness secret"),
        (["--dataset", "mnist"], "unknown dataset"),
        (["--method", "magic"], "unknown method"),
        (["--constraint", "parity"], "unknown constraint"),
        (["--set", "nonsense=1"], "unknown setting"),
        (["--set", "noise_multiplier=0"], "zero noise gives no privacy"),
        (["--steps", "100000"], "would spend epsilon"),
        (["--method", "dp-fermi", "--set", "privacy=secret"], "privacy"),
        (["--method", "dp-fermi", "--constraint", "false-negative-rate"], "dp-fermi regularises"),
        (["--method", "dp-fermi", "--set", "privacy=sensitive-attribute", "--set", "noise_multiplier=0.5"], "spends epsilon"),
        (["--method", "dp-fermi", "--set", "count_noise=0"], "count_noise"),
        (["--preprocessing", "zscore"], "invalid choice"),
        (["--method", "dp-fermi", "--set", "laplace_scale=2"], "unknown setting"),
    ],
)
def test_cli_rejects_bad_values_before_writing(tmp_path, args, match, capsys):
    """In this process (`raco-bench` is `raise SystemExit(main())`): the exit code and stderr a shell sees, without
    starting an interpreter per case; the entry point itself runs as a subprocess in the other CLI tests."""
    from raco_bench.cli import main

    out = tmp_path / "x.json"
    try:
        code = main(["train", "--quiet", "--json", str(out), *args])
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    assert code == 2
    assert match in capsys.readouterr().err
    assert not out.exists()


def test_cli_datasets_lists_all_six_verified_and_the_generated_one():
    proc = _cli("datasets", timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line and not line.startswith((" ", "data roots"))]
    assert len(lines) == 7 and sum(" verified " in line for line in lines) == 6
    assert any(line.startswith("synthetic") and " generated " in line for line in lines)


@pytest.mark.parametrize(
    "dataset,method,constraint,sets",
    [
        ("adult", "raco-dp", "equalized-odds", {}),
        ("credit", "raco-dp", "equalized-odds", {"histogram_batch": "independent"}),
        ("heart", "raco-dp", "false-negative-rate", {"dual_update": "hard"}),
        ("acs-employment", "raco-dp", "demographic-parity", {"batch_size": "256"}),
        ("parkinsons", "raco-dp", "demographic-parity", {"model": "mlp", "batch_size": "256"}),
        ("adult", "dp-sgd", "demographic-parity", {}),
        ("adult", "dp-fermi", "equalized-odds", {}),
        ("credit", "dp-fermi", "equalized-odds", {}),
        ("acs-employment", "dp-fermi", "demographic-parity", {"batch_size": "256", "privacy": "none"}),
    ],
)
def test_variants_run_and_account(dataset, method, constraint, sets):
    cfg = RunConfig(dataset=dataset, method=method, constraint=constraint, steps=30, epsilon=9.0, eval_every=10).with_overrides(sets)
    result = train(cfg, load_dataset(dataset))
    assert result.steps == 30
    assert (0 < result.privacy["epsilon_spent"] <= 9.0) if result.privacy["private"] else math.isinf(result.privacy["epsilon_spent"])
    assert len(result.history) == 4 and 0.0 <= result.last["test"]["accuracy"] <= 1.0
    if dataset == "acs-employment":
        assert result.dataset["n_constraints"] == 18


@pytest.mark.slow
def test_dp_fermi_full_privacy_cli_at_epsilon_one_on_adult(tmp_path):
    out = tmp_path / "fermi.json"
    proc = _cli("train", "--dataset", "adult", "--method", "dp-fermi", "--epsilon", "1", "--quiet", "--json", str(out), "--no-mlflow",
                "--key-file", _fixed_key(tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert result["privacy"]["privacy_mode"] == "full" and result["privacy"]["epsilon_spent"] <= 1.0
    assert "record-level" in result["privacy"]["notion"]
    assert result["last"]["test"]["accuracy"] >= 0.78


def test_a_batch_larger_than_the_training_split_is_refused_before_loading(tmp_path, monkeypatch):
    """No data file is readable here (offline, empty root): the batch-size error proves no load was attempted."""
    from raco_bench.training.loop import prepare_run

    monkeypatch.setenv("RACO_BENCH_DATA", str(tmp_path))
    monkeypatch.setenv("RACO_BENCH_OFFLINE", "1")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for method in ("raco-dp", "dp-fermi", "dp-sgd"):
        with pytest.raises(ValueError, match=r"batch_size=50000.*training split \(28829 rows"):
            prepare_run(RunConfig(dataset="adult", method=method, params={"batch_size": 50000}))


def test_cli_version():
    from raco_bench import __version__

    proc = _cli("--version", timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip() == f"raco-bench {__version__}"
