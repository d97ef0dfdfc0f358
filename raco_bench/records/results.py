"""The one reader of recorded results: what complete packs recorded, one row per configuration, typed.

The sweep driver (selection, phase 2, ``--resume``) and the report both read a sweep through :func:`read_results`,
so a column means the same thing to both. A configuration's row comes from its pack's table (``configs.csv``,
written by :mod:`raco_bench.sweeps.trial`); a configuration recorded by two packs (a resume with another pack size)
appears once. Missing values are NaN in float columns and None in ``epsilon``, ``gamma`` and ``repeat`` (a
non-private method, a γ-free method, a run outside accounted tuning).
"""

from __future__ import annotations

import math

import pandas as pd

from raco_bench import tracking
from raco_bench.constraints.gaps import gap_keys

IDENTITY = ["trial_key", "run_id", "pack_run_id", "experiment", "sweep_id", "start_time", "phase", "config_id"]
# then the run settings that are columns (RunConfig's fields with column=True, raco_bench.training.config.run_fields), then HEAD
HEAD = ["privacy_notion", "outside_budget", "style", "epsilon_spent", "steps", "ms_per_step", "test_accuracy", "test_error",
        "test_max_constraint"]  # then every registered gap metric's test column (raco_bench.constraints.gaps), then TAIL
TAIL = [
    "test_worst_group_loss", "val_accuracy", "val_max_constraint", "noisy_val_accuracy", "noisy_val_max_constraint", "train_max_constraint",
    "params", "calibrated", "tuning", "tuning_note", "repeat", "epsilon_end_to_end", "skipped",
    "test_top_class_share", "test_constant_accuracy", "test_rows", "passes",  # what the health verdict reads (raco_bench.training.health)
    "batch_stream", "key_id",  # the batches a configuration drew: its stream (empty: its own) under its key's fingerprint (the store's ε)
]
OPTIONAL = ("epsilon", "gamma", "repeat", "epsilon_end_to_end", "constraint_spec")  # None when absent
INTEGER = ("phase", "config_id", "seed")
TEXT_DEFAULTS = {"tuning": "not-accounted", "outside_budget": "", "privacy_notion": "", "skipped": "", "batch_stream": "",
                 "key_id": ""}  # for an empty cell
ABSENT = {"outside_budget": "unknown"}  # a store older than the column: what the run read outside the budget is unknown


def columns() -> list[str]:
    """The columns of :func:`read_results`: :data:`IDENTITY`, the run settings a pack table records (RunConfig's column
    fields, so that a new one is read without a change here), :data:`HEAD`, ``test_<gap>`` for every registered gap metric,
    :data:`TAIL` (read at call time: a family registered in a test adds its gap here too)."""
    from raco_bench.training.config import run_fields

    return IDENTITY + list(run_fields("column")) + HEAD + [f"test_{key}" for key in gap_keys()] + TAIL


def sweep_latest(packs: list) -> dict[str, int]:
    """The sweeps of complete pack runs: sweep id -> start time (ms) of its latest pack. The sweep with the largest is the
    one that trained last: a sweep resumed after others ran counts from its resume, so the report of "the most recent
    sweep" after a resume is the resumed one (by its first pack it would be another, later-started sweep)."""
    out: dict[str, int] = {}
    for run in packs:
        sweep = run.data.tags.get(tracking.SWEEP_ID, "")
        out[sweep] = max(out.get(sweep, run.info.start_time), run.info.start_time)
    return out


def read_results(uri: str, experiment_id: str, sweep_id: str | None = None, phase: int | None = None) -> pd.DataFrame:
    """Every configuration that a complete pack of ``sweep_id`` (any when None) and ``phase`` (any when None) recorded:
    a row each, with exactly :func:`columns`. A configuration the method could not train has its reason in ``skipped``
    (empty otherwise) and NaN metrics."""
    return results_of(uri, tracking.completed_packs(uri, experiment_id, sweep_id, phase))


def results_of(uri: str, packs: list) -> pd.DataFrame:
    """:func:`read_results` of complete pack runs already found (a reader that searched the store once)."""
    table = tracking.pack_tables(uri, packs)
    wanted = columns()
    if table.empty:
        return pd.DataFrame(columns=wanted)
    start = {r.info.run_id: r.info.start_time for r in packs}
    table = table.assign(start_time=table["pack_run_id"].map(start), style=table.get("method_style"))
    for col in wanted:
        if col not in table:
            table[col] = ABSENT.get(col, TEXT_DEFAULTS.get(col, math.nan))
    for col, default in TEXT_DEFAULTS.items():
        table[col] = table[col].where(table[col].notna(), default).astype(str)
    for col in OPTIONAL:
        table[col] = table[col].astype(object).where(table[col].notna(), None)
    table["repeat"] = [None if r is None else int(r) for r in table["repeat"]]
    for col in INTEGER:
        table[col] = table[col].astype(int)
    return table[wanted].reset_index(drop=True)


def trained(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of configurations that were trained (not skipped)."""
    return table[table["skipped"] == ""]
