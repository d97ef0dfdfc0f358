"""Draw a study: the one way a report's and a results page's figures and tables are made, from a study's parts.

``raco-bench report`` draws the study of the sweep it exported from MLflow; ``raco-bench results`` draws each page's
study from its ``parts/``. Both call :func:`draw`, which writes into a folder:

* ``pareto``: test error against the test constraint value, one panel per ε (paper Fig. 2); for a custom constraint
  (whose test-time value is its constraint value) the axis names its spec;
* the family's gap (:mod:`raco_bench.constraints.families`: what its registry entry declares, ``gap`` and ``axis``):
  ``gap``, test error against the between-group gap (``test_dp_gap`` for demographic parity, ``test_eo_gap`` for
  equalized odds), where the published DP-FERMI points are gaps, not drawn where the gap is the constraint value on
  every point (it would repeat ``pareto``); or, for a family whose gap is its constraint value (``gap_is_constraint``),
  accuracy against it with the γ lines, named after the gap (``fnr`` for the false-negative rate);
* ``worst_group_loss``: test error against the worst group's loss;
* ``satisfaction``: the selected configurations against γ (Fig. 3), with ``satisfaction.csv`` and ``.tex``;
* ``spending.csv``: the selected models' T and ε spent beside the phase-1 medians (:mod:`raco_bench.report.spending`).

Each published point goes only on the figure whose x-axis is its quantity (:mod:`raco_bench.report.references`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from raco_bench.constraints.gaps import CONSTRAINT_VALUE
from raco_bench.report import figures
from raco_bench.report.load import aggregate, health_labels
from raco_bench.report.protocol import protocol_kind, protocol_note
from raco_bench.report.references import axis_quantities, on_axis
from raco_bench.report.repeats import FOLDED_NOTE, over_repeats
from raco_bench.report.satisfaction import satisfaction_rows
from raco_bench.report.series import label_series
from raco_bench.report.spending import capped_text, spending_table
from raco_bench.report.study import Study
from raco_bench.report.tables import satisfaction_latex

ACS_NOTE = ("Data: the 2017 1-Year Alabama 5,000-row ACS sample (folktables layout), a SUBSTITUTE for the paper's 2018 "
            "5-Year file: not comparable with the paper's numbers.")
PARETO_AXIS = "test constraint value (largest over the constraints)"


def data_note(df: pd.DataFrame) -> str:
    """What a reader must know about the study's data before reading its numbers (the ACS sample is a substitute)."""
    return ACS_NOTE if any(str(d).startswith("acs") for d in df["dataset"].unique()) else ""


@dataclass
class Drawn:
    """What :func:`draw` wrote, the labelled rows it drew, its tables and its notes."""

    files: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    rows: pd.DataFrame = field(default_factory=pd.DataFrame)
    satisfaction: pd.DataFrame = field(default_factory=pd.DataFrame)
    spending: pd.DataFrame = field(default_factory=pd.DataFrame)
    selections: list[dict] = field(default_factory=list)


def labelled(study: Study) -> tuple[pd.DataFrame, list[dict]]:
    """The study's rows and selections by series (:mod:`raco_bench.report.series`), each row with its part's protocol."""
    kinds = {p.sweep_id: protocol_kind(p.params) for p in study.parts}
    rows = study.rows
    rows = rows.assign(protocol=rows["sweep_id"].map(kinds).fillna(""))
    return label_series(rows, study.selections)


def title_note(study: Study, rows: pd.DataFrame) -> str:
    """What a figure title adds: the protocol when every part ran the same one (else each method's legend entry says
    its own), and the ACS substitute."""
    notes = {protocol_note(p.params) for p in study.parts} - {""}
    text = f"; {notes.pop()}" if len(notes) == 1 else ""
    if data_note(rows):
        text += "\n[ACS 2017 1-Year AL 5,000-row sample: a substitute, not the paper's data]"
    return text


def _selection_notes(selections: list[dict], skipped: dict[str, int]) -> list[str]:
    notes = []
    for sel in selections:
        if sel.get("config_id") is None:
            eps = "∞ (non-private)" if sel["epsilon"] is None else sel["epsilon"]
            notes.append(f"{sel['method']} at ε = {eps}, γ = {sel['gamma']}: no configuration met γ on validation "
                         f"({sel.get('feasible_configs', '0')} feasible"
                         + (f"; {sel['failed_configs']} excluded because a phase-1 seed failed" if sel.get("failed_configs") else "")
                         + "); it has no point in the satisfaction plot.")
    notes += [f"{count} planned run(s) not trained, so not drawn: {key}." for key, count in skipped.items()]
    return notes


def same_quantity(agg: pd.DataFrame, a: str, b: str) -> bool:
    """Whether columns ``a`` and ``b`` hold the same value on every row where either has one, to the 6 significant digits a
    study part keeps (then one figure of each would draw the same points twice)."""
    both = agg[[a, b]].dropna(how="all")
    return bool(len(both)) and bool(np.isclose(both[a].to_numpy(dtype=float), both[b].to_numpy(dtype=float), rtol=1e-5, atol=1e-6).all())


def health_notes(sat: pd.DataFrame, repeat_of: dict[str, int] | None = None) -> list[str]:
    """A note per cell (method, ε, γ) whose selected configuration the health verdict flags (docs/results.md, "Health
    of a result"): selection may pick it (the papers' rule), but not silently. A capped one alone is already noted, and
    ringed. Where a cell was selected in several repeats (``repeat_of``: sweep id -> repeat), one note names the
    repeats flagged, each with its verdict."""
    repeat_of = repeat_of or {}
    sat = sat.assign(repeat=sat["sweep_id"].map(lambda i: repeat_of.get(i, 0)) if "sweep_id" in sat else 0)
    notes = []
    for (method, eps, gamma), cell in sat.groupby(["method", "epsilon", "gamma"], sort=True, dropna=False):
        flagged = cell[~cell["health"].isin(["ok", "capped"])].sort_values("repeat", kind="stable")
        if flagged.empty:
            continue
        where = f"{method} at ε = {eps:g}, γ = {gamma:g}"
        if len(cell) == 1:
            r = flagged.iloc[0]
            notes.append(f"{where} is flagged **{r['health']}**, not worth reading as it stands (× in the figures): {r['health_note']}.")
            continue
        distinct = cell["repeat"].nunique() == len(cell)  # else parts of one repeat (older searches): named by sweep id
        name = (lambda r: f"repeat {int(r['repeat'])}") if distinct else (lambda r: f"part {r.get('sweep_id', '')}")
        labels = ", ".join(f"{name(r)} **{r['health']}**" for _, r in flagged.iterrows())
        each = "; ".join(f"{name(r)}: {r['health_note']}" for _, r in flagged.iterrows())
        notes.append(f"{where} is flagged in {len(flagged)} of its {len(cell)} selections ({labels}), not worth reading as they "
                     f"stand (× in the figures): {each}.")
    return notes


def draw(study: Study, out: Path, references: pd.DataFrame | None = None) -> Drawn:
    """Every figure and table of the module docstring for ``study``, written into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    rows, selections = labelled(study)
    selections = [{**s, "repeat": study.repeat_of.get(s.get("sweep_id", ""), 0)} for s in selections]  # a cell's repeats are one point
    drawn = Drawn(rows=rows, selections=selections)
    dataset, constraint = str(rows["dataset"].iloc[0]), str(rows["constraint"].iloc[0])
    fam = study.family
    note = title_note(study, rows)
    agg = aggregate(rows)
    drawn.rows = rows = rows.assign(health=health_labels(rows))  # each run's verdict (phase2_runs.csv)
    axis = lambda x: on_axis(references, x, fam)  # noqa: E731 - the published points this x-axis shows
    own = fam.gap == CONSTRAINT_VALUE  # a custom constraint: its constraint value is its test-time value
    column = fam.gap_column
    separate = not own and (fam.gap_is_constraint or not same_quantity(agg, column, "test_max_constraint"))
    pareto_refs = axis("test_max_constraint")
    if not own and not separate and pareto_refs is not None:  # the gap is the constraint value here: its published points too
        pareto_refs = pd.concat([pareto_refs, axis(column)]).drop_duplicates()
    drawn.files += figures.tradeoff_figure(agg, rows, out, "pareto", "test_max_constraint", "test_error",
                                           f"{fam.axis} (largest over the constraints)" if own else PARETO_AXIS, "test error",
                                           f"{dataset}, {constraint}: test error vs test constraint value" + note, references=pareto_refs,
                                           selections=selections, gamma_lines=True)
    if not own and not separate:
        drawn.notes.append(f"no gap figure: every {column} equals its test constraint value (the constraint is the gap here), "
                           "so it would repeat the Pareto figure, which also shows the published gaps.")
    if separate and fam.gap_is_constraint:  # the constraint bounds the gap itself: accuracy against it, with the γ lines
        drawn.files += figures.tradeoff_figure(agg, rows, out, fam.gap, column, "test_accuracy", fam.axis, "test accuracy",
                                               f"{dataset}: accuracy vs {fam.axis.removeprefix('test ')}" + note, minimise_y=False,
                                               references=axis(column), reference_xy=lambda r: (r["constraint_value"], 1 - r["error"]),
                                               selections=selections, gamma_lines=True)
    elif separate:
        drawn.files += figures.tradeoff_figure(agg, rows, out, "gap", column, "test_error", fam.axis, "test error",
                                               f"{dataset}: test error vs the between-group gap" + note, references=axis(column), selections=selections)
    if agg["test_worst_group_loss"].notna().any():  # the bounded-group-loss family, for every method
        drawn.files += figures.tradeoff_figure(agg, rows, out, "worst_group_loss", "test_worst_group_loss", "test_error",
                                               "test worst-group loss (largest mean cross-entropy of a group; log scale)", "test error",
                                               f"{dataset}: test error vs worst-group loss (bounded group loss)" + note, xscale="log",
                                               selections=selections)
    xs = ["test_max_constraint"] + ([] if own else [column])
    shown = set().union(*(axis_quantities(x, fam) for x in xs))
    for _, ref in (references if references is not None else pd.DataFrame(columns=["quantity"])).iterrows():
        if ref["quantity"] not in shown:
            drawn.notes.append(f"published {ref['method']} ({ref['source']}) is a {ref['quantity']} value: no figure of this study has "
                               "that quantity on its x-axis, so it is not drawn.")
    drawn.notes += _selection_notes(selections, study.skipped)
    sat = satisfaction_rows(rows, selections)
    drawn.satisfaction = sat
    if not sat.empty:
        sat.to_csv(out / "satisfaction.csv", index=False)
        (out / "satisfaction.tex").write_text(satisfaction_latex(sat, f"{dataset}, {constraint}"))
        drawn.files += [out / "satisfaction.csv", out / "satisfaction.tex"]
        shown, folded = over_repeats(sat.assign(repeat=sat["sweep_id"].map(lambda i: study.repeat_of.get(i, 0))), ["method", "epsilon", "gamma"],
                                     ["test_max_constraint", "test_error", "share_meeting", "steps", "epsilon_spent"])
        drawn.files += figures.satisfaction_figure(shown, rows, out, "satisfaction", f"{dataset}, {constraint}: constraint satisfaction" + note)
        if folded:
            drawn.notes.append(FOLDED_NOTE.format(n=folded))
        drawn.spending = spending_table(sat, rows)
        drawn.spending.to_csv(out / "spending.csv", index=False)
        drawn.files.append(out / "spending.csv")
        drawn.notes += [f"{r['method']} at ε = {r['epsilon']:g}, γ = {r['gamma']:g}: {capped_text(r)}; ringed in the figures."
                        for _, r in sat[sat["capped"]].iterrows()]
        drawn.notes += health_notes(sat, study.repeat_of)
    elif not selections:
        drawn.notes.append("no phase-2 selection is logged yet (sweep interrupted before phase 2?): no satisfaction plot.")
    return drawn
