"""raco_bench.report.published: DP-FERMI's figure files read without running pickled code, and the rows they give.

The fixtures are written here with ``torch.save`` of dicts of NumPy scalars and arrays, which produces the same
pickle globals as the repository's files (NumPy 2 spells the module ``numpy._core``; one test respells it the
NumPy 1 way, as the published files have it).
"""

from __future__ import annotations

import io
import pickle
import pickletools
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from raco_bench.methods import REGISTRY
from raco_bench.report import published
from raco_bench.report.build import load_references
from raco_bench.report.published import PublishedError, loads_pickle, points, read_pt, repository_files

ROOT = Path(__file__).resolve().parents[1]
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def saved(obj: object) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def payload_of(archive: bytes) -> bytes:
    with zipfile.ZipFile(io.BytesIO(archive)) as z:
        return z.read(next(n for n in z.namelist() if n.endswith("/data.pkl")))


def zipped(payload: bytes) -> bytes:
    """A torch-like archive holding ``payload`` as its data.pkl."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("archive/data.pkl", payload)
        z.writestr("archive/version", "3\n")
    return buffer.getvalue()


def globals_of(payload: bytes) -> set[str]:
    return {arg for op, arg, _ in pickletools.genops(payload) if op.name == "GLOBAL"}


def curve(points: dict[float, tuple[float, float]], key: str) -> dict:
    """DP-FERMI's layout: {λ: {"misclassification": error, key: {mean, upper, lower}}}."""
    return {lam: {"misclassification": np.float64(err), key: {"mean": np.float32(gap), "upper": np.float64(gap + 0.01),
                                                               "lower": np.float64(gap - 0.01)}} for lam, (err, gap) in points.items()}


def test_numpy_scalars_and_arrays_come_back_exactly():
    arrays = {"f8": np.array([0.1, 0.25, 1 / 3]), "fortran": np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3) / 7),
              "i8": np.array([1, -2, 3], dtype=np.int64), "b1": np.array([True, False]), "big": np.array([0.5, 2.0], dtype=">f8")}
    scalars = {"f4": np.float32(0.1), "f8": np.float64(1 / 3), "plain": 0.2, "i8": np.int64(7)}
    archive = saved({"arrays": arrays, "scalars": scalars, "list": [np.float64(0.3), np.float64(0.7)]})
    assert {"numpy ndarray", "numpy dtype", "_codecs encode"} <= globals_of(payload_of(archive))  # the array path runs
    got = read_pt(archive)
    for name, a in arrays.items():
        assert got["arrays"][name].dtype == a.dtype and got["arrays"][name].shape == a.shape and np.array_equal(got["arrays"][name], a), name
    assert got["arrays"]["fortran"][1, 2] == np.float32(5 / 7)
    for name, s in scalars.items():
        assert type(got["scalars"][name]) is type(s) and got["scalars"][name] == s, name
    assert got["list"] == [0.3, 0.7]


def test_the_published_numpy_1_spelling_reads_the_same():
    payload = payload_of(saved({"x": np.float32(0.125), "y": np.array([0.5, 0.25])}))
    old = payload.replace(b"numpy._core.multiarray", b"numpy.core.multiarray")
    assert "numpy.core.multiarray scalar" in globals_of(old)
    got = loads_pickle(old)
    assert got["x"] == np.float32(0.125) and np.array_equal(got["y"], [0.5, 0.25])


def crafted(tmp_path: Path) -> dict[str, tuple[bytes, str]]:
    """Pickles that would create a file if they ran, with the global each one names."""
    target = tmp_path / "created"

    class Eval:
        def __reduce__(self):
            return eval, (f"open({str(target)!r}, 'w').close()",)

    return {"os.system": (f"cos\nsystem\n(Vtouch {target}\ntR.".encode(), "os.system"),  # protocol 0, GLOBAL
            "builtins.eval": (pickle.dumps(Eval(), protocol=4), "builtins.eval"),  # STACK_GLOBAL
            "nested": (pickle.dumps({"ok": 0.5, "evil": [Eval()]}, protocol=2, fix_imports=False), "builtins.eval")}


@pytest.mark.parametrize("case", ["os.system", "builtins.eval", "nested"])
def test_any_other_global_is_refused_by_name_and_nothing_runs(tmp_path, case):
    payload, name = crafted(tmp_path)[case]
    errors = []
    for load in (lambda: loads_pickle(payload), lambda: read_pt(zipped(payload))):
        try:
            load()
        except pickle.UnpicklingError as e:
            errors.append(str(e))
    assert not (tmp_path / "created").exists(), "the crafted pickle ran"
    assert len(errors) == 2 and all(e.startswith(f"refused global {name}:") for e in errors), errors


def test_tensors_and_object_arrays_are_refused():
    with pytest.raises(pickle.UnpicklingError, match="refused global torch._utils._rebuild_tensor_v2"):
        read_pt(saved({"t": torch.tensor([1.0, 2.0])}))
    with pytest.raises(pickle.UnpicklingError, match="refused persistent id 'storage'"):
        loads_pickle(b"\x80\x02X\x07\x00\x00\x00storageQ.")  # a storage's id, as torch writes them, without the global
    with pytest.raises(pickle.UnpicklingError, match="refused dtype"):
        read_pt(saved({"a": np.array([1, "x"], dtype=object)}))
    with pytest.raises(PublishedError, match="not a torch.save zip"):
        read_pt(b"\x80\x02}q\x00.")


def fixture_repo(root: Path) -> Path:
    """A checkout with one file of each layout, plus files of datasets the suite lacks."""
    files = {
        "Demographic Parity Experiments/FERMI_Multiple_Models/adult/final_eps_1_logistic-regression.pt":
            curve({0: (0.15, 0.2), 0.5: (0.17, 0.1)}, "demographic_parity"),
        "Demographic Parity Experiments/FERMI_Multiple_Models/parkinsons/final_eps_inf_logistic-regression.pt":
            curve({0: (0.04, 0.06)}, "demographic_parity"),
        "Demographic Parity Experiments/DP-ERM_Mitigation/credit-card/final_eps_0.5_old_logistic_regression.pt":
            curve({0: (0.19, 0.02), 5: (0.21, 0.01)}, "demographic_parity"),
        "Demographic Parity Experiments/FERMI_Multiple_Models/retired-adult/final_eps_1_logistic-regression.pt":
            curve({0: (0.16, 0.2)}, "demographic_parity"),
        "Equalized Odds Experiments/PFLD/credit-card_eps_3_old_logistic_regression.pt":
            {"Demographic Parity": 0.01, "Equalized Odds": 0.04, "Equalized Opportunity": 0.03, "Misclassification Error": np.float64(0.2)},
        "Equalized Odds Experiments/Jagielski-Inprocessing/adult/eps_0.5.pt":
            {"misclassificaton": [0.16, np.float64(0.25)],
             "equalized_odds": {"mean": [np.float64(0.23), np.float64(0.08)], "lower": np.array([0.2, 0.07]), "upper": np.array([0.25, 0.09])}},
        "UTKFace/final_eps_10_resnet-classifier.pt": curve({0: (0.6, 0.2)}, "demographic_parity"),
    }
    for path, obj in files.items():
        (root / "Figures" / path).parent.mkdir(parents=True, exist_ok=True)
        (root / "Figures" / path).write_bytes(saved(obj))
    return root


def test_points_of_each_layout_with_the_suite_names(tmp_path):
    commit, files = repository_files(fixture_repo(tmp_path), COMMIT)
    got = {(p.method, p.dataset, p.constraint, p.epsilon, p.error, p.constraint_value, p.quantity, p.notion) for p in points(files, commit)}
    assert got == {
        ("dp-fermi", "adult", "demographic-parity", 1.0, 0.15, float(np.float32(0.2)), "dp_gap", "A-only DP"),
        ("dp-fermi", "adult", "demographic-parity", 1.0, 0.17, float(np.float32(0.1)), "dp_gap", "A-only DP"),
        ("dp-fermi", "parkinsons", "demographic-parity", None, 0.04, float(np.float32(0.06)), "dp_gap", "non-private"),
        ("dp-erm-mitigation", "credit", "demographic-parity", 0.5, 0.19, float(np.float32(0.02)), "dp_gap", "record-level DP"),
        ("dp-erm-mitigation", "credit", "demographic-parity", 0.5, 0.21, float(np.float32(0.01)), "dp_gap", "record-level DP"),
        ("pf-ld", "credit", "equalized-odds", 3.0, 0.2, 0.04, "eo_gap", "A-only DP"),
        ("jagielski-inprocessing", "adult", "equalized-odds", 0.5, 0.16, 0.23, "eo_gap", "A-only DP"),
        ("jagielski-inprocessing", "adult", "equalized-odds", 0.5, 0.25, 0.08, "eo_gap", "A-only DP"),
    }  # retired-adult and UTKFace: no such dataset in the suite
    rows = points(repository_files(tmp_path, COMMIT)[1], COMMIT)
    jag = [p for p in rows if p.method == "jagielski-inprocessing"]
    assert jag[0].source == f"github:{published.REPOSITORY}@{COMMIT}:Figures/Equalized Odds Experiments/Jagielski-Inprocessing/adult/eps_0.5.pt"
    assert "point 2 of 2; gap band [0.07, 0.09]" in jag[1].note
    assert any("lambda=5;" in p.note for p in rows if p.method == "dp-erm-mitigation")
    assert {"dp-fermi", "pf-ld"} <= set(REGISTRY)  # the published names, lowercased, are the suite's where it has the method


def test_the_csv_keeps_other_rows_loads_and_a_second_run_changes_nothing(tmp_path):
    repo = fixture_repo(tmp_path / "repo")
    out = tmp_path / "refs.csv"
    out.write_text("# a comment\nmethod,dataset,constraint,epsilon,error,constraint_value,source,note\n"
                   'sgda,heart,false-negative-rate,,0.125,0.58,paper,"""quoted"", with a comma"\n'
                   f"dp-fermi,adult,demographic-parity,1,0.5,0.5,github:{published.REPOSITORY}@old:Figures/x.pt,stale\n")
    published.main([str(repo), "--out", str(out), "--commit", COMMIT])
    first = out.read_text()
    published.main([str(repo), "--out", str(out), "--commit", COMMIT])
    assert out.read_text() == first
    lines = first.splitlines()
    assert lines[0] == "# a comment" and lines[2] == ",".join(published.COLUMNS)
    assert lines[3] == 'sgda,heart,false-negative-rate,,0.125,0.58,paper,"""quoted"", with a comma",max_constraint,'
    assert "stale" not in first
    ref = load_references(out, {"adult", "credit", "parkinsons", "heart"})
    assert len(ref) == 9 and set(ref["quantity"]) == {"max_constraint", "dp_gap", "eo_gap"}
    fermi = ref[(ref["method"] == "dp-fermi") & (ref["dataset"] == "adult")]
    assert sorted(fermi["error"]) == [0.15, 0.17] and set(fermi["epsilon"]) == {1.0}


def test_the_shipped_references_hold_dp_fermis_published_points():
    path = ROOT / "results" / "references.csv"
    ref = load_references(path, {"adult", "credit", "parkinsons", "heart"})
    assert {"quantity", "notion"} <= set(ref.columns)
    assert set(ref["quantity"]) <= {"max_constraint", "dp_gap", "eo_gap", "fnr"}
    fermi = ref[ref["method"] == "dp-fermi"]
    for dataset in ("adult", "credit", "parkinsons"):
        dp = load_references(path, {dataset}, "demographic-parity")
        eps = set(dp.loc[dp["method"] == "dp-fermi", "epsilon"].dropna())
        assert {0.5, 1.0, 3.0, 9.0} <= eps, dataset
        assert (dp.loc[dp["method"] == "dp-fermi", "quantity"] == "dp_gap").all()
    assert (fermi.loc[fermi["epsilon"].notna(), "notion"] == "A-only DP").all()
    assert (fermi.loc[fermi["epsilon"].isna(), "notion"] == "non-private").all()
    ours = ref[ref["source"].str.startswith(published.SOURCE_PREFIX)]
    assert len(ours) > 0 and ours["note"].notna().all() and set(ours["dataset"]) == {"adult", "credit", "parkinsons"}
    assert len(ref[ref["dataset"] == "heart"]) == 3  # the points read from the RaCO-DP paper's text stay
