"""The selected configurations on test (paper Fig. 3's numbers): per selection, its phase-2 runs' means.

A selection names a configuration of its own part: config ids are per sweep, so its runs are the phase-2 rows of
the same (sweep, method, ε, γ, config id), never those of another part that happens to reuse the id.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from raco_bench.report.load import EVIDENCE
from raco_bench.report.spending import capped
from raco_bench.training.health import Evidence, judge

COLUMNS = ["method", "epsilon", "gamma", "config_id", "n_runs", "test_max_constraint", "test_max_constraint_sd", "test_error",
           "test_error_sd", "share_meeting", "sweep_id", "steps", "epsilon_spent", "max_steps", "capped", "health", "health_note"]


def same_number(values: pd.Series, value) -> np.ndarray:
    """Rows whose ``values`` equal ``value`` (None and NaN: missing), to 6 significant digits (a part's floats)."""
    v = values.astype(float).to_numpy()
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return np.isnan(v)
    return np.isclose(v, float(value), rtol=1e-5, atol=0.0)


def satisfaction_rows(df: pd.DataFrame, selections: list[dict]) -> pd.DataFrame:
    """One row per selection that has phase-2 runs: their number, mean and sd of the test constraint value and error,
    the share meeting γ, the mean T and ε spent, the part's cap on T, whether the model is capped, and the health
    verdict of its means (:mod:`raco_bench.training.health`) with its reasons."""
    rows = []
    phase2 = df[df["phase"] == 2]
    for sel in selections:
        if sel.get("config_id") is None:
            continue
        eps = sel["epsilon"]
        mask = ((phase2["method"] == sel["method"]).to_numpy() & (phase2["config_id"] == int(sel["config_id"])).to_numpy()
                & same_number(phase2["epsilon"], eps) & (np.isnan(phase2["gamma"].astype(float).to_numpy()) | same_number(phase2["gamma"], sel["gamma"])))
        if "sweep_id" in sel and "sweep_id" in phase2:
            mask &= (phase2["sweep_id"] == sel["sweep_id"]).to_numpy()
        runs = phase2[mask]
        if runs.empty:
            continue
        v, e = runs["test_max_constraint"], runs["test_error"]
        cap = float(runs["max_steps"].iloc[0]) if "max_steps" in runs else math.nan
        epsilon = math.inf if eps is None else float(eps)
        steps, spent = float(runs["steps"].mean()), float(runs["epsilon_spent"].mean())
        means = {col: float(runs[col].astype(float).mean()) if col in runs else math.nan for col in ("test_accuracy", *EVIDENCE)}
        health = judge(Evidence.of({**means, "steps": steps, "epsilon": epsilon, "epsilon_spent": spent, "max_steps": cap}))
        rows.append({"method": sel["method"], "epsilon": epsilon, "gamma": float(sel["gamma"]), "config_id": sel["config_id"],
                     "n_runs": len(runs), "test_max_constraint": v.mean(), "test_max_constraint_sd": v.std(), "test_error": e.mean(),
                     "test_error_sd": e.std(), "share_meeting": float((v <= sel["gamma"]).mean()), "sweep_id": sel.get("sweep_id", ""),
                     "steps": steps, "epsilon_spent": spent, "max_steps": cap, "capped": bool(capped(steps, spent, epsilon, cap)),
                     "health": health.label, "health_note": health.text})
    return pd.DataFrame(rows, columns=COLUMNS).sort_values(["method", "epsilon", "gamma", "sweep_id"], kind="stable", ignore_index=True)
