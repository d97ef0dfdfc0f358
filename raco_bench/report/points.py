"""The points a figure names: one per selection (method, ε, γ) with phase-2 runs, its configuration's phase-2 means
and the γ it was selected for (a γ-free method's configuration selected for two γ is two points, one per γ)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from raco_bench.report.satisfaction import same_number


def selected_points(agg: pd.DataFrame, selections: list[dict] | None) -> pd.DataFrame:
    """The phase-2 rows of ``agg`` (:func:`raco_bench.report.load.aggregate`) that a selection names, each with the γ it
    was selected for in ``selected_gamma``. Without selections (a store that logged none), every phase-2 row at its own
    γ (NaN for a γ-free method). A cell whose selections come from several repeats of the protocol (a selection's
    ``repeat``) is one point, the mean over them with the 95 % interval as its spread (:func:`raco_bench.report.repeats.over_repeats`)."""
    phase2 = agg[agg["phase"] == 2]
    own = phase2["gamma"].astype(float).where(phase2["gamma"].astype(float) >= 0)
    if not selections:
        return phase2.assign(selected_gamma=own)
    frames = []
    for sel in selections:
        if sel.get("config_id") is None:
            continue
        eps = math.inf if sel["epsilon"] is None else float(sel["epsilon"])
        mask = ((phase2["method"] == sel["method"]).to_numpy() & (phase2["config_id"] == int(sel["config_id"])).to_numpy()
                & same_number(phase2["epsilon"], eps) & (same_number(phase2["gamma"], sel["gamma"]) | (phase2["gamma"].astype(float) < 0).to_numpy()))
        if "sweep_id" in sel and "sweep_id" in phase2:
            mask &= (phase2["sweep_id"] == sel["sweep_id"]).to_numpy()
        if mask.any():
            frames.append(phase2[mask].assign(selected_gamma=float(sel["gamma"]), repeat=int(sel.get("repeat", 0))))
    if not frames:
        return phase2.iloc[:0].assign(selected_gamma=np.nan)
    from raco_bench.report.repeats import over_repeats

    values = [c for c in phase2.columns if not c.endswith("_sd") and c + "_sd" in phase2.columns]
    return over_repeats(pd.concat(frames, ignore_index=True), ["method", "epsilon", "selected_gamma"], values)[0]
