"""A sweep never reports work it did not do (docs/sweeps.md, "Interrupts, failures and --resume").

Real sweeps on an embedded local Ray and a real SQLite MLflow store: Ctrl-C (SIGINT to the driver) in phase 1,
then ``--resume``; an earlier phase-2 record for a configuration that is not the winner; a pack worker killed
mid-pack (SIGKILL), retried from its checkpoint; an unreachable tracking store. Each test stops only the processes
its own sweep started.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import stores

from raco_bench import tracking
from raco_bench.benchmarks.preflight import SilentServer, closed_port
from raco_bench.sweeps import SweepSpec
from raco_bench.sweeps.listing import list_sweeps

ROOT = Path(__file__).resolve().parents[1]
METHODS = ("raco-dp", "dp-fermi", "sgda")


EMBEDDED_RAY = {"RAY_ADDRESS": None, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1"}  # None: unset


def _env(tmp: Path) -> dict:
    """An embedded local Ray for each sweep (never a cluster the environment names)."""
    return {k: v for k, v in {**os.environ, **EMBEDDED_RAY}.items() if v is not None}


def _sweep(cwd: Path, *args: str, wait: bool = True):
    cmd = [sys.executable, str(ROOT / "sweeps" / "adult.py"), *args]
    if wait:
        return subprocess.run(cmd, cwd=cwd, env=_env(cwd), capture_output=True, text=True, timeout=900)
    return subprocess.Popen(cmd, cwd=cwd, env=_env(cwd), start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _uri(cwd: Path) -> str:
    return f"sqlite:///{cwd / 'mlflow.db'}"


def _experiment(cwd: Path, name: str) -> str | None:
    if not (cwd / "mlflow.db").exists():
        return None
    exp = tracking.client(_uri(cwd)).get_experiment_by_name(name)
    return None if exp is None else exp.experiment_id


def _complete_packs(cwd: Path, name: str, phase: int | None = None) -> list:
    exp = _experiment(cwd, name)
    return [] if exp is None else tracking.completed_packs(_uri(cwd), exp, phase=phase)


def _recorded_packs(cwd: Path, phase: int) -> int:
    """Complete packs of a phase, read straight from the SQLite file and read-only, for polling a running sweep: an
    MLflow client opened while the starting sweep still creates the store's tables would create them too, racing the
    sweep's own schema migrations (seen under load: the sweep never got further)."""
    db = cwd / "mlflow.db"
    if not db.exists():
        return 0
    con = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
    try:
        rows = con.execute("select t.run_uuid, t.key, t.value from tags t join runs r on r.run_uuid = t.run_uuid "
                           "where r.lifecycle_stage = 'active' and t.key in (?, ?, ?)", (tracking.KIND, tracking.COMPLETE, tracking.PHASE)).fetchall()
    except sqlite3.OperationalError:  # no tables yet
        return 0
    finally:
        con.close()
    runs: dict[str, dict] = {}
    for run, key, value in rows:
        runs.setdefault(run, {})[key] = value
    return sum(t == {tracking.KIND: "pack", tracking.COMPLETE: "1", tracking.PHASE: str(phase)} for t in runs.values())


def _wait(condition, timeout: float = 300.0, what: str = "", proc: subprocess.Popen | None = None) -> None:
    """Until ``condition()``; fails at once, with its console, if the sweep ``proc`` ends first."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if condition():
                return
        except Exception:  # noqa: BLE001 - the store may be mid-write
            pass
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the sweep ended (exit {proc.returncode}) before {what}:\n{proc.communicate()[0][-4000:]}")
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def _parents(cwd: Path, name: str) -> dict[int, str]:
    exp = _experiment(cwd, name)
    runs = tracking.search_all(_uri(cwd), [exp], f"tags.`{tracking.KIND}` = 'phase'")
    return {int(r.data.tags[tracking.PHASE]): r.info.status for r in runs}


def _table(cwd: Path, name: str, phase: int) -> pd.DataFrame:
    runs = _complete_packs(cwd, name, phase)
    return tracking.pack_tables(_uri(cwd), runs).set_index("trial_key").sort_index()


def _selected(cwd: Path, name: str) -> list[dict]:
    exp = _experiment(cwd, name)
    c = tracking.client(_uri(cwd))
    (parent,) = tracking.search_all(_uri(cwd), [exp], f"tags.`{tracking.KIND}` = 'phase' and tags.`{tracking.PHASE}` = '2'")
    rows = json.loads(Path(c.download_artifacts(parent.info.run_id, "selected_configurations.json", str(cwd))).read_text())
    return [{k: r[k] for k in ("method", "epsilon", "gamma", "config_id", "phase2_runs", "test_accuracy_mean")} for r in rows]


SMOKE = ["--smoke", "--max-steps", "100", "--methods", *METHODS, "--pack-size", "1"]
SMOKE_NAME = SweepSpec(dataset="adult").smoke().experiment
CHECKPOINTED = ["--smoke", "--methods", "raco-dp", "--n-configs", "8", "--max-steps", "1500", "--phase2-seeds", "1", "--pack-size", "16",
                "--pack-checkpoint-s", "1"]  # phase 1 is one pack of 16 configurations, checkpointed every second

# What the two tests below compare with: the same sweeps, never interrupted, made in the background from the start of
# the session (tests/stores.py), each under a secret key that the test's own sweep then uses too: the same draws.
UNINTERRUPTED = stores.background("uninterrupted_sweep", [sys.executable, str(ROOT / "sweeps" / "adult.py"), *SMOKE, "--key-file", "{key}"],
                                  env=EMBEDDED_RAY, key=os.urandom(32).hex())
NEVER_KILLED = stores.background("never_killed_sweep", [sys.executable, str(ROOT / "sweeps" / "adult.py"), *CHECKPOINTED, "--key-file", "{key}"],
                                 env=EMBEDDED_RAY, key=os.urandom(32).hex())


@pytest.fixture
def uninterrupted_sweep() -> stores.Background:
    return UNINTERRUPTED.start()


@pytest.fixture
def never_killed_sweep() -> stores.Background:
    return NEVER_KILLED.start()


@pytest.mark.slow
def test_an_interrupted_sweep_fails_loudly_and_resume_converges_to_the_uninterrupted_end_state(tmp_path, uninterrupted_sweep, started):
    """Ctrl-C in phase 1: exit 130, phase-1 parent KILLED, no phase 2, one line naming --resume; a rerun without
    --resume is refused; --resume (after an earlier phase-2 record for a configuration that is not a winner) trains
    what phase 1 lacks and every winner without a phase-2 record, with the selections and phase-2 results of an
    uninterrupted sweep and no duplicate; a second --resume trains nothing."""
    run = tmp_path / "interrupted"
    run.mkdir()
    key = ["--key-file", str(uninterrupted_sweep.key)]  # the uninterrupted sweep's secret key: the same draws, so the same results

    proc = _sweep(run, *SMOKE, *key, wait=False)
    started.append(proc)
    _wait(lambda: _recorded_packs(run, 1) >= 2, what="two phase-1 packs", proc=proc)
    os.kill(proc.pid, signal.SIGINT)  # Ctrl-C to the driver only
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 130, out[-3000:]
    assert "phase 1 was interrupted" in out and any("--resume" in line for line in out.splitlines()[-3:])
    recorded = len(_complete_packs(run, SMOKE_NAME, 1))
    assert 2 <= recorded < 12 and _parents(run, SMOKE_NAME) == {1: "KILLED"}  # no phase 2 at all
    assert "[sweep] phase 2" not in out and "[phase 2]" not in out

    again = _sweep(run, *SMOKE, *key)
    assert again.returncode == 2 and "continue it with the same command and --resume" in again.stderr
    (listed,) = list_sweeps(_uri(run))  # `raco-bench sweeps`: what the store holds, not what was scheduled
    assert listed["state"] == "KILLED" and listed["phases"]["1"] == {"state": "KILLED", "recorded": recorded, "planned": 12}

    ref = uninterrupted_sweep.folder()
    expected = _selected(ref, SMOKE_NAME)
    loser = _plant_stale_phase2_record(run, ref, expected, uninterrupted_sweep.key)

    resumed = _sweep(run, *SMOKE, *key, "--resume")
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert f"{12 - recorded} configurations to train ({recorded} already recorded)" in resumed.stdout
    phase2 = int(re.search(r"\[sweep\] phase 2: (\d+) configurations to train", resumed.stdout).group(1))
    assert re.search(rf"\n{12 - recorded + phase2} configurations trained in \d+s \([\d.]+ configurations/minute\); {recorded} were recorded "
                     "before this command and are not counted", resumed.stdout), resumed.stdout[-2000:]  # the rate counts what it trained
    assert _parents(run, SMOKE_NAME) == {1: "FINISHED", 2: "FINISHED"}
    (listed,) = list_sweeps(_uri(run))
    assert listed["state"] == "FINISHED" and listed["phases"]["1"]["recorded"] == 12 and "--resume" not in listed["command"]
    assert _selected(run, SMOKE_NAME) == expected  # the same winners, each with all its phase-2 seeds
    for phase in (1, 2):
        got, want = _table(run, SMOKE_NAME, phase), _table(ref, SMOKE_NAME, phase)
        if phase == 2:
            got = got.drop(index=loser)  # the earlier record stays, and the summary ignores it
        assert list(got.index) == list(want.index)  # every configuration once
        pd.testing.assert_series_equal(got["test_accuracy"], want["test_accuracy"])

    from dataclasses import replace

    sweep_id = replace(SweepSpec(dataset="adult", methods=METHODS).smoke(), max_steps=100).sweep_id
    for again in (_sweep(run, *SMOKE, *key, "--resume"), _sweep(run, *SMOKE, *key)):  # a complete sweep: resumed, or run again
        assert again.returncode == 0 and (f"nothing to train: sweep {sweep_id} is complete (use a new --tracking-uri or --experiment for a "
                                          "fresh sweep)") in again.stdout, again.stdout[-2000:]
        assert "configurations to train" not in again.stdout and "Selected configurations" in again.stdout  # its logged summary


def _plant_stale_phase2_record(run: Path, ref: Path, winners: list[dict], key: Path) -> str:
    """A complete phase-2 record in ``run`` for a configuration that is not a winner (what an earlier phase 2, run from
    an incomplete selection, left): the sweep must train the true winners anyway and report only them."""
    from raco_bench.sweeps.plan import make_packs, make_trial
    from raco_bench.sweeps.trial import execute_pack

    spec = SweepSpec(dataset="adult", methods=METHODS).smoke()
    from dataclasses import replace

    spec = replace(spec, max_steps=100)
    chosen = {(w["method"], w["config_id"]) for w in winners}
    table = _table(ref, SMOKE_NAME, 1)
    row = next(r for _, r in table.iterrows() if r["method"] == "sgda" and (r["method"], int(r["config_id"])) not in chosen)
    trial = make_trial(spec, 2, "sgda", None, None, int(row["config_id"]), json.loads(row["params"]), 1000)
    uri = _uri(run)
    exp = _experiment(run, SMOKE_NAME)
    parent = tracking.get_or_create_parent(uri, exp, spec.sweep_id, 2, {})
    tracking.set_status(uri, parent, "KILLED")
    (pack,) = make_packs([trial], 1)
    execute_pack(pack, uri, exp, parent, key=bytes.fromhex(key.read_text().strip()))
    return trial["trial_key"]


@pytest.mark.slow
def test_a_pack_worker_killed_mid_pack_is_retried_from_its_checkpoint_with_identical_results(tmp_path, never_killed_sweep, started):
    """SIGKILL of the Ray worker that trains a pack, after its first checkpoint: Tune retries the pack, the retry
    continues from the checkpoint (its run says so), and every configuration's results equal those of a sweep that
    was never killed."""
    run = tmp_path / "killed"
    run.mkdir()
    name = SweepSpec(dataset="adult").smoke().experiment
    proc = _sweep(run, *CHECKPOINTED, "--key-file", str(never_killed_sweep.key), wait=False)
    started.append(proc)
    checkpoints = lambda: list((run / "ray_results").rglob("pack_state.pt"))  # noqa: E731
    _wait(lambda: checkpoints(), what="the pack's first checkpoint", proc=proc)
    exp = _experiment(run, name)
    (pack,) = tracking.search_all(_uri(run), [exp], f"tags.`{tracking.KIND}` = 'pack'")
    os.kill(int(pack.data.tags["worker_pid"]), signal.SIGKILL)  # the worker this test's sweep started
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-4000:]
    (pack,) = _complete_packs(run, name, 1)
    assert pack.data.tags["attempt_resumed_from_checkpoint"] == "yes"
    got, want = _table(run, name, 1), _table(never_killed_sweep.folder(), name, 1)
    assert list(got.index) == list(want.index)
    for col in ("val_accuracy", "val_max_constraint", "test_accuracy", "test_max_constraint", "steps", "epsilon_spent"):
        pd.testing.assert_series_equal(got[col], want[col])


def _holds_run(cwd: Path, run_id: str) -> bool:
    """Whether the store's file still has the run, read straight from it and read-only (the sweep writes meanwhile)."""
    con = sqlite3.connect(f"{(cwd / 'mlflow.db').as_uri()}?mode=ro", uri=True)
    try:
        return con.execute("select count(*) from runs where run_uuid = ?", (run_id,)).fetchone()[0] > 0
    finally:
        con.close()


REKEYED = ["--smoke", "--methods", "raco-dp", "--n-configs", "1", "--epsilons", "8", "--max-steps", "4000", "--phase2-seeds", "1",
           "--pack-size", "2", "--pack-checkpoint-s", "1"]  # one pack, T = 4,000 at epsilon 8: still training at its first checkpoint


@pytest.mark.slow
def test_a_resume_under_a_new_key_deletes_the_old_attempt_from_tune_storage_before_it_trains(tmp_path, started):
    """Ctrl-C once a pack has a checkpoint, then --resume without a key file (a new key): before it trains anything, the
    resume deletes the old attempt's incomplete pack run from MLflow and its trial folders from Tune's storage (the
    checkpoints hold that attempt's parameters and curves, a second training of its configurations; docs/privacy.md,
    "Threat model"), and says so. The resume is stopped there: what it trains next is any sweep's business."""
    run = tmp_path / "rekeyed"
    run.mkdir()
    proc = _sweep(run, *REKEYED, wait=False)  # no --key-file: each command draws its own key
    started.append(proc)
    states = lambda: list((run / "ray_results").rglob("pack_state.pt"))  # noqa: E731
    _wait(lambda: states(), what="the pack's first checkpoint", proc=proc)
    os.kill(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 130, out[-3000:]
    (pack,) = tracking.search_all(_uri(run), [_experiment(run, SMOKE_NAME)], f"tags.`{tracking.KIND}` = 'pack'")
    assert pack.data.tags.get(tracking.COMPLETE) != "1"
    old = {p.parent.parent for p in states()}  # its trial folders, with the old key's checkpoints and result files
    assert old and all((f / "params.json").exists() for f in old)

    resumed = _sweep(run, *REKEYED, "--resume", wait=False)
    started.append(resumed)
    _wait(lambda: not _holds_run(run, pack.info.run_id) and not any(f.exists() for f in old), what="the old attempt deleted", proc=resumed)
    os.kill(resumed.pid, signal.SIGINT)
    out, _ = resumed.communicate(timeout=300)
    assert "1 packs an attempt under another key left incomplete were deleted" in out and "(1 trial folders)" in out, out[-3000:]
    assert not any(f.exists() for f in old)
    assert not [f.name for f in run.glob("mlflow.db*") if pack.info.run_id.encode() in f.read_bytes()]  # nor a byte of it in the store


# ----------------------------------------------------------------------------------- the tracking store
@pytest.mark.parametrize("server", ["refused", "silent"])
def test_an_unreachable_store_fails_on_its_probe_before_ray_or_loading(tmp_path, server):
    """A refused or a silent tracking server: the sweep fails before Ray starts and the report before it loads
    anything, on the suite's own probe (a refused connection, or no answer within ``REACH_TIMEOUT_S``) rather than
    MLflow's client, which retries for minutes, with the fix in one line. How long that takes is measured by
    ``raco-bench bench preflight``, not asserted here: a test that times itself fails on a loaded machine."""
    silent = SilentServer() if server == "silent" else None
    uri = f"http://127.0.0.1:{silent.port if silent else closed_port()}"
    try:
        for cmd in ([sys.executable, str(ROOT / "sweeps" / "adult.py"), "--smoke", "--tracking-uri", uri],
                    [sys.executable, "-m", "raco_bench.cli", "report", "--experiment", "x", "--tracking-uri", uri],
                    [sys.executable, "-m", "raco_bench.cli", "train", "--dataset", "synthetic", "--tracking-uri", uri]):
            proc = subprocess.run(cmd, cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=600)
            assert proc.returncode == 2 and "is unreachable" in proc.stderr and "(from --tracking-uri)" in proc.stderr, proc.stderr[-2000:]
            reason = "timed out" if silent else "refused"
            assert reason in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]
            assert "training" not in proc.stderr  # train: refused before its first step
            assert not (tmp_path / "ray_results").exists() and not (tmp_path / "mlflow.db").exists()
    finally:
        if silent:
            silent.close()
