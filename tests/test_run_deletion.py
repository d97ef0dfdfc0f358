"""Deleting a run removes what it recorded from the store (raco_bench/tracking: ``delete_run``; docs/privacy.md, "The
store's ε"). MLflow's own delete only marks a run deleted: its metrics stay readable, so a sweep resumed without its key
file, which deletes the attempt trained under the other key and trains it anew, left two independent trainings of one
configuration in the store. Here, on a real SQLite store: no row of any table holds the deleted run's id, its artifacts
and its logged model's are gone, and the run beside it is untouched; on an SQLite that does not zero deleted content
(upstream's default, forced here), neither the database file nor its write-ahead log holds the deleted run's bytes; its
registered model versions go with it; and a resume under a new key deletes the old attempt's incomplete runs before it
trains."""

from __future__ import annotations

import sqlite3
import sys
from contextlib import closing, contextmanager
from pathlib import Path

import numpy as np
import pytest

from raco_bench import tracking
from raco_bench.tracking.model import log_model

sys.path.insert(0, str(Path(__file__).parent))
from mutants import load_mutant  # noqa: E402
from planted_bugs import DELETION_BUGS  # noqa: E402

DATASET = tracking.DatasetRecord(name="adult", digest="0123abcd", source="catalog:adult", profile={"train": 10}, columns=("x0", "x1"))


def recorded_run(uri: str, exp: str, tmp_path: Path, tags: dict[str, str] | None = None, name: str = "run") -> str:
    """A run with what a configuration's run records: curves, params, tags, an artifact, a dataset input, a pyfunc model."""
    run_id = tracking.create_run(uri, exp, name, tags)
    live = [("eval/val_accuracy", 0.5 + 0.01 * t, t) for t in range(0, 50, 5)]
    c = tracking.client(uri)
    from mlflow.entities import Metric

    c.log_batch(run_id, metrics=[Metric(k, v, 0, s) for k, v, s in live], params=[])
    c.log_param(run_id, "lr", "0.123")
    tracking.log_text(uri, run_id, "per-step curves of a leaked attempt", "curves.txt")
    tracking.log_dataset(uri, run_id, DATASET)
    tmp_path.mkdir(parents=True, exist_ok=True)
    weights = tmp_path / f"{name}.npz"
    np.savez(weights, weight=np.ones((2, 2), dtype=np.float32), bias=np.zeros(2, dtype=np.float32))
    log_model(uri, run_id, weights, ["x0", "x1"], 2)
    return run_id


def rows_holding(db: Path, value: str) -> list[str]:
    """Every (table, column) of the SQLite file with a cell that holds ``value``."""
    con = sqlite3.connect(db)
    try:
        out = []
        for (table,) in con.execute("select name from sqlite_master where type = 'table'"):
            for column in [r[1] for r in con.execute(f"pragma table_info('{table}')")]:
                n = con.execute(f"select count(*) from '{table}' where cast(\"{column}\" as text) like ?", (f"%{value}%",)).fetchone()[0]
                if n:
                    out.append(f"{table}.{column}: {n}")
        return out
    finally:
        con.close()


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One real SQLite store for the module (creating its tables takes seconds); each test adds runs of its own."""
    db = tmp_path_factory.mktemp("deletion") / "mlflow.db"
    uri = f"sqlite:///{db}"
    return uri, db, tracking.get_or_create_experiment(uri, "deletion")


def check_deleted_run_leaves_nothing(store, tmp_path) -> None:
    """A recorded run deleted beside another: none of its rows, artifacts or model files remain; the other's all do."""
    uri, db, exp = store
    victim = recorded_run(uri, exp, tmp_path, name="victim")
    kept = recorded_run(uri, exp, tmp_path, name="kept")
    victim_models = [m.artifact_location for m in tracking.logged_models(uri, exp, victim)]
    victim_artifacts = tracking.get_run(uri, victim).info.artifact_uri
    assert rows_holding(db, victim) and victim_models  # recorded, before

    tracking.delete_run(uri, victim)

    assert rows_holding(db, victim) == []
    for location in [victim_artifacts, *victim_models]:
        folder = Path(location.removeprefix("file://"))
        assert not folder.exists() or not any(folder.rglob("*")), f"{folder} still holds files"
    from mlflow.entities import ViewType

    c = tracking.client(uri)
    assert victim not in {r.info.run_id for r in c.search_runs([exp], run_view_type=ViewType.ALL)}
    assert [m.value for m in c.get_metric_history(kept, "eval/val_accuracy")] == pytest.approx([0.5 + 0.01 * t for t in range(0, 50, 5)])
    assert tracking.logged_models(uri, exp, kept) and tracking.read_artifact(uri, kept, "curves.txt") is not None
    assert rows_holding(db, DATASET.digest)  # the dataset record (public facts) stays for the run that keeps it
    assert rows_holding(db, kept)


def check_resume_under_another_key(store, tmp_path) -> None:
    """A pack run an attempt under another key left incomplete (a sweep resumed without its key file) is deleted with its
    data and created anew, and nothing of the first attempt is left for a reader of the store."""
    uri, db, exp = store
    parent = tracking.create_run(uri, exp, "parent")
    pack = {"pack_key": f"pack-{tmp_path.name}", "sweep_id": "s", "phase": 1, "method": "dp-sgd",
            "members": [{"experiment": "deletion"}, {"experiment": "deletion"}]}
    first, done = tracking.get_or_create_pack_run(uri, exp, parent, pack, key="key-one")
    assert done is None
    tracking.client(uri).log_metric(first, "eval/val_accuracy", 0.61, step=10)
    tracking.log_text(uri, first, "first attempt's curves", "curves.txt")
    second, done = tracking.get_or_create_pack_run(uri, exp, parent, pack, key="key-two")
    assert second != first and done is None
    assert rows_holding(db, first) == []
    assert tracking.get_run(uri, second).data.tags[tracking.KEY_ID] == "key-two"


@contextmanager
def sqlite_without_zeroing():
    """Every SQLite connection opened in the block starts with ``secure_delete`` off, as SQLite's own builds have it (this
    machine's library has it on): what the suite deletes must go whatever the library's default."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    def off(dbapi_connection, record) -> None:
        dbapi_connection.execute("PRAGMA secure_delete = OFF")

    event.listen(Engine, "connect", off)
    try:
        yield
    finally:
        event.remove(Engine, "connect", off)


def check_deleted_bytes_leave_the_files(store, tmp_path) -> None:
    """A run with a long curve and a param, deleted on a fresh store whose SQLite does not zero deleted content: the raw
    bytes of mlflow.db and of its write-ahead log hold neither its metric key, nor its param, nor its id."""
    from mlflow.entities import Metric

    root = tmp_path / "unzeroed"
    root.mkdir(parents=True)
    db = root / "mlflow.db"
    uri = f"sqlite:///{db}"
    with closing(sqlite3.connect(store[1])) as src, closing(sqlite3.connect(db)) as dst:
        src.backup(dst)  # the module's store, its tables made (seconds saved), opened below under another URI: fresh connections
    marker, param = "eval/curve_of_the_deleted_attempt", "param_of_the_deleted_attempt"
    with sqlite_without_zeroing():
        exp = tracking.get_or_create_experiment(uri, "unzeroed")
        victim = tracking.create_run(uri, exp, "victim")
        c = tracking.client(uri)
        c.log_batch(victim, metrics=[Metric(marker, 0.5 + 1e-3 * t, 0, t) for t in range(2000)], params=[])
        c.log_param(victim, param, "0.123456789")
        kept = tracking.create_run(uri, exp, "kept")
        c.log_batch(kept, metrics=[Metric("eval/kept", 0.1, 0, t) for t in range(10)], params=[])
        assert marker.encode() in b"".join(f.read_bytes() for f in root.glob("mlflow.db*"))  # written, before
        tracking.delete_run(uri, victim)
    for f in sorted(root.glob("mlflow.db*")):
        raw = f.read_bytes()
        found = [what for what in (marker, param, victim) if what.encode() in raw]
        assert not found, f"{f.name} still holds the deleted run's {found}"
    assert [m.value for m in c.get_metric_history(kept, "eval/kept")] == [0.1] * 10


def check_registered_versions_go(store, tmp_path) -> None:
    """A run registered in the model registry: deleting it deletes its version's tags, description and link to it."""
    uri, db, exp = store
    victim = recorded_run(uri, exp, tmp_path, name="registered")
    name = f"dp-sgd.eps=1.gamma=none.{tmp_path.name}"
    version = tracking.register_model(uri, name, victim, {"seed": "7", "marker": "tag-of-the-deleted-run"},
                                      "test accuracy 0.8765 of the deleted run", {"method": "dp-sgd"}, "a registered model")
    assert version is not None and rows_holding(db, "tag-of-the-deleted-run") and rows_holding(db, "0.8765 of the deleted run")
    tracking.delete_run(uri, victim)
    assert rows_holding(db, victim) == [] and rows_holding(db, "tag-of-the-deleted-run") == [] and rows_holding(db, "0.8765 of the deleted run") == []
    c = tracking.client(uri)
    assert not [v for v in c.search_model_versions(f"name = '{name}'") if v.current_stage != "Deleted_Internal"]


def check_other_key_runs_dropped_up_front(store, tmp_path) -> None:
    """Before a resume under a new key trains, the driver deletes the incomplete pack and configuration runs that the
    attempt under the other key left, and only those: complete runs and runs of its own key stay."""
    uri, db, exp = store
    parent = tracking.create_run(uri, exp, "parent")
    sweep = f"sweep-{tmp_path.name}"

    def pack(key: str, which: str, complete: bool) -> str:
        p = {"pack_key": f"{which}-{tmp_path.name}", "sweep_id": sweep, "phase": 2, "method": "dp-sgd", "members": [{"experiment": "deletion"}]}
        run_id, _ = tracking.get_or_create_pack_run(uri, exp, parent, p, key=key)
        if complete:
            tracking.set_tags(uri, run_id, {tracking.COMPLETE: "1"})
        return run_id

    stale, done, own = pack("old-key", "stale", False), pack("old-key", "done", True), pack("new-key", "own", False)
    trial = {"trial_key": f"trial-{tmp_path.name}", "sweep_id": sweep, "phase": 2, "dataset": "adult", "method": "dp-sgd",
             "constraint": "demographic-parity", "seed": 0, "config_id": 0, "epsilon": 1.0, "gamma": 0.1}
    child, _, _ = tracking.get_or_create_trial_run(uri, exp, parent, trial, key="old-key")
    dropped = tracking.drop_other_key_runs(uri, exp, sweep, 2, "new-key")
    assert dropped == {f"stale-{tmp_path.name}"}
    assert rows_holding(db, stale) == [] and rows_holding(db, child) == []
    assert rows_holding(db, done) and rows_holding(db, own)


CHECKS = [check_deleted_run_leaves_nothing, check_resume_under_another_key, check_deleted_bytes_leave_the_files, check_registered_versions_go,
          check_other_key_runs_dropped_up_front]


@pytest.mark.parametrize("check", CHECKS, ids=[c.__name__ for c in CHECKS])
def test_deletion(check, store, tmp_path):
    check(store, tmp_path)


@pytest.mark.parametrize("name", list(DELETION_BUGS))
def test_each_planted_deletion_bug_turns_its_checks_red(name, store, tmp_path, monkeypatch):
    bug = DELETION_BUGS[name]
    mutant = load_mutant(Path(tracking.__file__).read_text(), list(bug.edits), name, "deletion_mutant_", bug.module)
    try:
        for fn in bug.replaces or ("delete_run",):
            monkeypatch.setattr(tracking, fn, getattr(mutant, fn))
        green = []
        for i, check in enumerate(c for c in CHECKS if c.__name__ in bug.red):
            try:
                check(store, tmp_path / str(i))
                green.append(check.__name__)
            except AssertionError as exc:
                print(f"{name}: {check.__name__}: {str(exc).splitlines()[0]}")
        assert bug.red and not green, f"the planted bug {name!r} ({bug.effect}) left {green} green"
    finally:
        sys.modules.pop(mutant.__name__, None)


def check_drops_other_keys(store, module, sweep: str) -> None:
    """Accounted tuning draws its searches from the key (raco_bench/sweeps/accounted.py): before it plans, a sweep deletes the
    runs an attempt under another key trained, complete or not, with everything they recorded (``drop_other_keys``); this
    key's runs and the phase parent stay."""
    uri, db, exp = store
    parent = tracking.get_or_create_parent(uri, exp, sweep, 1, {"experiment": "deletion"})
    packs = {}
    for name, key, complete in (("first", "key-one", "1"), ("first, unfinished", "key-one", "0"), ("this", "key-two", "1")):
        pack = {"pack_key": f"{sweep} {name}", "sweep_id": sweep, "phase": 1, "method": "dp-sgd", "members": [{"experiment": "deletion"}]}
        packs[name], _ = tracking.get_or_create_pack_run(uri, exp, parent, pack, key)
        tracking.log_text(uri, packs[name], "trial_key,config_id\nabc,123\n", "configs.csv")
        tracking.set_tags(uri, packs[name], {tracking.COMPLETE: complete})
    assert module.drop_other_keys(uri, exp, sweep, 1, "key-two") == 2
    assert rows_holding(db, packs["first"]) == [] and rows_holding(db, packs["first, unfinished"]) == []
    assert rows_holding(db, packs["this"]) and rows_holding(db, parent)
    assert module.drop_other_keys(uri, exp, sweep, 1, "key-two") == 0


def test_a_resume_under_another_key_deletes_the_earlier_accounted_search(store):
    check_drops_other_keys(store, tracking, "accounted")


def test_keeping_another_keys_complete_runs_is_caught(store):
    """The planted bug: another key's complete runs kept, as a two-phase sweep keeps them (there the configurations do not
    depend on the key); under accounted tuning they are another search, and would mix with this key's."""
    edits = [('if run.data.tags.get(KIND) in ("pack", "trial") and run.data.tags.get(KEY_ID, key) != key:',
              'if run.data.tags.get(KIND) in ("pack", "trial") and run.data.tags.get(KEY_ID, key) != key and run.data.tags.get(COMPLETE) != "1":')]
    mutant = load_mutant(Path(tracking.__file__).read_text(), edits, "complete runs kept", "deletion_mutant_", "raco_bench.tracking")
    try:
        with pytest.raises(AssertionError):
            check_drops_other_keys(store, mutant, "accounted, mutant")
    finally:
        sys.modules.pop(mutant.__name__, None)
