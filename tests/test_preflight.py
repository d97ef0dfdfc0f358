"""Pre-flight (docs/sweeps.md, "Pre-flight"): a read-only working directory, a store named by the environment, an
artifact location that cannot be written and a misspelled flag each fail before anything is trained or written, in
one line that names the path, where the setting came from and the fix. How long that takes is measured by
``raco-bench bench preflight``, never asserted here (a test that times itself fails on a loaded machine)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from raco_bench import preflight, tracking
from raco_bench.benchmarks.preflight import closed_port, read_only_folder, unprivileged, writable_again

ROOT = Path(__file__).resolve().parents[1]
ENV = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")} | {"RAY_USAGE_STATS_ENABLED": "0"}


def _run(cmd: list[str], cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=env or ENV, capture_output=True, text=True, timeout=600)  # a bound load cannot reach


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "raco_bench.cli", *args]


def _one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """The command failed with exit 2 and one error line holding every needle, without a traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    (line,) = [x for x in proc.stderr.splitlines() if "error:" in x]
    for needle in needles:
        assert needle in line, line
    return line


def test_a_read_only_working_directory_fails_before_training_sweeping_or_reporting(tmp_path):
    """train, a sweep and report in a folder the user cannot write (its store already there for report): each fails
    on the pre-flight, naming the folder, that the setting is the default, and the flag to change; nothing is written."""
    ro = tmp_path / "ro"
    ro.mkdir()
    tracking.get_or_create_experiment(f"sqlite:///{ro / 'mlflow.db'}", "raco-bench-train")  # report's existing store
    before = sorted(p.name for p in ro.iterdir())
    read_only_folder(ro)
    try:
        train = _run(unprivileged(_cli("train", "--dataset", "synthetic", "--quiet")), ro)
        _one_line_error(train, f"cannot use the tracking store sqlite:///{ro}/mlflow.db (from the default", f"{ro} is not writable",
                        "--tracking-uri")
        assert "training" not in train.stderr
        sweep = _run(unprivileged([sys.executable, str(ROOT / "sweeps" / "adult.py"), "--smoke"]), ro)
        _one_line_error(sweep, "cannot use the tracking store", "(from the default", "--tracking-uri")
        report = _run(unprivileged(_cli("report", "--experiment", "raco-bench-train")), ro)
        _one_line_error(report, "cannot write the report's folder reports/raco-bench-train (from the default", "is not writable", "--out")
        outside = _run(unprivileged(_cli("report", "--experiment", "raco-bench-train", "--out", str(tmp_path / "out"))), ro)
        _one_line_error(outside, "cannot use the tracking store", "SQLite writes its journal beside the database")
    finally:
        writable_again(ro)
    assert sorted(p.name for p in ro.iterdir()) == before and not (tmp_path / "out").exists()


def test_a_store_from_the_environment_is_named_as_such(tmp_path):
    """An unreachable server named by $MLFLOW_TRACKING_URI: the error says the URI came from that variable and to change it."""
    uri = f"http://127.0.0.1:{closed_port()}"
    proc = _run(_cli("train", "--dataset", "synthetic", "--quiet"), tmp_path, {**ENV, "MLFLOW_TRACKING_URI": uri})
    _one_line_error(proc, f"the tracking server {uri} (from $MLFLOW_TRACKING_URI) is unreachable", "change $MLFLOW_TRACKING_URI")


def test_an_experiment_whose_recorded_artifact_location_cannot_be_written_is_refused(tmp_path):
    """A store copied from elsewhere keeps each experiment's absolute artifact location: one that cannot be written (here
    under a file) is refused with the experiment named, before anything runs; a new experiment of the store passes."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    tracking.client(uri).create_experiment("copied", artifact_location=(blocker / "artifacts").as_uri())
    with pytest.raises(ValueError, match=r"cannot write the artifact location .*not-a-folder/artifacts \(from experiment 'copied' of .*"
                                         r"is a file, not a folder.*--experiment NAME"):
        preflight.check_store(uri, "--tracking-uri", "copied")
    preflight.check_store(uri, "--tracking-uri", "another")  # a new experiment: beside the database, writable


def test_unwritable_names_the_nearest_existing_folder(tmp_path):
    """A folder to be created passes when the nearest existing one above it can be written; a file in the way is named."""
    assert preflight.unwritable(tmp_path / "a" / "b" / "c") is None
    (tmp_path / "f").write_text("")
    assert preflight.unwritable(tmp_path / "f" / "sub") == f"{tmp_path / 'f'} is a file, not a folder"
    assert preflight.setting(None, "--out", "reports/x", env="RACO_TEST_UNSET_VARIABLE").origin == "the default"
    assert str(preflight.setting("y", "--out", "reports/x")) == "y (from --out)"


@pytest.mark.parametrize("command", ["train", "sweep"])
def test_a_misspelled_flag_gets_its_commands_usage_and_a_suggestion(tmp_path, command):
    """``--epsilom 1``: the usage of the command it was given to (not the top-level one) and the flag it meant."""
    cmd = _cli("train", "--epsilom", "1") if command == "train" else [sys.executable, str(ROOT / "sweeps" / "adult.py"), "--epsilom", "1"]
    proc = _run(cmd, tmp_path)
    assert proc.returncode == 2 and "unrecognized arguments: --epsilom 1 (did you mean --epsilon" in proc.stderr, proc.stderr
    if command == "train":
        assert proc.stderr.startswith("usage: raco-bench train ") and "raco-bench train: error" in proc.stderr
    assert not (tmp_path / "mlflow.db").exists()
