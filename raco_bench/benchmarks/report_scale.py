"""`raco-bench bench report-scale`: how long `raco-bench report` takes on a sweep of N configurations.

It copies a finished sweep's SQLite store (and its artifacts) to a temporary directory, grows the copy
to N configurations by adding pack runs whose tables repeat the sweep's real phase-1 rows under new
trial keys, and times the report on the copy. The original store is never written. It also prints
how long writing each added pack table took (the logging cost of a pack).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
import uuid
from pathlib import Path

from raco_bench import tracking


def grow(uri: str, experiment: str, target: int) -> tuple[int, int, float]:
    """Add pack runs until the sweep holds ``target`` configurations: (configurations, packs added, seconds per pack)."""
    exp = tracking.experiment_id(uri, experiment)
    packs = tracking.completed_packs(uri, exp)
    table = tracking.pack_tables(uri, packs)
    phase1 = table[table["phase"] == 1].drop(columns=["pack_run_id"])
    parent, sweep = packs[0].data.tags["mlflow.parentRunId"], packs[0].data.tags[tracking.SWEEP_ID]
    n, added, t0 = len(table), 0, time.perf_counter()
    while n < target:
        copy = phase1.assign(trial_key=[uuid.uuid4().hex[:16] for _ in range(len(phase1))], config_id=phase1["config_id"] + 1000 * (added + 1))
        pack = {"pack_key": uuid.uuid4().hex[:16], "sweep_id": sweep, "phase": 1, "method": str(phase1["method"].iloc[0]), "members": list(copy["trial_key"])}
        run_id, _ = tracking.get_or_create_pack_run(uri, exp, parent, pack)
        with tempfile.TemporaryDirectory() as tmp:
            copy.to_csv(Path(tmp) / tracking.PACK_TABLE, index=False)
            tracking.log_trial(uri, run_id, {"configurations": len(copy)}, {}, {}, {}, {tracking.PACK_TABLE: Path(tmp) / tracking.PACK_TABLE})
        n, added = n + len(copy), added + 1
    return n, added, (time.perf_counter() - t0) / max(added, 1)


def _relocate(db: Path, old: str, new: str) -> None:
    """Point the copied store's artifact locations at the copied artifacts, so nothing is written to the original."""
    import sqlite3

    with sqlite3.connect(db) as con:
        con.execute("update experiments set artifact_location = replace(artifact_location, ?, ?)", (old, new))
        con.execute("update runs set artifact_uri = replace(artifact_uri, ?, ?)", (old, new))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="raco-bench bench report-scale", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--experiment", required=True, help="a finished sweep's MLflow experiment in the store")
    p.add_argument("--store", default="mlflow.db", help="its SQLite file (default ./mlflow.db); artifacts are read from ./mlartifacts next to it")
    p.add_argument("--configurations", type=int, default=10_000)
    args = p.parse_args(argv)
    store = Path(args.store).resolve()
    if not store.is_file():
        p.error(f"no SQLite store at {store}: run a sweep first or pass --store")
    from raco_bench.report.build import build_report

    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy2(store, Path(tmp) / "mlflow.db")
        if (store.parent / "mlartifacts").is_dir():
            shutil.copytree(store.parent / "mlartifacts", Path(tmp) / "mlartifacts")
        _relocate(Path(tmp) / "mlflow.db", (store.parent / "mlartifacts").as_uri(), (Path(tmp) / "mlartifacts").as_uri())
        uri = f"sqlite:///{Path(tmp) / 'mlflow.db'}"
        n, added, per_pack = grow(uri, args.experiment, args.configurations)
        t0 = time.perf_counter()
        build_report(args.experiment, uri, Path(tmp) / "report", log_to_mlflow=False)
        seconds = time.perf_counter() - t0
    print(f"report over {n} configurations ({added} pack runs added, {per_pack:.2f} s to log each): {seconds:.1f} s")
    return 0
