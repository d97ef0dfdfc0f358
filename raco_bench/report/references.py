"""Published reference points (``--references CSV``): read, checked, and matched to the figures that can show them.

Columns: :data:`REFERENCE_COLUMNS`, and optionally ``constraint`` (an empty cell: any constraint), ``note``,
``quantity`` and ``notion``. ``quantity`` names the suite metric that ``constraint_value`` is comparable with
(:data:`QUANTITIES`; an empty cell or no column: ``max_constraint``); a point is drawn only on a figure whose x-axis is
that quantity. ``notion`` is the point's privacy notion as its source states it ("A-only DP", "non-private"), shown in
the legend ("published dp-fermi [A-only DP]").
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from raco_bench.report.load import ReportError

REFERENCE_COLUMNS = ("method", "dataset", "epsilon", "error", "constraint_value", "source")
OLD_REFERENCE_COLUMNS = {"violation": "constraint_value"}  # the name before one name per quantity (docs/results.md)
QUANTITIES = {"max_constraint": "test_max_constraint", "dp_gap": "test_dp_gap", "eo_gap": "test_eo_gap", "fnr": "test_fnr"}
DEFAULT_QUANTITY = "max_constraint"


def load_references(path: Path | None, datasets: set[str], constraint: str | None = None) -> pd.DataFrame | None:
    """Published points of ``datasets`` from a CSV in :data:`REFERENCE_COLUMNS`; an optional ``constraint`` column keeps
    only the rows of this sweep's constraint (an empty cell: any constraint). ε empty or inf: a non-private point.
    The result always has ``quantity`` (a key of :data:`QUANTITIES`) and ``notion`` (possibly empty) columns."""
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
    unknown = sorted(set(ref["quantity"]) - set(QUANTITIES))
    if unknown:
        raise ReportError(f"reference-points file {path}: column 'quantity' takes {', '.join(QUANTITIES)} (or empty: {DEFAULT_QUANTITY}), "
                          f"got {unknown}")
    notion = ref["notion"] if "notion" in ref.columns else pd.Series(np.nan, index=ref.index)
    ref["notion"] = notion.astype(object).where(notion.notna(), "").astype(str).str.strip()
    ref = ref[ref["dataset"].isin(datasets)].copy()
    if constraint is not None and "constraint" in ref.columns:
        ref = ref[ref["constraint"].isna() | (ref["constraint"] == constraint)]
    ref["epsilon"] = pd.to_numeric(ref["epsilon"], errors="coerce").replace([np.inf], np.nan)
    return ref


def axis_quantities(x: str, constraint: str) -> set[str]:
    """The reference quantities that the x-axis column ``x`` shows. Under the false-negative-rate constraint the largest
    constraint quantity is the FNR itself, so a ``max_constraint`` point is also an FNR point."""
    keys = {k for k, column in QUANTITIES.items() if column == x}
    if constraint == "false-negative-rate" and keys & {"max_constraint", "fnr"}:
        keys |= {"max_constraint", "fnr"}
    return keys


def on_axis(references: pd.DataFrame | None, x: str, constraint: str) -> pd.DataFrame | None:
    """The points that a figure with x-axis ``x`` draws (None when there is no file)."""
    if references is None:
        return None
    return references[references["quantity"].isin(axis_quantities(x, constraint))]


def reference_label(method: str, notion: str) -> str:
    """A published point's legend entry: "published <method> [<notion>]"."""
    return f"published {method}" + (f" [{notion}]" if notion else "")
