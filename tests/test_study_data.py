"""Results as data (issue 23): a study's parts in the repository, pages rebuilt from them alone, and the T and ε
spent of each selected model.

The committed study ``tests/fixtures/adult-dp-study`` holds three parts of real smoke sweeps (tests/fixtures/README.md):
``df9adbe7906b`` (ε = 1) and ``186d706b345b`` (ε = 3) of raco-dp, dp-sgd, sgd and dp-fermi under the default pipeline,
and ``3a0d195a9114``: raco-dp at ε = 1 under the paper pipeline (OUTSIDE THE BUDGET). Every sweep capped T at 100.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import stores
from test_report import _is_pdf, _is_png, adult_store  # noqa: F401  (the shared smoke sweep's store, made in the background)

from raco_bench import tracking
from raco_bench.report.marks import RING_SIZE
from raco_bench.report.study import Study, part_paths, read_part, write_part

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "adult-dp-study"
DEFAULT_1, DEFAULT_3, PAPER_1 = "df9adbe7906b", "186d706b345b", "3a0d195a9114"
VARIANT = "raco-dp (paper pipeline, OUTSIDE THE BUDGET)"
PAGE_FILES = {"README.md", "pareto.png", "pareto.pdf", "worst_group_loss.png", "worst_group_loss.pdf",
              "satisfaction.png", "satisfaction.pdf", "satisfaction.csv", "satisfaction.tex", "spending.csv", "phase2_runs.csv"}


def _study(tmp_path: Path, parts=(DEFAULT_1, DEFAULT_3, PAPER_1), name: str = "adult-dp-study") -> Path:
    """A copy of the fixture study with only ``parts``, in ``tmp_path/results/name``."""
    page = tmp_path / "results" / name
    (page / "parts").mkdir(parents=True)
    for sweep in parts:
        for path in part_paths(FIXTURE, sweep):
            shutil.copy2(path, page / "parts" / path.name)
    return page


def _legends(monkeypatch) -> dict[str, list[str]]:
    """Record every saved figure's legend texts by stem (figures are saved through ``figures.save``), its other texts
    (the caption) under ``"<stem> text"``, and under ``"<stem> rings"`` the number of rings drawn around capped points."""
    from matplotlib.collections import PathCollection

    from raco_bench.report import figures

    seen: dict[str, list[str]] = {}
    original = figures.save

    def save(fig, out, stem):
        seen[stem] = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
        seen[f"{stem} text"] = [t.get_text() for t in fig.texts]  # the caption, with the markers' key
        rings = [len(c.get_offsets()) for ax in fig.axes for c in ax.collections
                 if isinstance(c, PathCollection) and len(c.get_sizes()) and c.get_sizes()[0] == RING_SIZE]
        seen[f"{stem} rings"] = [str(sum(rings))]
        return original(fig, out, stem)

    monkeypatch.setattr(figures, "save", save)
    return seen


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, dict[str, list[str]]]:
    """The fixture study rebuilt once from its parts, with the legends of its figures (read-only for the tests)."""
    from raco_bench.report.results_page import build_page

    monkeypatch = pytest.MonkeyPatch()
    legends = _legends(monkeypatch)
    page = _study(tmp_path_factory.mktemp("built"))
    try:
        build_page(page)
    finally:
        monkeypatch.undo()
    return page, legends


def _digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------------------------------ parts
def test_a_part_is_lean_and_reads_back_as_written(tmp_path):
    """Constant columns and MLflow keys leave the table; floats keep 6 significant digits; the rows read back equal."""
    part = read_part(part_paths(FIXTURE, DEFAULT_1)[1])
    assert len(part.rows) == 38 and part.max_steps == 100 and part.provenance["raco_bench.command"].startswith("python ")
    assert {"trial_key", "run_id", "start_time"}.isdisjoint(part.rows.columns)
    table, meta = write_part(tmp_path, part)
    header = pd.read_csv(table, nrows=0).columns
    assert "dataset" not in header and "sweep_id" not in header and "test_error" in header  # constant within the part: in the JSON
    assert table.stat().st_size + meta.stat().st_size < 8000
    again = read_part(meta)
    pd.testing.assert_frame_equal(again.rows, part.rows)
    assert again.selections == part.selections and again.params == part.params


def test_merging_a_part_twice_changes_nothing(tmp_path):
    """Writing a part that the study already holds replaces it with the same bytes; the rebuilt page is the same."""
    from raco_bench.report.results_page import build_page

    page = _study(tmp_path, (DEFAULT_1, PAPER_1))
    build_page(page)
    before = _digests(page)
    for sweep in (DEFAULT_1, PAPER_1):
        write_part(page, read_part(part_paths(page, sweep)[1]))
    build_page(page)
    assert _digests(page) == before


def test_two_parts_of_different_epsilon_merge_into_one_page(tmp_path, monkeypatch):
    """One part at ε = 1 and one at ε = 3 (run apart) are one page: one ε panel each, both in the tables."""
    from raco_bench.report.results_page import build_page

    legends = _legends(monkeypatch)
    page = _study(tmp_path, (DEFAULT_1, DEFAULT_3))
    build_page(page)
    sat = pd.read_csv(page / "satisfaction.csv")
    assert set(sat["epsilon"]) == {1.0, 3.0, np.inf} and set(sat["sweep_id"]) == {DEFAULT_1, DEFAULT_3}
    readme = (page / "README.md").read_text()
    assert "2 part(s)" in readme and f"### Part `{DEFAULT_1}`" in readme and f"### Part `{DEFAULT_3}`" in readme
    assert "raco-dp [record DP]" in legends["pareto"]


def test_selections_match_runs_of_their_own_part(tmp_path):
    """Config ids are per sweep: sgd selected configuration 1 in both default parts (non-private, so both at ε = ∞),
    and each selection's numbers are the means of its own part's phase-2 runs only."""
    from raco_bench.report.satisfaction import satisfaction_rows

    study = Study([read_part(part_paths(FIXTURE, s)[1]) for s in (DEFAULT_1, DEFAULT_3)])
    rows = study.rows.assign(max_steps=100)
    sat = satisfaction_rows(rows, study.selections)
    sgd = sat[(sat["method"] == "sgd") & (sat["gamma"] == 0.05)]
    assert list(sgd["config_id"]) == [1, 1] and list(sgd["n_runs"]) == [2, 2]
    for _, row in sgd.iterrows():
        own = rows[(rows["sweep_id"] == row["sweep_id"]) & (rows["method"] == "sgd") & (rows["phase"] == 2) & (rows["config_id"] == 1)]
        assert row["test_error"] == pytest.approx(own["test_error"].mean())


# ------------------------------------------------------------------------------------------ the page
def test_the_committed_study_rebuilds_with_no_ray_and_no_mlflow(tmp_path):
    """`raco-bench results` in a folder with no store: the page with parts is rebuilt from them (without importing Ray
    or MLflow), a page without parts is kept and named, and the comparison covers both."""
    page = _study(tmp_path)
    old = tmp_path / "results" / "old-page"  # a page written before pages carried their data
    old.mkdir()
    shutil.copy2(ROOT / "results" / "adult-equalized-odds-32-configs" / "satisfaction.csv", old / "satisfaction.csv")
    shutil.copy2(ROOT / "results" / "adult-equalized-odds-32-configs" / "phase2_runs.csv", old / "phase2_runs.csv")
    before = (old / "satisfaction.csv").read_bytes()
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    code = ("import sys; from raco_bench.cli import main; code = main(sys.argv[1:]); "
            "assert 'mlflow' not in sys.modules and 'ray' not in sys.modules, 'imported a store or Ray'; sys.exit(code)")
    proc = subprocess.run([sys.executable, "-c", code, "results", str(tmp_path / "results")], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "rebuilt from their data (parts/): adult-dp-study" in proc.stdout
    assert "not rebuilt, no data (parts/) to rebuild them from" in proc.stdout and "old-page" in proc.stdout
    assert PAGE_FILES <= {p.name for p in page.iterdir()}
    assert all(_is_png(p) for p in page.glob("*.png")) and all(_is_pdf(p) for p in page.glob("*.pdf"))
    assert (old / "satisfaction.csv").read_bytes() == before and not (old / "README.md").exists()
    comparison = (tmp_path / "results" / "comparison.md").read_text()
    assert "| adult-dp-study " in comparison and "| old-page " in comparison
    assert not list(tmp_path.glob("mlflow.db")) and not list(tmp_path.glob("mlruns"))


def test_the_page_states_its_data_and_each_parts_provenance(built):
    page, _ = built
    readme = (page / "README.md").read_text()
    total = sum(p.stat().st_size for p in (page / "parts").iterdir())
    assert f"3 part(s) in [parts/](parts/), {total:,} bytes in all" in readme
    for sweep in (DEFAULT_1, DEFAULT_3, PAPER_1):
        assert f"### Part `{sweep}`" in readme and f"parts/{sweep}.csv.gz" in readme
    assert readme.count("- **Command:** `python ") == 3 and readme.count("- **Wall time:** ") == 3
    assert "**pipeline:** paper pipeline, OUTSIDE THE BUDGET" in readme


def test_a_pipeline_variant_is_its_own_series(built):
    """raco-dp under the paper pipeline (OUTSIDE THE BUDGET) at ε = 1 beside the default raco-dp at ε = 1: its own
    legend entry, selections and rows; the default's points come from the default parts only."""
    page, legends = built
    assert "raco-dp [record DP] (paper pipeline, OUTSIDE THE BUDGET)" in legends["pareto"] and "raco-dp [record DP]" in legends["pareto"]
    runs = pd.read_csv(page / "phase2_runs.csv")
    assert set(runs.loc[runs["method"] == "raco-dp", "sweep_id"]) == {DEFAULT_1, DEFAULT_3}
    assert set(runs.loc[runs["method"] == VARIANT, "sweep_id"]) == {PAPER_1}
    sat = pd.read_csv(page / "satisfaction.csv")
    assert set(sat.loc[sat["method"] == VARIANT, "sweep_id"]) == {PAPER_1} and (sat["n_runs"] == 2).all()
    comparison_points = sat[(sat["method"] == "raco-dp") & (sat["epsilon"] == 1.0)]
    assert set(comparison_points["sweep_id"]) == {DEFAULT_1}


def test_the_t_and_epsilon_spent_table_and_capped_models(built):
    """spending.csv: the selected configuration's T and ε spent (phase-2 means), the phase-1 medians per method and ε,
    the cap; a model at the cap with < 90 % of ε spent is marked in the table, the README and the figures."""
    page, legends = built
    spending = pd.read_csv(page / "spending.csv", dtype={"sweep_id": str})
    rows = Study.read(page).rows
    raco = spending[(spending["method"] == "raco-dp") & (spending["epsilon"] == 1.0) & (spending["gamma"] == 0.05)].iloc[0]
    mine = rows[(rows["sweep_id"] == DEFAULT_1) & (rows["method"] == "raco-dp")]
    chosen = mine[(mine["phase"] == 2) & (mine["config_id"] == raco["config_id"]) & (mine["gamma"] == 0.05)]
    assert raco["T"] == chosen["steps"].mean() == 100 and raco["epsilon_spent"] == pytest.approx(chosen["epsilon_spent"].mean())
    phase1 = mine[mine["phase"] == 1].groupby(["gamma", "config_id"])["epsilon_spent"].mean()
    assert raco["phase1_median_epsilon_spent"] == pytest.approx(phase1.median()) and raco["phase1_configs"] == len(phase1)
    assert raco["cap"] == 100 and raco["capped"] and raco["epsilon_spent"] < 0.9
    fermi = spending[spending["method"] == "dp-fermi"]
    assert not fermi["capped"].any() and (fermi["epsilon_spent"] > 0.99 * fermi["epsilon"]).all()  # it spent its budget
    assert not spending.loc[spending["method"] == "sgd", "capped"].any()  # non-private: nothing to spend
    readme = (page / "README.md").read_text()
    assert "## T and ε spent" in readme and f"**capped: spent ε = {raco['epsilon_spent']:.2g} of 1**" in readme
    assert any("ring: capped, T reached the cap (100)" in text.replace("\n", " ") for text in legends["pareto text"])
    assert any(label.startswith("ring: capped") for label in legends["satisfaction"])
    n_capped = int(spending["capped"].sum())  # 6: raco-dp at ε 1 and 3, both γ, and its paper-pipeline series at ε 1
    assert n_capped == 6 and legends["pareto rings"] == [str(n_capped)] and legends["satisfaction rings"] == [str(2 * n_capped)]


def test_capped_needs_the_cap_and_an_unspent_budget():
    from raco_bench.report.spending import capped

    got = capped([100, 100, 99, 100, 100], [0.5, 0.95, 0.5, np.nan, 0.5], [1.0, 1.0, 1.0, 1.0, np.inf], [100, 100, 100, 100, 100])
    assert list(got) == [True, False, False, False, False]


def test_protocol_is_stated_per_method_when_parts_differ(tmp_path, monkeypatch):
    """A part at the papers' sizes with TPE search is the paper protocol; random search or fewer configurations is
    reduced. When a page's parts differ, the README states each method's protocol and the legends say it."""
    import json

    from raco_bench.report.protocol import protocol_kind, protocol_note
    from raco_bench.report.results_page import build_page

    paper = {"sweep.n_configs": "200", "sweep.phase1_seeds": "5", "sweep.phase2_seeds": "20", "sweep.search": "tpe"}
    assert protocol_kind(paper) == "paper protocol" and protocol_note(paper).startswith("paper protocol (200 configurations")
    assert protocol_kind({**paper, "sweep.search": "random"}) == "reduced protocol"
    assert protocol_kind({k: v for k, v in paper.items() if k != "sweep.search"}) == "reduced protocol"  # before the option: random
    assert protocol_kind({**paper, "sweep.n_configs": "199"}) == "reduced protocol" and protocol_kind({}) == ""
    page = _study(tmp_path, (DEFAULT_1, PAPER_1))
    meta = part_paths(page, PAPER_1)[1]
    data = json.loads(meta.read_text())
    data["params"].update(paper)
    meta.write_text(json.dumps(data))
    legends = _legends(monkeypatch)
    build_page(page)
    readme = (page / "README.md").read_text()
    assert "- **Protocol per method:** " in readme and f"{VARIANT}: paper protocol (200 configurations" in readme
    assert "raco-dp: reduced protocol (3 configurations" in readme
    assert "raco-dp [record DP] (paper pipeline, OUTSIDE THE BUDGET); paper protocol" in legends["pareto"]
    assert "raco-dp [record DP]; reduced protocol" in legends["pareto"]


def test_published_points_go_on_the_figure_of_their_quantity(tmp_path, monkeypatch):
    """A published DP-FERMI gap (quantity dp_gap) is drawn on the figure whose x-axis is that gap: here, with two groups,
    the demographic-parity constraint value is the gap, so the gap figure would repeat the Pareto figure, is not drawn,
    and the Pareto figure shows the published gap; one of a quantity this study draws nowhere is named in the notes."""
    from raco_bench.report.results_page import build_page

    refs = tmp_path / "refs.csv"
    refs.write_text("method,dataset,epsilon,error,constraint_value,source,quantity,notion\n"
                    "dp-fermi,adult,1,0.2,0.02,paper F,dp_gap,record DP\n"
                    "raco-dp,adult,1,0.19,0.05,paper R,,\n"
                    "dp-fermi,adult,1,0.2,0.03,paper E,eo_gap,A-only DP\n")
    legends = _legends(monkeypatch)
    page = _study(tmp_path, (DEFAULT_1,))
    build_page(page, refs)
    assert "gap" not in legends and "no gap figure: every test_dp_gap equals its test constraint value" in (page / "README.md").read_text()
    assert "published dp-fermi [record DP]" in legends["pareto"] and "published raco-dp" in legends["pareto"]
    assert not any("A-only" in label for labels in legends.values() for label in labels)
    assert "published dp-fermi (paper E) is a eo_gap value" in (page / "README.md").read_text()


def test_a_part_keeps_its_store_epsilon_and_the_page_states_it(tmp_path, built):
    """A part carries its sweep's store ε figures (whole store, private runs only, own batches, largest run, end to end or
    not) through writing and reading, and its page's part section states them; a part written before them says so."""
    import dataclasses
    import json
    import math

    from raco_bench.report.results_page import store_lines

    page = _study(tmp_path, (DEFAULT_1,))
    part = read_part(part_paths(page, DEFAULT_1)[1])
    assert part.store_epsilon == {} and "not in this part" in store_lines(part)[0]
    assert "not in this part" in (built[0] / "README.md").read_text()
    figures = {"adult": {"epsilon": math.inf, "private_only": 7.25, "own_batches": 3.5, "largest_run": 0.9998, "end_to_end": False,
                         "delta": 1e-5, "runs": 40, "without_claim": 12, "outside_budget": ["exact training-set metrics released"]}}
    write_part(page, dataclasses.replace(part, store_epsilon=figures))
    assert json.loads(part_paths(page, DEFAULT_1)[1].read_text().replace("Infinity", "1e999"))["store_epsilon"]["adult"]["private_only"] == 7.25
    again = read_part(part_paths(page, DEFAULT_1)[1])
    assert again.store_epsilon == figures
    (line,) = store_lines(again)
    assert line == ("- **The store's ε** (a reader of all 40 runs this sweep trained on adult, at δ = 1e-05): ∞, 12 runs having no "
                    "record-level claim; **private runs only** (the other 28): 7.25; had every run drawn its own batches: 3.5; largest "
                    "per-run ε: 0.9998; **not end to end** (outside the budget, as the runs list it: exact training-set metrics released)")


# ------------------------------------------------------------------------------------------ from a real sweep
@pytest.mark.slow
def test_a_real_sweep_exported_then_rebuilt_without_its_store(adult_store, tmp_path):  # noqa: F811
    """A real smoke sweep (Ray, a SQLite MLflow store): `raco-bench report --results` exports its part and builds the
    page; with the store deleted, `raco-bench results` rebuilds the same page from the part alone, and its
    satisfaction.csv holds the numbers of the report drawn straight from MLflow (to the 6 digits a part keeps)."""
    from raco_bench.report.build import build_report

    uri = stores.copy_store(adult_store, tmp_path / "store")
    page = tmp_path / "results" / "adult-dp"
    report = build_report("adult-demographic-parity-smoke", uri, tmp_path / "report", log_to_mlflow=False, results=page)
    parts = sorted(p.name for p in (page / "parts").iterdir())
    assert len(parts) == 2 and parts[0].endswith(".csv.gz") and parts[1].endswith(".json")
    assert sum(p.stat().st_size for p in (page / "parts").iterdir()) < 12000
    import json

    from raco_bench.records.artifacts import STORE_ARTIFACT

    (meta,) = (page / "parts").glob("*.json")  # the store's ε as the sweep's parent recorded it, and the page states it
    store = json.loads(meta.read_text())["store_epsilon"]["adult"]
    c = tracking.client(uri)
    parent = c.search_runs([c.get_experiment_by_name("adult-demographic-parity-smoke").experiment_id],
                           f"tags.`{tracking.KIND}` = 'phase' and tags.`{tracking.PHASE}` = '2'")[0]
    record = json.loads(Path(tracking.read_artifact(uri, parent.info.run_id, STORE_ARTIFACT)).read_text())["adult"]
    assert store["epsilon"] == record["epsilon"] == float("inf") and store["private_only"] == pytest.approx(record["private_only"], rel=1e-5)
    assert store["end_to_end"] is False and store["without_claim"] == len(record["not_record_level"]) > 0
    assert f"**private runs only** (the other {store['runs'] - store['without_claim']}): {store['private_only']:.4g}" in (page / "README.md").read_text()
    exported = (page / "satisfaction.csv").read_bytes()
    from_mlflow = pd.read_csv(tmp_path / "report" / "satisfaction.csv")  # drawn from the rows as MLflow holds them
    shutil.rmtree(tmp_path / "store")
    for path in report.files:
        if path.parent == page and path.suffix in (".png", ".pdf", ".csv", ".tex", ".md"):
            path.unlink()
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    proc = subprocess.run([sys.executable, "-m", "raco_bench.cli", "results", str(tmp_path / "results")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert {"README.md", "pareto.png", "pareto.pdf", "satisfaction.csv", "phase2_runs.csv", "spending.csv"} <= {p.name for p in page.iterdir()}
    assert (page / "satisfaction.csv").read_bytes() == exported
    rebuilt = pd.read_csv(page / "satisfaction.csv")
    assert len(rebuilt) == len(from_mlflow) > 0 and list(rebuilt["method"]) == list(from_mlflow["method"])
    numbers = [c for c in rebuilt.columns if rebuilt[c].dtype.kind == "f"]
    # a part keeps 6 significant digits: a mean moves by at most ~1e-6 of itself, an sd of two close values by ~1e-6 absolute
    np.testing.assert_allclose(rebuilt[numbers].to_numpy(float), from_mlflow[numbers].to_numpy(float), rtol=1e-5, atol=2e-6)
    assert (tmp_path / "results" / "comparison.md").exists() and not (tmp_path / "mlflow.db").exists()


def test_what_every_run_of_a_study_reads_outside_the_budget_separates_no_series():
    """Parkinsons' label threshold is read outside the budget by every run: the default pipeline keeps the plain method
    name, only the paper pipeline (which reads more) is its own series, and the rows keep their full outside-budget text."""
    import pandas as pd

    from raco_bench.report.series import label_series

    task = "task definition: the label threshold is the median over all rows"
    rows = pd.DataFrame({"method": ["raco-dp", "raco-dp"], "sweep_id": ["a", "b"], "preprocessing": ["public", "paper"],
                         "checkpoint": ["last", "paper"], "tuning": ["not-accounted"] * 2,
                         "outside_budget": [task, f"{task} | checkpoint=paper: selection on validation"]})
    out, _ = label_series(rows, [])
    assert list(out["method"]) == ["raco-dp", "raco-dp (paper pipeline, OUTSIDE THE BUDGET)"]
    assert list(out["outside_budget"]) == list(rows["outside_budget"])
