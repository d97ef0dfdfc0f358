"""Read a sweep's configurations from MLflow (its packs' tables) into one tidy pandas table, a row per configuration."""

from __future__ import annotations

import math

import pandas as pd

from raco_bench import tracking
from raco_bench.constraints.gaps import gap_keys
from raco_bench.records.results import results_of, sweep_latest, trained
from raco_bench.report.spending import capped
from raco_bench.training.health import Evidence, judge


class ReportError(ValueError):
    """A report cannot be built (unknown experiment, no finished runs, …); the message says why."""


def experiment_id(uri: str, name: str) -> str:
    exp = tracking.experiment_id(uri, name)
    if exp is None:
        names = sorted(tracking.experiment_names(uri))
        raise ReportError(f"no MLflow experiment named {name!r} at {uri}; experiments there: {', '.join(names) or 'none'}")
    return exp


def load_runs(uri: str, experiment: str, sweep_id: str | None = None) -> pd.DataFrame:
    """Every configuration trained by one sweep of ``experiment`` (``sweep_id``, default: the sweep that trained last,
    :func:`~raco_bench.records.results.sweep_latest`), as
    :func:`raco_bench.records.results.read_results` reads it, less the configurations the method could not train
    (counted per "method: reason" in ``attrs["skipped"]``). The store is searched once."""
    exp_id = experiment_id(uri, experiment)
    packs = tracking.completed_packs(uri, exp_id)
    sweeps = sweep_latest(packs)
    if not sweeps:
        raise ReportError(f"experiment {experiment!r} has no finished trial runs yet; run or resume its sweep first")
    if sweep_id is None:
        sweep_id = max(sweeps, key=lambda k: sweeps[k])
    elif sweep_id not in sweeps:
        raise ReportError(f"experiment {experiment!r} has no finished runs of sweep {sweep_id!r}; sweeps there: {', '.join(sorted(sweeps))}")
    table = results_of(uri, [p for p in packs if p.data.tags.get(tracking.SWEEP_ID, "") == sweep_id])
    done = trained(table)
    skipped = table.loc[~table.index.isin(done.index)]
    out = done.reset_index(drop=True)
    out.attrs["skipped"] = {f"{m}: {reason}": int(n) for (m, reason), n in skipped.groupby(["method", "skipped"]).size().items()}
    return out


def aggregate(df: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard deviation over seeds per (sweep, method, ε, γ, configuration, phase): config ids are per sweep,
    so a study of several parts keeps their configurations apart. Phase-2 means of a configuration that stopped at the
    cap on T with less than 90 % of its budget spent are marked ``capped`` (:mod:`raco_bench.report.spending`)."""
    keys = [k for k in ("sweep_id", "method", "epsilon", "gamma", "config_id", "phase") if k in df.columns]
    frame = df.assign(epsilon=df["epsilon"].astype(float).fillna(math.inf), gamma=df["gamma"].astype(float).fillna(-1.0))
    spread = ["test_error", "test_max_constraint", "test_accuracy", "test_worst_group_loss", *(f"test_{k}" for k in gap_keys())]  # mean and sd
    for col in ("steps", "epsilon_spent", "max_steps", *spread, *EVIDENCE):
        if col not in frame:
            frame[col] = math.nan
    g = frame.groupby(keys, dropna=False)
    out = g.agg(
        n_seeds=("seed", "count"), **{col: (col, "mean") for col in spread}, **{f"{col}_sd": (col, "std") for col in spread},
        steps=("steps", "mean"), epsilon_spent=("epsilon_spent", "mean"), max_steps=("max_steps", "first"), **{col: (col, "mean") for col in EVIDENCE},
    ).reset_index()
    out["capped"] = (out["phase"] == 2) & capped(out["steps"], out["epsilon_spent"], out["epsilon"], out["max_steps"])
    out["health"] = health_labels(out)
    return out


EVIDENCE = ("passes", "test_constant_accuracy", "test_rows", "test_top_class_share")  # besides accuracy, T, ε: what a verdict reads


def health_labels(frame: pd.DataFrame) -> list[str]:
    """The health verdict (:mod:`raco_bench.training.health`) of each row of ``frame``, a run or a configuration's means,
    judged from its columns; a rule whose column is missing (a store from before it) is not applied."""
    return [judge(Evidence.of(row)).label for row in frame.to_dict("records")]
