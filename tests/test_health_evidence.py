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
