"""Reports: the frontier is exactly the non-dominated set; a report built from a real sweep's MLflow store
has every file, every figure is a valid image; clear errors for bad input."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import stores

from raco_bench.report.load import ReportError
from raco_bench.report.pareto import frontier, non_dominated

ROOT = Path(__file__).resolve().parents[1]


def _brute_force_front(points: np.ndarray) -> set[int]:
    keep = set()
    for i, p in enumerate(points):
        if not np.all(np.isfinite(p)):
            continue
        if not any(np.all(q <= p) and np.any(q < p) for j, q in enumerate(points) if j != i and np.all(np.isfinite(q))):
            keep.add(i)
    return keep


def test_frontier_is_exactly_the_non_dominated_set():
    pts = np.array([[0.10, 0.20], [0.05, 0.25], [0.20, 0.15], [0.15, 0.22], [0.05, 0.25], [0.30, 0.15], [np.nan, 0.1], [0.02, 0.40]])
    assert set(np.flatnonzero(non_dominated(pts))) == {0, 1, 2, 4, 7}  # 3 dominated by 0, 5 by 2, NaN never on the front
    assert list(frontier(pts)) == [7, 1, 4, 0, 2]  # ordered by violation for drawing
    rng = np.random.default_rng(0)
    for _ in range(50):
        cloud = rng.integers(0, 6, size=(25, 2)).astype(float)  # many ties
        assert set(np.flatnonzero(non_dominated(cloud))) == _brute_force_front(cloud)


def _is_png(path: Path) -> bool:
    import matplotlib.image as mpimg

    data = path.read_bytes()
    return data[:8] == b"\x89PNG\r\n\x1a\n" and mpimg.imread(path).shape[0] > 50


def _is_pdf(path: Path) -> bool:
    data = path.read_bytes()
    return data[:5] == b"%PDF-" and b"%%EOF" in data[-1024:]


# Smoke sweeps under a fixed secret key (beside, not inside, their folder): the same draws, so the same figures, every time.
# The Adult store also holds a wall-time bench. Both are made in the background from the start of the session (tests/stores.py).
ADULT = stores.background("adult_store", [sys.executable, str(ROOT / "sweeps" / "adult.py"), "--smoke", "--max-steps", "100", "--key-file", "{key}"],
                          [sys.executable, "-m", "raco_bench.cli", "bench", "walltime", "--datasets", "adult", "--rounds", "2", "--steps", "20",
                           "--tracking-uri", "sqlite:///{cwd}/mlflow.db"], key="5c" * 32)
HEART = stores.background("heart_store", [sys.executable, str(ROOT / "sweeps" / "heart.py"), "--smoke", "--max-steps", "60", "--gammas", "0.5",
                                          "--key-file", "{key}"], key="5c" * 32)


@pytest.fixture
def adult_store() -> Path:
    """The finished Adult store, shared: a test that writes to it works on a copy (:func:`stores.copy_store`)."""
    return ADULT.folder()


@pytest.fixture
def heart_store() -> Path:
    return HEART.folder()


@pytest.mark.slow
def test_report_from_a_real_sweep(adult_store, tmp_path):
    from raco_bench import tracking
    from raco_bench.report.build import build_report

    uri = stores.copy_store(adult_store, tmp_path / "store")  # the report is logged to the sweep's parent run: a copy of the shared store
    refs = tmp_path / "published.csv"
    refs.write_text("# user-supplied points\nmethod,dataset,epsilon,error,violation,source\ndp-fermi,adult,1,0.2,0.05,user test point\n")
    out = tmp_path / "report"
    page = tmp_path / "results" / "adult-dp"
    report = build_report("adult-demographic-parity-smoke", uri, out, references=refs, results=page)
    names = {p.name for p in report.files}
    readme = (page / "README.md").read_text()  # the results page states where its numbers come from
    assert "**Command:** `python" in readme and "sweeps/adult.py --smoke --max-steps 100 --key-file " in readme
    assert "**Hardware:**" in readme and "**Suite version:** raco-bench" in readme and "**Wall time:**" in readme
    assert ("reduced protocol (2 configurations × 2 seeds, then 2 fresh seeds, random search; the papers: 200 × 5, then 20, TPE search)"
            in readme)
    assert {"pareto.png", "pareto.pdf", "phase2_runs.csv"} <= {p.name for p in page.iterdir()}
    assert "![pareto](pareto.png)" in readme
    assert "## Published points overlaid" in readme and "user test point" in readme  # the overlaid points, with their source
    assert "## Wall time per step" in readme and (page / "walltime.md").exists()  # the store's bench covers adult
    assert {"runs.csv", "pareto.pdf", "pareto.png", "index.md", "walltime.md", "walltime.tex", "walltime.csv"} <= names
    for path in report.files:
        assert path.exists() and path.stat().st_size > 0
        if path.suffix == ".png":
            assert _is_png(path)
        if path.suffix == ".pdf":
            assert _is_pdf(path)
    import pandas as pd

    runs = pd.read_csv(out / "runs.csv")
    from raco_bench.constraints.families import family
    from raco_bench.methods import default_methods

    assert set(runs["method"]) == set(default_methods(family("demographic-parity"))) and runs["trial_key"].is_unique
    assert {"pf-ld", "dp-postprocess", "budget-tailoring"} <= set(runs["method"]) and "worst_group_loss.png" in names
    assert runs["test_worst_group_loss"].notna().all()
    wall = (out / "walltime.md").read_text()
    assert all(m in wall for m in ("raco-dp", "dp-sgd", "dp-fermi", "sgda", "sgd")) and "ratio to dp-sgd" in wall
    index = (out / "index.md").read_text()
    assert "pareto.png" in index and "δ = 1e-05" in index
    assert "Reported checkpoint: last (every method)" in index and "OUTSIDE THE BUDGET" not in index
    assert set(runs["preprocessing"]) == {"public"} and set(runs["outside_budget"]) == {"none"}
    if "satisfaction.png" not in names:  # no method met γ anywhere: said in the notes, not a crash
        assert "no configuration met γ" in index
    # logged to MLflow as artifacts of the sweep's parent run
    c = tracking.client(uri)
    exp = c.get_experiment_by_name("adult-demographic-parity-smoke").experiment_id
    parent = c.search_runs([exp], f"tags.`{tracking.KIND}` = 'phase'", order_by=[f"tags.`{tracking.PHASE}` DESC"])[0]
    assert "report/index.md" in {a.path for a in c.list_artifacts(parent.info.run_id, "report")}


@pytest.mark.slow
def test_report_cli_errors(adult_store, tmp_path, capsys):
    """`raco-bench report` (``raise SystemExit(main())``) run in this process: its exit code and stderr; the entry point
    itself runs as a subprocess in test_sweep_reliability's unreachable-store test."""
    from raco_bench.cli import main

    uri = f"sqlite:///{adult_store / 'mlflow.db'}"
    cli = ["report", "--tracking-uri", uri, "--no-mlflow"]
    code = main([*cli, "--experiment", "nope", "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert code == 2 and "no MLflow experiment named 'nope'" in err and "adult-demographic-parity-smoke" in err
    code = main([*cli, "--experiment", "raco-bench-walltime", "--out", str(tmp_path / "y")])
    assert code == 2 and "no finished trial runs" in capsys.readouterr().err
    bad = tmp_path / "bad.csv"
    bad.write_text("method,error\nx,0.1\n")
    code = main([*cli, "--experiment", "adult-demographic-parity-smoke", "--references", str(bad), "--out", str(tmp_path / "z")])
    assert code == 2 and "lacks column" in capsys.readouterr().err
    with pytest.raises(ValueError, match="file store"):
        from raco_bench.report.build import build_report

        build_report("x", "file:///tmp/mlruns", tmp_path / "w")
    assert issubclass(ReportError, ValueError)


@pytest.mark.slow
def test_fnr_report_from_a_real_heart_sweep(heart_store, tmp_path):
    from raco_bench.report.build import build_report

    report = build_report("heart-false-negative-rate-smoke", f"sqlite:///{heart_store / 'mlflow.db'}", tmp_path / "report", log_to_mlflow=False)
    names = {p.name for p in report.files}
    assert {"fnr.png", "fnr.pdf", "pareto.png"} <= names
    assert _is_png(tmp_path / "report" / "fnr.png") and _is_pdf(tmp_path / "report" / "fnr.pdf")
    assert list(itertools.islice((tmp_path / "report").glob("*.png"), 1))


def test_a_collapsed_point_does_not_squeeze_the_others():
    """Issue "the papers' study": one configuration at error 0.45 ± 0.28 among points near 0.18 is drawn at the top of a
    readable axis and marked with its value, instead of stretching the axis to 0.73."""
    import pandas as pd

    from raco_bench.report.figures import readable_limits, tradeoff_figure

    centres = np.array([0.17, 0.18, 0.19, 0.18, 0.20, 0.45])
    low, high, cap = readable_limits(centres, np.array([0.01, 0.01, 0.01, 0.01, 0.01, 0.28]), keep=centres[:3])
    assert high < 0.45 and low < 0.17 and np.isfinite(cap)
    assert readable_limits(centres[:5], np.full(5, 0.01))[2] == np.inf  # nothing far out: nothing capped
    rows = [{"method": m, "epsilon": 1.0, "gamma": 0.05, "config_id": i, "phase": 2, "test_max_constraint": 0.02 * i, "test_max_constraint_sd": 0.01,
             "test_error": e, "test_error_sd": s} for i, (m, e, s) in enumerate([("raco-dp", 0.18, 0.01), ("raco-dp", 0.17, 0.01),
                                                                                 ("dp-fermi", 0.19, 0.01), ("dp-fermi", 0.45, 0.28)])]
    agg = pd.DataFrame(rows)
    df = pd.DataFrame({"method": ["raco-dp", "dp-fermi"], "privacy_notion": ["record-level add/remove DP"] * 2, "delta": [1e-5] * 2,
                       "checkpoint": ["last"] * 2, "outside_budget": ["none"] * 2, "style": ["#0072B2,o", "#D55E00,s"]})
    import matplotlib.pyplot as plt

    captured = {}
    original = plt.close
    plt.close = lambda fig=None: captured.setdefault("fig", fig)  # keep the figure to read its axes
    try:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            tradeoff_figure(agg, df, pathlib_path(tmp), "pareto", "test_max_constraint", "test_error", "violation", "error", "title")
    finally:
        plt.close = original
    ax = captured["fig"].axes[0]
    top = ax.get_ylim()[1]
    assert top < 0.45, top
    assert any(t.get_text() == "0.45" for t in ax.texts)  # the clipped point is marked with its value
    plt.close(captured["fig"])


def pathlib_path(p):
    return Path(p)


def test_reference_points_filtered_by_constraint_checked_and_kept_on_the_axis(tmp_path):
    """`--references`: rows of another constraint are left out, a value that is not a rate is refused with the row named,
    the shipped results/references.csv loads with a source on every row, and a published point far from the suite's
    points stays on the axis (it is never clipped as an outlier)."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from raco_bench.report.build import load_references
    from raco_bench.report.figures import tradeoff_figure

    path = tmp_path / "refs.csv"
    path.write_text("method,dataset,constraint,epsilon,error,violation,source\n"
                    "sgda,heart,false-negative-rate,,0.125,0.58,paper A\nsgda,heart,demographic-parity,1,0.2,0.05,paper B\n"
                    "raco-dp,adult,,1,0.17,0.1,paper C\n")
    ref = load_references(path, {"heart"}, "false-negative-rate")
    assert list(ref["source"]) == ["paper A"] and np.isnan(ref["epsilon"].iloc[0])
    assert list(load_references(path, {"adult"}, "equalized-odds")["source"]) == ["paper C"]  # empty constraint: any
    bad = tmp_path / "bad.csv"
    bad.write_text("method,dataset,epsilon,error,violation,source\nsgda,heart,,87.5,0.58,paper A\n")
    with pytest.raises(ReportError, match=r"'error' needs numbers in \[0, 1\].*87.5"):
        load_references(bad, {"adult"})  # checked before filtering: a bad row of another dataset is still reported
    assert set(ref["quantity"]) == {"max_constraint"} and set(ref["notion"]) == {""}  # a file without the optional columns
    bad.write_text("method,dataset,epsilon,error,constraint_value,source,quantity\ndp-fermi,adult,1,0.2,0.05,x,gap\n")
    with pytest.raises(ReportError, match=r"'quantity' takes max_constraint, dp_gap, eo_gap, fnr.*'gap'"):
        load_references(bad, {"adult"})
    shipped = load_references(ROOT / "results" / "references.csv", {"heart"}, "false-negative-rate")
    assert len(shipped) >= 3 and shipped["source"].notna().all() and shipped["note"].notna().all()

    rows = [{"method": "raco-dp", "epsilon": 1.0, "gamma": 0.5, "config_id": i, "phase": 2, "test_max_constraint": 0.4 + 0.01 * i,
             "test_max_constraint_sd": 0.01, "test_error": 0.20 + 0.001 * i if i else 0.6, "test_error_sd": 0.001} for i in range(6)]  # one collapsed
    df = pd.DataFrame({"method": ["raco-dp"], "privacy_notion": ["record-level add/remove DP"], "delta": [1e-5], "checkpoint": ["last"],
                       "outside_budget": ["none"], "style": ["#0072B2,o"]})
    far = pd.DataFrame({"method": ["xgboost"], "dataset": ["heart"], "epsilon": [np.nan], "error": [0.02], "constraint_value": [0.9], "source": ["x"]})
    captured = {}
    original = plt.close
    plt.close = lambda fig=None: captured.setdefault("fig", fig)
    try:
        tradeoff_figure(pd.DataFrame(rows), df, tmp_path, "pareto", "test_max_constraint", "test_error", "violation", "error", "t", references=far)
    finally:
        plt.close = original
    ax = captured["fig"].axes[0]
    assert ax.get_ylim()[0] < 0.02 < ax.get_ylim()[1] and ax.get_xlim()[1] > 0.9
    assert any(t.get_text() == "published xgboost" for t in captured["fig"].legends[0].get_texts())
    plt.close(captured["fig"])


def test_epsilon_panels_share_both_axes(tmp_path):
    """Panels that are compared side by side (one per ε) share the x- and the y-axis."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from raco_bench.report.figures import tradeoff_figure

    rows = [{"method": "raco-dp", "epsilon": eps, "gamma": 0.05, "config_id": 0, "phase": 2, "test_max_constraint": v, "test_max_constraint_sd": 0.001,
             "test_error": 0.2, "test_error_sd": 0.001} for eps, v in [(0.5, 0.002), (1.0, 0.05)]]
    df = pd.DataFrame({"method": ["raco-dp"], "privacy_notion": ["record-level add/remove DP"], "delta": [1e-5], "checkpoint": ["last"],
                       "outside_budget": ["none"], "style": ["#0072B2,o"]})
    captured = {}
    original = plt.close
    plt.close = lambda fig=None: captured.setdefault("fig", fig)
    try:
        tradeoff_figure(pd.DataFrame(rows), df, tmp_path, "pareto", "test_max_constraint", "test_error", "violation", "error", "t")
    finally:
        plt.close = original
    first, second = captured["fig"].axes[:2]
    assert first.get_xlim() == second.get_xlim() and first.get_ylim() == second.get_ylim()
    plt.close(captured["fig"])


def test_acs_sample_is_labelled_as_a_substitute():
    """The ACS study runs on the 5,000-row 2017 sample: every report, results page and figure title of it says so."""
    import pandas as pd

    from raco_bench.report.build import data_note

    assert "SUBSTITUTE" in data_note(pd.DataFrame({"dataset": ["acs-employment"]}))
    assert data_note(pd.DataFrame({"dataset": ["adult"]})) == ""


@pytest.mark.slow
def test_the_sweep_store_is_browsable_in_mlflow(adult_store):
    """What the MLflow UI shows of a real sweep: parents named by phase, phase-1 configurations as runs (one per
    configuration, sortable by validation accuracy), the dataset as an input, and every selected model registered
    with its tags and loadable from the registry."""
    import mlflow

    from raco_bench import tracking

    uri = f"sqlite:///{adult_store / 'mlflow.db'}"
    c = tracking.client(uri)
    exp = c.get_experiment_by_name("adult-demographic-parity-smoke").experiment_id
    parents = {r.data.tags[tracking.PHASE]: r for r in tracking.search_all(uri, [exp], f"tags.`{tracking.KIND}` = 'phase'")}
    assert parents["1"].info.run_name.startswith("phase 1: search (sweep ") and parents["2"].info.run_name.startswith("phase 2: selected")
    assert all(tracking.DESCRIPTION in p.data.tags for p in parents.values())
    (dataset,) = parents["1"].inputs.dataset_inputs
    assert dataset.dataset.name == "adult" and '"train_rows": 28829' in dataset.dataset.profile
    configurations = tracking.search_all(uri, [exp], f"tags.`{tracking.KIND}` = 'configuration'", order_by=["metrics.val_accuracy DESC"])
    from raco_bench.report.load import load_runs

    table = load_runs(uri, "adult-demographic-parity-smoke")
    phase1 = table[table["phase"] == 1]
    assert len(configurations) == len(phase1.groupby(["method", "epsilon", "gamma", "config_id"], dropna=False))
    accuracies = [r.data.metrics["val_accuracy"] for r in configurations if "val_accuracy" in r.data.metrics]
    assert accuracies == sorted(accuracies, reverse=True) and len(accuracies) >= len(configurations) - 2
    assert parents["1"].data.tags["raco_bench.configuration_runs"] == str(len(configurations))
    selections = json.loads(Path(c.download_artifacts(parents["2"].info.run_id, "selected_configurations.json")).read_text())
    chosen = [s for s in selections if s["config_id"] is not None]
    assert chosen
    for s in chosen:
        eps = "inf" if s["epsilon"] is None else f"{s['epsilon']:g}"
        name = f"{s['method']}.eps={eps}.gamma={s['gamma']:g}.adult-demographic-parity-smoke"
        versions = c.search_model_versions(f"name = '{name}'")
        assert len(versions) == s["phase2_runs"] and {v.tags["method"] for v in versions} == {s["method"]}
        assert {v.tags["gamma"] for v in versions} == {f"{s['gamma']:g}"} and all(v.tags["outside_budget"] == "none" for v in versions)
        winners = [r for r in configurations if r.data.tags["method"] == s["method"] and r.data.tags["config_id"] == str(s["config_id"])
                   and f"{s['gamma']:g}" in r.data.tags["selected_for_gamma"].split(",")]
        assert winners, f"no configuration run of {name} is tagged as selected"
    with tracking.fluent_uri(uri):
        model = mlflow.pyfunc.load_model(f"models:/{name}/1")
    assert model.metadata.signature.outputs.input_names()[0] == "prediction"


def test_the_overlap_check_finds_colliding_text_and_passes_separate_text():
    """A planted collision (two labels at one point) is reported, with both texts; labels apart are not."""
    import warnings

    import matplotlib.pyplot as plt

    from raco_bench.report.overlap import LayoutWarning, overlapping_texts, warn_overlaps

    fig, ax = plt.subplots(figsize=(4, 3))
    ax.annotate("first label", (0.5, 0.5))
    ax.annotate("second label", (0.5, 0.5), xytext=(2, 1), textcoords="offset points")
    ax.annotate("far away", (0.1, 0.9))
    assert overlapping_texts(fig) == [("first label", "second label")]
    with warnings.catch_warnings():
        warnings.simplefilter("error", LayoutWarning)
        with pytest.raises(LayoutWarning, match="first label"):
            warn_overlaps(fig, "planted")
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.annotate("first label", (0.5, 0.5))
    ax.annotate("second label", (0.5, 0.2))
    assert overlapping_texts(fig) == []
    ax.set_xticks(np.linspace(0, 1, 40))  # 40 tick labels on a 4-inch axis collide
    assert overlapping_texts(fig)
    plt.close(fig)


def drawn_figure(draw):
    """The figure that ``draw()`` saves, kept open (figures.save closes it) for the test to read; close it after."""
    import matplotlib.pyplot as plt

    captured = {}
    original = plt.close
    plt.close = lambda fig=None: captured.setdefault("fig", fig)
    try:
        draw()
    finally:
        plt.close = original
    return captured["fig"]


def test_the_marker_check_finds_a_hidden_point_and_the_figure_sets_it_apart(tmp_path):
    """A planted hidden point (one marker drawn over another at the same spot) is reported, touching markers are not;
    a Pareto figure whose two methods' selected points coincide sets one apart sideways, says so in its key, and
    passes the check (a LayoutWarning is an error in the suite)."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from raco_bench.report.figures import MARKER_PT, tradeoff_figure
    from raco_bench.report.overlap import SELECTED, overlapping_markers

    fig, ax = plt.subplots(figsize=(4, 3))
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    for x, label in ((0.5, "_first"), (0.505, "_second"), (0.2, "_apart")):
        (line,) = ax.plot([x], [0.5], "o", ms=MARKER_PT, label=label, gid=SELECTED)
    assert overlapping_markers(fig) == [("_first", "_second")]
    plt.close(fig)

    rows = [{"method": m, "epsilon": 1.0, "gamma": 0.05, "config_id": 0, "phase": 2, "test_max_constraint": 0.04, "test_max_constraint_sd": 0.001,
             "test_error": 0.2, "test_error_sd": 0.001} for m in ("raco-dp", "dp-fermi")]
    df = pd.DataFrame({"method": ["raco-dp", "dp-fermi"], "privacy_notion": ["record-level add/remove DP"] * 2, "delta": [1e-5] * 2,
                       "checkpoint": ["last"] * 2, "outside_budget": ["none"] * 2, "style": ["#0072B2,o", "#D55E00,s"]})
    fig = drawn_figure(lambda: tradeoff_figure(pd.DataFrame(rows), df, tmp_path, "pareto", "test_max_constraint", "test_error", "violation",
                                               "error", "t"))
    assert overlapping_markers(fig) == []
    assert any("1 selected point(s) set apart sideways" in t.get_text().replace("\n", " ") for t in fig.texts)
    plt.close(fig)


def test_method_colours_stay_distinct_for_colour_blind_readers():
    """The methods' colours differ pairwise by ΔE ≥ 10 (CIELAB) under normal vision and under simulated deuteranopia
    and protanopia (Viénot et al. 1999), and every method has its own marker; a variant of a method (the same method
    under another privacy notion) shares its colour."""
    from raco_bench.methods import registry

    classes = registry()
    assert len({cls.style[1] for cls in classes.values()}) == len(classes)
    for cls in classes.values():
        if cls.variant_of is not None:
            assert cls.style[0] == classes[cls.variant_of].style[0]
    styles = {name: cls.style for name, cls in classes.items() if cls.variant_of is None}
    assert len(styles) == 8

    def lab(rgb: np.ndarray) -> np.ndarray:
        xyz = rgb @ np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]).T / np.array([0.9505, 1.0, 1.089])
        f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
        return np.stack([116 * f[:, 1] - 16, 500 * (f[:, 0] - f[:, 1]), 200 * (f[:, 1] - f[:, 2])], 1)

    srgb = np.array([[int(c[i:i + 2], 16) / 255 for i in (1, 3, 5)] for c, _ in styles.values()])
    linear = np.where(srgb <= 0.04045, srgb / 12.92, ((srgb + 0.055) / 1.055) ** 2.4)
    vision = {"normal": np.eye(3),
              "deuteranopia": np.array([[0.29275, 0.70725, 0.0], [0.29275, 0.70725, 0.0], [-0.02234, 0.02234, 1.0]]),
              "protanopia": np.array([[0.11238, 0.88762, 0.0], [0.11238, 0.88762, 0.0], [0.00401, -0.00401, 1.0]])}
    names = list(styles)
    for kind, matrix in vision.items():
        points = lab(np.clip(linear @ matrix.T, 0, 1))
        for i in range(len(names)):
            for j in range(i + 1, len(names)):
                assert np.linalg.norm(points[i] - points[j]) >= 10, f"{names[i]} and {names[j]} look alike under {kind}"


def test_values_at_the_edge_are_set_apart_so_that_none_covers_another(tmp_path):
    """Clean-clone CI of 16fdea8: a smoke sweep's worst-group-loss figure drew two selected points far to the right at
    nearly one height, and wrote their values ('▶ 7', '▶ 1.2') over each other. Values at the right edge are moved up or
    down, values at the top sideways, until none covers another text; the figure passes the overlap check."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from raco_bench.report.edge_labels import ALONG_X, ALONG_Y, edge_label, set_apart
    from raco_bench.report.figures import tradeoff_figure
    from raco_bench.report.overlap import overlapping_texts

    fig, ax = plt.subplots(figsize=(4, 3))
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    for text, y in (("▶ 7", 0.5), ("▶ 1.2", 0.505), ("▶ 3", 0.51)):
        edge_label(ax, text, (1.0, y), (-2, 6), "right", "black", ALONG_Y)
    for text, x in (("0.45", 0.3), ("0.61", 0.305)):
        edge_label(ax, text, (x, 1.0), (0, -9), "center", "black", ALONG_X)
    assert len(overlapping_texts(fig)) == 4  # as drawn: each row's labels cover each other
    assert set_apart(fig) == 3 and overlapping_texts(fig) == []
    plt.close(fig)

    rows = [{"method": m, "epsilon": 1.0, "gamma": g, "config_id": i, "phase": 2, "test_max_constraint": x, "test_max_constraint_sd": 0.01,
             "test_error": 0.2 + 0.01 * i, "test_error_sd": 0.001}
            for i, (m, g, x) in enumerate([("raco-dp", 0.05, 0.30), ("raco-dp", 0.1, 0.32), ("dp-fermi", 0.05, 0.31), ("dp-fermi", 0.1, 0.35),
                                           ("sgda", 0.05, 0.33)])]
    rows += [{**rows[0], "method": "raco-dp", "config_id": 7, "test_max_constraint": 7.0, "test_error": 0.24},
             {**rows[0], "method": "dp-fermi", "config_id": 8, "test_max_constraint": 1.2, "test_error": 0.2405}]
    df = pd.DataFrame({"method": ["raco-dp", "dp-fermi", "sgda"], "privacy_notion": ["record-level add/remove DP"] * 3, "delta": [1e-5] * 3,
                       "checkpoint": ["last"] * 3, "outside_budget": ["none"] * 3, "style": ["#0072B2,o", "#D55E00,s", "#000000,^"]})
    fig = drawn_figure(lambda: tradeoff_figure(pd.DataFrame(rows), df, tmp_path, "pareto", "test_max_constraint", "test_error", "loss",
                                               "error", "t"))
    edge = sorted(t.get_text() for t in fig.axes[0].texts if t.get_gid() == ALONG_Y)
    assert edge == ["▶ 1.2", "▶ 7"] and overlapping_texts(fig) == []
    plt.close(fig)


def test_a_bar_never_runs_past_what_its_value_can_be_and_the_axis_follows(tmp_path):
    """Parkinsons' pareto figure drew a cell of two repeats (test error 0.29, its interval ± 2.67) with a bar down to
    −2.4, and the axis followed: every other point was squeezed into a tenth of the panel. Bars are clipped to the range
    of their values (an error to [0, 1], a demographic-parity gap to [0, 1]), asymmetric where clipped, so the axis
    stays where errors can be; a bar inside its range is drawn as before."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from raco_bench.report.figures import satisfaction_figure, tradeoff_figure

    rows = [{"method": m, "epsilon": 1.0, "gamma": g, "config_id": i, "phase": 2, "test_max_constraint": x, "test_max_constraint_sd": sx,
             "test_error": err, "test_error_sd": sd, "share_meeting": 0.5}
            for i, (m, g, x, sx, err, sd) in enumerate([("raco-dp", 0.05, 0.03, 0.2, 0.29, 2.67), ("raco-dp", 0.1, 0.05, 0.01, 0.18, 0.01),
                                                         ("dp-fermi", 0.05, 0.04, 0.01, 0.20, 0.02), ("dp-fermi", 0.1, 0.08, 0.01, 0.19, 0.01),
                                                         ("sgda", 0.05, 0.06, 0.01, 0.21, 0.01), ("sgda", 0.1, 0.07, 0.01, 0.22, 0.01),
                                                         ("dp-sgd", 0.05, 0.05, 0.01, 0.50, 2.67), ("dp-sgd", 0.1, 0.04, 0.01, 0.2, 0.01)])]
    df = pd.DataFrame({"method": ["raco-dp", "dp-fermi", "sgda", "dp-sgd"], "privacy_notion": ["record-level add/remove DP"] * 4,
                       "delta": [1e-5] * 4, "checkpoint": ["last"] * 4, "outside_budget": ["none"] * 4,
                       "style": ["#0072B2,o", "#D55E00,s", "#009E73,^", "#CC79A7,D"], "constraint": ["demographic-parity"] * 4})
    fig = drawn_figure(lambda: tradeoff_figure(pd.DataFrame(rows), df, tmp_path, "pareto", "test_max_constraint", "test_error", "gap",
                                               "error", "t"))
    low, high = fig.axes[0].get_ylim()
    assert -0.1 < low < 0.05  # the bar ends at 0 and the axis with it (unclipped: −2.5)
    assert high < 0.5  # DP-SGD's 0.50 is far above the rest: drawn at the top edge, its bar from there (not 0.50 ± 2.67 moved to the edge)
    edge = [t.get_text() for t in fig.axes[0].texts]
    assert "0.50" in edge
    ends = np.concatenate([seg[:, 1] for c in fig.axes[0].collections if hasattr(c, "get_segments") for seg in c.get_segments()])
    assert ends.min() >= -1e-12 and ends.max() <= 1.0 + 1e-12
    xends = np.concatenate([seg[:, 0] for c in fig.axes[0].collections if hasattr(c, "get_segments") for seg in c.get_segments()])
    assert xends.min() >= -1e-12  # the gap's bar (0.03 ± 0.2) stops at 0 too
    plt.close(fig)
    from raco_bench.report.figures import _bars

    middle = pd.DataFrame({"v": [0.5, 0.3], "v_sd": [2.67, 0.01]})  # clipped on both sides; inside its range
    assert _bars(middle, "v", (0.0, 1.0)).tolist() == [[0.5, 0.01], [0.5, 0.01]]
    assert _bars(middle, "v", (0.0, 1.0), "v").tolist() == [[0.5, 0.01], [0.5, 0.01]]
    assert _bars(middle.iloc[[1]], "v", (0.0, 1.0)).tolist() == [0.01]  # unchanged: one spread, as before
    fig = drawn_figure(lambda: satisfaction_figure(pd.DataFrame(rows), df, tmp_path, "satisfaction", "t"))
    for ax in fig.axes[:2]:
        ends = [seg[:, 1] for c in ax.collections if hasattr(c, "get_segments") for seg in c.get_segments()]
        assert ends and min(e.min() for e in ends) >= -1e-12 and max(e.max() for e in ends) <= 1.0 + 1e-12
    plt.close(fig)
