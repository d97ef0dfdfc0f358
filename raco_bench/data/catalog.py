"""Every dataset is a schema file and a table: the catalog's and a user's load the same way (docs/datasets.md).

The catalog is the folder ``raco_bench/data/schemas/``: one schema file per dataset (:mod:`raco_bench.data.schema_file`),
whose ``reader`` reads its pinned raw files (:mod:`raco_bench.data.readers`). A user's dataset is a schema file they
write plus a table: a CSV or Parquet file (``data``, or the schema's ``table``) or a pandas DataFrame. Either way the
table is checked against the schema and becomes a :class:`~raco_bench.data.tabular.RawTable`
(:mod:`raco_bench.data.table`), which splits and encodes itself under the project protocol (:mod:`raco_bench.data.tabular`).

What the privacy accounting takes as public comes from the schema file, never from the rows: the training split's
size (``train_rows``, known before loading so that a batch size that cannot fit is refused before any file is read),
the classes and the groups.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

import pandas as pd

from raco_bench.data import files, readers
from raco_bench.data.files import RawFile
from raco_bench.data.schema import PREPROCESSING_MODES
from raco_bench.data.schema_file import DatasetSchema, SchemaError, read_schema
from raco_bench.data.table import frame_digest, raw_table, read_table
from raco_bench.data.tabular import RawTable, TabularDataset

SCHEMAS = Path(__file__).resolve().parent / "schemas"
DATASETS: dict[str, Path] = {p.stem: p for p in sorted(SCHEMAS.glob("*.yaml"))}  # the catalog: name -> schema file


@functools.lru_cache(maxsize=None)
def catalog_schema(name: str) -> DatasetSchema:
    try:
        path = DATASETS[name]
    except KeyError:
        raise ValueError(f"unknown dataset {name!r}; choose one of: {', '.join(DATASETS)}, or give your own with --data TABLE --schema "
                         "SCHEMA (docs/datasets.md, \"Your own data\")") from None
    return read_schema(path)


def dataset_schema(name: str | None = None, schema: str | Path | None = None) -> DatasetSchema:
    """The schema of catalog dataset ``name``, or the user's schema file ``schema`` (whose name must be ``name`` when both
    are given, and must not be a catalog dataset's)."""
    if schema is None:
        if name is None:
            raise ValueError("name a catalog dataset or give a schema file")
        return catalog_schema(name)
    parsed = read_schema(schema)
    if parsed.reader is not None and Path(schema).resolve() != DATASETS.get(parsed.name, Path()).resolve():
        raise SchemaError(f"schema {schema}: `reader` is for the catalog's own schema files; a user's schema names its `table` (or pass --data)")
    if parsed.reader is None and parsed.name in DATASETS:
        raise SchemaError(f"schema {schema}: name {parsed.name!r} is a catalog dataset's; give your dataset a name of its own")
    if name is not None and name != parsed.name:
        raise SchemaError(f"schema {schema} is named {parsed.name!r}, not {name!r}; the run's dataset is the schema's name")
    return parsed


def public_train_rows(name: str, schema: str | Path | None = None) -> int | None:
    """The training split's public size as the schema declares it (None: not declared), read before any row is."""
    return dataset_schema(name, schema).train_rows


def raw_files(name: str) -> tuple[RawFile, ...]:
    """The pinned raw files of catalog dataset ``name`` (none for a generated one)."""
    s = catalog_schema(name)
    return readers.get_reader(s.reader).files(**s.reader_params)


def load_table(name: str | None = None, download: bool = True, *, schema: str | Path | None = None,
               data: str | Path | pd.DataFrame | None = None) -> RawTable:
    """The checked table of a dataset, before splitting and encoding: catalog dataset ``name``, or the user's ``schema``
    with its table (``data``: a CSV or Parquet file or a DataFrame; by default the file the schema names as ``table``)."""
    s = dataset_schema(name, schema)
    origin = {"schema": f"raco_bench/data/schemas/{s.path.name}" if s.reader is not None else str(s.path.resolve()), "schema_sha256": s.digest}
    if s.reader is not None:
        if data is not None:
            raise SchemaError(f"{s.name} is a catalog dataset read from its pinned files; --data is for a dataset of your own")
        raws = readers.get_reader(s.reader).files(**s.reader_params)
        frame = readers.read(s.reader, s.reader_params, download)
        origin.update(reader=s.reader, reader_params=s.reader_params, files=[r.relpath for r in raws], files_sha256=[r.sha256 for r in raws])
    elif isinstance(data, pd.DataFrame):
        frame = data
        origin.update(table="a pandas DataFrame", table_sha256=frame_digest(data))
    else:
        path = Path(data).expanduser() if data is not None else s.table
        if path is None:
            raise SchemaError(f"schema {s.path}: no table to read; pass --data TABLE (CSV or Parquet) or name it in the schema (table: FILE)")
        frame = read_table(path)
        origin.update(table=str(path.resolve()), table_sha256=files.sha256_of(path))
    return raw_table(s, frame, origin)


def load_dataset(name: str | None = None, seed: int = 0, download: bool = True, preprocessing: str = "public", *,
                 schema: str | Path | None = None, data: str | Path | pd.DataFrame | None = None, validation_split: int = 0) -> TabularDataset:
    """Load, check and preprocess a dataset (see the module docstring): catalog dataset ``name``, or a user's ``schema`` and
    ``data``. ``preprocessing``: ``"public"`` (default; feature domains from the schema, no statistic of the rows) or
    ``"paper"`` (the papers' data-dependent z-scoring, outside the privacy budget). ``validation_split``: 0 for the
    protocol's train/validation split, r > 0 for its r-th resample with the same test split (a study's repeats,
    :func:`raco_bench.data.tabular.split_indices`)."""
    if preprocessing not in PREPROCESSING_MODES:
        raise ValueError(f"invalid preprocessing={preprocessing!r}: choose one of {PREPROCESSING_MODES}")
    return load_table(name, download, schema=schema, data=data).dataset(seed, preprocessing, validation_split=validation_split)


def files_digest(schema: str | Path, data: str | Path | None) -> str:
    """The sha256 of a user's schema file and table file together: what a sweep checks in every trial (a file changed while
    the sweep runs is refused, and a changed file makes a new sweep)."""
    s = dataset_schema(None, schema)
    path = Path(data).expanduser() if data is not None else s.table
    if path is None:
        raise SchemaError(f"schema {schema}: no table to read; pass --data TABLE (CSV or Parquet) or name it in the schema (table: FILE)")
    if not path.is_file():
        raise SchemaError(f"table {path} does not exist; check --data (or the schema's `table`, relative to the schema file)")
    return hashlib.sha256(f"{s.digest}:{files.sha256_of(path)}".encode()).hexdigest()


def provenance(ds: TabularDataset) -> tuple[str, str, dict]:
    """(digest, source, profile) of a loaded dataset, as a tracking store records it: the digest hashes its name, its schema
    file and table (the sha256 of the schema, of the table file or the pinned raw files), the split seed, the preprocessing
    and the split sizes (two runs with one digest read the same encoded rows); the source names the table or raw files; the
    profile gives the files and their sha256, the split sizes, features and groups."""
    origin = ds.origin
    content = {k: v for k, v in origin.items() if k.endswith("sha256") or k == "reader_params"}  # what was read, wherever it lies
    seal = json.dumps({"name": ds.name, "content": content, "split_seed": ds.split_seed, "preprocessing": ds.preprocessing,
                       **({"validation_split": ds.validation_split} if ds.validation_split else {}),
                       "sizes": [len(ds.train), len(ds.val), len(ds.test)], "features": list(ds.feature_names)}, sort_keys=True, default=str)
    digest = hashlib.sha256(seal.encode()).hexdigest()[:16]
    if "table" in origin:
        source = origin["table"]
    elif origin.get("files"):
        raws = readers.get_reader(origin["reader"]).files(**origin.get("reader_params", {}))
        source = ", ".join(r.url or r.relpath for r in raws)
    else:
        source = "generated (no file)"
    profile = {"train_rows": len(ds.train), "val_rows": len(ds.val), "test_rows": len(ds.test), "features": ds.n_features,
               "groups": list(ds.group_names), "sensitive_attribute": ds.sensitive_attribute, "split_seed": ds.split_seed,
               "validation_split": ds.validation_split, "preprocessing": ds.preprocessing,
               **{k: origin[k] for k in ("schema", "schema_sha256", "table", "table_sha256") if k in origin}}
    if ds.data_notes:
        profile["notes"] = list(ds.data_notes)
    return digest, source, profile
