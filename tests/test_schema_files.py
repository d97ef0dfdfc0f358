"""Datasets from schema files (docs/datasets.md, "Your own data"): the catalog through its schema files gives the tensors
it gave before them; a user's CSV, Parquet file or DataFrame loads the same way; bad input is refused before anything
runs, naming the column and the fix; what a draft read from the rows, and a training size nobody declared public, are
labelled outside the budget (each label's planted bug turns its check red)."""

from __future__ import annotations

import hashlib
import importlib
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import stores
import yaml
from mutants import first_catch, load_mutant
from planted_bugs import DATA_LABEL_BUGS

from raco_bench.data import SchemaError, load_dataset
from raco_bench.data.catalog import public_train_rows
from raco_bench.data.schema_file import DRAFT_SOURCE, read_schema

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "synthetic"
FINGERPRINTS = json.loads((Path(__file__).parent / "fixtures" / "catalog_tensors.json").read_text())


def fingerprint(ds) -> dict:
    """What tests/fixtures/catalog_tensors.json holds for a dataset (computed at 19c9d09, before the schema files)."""
    out = {}
    for k, s in ds.splits().items():
        out[k] = hashlib.sha256(s.X.tobytes() + s.y.tobytes() + s.group.tobytes()).hexdigest()
        out[k + "_shape"] = list(s.X.shape)
    meta = json.dumps([ds.feature_names, ds.class_names, ds.group_names, ds.sensitive_attribute, ds.note, ds.task_outside_budget,
                       str(ds.train.X.dtype), str(ds.train.y.dtype)])
    out["meta"] = hashlib.sha256(meta.encode()).hexdigest()
    return out


@pytest.mark.parametrize("name", sorted({k.split("/")[0] for k in FINGERPRINTS if not k.startswith("_")}))
def test_catalog_datasets_load_through_schema_files_with_the_tensors_of_before(name, data_root):
    keys = [k for k in FINGERPRINTS if k.split("/")[0] == name]
    for key in keys:
        _, preprocessing, seed = key.split("/")
        ds = load_dataset(name, seed=int(seed), preprocessing=preprocessing)
        assert fingerprint(ds) == FINGERPRINTS[key], key
    assert ds.origin["schema"] == f"raco_bench/data/schemas/{name}.yaml" and len(ds.origin["schema_sha256"]) == 64


def test_the_parkinsons_threshold_is_the_median_it_says_it_is(data_root):
    """The schema file writes the papers' label threshold as a number: it must be the median of the pinned file's rows."""
    raw = pd.read_csv(data_root / "parkinsons" / "parkinsons_updrs.data")
    schema = read_schema(ROOT / "raco_bench" / "data" / "schemas" / "parkinsons.yaml")
    assert schema.label.threshold == float(raw["total_UPDRS"].median())
    assert any(f"{schema.label.threshold:g}" in note and "OUTSIDE" in note for note in schema.outside_budget)


def _same(a, b) -> None:
    for k in ("train", "val", "test"):
        sa, sb = getattr(a, k), getattr(b, k)
        np.testing.assert_array_equal(sa.X, sb.X)
        np.testing.assert_array_equal(sa.y, sb.y)
        np.testing.assert_array_equal(sa.group, sb.group)
    assert (a.feature_names, a.class_names, a.group_names) == (b.feature_names, b.class_names, b.group_names)


def test_a_shipped_csv_parquet_dataframe_and_toml_schema_give_the_catalog_tensors(tmp_path):
    """The worked example: the synthetic task as a user's CSV, with a schema the user writes, is the catalog's synthetic
    task, from the CSV, from Parquet, from a DataFrame, and with the schema in TOML."""
    catalog = load_dataset("synthetic")
    csv = load_dataset(schema=EXAMPLE / "synthetic.yaml")
    _same(catalog, csv)
    assert csv.name == "synthetic-csv" and csv.published_train_rows == 1914 == len(csv.train)
    assert csv.origin["table_sha256"] == hashlib.sha256((EXAMPLE / "synthetic.csv").read_bytes()).hexdigest()
    frame = pd.read_csv(EXAMPLE / "synthetic.csv")
    frame.to_parquet(tmp_path / "t.parquet")
    _same(catalog, load_dataset(schema=EXAMPLE / "synthetic.yaml", data=tmp_path / "t.parquet"))
    from_python = load_dataset(schema=EXAMPLE / "synthetic.yaml", data=frame)
    _same(catalog, from_python)
    assert from_python.origin["table"] == "a pandas DataFrame" and len(from_python.origin["table_sha256"]) == 64
    raw = yaml.safe_load((EXAMPLE / "synthetic.yaml").read_text())
    toml = [f'name = "{raw["name"]}"', f'table = "{EXAMPLE / "synthetic.csv"}"', f"train_rows = {raw['train_rows']}", "[label]",
            'column = "y"', "values = [0, 1]", 'names = ["no", "yes"]', "positive = 1", 'source = "the generator"',
            "[[groups]]", 'column = "g"', "values = [0, 1]", 'names = ["a", "b"]', 'source = "the generator"', "[features]"]
    toml += [f'x{i} = {{ range = [-4, 4], source = "the generator" }}' for i in range(1, 5)]
    toml += ['colour = { vocabulary = ["red", "green", "blue"], source = "the generator" }']
    (tmp_path / "s.toml").write_text("\n".join(toml) + "\n")
    _same(catalog, load_dataset(schema=tmp_path / "s.toml"))


def test_yaml_reads_no_and_yes_as_text_and_1e6_as_a_number(tmp_path):
    raw = yaml.safe_load((EXAMPLE / "synthetic.yaml").read_text())
    text = (EXAMPLE / "synthetic.yaml").read_text().replace('names: ["no", "yes"]', "names: [no, yes]").replace(
        "x1: {range: [-4, 4]", "x1: {range: [-4e0, 4.0e+0]")
    (tmp_path / "s.yaml").write_text(text.replace("table: synthetic.csv", f"table: {EXAMPLE / 'synthetic.csv'}"))
    schema = read_schema(tmp_path / "s.yaml")
    assert schema.label.classes.names == ("no", "yes") and raw["label"]["names"] == ["no", "yes"]
    assert (schema.features.numeric["x1"].lo, schema.features.numeric["x1"].hi) == (-4.0, 4.0)


# ------------------------------------------------------------------------------------------ bad input
def _files(tmp_path: Path, schema_edit=None, frame_edit=None) -> tuple[Path, Path]:
    """The worked example's schema and table, edited, written to ``tmp_path``."""
    raw = yaml.safe_load((EXAMPLE / "synthetic.yaml").read_text())
    frame = pd.read_csv(EXAMPLE / "synthetic.csv")
    if schema_edit:
        schema_edit(raw)
    if frame_edit:
        frame = frame_edit(frame)
    raw.pop("table", None)
    table = tmp_path / "t.csv"
    frame.to_csv(table, index=False)
    schema = tmp_path / "s.yaml"
    schema.write_text(yaml.safe_dump(raw, sort_keys=False))
    return schema, table


def _threshold_on_colour(raw: dict) -> None:
    raw["label"] = {"column": "colour", "threshold": 0.5, "source": "a priori"}
    raw["features"].pop("colour")
    raw["ignore"] = ["y"]


def _row(frame: pd.DataFrame, col: str, row: int, value) -> pd.DataFrame:
    frame = frame.astype({col: object})
    frame.loc[row, col] = value
    return frame


BAD = {
    "a column the table lacks": (lambda s: s["features"].update(x5={"range": [0, 1], "source": "a priori"}), None,
                                 ["names column 'x5'", "which the table lacks", "Fix the name"]),
    "a misspelt column": (lambda s: s["features"].update(colur=s["features"].pop("colour")), None,
                          ["column 'colur' (did you mean 'colour'?)"]),
    "a column without a domain": (None, lambda f: f.assign(income=1.0),
                                  ["column 'income' of the table has no domain", "income: {range: [LO, HI], source:", "ignore"]),
    "more classes than declared": (None, lambda f: _row(f, "y", 3, 2),
                                   ["label column 'y'", "'2' (1 rows)", "more classes than the 2 declared [0, 1]", "label.values"]),
    "fewer classes than declared": (None, lambda f: f.assign(y=0), ["no row of declared class(es) 'yes'", "fewer classes"]),
    "an undeclared group": (None, lambda f: _row(f, "g", 5, 7), ["group column 'g'", "'7' (1 rows)", "Add each to the group's values"]),
    "a group with one training row": (lambda s: s["groups"][0].update(values=[0, 1, 2], names=["a", "b", "c"]), lambda f: _row(f, "g", 5, 2),
                                      ["group(s) 'c' (1 row)", "fewer than 2 rows in the training split", "min_group_train_rows"]),
    "a non-numeric value": (None, lambda f: _row(f, "x1", 7, "n/a?"), ["numeric feature 'x1'", "1 non-numeric values", "row 7: 'n/a?'"]),
    "a missing value": (None, lambda f: _row(f, "x2", 11, None), ["numeric feature 'x2'", "1 missing values (row 11: missing)", "fill"]),
    "a non-numeric threshold label": (_threshold_on_colour, None, ["label column 'colour' (positive above threshold 0.5)", "3000 non-numeric"]),
    "an unknown key": (lambda s: s.update(lable=s.pop("label")), None, ["unknown key `lable`; did you mean `label`?"]),
    "a domain without a source": (lambda s: s["features"]["x1"].pop("source"), None, ["features.x1: no `source`"]),
    "an empty range": (lambda s: s["features"]["x1"].update(range=[4, -4]), None, ["features.x1: range [4, -4] needs LO < HI"]),
    "a catalog dataset's name": (lambda s: s.update(name="adult"), None, ["name 'adult' is a catalog dataset's"]),
    "a positive class not declared": (lambda s: s["label"].update(positive=3), None, ["positive '3' is not one of the declared values [0, 1]"]),
    "a column in two roles": (lambda s: s["features"].update(g={"range": [0, 1], "source": "x"}), None,
                              ["column 'g' is named under groups and features"]),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_refused_before_training_naming_the_column_and_the_fix(case, tmp_path):
    schema_edit, frame_edit, expected = BAD[case]
    schema, table = _files(tmp_path, schema_edit, frame_edit)
    with pytest.raises(SchemaError) as err:
        load_dataset(schema=schema, data=table)
    for text in expected:
        assert text in str(err.value), (case, str(err.value))


def test_a_column_without_a_domain_gets_the_line_to_add_in_the_schemas_syntax(tmp_path):
    frame = pd.read_csv(EXAMPLE / "synthetic.csv").assign(region="north")
    frame.to_csv(tmp_path / "t.csv", index=False)
    (tmp_path / "s.toml").write_text("\n".join([
        'name = "t"', "[label]", 'column = "y"', "values = [0, 1]", "positive = 1", 'source = "x"', "[[groups]]", 'column = "g"',
        "values = [0, 1]", 'source = "x"', "[features]", *[f'x{i} = {{ range = [-4, 4], source = "x" }}' for i in range(1, 5)],
        'colour = { vocabulary = ["red"], source = "x" }']) + "\n")
    with pytest.raises(SchemaError, match=r'region = \{ vocabulary = \["A", "B"\], source = "where the levels come from" \}'):
        load_dataset(schema=tmp_path / "s.toml", data=tmp_path / "t.csv")


def test_values_outside_their_range_are_clipped_and_counted_on_validation_and_test_only():
    """An extreme value is clipped to its declared range; the run's notes count the validation and test rows holding one
    (statistics a run releases anyway) and never the training split's (a statistic of the private rows)."""
    from raco_bench.data.catalog import load_table

    idx = load_table(schema=EXAMPLE / "synthetic.yaml").split(0)
    frame = pd.read_csv(EXAMPLE / "synthetic.csv")
    assert (frame["x3"].abs() < 4).all()  # none outside before: every count below is planted
    planted = {"train": idx["train"][:7], "val": idx["val"][:2], "test": idx["test"][:3]}
    frame.loc[np.concatenate(list(planted.values())), "x3"] = 1e6
    ds = load_dataset(schema=EXAMPLE / "synthetic.yaml", data=frame)
    col = ds.feature_names.index("x3")
    assert (ds.train.X[np.isin(idx["train"], planted["train"]), col] == 1.0).all()  # clipped to hi, mapped to 1
    assert (ds.train.X[:, col] < 1.0).sum() == len(ds.train) - 7
    note = ds.data_notes[0]
    assert "x3 [-4, 4]: 2 validation, 3 test rows" in note and "the training split's count is a statistic of the private rows" in note


def test_a_split_column_names_the_test_and_validation_rows(tmp_path):
    frame = pd.read_csv(EXAMPLE / "synthetic.csv")
    frame["fold"] = np.where(np.arange(len(frame)) % 5 == 0, "test", np.where(np.arange(len(frame)) % 5 == 1, "val", "train"))

    def edit(s):
        s["split"] = {"column": "fold", "test": ["test"], "validation": ["val"]}
        s.pop("train_rows")

    schema, _ = _files(tmp_path, edit)
    ds = load_dataset(schema=schema, data=frame)
    assert (len(ds.test), len(ds.val), len(ds.train)) == (600, 600, 1800)
    np.testing.assert_array_equal(ds.test.y, frame["y"].to_numpy()[::5])
    assert ds.published_train_rows is None


# ------------------------------------------------------------------------------------- privacy labels
def check_draft_labels(schema_file, tmp_path: Path) -> None:
    """A draft's values read from the rows are listed outside the budget; a schema whose sources were all replaced is not."""
    from raco_bench.data.draft import write_draft

    draft = write_draft(tmp_path / "t.csv", tmp_path / "t.yaml", force=True)
    text = draft.read_text()
    assert text.count(DRAFT_SOURCE) == 7 and "OUTSIDE the privacy budget, until you replace it with a public" in text
    labels = schema_file.read_schema(draft).task_outside_budget
    assert len(labels) == 1 and "y, g, x1, x2, x3, x4, colour were read from the rows" in labels[0] and "OUTSIDE" in labels[0], labels
    public = tmp_path / "public.yaml"
    public.write_text(text.replace(DRAFT_SOURCE, "an a priori bound"))
    assert schema_file.read_schema(public).task_outside_budget == ()
    half = tmp_path / "half.yaml"
    half.write_text(text.replace(DRAFT_SOURCE, "an a priori bound", 6))
    assert "colour were read from the rows" in schema_file.read_schema(half).task_outside_budget[0]


def check_training_size_labels(loop, tmp_path: Path) -> None:
    """A private run on a dataset whose schema declares no public training size, or another size than the split's, lists
    n_train outside the budget; the declared size does not."""
    from raco_bench.training.config import RunConfig

    declared = load_dataset(schema=EXAMPLE / "synthetic.yaml")
    cfg = RunConfig(dataset=declared.name, method="raco-dp", schema=str(EXAMPLE / "synthetic.yaml"))
    private = {"private": True, "outside_budget": []}
    assert loop.with_pipeline_labels(private, declared, cfg)["end_to_end"]
    from dataclasses import replace

    undeclared = loop.with_pipeline_labels(private, replace(declared, published_train_rows=None), cfg)["outside_budget"]
    assert undeclared == [loop.UNDECLARED_N_NOTE], undeclared
    other = loop.with_pipeline_labels(private, replace(declared, published_train_rows=1913), cfg)["outside_budget"]
    assert other == [loop.UNPUBLISHED_N_NOTE], other
    assert not loop.with_pipeline_labels({"private": False, "outside_budget": []}, replace(declared, published_train_rows=None), cfg)["outside_budget"]


CHECKS = {"raco_bench.data.schema_file": check_draft_labels, "raco_bench.training.loop": check_training_size_labels}


@pytest.fixture
def draft_table(tmp_path) -> Path:
    pd.read_csv(EXAMPLE / "synthetic.csv").to_csv(tmp_path / "t.csv", index=False)
    return tmp_path


@pytest.mark.parametrize("module", list(CHECKS))
def test_what_the_rows_told_and_an_undeclared_size_are_labelled_outside_the_budget(module, draft_table):
    CHECKS[module](importlib.import_module(module), draft_table)


@pytest.mark.parametrize("name", list(DATA_LABEL_BUGS))
def test_each_planted_label_bug_turns_its_check_red(name, draft_table):
    bug = DATA_LABEL_BUGS[name]
    real = importlib.import_module(bug.module)
    mutant = load_mutant(Path(real.__file__).read_text(), list(bug.edits), name, "label_mutant_", bug.module)
    caught = first_catch(mutant, [lambda m: CHECKS[bug.module](m, draft_table)])
    assert caught, f"no check caught the planted bug {name!r} ({bug.effect})"


def test_a_run_on_a_draft_says_so_and_the_public_size_is_checked_before_loading(draft_table):
    from raco_bench.data.draft import write_draft
    from raco_bench.training.config import RunConfig
    from raco_bench.training.loop import prepare_run

    draft = write_draft(draft_table / "t.csv")
    run = prepare_run(RunConfig(dataset="t", method="raco-dp", schema=str(draft), steps=3, params={"batch_size": 64}))
    outside = run.ctx.privacy["outside_budget"]
    assert any("read from the rows by raco-bench schema draft" in o for o in outside) and not run.ctx.privacy["end_to_end"]
    assert public_train_rows("synthetic-csv", EXAMPLE / "synthetic.yaml") == 1914
    with pytest.raises(ValueError, match="batch"):  # refused from the schema's train_rows, before any row is read
        prepare_run(RunConfig(dataset="synthetic-csv", method="raco-dp", schema=str(EXAMPLE / "synthetic.yaml"), data="/no/such/file.csv",
                              params={"batch_size": 5000}))


# ------------------------------------------------------------------------------------------- end to end
# The worked examples end to end, made in the background from the start of the session (tests/stores.py): a sweep of the
# papers' protocol (reduced) on the shipped CSV under the custom constraint its schema declares (docs/constraints.md), then
# one `raco-bench train` run on it under a constraint written on the command line, into one store.
FNR_GAP = "|FNR(group=a) - FNR(group=b)|"  # examples/synthetic/synthetic.yaml, constraints: fnr-gap
TRAIN_SPEC = "FNR(group=a) - FNR(group=b)"
USER_TABLE = stores.background(
    "user_table_store",
    [sys.executable, "-m", "raco_bench.cli", "sweep", "--schema", str(EXAMPLE / "synthetic.yaml"), "--constraint", "fnr-gap", "--smoke",
     "--methods", "raco-dp", "sgda", "--max-steps", "100", "--epsilons", "3", "--gammas", "0.2", "--yes", "--key-file", "{key}"],
    [sys.executable, "-m", "raco_bench.cli", "train", "--data", str(EXAMPLE / "synthetic.csv"), "--schema", str(EXAMPLE / "synthetic.yaml"),
     "--method", "raco-dp", "--constraint-spec", TRAIN_SPEC, "--steps", "30", "--set", "batch_size=64", "--quiet", "--key-file", "{key}",
     "--tracking-uri", "sqlite:///{cwd}/mlflow.db"],
    key="5c" * 32)


@pytest.fixture
def user_table_store() -> Path:
    return USER_TABLE.folder()


@pytest.mark.slow
def test_a_sweep_and_a_run_on_a_users_csv_under_a_custom_constraint_record_its_files_and_report(user_table_store, tmp_path):
    """RaCO-DP and SGDA train under the schema's custom constraint (and `train` under one written on the command line); every
    run records the files, the constraint and its text; the report draws the constraint's test value on its axis."""
    from raco_bench import tracking
    from raco_bench.report.build import build_report

    uri = f"sqlite:///{user_table_store / 'mlflow.db'}"
    table_sha = hashlib.sha256((EXAMPLE / "synthetic.csv").read_bytes()).hexdigest()
    schema_sha = hashlib.sha256((EXAMPLE / "synthetic.yaml").read_bytes()).hexdigest()
    exp = tracking.experiment_id(uri, "synthetic-csv-fnr-gap-smoke")
    parents = tracking.search_all(uri, [exp], f"tags.`{tracking.KIND}` = 'phase'")
    assert len(parents) == 2 and all(p.info.status == "FINISHED" for p in parents)
    assert all(p.data.params["sweep.schema"] == str(EXAMPLE / "synthetic.yaml") and len(p.data.params["sweep.files_digest"]) == 64 for p in parents)
    assert all((p.data.params["sweep.constraint"], p.data.params["sweep.constraint_spec"]) == ("fnr-gap", FNR_GAP) for p in parents)
    trials = tracking.search_all(uri, [exp], f"tags.`{tracking.KIND}` = 'trial'")
    train = tracking.search_all(uri, [tracking.experiment_id(uri, tracking.TRAIN_EXPERIMENT)], "")
    assert trials and len(train) == 1
    for run in [*trials, *train, *parents]:
        tags = run.data.tags
        assert (tags["dataset.table_sha256"], tags["dataset.schema_sha256"]) == (table_sha, schema_sha), run.info.run_id
        assert tags["dataset.table"] == str(EXAMPLE / "synthetic.csv")
        inputs = run.inputs.dataset_inputs
        assert inputs and inputs[0].dataset.name == "synthetic-csv" and json.loads(inputs[0].dataset.profile)["table_sha256"] == table_sha
    for run in [*trials, *train]:
        assert run.data.params["run.schema"] == str(EXAMPLE / "synthetic.yaml") and run.data.tags["outside_budget"] == "none"
        assert "test_max_constraint" in run.data.metrics
    assert {r.data.params["run.constraint_spec"] for r in trials} == {FNR_GAP} and {r.data.tags["method"] for r in trials} == {"raco-dp", "sgda"}
    assert (train[0].data.params["run.constraint"], train[0].data.params["run.constraint_spec"]) == ("custom", TRAIN_SPEC)
    assert train[0].data.params["run.data"] == str(EXAMPLE / "synthetic.csv")
    page = tmp_path / "results" / "synthetic-csv"
    report = build_report("synthetic-csv-fnr-gap-smoke", uri, tmp_path / "report", log_to_mlflow=False, results=page)
    assert {"pareto.png", "runs.csv"} <= {p.name for p in report.files}
    runs = pd.read_csv(tmp_path / "report" / "runs.csv")
    assert set(runs["dataset"]) == {"synthetic-csv"} and set(runs["method"]) == {"raco-dp", "sgda"} and set(runs["constraint_spec"]) == {FNR_GAP}
    assert runs["test_max_constraint"].notna().all()  # the constraint's test value: the Pareto figure's x-axis, which names the spec
    readme = (page / "README.md").read_text()
    assert "- **Dataset files:** schema `" in readme and "synthetic-csv,fnr-gap" in (page / "noise_floor.csv").read_text()


def test_a_trial_refuses_files_that_changed_since_the_sweep_started():
    from raco_bench.data.catalog import files_digest
    from raco_bench.sweeps.trial import _dataset

    schema = str(EXAMPLE / "synthetic.yaml")
    assert _dataset("synthetic-csv", 0, "public", schema, None, files_digest(schema, None)).name == "synthetic-csv"
    with pytest.raises(ValueError, match="changed since the sweep started"):
        _dataset("synthetic-csv", 0, "public", schema, None, "0" * 64)


@pytest.mark.parametrize("argv,message", [
    (["train", "--data", "t.csv"], "--data needs its schema file (--schema SCHEMA); draft one with `raco-bench schema draft t.csv`"),
    (["train", "--dataset", "adult", "--schema", str(EXAMPLE / "synthetic.yaml")], "--dataset adult and --schema"),
    (["train", "--dataset", "nope"], "or give your own with --data TABLE --schema SCHEMA"),
    (["train", "--schema", str(EXAMPLE / "missing.yaml")], "does not exist; draft one with `raco-bench schema draft TABLE`"),
    (["schema", "draft", str(EXAMPLE / "synthetic.csv"), "--out", "s.yaml", "--groups", "nope"], "column 'nope' is not in the table"),
    (["schema", "draft", str(EXAMPLE / "synthetic.csv")], "synthetic.yaml exists; edit it, or pass --force"),
])
def test_the_command_line_refuses_bad_data_arguments_before_anything_runs(argv, message, capsys, tmp_path, monkeypatch):
    from raco_bench import cli

    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_a_sweep_refuses_data_without_a_schema(capsys, tmp_path, monkeypatch):
    from raco_bench import cli

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):
        cli.main(["sweep", "--data", "t.csv"])
    assert "--data needs its schema file" in capsys.readouterr().err and list(tmp_path.iterdir()) == []
