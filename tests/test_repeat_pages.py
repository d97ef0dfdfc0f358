"""A study page with repeats (raco_bench/report/repeats.py): the fixture's ε = 1 part copied as repeats whose RaCO-DP
phase-2 errors are shifted by known amounts, so each cell's mean, interval and verdict are known in advance."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import t as student

from raco_bench.report.draw import labelled
from raco_bench.report.repeats import has_repeats, paired_cells
from raco_bench.report.results_page import build_page
from raco_bench.report.satisfaction import satisfaction_rows
from raco_bench.report.study import Part, Study, read_part, write_part

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "adult-dp-study" / "parts" / "df9adbe7906b.json"  # raco-dp, dp-sgd, sgd, dp-fermi at ε = 1


def _page(tmp_path: Path, shifts: list[float], build: bool = True, constraint_values: list[float] | None = None) -> Path:
    """The fixture part as repeats 0, 1, ...: RaCO-DP's phase-2 test errors of repeat r shifted by ``shifts[r]`` (and its
    test constraint values set to ``constraint_values[r]``); the page built from them (``build``) or its parts alone."""
    base = read_part(FIXTURE)
    page = tmp_path / "results" / "adult-repeats"
    for r, shift in enumerate(shifts):
        rows = base.rows.copy()
        raco = (rows["phase"] == 2) & (rows["method"] == "raco-dp")
        rows.loc[raco, "test_error"] += shift
        rows.loc[raco, "test_accuracy"] -= shift
        if constraint_values is not None:
            rows.loc[raco, "test_max_constraint"] = constraint_values[r]
        sweep = f"repeat{r:06d}"
        rows["sweep_id"] = sweep
        write_part(page, Part(sweep, base.experiment, rows, {**base.params, "sweep.repeat": str(r)}, base.provenance, base.wall_seconds,
                              base.selections, base.skipped))
    if build:
        build_page(page)
    return page


def _paired(page: Path) -> pd.DataFrame:
    """paired.csv's rows computed from the parts without drawing the page."""
    study = Study.read(page)
    rows, selections = labelled(study)
    return paired_cells(satisfaction_rows(rows, selections), study.repeat_of)


def _fixture_error(method: str, gamma: float | None) -> float:
    rows = read_part(FIXTURE).rows
    mine = rows[(rows["phase"] == 2) & (rows["method"] == method)]
    if gamma is not None and mine["gamma"].notna().any():
        mine = mine[np.isclose(mine["gamma"], gamma)]
    return float(mine["test_error"].mean())


def test_each_cell_is_the_mean_over_its_repeats_with_the_t_interval_and_a_clear_win_is_better(tmp_path):
    shifts = [-0.050, -0.046, -0.052, -0.048]
    page = _page(tmp_path, shifts)
    cells = pd.read_csv(page / "repeats.csv")
    raco = cells[(cells["method"] == "raco-dp") & np.isclose(cells["gamma"], 0.1)].iloc[0]
    per_repeat = [_fixture_error("raco-dp", 0.1) + s for s in shifts]
    half = student.ppf(0.975, 3) * np.std(per_repeat, ddof=1) / 2
    assert raco["repeats"] == 4 and raco["repeats_with_model"] == 4 and raco["runs"] == 8
    assert raco["test_error"] == pytest.approx(np.mean(per_repeat), abs=1e-6)
    assert raco["test_error_low"] == pytest.approx(np.mean(per_repeat) - half, abs=1e-6)
    assert "trained with this γ" not in raco["search_per_cell"] and raco["search_per_cell"] == "3 configurations × 2 seeds for this γ"
    fermi = cells[(cells["method"] == "dp-fermi") & np.isclose(cells["gamma"], 0.05)].iloc[0]
    assert fermi["repeats_with_model"] == 0 and math.isnan(fermi["test_error"])  # no configuration met γ = 0.05: no model, said
    assert cells[cells["method"] == "dp-fermi"]["search_per_cell"].iloc[0] == "3 configurations × 2 seeds, trained once and selected for every γ"
    paired = pd.read_csv(page / "paired.csv")
    assert set(paired["method"]) == {"raco-dp"} and set(paired["against"]) == {"dp-fermi"}  # raco-dp's plugin names dp-fermi; sgd: not compared
    row = paired[np.isclose(paired["gamma"], 0.1)].iloc[0]
    assert row["repeats_paired"] == 4 and row["error_verdict"] == "better"
    assert row["test_error_difference"] == pytest.approx(np.mean(per_repeat) - _fixture_error("dp-fermi", None), abs=1e-6)
    text = (page / "README.md").read_text()
    assert "## Repeats: the mean over repeats with its 95 % interval (repeats.csv)" in text and "| better" in text
    assert Study.read(page).repeat_of == {f"repeat{r:06d}": r for r in range(4)}


def test_a_difference_inside_the_spread_of_the_repeats_is_no_detectable_difference(tmp_path):
    gap = _fixture_error("raco-dp", 0.1) - _fixture_error("dp-fermi", None)
    page = _page(tmp_path, [-gap + d for d in (-0.03, 0.02, -0.01, 0.025)], build=False)  # RaCO-DP around DP-FERMI's error, ± 0.03
    row = _paired(page).query("gamma > 0.09").iloc[0]
    assert row["test_error_difference_low"] < 0 < row["test_error_difference_high"]
    assert row["error_verdict"] == "no detectable difference at this size"


def test_a_study_of_one_repeat_per_cell_has_no_repeats_section():
    """The section appears only where some cell ran in two repeats: the fixture's three parts are three cells' single runs."""
    study = Study.read(FIXTURE.parents[1])
    assert not has_repeats(study.repeat_of, labelled(study)[1])
    assert "## Repeats" not in write_readme_lines_of(FIXTURE.parents[1])


def write_readme_lines_of(folder: Path) -> str:
    """The repeats section :func:`raco_bench.report.results_page._repeat_lines` would add to ``folder``'s page."""
    from raco_bench.report.draw import Drawn
    from raco_bench.report.results_page import _repeat_lines

    study = Study.read(folder)
    rows, selections = labelled(study)
    drawn = Drawn(rows=rows, selections=selections, satisfaction=satisfaction_rows(rows, selections))
    return "\n".join(_repeat_lines(folder, study, drawn))


def test_a_figure_draws_a_cell_of_several_repeats_as_one_point_with_its_interval(tmp_path):
    """The figures' points (report/points.py): one per cell, at the mean over its repeats, its bars the t interval."""
    from raco_bench.report.load import aggregate
    from raco_bench.report.points import selected_points

    shifts = [-0.05, -0.03, -0.04]
    page = _page(tmp_path, shifts, build=False)
    study = Study.read(page)
    rows, selections = labelled(study)
    selections = [{**s, "repeat": study.repeat_of[s["sweep_id"]]} for s in selections]
    points = selected_points(aggregate(rows), selections)
    raco = points[(points["method"] == "raco-dp") & np.isclose(points["selected_gamma"], 0.1)]
    assert len(raco) == 1 and int(raco["repeats"].iloc[0]) == 3
    per_repeat = [_fixture_error("raco-dp", 0.1) + s for s in shifts]
    assert raco["test_error"].iloc[0] == pytest.approx(np.mean(per_repeat), abs=1e-6)
    half = student.ppf(0.975, 2) * np.std(per_repeat, ddof=1) / math.sqrt(3)
    assert raco["test_error_sd"].iloc[0] == pytest.approx(half, abs=1e-6)
    assert len(points) == len(points.drop_duplicates(["method", "epsilon", "selected_gamma"]))


def test_a_cell_run_as_repeats_leaves_out_the_same_cell_of_a_part_from_before_repeats(tmp_path):
    """A part from before repeats (no sweep.repeat) that searched a cell the repeats also hold is another search of the
    protocol's split: the cell rests on the repeats alone (rows, selections, intervals) and the page says what was left out;
    its other cells stay."""
    page = _page(tmp_path, [0.0, 0.0, 0.0], build=False)
    base = read_part(FIXTURE)
    old = base.rows.copy()
    old["sweep_id"] = "older0000000"
    raco = (old["phase"] == 2) & (old["method"] == "raco-dp")
    old.loc[raco, "test_error"] += 0.3  # if it were kept, RaCO-DP's cells would move by about 0.3 / 4
    old = old[old["method"].isin({"raco-dp", "dp-sgd"})].copy()  # an older part: RaCO-DP at ε = 1 (repeated), DP-SGD at ε = 3 (not)
    old.loc[old["method"] == "dp-sgd", "epsilon"] = 3.0
    selections = [s for s in base.selections if s["method"] == "raco-dp"] + [{**s, "epsilon": 3.0} for s in base.selections if s["method"] == "dp-sgd"]
    cut = Part("older0000000", base.experiment, old, {k: v for k, v in base.params.items() if k != "sweep.repeat"}, base.provenance,
               base.wall_seconds, selections, base.skipped)
    write_part(page, cut)
    study = Study.read(page)
    assert [m for m, *_ in study.superseded["older0000000"]] == ["raco-dp"]
    rows = study.rows
    assert set(rows.loc[rows["sweep_id"] == "older0000000", "method"]) == {"dp-sgd"}  # its cell the repeats lack stays
    assert {s["method"] for s in study.selections if s["sweep_id"] == "older0000000"} == {"dp-sgd"}
    build_page(page)
    cells = pd.read_csv(page / "repeats.csv")
    raco = cells[(cells["method"] == "raco-dp") & np.isclose(cells["gamma"], 0.1)].iloc[0]
    assert raco["repeats"] == 3 and raco["test_error"] == pytest.approx(_fixture_error("raco-dp", 0.1), abs=1e-6)
    assert "- **Left out:** raco-dp at ε = 1: searched again in the parts run as repeats" in (page / "README.md").read_text()


def test_two_repeats_far_apart_give_intervals_inside_what_an_error_or_a_gap_can_be(tmp_path):
    """Two repeats of a cell, one selecting a model near 0.01 error and one near 0.77: the t interval with one degree of
    freedom is the mean ± 4.8, printed as such it claims negative errors. repeats.csv's interval is clipped to [0, 1]
    (an error), the constraint value's to its family's [0, 1] (demographic parity), the paired difference's to
    [−1, 1]; the verdict is the unclipped one's (raco_bench/report/ranges.py)."""
    from raco_bench.report.repeats import repeat_cells

    e = _fixture_error("raco-dp", 0.1)
    page = _page(tmp_path, [0.01 - e, 0.77 - e], build=False, constraint_values=[0.002, 0.3])
    study = Study.read(page)
    rows, selections = labelled(study)
    cells = repeat_cells(rows, selections, satisfaction_rows(rows, selections), study.repeat_of)
    raco = cells[(cells["method"] == "raco-dp") & np.isclose(cells["gamma"], 0.1)].iloc[0]
    assert raco["test_error"] == pytest.approx(0.39, abs=1e-6)
    assert (raco["test_error_low"], raco["test_error_high"]) == (0.0, 1.0)  # unclipped: 0.39 ± 4.83
    assert raco["test_max_constraint"] == pytest.approx(0.151) and raco["test_max_constraint_low"] == 0.0  # unclipped: 0.151 ± 1.89
    assert raco["test_max_constraint_high"] == 1.0
    row = _paired(page).query("gamma > 0.09").iloc[0]
    assert -1.0 <= row["test_error_difference_low"] < 0 < row["test_error_difference_high"] <= 1.0
    assert row["error_verdict"] == "no detectable difference at this size"
