"""Read a sweep's runs from MLflow into one tidy pandas table (a row per finished trial run)."""

from __future__ import annotations

import json
import math

import pandas as pd

from raco_bench import tracking

COLUMNS = [
    "run_id", "experiment", "sweep_id", "start_time", "dataset", "constraint", "method", "phase", "epsilon", "gamma", "config_id", "seed", "delta",
    "privacy_notion", "checkpoint", "preprocessing", "outside_budget", "style", "epsilon_spent", "steps", "ms_per_step",
    "test_accuracy", "test_error", "test_max_constraint", "test_dp_gap", "test_eo_gap", "test_fnr",
    "val_accuracy", "val_max_constraint", "train_max_constraint", "params",
]


class ReportError(ValueError):
    """A report cannot be built (unknown experiment, no finished runs, …); the message says why."""


def experiment_id(uri: str, name: str) -> str:
    c = tracking.client(uri)
    exp = c.get_experiment_by_name(name)
    if exp is None:
        names = sorted(e.name for e in c.search_experiments())
        raise ReportError(f"no MLflow experiment named {name!r} at {uri}; experiments there: {', '.join(names) or 'none'}")
    return exp.experiment_id


def load_runs(uri: str, experiment: str, sweep_id: str | None = None) -> pd.DataFrame:
    """Finished trial runs of one sweep of ``experiment`` (``sweep_id``, default: the most recent sweep)."""
    exp_id = experiment_id(uri, experiment)
    query = f"tags.`{tracking.KIND}` = 'trial' and tags.`{tracking.COMPLETE}` = '1' and attributes.status = 'FINISHED'"
    runs = tracking.search_all(uri, [exp_id], query)
    rows = []
    for run in runs:
        tags, m = run.data.tags, run.data.metrics
        if "skipped" in tags:
            continue
        trial = json.loads(tags.get("raco_bench.trial", "{}"))
        get = lambda k: float(m[k]) if k in m else math.nan  # noqa: E731
        rows.append({
            "run_id": run.info.run_id, "experiment": experiment, "sweep_id": tags.get(tracking.SWEEP_ID, ""),
            "start_time": run.info.start_time, "dataset": trial.get("dataset", tags.get("dataset")),
            "constraint": trial.get("constraint", tags.get("constraint")), "method": trial.get("method", tags.get("method")),
            "phase": int(trial.get("phase", tags.get(tracking.PHASE, 0))), "epsilon": trial.get("epsilon"), "gamma": trial.get("gamma"),
            "config_id": trial.get("config_id"), "seed": trial.get("seed"), "delta": trial.get("delta"),
            "privacy_notion": tags.get("privacy_notion", ""), "checkpoint": tags.get("checkpoint", ""),
            "preprocessing": tags.get("preprocessing", "unknown"), "style": tags.get("method_style"),
            "outside_budget": tags.get("outside_budget", "unknown (run logged before labels)"),
            "epsilon_spent": get("epsilon_spent"), "steps": get("steps"), "ms_per_step": get("ms_per_step"),
            "test_accuracy": get("test_accuracy"), "test_error": get("test_error"), "test_max_constraint": get("test_max_constraint"),
            "test_dp_gap": get("test_dp_gap"), "test_eo_gap": get("test_eo_gap"), "test_fnr": get("test_fnr"),
            "val_accuracy": get("val_accuracy"), "val_max_constraint": get("val_max_constraint"),
            "train_max_constraint": get("train_max_constraint"), "params": json.dumps(trial.get("params", {}), sort_keys=True),
        })
    if not rows:
        raise ReportError(f"experiment {experiment!r} has no finished trial runs yet; run or resume its sweep first")
    df = pd.DataFrame(rows, columns=COLUMNS)
    if sweep_id is None:
        sweep_id = df.sort_values("start_time")["sweep_id"].iloc[-1]
    elif sweep_id not in set(df["sweep_id"]):
        raise ReportError(f"experiment {experiment!r} has no finished runs of sweep {sweep_id!r}; sweeps there: {', '.join(sorted(set(df['sweep_id'])))}")
    return df[df["sweep_id"] == sweep_id].reset_index(drop=True)


def aggregate(df: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard deviation over seeds per (method, ε, γ, configuration, phase)."""
    keys = ["method", "epsilon", "gamma", "config_id", "phase"]
    frame = df.assign(epsilon=df["epsilon"].fillna(math.inf), gamma=df["gamma"].fillna(-1.0))
    g = frame.groupby(keys, dropna=False)
    out = g.agg(
        n_seeds=("seed", "count"), test_error=("test_error", "mean"), test_error_sd=("test_error", "std"),
        test_violation=("test_max_constraint", "mean"), test_violation_sd=("test_max_constraint", "std"),
        test_fnr=("test_fnr", "mean"), test_fnr_sd=("test_fnr", "std"), test_accuracy=("test_accuracy", "mean"),
        test_accuracy_sd=("test_accuracy", "std"),
    ).reset_index()
    return out
