"""What a figure draws as one method: the method under one pipeline.

A study can hold the same method under two pipelines (a part with ``--preprocessing paper --checkpoint paper``
beside the honest default, both at ε = 1, say). Each pipeline other than the default is its own *series*, named
"<method> (<pipeline>)": its own legend entry, colour, frontier and selections, never mixed into the default's.
The default pipeline (:data:`DEFAULT_PIPELINE`, nothing read outside the budget) keeps the method's plain name.
"""

from __future__ import annotations

import pandas as pd

DEFAULT_PIPELINE = {"preprocessing": "public", "checkpoint": "last", "tuning": "not-accounted"}
HONEST = ("none", "", "unknown", "nan")  # outside_budget values that name nothing read outside the budget


def pipeline_label(preprocessing: str, checkpoint: str, tuning: str, outside_budget: str) -> str:
    """How a run's pipeline differs from the default ("" when it does not), e.g. "paper pipeline, OUTSIDE THE BUDGET"."""
    parts = []
    if preprocessing == checkpoint == "paper":
        parts.append("paper pipeline")
    else:
        if preprocessing != DEFAULT_PIPELINE["preprocessing"]:
            parts.append(f"preprocessing {preprocessing}")
        if checkpoint != DEFAULT_PIPELINE["checkpoint"]:
            parts.append(f"checkpoint {checkpoint}")
    if tuning != DEFAULT_PIPELINE["tuning"]:
        parts.append(f"{tuning} tuning")
    if str(outside_budget) not in HONEST:
        parts.append("OUTSIDE THE BUDGET")
    return ", ".join(parts)


def base_method(series: str) -> str:
    """The method of a series name ("raco-dp (paper pipeline, …)" -> "raco-dp"); method names have no spaces."""
    return str(series).split(" (", 1)[0]


def _beyond_shared(outside: pd.Series) -> pd.Series:
    """Each run's outside-budget items less those every run of the study shares (the dataset's task definition, e.g.
    Parkinsons' label threshold): those are the study's, stated in its caption, and separate no pipeline."""
    items = [frozenset(i for i in str(cell).split(" | ") if i not in HONEST) for cell in outside]
    shared = frozenset.intersection(*items) if items else frozenset()
    return pd.Series([" | ".join(sorted(i - shared)) or "none" for i in items], index=outside.index, dtype=object)


def label_series(rows: pd.DataFrame, selections: list[dict]) -> tuple[pd.DataFrame, list[dict]]:
    """``rows`` with ``method`` replaced by the series name (the method in ``base_method``, the difference in
    ``pipeline``), and ``selections`` named alike: a selection belongs to its part's series (one sweep runs one
    pipeline). A series other than the default has no ``style``: it is drawn in a colour of its own."""
    keys = ["preprocessing", "checkpoint", "tuning", "outside_budget"]
    own = rows[keys].assign(outside_budget=_beyond_shared(rows["outside_budget"]))  # the caption keeps what every run shares
    labels = {combo: pipeline_label(*map(str, combo)) for combo in own.drop_duplicates().itertuples(index=False, name=None)}
    pipeline = pd.Series([labels[combo] for combo in own.itertuples(index=False, name=None)], index=rows.index, dtype=object)
    out = rows.assign(base_method=rows["method"], pipeline=pipeline)
    out["method"] = [m if not p else f"{m} ({p})" for m, p in zip(out["base_method"], pipeline)]
    if "style" in out:
        out["style"] = out["style"].astype(object).where(pipeline == "", None)
    name = dict(zip(zip(out["sweep_id"], out["base_method"]), out["method"]))
    return out, [{**s, "method": name.get((s.get("sweep_id"), s["method"]), s["method"])} for s in selections]
