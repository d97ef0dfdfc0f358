"""The noise floor of a study's splits (raco_bench/report/noise_floor.py): the sampling noise of a constraint for a
classifier that is fair by construction, measured with the suite's own evaluation, and the page's section on it."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch
from test_study_data import _study

from raco_bench.report.noise_floor import NOISE_FLOOR, noise_floor, split_floor
from raco_bench.report.results_page import build_page
from raco_bench.training.evaluation import EvalSplit

HALF_NORMAL_MEDIAN = 0.6745  # median of |N(0, 1)|


def _two_groups(n0: int, n1: int, constraint: str):
    """Two groups of n0 and n1 rows, labels alternating, with each row's part under ``constraint``, and its rate problem."""
    from raco_bench.constraints import build_constraint

    group = torch.cat([torch.zeros(n0, dtype=torch.long), torch.ones(n1, dtype=torch.long)])
    y = torch.arange(n0 + n1) % 2
    problem = build_constraint(constraint, 2, 2, 0.0)
    parts = problem.partition.assign(y.numpy(), group.numpy())
    return EvalSplit(torch.zeros(n0 + n1, 1), y, group, torch.as_tensor(parts)), problem


def test_the_floor_of_a_gap_is_the_sampling_noise_of_two_group_rates(one_torch_thread):
    """Demographic parity, two groups: the max constraint of a fair coin is |r₀ − r₁|, so its median is that of
    |N(0, s)| with s = ½·√(1/n₀ + 1/n₁). A floor that divides by the wrong count, or measures the constraint of the
    wrong rates, misses it."""
    for n0, n1 in ((400, 100), (2000, 2000)):
        split, problem = _two_groups(n0, n1, "demographic-parity")
        median, p90 = split_floor(split, problem, draws=2000)
        expected = HALF_NORMAL_MEDIAN * 0.5 * math.sqrt(1 / n0 + 1 / n1)
        assert abs(median - expected) < 0.08 * expected, (n0, n1, median, expected)
        assert p90 > median


def test_a_one_sided_bound_has_a_floor_too(one_torch_thread):
    """The FNR bound (binary: one constraint, the positives' false-negative rate) deviates both ways: its floor is
    the median of |N(0, ½/√n₊)|, not of a signed deviation (about 0)."""
    split, problem = _two_groups(400, 100, "false-negative-rate")
    median, _ = split_floor(split, problem, draws=2000)
    expected = HALF_NORMAL_MEDIAN * 0.5 / math.sqrt(int(split.y.sum()))
    assert abs(median - expected) < 0.08 * expected, (median, expected)


def test_the_studies_floors_follow_their_smallest_groups(data_root):
    """On the real splits: the ACS sample's validation split has a group of 3 rows, so its floor is far above Adult's
    (groups of thousands), and each dataset's larger test split has the lower floor."""
    acs, adult = noise_floor("acs-employment", "demographic-parity"), noise_floor("adult", "demographic-parity")
    for floor in (acs, adult):
        val, test = (floor[floor["split"] == s].iloc[0] for s in ("val", "test"))
        assert test["rows"] > val["rows"] and test["floor_median"] < val["floor_median"] < val["floor_p90"]
    assert acs[acs["split"] == "val"]["smallest_group_rows"].iloc[0] < 10 < adult["smallest_group_rows"].min()
    assert acs["floor_median"].min() > 5 * adult["floor_median"].max()
    assert noise_floor("adult", "demographic-parity").equals(adult)  # seeded: the same file wherever it is measured


def test_the_page_measures_its_floor_and_names_the_gammas_below_it(tmp_path, data_root):
    page = _study(tmp_path)
    build_page(page)
    floor = pd.read_csv(page / NOISE_FLOOR)
    assert list(floor["split"]) == ["val", "test"] and set(floor["dataset"]) == {"adult"}
    readme = (page / "README.md").read_text()
    assert f"## Noise floor of the splits ({NOISE_FLOOR})" in readme
    gammas = sorted(set(pd.read_csv(page / "satisfaction.csv")["gamma"]))
    # a floor above the study's largest γ (as a split with a tiny group has): every γ is named
    floor.loc[floor["split"] == "val", "floor_median"] = max(gammas) + 0.01
    floor.to_csv(page / NOISE_FLOOR, index=False)
    build_page(page)
    readme = (page / "README.md").read_text()
    assert f"**γ ∈ {{{', '.join(f'{g:g}' for g in gammas)}}} is at or below the validation floor**" in readme
    assert np.isclose(pd.read_csv(page / NOISE_FLOOR)["floor_median"].iloc[0], max(gammas) + 0.01)  # a page's floor is kept


def test_without_the_dataset_the_page_says_the_floor_was_not_measured(tmp_path, monkeypatch):
    page = _study(tmp_path)
    monkeypatch.setenv("RACO_BENCH_DATA", str(tmp_path / "empty"))
    (tmp_path / "empty").mkdir()
    build_page(page)
    assert not (page / NOISE_FLOOR).exists()
    assert "Not measured: the dataset was not available" in (page / "README.md").read_text()


def test_a_kept_page_without_parts_gets_its_floor_so_the_comparison_discounts_it_too(tmp_path, data_root):
    """`raco-bench results` keeps a page written before pages carried their data; it measures that page's floor
    (from its phase2_runs' dataset and constraint), and the comparison then counts the γ below it."""
    from raco_bench.report.rebuild import rebuild_results

    page = tmp_path / "parkinsons-demographic-parity"
    page.mkdir()
    columns = ["method", "epsilon", "gamma", "config_id", "n_runs", "test_max_constraint", "test_max_constraint_sd", "test_error",
               "test_error_sd", "share_meeting"]
    rows = [(m, 1.0, g, 0, 5, 0.01, 0.01, e, 0.002, 1.0) for m, e in (("raco-dp", 0.1), ("dp-fermi", 0.2)) for g in (0.001, 0.5)]
    pd.DataFrame(rows, columns=columns).to_csv(page / "satisfaction.csv", index=False)
    pd.DataFrame({"dataset": ["parkinsons"] * 2, "constraint": ["demographic-parity"] * 2, "method": ["raco-dp", "dp-fermi"],
                  "privacy_notion": ["record-level add/remove DP"] * 2}).to_csv(page / "phase2_runs.csv", index=False)
    done = rebuild_results(tmp_path)
    assert done.kept == [page] and page / NOISE_FLOOR in done.files
    floor = pd.read_csv(page / NOISE_FLOOR)
    assert set(floor["dataset"]) == {"parkinsons"} and 0.001 < floor["floor_median"].min() < 0.5
    fermi = pd.read_csv(tmp_path / "comparison.csv").set_index("method").loc["dp-fermi"]
    assert (fermi["gammas_compared"], fermi["gammas_below_floor"], fermi["raco_dp_lower_error"]) == (1, 1, 1)
