"""``raco-bench schema draft TABLE``: a proposed schema file for a user to edit (docs/datasets.md, "Your own data").

A draft is the one place where the suite reads domains from the rows: every range, vocabulary, list of classes
and list of groups it writes is a statistic of the table, and it says so twice. The file opens with a comment
saying that each value marked READ FROM THE DATA is outside the privacy budget until replaced by a public one,
and each such value's ``source`` is :data:`~raco_bench.data.schema_file.DRAFT_SOURCE`. A dataset loaded from a
schema that still holds that source lists those columns outside the budget on every run
(:attr:`~raco_bench.data.schema_file.DatasetSchema.task_outside_budget`).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd

from raco_bench.data.schema_file import DRAFT_SOURCE, SchemaError, toml_key, yaml_key
from raco_bench.data.table import read_table

LABEL_NAMES = ("label", "target", "class", "outcome", "y")
GROUP_NAMES = ("sex", "gender", "race", "group", "g")
MAX_LEVELS = 100  # a text column with more distinct values is left out (under ignore) for the user to decide
MAX_CLASSES = 20  # a numeric label with more distinct values is proposed as a threshold label

HEADER = """DRAFT schema written by `raco-bench schema draft` from {table} ({rows} rows, {columns} columns).
Every value marked READ FROM THE DATA below (ranges, vocabularies, the label's classes, the groups) was read from
the rows: it is a statistic of the private data, OUTSIDE the privacy budget, until you replace it with a public
one (the data's documentation, a code book, a bound chosen without looking at the rows) and change its source.
A run on this file as it is lists those columns OUTSIDE THE BUDGET. Check the label and group columns, and declare
train_rows (the training split's size) only if it is public. docs/datasets.md, "Your own data", explains each key."""


def _find(columns: list[str], wanted: tuple[str, ...]) -> str | None:
    lower = {c.lower(): c for c in columns}
    return next((lower[w] for w in wanted if w in lower), None)


def _plain(value):
    """A value as the file writes it: numpy scalars as Python numbers, integral floats as integers."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (np.integer, int)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        return int(value) if float(value).is_integer() and abs(value) < 2**53 else float(value)
    return str(value)


def _levels(series: pd.Series) -> list:
    return [_plain(v) for v in sorted(series.dropna().unique(), key=lambda v: (str(type(v)), v))]


def propose(frame: pd.DataFrame, name: str, label: str | None = None, groups: list[str] | None = None) -> dict:
    """The proposed schema as a dict in the file's layout, plus ``comments`` per column (why it is ignored)."""
    columns = [str(c) for c in frame.columns]
    label = label or _find(columns, LABEL_NAMES) or columns[-1]
    groups = groups or ([g] if (g := _find([c for c in columns if c != label], GROUP_NAMES)) else None)
    if not groups:
        raise SchemaError(f"no sensitive column found (looked for {', '.join(GROUP_NAMES)}); name it with --groups COLUMN [COLUMN ...]")
    for c in [label, *groups]:
        if c not in columns:
            raise SchemaError(f"column {c!r} is not in the table; its columns are {', '.join(map(repr, columns[:20]))}")
    if label in groups:
        raise SchemaError(f"column {label!r} cannot be both the label and a group")
    series = frame[label]
    if pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series) and series.nunique() > MAX_CLASSES:
        spec = {"column": label, "threshold": _plain(float(series.median())), "source": DRAFT_SOURCE}
    else:
        values = _levels(series)
        spec = {"column": label, "values": values, "positive": values[-1], "source": DRAFT_SOURCE}
    out: dict = {"name": name, "label": spec, "groups": [], "features": {}, "ignore": [], "comments": {}}
    for g in groups:
        values = _levels(frame[g])
        if len(values) > MAX_LEVELS:
            raise SchemaError(f"group column {g!r} has {len(values)} distinct values; a group column holds a few categories")
        out["groups"].append({"column": g, "values": values, "source": DRAFT_SOURCE})
    for c in columns:
        if c == label or c in groups:
            continue
        s = frame[c]
        if s.isna().all():
            out["ignore"].append(c)
            out["comments"][c] = "every value is missing"
        elif pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s):
            lo, hi = float(s.min()), float(s.max())
            if lo == hi:
                hi = lo + 1.0
            heavy = lo >= 0 and hi > 100 * max(float(s.median()), 1.0)
            out["features"][c] = {"range": [_plain(lo), _plain(hi)], **({"mapping": "log"} if heavy else {}), "source": DRAFT_SOURCE}
        else:
            levels = _levels(s)
            if len(levels) > MAX_LEVELS:
                out["ignore"].append(c)
                out["comments"][c] = f"{len(levels)} distinct values: give it a public vocabulary under features, or leave it out"
            else:
                out["features"][c] = {"vocabulary": [str(v) for v in levels], "source": DRAFT_SOURCE}
    return out


def _yaml(value) -> str:
    return json.dumps(value, ensure_ascii=False)


def to_yaml(draft: dict, table: str, rows: int) -> str:
    lines = ["# " + line for line in HEADER.format(table=table, rows=rows, columns=len(draft["features"]) + len(draft["ignore"]) + 1
                                                  + len(draft["groups"])).splitlines()]
    lines += [f"name: {_yaml(draft['name'])}", f"table: {_yaml(table)}", "label:"]
    lines += [f"  {k}: {_yaml(v)}" for k, v in draft["label"].items()]
    lines.append("groups:")
    for g in draft["groups"]:
        lines += [f"  - column: {_yaml(g['column'])}", f"    values: {_yaml(g['values'])}", f"    source: {_yaml(g['source'])}"]
    lines += ["# train_rows: N   # the training split's size, only if it is public (docs/privacy.md, \"Threat model\")",
              "split: {test_fraction: 0.25, validation_fraction: 0.15}  # seeded by the run's split_seed; or {column: C, test: [V]}"]
    if draft["ignore"]:
        lines.append("ignore:")
        lines += [f"  - {_yaml(c)}  # {draft['comments'][c]}" for c in draft["ignore"]]
    lines.append("features:")
    for c, spec in draft["features"].items():
        body = ", ".join(f"{k}: {_yaml(v)}" for k, v in spec.items())
        lines.append(f"  {yaml_key(c)}: {{{body}}}")
    return "\n".join(lines) + "\n"


def to_toml(draft: dict, table: str, rows: int) -> str:
    lines = ["# " + line for line in HEADER.format(table=table, rows=rows, columns=len(draft["features"]) + len(draft["ignore"]) + 1
                                                  + len(draft["groups"])).splitlines()]
    lines += [f"name = {_yaml(draft['name'])}", f"table = {_yaml(table)}",
              "# train_rows = N   # the training split's size, only if it is public (docs/privacy.md, \"Threat model\")"]
    if draft["ignore"]:
        lines.append("ignore = [" + ", ".join(_yaml(c) for c in draft["ignore"]) + "]  # " + "; ".join(
            f"{c}: {draft['comments'][c]}" for c in draft["ignore"]))
    lines += ["", "[split]  # seeded by the run's split_seed; or column = \"C\" with test = [\"V\"]", "test_fraction = 0.25",
              "validation_fraction = 0.15", "", "[label]"]
    lines += [f"{k} = {_yaml(v)}" for k, v in draft["label"].items()]
    for g in draft["groups"]:
        lines += ["", "[[groups]]", f"column = {_yaml(g['column'])}", f"values = {_yaml(g['values'])}", f"source = {_yaml(g['source'])}"]
    lines += ["", "[features]"]
    for c, spec in draft["features"].items():
        body = ", ".join(f"{k} = {_yaml(v)}" for k, v in spec.items())
        lines.append(f"{toml_key(c)} = {{ {body} }}")
    return "\n".join(lines) + "\n"


def write_draft(table: Path, out: Path | None = None, label: str | None = None, groups: list[str] | None = None, force: bool = False) -> Path:
    """Read ``table``, propose its schema and write it to ``out`` (default: beside the table, ``<name>.yaml``); returns ``out``."""
    from raco_bench.data.catalog import DATASETS

    out = out or table.with_name(re.sub(r"(\.csv\.gz|\.[^.]+)$", "", table.name) + ".yaml")
    if out.suffix.lower() not in (".yaml", ".yml", ".toml"):
        raise SchemaError(f"--out {out}: a schema file is .yaml, .yml or .toml")
    if out.exists() and not force:
        raise SchemaError(f"{out} exists; edit it, or pass --force to overwrite it with a new draft")
    if not out.parent.is_dir():
        raise SchemaError(f"the folder of {out} does not exist; create it first")
    frame = read_table(table)
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", re.sub(r"(\.csv\.gz|\.[^.]+)$", "", table.name)).strip("-.") or "table"
    if name in DATASETS:
        name += "-own"
    draft = propose(frame, name, label, groups)
    where = os.path.relpath(table.resolve(), out.resolve().parent)
    text = (to_toml if out.suffix.lower() == ".toml" else to_yaml)(draft, where, len(frame))
    out.write_text(text)
    return out
