"""A study's repeats on its page: each cell's mean over repeats with its interval, and the paired comparisons.

A part's repeat is its sweep's ``sweep.repeat`` (0 for a sweep from before repeats, the protocol's split and search):
parts with the same (method, ε, γ) and different repeats are independent runs of the whole protocol
(:mod:`raco_bench.report.intervals`). From the selected configurations on test (:mod:`raco_bench.report.satisfaction`,
one row per part's selection) this module makes:

* ``repeats.csv``: per series, ε and γ, the repeats run and those that selected a model, the mean test error and test
  constraint value over repeats with their 95 % t intervals, the share of phase-2 runs meeting γ with its interval,
  and what each repeat searched for the cell (a γ-free method searches once per ε and is selected for every γ);
* ``paired.csv``: for every method that names others in ``compared_with`` (its plugin), the difference in test error and
  in the share meeting γ against each of them, repeat by repeat, with the interval and the verdict read from it.
"""

from __future__ import annotations

import math

import pandas as pd

from raco_bench.methods import REGISTRY, get_method
from raco_bench.report.intervals import Interval, paired_difference, paired_share_difference, share_interval, t_interval, verdict
from raco_bench.report.ranges import UNIT, difference, value_ranges
from raco_bench.report.series import base_method
from raco_bench.report.study import eps_key

REPEAT_COLUMNS = ["method", "epsilon", "gamma", "repeats", "repeats_with_model", "test_error", "test_error_low", "test_error_high",
                  "test_max_constraint", "test_max_constraint_low", "test_max_constraint_high", "share_meeting", "share_meeting_low",
                  "share_meeting_high", "runs", "search_per_cell", "repeats_flagged"]
PAIRED_COLUMNS = ["method", "against", "epsilon", "gamma", "repeats_paired", "test_error_difference", "test_error_difference_low",
                  "test_error_difference_high", "error_verdict", "share_meeting_difference", "share_meeting_difference_low",
                  "share_meeting_difference_high", "share_verdict"]


def _key(method: str, epsilon, gamma) -> tuple[str, float, float]:
    return str(method), eps_key(epsilon), round(float(gamma), 6)


def has_repeats(repeat_of: dict[str, int], selections: list[dict]) -> bool:
    """Whether some cell of the study was run in more than one repeat (then the page has its repeats section)."""
    seen: dict[tuple, set[int]] = {}
    for s in selections:
        seen.setdefault(_key(s["method"], s["epsilon"], s["gamma"]), set()).add(repeat_of.get(s.get("sweep_id", ""), 0))
    return any(len(r) > 1 for r in seen.values())


def _search_note(rows: pd.DataFrame, method: str, epsilon: float) -> str:
    """What one repeat searched for a cell of ``method`` at ``epsilon``: configurations × seeds, and whether they serve
    every γ (a γ-free method) or this γ alone."""
    phase1 = rows[(rows["phase"] == 1) & (rows["method"] == method) & (rows["epsilon"].astype(float).fillna(math.inf) == epsilon)]
    if phase1.empty:
        return ""
    per_part = phase1.groupby("sweep_id")
    configs = int(per_part["config_id"].nunique().median())
    free = phase1["gamma"].isna().all()
    if free:
        seeds = int(round(per_part.size().median() / max(configs, 1)))
        return f"{configs} configurations × {seeds} seeds, trained once and selected for every γ"
    gammas = max(phase1.groupby("sweep_id")["gamma"].nunique().median(), 1)
    seeds = int(round(per_part.size().median() / max(configs * gammas, 1)))
    return f"{configs} configurations × {seeds} seeds for this γ"


def repeat_cells(rows: pd.DataFrame, selections: list[dict], sat: pd.DataFrame, repeat_of: dict[str, int]) -> pd.DataFrame:
    """``repeats.csv`` (the module docstring) from the labelled rows, the selections and the satisfaction rows."""
    ran: dict[tuple, set[int]] = {}
    for s in selections:
        ran.setdefault(_key(s["method"], s["epsilon"], s["gamma"]), set()).add(repeat_of.get(s.get("sweep_id", ""), 0))
    sat = sat.assign(repeat=sat["sweep_id"].map(lambda i: repeat_of.get(i, 0)))
    ranges = value_ranges(rows)
    out = []
    for key, repeats in sorted(ran.items()):
        method, epsilon, gamma = key
        mine = _cell(sat, method, epsilon, gamma)
        error = t_interval(mine["test_error"].tolist(), within=ranges["test_error"])
        constraint = t_interval(mine["test_max_constraint"].tolist(), within=ranges.get("test_max_constraint"))
        met = _met_counts(mine)
        share = share_interval([m for m, _ in met], [n for _, n in met])
        out.append({"method": method, "epsilon": epsilon, "gamma": gamma, "repeats": len(repeats), "repeats_with_model": mine["repeat"].nunique(),
                    "test_error": error.estimate, "test_error_low": error.low, "test_error_high": error.high,
                    "test_max_constraint": constraint.estimate, "test_max_constraint_low": constraint.low, "test_max_constraint_high": constraint.high,
                    "share_meeting": share.estimate, "share_meeting_low": share.low, "share_meeting_high": share.high,
                    "runs": int(mine["n_runs"].sum()), "search_per_cell": _search_note(rows, method, epsilon),
                    "repeats_flagged": flagged_count(mine)})
    return pd.DataFrame(out, columns=REPEAT_COLUMNS)


def flagged_count(sat: pd.DataFrame) -> int:
    """How many of these selected models the health rules flag (a constant or one-class predictor, too few steps:
    :mod:`raco_bench.training.health`; capped alone is not a flag of a useless model)."""
    if "health" not in sat:
        return 0
    health = sat["health"].dropna().astype(str)  # a missing verdict is not a flag
    return int((~health.isin(["ok", "capped", ""])).sum())


def _cell(sat: pd.DataFrame, method: str, epsilon: float, gamma: float) -> pd.DataFrame:
    """The satisfaction rows of one (method, ε, γ) cell, a row per repeat with a selected model."""
    return sat[(sat["method"] == method) & (sat["epsilon"].astype(float) == epsilon) & ((sat["gamma"] - gamma).abs() < 1e-9)]


def _met_counts(rows: pd.DataFrame) -> list[tuple[int, int]]:
    """Per row, (phase-2 runs meeting γ, runs), from its share and run count."""
    return [(int(round(s * n)), int(n)) for s, n in zip(rows["share_meeting"], rows["n_runs"])]


def _per_repeat_errors(sat: pd.DataFrame, method: str, epsilon: float, gamma: float) -> dict[int, float]:
    mine = _cell(sat, method, epsilon, gamma)
    return {int(r): float(v) for r, v in zip(mine["repeat"], mine["test_error"])}


def _per_repeat_met(sat: pd.DataFrame, method: str, epsilon: float, gamma: float) -> dict[int, tuple[int, int]]:
    mine = _cell(sat, method, epsilon, gamma)
    return dict(zip((int(r) for r in mine["repeat"]), _met_counts(mine)))


def _pipeline(series: str) -> str:
    return str(series)[len(base_method(series)):]


def comparisons(methods: set[str]) -> list[tuple[str, str]]:
    """(A, B) for every series A whose method names B's method in ``compared_with``, both under the same pipeline."""
    pairs = []
    for a in sorted(methods):
        name = base_method(a)
        if name not in REGISTRY:
            continue
        for other in get_method(name).compared_with:
            b = other + _pipeline(a)
            if b in methods:
                pairs.append((a, b))
    return pairs


def paired_cells(sat: pd.DataFrame, repeat_of: dict[str, int]) -> pd.DataFrame:
    """``paired.csv`` (the module docstring): A − B per repeat at each ε and γ of A; B at the same ε, or at ε = ∞ for a
    non-private B."""
    sat = sat.assign(repeat=sat["sweep_id"].map(lambda i: repeat_of.get(i, 0)), epsilon=sat["epsilon"].astype(float))
    out = []
    for a, b in comparisons(set(sat["method"])):
        b_eps = set(sat.loc[sat["method"] == b, "epsilon"])
        for (epsilon, gamma), _ in sat[sat["method"] == a].groupby(["epsilon", "gamma"]):
            other_eps = epsilon if epsilon in b_eps else (math.inf if math.inf in b_eps else None)
            if other_eps is None:
                continue
            error = paired_difference(_per_repeat_errors(sat, a, epsilon, gamma), _per_repeat_errors(sat, b, other_eps, gamma),
                                      within=difference(UNIT))
            met = paired_share_difference(_per_repeat_met(sat, a, epsilon, gamma), _per_repeat_met(sat, b, other_eps, gamma))
            out.append({"method": a, "against": b if other_eps == epsilon else f"{b} (non-private)", "epsilon": epsilon, "gamma": gamma,
                        "repeats_paired": error.n, "test_error_difference": error.estimate, "test_error_difference_low": error.low,
                        "test_error_difference_high": error.high, "error_verdict": verdict(error, lower_is_better=True),
                        "share_meeting_difference": met.estimate, "share_meeting_difference_low": met.low,
                        "share_meeting_difference_high": met.high, "share_verdict": verdict(met, lower_is_better=False)})
    return pd.DataFrame(out, columns=PAIRED_COLUMNS)


SPREAD = "_sd"  # a figure's bar column beside each value column


def over_repeats(frame: pd.DataFrame, keys: list[str], values: list[str]) -> tuple[pd.DataFrame, int]:
    """What a figure draws where a cell ran in several repeats: one row per ``keys`` (a cell) holding, for each column of
    ``values``, the mean over its repeats' rows and, in ``<column>_sd``, the half-width of the 95 % t interval over them
    (a cell of one repeat keeps its row, and its bars: the spread over its seeds; the figure clips either to the range
    of the column's values, :mod:`raco_bench.report.ranges`). ``frame`` has a ``repeat`` column; returns the frame and
    how many cells were folded."""
    if "repeat" not in frame or frame.empty:
        return frame, 0
    rows, folded = [], 0
    for _, cell in frame.groupby(keys, dropna=False, sort=False):
        if cell["repeat"].nunique() < 2:
            rows.append(cell)
            continue
        folded += 1
        first = cell.iloc[[0]].copy()
        for col in values:
            interval = t_interval(cell[col].astype(float).tolist())
            first[col] = interval.estimate
            if col + SPREAD in first:
                first[col + SPREAD] = interval.estimate - interval.low
        for flag in ("capped",):
            if flag in first:
                first[flag] = bool(cell[flag].any())
        if "health" in first:
            flagged = [h for h in cell["health"].astype(str) if h not in ("ok", "")]
            first["health"] = flagged[0] if flagged else "ok"
        first["repeats"] = cell["repeat"].nunique()
        rows.append(first)
    return pd.concat(rows, ignore_index=True), folded


FOLDED_NOTE = ("{n} cell(s) ran in several repeats of the protocol: each is drawn as one point, the mean over its repeats, whose bars are "
               "the 95 % t interval over the repeats (not the spread over one repeat's seeds; repeats.csv)")


def _interval_text(row, column: str, digits: int = 4) -> str:
    return Interval(row[column], row[f"{column}_low"], row[f"{column}_high"], 0).text(digits)


def repeats_markdown(cells: pd.DataFrame) -> str:
    table = pd.DataFrame({
        "method": cells["method"], "ε": cells["epsilon"].map(lambda e: "∞" if e == math.inf else f"{e:g}"), "γ": cells["gamma"].map("{:g}".format),
        "repeats (with a model)": [f"{r} ({m})" for r, m in zip(cells["repeats"], cells["repeats_with_model"])],
        "test error [95 % CI]": [_interval_text(r, "test_error") for _, r in cells.iterrows()],
        "test constraint value [95 % CI]": [_interval_text(r, "test_max_constraint") for _, r in cells.iterrows()],
        "share of runs meeting γ [95 % CI]": [_interval_text(r, "share_meeting", 3) for _, r in cells.iterrows()],
        "runs": cells["runs"], "searched per repeat": cells["search_per_cell"],
        "selected models flagged (health)": [flagged_text(r) for _, r in cells.iterrows()],
    })
    return table.to_markdown(index=False)


def flagged_text(cell) -> str:
    """A ``repeats.csv`` row's flagged selected models, "k of n" ("not recorded" for a file from before the column)."""
    flagged = cell.get("repeats_flagged") if hasattr(cell, "get") else None
    if flagged is None or flagged != flagged:
        return "not recorded"
    return f"{int(flagged)} of {int(cell['repeats_with_model'])}"


def paired_markdown(paired: pd.DataFrame) -> str:
    table = pd.DataFrame({
        "method": paired["method"], "against": paired["against"], "ε": paired["epsilon"].map(lambda e: "∞" if e == math.inf else f"{e:g}"),
        "γ": paired["gamma"].map("{:g}".format), "repeats": paired["repeats_paired"],
        "test error difference [95 % CI]": [_interval_text(r, "test_error_difference") for _, r in paired.iterrows()],
        "verdict (error)": paired["error_verdict"],
        "share meeting γ difference [95 % CI]": [_interval_text(r, "share_meeting_difference", 3) for _, r in paired.iterrows()],
        "verdict (share meeting γ)": paired["share_verdict"],
    })
    return table.to_markdown(index=False)
