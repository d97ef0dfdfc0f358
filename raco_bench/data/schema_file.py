"""A dataset's schema file: what its columns mean and their public domains (docs/datasets.md, "Your own data").

Every dataset is a table plus a schema file, YAML or TOML, written by a person: the catalog's datasets
(``raco_bench/data/schemas/*.yaml``, whose tables come from pinned raw files through a reader,
:mod:`raco_bench.data.readers`) and a user's (a CSV or Parquet file, or a pandas DataFrame). The file says

* ``label``: the label column, its declared values (each one class) and the positive class, or a
  ``threshold`` above which a numeric label is positive;
* ``groups``: the sensitive column(s) and their declared values (several columns: every combination is a group);
* ``features``: for each feature column its public domain, a numeric ``range`` with a ``linear`` or ``log``
  mapping or a categorical ``vocabulary``, each with its ``source``; ``ignore`` lists columns that are not used;
* ``split``: a seeded stratified split (the run's ``split_seed``) or a column naming the test rows;
* ``train_rows``: the training split's size where it is public (docs/privacy.md, "Threat model");
* ``constraints``: custom rate constraints by name, each a linear combination of rates over the declared groups and
  classes (docs/constraints.md), for ``--constraint NAME``; read by :mod:`raco_bench.constraints.families`.

Nothing here is derived from the rows: a column of the table without a domain is refused
(:mod:`raco_bench.data.table`). Values a draft schema read from the rows keep :data:`DRAFT_SOURCE` as their
source until the user replaces them, and the dataset lists them outside the privacy budget.
"""

from __future__ import annotations

import difflib
import hashlib
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from raco_bench.data.schema import CategoricalDomain, NumericDomain, PublicSchema
from raco_bench.data.tabular import TEST_FRACTION, VALIDATION_FRACTION

SCHEMA_SUFFIXES = (".yaml", ".yml", ".toml")
MAPPINGS = ("linear", "log")
DRAFT_SOURCE = "READ FROM THE DATA by raco-bench schema draft (OUTSIDE the privacy budget): replace with a public source"
DEFAULT_MIN_GROUP_TRAIN_ROWS = 2
TOP_KEYS = ("name", "description", "note", "table", "reader", "reader_params", "label", "groups", "features", "ignore", "split",
            "train_rows", "min_group_train_rows", "outside_budget", "constraints")
LABEL_KEYS = ("column", "values", "names", "positive", "threshold", "source")
GROUP_KEYS = ("column", "values", "names", "source")
FEATURE_KEYS = ("range", "mapping", "vocabulary", "source")
SPLIT_KEYS = ("test_fraction", "validation_fraction", "column", "test", "validation")


class SchemaError(ValueError):
    """A schema file or a table that does not fit its schema; the message names the key or column and the fix."""


@dataclass(frozen=True)
class Classes:
    """A column's declared values, in class (or group) order, with their display names."""

    column: str
    values: tuple
    names: tuple[str, ...]
    source: str


@dataclass(frozen=True)
class Label:
    """The label: declared ``classes`` (class 1 is the positive one for a binary label), or, with ``threshold``, a numeric
    column whose values above it are class 1."""

    classes: Classes
    threshold: float | None = None


@dataclass(frozen=True)
class Split:
    """The test split: ``column`` (its rows with a value in ``test`` are the test rows, ``validation`` the validation rows),
    else a seeded split stratified on (label, group). Validation rows not named by a column are ``validation_fraction`` of
    the training rows, stratified and seeded the same way (:mod:`raco_bench.data.tabular`)."""

    test_fraction: float = TEST_FRACTION
    validation_fraction: float = VALIDATION_FRACTION
    column: str | None = None
    test: tuple = ()
    validation: tuple = ()


@dataclass(frozen=True)
class DatasetSchema:
    """A parsed schema file (see the module docstring)."""

    name: str
    label: Label
    groups: tuple[Classes, ...]
    features: PublicSchema
    path: Path | None = None
    description: str = ""
    note: str = ""
    table: Path | None = None  # the user's table file, when the schema names it
    reader: str | None = None  # the catalog's reader of pinned raw files
    reader_params: dict = field(default_factory=dict)
    ignore: tuple[str, ...] = ()
    split: Split = Split()
    train_rows: int | None = None
    min_group_train_rows: int = DEFAULT_MIN_GROUP_TRAIN_ROWS
    outside_budget: tuple[str, ...] = ()
    syntax: str = "yaml"
    digest: str = ""  # sha256 of the file's bytes
    constraints: dict[str, str] = field(default_factory=dict)  # custom rate constraints: name -> spec (docs/constraints.md)

    @property
    def sensitive_attribute(self) -> str:
        return "&".join(g.column for g in self.groups)

    @property
    def group_names(self) -> tuple[str, ...]:
        names: list[tuple[str, ...]] = [()]
        for g in self.groups:
            names = [n + (m,) for n in names for m in g.names]
        return tuple("&".join(n) for n in names)

    @property
    def columns(self) -> tuple[str, ...]:
        """Every column the schema names: label, groups, features, the split column and the ignored ones."""
        named = [self.label.classes.column, *(g.column for g in self.groups), *self.features.numeric, *self.features.categorical,
                 *self.ignore]
        if self.split.column is not None and self.split.column not in named:
            named.append(self.split.column)
        return tuple(named)

    @property
    def drafted(self) -> tuple[str, ...]:
        """The columns whose declared domain or values still come from the rows (a draft's :data:`DRAFT_SOURCE`)."""
        parts = [self.label.classes, *self.groups]
        out = [c.column for c in parts if c.source == DRAFT_SOURCE]
        out += [name for name, d in {**self.features.numeric, **self.features.categorical}.items() if d.source == DRAFT_SOURCE]
        return tuple(out)

    @property
    def task_outside_budget(self) -> tuple[str, ...]:
        """What defining the task read from the rows: the schema's own list, and any value a draft read from them."""
        drafted = self.drafted
        note = (f"schema {self.path.name if self.path else self.name}: the declared values of {', '.join(drafted)} were read from the rows by "
                "raco-bench schema draft, OUTSIDE the privacy budget (replace them with public ones and change their source)",)
        return self.outside_budget + (note if drafted else ())

    def example_line(self, column: str, numeric: bool) -> str:
        """The line to add under ``features`` for ``column``, in this file's syntax (placeholders, never values from the rows)."""
        where = "where LO and HI come from" if numeric else "where the levels come from"
        if self.syntax == "toml":
            domain = "range = [LO, HI]" if numeric else 'vocabulary = ["A", "B"]'
            return f'{toml_key(column)} = {{ {domain}, source = "{where}" }}'
        domain = "range: [LO, HI]" if numeric else "vocabulary: [A, B]"
        return f'  {yaml_key(column)}: {{{domain}, source: "{where}"}}'


def toml_key(column: str) -> str:
    return column if re.fullmatch(r"[A-Za-z0-9_-]+", column) else '"' + column.replace('"', '\\"') + '"'


def yaml_key(column: str) -> str:
    return column if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.()%-]*", column) else '"' + column.replace('"', '\\"') + '"'


# ------------------------------------------------------------------------------------------ reading
def _yaml_loader():
    """PyYAML's safe loader with YAML 1.2's booleans and floats: ``no`` and ``yes`` stay text (class names), ``1e6`` is a number."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    dropped = ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:float")
    Loader.yaml_implicit_resolvers = {k: [r for r in v if r[0] not in dropped] for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
    Loader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
    number = r"^[-+]?(?:(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[0-9]+[eE][-+]?[0-9]+)$|^[-+]?\.(?:inf|Inf|INF)$|^\.(?:nan|NaN|NAN)$"
    Loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(number), list("-+0123456789."))
    return Loader


def read_schema(path: str | Path) -> DatasetSchema:
    """Parse and check a schema file (YAML or TOML, by its suffix); raises :class:`SchemaError` naming the key and the fix."""
    path = Path(path).expanduser()
    if path.suffix.lower() not in SCHEMA_SUFFIXES:
        raise SchemaError(f"schema {path}: a schema file is YAML (.yaml, .yml) or TOML (.toml); draft one with `raco-bench schema draft TABLE`")
    if not path.is_file():
        raise SchemaError(f"schema {path} does not exist; draft one with `raco-bench schema draft TABLE` and edit it")
    blob = path.read_bytes()
    syntax = "toml" if path.suffix.lower() == ".toml" else "yaml"
    try:
        if syntax == "toml":
            try:
                import tomllib
            except ModuleNotFoundError:  # Python 3.10
                import tomli as tomllib
            raw = tomllib.loads(blob.decode())
        else:
            import yaml

            raw = yaml.load(blob.decode(), Loader=_yaml_loader())  # noqa: S506 - a safe loader
    except Exception as exc:  # noqa: BLE001 - the parser's own message names the line
        raise SchemaError(f"schema {path} is not valid {syntax.upper()}: {exc}") from None
    return replace(parse_schema(raw, path=path, syntax=syntax), digest=hashlib.sha256(blob).hexdigest())


def parse_schema(raw: Any, path: Path | None = None, syntax: str = "yaml") -> DatasetSchema:
    """A :class:`DatasetSchema` from the parsed file ``raw`` (a dict)."""
    where = f"schema {path}" if path is not None else "schema"
    if not isinstance(raw, dict):
        raise SchemaError(f"{where}: expected a mapping of keys (name, label, groups, features, ...), got {type(raw).__name__}")
    _known(raw, TOP_KEYS, where)
    for key in ("name", "label", "groups", "features"):
        if key not in raw:
            raise SchemaError(f"{where}: no `{key}`; every schema declares name, label, groups and features (docs/datasets.md, \"Your own data\")")
    name = _text(raw["name"], f"{where}: name")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise SchemaError(f"{where}: name {name!r} must be letters, digits, '.', '_' or '-' (it names experiments and runs)")
    if ("table" in raw) and ("reader" in raw):
        raise SchemaError(f"{where}: give `table` (a user's file) or `reader` (the catalog's raw files), not both")
    table = None
    if raw.get("table") is not None:
        table = Path(_text(raw["table"], f"{where}: table")).expanduser()
        if not table.is_absolute() and path is not None:
            table = path.parent / table
    label = _label(raw["label"], where)
    groups_raw = raw["groups"] if isinstance(raw["groups"], list) else [raw["groups"]]
    if not groups_raw:
        raise SchemaError(f"{where}: `groups` is empty; name the sensitive column(s) and their values")
    groups = tuple(_classes(g, GROUP_KEYS, f"{where}: groups[{i}]", "group") for i, g in enumerate(groups_raw))
    features = _features(raw["features"], where)
    ignore = tuple(_text(c, f"{where}: ignore") for c in _list(raw.get("ignore", []), f"{where}: ignore"))
    split = _split(raw.get("split", {}), where)
    train_rows = raw.get("train_rows")
    if train_rows is not None and not (isinstance(train_rows, int) and not isinstance(train_rows, bool) and train_rows > 0):
        raise SchemaError(f"{where}: train_rows={train_rows!r} must be a whole number > 0 (the training split's public size), or left out")
    min_rows = raw.get("min_group_train_rows", DEFAULT_MIN_GROUP_TRAIN_ROWS)
    if not (isinstance(min_rows, int) and not isinstance(min_rows, bool) and min_rows >= 0):
        raise SchemaError(f"{where}: min_group_train_rows={min_rows!r} must be a whole number >= 0")
    outside = tuple(_text(o, f"{where}: outside_budget") for o in _list(raw.get("outside_budget", []), f"{where}: outside_budget"))
    constraints = _constraints(raw.get("constraints", {}), where)
    schema = DatasetSchema(name=name, label=label, groups=groups, features=features, path=path, description=str(raw.get("description", "")),
                           note=str(raw.get("note", "")), table=table, reader=raw.get("reader"), reader_params=dict(raw.get("reader_params") or {}),
                           ignore=ignore, split=split, train_rows=train_rows, min_group_train_rows=min_rows, outside_budget=outside, syntax=syntax,
                           constraints=constraints)
    _check_roles(schema, where)
    return schema


def _constraints(raw: Any, where: str) -> dict[str, str]:
    """The ``constraints`` key: name -> a spec (text, or a list of texts, each one or more constraints, joined by ``;``). Their
    rates and names are read where a run takes one (:func:`raco_bench.constraints.families.declared`), against this schema's
    groups and classes, before anything is trained."""
    where = f"{where}: constraints"
    if not isinstance(raw, dict):
        raise SchemaError(f"{where}: expected a mapping of names to constraints, e.g. fnr-gap: \"FNR(group=a) - FNR(group=b)\"")
    out = {}
    for name, spec in raw.items():
        name = _text(name, where)
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
            raise SchemaError(f"{where}: name {name!r} must be letters, digits, '.', '_' or '-' (it names experiments and runs)")
        texts = spec if isinstance(spec, list) else [spec]
        if not texts or not all(isinstance(t, str) and t.strip() for t in texts):
            raise SchemaError(f"{where}.{name}: expected a constraint as text, e.g. \"FNR(group=a) - FNR(group=b)\", or a list of them")
        out[name] = "; ".join(t.strip() for t in texts)
    return out


def _check_roles(schema: DatasetSchema, where: str) -> None:
    """Each column plays one role: label, a group, a feature, the split column or ignored."""
    roles: dict[str, list[str]] = {}
    for role, cols in (("label", [schema.label.classes.column]), ("groups", [g.column for g in schema.groups]),
                       ("features", [*schema.features.numeric, *schema.features.categorical]), ("ignore", list(schema.ignore)),
                       ("split", [schema.split.column] if schema.split.column else [])):
        for c in cols:
            roles.setdefault(c, []).append(role)
    twice = {c: r for c, r in roles.items() if len(r) > 1}
    if twice:
        c, r = next(iter(twice.items()))
        raise SchemaError(f"{where}: column {c!r} is named under {' and '.join(r)}; a column plays one role (the label and the group "
                          "columns are never features: a method that uses the group adds it itself)")


def _known(raw: dict, keys: tuple[str, ...], where: str) -> None:
    for key in raw:
        if key not in keys:
            near = difflib.get_close_matches(str(key), keys, n=3)
            near.sort(key=lambda k: sorted(k) != sorted(str(key)))  # a transposition first: lable is label, not table
            hint = f"; did you mean `{near[0]}`?" if near else f"; the keys are {', '.join(keys)}"
            raise SchemaError(f"{where}: unknown key `{key}`{hint}")


def _text(value: Any, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)) or str(value) == "":
        raise SchemaError(f"{where}: expected text, got {value!r}")
    return str(value)


def _list(value: Any, where: str) -> list:
    if not isinstance(value, list):
        raise SchemaError(f"{where}: expected a list [a, b, ...], got {value!r}")
    return value


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool):
        raise SchemaError(f"{where}: expected a number, got {value!r}")
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise SchemaError(f"{where}: expected a number, got {value!r}") from None
    if not math.isfinite(out):
        raise SchemaError(f"{where}: expected a finite number, got {value!r}")
    return out


def _value(value: Any, where: str):
    """A declared value: a number stays a number (compared numerically with a numeric column), anything else is text."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return _number(value, where)
    return _text(value, where)


def _source(raw: dict, where: str) -> str:
    source = raw.get("source")
    if not isinstance(source, str) or not source.strip():
        raise SchemaError(f"{where}: no `source`: say where its values come from (the dataset's documentation, a code book, an a priori "
                          "bound chosen before looking at the rows)")
    return source


def _classes(raw: Any, keys: tuple[str, ...], where: str, what: str) -> Classes:
    if not isinstance(raw, dict):
        raise SchemaError(f"{where}: expected a mapping with column, values and source, got {raw!r}")
    _known(raw, keys, where)
    if "column" not in raw:
        raise SchemaError(f"{where}: no `column`: name the table's {what} column")
    column = _text(raw["column"], f"{where}: column")
    if "values" not in raw:
        raise SchemaError(f"{where}: no `values`: declare the {what} column's values from public knowledge, e.g. values: [a, b]")
    values = tuple(_value(v, f"{where}: values") for v in _list(raw["values"], f"{where}: values"))
    if len(values) < (2 if what == "label" else 1):
        raise SchemaError(f"{where}: values {list(values)} must declare at least {2 if what == 'label' else 1} value(s)")
    if len(set(values)) != len(values):
        raise SchemaError(f"{where}: values {list(values)} repeat a value")
    names = tuple(_text(n, f"{where}: names") for n in _list(raw.get("names", [_plain(v) for v in values]), f"{where}: names"))
    if len(names) != len(values) or len(set(names)) != len(names):
        raise SchemaError(f"{where}: names {list(names)} must give one distinct name per value {list(values)}")
    return Classes(column, values, names, _source(raw, where))


def _plain(value) -> str:
    """A declared value as a name: 1.0 reads as 1."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def shown(values) -> str:
    """Declared values as a message shows them: [0, 1], ['no', 'yes']."""
    return "[" + ", ".join(_plain(v) if isinstance(v, float) else repr(v) for v in values) + "]"


def _label(raw: Any, where: str) -> Label:
    where = f"{where}: label"
    if not isinstance(raw, dict):
        raise SchemaError(f"{where}: expected a mapping with column, values, positive and source, got {raw!r}")
    _known(raw, LABEL_KEYS, where)
    if "threshold" in raw:
        if "values" in raw or "positive" in raw:
            raise SchemaError(f"{where}: a threshold label is positive above its threshold; give `threshold` or `values` with `positive`, not both")
        threshold = _number(raw["threshold"], f"{where}: threshold")
        column = _text(raw.get("column"), f"{where}: column")
        names = tuple(_text(n, f"{where}: names") for n in _list(raw.get("names", [f"{column}<={threshold:g}", f"{column}>{threshold:g}"]),
                                                                    f"{where}: names"))
        if len(names) != 2 or names[0] == names[1]:
            raise SchemaError(f"{where}: names must give two distinct names (at or below the threshold, above it), got {list(names)}")
        return Label(Classes(column, (0.0, 1.0), names, _source(raw, where)), threshold)
    classes = _classes({k: v for k, v in raw.items() if k != "positive"}, LABEL_KEYS, where, "label")
    if len(classes.values) == 2:
        if "positive" not in raw:
            raise SchemaError(f"{where}: no `positive`: name the positive class, one of {shown(classes.values)} (it is class 1)")
        positive = _value(raw["positive"], f"{where}: positive")
        if positive not in classes.values:
            raise SchemaError(f"{where}: positive {_plain(positive)!r} is not one of the declared values {shown(classes.values)}")
        i = classes.values.index(positive)
        order = (1 - i, i)  # the positive class is class 1
        classes = Classes(classes.column, tuple(classes.values[j] for j in order), tuple(classes.names[j] for j in order), classes.source)
    elif "positive" in raw:
        raise SchemaError(f"{where}: `positive` is for a binary label; a label of {len(classes.values)} classes keeps the declared order")
    return Label(classes)


def _features(raw: Any, where: str) -> PublicSchema:
    if not isinstance(raw, dict) or not raw:
        raise SchemaError(f"{where}: `features` must map each feature column to its domain, e.g. age: {{range: [17, 90], source: ...}}")
    numeric, categorical = {}, {}
    for column, spec in raw.items():
        w = f"{where}: features.{column}"
        if not isinstance(spec, dict):
            raise SchemaError(f"{w}: expected {{range: [LO, HI], source: ...}} or {{vocabulary: [A, B], source: ...}}, got {spec!r}")
        _known(spec, FEATURE_KEYS, w)
        source = _source(spec, w)
        if ("range" in spec) == ("vocabulary" in spec):
            raise SchemaError(f"{w}: give `range: [LO, HI]` (a numeric column) or `vocabulary: [A, B, ...]` (a categorical one)")
        if "range" in spec:
            bounds = _list(spec["range"], f"{w}: range")
            if len(bounds) != 2:
                raise SchemaError(f"{w}: range must be [LO, HI], got {bounds!r}")
            lo, hi = (_number(b, f"{w}: range") for b in bounds)
            mapping = spec.get("mapping", "linear")
            if mapping not in MAPPINGS:
                raise SchemaError(f"{w}: mapping {mapping!r} must be one of {', '.join(MAPPINGS)}")
            if not hi > lo:
                raise SchemaError(f"{w}: range [{lo:g}, {hi:g}] needs LO < HI")
            numeric[str(column)] = NumericDomain(lo, hi, log=mapping == "log", source=source)
        else:
            if "mapping" in spec:
                raise SchemaError(f"{w}: `mapping` is for a numeric range; a vocabulary is one-hot encoded")
            levels = tuple(_plain(_value(v, f"{w}: vocabulary")) for v in _list(spec["vocabulary"], f"{w}: vocabulary"))
            if not levels or len(set(levels)) != len(levels):
                raise SchemaError(f"{w}: vocabulary {list(levels)} must be non-empty and without repeats")
            categorical[str(column)] = CategoricalDomain(levels, source)
    return PublicSchema(numeric=numeric, categorical=categorical)


def _split(raw: Any, where: str) -> Split:
    where = f"{where}: split"
    if not isinstance(raw, dict):
        raise SchemaError(f"{where}: expected a mapping, e.g. {{test_fraction: 0.25}} or {{column: fold, test: [test]}}")
    _known(raw, SPLIT_KEYS, where)
    test_fraction = _number(raw.get("test_fraction", Split.test_fraction), f"{where}: test_fraction")
    validation_fraction = _number(raw.get("validation_fraction", Split.validation_fraction), f"{where}: validation_fraction")
    column = raw.get("column")
    if column is None:
        if "test" in raw or "validation" in raw:
            raise SchemaError(f"{where}: `test` and `validation` name values of a split column; add `column`")
        if not 0 < test_fraction < 1:
            raise SchemaError(f"{where}: test_fraction={test_fraction:g} must be in (0, 1)")
    else:
        column = _text(column, f"{where}: column")
        if "test_fraction" in raw:
            raise SchemaError(f"{where}: with a split column the test rows are those it names; drop test_fraction")
        if "test" not in raw:
            raise SchemaError(f"{where}: name the split column's test values, e.g. test: [test]")
    if "validation" in raw and "validation_fraction" in raw:
        raise SchemaError(f"{where}: the validation rows are those `validation` names; drop validation_fraction")
    if not 0 <= validation_fraction < 1:
        raise SchemaError(f"{where}: validation_fraction={validation_fraction:g} must be in [0, 1)")
    test = tuple(_value(v, f"{where}: test") for v in _list(raw.get("test", []), f"{where}: test"))
    validation = tuple(_value(v, f"{where}: validation") for v in _list(raw.get("validation", []), f"{where}: validation"))
    if set(test) & set(validation):
        raise SchemaError(f"{where}: a value cannot name both test and validation rows: {sorted(map(str, set(test) & set(validation)))}")
    return Split(test_fraction, validation_fraction, column, test, validation)
