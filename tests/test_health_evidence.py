"""The health rules' evidence for study parts exported before runs recorded it (raco_bench/report/health_evidence.py):
a committed Parkinsons repeat part, whose RaCO-DP winners err at chance, is judged from its dataset's test split (the
constant predictor's accuracy computed here independently) instead of being called "ok, not checked"; a page says so,
and a cell flagged in several repeats is one note naming them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from raco_bench.report import health_evidence
from raco_bench.report.draw import health_notes, labelled
from raco_bench.report.repeats import flagged_count, repeat_cells
from raco_bench.report.satisfaction import satisfaction_rows
from raco_bench.report.study import Study, read_part

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "results" / "parkinsons-demographic-parity"
PART = PAGE / "parts" / "10d62880a2ab.json"  # repeat 0 at ε = 1, produced before runs recorded their health evidence


@pytest.fixture(scope="module")
def parkinsons():
    from raco_bench.data import load_dataset

    return load_dataset("parkinsons", download=False)


def _selected(study: Study) -> pd.DataFrame:
    rows, selections = labelled(study)
    return satisfaction_rows(rows, selections)


def test_a_part_without_evidence_is_judged_from_its_dataset(tmp_path, parkinsons):
    part = read_part(PART)
    assert health_evidence.lacking(part.rows)  # what the test is about: the part recorded none
    bare = Study([part])
    evidence, written = health_evidence.measured(tmp_path, bare.rows)
    assert written == [tmp_path / health_evidence.EVIDENCE_FILE]
    y = np.asarray(parkinsons.test.y)
    majority = max(y.mean(), 1 - y.mean())  # demographic parity: the best constant predictor is the majority class
    assert evidence["test_constant_accuracy"].to_numpy() == pytest.approx(majority, abs=1e-6)
    assert set(evidence["test_rows"]) == {len(y)} and set(evidence["n_train"]) == {len(parkinsons.train)}
    assert 0.0 in set(evidence["gamma"])  # DP-FERMI is trained without γ (at 0), RaCO-DP at each γ

    filled = Study([part], evidence=evidence)
    rows = filled.rows
    batch = rows["params"].map(lambda p: json.loads(p)["batch_size"]).astype(float)
    assert rows["passes"].to_numpy() == pytest.approx((rows["steps"] * batch / len(parkinsons.train)).to_numpy())
    assert (rows["test_rows"] == len(y)).all()

    before, after = _selected(bare), _selected(filled)
    cell = lambda sat: sat[(sat["method"] == "raco-dp") & np.isclose(sat["gamma"], 0.005)].iloc[0]  # noqa: E731
    assert cell(before)["health"] == "ok" and "not checked" in cell(before)["health_note"]  # what a reader was told before
    assert cell(after)["test_error"] > 0.45 and "constant" in cell(after)["health"].split("+")
    assert "constant predictor's 0.5003" in cell(after)["health_note"] and "one-class" in cell(after)["health_note"]  # still not checked
    assert (after["health"] != "ok").sum() > (before["health"] != "ok").sum()


def test_a_row_that_recorded_its_evidence_keeps_it(tmp_path):
    rows = Study([read_part(PART)]).rows
    evidence, _ = health_evidence.measured(tmp_path, rows)
    own = rows.copy()
    own.loc[own.index[:10], "test_constant_accuracy"] = 0.9
    own.loc[own.index[:10], "passes"] = 42.0
    filled = health_evidence.fill(own, evidence)
    assert (filled.loc[own.index[:10], "test_constant_accuracy"] == 0.9).all() and (filled.loc[own.index[:10], "passes"] == 42.0).all()
    assert filled.loc[own.index[10:], "test_constant_accuracy"].notna().all()


def test_without_the_dataset_nothing_is_filled_and_the_page_says_so(tmp_path, monkeypatch):
    from raco_bench.report.results_page import _evidence_lines

    monkeypatch.setenv("RACO_BENCH_DATA", str(tmp_path / "empty"))
    (tmp_path / "empty").mkdir()
    study = Study([read_part(PART)])
    evidence, written = health_evidence.measured(tmp_path, study.rows)
    assert evidence is None and written == [] and not (tmp_path / health_evidence.EVIDENCE_FILE).exists()
    assert study.rows["test_constant_accuracy"].isna().all()
    text = "\n".join(_evidence_lines(study))
    assert "not judged by the constant and few-steps rules" in text and "10d62880a2ab" in text


def test_a_gamma_free_method_is_judged_at_the_gamma_it_was_trained_with():
    rows = pd.DataFrame({"method": ["dp-fermi", "raco-dp", "sgda"], "gamma": [0.05, 0.05, math.nan]})
    assert list(health_evidence.trained_gamma(rows)) == [0.0, 0.05, 0.0]


def test_a_cell_flagged_in_several_repeats_is_one_note_naming_them():
    sat = pd.DataFrame({"method": "raco-dp", "epsilon": 1.0, "gamma": 0.01, "sweep_id": ["a", "b", "c"],
                        "health": ["constant", "ok", "few-steps+constant"], "health_note": ["n0", "ok", "n2"]})
    (note,) = health_notes(sat, {"a": 0, "b": 1, "c": 2})
    assert note.startswith("raco-dp at ε = 1, γ = 0.01 is flagged in 2 of its 3 selections (repeat 0 **constant**, repeat 2 "
                           "**few-steps+constant**)") and "repeat 0: n0; repeat 2: n2" in note
    assert flagged_count(sat) == 2 and flagged_count(sat.assign(health="capped")) == 0


def test_the_repeats_table_counts_flagged_selected_models(tmp_path):
    parts = [read_part(PAGE / "parts" / f"{s}.json") for s in ("10d62880a2ab", "119d80e3cc88")]
    evidence, _ = health_evidence.measured(tmp_path, Study(parts).rows)
    study = Study(parts, evidence=evidence)
    rows, selections = labelled(study)
    sat = satisfaction_rows(rows, selections)
    cells = repeat_cells(rows, selections, sat, study.repeat_of)
    raco = cells[(cells["method"] == "raco-dp") & np.isclose(cells["gamma"], 0.005)].iloc[0]
    mine = sat[(sat["method"] == "raco-dp") & np.isclose(sat["gamma"], 0.005)]
    assert raco["repeats_flagged"] == (~mine["health"].isin(["ok", "capped"])).sum() > 0


def test_a_gamma_dependent_bar_is_taken_at_each_rows_gamma(tmp_path):
    """Heart under a false-negative-rate bound: the best constant that meets FNR ≤ γ predicts positive with probability
    1 − γ, so its accuracy is γ + (1 − 2γ)·π on a split whose positive share π is below ½ (computed here, not by the code)."""
    from raco_bench.data import load_dataset

    part = read_part(ROOT / "results" / "heart-false-negative-rate" / "parts" / "f2face2dc430.json")  # RaCO-DP and SGDA at γ 0.3–0.6 (repeat 0)
    evidence, _ = health_evidence.measured(tmp_path, Study([part]).rows)
    y = np.asarray(load_dataset("heart", download=False).test.y)
    share = y.mean()
    assert share < 0.5
    rows = Study([part], evidence=evidence).rows
    for gamma in (0.3, 0.4, 0.5, 0.6):
        mine = rows[np.isclose(rows["gamma"], gamma)]
        assert len(mine) and mine["test_constant_accuracy"].to_numpy() == pytest.approx(gamma + (1 - 2 * gamma) * share, abs=1e-6)


def test_a_gamma_added_later_is_appended_and_nothing_written_is_measured_again(tmp_path):
    rows = Study([read_part(PART)]).rows
    first, _ = health_evidence.measured(tmp_path, rows[(rows["method"] == "raco-dp") & np.isclose(rows["gamma"], 0.005)])
    assert list(first["gamma"]) == [0.005]
    path = tmp_path / health_evidence.EVIDENCE_FILE
    table = pd.read_csv(path).assign(test_constant_accuracy=0.123)  # a value already written: kept as it is
    pd.concat([table, table.assign(dataset="other")]).to_csv(path, index=False)  # and another dataset's rows stay
    evidence, written = health_evidence.measured(tmp_path, rows)
    assert written == [path] and sorted(evidence["gamma"]) == [0.0, 0.005, 0.01, 0.02, 0.05]
    assert float(evidence.loc[np.isclose(evidence["gamma"], 0.005), "test_constant_accuracy"].iloc[0]) == 0.123
    assert "other" in set(pd.read_csv(path)["dataset"])


def test_a_batch_size_left_at_its_default_counts(tmp_path):
    from raco_bench.methods import get_method

    rows = Study([read_part(PART)]).rows
    evidence, _ = health_evidence.measured(tmp_path, rows)
    raco = rows[rows["method"] == "raco-dp"].head(3).copy()
    raco["params"] = raco["params"].map(lambda p: json.dumps({k: v for k, v in json.loads(p).items() if k != "batch_size"}))
    default = get_method("raco-dp").hyperparameters().batch_size
    filled = health_evidence.fill(raco.assign(passes=math.nan), evidence)
    assert filled["passes"].to_numpy() == pytest.approx((raco["steps"] * default / evidence["n_train"].iloc[0]).to_numpy())


def test_the_readme_paragraph_names_flagged_models_of_both_methods(tmp_path):
    from raco_bench.report.overview import results_paragraph

    page = tmp_path / "results" / "p"
    page.mkdir(parents=True)
    (page / "README.md").write_text("# toy, demographic-parity\n")
    pd.DataFrame([dict(method="raco-dp", against=against, epsilon=1.0, gamma=g, repeats_paired=5, error_verdict="worse")
                  for against in ("dp-fermi", "sgda (non-private)") for g in (0.01, 0.02)]).to_csv(page / "paired.csv", index=False)
    pd.DataFrame([dict(method=m, epsilon=e, gamma=g, repeats_with_model=5, repeats_flagged=k)
                  for m, e, g, k in [("raco-dp", 1.0, 0.01, 4), ("raco-dp", 1.0, 0.02, 0), ("dp-fermi", 1.0, 0.01, 0),
                                     ("dp-fermi", 1.0, 0.02, 2), ("sgda", math.inf, 0.01, 0), ("sgda", math.inf, 0.02, 0)]]
                 ).to_csv(page / "repeats.csv", index=False)
    text = results_paragraph(tmp_path / "results")
    against_fermi, against_sgda = [line for line in text.splitlines() if line.startswith("- ")]
    assert "raco-dp at γ = 0.01 (4 of 5); dp-fermi at γ = 0.02 (2 of 5)" in against_fermi
    assert "raco-dp at γ = 0.01 (4 of 5)" in against_sgda and "sgda at" not in against_sgda
