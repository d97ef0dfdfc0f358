"""`raco-bench results DIR`: RaCO-DP against every other method per study and ε, from results pages; checked on a
hand-made page whose dominance shares and matched-γ verdicts are known."""

from __future__ import annotations

import math
import subprocess
import sys

import pandas as pd
import pytest

from raco_bench.report.comparison import compare, load_pages, write_comparison
from raco_bench.report.load import ReportError

COLUMNS = ["method", "epsilon", "gamma", "config_id", "n_runs", "test_max_constraint", "test_max_constraint_sd", "test_error", "test_error_sd", "share_meeting"]


def _page(root, name, rows):
    page = root / name
    page.mkdir(parents=True)
    pd.DataFrame(rows, columns=COLUMNS).to_csv(page / "satisfaction.csv", index=False)
    pd.DataFrame({"dataset": ["adult"] * 3, "constraint": ["demographic-parity"] * 3, "method": ["raco-dp", "dp-fermi", "sgda"],
                  "privacy_notion": ["record-level add/remove DP", "record-level add/remove DP (full)", "none"]}).to_csv(page / "phase2_runs.csv", index=False)


def test_dominance_and_matched_gamma_verdicts(tmp_path):
    rows = [
        # RaCO-DP at ε = 1: two configurations, the first selected for two γ (one point)
        ("raco-dp", 1.0, 0.05, 3, 5, 0.04, 0.01, 0.180, 0.002, 1.0), ("raco-dp", 1.0, 0.10, 3, 5, 0.04, 0.01, 0.180, 0.002, 1.0),
        ("raco-dp", 1.0, 0.15, 4, 5, 0.12, 0.01, 0.170, 0.002, 0.6),
        # DP-FERMI: one point dominated by (0.04, 0.180), one not dominated; at γ 0.05 clearly worse, at 0.10 within noise,
        # at 0.15 clearly better than RaCO-DP
        ("dp-fermi", 1.0, 0.05, 1, 5, 0.05, 0.01, 0.200, 0.002, 1.0), ("dp-fermi", 1.0, 0.10, 2, 5, 0.02, 0.01, 0.181, 0.002, 0.8),
        ("dp-fermi", 1.0, 0.15, 5, 5, 0.11, 0.01, 0.160, 0.002, 1.0),
        ("dp-fermi", 1.0, 0.20, 5, 5, 0.11, 0.01, 0.160, 0.002, 1.0),  # DP-FERMI is trained without γ: the same model, one point
        # non-private SGDA: compared in every ε panel
        ("sgda", math.inf, 0.05, 0, 5, 0.03, 0.01, 0.165, 0.002, 1.0),
    ]
    _page(tmp_path, "adult-demographic-parity", rows)
    table = compare(load_pages(tmp_path)).set_index("method")
    fermi = table.loc["dp-fermi"]
    assert fermi["their_points_dominated_by_raco_dp"] == pytest.approx(1 / 3)  # (0.05, 0.200) only
    # RaCO-DP takes γ as a training input: its configuration 3 at γ 0.05 and 0.10 is two models, two points
    assert fermi["raco_dp_points_dominated_by_them"] == pytest.approx(1 / 3)  # (0.12, 0.170) by (0.11, 0.160)
    assert (fermi["gammas_compared"], fermi["raco_dp_lower_error"], fermi["within_noise"], fermi["raco_dp_higher_error"]) == (3, 1, 1, 1)
    assert fermi["raco_dp_share_meeting_gamma"] == pytest.approx((1 + 1 + 0.6) / 3) and fermi["privacy_notion"].endswith("(full)")
    assert fermi["raco_dp_mean_error_matched"] == pytest.approx((0.180 + 0.180 + 0.170) / 3)  # γ 0.20: RaCO-DP has none
    assert fermi["their_mean_error_matched"] == pytest.approx((0.200 + 0.181 + 0.160) / 3)
    sgda = table.loc["sgda"]
    assert sgda["epsilon"] == 1.0 and sgda["gammas_compared"] == 1 and sgda["raco_dp_higher_error"] == 1
    assert sgda["raco_dp_points_dominated_by_them"] == 1.0  # (0.03, 0.165) dominates both RaCO-DP points

    paths = write_comparison(tmp_path)
    assert [p.name for p in paths] == ["comparison.csv", "comparison.md", "comparison.tex"] and "adult-demographic-parity" in paths[1].read_text()
    tex = paths[2].read_text()
    assert tex.startswith("\\begin{table}") and "\\toprule" in tex and "adult-demographic-parity & 1 & dp-fermi" in tex


def test_gammas_at_or_below_the_validation_noise_floor_are_counted_not_compared(tmp_path):
    """A page whose noise_floor.csv puts the validation floor at 0.10: γ 0.05 and 0.10 (where RaCO-DP is clearly worse
    and within noise) are only counted; γ 0.15 (clearly better) is the one comparison. Without the file every γ is compared."""
    from raco_bench.report.noise_floor import COLUMNS as FLOOR_COLUMNS

    rows = [("raco-dp", 1.0, g, i, 5, 0.04, 0.01, e, 0.002, 1.0) for i, (g, e) in enumerate([(0.05, 0.200), (0.10, 0.181), (0.15, 0.160)])]
    rows += [("dp-fermi", 1.0, g, 7, 5, 0.05, 0.01, e, 0.002, 1.0) for g, e in [(0.05, 0.180), (0.10, 0.180), (0.15, 0.170)]]
    _page(tmp_path, "adult-demographic-parity", rows)
    unfloored = compare(load_pages(tmp_path)).set_index("method").loc["dp-fermi"]
    assert (unfloored["gammas_compared"], unfloored["gammas_below_floor"], unfloored["raco_dp_higher_error"]) == (3, 0, 1)
    floor = [("adult", "demographic-parity", split, 1000, 300, f, f * 1.5, 1000) for split, f in (("val", 0.10), ("test", 0.08))]
    pd.DataFrame(floor, columns=list(FLOOR_COLUMNS)).to_csv(tmp_path / "adult-demographic-parity" / "noise_floor.csv", index=False)
    fermi = compare(load_pages(tmp_path)).set_index("method").loc["dp-fermi"]
    assert (fermi["gammas_compared"], fermi["gammas_below_floor"], fermi["raco_dp_lower_error"], fermi["raco_dp_higher_error"]) == (1, 2, 1, 0)
    assert fermi["raco_dp_mean_error_matched"] == pytest.approx(0.160) and fermi["their_mean_error_matched"] == pytest.approx(0.170)
    assert "gammas below floor" in write_comparison(tmp_path)[1].read_text()


def test_no_page_is_a_clear_error(tmp_path):
    with pytest.raises(ReportError, match="no results page"):
        load_pages(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "raco_bench.cli", "results", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 2 and "raco-bench report --experiment NAME --results" in proc.stderr
    assert not list(tmp_path.iterdir())  # nothing written


def test_config_ids_are_per_part_and_a_pipeline_variant_is_another_method(tmp_path):
    """A page of several parts: DP-FERMI (trained without γ) selected configuration 1 in two parts, two different
    models, so two points; RaCO-DP under the paper pipeline is compared with the default RaCO-DP as another method.
    A series keeps its method's kind: DP-FERMI under another pipeline selected for two γ is still one model."""
    from raco_bench.report.comparison import _points

    rows = [
        ("raco-dp", 1.0, 0.05, 0, 5, 0.04, 0.01, 0.180, 0.002, 1.0, "aaa"),
        ("dp-fermi", 1.0, 0.05, 1, 5, 0.03, 0.01, 0.170, 0.002, 1.0, "aaa"),  # dominates RaCO-DP's point
        ("dp-fermi", 1.0, 0.05, 1, 5, 0.05, 0.01, 0.200, 0.002, 1.0, "bbb"),  # same config id, another part: dominated
        ("raco-dp (paper pipeline, OUTSIDE THE BUDGET)", 1.0, 0.05, 2, 5, 0.04, 0.01, 0.190, 0.002, 1.0, "ccc"),
        ("raco-dp (paper pipeline, OUTSIDE THE BUDGET)", 1.0, 0.10, 2, 5, 0.08, 0.01, 0.175, 0.002, 1.0, "ccc"),
    ]
    page = tmp_path / "study"
    page.mkdir()
    pd.DataFrame(rows, columns=COLUMNS + ["sweep_id"]).to_csv(page / "satisfaction.csv", index=False)
    pd.DataFrame({"dataset": ["adult"] * 3, "constraint": ["demographic-parity"] * 3,
                  "method": ["raco-dp", "dp-fermi", "raco-dp (paper pipeline, OUTSIDE THE BUDGET)"],
                  "privacy_notion": ["record-level add/remove DP"] * 3}).to_csv(page / "phase2_runs.csv", index=False)
    table = compare(load_pages(tmp_path)).set_index("method")
    assert table.loc["dp-fermi", "their_points_dominated_by_raco_dp"] == pytest.approx(1 / 2)  # two points, not one
    variant = table.loc["raco-dp (paper pipeline, OUTSIDE THE BUDGET)"]
    assert variant["their_points_dominated_by_raco_dp"] == pytest.approx(1 / 2)  # (0.04, 0.190) of two: γ-input, two models
    fermi = pd.DataFrame([("dp-fermi (checkpoint paper, OUTSIDE THE BUDGET)", 1.0, g, 4, 5, 0.05, 0.01, 0.2, 0.002, 1.0, "ddd")
                          for g in (0.05, 0.10)], columns=COLUMNS + ["sweep_id"])
    assert len(_points(fermi)) == 1
