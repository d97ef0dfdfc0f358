"""Published reference points (``--references CSV``): read, checked, and matched to the figures that can show them.

Columns: :data:`REFERENCE_COLUMNS`, and optionally ``constraint`` (an empty cell: any constraint), ``note``,
``quantity`` and ``notion``. ``quantity`` names the suite metric that ``constraint_value`` is comparable with
(:func:`quantities`: ``max_constraint`` or a registered gap metric; an empty cell or no column: ``max_constraint``); a
point is drawn only on a figure whose x-axis is that quantity. ``notion`` is the point's privacy notion as its source
states it ("A-only DP", "non-private"), shown in the legend ("published dp-fermi [A-only DP]").
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from raco_bench.constraints.families import Family
from raco_bench.constraints.gaps import CONSTRAINT_VALUE, gap_keys
from raco_bench.report.load import ReportError

REFERENCE_COLUMNS = ("method", "dataset", "epsilon", "error", "constraint_value", "source")
OLD_REFERENCE_COLUMNS = {"violation": "constraint_value"}  # the name before one name per quantity (docs/results.md)
DEFAULT_QUANTITY = CONSTRAINT_VALUE


def quantities() -> dict[str, str]:
    """The quantities a published point may be (its ``quantity``) -> the results column it is comparable with: the
    constraint value and every registered gap metric (:mod:`raco_bench.constraints.gaps`)."""
    return {CONSTRAINT_VALUE: f"test_{CONSTRAINT_VALUE}", **{k: f"test_{k}" for k in gap_keys()}}


def load_references(path: Path | None, datasets: set[str], constraint: str | None = None) -> pd.DataFrame | None:
    """Published points of ``datasets`` from a CSV in :data:`REFERENCE_COLUMNS`; an optional ``constraint`` column keeps
    only the rows of this sweep's constraint (an empty cell: any constraint). ε empty or inf: a non-private point.
    The result always has ``quantity`` (a key of :func:`quantities`) and ``notion`` (possibly empty) columns."""
    if path is None:
        return None
    if not path.is_file():
        raise ReportError(f"reference-points file {path} does not exist")
    ref = pd.read_csv(path, comment="#")
    ref = ref.rename(columns={old: new for old, new in OLD_REFERENCE_COLUMNS.items() if new not in ref.columns})
    missing = [c for c in REFERENCE_COLUMNS if c not in ref.columns]
    if missing:
        raise ReportError(f"reference-points file {path} lacks column(s) {', '.join(missing)}; expected {', '.join(REFERENCE_COLUMNS)}")
    for column in ("error", "constraint_value"):
        values = pd.to_numeric(ref[column], errors="coerce")
        if values.isna().any() or ((values < 0) | (values > 1)).any():
            raise ReportError(f"reference-points file {path}: column {column!r} needs numbers in [0, 1] (a rate), got "
                              f"{ref.loc[values.isna() | (values < 0) | (values > 1), column].tolist()}; fix or remove those rows")
        ref[column] = values
    quantity = ref["quantity"] if "quantity" in ref.columns else pd.Series(np.nan, index=ref.index)
    ref["quantity"] = quantity.astype(object).where(quantity.notna() & (quantity.astype(str).str.strip() != ""), DEFAULT_QUANTITY).astype(str).str.strip()
    unknown = sorted(set(ref["quantity"]) - set(quantities()))
    if unknown:
        raise ReportError(f"reference-points file {path}: column 'quantity' takes {', '.join(quantities())} (or empty: {DEFAULT_QUANTITY}), "
                          f"got {unknown}")
    notion = ref["notion"] if "notion" in ref.columns else pd.Series(np.nan, index=ref.index)
    ref["notion"] = notion.astype(object).where(notion.notna(), "").astype(str).str.strip()
    ref = ref[ref["dataset"].isin(datasets)].copy()
    if constraint is not None and "constraint" in ref.columns:
        ref = ref[ref["constraint"].isna() | (ref["constraint"] == constraint)]
    ref["epsilon"] = pd.to_numeric(ref["epsilon"], errors="coerce").replace([np.inf], np.nan)
    return ref


def axis_quantities(x: str, family: Family) -> set[str]:
    """The reference quantities that the x-axis column ``x`` shows. Where the family's gap is its constraint value
    (``gap_is_constraint``: under the false-negative-rate bound the largest constraint value is the FNR itself), a
    ``max_constraint`` point is also a gap point and the other way round."""
    keys = {k for k, column in quantities().items() if column == x}
    both = {CONSTRAINT_VALUE, family.gap}
    if family.gap_is_constraint and keys & both:
        keys |= both
    return keys


def on_axis(references: pd.DataFrame | None, x: str, family: Family) -> pd.DataFrame | None:
    """The points that a figure with x-axis ``x`` draws (None when there is no file)."""
    if references is None:
        return None
    return references[references["quantity"].isin(axis_quantities(x, family))]


def reference_label(method: str, notion: str) -> str:
    """A published point's legend entry: "published <method> [<notion>]"."""
    return f"published {method}" + (f" [{notion}]" if notion else "")
