"""The suite's selected models against a published curve at the same ε and gap (docs/results.md, "Against the
published points").

A published method's points at one ε (DP-FERMI's sweep over its fairness weight λ, read from its ``Figures/*.pt``
into ``references.csv``) trace a curve of error against a gap. For each model the suite selected for the method of
the same privacy notion (its ``published_as``) at that ε, the published error at the suite model's mean test gap is
read off the curve by linear interpolation between the two published points around it. Outside the published range
of gaps nothing is read (no extrapolation: the row says so). The difference is the suite's mean test error minus the
published one, with the standard error of the suite's mean (over its phase-2 seeds; the published points carry none).

This compares like with like only as far as the pipelines agree. A published point is the source's own run (its
preprocessing, checkpoint and test split) at its own δ (DP-FERMI's code takes δ = 1/n², the suite 1e-5: the same ε
is a slightly stronger guarantee there). A published curve is a sweep of one hyperparameter at fixed others, not a
selected front, and need not be monotone; it is interpolated as published, point to point.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from raco_bench.report.references import load_references, quantities

RUN_COLUMNS = ["dataset", "constraint", "method", "epsilon", "gamma", "config_id", "test_error"]  # and sweep_id when a page has parts


def counterparts() -> dict[tuple[str, str], str]:
    """(published method, its notion) -> the suite's method that reproduces it (a method's ``published_as``)."""
    from raco_bench.methods import registry

    return {cls.published_as: name for name, cls in registry().items() if cls.published_as is not None}


def published_error(curve: pd.DataFrame, gap: float) -> float:
    """The published error at ``gap`` by linear interpolation along ``curve`` (columns constraint_value, error; one
    method, notion and ε); NaN outside the curve's range of gaps or when it has fewer than two points."""
    if not math.isfinite(gap):
        return math.nan
    points = curve.groupby("constraint_value", as_index=False)["error"].mean().sort_values("constraint_value")  # one error per gap
    x, y = points["constraint_value"].to_numpy(float), points["error"].to_numpy(float)
    if len(x) < 2 or not (x[0] <= gap <= x[-1]):
        return math.nan
    return float(np.interp(gap, x, y))


def match_page(runs: pd.DataFrame, selected: pd.DataFrame, references: pd.DataFrame, study: str,
               pairs: dict[tuple[str, str], str]) -> pd.DataFrame:
    """One row per γ for which the page selected a model of a counterpart of a published curve (``pairs``, from
    :func:`counterparts`; ``selected``: the page's satisfaction.csv; ``runs``: its phase-2 runs) at an ε the curve was
    published for. A model trained without γ that was selected for several γ is one model, shown on each of its γ rows."""
    rows = []
    by_part = "sweep_id" in selected.columns and "sweep_id" in runs.columns  # config ids are per part
    if not by_part and "sweep_id" in runs.columns and runs["sweep_id"].nunique() > 1:
        return pd.DataFrame()  # selections that do not name their part: a config id could pool models of several parts
    for (method, notion), ours in pairs.items():
        published = references[(references["method"] == method) & (references["notion"] == notion)]
        mine = runs[runs["method"] == ours]  # a pipeline variant is labelled "METHOD (paper pipeline, …)": another method
        for quantity in sorted(set(published["quantity"])):
            column = quantities()[quantity]
            for _, sel in selected[selected["method"] == ours].iterrows():
                curve = published[(published["quantity"] == quantity) & np.isclose(published["epsilon"].astype(float), sel["epsilon"])]
                model = mine[(mine["epsilon"] == sel["epsilon"]) & (mine["config_id"] == sel["config_id"])
                             & (mine["gamma"].isna() | (mine["gamma"] == sel["gamma"]))]
                if by_part:
                    model = model[model["sweep_id"] == str(sel["sweep_id"])]
                if curve.empty or model.empty or column not in model.columns:
                    continue
                gap, error, n = float(model[column].mean()), float(model["test_error"].mean()), len(model)
                at_gap = published_error(curve, gap)
                rows.append({"study": study, "method": ours, "published": f"{method} [{notion}]", "epsilon": sel["epsilon"],
                             "gamma": sel["gamma"], "config_id": sel["config_id"], "n_runs": n, "quantity": quantity, "suite_gap": gap,
                             "suite_error": error, "suite_error_se": float(model["test_error"].std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan,
                             "published_error_at_gap": at_gap, "difference": error - at_gap,
                             "published_gaps": f"[{curve['constraint_value'].min():.3g}, {curve['constraint_value'].max():.3g}]",
                             "source": str(curve["source"].iloc[0]).rsplit(":", 1)[-1]})
    return pd.DataFrame(rows)


def match_published(root: Path, references: Path) -> pd.DataFrame:
    """:func:`match_page` over every page under ``root`` whose phase-2 runs have the columns it reads."""
    frames, pairs = [], counterparts()
    wanted = set(RUN_COLUMNS) | {"sweep_id"} | set(quantities().values())
    for page in sorted(p.parent for p in root.glob("*/phase2_runs.csv") if (p.parent / "satisfaction.csv").is_file()):
        runs = pd.read_csv(page / "phase2_runs.csv", usecols=lambda c: c in wanted, dtype={"sweep_id": str})
        if runs.empty or not set(RUN_COLUMNS) <= set(runs.columns):
            continue  # no runs, or runs that lack a column read here: nothing to match
        refs = load_references(references, set(runs["dataset"]), str(runs["constraint"].iloc[0]))
        if refs is not None and not refs.empty:
            frames.append(match_page(runs, pd.read_csv(page / "satisfaction.csv", dtype={"sweep_id": str}), refs, page.name, pairs))
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def write_published_match(root: Path, references: Path) -> list[Path]:
    """``published_match.csv`` and ``published_match.md`` in ``root`` (nothing when no page has a counterpart)."""
    table = match_published(root, references)
    if table.empty:
        return []
    csv, md = root / "published_match.csv", root / "published_match.md"
    table.to_csv(csv, index=False)
    shown = table.drop(columns=["source"]).round(4)
    sources = "; ".join(sorted(set(table["source"])))
    md.write_text(
        "# The suite's selected models against the published curves, at the same ε and gap\n\n"
        f"Written by `raco-bench results {root}` from each page's phase2_runs.csv and {references.name} (docs/results.md, "
        "\"Against the published points\"). For each model the suite selected for the method with the published points' privacy "
        "notion, the published error at the model's mean test gap is interpolated linearly between the published points around it "
        "(empty outside the published range of gaps: no extrapolation). difference = the suite's mean test error minus that "
        "published error; suite error se = the standard error of the suite's mean over its phase-2 seeds. The published points "
        "are the source's own runs, under its own pipeline and its own δ (DP-FERMI's code: δ = 1/n²; the suite: 1e-5), and a "
        f"published curve is a sweep of one hyperparameter, not a selected front. Sources: {sources}.\n\n" + shown.to_markdown(index=False) + "\n")
    return [csv, md]
