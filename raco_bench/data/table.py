"""A table under its schema file: the checks a table must pass, then the :class:`~raco_bench.data.tabular.RawTable`.

One way for every dataset: the catalog's readers (:mod:`raco_bench.data.readers`) and a user's file (CSV or Parquet,
:func:`read_table`) or pandas DataFrame all give a DataFrame, which :func:`raw_table` checks against the schema
(:mod:`raco_bench.data.schema_file`) and turns into the table the protocol splits and encodes. Each check fails with
a :class:`~raco_bench.data.schema_file.SchemaError` naming the column and the fix, before anything is trained or written:

* a column the schema names that the table lacks, or a column of the table the schema gives no role (with the line to add);
* a label value the schema does not declare (more classes than declared), a declared class with no row (fewer);
* a group value the schema does not declare; a group with fewer than ``min_group_train_rows`` training rows (at the split);
* a missing or non-numeric value in a numeric column (a label with a threshold included).

Values outside a feature's declared range are clipped by the encoding, and the run's notes count them on the
validation and test rows (:meth:`~raco_bench.data.tabular.RawTable.range_notes`).
"""

from __future__ import annotations

import difflib
import hashlib
from pathlib import Path

import numpy as np
import pandas as pd

from raco_bench.data.schema_file import Classes, DatasetSchema, SchemaError, shown
from raco_bench.data.tabular import RawTable

TABLE_SUFFIXES = (".csv", ".csv.gz", ".tsv", ".parquet", ".pq")
SHOWN = 5  # examples of offending values or rows in a message


def read_table(path: str | Path) -> pd.DataFrame:
    """A user's table: CSV (``.csv``, ``.csv.gz``, ``.tsv``) or Parquet (``.parquet``, ``.pq``), by its suffix."""
    path = Path(path).expanduser()
    name = path.name.lower()
    if not any(name.endswith(s) for s in TABLE_SUFFIXES):
        raise SchemaError(f"table {path}: read as CSV ({', '.join(TABLE_SUFFIXES[:3])}) or Parquet (.parquet, .pq), by its suffix")
    if not path.is_file():
        raise SchemaError(f"table {path} does not exist; check --data (or the schema's `table`, relative to the schema file)")
    if name.endswith((".parquet", ".pq")):
        return pd.read_parquet(path)
    return pd.read_csv(path, sep="\t" if name.endswith(".tsv") else ",", engine="pyarrow")  # parsed on every core


def frame_digest(frame: pd.DataFrame) -> str:
    """A sha256 of a DataFrame's columns and values (for a table given from Python, which has no file to hash)."""
    digest = hashlib.sha256(",".join(map(str, frame.columns)).encode())
    digest.update(pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes())
    return digest.hexdigest()


def raw_table(schema: DatasetSchema, frame: pd.DataFrame, origin: dict | None = None) -> RawTable:
    """Check ``frame`` against ``schema`` (see the module docstring) and return its :class:`RawTable`."""
    name = schema.name
    _check_columns(schema, frame)
    label = _label(schema, frame)
    group = _groups(schema, frame)
    numeric = sorted(schema.features.numeric)
    features = frame[numeric + sorted(schema.features.categorical)].copy()
    for col in numeric:
        features[col] = _numbers(frame[col], f"{name}: numeric feature {col!r}", "declare it categorical (vocabulary: [...]) if it holds codes")
    test_rows = validation_rows = None
    if schema.split.column is not None:
        test_rows = _matches(frame[schema.split.column], schema.split.test)
        validation_rows = _matches(frame[schema.split.column], schema.split.validation) if schema.split.validation else None
        if not test_rows.any():
            raise SchemaError(f"{name}: no row of split column {schema.split.column!r} has a test value {shown(schema.split.test)}; "
                              "check split.test in the schema")
    return RawTable(name, features, label, group, schema.label.classes.names, schema.group_names, schema.sensitive_attribute,
                    tuple(sorted(schema.features.categorical)), tuple(numeric), schema.features, schema.note, schema.task_outside_budget,
                    published_train_rows=schema.train_rows, test_fraction=schema.split.test_fraction,
                    validation_fraction=schema.split.validation_fraction, test_rows=test_rows, validation_rows=validation_rows,
                    min_group_train_rows=schema.min_group_train_rows, origin=dict(origin or {}))


def _check_columns(schema: DatasetSchema, frame: pd.DataFrame) -> None:
    columns = [str(c) for c in frame.columns]
    if len(set(columns)) != len(columns):
        twice = sorted({c for c in columns if columns.count(c) > 1})
        raise SchemaError(f"{schema.name}: the table has more than one column named {', '.join(map(repr, twice))}; rename them in the table")
    missing = [c for c in schema.columns if c not in columns]
    if missing:
        c = missing[0]
        near = difflib.get_close_matches(c, columns, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise SchemaError(f"{schema.name}: the schema names column {c!r}{hint}, which the table lacks"
                          + (f" (and {len(missing) - 1} more: {', '.join(map(repr, missing[1:SHOWN + 1]))})" if len(missing) > 1 else "")
                          + f"; the table's columns are {_listing(columns)}. Fix the name in the schema or the table")
    unknown = [c for c in columns if c not in schema.columns]
    if unknown:
        c = unknown[0]
        numeric = pd.api.types.is_numeric_dtype(frame[c])
        where = f"schema {schema.path}" if schema.path else "the schema"
        more = f" ({len(unknown) - 1} more lack one too: {', '.join(map(repr, unknown[1:SHOWN + 1]))}{', ...' if len(unknown) > SHOWN + 1 else ''})" \
            if len(unknown) > 1 else ""
        raise SchemaError(f"{schema.name}: column {c!r} of the table has no domain in {where}{more}. Add it under `features` with a public "
                          f"domain (from documentation or an a priori bound, never from the rows), e.g.\n{schema.example_line(c, numeric)}\n"
                          f"or list it under `ignore` to leave it out")


def _listing(columns: list[str]) -> str:
    shown = ", ".join(map(repr, columns[:12]))
    return shown + (f", ... ({len(columns)} in all)" if len(columns) > 12 else "")


def _matches(series: pd.Series, values: tuple) -> np.ndarray:
    """Rows whose value is one of ``values`` (numbers compared as numbers, else as text)."""
    return _codes(series, values) >= 0


def _codes(series: pd.Series, values: tuple) -> np.ndarray:
    """Each row's index in ``values``, -1 where it holds none of them. A numeric (or boolean) column is compared with numeric
    declared values as numbers (1 matches 1.0, true matches 1); anything else is compared as text."""
    if pd.api.types.is_bool_dtype(series):
        series = series.astype(np.float64)
    if pd.api.types.is_numeric_dtype(series) and all(isinstance(v, float) for v in values):
        return pd.Index(np.asarray(values, dtype=np.float64)).get_indexer(series.to_numpy(dtype=np.float64, na_value=np.nan))
    text = [v if isinstance(v, str) else f"{v:g}" for v in values]
    shown = series.astype(str) if not pd.api.types.is_float_dtype(series) else series.map(lambda v: f"{v:g}")
    return pd.Index(text).get_indexer(shown.to_numpy())


def _undeclared(series: pd.Series, codes: np.ndarray) -> str:
    bad = series[codes < 0]
    counts = bad.astype(str).value_counts(dropna=False)
    shown = ", ".join(f"{v!r} ({n} rows)" for v, n in counts.head(SHOWN).items())
    return shown + (f", ... ({len(counts)} values in all)" if len(counts) > SHOWN else "")


def _label(schema: DatasetSchema, frame: pd.DataFrame) -> np.ndarray:
    classes, name = schema.label.classes, schema.name
    series = frame[classes.column]
    if schema.label.threshold is not None:
        values = _numbers(series, f"{name}: label column {classes.column!r} (positive above threshold {schema.label.threshold:g})",
                          "give a numeric label or declare its values (label.values) instead of a threshold")
        y = (values.to_numpy() > schema.label.threshold).astype(np.int64)
    else:
        y = _codes(series, classes.values)
        if (y < 0).any():
            raise SchemaError(f"{name}: label column {classes.column!r} holds value(s) the schema does not declare, {_undeclared(series, y)}: "
                              f"more classes than the {len(classes.values)} declared {shown(classes.values)}. Add each to label.values (each "
                              "value is a class), or drop those rows")
    _every_class(name, classes, y)
    return y


def _every_class(name: str, classes: Classes, y: np.ndarray) -> None:
    present = np.bincount(y, minlength=len(classes.names))
    empty = [classes.names[i] for i, n in enumerate(present) if n == 0]
    if empty:
        raise SchemaError(f"{name}: label column {classes.column!r} has no row of declared class(es) {', '.join(map(repr, empty))}: fewer classes "
                          f"than the {len(classes.names)} declared. Check the column and the declared values (label.values, label.positive "
                          "or label.threshold)")


def _groups(schema: DatasetSchema, frame: pd.DataFrame) -> np.ndarray:
    group = np.zeros(len(frame), dtype=np.int64)
    for spec in schema.groups:
        series = frame[spec.column]
        codes = _codes(series, spec.values)
        if (codes < 0).any():
            raise SchemaError(f"{schema.name}: group column {spec.column!r} holds value(s) the schema does not declare, {_undeclared(series, codes)}; "
                              f"declared {shown(spec.values)}. Add each to the group's values (with a name), or drop those rows")
        group = group * len(spec.values) + codes
    return group


def _numbers(series: pd.Series, what: str, alternative: str) -> pd.Series:
    """The column as float64, refusing missing and non-numeric values (naming rows, values and the fix)."""
    if pd.api.types.is_bool_dtype(series):
        return series.astype(np.float64)
    values = series if pd.api.types.is_numeric_dtype(series) else pd.to_numeric(series, errors="coerce")
    bad = values.isna().to_numpy()
    if bad.any():
        rows = np.flatnonzero(bad)
        missing = series.isna().to_numpy()[rows]
        examples = ", ".join(f"row {r}: {'missing' if m else repr(series.iloc[r])}" for r, m in zip(rows[:SHOWN], missing[:SHOWN]))
        kind = "missing values" if missing.all() else "non-numeric values" if not missing.any() else "missing or non-numeric values"
        raise SchemaError(f"{what} has {len(rows)} {kind} ({examples}{', ...' if len(rows) > SHOWN else ''}). Fix or drop those rows (fill a "
                          f"missing value with a public one, e.g. the range's lower end), or {alternative}")
    return values.astype(np.float64)
