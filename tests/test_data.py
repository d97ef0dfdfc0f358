"""Dataset loaders: counts against shared/data/MANIFEST.md, splits, checksums, offline errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from raco_bench.data import ChecksumMismatchError, MissingDataError, load_dataset
from raco_bench.data.catalog import public_train_rows
from raco_bench.data.tabular import TEST_FRACTION, VALIDATION_FRACTION, build_dataset, split_indices

# Counts from shared/data/MANIFEST.md (rows after the reader's own filtering), with the papers' preprocessing.
# Public preprocessing differs only where the documented vocabulary has levels the rows lack
# (Adult: workclass=Never-worked, whose rows all miss occupation; Credit: PAY_x = 9).
EXPECTED_PUBLIC_FEATURES = {"adult": 103, "credit": 93}
EXPECTED = {
    "adult": {"rows": 45222, "features": 102, "groups": 2},
    "credit": {"rows": 30000, "features": 85, "groups": 2},
    "parkinsons": {"rows": 5875, "features": 19, "groups": 2},
    "heart": {"rows": 253680, "features": 20, "groups": 2},
    "acs-employment": {"rows": 5000, "features": 15, "groups": 9},
    "acs-income": {"rows": 2321, "features": 9, "groups": 9},
}
# Counts quoted from MANIFEST.md (over all rows of each table).
MANIFEST_LABELS = {"credit": 6636, "heart": 23893}
MANIFEST_GROUPS = {
    "credit": [11888, 18112],  # SEX 1 = male, 2 = female
    "parkinsons": [4008, 1867],  # sex 0, 1
    "heart": [141974, 111706],  # Sex 0 = female, 1 = male
    "acs-employment": [3691, 1082, 22, 0, 2, 58, 1, 56, 88],  # RAC1P 1..9
}
MANIFEST_POSITIVE_RATE = {"acs-employment": 0.405, "acs-income": 0.306, "parkinsons": 0.499}


def _all(ds, attr):
    return np.concatenate([getattr(s, attr) for s in ds.splits().values()])


@pytest.mark.parametrize("name", list(EXPECTED))
def test_counts_match_manifest(name, data_root):
    ds = load_dataset(name, preprocessing="paper")
    exp = EXPECTED[name]
    assert (ds.n_rows, ds.n_features, ds.n_groups) == (exp["rows"], exp["features"], exp["groups"])
    public = load_dataset(name)
    assert public.n_features == EXPECTED_PUBLIC_FEATURES.get(name, exp["features"]) and public.n_rows == exp["rows"]
    assert public.outside_budget == public.task_outside_budget and "OUTSIDE" in ds.outside_budget[-1]
    assert bool(public.task_outside_budget) == (name == "parkinsons")  # its label is a median over all rows
    assert public.train.X.min() >= 0.0 and public.train.X.max() <= 1.0
    assert ds.train.X.dtype == np.float32 and ds.train.y.dtype == np.int64 and ds.train.group.dtype == np.int64
    assert ds.sensitive_attribute not in ds.feature_names
    assert len(public.train) == public_train_rows(name) == len(load_dataset(name, seed=3).train)  # the schema's public size, seed-free
    assert not any(f.startswith(ds.sensitive_attribute + "=") for f in ds.feature_names)
    if name in MANIFEST_LABELS:
        assert int(_all(ds, "y").sum()) == MANIFEST_LABELS[name]
    if name in MANIFEST_GROUPS:
        assert np.bincount(_all(ds, "group"), minlength=ds.n_groups).tolist() == MANIFEST_GROUPS[name]
    if name in MANIFEST_POSITIVE_RATE:
        assert abs(_all(ds, "y").mean() - MANIFEST_POSITIVE_RATE[name]) < 0.0015


def test_adult_raw_counts_match_manifest(data_root):
    cols = list(range(15))
    raw = pd.read_csv(data_root / "adult" / "adult.data", header=None, names=cols, skipinitialspace=True, na_values="?")
    assert len(raw) == 32561 and (raw[14] == ">50K").sum() == 7841
    assert raw[9].value_counts().to_dict() == {"Male": 21790, "Female": 10771}


def test_split_sizes_and_stratification(adult):
    n = adult.n_rows
    assert abs(len(adult.test) - TEST_FRACTION * n) <= 4  # rounding per (label, group) stratum
    n_train_all = len(adult.train) + len(adult.val)
    assert abs(len(adult.val) - VALIDATION_FRACTION * n_train_all) <= 4
    strata = lambda s: s.y * adult.n_groups + s.group  # noqa: E731
    total = np.bincount(np.concatenate([strata(s) for s in adult.splits().values()]))
    for split, frac in ((adult.test, TEST_FRACTION), (adult.val, VALIDATION_FRACTION * (1 - TEST_FRACTION))):
        counts = np.bincount(strata(split), minlength=total.size)
        assert np.all(np.abs(counts - frac * total) <= 1.5), (counts, frac * total)


def test_splits_disjoint_and_complete():
    y = np.repeat([0, 1], 50)
    g = np.tile([0, 1, 1, 2], 25)
    idx = split_indices(y, g, seed=3)
    allidx = np.concatenate(list(idx.values()))
    assert sorted(allidx.tolist()) == list(range(100))


def test_same_seed_same_split_across_processes(data_root):
    code = (
        "import hashlib, json; from raco_bench.data import load_dataset;"
        "ds = load_dataset('adult', seed=7);"
        "print(json.dumps({k: hashlib.sha256(s.X.tobytes() + s.y.tobytes()).hexdigest() for k, s in ds.splits().items()}))"
    )
    outs = []
    for hashseed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hashseed}
        outs.append(json.loads(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout))
    assert outs[0] == outs[1]
    other = load_dataset("adult", seed=8)
    import hashlib

    assert hashlib.sha256(other.test.X.tobytes() + other.test.y.tobytes()).hexdigest() != outs[0]["test"]


def test_public_preprocessing_reads_nothing_from_the_rows(data_root):
    """Under public preprocessing a row's encoding is a function of that row alone: adding an extreme
    record (or changing every other row) leaves the encoding of the original rows unchanged; unknown
    categories encode as zeros and numeric values are clipped to their public range."""
    from raco_bench.data.catalog import load_table

    table = load_table("adult")
    idx = table.split(0)
    src = int(idx["train"][0])
    extreme = {**table.frame.iloc[src].to_dict(), "capital-gain": 1e9, "workclass": "Not-in-the-vocabulary"}
    bigger = table.with_row(extreme, int(table.label[src]), int(table.group[src]))
    X, names = table.encode("public", idx["train"])
    X2, names2 = bigger.encode("public", np.append(idx["train"], len(table.frame)))
    assert names == names2
    np.testing.assert_array_equal(X, X2[:-1])
    assert X2[-1, names.index("capital-gain")] == 1.0
    assert all(X2[-1, i] == 0 for i, n in enumerate(names) if n.startswith("workclass="))
    # the papers' preprocessing does read the rows: the same record changes every row's encoding
    P, _ = table.encode("paper", idx["train"])
    P2, _ = bigger.encode("paper", np.append(idx["train"], len(table.frame)))
    assert not np.allclose(P[:, names.index("capital-gain")], P2[:-1, names.index("capital-gain")])


def test_every_public_domain_is_documented():
    from raco_bench.data import catalog

    for name in catalog.DATASETS:
        schema = catalog.catalog_schema(name)
        for domain in [*schema.features.numeric.values(), *schema.features.categorical.values(), schema.label.classes, *schema.groups]:
            assert domain.source and not schema.drafted, (name, domain)


def test_normalisation_uses_training_statistics_only():
    rng = np.random.default_rng(0)
    n = 400
    y = rng.integers(0, 2, n)
    g = rng.integers(0, 2, n)
    frame = pd.DataFrame({"a": rng.normal(5, 2, n), "c": rng.choice(["x", "y", "z"], n)})
    kw = dict(label=y, group=g, class_names=("0", "1"), group_names=("0", "1"), sensitive_attribute="s", categorical=["c"], numeric=["a"],
              seed=0, preprocessing="paper")
    ds = build_dataset("toy", frame, **kw)
    col = ds.feature_names.index("a")
    assert abs(ds.train.X[:, col].mean()) < 1e-5 and abs(ds.train.X[:, col].std(ddof=1) - 1) < 1e-5
    # Changing values outside the training split must not change the training features.
    idx = split_indices(y, g, 0)
    shifted = frame.copy()
    held_out = np.concatenate([idx["val"], idx["test"]])
    shifted.loc[held_out, "a"] = 1e6
    ds2 = build_dataset("toy", shifted, **kw)
    np.testing.assert_array_equal(ds.train.X, ds2.train.X)
    assert not np.allclose(ds.test.X[:, col], ds2.test.X[:, col])


def test_corrupted_file_raises_checksum_error(tmp_path, data_root, monkeypatch):
    target = tmp_path / "adult"
    target.mkdir()
    for f in ("adult.data", "adult.test"):
        shutil.copy(data_root / "adult" / f, target / f)
    blob = bytearray((target / "adult.data").read_bytes())
    blob[100] ^= 0x01
    (target / "adult.data").write_bytes(bytes(blob))
    monkeypatch.setenv("RACO_BENCH_DATA", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(ChecksumMismatchError, match=r"adult\.data.*expected 5b00264637db"):
        load_dataset("adult")


def test_missing_file_offline_raises_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("RACO_BENCH_DATA", str(tmp_path / "empty"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("RACO_BENCH_OFFLINE", "1")
    with pytest.raises(MissingDataError) as err:
        load_dataset("credit")
    msg = str(err.value)
    assert "credit_default/default_of_credit_card_clients.tsv" in msg
    assert str(tmp_path / "empty") in msg and "https://" in msg and "RACO_BENCH_DATA" in msg
    assert not (tmp_path / "cache").exists()  # nothing written


def test_group_features_on_request(adult):
    with_s = adult.with_group_features()
    assert with_s.n_features == adult.n_features + adult.n_groups
    np.testing.assert_array_equal(with_s.train.X[:, -adult.n_groups:].argmax(1), adult.train.group)


def test_stratified_split_agrees_with_scikit_learn():
    """The project's split keeps every (label, group) stratum's share, as scikit-learn's stratified split does
    (within one row per stratum); unlike scikit-learn's it also accepts a stratum of one row (the ACS samples
    have some), which stays in the kept part."""
    from sklearn.model_selection import train_test_split

    from raco_bench.data.tabular import stratified_split

    rng = np.random.default_rng(0)
    strata = rng.choice(6, size=5000, p=[0.4, 0.3, 0.15, 0.1, 0.04, 0.01])
    kept, held = stratified_split(strata, 0.25, np.random.default_rng(1))
    _, sk_held = train_test_split(np.arange(strata.size), test_size=0.25, stratify=strata, random_state=1)
    ours, theirs = np.bincount(strata[held], minlength=6), np.bincount(strata[sk_held], minlength=6)
    assert np.abs(ours - theirs).max() <= 1 and abs(held.size - sk_held.size) <= 3
    assert np.intersect1d(kept, held).size == 0 and kept.size + held.size == strata.size
    single = np.array([0] * 10 + [1])
    with pytest.raises(ValueError, match="least populated"):
        train_test_split(np.arange(11), test_size=0.25, stratify=single, random_state=0)
    kept, held = stratified_split(single, 0.25, np.random.default_rng(0))
    assert 10 in kept and held.size == 2


@pytest.fixture
def http_root(tmp_path):
    """A real HTTP server on loopback serving ``tmp_path / 'www'`` (stopped by the test that started it)."""
    import functools
    import http.server
    import threading

    www = tmp_path / "www"
    www.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(www)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield www, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_downloads_are_verified_and_written_only_when_they_match(http_root, tmp_path, monkeypatch):
    import hashlib
    import zipfile

    from raco_bench.data import files

    www, base = http_root
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("RACO_BENCH_DATA", str(tmp_path / "empty"))
    monkeypatch.delenv("RACO_BENCH_OFFLINE", raising=False)
    payload = b"age,income\n39,<=50K\n"
    digest = hashlib.sha256(payload).hexdigest()
    (www / "plain.csv").write_bytes(payload)
    with zipfile.ZipFile(www / "bundle.zip", "w") as zf:
        zf.writestr("inner/table.csv", payload)
        zf.writestr("other.txt", b"not this one")
    ok = files.RawFile("demo/plain.csv", digest, f"{base}/plain.csv")
    path = files.ensure(ok)
    assert path == files.cache_root() / "demo/plain.csv" and path.read_bytes() == payload
    member = files.RawFile("demo/table.csv", digest, f"{base}/bundle.zip", archive_member="inner/table.csv")
    assert files.ensure(member).read_bytes() == payload
    for bad in (files.RawFile("demo/bad.csv", "0" * 64, f"{base}/plain.csv"),
                files.RawFile("demo/bad_member.csv", "0" * 64, f"{base}/bundle.zip", archive_member="inner/table.csv")):
        with pytest.raises(ChecksumMismatchError, match="Nothing was written"):
            files.ensure(bad)
        assert not (files.cache_root() / bad.relpath).exists()
    assert sorted(p.name for p in (files.cache_root() / "demo").iterdir()) == ["plain.csv", "table.csv"]  # no temporary left
    with pytest.raises(MissingDataError, match="download from .*missing.csv failed"):
        files.ensure(files.RawFile("demo/missing.csv", digest, f"{base}/missing.csv"))
    with pytest.raises(MissingDataError):  # a failed download into a new folder leaves no empty folder behind
        files.ensure(files.RawFile("fresh/deeper/missing.csv", digest, f"{base}/missing.csv"))
    assert not (files.cache_root() / "fresh").exists()


def test_datasets_prints_one_consistent_status_for_a_truncated_file(tmp_path, data_root, monkeypatch, capsys):
    """A dataset with a truncated file is "checksum mismatch", never "checksum mismatch, verified"; each file's own status
    is printed below it."""
    from raco_bench import cli

    target = tmp_path / "adult"
    target.mkdir()
    shutil.copy(data_root / "adult" / "adult.test", target / "adult.test")
    (target / "adult.data").write_bytes((data_root / "adult" / "adult.data").read_bytes()[:5000])
    monkeypatch.setenv("RACO_BENCH_DATA", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("RACO_BENCH_OFFLINE", "1")
    assert cli.main(["datasets"]) == 1
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("adult "))
    assert line.split()[1:3] == ["checksum", "mismatch"] and "verified" not in line
    assert cli.worst_state(["verified", "unverified"]) == "unverified" and cli.worst_state(["missing", "verified"]) == "missing"
