"""A study's data as files in the repository: one "part" per sweep, and a study as the union of its parts.

A part is what one sweep contributes to a results page: its trained configurations' rows (phase 1 and phase 2, the
columns of :func:`raco_bench.records.results.columns`), the sweep's spec params (``sweep.*``), its provenance (command,
hardware, version), its wall time, its selections, its skipped counts and the store's ε of its runs (docs/privacy.md,
"The store's ε"). In a study folder ``STUDY/`` it is two files:

* ``parts/<sweep_id>.csv.gz``: the rows, less :data:`DROPPED` (MLflow keys and timings no page reads) and less the
  columns that are constant within the part; floats written with 6 significant digits; gzip without a timestamp, so
  writing the same part twice gives the same bytes;
* ``parts/<sweep_id>.json``: everything else, the constant columns included.

A study is every part in ``STUDY/parts/``: parts may come from different machines and days (one ε each, one group of
methods each, the same methods under another pipeline), and writing a part again replaces it. Config ids are per
sweep: a part's selections name configurations of that part only (:attr:`Study.selections` carries the sweep id).
"""

from __future__ import annotations

import gzip
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from raco_bench.constraints.families import Family, family
from raco_bench.records.results import INTEGER, TEXT_DEFAULTS, columns
from raco_bench.report import health_evidence
from raco_bench.report.load import ReportError

FORMAT = 1  # the part files' layout; a reader refuses another
PARTS = "parts"
DROPPED = ("trial_key", "run_id", "pack_run_id", "start_time", "calibrated", "ms_per_step", "batch_stream",
           "key_id", "schema")  # keys into a store, timings, where a user's schema lay (the part's sweep.schema says): not a page's
DIGITS = 6  # significant digits of the floats written
SELECTION_KEYS = ("method", "epsilon", "gamma", "config_id", "feasible_configs", "failed_configs", "params")  # the rest: from the rows


@dataclass
class Part:
    """One sweep's contribution to a study (the module docstring)."""

    sweep_id: str
    experiment: str
    rows: pd.DataFrame
    params: dict[str, str] = field(default_factory=dict)
    provenance: dict[str, str] = field(default_factory=dict)
    wall_seconds: float | None = None
    selections: list[dict] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    store_epsilon: dict[str, dict] = field(default_factory=dict)  # per dataset: the store's ε figures (export.store_figures)
    columns: tuple[str, ...] | None = None  # a part read from its files: the columns they hold (None: exported from MLflow)

    @property
    def max_steps(self) -> int:
        """The sweep's cap on T (``sweep.max_steps``; the reference code's MAX_STEPS, 5,000, when not logged)."""
        from raco_bench.training.config import RunConfig

        return int(float(self.params.get("sweep.max_steps", RunConfig().max_steps)))

    @property
    def repeat(self) -> int:
        """Which repeat of the protocol the sweep ran (``sweep.repeat``; 0 for a sweep from before repeats existed)."""
        return int(float(self.params.get("sweep.repeat", 0)))

    @property
    def ran_as_repeat(self) -> bool:
        """Whether the sweep records which repeat it ran (a sweep from before repeats existed does not)."""
        return "sweep.repeat" in self.params

    @property
    def cells(self) -> set[tuple]:
        """The (method, ε, pipeline) this part searched, ε ∞ for a non-private method (:func:`cell_keys`)."""
        return set(cell_keys(self.rows))


def eps_key(epsilon) -> float:
    """ε as a cell key: ∞ for a non-private method (None or NaN)."""
    return math.inf if epsilon is None or (isinstance(epsilon, float) and math.isnan(epsilon)) else float(epsilon)


def cell_keys(rows: pd.DataFrame) -> pd.Series:
    """Each row's searched cell: (method, ε with ∞ for a non-private method, preprocessing, checkpoint, tuning)."""
    return pd.Series(list(zip(rows["method"].astype(str), rows["epsilon"].map(eps_key), rows["preprocessing"].astype(str),
                              rows["checkpoint"].astype(str), rows["tuning"].astype(str))), index=rows.index, dtype=object)


def family_of(rows: pd.DataFrame) -> Family:
    """The constraint family of a study's (or a page's) rows: ``constraint``, and ``constraint_spec`` where it is a custom one."""
    specs = [s for s in rows.get("constraint_spec", pd.Series(dtype=object)) if isinstance(s, str) and s]
    return family(str(rows["constraint"].iloc[0]), specs[0] if specs else None)


def kept() -> list[str]:
    """The columns of a study's rows: the results reader's, less :data:`DROPPED`."""
    return [c for c in columns() if c not in DROPPED]


def _plain(value):
    """A JSON-safe scalar: NaN and None become None, numpy scalars Python ones, floats 6 significant digits."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float):
        return math.inf if math.isinf(value) else float(f"{value:.{DIGITS}g}")
    return value


def normalise(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows as a study holds them, whether read from MLflow or from a part file: the :func:`kept` columns, missing ε/γ
    as NaN floats, integer ids as ints and empty text cells as their defaults."""
    out, keep = rows.copy(), kept()
    for col in keep:
        if col not in out:
            out[col] = math.nan
    out = out[keep + [c for c in out.columns if c not in keep and c not in DROPPED]]
    for col in ("epsilon", "gamma", "repeat", "epsilon_end_to_end"):
        out[col] = pd.to_numeric(out[col].astype(object).where(out[col].notna(), math.nan), errors="coerce").astype(float)
    for col in INTEGER:
        out[col] = out[col].astype(int)
    for col, default in TEXT_DEFAULTS.items():
        if col in out:
            out[col] = out[col].where(out[col].notna(), default).astype(str)
    return out.reset_index(drop=True)


def _table_bytes(table: pd.DataFrame) -> bytes:
    buffer = io.StringIO()
    table.to_csv(buffer, index=False, float_format=f"%.{DIGITS}g", lineterminator="\n")
    return gzip.compress(buffer.getvalue().encode(), compresslevel=9, mtime=0)


def part_paths(folder: Path, sweep_id: str) -> tuple[Path, Path]:
    """(table, metadata) of a part in a study folder."""
    return folder / PARTS / f"{sweep_id}.csv.gz", folder / PARTS / f"{sweep_id}.json"


def write_part(folder: Path, part: Part) -> list[Path]:
    """Write (or replace) ``part`` in the study folder ``folder``; returns its two files."""
    rows = normalise(part.rows)
    if part.columns is not None:  # a column newer than the part's files, empty in it, is left out and the files' column order kept,
        rows = rows.drop(columns=[c for c in rows.columns if c not in part.columns and rows[c].isna().all()])  # so that a part
        rows = rows[[c for c in part.columns if c in rows] + [c for c in rows.columns if c not in part.columns]]  # written again keeps its bytes
    constant = [c for c in rows.columns if rows[c].nunique(dropna=False) <= 1 and len(rows)]
    table_path, meta_path = part_paths(folder, part.sweep_id)
    table_path.parent.mkdir(parents=True, exist_ok=True)
    table_path.write_bytes(_table_bytes(rows.drop(columns=constant)))
    meta = {"format": FORMAT, "sweep_id": part.sweep_id, "experiment": part.experiment, "rows": len(rows),
            "constants": {c: _plain(rows[c].iloc[0]) for c in constant}, "params": dict(sorted(part.params.items())),
            "provenance": dict(sorted(part.provenance.items())), "wall_seconds": _plain(part.wall_seconds),
            "selections": [{k: _plain(v) if not isinstance(v, (dict, list)) else v for k, v in s.items() if k in SELECTION_KEYS}
                           for s in part.selections],
            "skipped": dict(sorted(part.skipped.items()))}
    if part.store_epsilon:  # a part written before the store's ε keeps its bytes
        meta["store_epsilon"] = {d: {k: _plain(v) if not isinstance(v, list) else v for k, v in sorted(f.items())}
                                 for d, f in sorted(part.store_epsilon.items())}
    meta_path.write_text(json.dumps(meta, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    return [table_path, meta_path]


def read_part(meta_path: Path) -> Part:
    """The part whose metadata is ``meta_path`` (its table beside it)."""
    meta = json.loads(meta_path.read_text())
    if meta.get("format") != FORMAT:
        raise ReportError(f"{meta_path}: part format {meta.get('format')!r}, this suite reads format {FORMAT}")
    table_path = meta_path.with_name(meta_path.name[: -len(".json")] + ".csv.gz")
    if not table_path.is_file():
        raise ReportError(f"{meta_path}: its table {table_path.name} is missing")
    rows = pd.read_csv(table_path, keep_default_na=False, na_values=[""], dtype={"params": str})
    for col, value in meta["constants"].items():
        rows[col] = math.nan if value is None else value
    if len(rows) != meta["rows"]:
        raise ReportError(f"{table_path}: {len(rows)} rows, its metadata says {meta['rows']}")
    return Part(meta["sweep_id"], meta["experiment"], normalise(rows), meta["params"], meta["provenance"], meta["wall_seconds"],
                meta["selections"], meta["skipped"], meta.get("store_epsilon", {}), tuple(rows.columns))  # a part written before the store's ε has none


def has_parts(folder: Path) -> bool:
    return any((folder / PARTS).glob("*.json"))


@dataclass
class Study:
    """The union of a study's parts (ordered by sweep id).

    A cell (method, ε, pipeline) that parts run as repeats hold rests on those repeats alone: the same cell in a part
    from before repeats existed (no ``sweep.repeat``; another search of the protocol's split, often under an older
    protocol) is left out of the rows and selections, and listed in :attr:`superseded` for the page to say so."""

    parts: list[Part]
    evidence: pd.DataFrame | None = None  # the health rules' evidence of its dataset, for rows that lack it (report/health_evidence.py)
    superseded: dict[str, list[tuple]] = field(default_factory=dict, init=False)  # sweep id -> its cells left out

    @classmethod
    def read(cls, folder: Path) -> "Study":
        """Every part in ``folder/parts``; a ReportError when there is none or when they mix datasets or constraints."""
        metas = sorted((folder / PARTS).glob("*.json"))
        if not metas:
            raise ReportError(f"{folder} has no study data ({PARTS}/*.json); write it with "
                              f"`raco-bench report --experiment NAME --results {folder}`")
        study = cls([read_part(m) for m in metas])
        if study.kinds:
            study.evidence = health_evidence.read(folder, *next(iter(study.kinds)))
        return study

    @property
    def kinds(self) -> set[tuple[str, str]]:
        """The (dataset, constraint) its parts hold: one, or none without rows."""
        return {(str(p.rows["dataset"].iloc[0]), str(p.rows["constraint"].iloc[0])) for p in self.parts if len(p.rows)}

    def __post_init__(self) -> None:
        self.parts = sorted(self.parts, key=lambda p: p.sweep_id)
        kinds = self.kinds
        if len(kinds) > 1:
            raise ReportError(f"a study is one dataset and constraint; its parts hold {sorted(kinds)}")
        cells = {p.sweep_id: p.cells for p in self.parts}
        repeated = set().union(*(cells[p.sweep_id] for p in self.parts if p.ran_as_repeat))
        older = {p.sweep_id: cells[p.sweep_id] & repeated for p in self.parts if not p.ran_as_repeat}
        self.superseded = {sweep: sorted(gone, key=str) for sweep, gone in older.items() if gone}

    def _kept(self, part: Part) -> pd.DataFrame:
        """A part's rows less the cells superseded by repeats."""
        rows = normalise(part.rows)
        gone = set(self.superseded.get(part.sweep_id, []))
        return rows[~cell_keys(rows).isin(gone)] if gone else rows

    @property
    def rows(self) -> pd.DataFrame:
        """Every part's rows, with the part's cap on T in ``max_steps`` and the health rules' evidence a row lacks
        filled from :attr:`evidence` (:mod:`raco_bench.report.health_evidence`)."""
        frames = [self._kept(p).assign(max_steps=p.max_steps) for p in self.parts]
        if not frames:
            return pd.DataFrame(columns=kept() + ["max_steps"])
        return health_evidence.fill(pd.concat(frames, ignore_index=True), self.evidence)

    @property
    def family(self) -> Family:
        """The study's constraint family (:mod:`raco_bench.constraints.families`): a custom one from the spec its rows record."""
        return family_of(self.rows)

    @property
    def repeat_of(self) -> dict[str, int]:
        """sweep id -> the repeat its part ran (:mod:`raco_bench.report.repeats`)."""
        return {p.sweep_id: p.repeat for p in self.parts}

    @property
    def selections(self) -> list[dict]:
        """Every part's selections, each with its ``sweep_id`` (config ids are per sweep)."""
        out = []
        for p in self.parts:
            gone = {(m, e) for m, e, *_ in self.superseded.get(p.sweep_id, [])}  # one pipeline per part
            out += [{**s, "sweep_id": p.sweep_id} for s in p.selections if (s["method"], eps_key(s["epsilon"])) not in gone]
        return out

    @property
    def skipped(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.parts:
            for key, n in p.skipped.items():
                out[key] = out.get(key, 0) + int(n)
        return out


def part_bytes(folder: Path, sweep_id: str) -> int:
    """Bytes of a part's two files."""
    return sum(p.stat().st_size for p in part_paths(folder, sweep_id) if p.exists())
