"""Deleting a run removes what it recorded from the store (raco_bench/tracking: ``delete_run``; docs/privacy.md, "The
store's ε"). MLflow's own delete only marks a run deleted: its metrics stay readable, so a sweep resumed without its key
file, which deletes the attempt trained under the other key and trains it anew, left two independent trainings of one
configuration in the store. Here, on a real SQLite store: no row of any table holds the deleted run's id, its artifacts
and its logged model's are gone, and the run beside it is untouched."""

from __future__ import annotations

import sqlite3
import sys
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


CHECKS = [check_deleted_run_leaves_nothing, check_resume_under_another_key]


@pytest.mark.parametrize("check", CHECKS, ids=[c.__name__ for c in CHECKS])
def test_deletion(check, store, tmp_path):
    check(store, tmp_path)


@pytest.mark.parametrize("name", list(DELETION_BUGS))
def test_each_planted_deletion_bug_turns_every_check_red(name, store, tmp_path, monkeypatch):
    bug = DELETION_BUGS[name]
    mutant = load_mutant(Path(tracking.__file__).read_text(), list(bug.edits), name, "deletion_mutant_", bug.module)
    try:
        monkeypatch.setattr(tracking, "delete_run", mutant.delete_run)
        green = []
        for i, check in enumerate(CHECKS):
            try:
                check(store, tmp_path / str(i))
                green.append(check.__name__)
            except AssertionError as exc:
                print(f"{name}: {check.__name__}: {str(exc).splitlines()[0]}")
        assert not green, f"the planted bug {name!r} ({bug.effect}) left {green} green"
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
