"""`raco-bench results DIR`: RaCO-DP against every other method, study by study, from the published results pages.

Each page under ``DIR`` (``raco-bench report --results DIR/STUDY``) holds ``satisfaction.csv``: per method, ε and γ,
the selected configuration's phase-2 mean and standard deviation on test. For each study, private ε and other
method, the comparison states (docs/results.md):

* **Pareto dominance** (the papers' Fig. 2 claim): of the other method's selected configurations (mean test error and
  mean test constraint value over their phase-2 seeds; one point per model: a configuration of a method trained without γ
  selected for several γ is one point), the share that some RaCO-DP point dominates (no worse on both, better on one), and the converse share;
* **error at matched γ**: over the targets γ where both methods selected a configuration, how often RaCO-DP's mean
  test error is lower, equal within noise, or higher. "Within noise" is a difference below twice the standard error
  of the difference of the two means. A γ at or below the page's validation noise floor (``noise_floor.csv``,
  :mod:`raco_bench.report.noise_floor`) is not compared: there, which configuration meets γ on validation is decided
  by the split's rows more than by the method. Such γ are counted in their own column;
* **mean test error at matched γ**: RaCO-DP's and the other method's, averaged over the γ compared;
* **satisfaction** (Fig. 3): the share of phase-2 runs whose test constraint value meets γ, averaged over the γ each method
  selected a configuration for (RaCO-DP's and the other method's; a γ with no selection does not count).

A non-private method (ε = ∞) is compared in every ε panel, as the figures draw it.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from raco_bench.methods import DEFAULT_METHOD
from raco_bench.report.load import ReportError
from raco_bench.report.noise_floor import read_noise_floor, validation_floor
from raco_bench.report.pareto import non_dominated

REFERENCE = DEFAULT_METHOD  # the suite's own method, compared with each other method
OLD_COLUMNS = {"test_violation": "test_max_constraint", "test_violation_sd": "test_max_constraint_sd"}  # one name per quantity (docs/results.md)


def load_pages(root: Path) -> pd.DataFrame:
    """Every page's selections on test (its ``satisfaction.csv``: one row per method, ε and γ, with the selected
    configuration's phase-2 mean and sd), with ``study``, ``dataset`` and ``constraint`` columns."""
    pages = sorted(p.parent for p in root.glob("*/satisfaction.csv") if (p.parent / "phase2_runs.csv").exists())
    if not pages:
        raise ReportError(f"no results page under {root} (a page is a folder with satisfaction.csv and phase2_runs.csv); "
                          "write one with `raco-bench report --experiment NAME --results DIR/STUDY`")
    frames = []
    for page in pages:
        runs = pd.read_csv(page / "phase2_runs.csv", usecols=["dataset", "constraint", "method", "privacy_notion"])
        notions = runs.drop_duplicates("method").set_index("method")["privacy_notion"]
        sat = pd.read_csv(page / "satisfaction.csv", dtype={"sweep_id": str}).rename(columns=OLD_COLUMNS)  # pages written before the rename
        dataset, constraint = runs["dataset"].iloc[0], runs["constraint"].iloc[0]
        val_floor = validation_floor(read_noise_floor(page, dataset, constraint))
        frames.append(sat.assign(study=page.name, dataset=dataset, constraint=constraint, val_floor=val_floor,
                                 privacy_notion=sat["method"].map(notions).fillna("")))
    return pd.concat(frames, ignore_index=True)


def _dominated_share(theirs: np.ndarray, ours: np.ndarray) -> float:
    """Share of ``theirs`` (rows: constraint value, error) dominated by some point of ``ours``."""
    if not len(theirs) or not len(ours):
        return math.nan
    return float(np.mean([not non_dominated(np.vstack([ours, p[None, :]]))[-1] for p in theirs]))


def _matched(ours: pd.DataFrame, theirs: pd.DataFrame, floor: float = math.nan) -> tuple[int, int, int, int, float, float]:
    """(lower, within noise, higher, below the floor, RaCO-DP's mean error, theirs): RaCO-DP's test error against theirs
    at each γ both selected a configuration for and above the validation noise ``floor`` (NaN: not measured, every γ
    compared); the γ at or below it are only counted. The mean errors are over the γ compared."""
    both = ours.merge(theirs, on="gamma", suffixes=("_a", "_b"))
    below = int((both["gamma"] <= floor).sum())
    both = both[~(both["gamma"] <= floor)]
    if both.empty:
        return 0, 0, 0, below, math.nan, math.nan
    lower = tie = higher = 0
    for _, r in both.iterrows():
        se = math.sqrt(r["test_error_sd_a"] ** 2 / max(r["n_runs_a"], 1) + r["test_error_sd_b"] ** 2 / max(r["n_runs_b"], 1))
        diff = r["test_error_b"] - r["test_error_a"]
        if abs(diff) <= 2 * se:
            tie += 1
        elif diff > 0:
            lower += 1
        else:
            higher += 1
    return lower, tie, higher, below, float(both["test_error_a"].mean()), float(both["test_error_b"].mean())


def _points(sel: pd.DataFrame) -> np.ndarray:
    """The distinct selected models' (mean test constraint value, mean test error). For a method trained without γ
    (``gamma_is_input`` false: DP-FERMI, PF-LD, …) a configuration (of one part) selected for several γ is one model and one point;
    for a method that takes γ as a training input, each (γ, configuration) is its own model."""
    from raco_bench.methods import method_class
    from raco_bench.report.series import base_method

    try:
        gamma_free = not method_class(base_method(sel["method"].iloc[0])).gamma_is_input if len(sel) else False
    except ValueError:  # a method this installation does not know: each row its own model
        gamma_free = False
    model = [c for c in ("sweep_id", "config_id") if c in sel.columns]  # config ids are per sweep (per part of a study)
    distinct = sel.drop_duplicates(model) if gamma_free else sel
    return distinct[["test_max_constraint", "test_error"]].to_numpy(dtype=float)


def compare(selections: pd.DataFrame) -> pd.DataFrame:
    """One row per (study, ε, other method): the measures of the module docstring."""
    rows = []
    sel = selections.fillna({"test_error_sd": 0.0, "test_max_constraint_sd": 0.0})
    for study, frame in sel.groupby("study"):
        floor = float(frame["val_floor"].iloc[0]) if "val_floor" in frame else math.nan  # NaN: not measured, every γ compared
        for eps in sorted(e for e in frame["epsilon"].unique() if math.isfinite(e)):
            ours = frame[(frame["method"] == REFERENCE) & (frame["epsilon"] == eps)]
            if ours.empty:
                continue
            panel = frame[((frame["epsilon"] == eps) | ~np.isfinite(frame["epsilon"])) & (frame["method"] != REFERENCE)]
            for method, theirs in panel.groupby("method"):
                lower, tie, higher, below, our_error, their_error = _matched(ours, theirs, floor)
                rows.append({
                    "study": study, "dataset": frame["dataset"].iloc[0], "constraint": frame["constraint"].iloc[0], "epsilon": eps,
                    "method": method, "privacy_notion": theirs["privacy_notion"].iloc[0],
                    "their_points_dominated_by_raco_dp": _dominated_share(_points(theirs), _points(ours)),
                    "raco_dp_points_dominated_by_them": _dominated_share(_points(ours), _points(theirs)),
                    "gammas_compared": lower + tie + higher, "raco_dp_lower_error": lower, "within_noise": tie, "raco_dp_higher_error": higher,
                    "gammas_below_floor": below,
                    "raco_dp_mean_error_matched": our_error, "their_mean_error_matched": their_error,
                    "raco_dp_share_meeting_gamma": float(ours["share_meeting"].mean()), "their_share_meeting_gamma": float(theirs["share_meeting"].mean()),
                })
    return pd.DataFrame(rows)


def write_comparison(root: Path) -> list[Path]:
    """``comparison.csv``, ``comparison.md`` and ``comparison.tex`` in ``root``; returns the paths."""
    from raco_bench.report.tables import latex_table

    table = compare(load_pages(root))
    csv, md, tex = root / "comparison.csv", root / "comparison.md", root / "comparison.tex"
    table.to_csv(csv, index=False)
    from raco_bench.report.figures import short_notion

    named = table.assign(method=[f"{m} [{short_notion(n)}]" for m, n in zip(table["method"], table["privacy_notion"])]) if len(table) else table
    shown = named.drop(columns=["dataset", "constraint", "privacy_notion"]).round(3)  # the notion stays beside each method's name
    shown.columns = [c.replace("_", " ") for c in shown.columns]
    md.write_text(
        "# RaCO-DP against every other method, per study and ε\n\n"
        "Written by `raco-bench results " + str(root) + "` from each page's satisfaction.csv (docs/results.md). "
        "A point is one selected model: its mean test constraint value and error over its phase-2 seeds. \"Dominated\": some point "
        "of the other method is no worse on both and better on one. Errors are compared at the γ both methods selected for; "
        "\"within noise\": the difference is below twice its standard error (phase-2 seeds only, not the selection's noise). "
        "The share meeting γ is averaged over the γ each method selected for. A non-private method appears at every ε.\n\n"
        + shown.to_markdown(index=False) + "\n")
    tex.write_text(latex_table(shown, "RaCO-DP against every other method, per study and epsilon (raco-bench results; docs/results.md).",
                               "tab:comparison", "%.3g").replace("ε", r"$\varepsilon$").replace("γ", r"$\gamma$"))
    return [csv, md, tex]
