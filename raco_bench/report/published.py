"""The numbers behind DP-FERMI's figures, read from its public repository without running any pickled code.

DP-FERMI's repository (Lowy, Gupta, Razaviyayn, ICLR 2023; :data:`REPOSITORY`) ships the data of its paper's
figures as ``Figures/**/*.pt`` files, which ``Figures/plotting.py`` loads with ``torch.load`` and draws. Each file is a
``torch.save`` zip archive whose ``data.pkl`` is a pickle of plain dicts, lists, floats, NumPy scalars and (the
Jagielski files) NumPy arrays. Unpickling runs whatever functions a pickle names, so :func:`read_pt` never hands a
pickle to ``torch.load`` or :mod:`pickle` as is: an :class:`pickle.Unpickler` whose ``find_class`` answers only the
few globals such files use, each with a small function of this module that builds the value from bytes
(``numpy.frombuffer``), refuses every other global, naming it, and refuses persistent ids (torch tensors).

:func:`points` walks the repository's ``Figures`` tree and returns one :class:`Point` per plotted point:

* ``FERMI_Multiple_Models``: DP-FERMI itself, one point per λ (the fairness weight);
* ``DP-ERM_Mitigation``: "Tran et al. (2021a)" in the figures: the mitigation of Tran, Dinh and Fioretto,
  *Differentially Private Empirical Risk Minimization under the Fairness Lens* (NeurIPS 2021), one point per λ;
* ``PFLD``: "Tran et al. (2021b)": PF-LD, Tran, Fioretto and Van Hentenryck (AAAI 2021), one point per file;
* ``Jagielski-Inprocessing``: "Jagielski et al. (2019)": the DP oracle learner (in-processing) of *Differentially
  Private Fair Learning* (ICML 2019), one point per array entry (the file names no parameter).

``error`` is the stored misclassification error (1 − accuracy, as ``dp_fermi.py`` computes it; the figures' x axis)
and ``constraint_value`` the stored mean gap: ``metrics.py``'s demographic-parity violation (max − min over groups of
P(ŷ = 1 | s)) or equalized-odds violation (the larger of the TPR and FPR gaps), the suite's ``dp_gap`` and ``eo_gap``
for a binary task. The files' upper and lower band goes into ``note``. Only the suite's datasets are kept: adult,
credit-card (the suite's ``credit``) and parkinsons. ``retired-adult`` (the Adult reconstruction) and UTKFace have
no dataset in the suite, so their files are read by nothing here.

``python -m raco_bench.report.published REPO --out FILE`` writes the points as CSV in the reference-points columns
(docs/results.md); when FILE exists, its comments and other rows are kept and the rows from this repository are
replaced, so a second run changes nothing. REPO is a bare git directory (the repository's HEAD is read) or a
checkout.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import pickle
import re
import subprocess
import zipfile
from collections.abc import Iterator
from dataclasses import astuple, dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

REPOSITORY = "devanshgupta160/Stochastic-Differentially-Private-and-Fair-Learning"
SOURCE_PREFIX = f"github:{REPOSITORY}@"


class PublishedError(ValueError):
    """A file or tree this module cannot read as DP-FERMI's figure data."""


# --- the safe unpickler ---------------------------------------------------------------------------------------------

_DTYPE_CODE = re.compile(r"b1|[iu][1248]|f[248]")  # plain numbers only: no object, string or structured dtype
_BYTE_ORDERS = ("<", ">", "|", "=")


class _DType:
    """Stands for ``numpy.dtype(code, align, copy)`` while unpickling; :meth:`numpy` gives the real dtype."""

    def __init__(self, code: object, align: object = False, copy: object = True) -> None:
        if not isinstance(code, str) or not _DTYPE_CODE.fullmatch(code):
            raise pickle.UnpicklingError(f"refused dtype {code!r}: only plain numeric dtypes are read")
        self.code = code
        self.order = "="

    def __setstate__(self, state: object) -> None:
        """numpy's dtype state: (version, byte order, subarray, names, fields, item size, alignment, flags)."""
        if not (isinstance(state, tuple) and len(state) >= 5 and state[1] in _BYTE_ORDERS and state[2:5] == (None, None, None)):
            raise pickle.UnpicklingError(f"refused dtype state {state!r}: only plain numeric dtypes are read")
        self.order = state[1]

    def numpy(self) -> np.dtype:
        return np.dtype(self.order + self.code)


def _encode(text: object, encoding: object = "utf-8") -> bytes:
    """``_codecs.encode(text, 'latin1')``: how protocol-2 pickles carry bytes."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError(f"refused _codecs.encode of {type(text).__name__} with encoding {encoding!r}")
    return text.encode("latin1")


def _scalar(dtype: object, data: object = None) -> np.generic:
    """``numpy.core.multiarray.scalar(dtype, bytes)``: one NumPy scalar from its bytes."""
    if not isinstance(dtype, _DType) or not isinstance(data, bytes):
        raise pickle.UnpicklingError("refused numpy scalar: expected a numeric dtype and its bytes")
    dt = dtype.numpy()
    if len(data) != dt.itemsize:
        raise pickle.UnpicklingError(f"numpy scalar of dtype {dt} with {len(data)} bytes")
    return np.frombuffer(data, dtype=dt)[0]


class _NDArray:
    """Stands for a NumPy array while unpickling: ``_reconstruct`` makes it, ``__setstate__`` fills :attr:`value`."""

    def __init__(self) -> None:
        self.value: np.ndarray | None = None

    def __setstate__(self, state: object) -> None:
        """numpy's array state: ([version,] shape, dtype, Fortran order, raw bytes)."""
        if isinstance(state, tuple) and len(state) == 5:
            state = state[1:]
        if not (isinstance(state, tuple) and len(state) == 4):
            raise pickle.UnpicklingError("refused array state: unexpected layout")
        shape, dtype, fortran, raw = state
        if not (isinstance(shape, tuple) and all(isinstance(d, int) and d >= 0 for d in shape) and isinstance(dtype, _DType)
                and isinstance(fortran, bool) and isinstance(raw, bytes)):
            raise pickle.UnpicklingError("refused array state: expected a shape, a numeric dtype and raw bytes")
        dt = dtype.numpy()
        if len(raw) != math.prod(shape) * dt.itemsize:
            raise pickle.UnpicklingError(f"array of shape {shape} and dtype {dt} with {len(raw)} bytes")
        self.value = np.frombuffer(raw, dtype=dt).reshape(shape, order="F" if fortran else "C").copy()


def _reconstruct(cls: object, shape: object = (0,), typecode: object = b"b") -> _NDArray:
    """``numpy.core.multiarray._reconstruct(ndarray, (0,), b'b')``: an empty array that ``__setstate__`` fills."""
    if cls is not _NDArray:
        raise pickle.UnpicklingError("refused _reconstruct of anything but numpy.ndarray")
    return _NDArray()


ALLOWED_GLOBALS: dict[tuple[str, str], Any] = {
    ("_codecs", "encode"): _encode,
    ("numpy", "dtype"): _DType,
    ("numpy", "ndarray"): _NDArray,
    **{(module, "scalar"): _scalar for module in ("numpy.core.multiarray", "numpy._core.multiarray")},
    **{(module, "_reconstruct"): _reconstruct for module in ("numpy.core.multiarray", "numpy._core.multiarray")},
}
"""The globals a figure file may name (NumPy 2 writes ``numpy._core``), each answered by this module's own shim."""


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        try:
            return ALLOWED_GLOBALS[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"refused global {module}.{name}: only NumPy scalars, arrays and dtypes are read") from None

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError(f"refused persistent id {pid!r}: torch tensors and storages are not read")


def _resolve(obj: Any) -> Any:
    """The unpickled tree with the shims replaced by NumPy values."""
    if isinstance(obj, _NDArray):
        if obj.value is None:
            raise PublishedError("an array without its data")
        return obj.value
    if isinstance(obj, _DType):
        return obj.numpy()
    if isinstance(obj, dict):
        return {_resolve(k): _resolve(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_resolve(v) for v in obj)
    return obj


def loads_pickle(payload: bytes) -> Any:
    """Unpickle ``payload`` with only :data:`ALLOWED_GLOBALS`; raises :class:`pickle.UnpicklingError` naming a refused global."""
    return _resolve(_SafeUnpickler(io.BytesIO(payload)).load())


def read_pt(source: bytes | Path) -> Any:
    """The object a ``torch.save`` zip archive holds (its ``data.pkl``), read by :func:`loads_pickle`."""
    raw = source.read_bytes() if isinstance(source, Path) else source
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as archive:
            names = [n for n in archive.namelist() if n == "data.pkl" or n.endswith("/data.pkl")]
            if len(names) != 1:
                raise PublishedError(f"expected one data.pkl in the archive, found {names}")
            payload = archive.read(names[0])
    except zipfile.BadZipFile:
        raise PublishedError("not a torch.save zip archive (the legacy torch format is not read)") from None
    return loads_pickle(payload)


# --- the repository's Figures tree ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Point:
    """One published point, in the columns of ``results/references.csv``."""

    method: str
    dataset: str
    constraint: str
    epsilon: float | None  # None: non-private (the files' eps_inf)
    error: float
    constraint_value: float
    source: str
    note: str
    quantity: str
    notion: str


COLUMNS = tuple(f.name for f in fields(Point))


@dataclass(frozen=True)
class _Folder:
    name: str  # the method's published name. The CSV's method is its lowercase, which is the suite's name where the suite
    # has the method (core code names no registered method, tests/test_structure.py; tests/test_published.py checks the match)
    notion: str
    who: str


FOLDERS = {
    "FERMI_Multiple_Models": _Folder("DP-FERMI", "A-only DP", "DP-FERMI"),
    "PFLD": _Folder("PF-LD", "A-only DP", "Tran et al. (2021b) in the figures: PF-LD"),
    "DP-ERM_Mitigation": _Folder("DP-ERM-Mitigation", "record-level DP",
                                 "Tran et al. (2021a) in the figures: Tran, Dinh and Fioretto's mitigation (notion: that paper's; no code in the repository)"),
    "Jagielski-Inprocessing": _Folder("Jagielski-Inprocessing", "A-only DP", "Jagielski et al. (2019) in the figures: the DP oracle learner"),
}
EXPERIMENTS = {  # folder: (the suite's constraint, the gap's key in the curve files, in the PF-LD files, the suite's metric)
    "Demographic Parity Experiments": ("demographic-parity", "demographic_parity", "Demographic Parity", "dp_gap"),
    "Equalized Odds Experiments": ("equalized-odds", "equalized_odds", "Equalized Odds", "eo_gap"),
}
DATASETS = {"adult": "adult", "credit-card": "credit", "parkinsons": "parkinsons"}  # retired-adult: no such dataset in the suite
_EPSILON = re.compile(r"(?:^|_)eps_(inf|\d+(?:\.\d+)?)(?=[_.])")


def repository_files(repo: Path, commit: str | None = None) -> tuple[str, Iterator[tuple[str, bytes]]]:
    """The commit and the ``(path, bytes)`` of every ``Figures/**/*.pt`` of ``repo``: a bare git directory (its HEAD)
    or a folder (a checkout; ``commit`` names its commit when git cannot)."""
    bare = (repo / "HEAD").is_file() and (repo / "objects").is_dir()
    git = ["git", f"--git-dir={repo}"] if bare else ["git", "-C", str(repo)]
    if commit is None:
        found = subprocess.run([*git, "rev-parse", "HEAD", *([] if bare else ["--show-toplevel"])], capture_output=True, text=True)
        lines = found.stdout.split()
        if found.returncode != 0 or (not bare and Path(lines[1]).resolve() != repo.resolve()):
            raise PublishedError(f"{repo}: not a git repository's top folder; name its commit with --commit")
        commit = lines[0]
    if bare:
        listing = subprocess.run([*git, "ls-tree", "-r", "-z", "--name-only", commit, "--", "Figures"], capture_output=True, check=True)
        paths = sorted(p for p in listing.stdout.decode().split("\0") if p.endswith(".pt"))
        files = ((p, subprocess.run([*git, "cat-file", "blob", f"{commit}:{p}"], capture_output=True, check=True).stdout) for p in paths)
    else:
        paths = sorted(p.relative_to(repo).as_posix() for p in (repo / "Figures").rglob("*.pt"))
        files = ((p, (repo / p).read_bytes()) for p in paths)
    return commit, files


def _where(path: str) -> tuple[str, str, str, float | None] | None:
    """(experiment, folder, file's dataset, ε) of a figure file; None for files outside the two experiments (UTKFace)."""
    parts = path.split("/")
    if len(parts) not in (4, 5) or parts[0] != "Figures" or parts[1] not in EXPERIMENTS:
        return None
    name = parts[-1]
    eps = _EPSILON.search(name)
    if parts[2] not in FOLDERS or eps is None:
        raise PublishedError(f"{path}: unknown method folder or no eps_ in the name")
    dataset = parts[3] if len(parts) == 5 else name[: name.index("_eps_")]
    return parts[1], parts[2], dataset, None if eps.group(1) == "inf" else float(eps.group(1))


def _band(lower: Any, upper: Any) -> str:
    return f"gap band [{float(lower):.4g}, {float(upper):.4g}]"


def _rows(data: Any, gap_key: str, flat_gap_key: str) -> list[tuple[float, float, str]]:
    """(error, mean gap, note) of each point of one file, whichever of the three layouts it has."""
    if isinstance(data, dict) and "Misclassification Error" in data:  # PF-LD: one point
        return [(float(data["Misclassification Error"]), float(data[flat_gap_key]), "one point per file")]
    if isinstance(data, dict) and ("misclassificaton" in data or "misclassification" in data) and gap_key in data:  # Jagielski: arrays
        errors = np.asarray(data.get("misclassificaton", data.get("misclassification")), dtype=float)
        gap = {k: np.asarray(data[gap_key][k], dtype=float) for k in ("mean", "lower", "upper")}
        if any(g.shape != errors.shape for g in gap.values()) or errors.ndim != 1:
            raise PublishedError("arrays of different lengths")
        return [(float(errors[i]), float(gap["mean"][i]), f"point {i + 1} of {len(errors)}; {_band(gap['lower'][i], gap['upper'][i])}")
                for i in range(len(errors))]
    if isinstance(data, dict) and data and all(isinstance(v, dict) and "misclassification" in v for v in data.values()):  # curves over λ
        return [(float(v["misclassification"]), float(v[gap_key]["mean"]), f"lambda={k}; {_band(v[gap_key]['lower'], v[gap_key]['upper'])}")
                for k, v in data.items()]
    raise PublishedError(f"unknown layout (keys {list(data)[:5] if isinstance(data, dict) else type(data).__name__})")


def points(files: Iterator[tuple[str, bytes]], commit: str) -> list[Point]:
    """Every point of the suite's datasets in the figure files ``files`` (from :func:`repository_files`)."""
    out = []
    for path, raw in files:
        where = _where(path)
        if where is None or where[2] not in DATASETS:
            continue
        experiment, folder, dataset, epsilon = where
        constraint, gap_key, flat_gap_key, quantity = EXPERIMENTS[experiment]
        method = FOLDERS[folder]
        try:
            rows = _rows(read_pt(raw), gap_key, flat_gap_key)
        except (pickle.UnpicklingError, PublishedError, KeyError, TypeError) as e:
            raise PublishedError(f"{path}: {e}") from e
        for error, gap, note in rows:
            if not (0 <= error <= 1 and 0 <= gap <= 1):
                raise PublishedError(f"{path}: error {error} or gap {gap} outside [0, 1]")
            out.append(Point(method.name.lower(), DATASETS[dataset], constraint, epsilon, error, gap, f"{SOURCE_PREFIX}{commit}:{path}",
                             f"{method.who}; {note}", quantity, "non-private" if epsilon is None else method.notion))
    return _mark_shared(out)


def _mark_shared(found: list[Point]) -> list[Point]:
    """Notes the points whose numbers another method's file of the same panel repeats exactly (the baselines' curves
    start at DP-FERMI's λ = 0 model)."""
    key = lambda p: (p.dataset, p.constraint, p.epsilon, p.error, p.constraint_value)
    methods: dict[tuple, list[str]] = {}
    for p in found:
        methods.setdefault(key(p), []).append(p.method)
    return [replace(p, note=f"{p.note}; the same numbers are in the file of {', '.join(sorted(set(methods[key(p)]) - {p.method}))}")
            if set(methods[key(p)]) - {p.method} else p for p in found]


# --- the CSV ----------------------------------------------------------------------------------------------------------

HEADER_NOTE = (f"# Rows with source {SOURCE_PREFIX}...: the data of DP-FERMI's figures (Figures/**/*.pt), written by "
               "`python -m raco_bench.report.published REPO --out results/references.csv` (docs/results.md). "
               "error = the stored misclassification error; constraint_value = the stored mean gap (quantity: dp_gap or eo_gap, "
               "the DP-FERMI repository's metrics.py, the suite's definitions for two groups and two classes); "
               "notion = the privacy notion of the published point; quantity = the suite metric constraint_value compares with.")
EXISTING_DEFAULTS = {"quantity": "max_constraint", "notion": ""}  # what rows written before these two columns get


def _cell(value: Any) -> str:
    if value is None:
        return ""
    return repr(value) if isinstance(value, float) else str(value)


def merge(path: Path, new: list[Point]) -> str:
    """The text of ``path`` (when it exists) with its rows from :data:`REPOSITORY` replaced by ``new``."""
    comments, rows, columns = [], [], list(COLUMNS)
    if path.is_file():
        lines = path.read_text().splitlines()
        comments = [line for line in lines if line.startswith("#") and SOURCE_PREFIX not in line]
        reader = csv.DictReader(line for line in lines if not line.startswith("#"))
        columns = list(reader.fieldnames or []) + [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        rows = [{**EXISTING_DEFAULTS, **{k: v for k, v in r.items() if v is not None}} for r in reader
                if not r.get("source", "").startswith(SOURCE_PREFIX)]
    rows += [dict(zip(COLUMNS, map(_cell, astuple(p)))) for p in new]
    if any("#" in v for r in rows for v in r.values()):
        raise PublishedError("a cell holds '#', which pandas would read as the start of a comment")
    out = io.StringIO()
    out.write("\n".join([*comments, HEADER_NOTE]) + "\n")
    writer = csv.DictWriter(out, columns, lineterminator="\n", restval="")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repo", type=Path, help="DP-FERMI's repository: a bare git directory or a checkout")
    parser.add_argument("--out", type=Path, required=True, help="CSV to write; an existing file keeps its other rows and comments")
    parser.add_argument("--commit", help="the checkout's commit, when REPO is not a git repository")
    args = parser.parse_args(argv)
    commit, files = repository_files(args.repo, args.commit)
    found = points(files, commit)
    args.out.write_text(merge(args.out, found))
    print(f"{len(found)} points from {REPOSITORY}@{commit[:12]} in {args.out}")


if __name__ == "__main__":
    main()
