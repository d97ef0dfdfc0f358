"""How many steps T the selected models took and how much of their budget ε they spent (issue 23, item 2).

A sweep caps T at ``sweep.max_steps`` (5,000 by default, the reference code's MAX_STEPS). A selected model whose T
is the cap and that spent less than :data:`CAP_SHARE` of its ε is *capped*: the cap, not the budget, limited it. The
page's table gives, per method, ε and γ, the selected configuration's T and ε spent (phase-2 means), and per method
and ε the phase-1 medians over all configurations, with the cap; the figures mark capped points.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from raco_bench.training.health import CAP_SHARE, capped

__all__ = ["CAP_SHARE", "capped", "capped_text", "phase1_medians", "spending_table"]


def capped_text(row) -> str:
    """The mark of a capped model, e.g. "capped at T = 100: spent ε = 0.74 of 1"."""
    return f"capped at T = {row['max_steps']:.0f}: spent ε = {row['epsilon_spent']:.2g} of {row['epsilon']:g}"


def phase1_medians(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (method, ε): the medians over phase-1 configurations (each the mean over its seeds) of T and ε spent, the
    number of configurations, and the cap on T (several caps, from parts that differ, joined by "/")."""
    phase1 = rows[rows["phase"] == 1].assign(epsilon=rows["epsilon"].astype(float).fillna(np.inf))
    keys = ["sweep_id", "method", "epsilon", "gamma", "config_id"]
    configs = phase1.groupby(keys, dropna=False).agg(steps=("steps", "mean"), epsilon_spent=("epsilon_spent", "mean"),
                                                      max_steps=("max_steps", "first")).reset_index()
    out = configs.groupby(["method", "epsilon"]).agg(
        phase1_configs=("steps", "size"), phase1_median_T=("steps", "median"), phase1_median_epsilon_spent=("epsilon_spent", "median"),
        cap=("max_steps", lambda caps: "/".join(f"{c:g}" for c in sorted(set(caps.dropna()))))).reset_index()
    return out


def spending_table(satisfaction: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    """One row per selection (method, ε, γ): the selected configuration's T and ε spent with its cap and the capped
    mark, beside the phase-1 medians of its method and ε."""
    columns = ["method", "epsilon", "gamma", "config_id", "T", "epsilon_spent", "cap", "capped", "phase1_median_T",
               "phase1_median_epsilon_spent", "phase1_configs", "sweep_id"]
    if satisfaction.empty:
        return pd.DataFrame(columns=columns)
    chosen = satisfaction.rename(columns={"steps": "T"}).assign(epsilon=satisfaction["epsilon"].astype(float))
    out = chosen.merge(phase1_medians(rows), on=["method", "epsilon"], how="left")
    out["cap"] = chosen["max_steps"].map(lambda c: f"{c:g}").to_numpy()
    return out[columns]
