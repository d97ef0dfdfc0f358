"""Read a sweep's configurations from MLflow (its packs' tables) into one tidy pandas table, a row per configuration."""

from __future__ import annotations

import math

import pandas as pd

from raco_bench import tracking

COLUMNS = [
    "trial_key", "run_id", "experiment", "sweep_id", "start_time", "dataset", "constraint", "method", "phase", "epsilon", "gamma", "config_id", "seed", "delta",
    "privacy_notion", "checkpoint", "preprocessing", "outside_budget", "style", "epsilon_spent", "steps", "ms_per_step",
    "test_accuracy", "test_error", "test_max_constraint", "test_dp_gap", "test_eo_gap", "test_fnr", "test_worst_group_loss",
    "val_accuracy", "val_max_constraint", "train_max_constraint", "params", "tuning", "tuning_note", "repeat", "epsilon_end_to_end",
]


class ReportError(ValueError):
    """A report cannot be built (unknown experiment, no finished runs, …); the message says why."""


def experiment_id(uri: str, name: str) -> str:
    exp = tracking.experiment_id(uri, name)
    if exp is None:
        names = sorted(tracking.experiment_names(uri))
        raise ReportError(f"no MLflow experiment named {name!r} at {uri}; experiments there: {', '.join(names) or 'none'}")
    return exp


def load_runs(uri: str, experiment: str, sweep_id: str | None = None) -> pd.DataFrame:
    """Every configuration trained by one sweep of ``experiment`` (``sweep_id``, default: the most recent sweep),
    read from its packs' tables: one row per configuration, whatever the pack size."""
    exp_id = experiment_id(uri, experiment)
    packs = tracking.completed_packs(uri, exp_id)
    if not packs:
        raise ReportError(f"experiment {experiment!r} has no finished trial runs yet; run or resume its sweep first")
    sweeps = {r.data.tags.get(tracking.SWEEP_ID, ""): r.info.start_time for r in packs}
    if sweep_id is None:
        sweep_id = max(sweeps, key=lambda k: sweeps[k])
    elif sweep_id not in sweeps:
        raise ReportError(f"experiment {experiment!r} has no finished runs of sweep {sweep_id!r}; sweeps there: {', '.join(sorted(sweeps))}")
    chosen = [r for r in packs if r.data.tags.get(tracking.SWEEP_ID) == sweep_id]
    table = tracking.pack_tables(uri, chosen)
    skipped_reasons: dict[str, int] = {}
    if "skipped" in table:
        skipped = table["skipped"]
        trained = skipped.isna() | (skipped.astype(str) == "")
        skipped_reasons = {f"{m}: {reason}": int(n) for (m, reason), n in table.loc[~trained].groupby(["method", "skipped"]).size().items()}
        table = table[trained]
    start = {r.info.run_id: r.info.start_time for r in chosen}
    table = table.assign(start_time=table["pack_run_id"].map(start), style=table.get("method_style"),
                         privacy_notion=table.get("privacy_notion", ""), outside_budget=table.get("outside_budget", "unknown"))
    for col in COLUMNS:
        if col not in table:
            table[col] = math.nan
    table["tuning"] = table["tuning"].fillna("not-accounted")
    table["epsilon"] = table["epsilon"].astype(object).where(table["epsilon"].notna(), None)
    table["gamma"] = table["gamma"].astype(object).where(table["gamma"].notna(), None)
    table["phase"] = table["phase"].astype(int)
    table["config_id"] = table["config_id"].astype(int)
    table["seed"] = table["seed"].astype(int)
    out = table[COLUMNS].reset_index(drop=True)
    out.attrs["skipped"] = skipped_reasons  # "method: reason" -> runs the sweep planned but could not train
    return out


def aggregate(df: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard deviation over seeds per (method, ε, γ, configuration, phase)."""
    keys = ["method", "epsilon", "gamma", "config_id", "phase"]
    frame = df.assign(epsilon=df["epsilon"].fillna(math.inf), gamma=df["gamma"].fillna(-1.0))
    g = frame.groupby(keys, dropna=False)
    out = g.agg(
        n_seeds=("seed", "count"), test_error=("test_error", "mean"), test_error_sd=("test_error", "std"),
        test_max_constraint=("test_max_constraint", "mean"), test_max_constraint_sd=("test_max_constraint", "std"),
        test_fnr=("test_fnr", "mean"), test_fnr_sd=("test_fnr", "std"), test_accuracy=("test_accuracy", "mean"),
        test_worst_group_loss=("test_worst_group_loss", "mean"), test_worst_group_loss_sd=("test_worst_group_loss", "std"),
        test_accuracy_sd=("test_accuracy", "std"),
    ).reset_index()
    return out
