"""The suite's A-only DP-FERMI against DP-FERMI's published curve at the same ε and gap: checked on a hand-made page
whose interpolated published errors are known."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from raco_bench.report.published_match import match_published, published_error, write_published_match

A_ONLY = "dp-fermi-a-only"


def _study(root):
    """One page: the A-only model selected for γ 0.05 and 0.10 (γ NaN in its runs: trained without γ) at ε 1 with a
    mean gap of 0.06 and mean error 0.20; its paper-pipeline variant (not matched); a model at ε 3 (no published
    curve there). Published at ε 1: errors 0.25 at gap 0.02 and 0.15 at gap 0.10, so 0.20 at 0.06."""
    page = root / "adult-demographic-parity"
    page.mkdir(parents=True)
    base = dict(dataset="adult", constraint="demographic-parity", sweep_id="aaa")
    runs = [dict(base, method=A_ONLY, epsilon=1.0, gamma=math.nan, config_id=4, test_error=e, test_dp_gap=g)
            for e, g in [(0.19, 0.05), (0.21, 0.07)]]
    runs += [dict(base, method=f"{A_ONLY} (paper pipeline, OUTSIDE THE BUDGET)",
                  epsilon=1.0, gamma=math.nan, config_id=4, test_error=0.1, test_dp_gap=0.06)]
    runs += [dict(base, method=A_ONLY, epsilon=3.0, gamma=math.nan, config_id=9, test_error=0.2, test_dp_gap=0.06)]
    # what must not be pooled with configuration 4's runs: the same id at another ε, in another part, and a run that
    # carries another γ (as a method trained with γ records it)
    runs += [dict(base, method=A_ONLY, epsilon=3.0, gamma=math.nan, config_id=4, test_error=0.4, test_dp_gap=0.09),
             dict(base, method=A_ONLY, epsilon=1.0, gamma=math.nan, config_id=4, test_error=0.4, test_dp_gap=0.09, sweep_id="bbb"),
             dict(base, method=A_ONLY, epsilon=1.0, gamma=0.5, config_id=4, test_error=0.4, test_dp_gap=0.09)]
    pd.DataFrame(runs).to_csv(page / "phase2_runs.csv", index=False)
    selected = [(A_ONLY, 1.0, g, 4, "aaa") for g in (0.05, 0.10)] + [(A_ONLY, 3.0, 0.05, 9, "aaa"),
                                                                        (f"{A_ONLY} (paper pipeline, OUTSIDE THE BUDGET)", 1.0, 0.05, 4, "aaa")]
    pd.DataFrame(selected, columns=["method", "epsilon", "gamma", "config_id", "sweep_id"]).to_csv(page / "satisfaction.csv", index=False)
    refs = root / "references.csv"
    pd.DataFrame([("dp-fermi", "adult", "demographic-parity", 1.0, e, g, "github:x/y@1:Figures/a.pt", "dp_gap", "A-only DP")
                  for e, g in [(0.25, 0.02), (0.15, 0.10)]]
                 + [("dp-fermi", "adult", "demographic-parity", 1.0, 0.5, 0.06, "github:x/y@1:Figures/b.pt", "dp_gap", "record-level DP")],
                 columns=["method", "dataset", "constraint", "epsilon", "error", "constraint_value", "source", "quantity", "notion"]).to_csv(refs, index=False)
    return refs


def test_published_error_interpolates_inside_the_curve_only():
    curve = pd.DataFrame({"constraint_value": [0.10, 0.02, 0.02], "error": [0.15, 0.24, 0.26]})  # unsorted; two points at one gap
    assert published_error(curve, 0.06) == pytest.approx(0.20)
    assert published_error(curve, 0.02) == pytest.approx(0.25)
    assert math.isnan(published_error(curve, 0.01)) and math.isnan(published_error(curve, 0.11))  # no extrapolation
    assert math.isnan(published_error(curve.iloc[:1], 0.10))


def test_the_selected_a_only_model_is_matched_at_its_epsilon_and_gap(tmp_path):
    refs = _study(tmp_path)
    table = match_published(tmp_path, refs)
    assert list(table["gamma"]) == [0.05, 0.10]  # one model, on each γ it was selected for; ε 3 has no curve; the variant is not matched
    row = table.iloc[0]
    assert row["suite_gap"] == pytest.approx(0.06) and row["suite_error"] == pytest.approx(0.20)
    assert row["published_error_at_gap"] == pytest.approx(0.20)
    assert row["difference"] == pytest.approx(0.0, abs=1e-12)  # the record-level point at (0.06, 0.5) is not on the curve
    assert row["suite_error_se"] == pytest.approx(pd.Series([0.19, 0.21]).std() / math.sqrt(2)) and row["n_runs"] == 2
    assert row["published"] == "dp-fermi [A-only DP]" and row["source"] == "Figures/a.pt" and row["published_gaps"] == "[0.02, 0.1]"
    md = write_published_match(tmp_path, refs)[1].read_text()
    assert "no extrapolation" in md and "adult-demographic-parity" in md


def test_no_counterpart_writes_nothing(tmp_path):
    refs = _study(tmp_path)
    frame = pd.read_csv(tmp_path / "adult-demographic-parity" / "phase2_runs.csv")
    frame.assign(method=frame["method"].str.replace(A_ONLY, "dp-fermi")).to_csv(tmp_path / "adult-demographic-parity" / "phase2_runs.csv", index=False)
    assert write_published_match(tmp_path, refs) == [] and not (tmp_path / "published_match.md").exists()


def test_selections_that_do_not_name_their_part_are_not_matched_across_parts(tmp_path):
    refs = _study(tmp_path)  # its runs hold two parts, aaa and bbb
    page = tmp_path / "adult-demographic-parity"
    pd.read_csv(page / "satisfaction.csv").drop(columns=["sweep_id"]).to_csv(page / "satisfaction.csv", index=False)
    assert match_published(tmp_path, refs).empty
