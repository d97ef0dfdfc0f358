"""Custom rate constraints written as text: a linear combination of rates over (label, group) cells, at most γ
(docs/constraints.md). A schema file declares them by name (its ``constraints`` key) and ``raco-bench train`` and the
sweeps take one with ``--constraint-spec``.

A spec is one or more constraints separated by ``;``, each a sum of weighted rates, optionally followed by ``<= gamma``
(the slack is always the run's γ: ``--gamma``, a sweep's ``--gammas``)::

    FNR(group=a) - FNR(group=b)                     # one-sided: FNR of group a at most γ above group b's
    |FNR(group=a) - FNR(group=b)|                   # two-sided: both differences (two constraints)
    0.5*FPR(group=a) + 0.5*FNR(group=a) - PR()      # any weighted sum
    P(pred=yes | label=no, group=b) <= gamma        # the general rate P̃_k(D_I) of eq. 6

Rates: ``P(pred=K | conditions)``, the share of rows of a subset predicted class K; for binary labels the shorthands
``FNR``, ``FPR``, ``TPR``, ``TNR`` (label fixed: the positive class is the schema's ``positive``) and ``PR`` (the
positive-prediction rate). Conditions: ``group=NAME``, ``group!=NAME``, ``label=NAME``, ``label!=NAME``, separated by
commas (several on one key intersect); no condition: every row. Names are the schema's group and class names (``names``,
else the declared values), written bare or quoted (``label=">50K"``).

Each constraint becomes one of :func:`~raco_bench.constraints.builders.custom`'s (eq. 6): one subset of the partition per
distinct set of cells, with the weights of the rates on it. The partition is the coarsest that holds every subset:
the groups when no rate conditions on the label, the labels when none conditions on the group, else the (label, group)
cells; every row is in one part, so the histogram's sensitivity is 1 (paper §4.1) whatever the spec.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

import numpy as np

from raco_bench.constraints.builders import custom
from raco_bench.constraints.partition import Partition
from raco_bench.constraints.problem import RateProblem

SHORTHANDS = {  # name -> (predicted class, label class): 1 is the positive class, 0 the negative; None: no label condition
    "FNR": (0, 1), "FPR": (1, 0), "TPR": (1, 1), "TNR": (0, 0), "PR": (1, None),
}
KEYS = ("group", "label")


class ConstraintSpecError(ValueError):
    """A custom constraint that cannot be read or that names what the dataset does not have; the message says which and the fix."""


@dataclass(frozen=True)
class Condition:
    key: str  # group | label
    name: str
    equal: bool  # = (True) or != (False)


@dataclass(frozen=True)
class Rate:
    """``weight`` × the rate of predicting ``pred`` (a class name, or a shorthand's 0/1) on the rows that meet ``conditions``."""

    weight: float
    pred: str | int
    conditions: tuple[Condition, ...]
    text: str  # as written, for messages
    shorthand: str = ""


@dataclass(frozen=True)
class Parsed:
    """A spec read (syntax checked), before its names are resolved against a dataset's groups and classes."""

    text: str
    constraints: tuple[tuple[Rate, ...], ...]

    @property
    def label(self) -> str:
        """The spec as an axis label: its text with the spaces collapsed."""
        return " ".join(self.text.split())


WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
NUMBER = re.compile(r"(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
BARE_NAME = re.compile(r"[^,)|]*")  # a group or class name without quotes: up to the next ',', ')' or '|'


class _Reader:
    """A hand-written scanner over one spec, so that every error names the place (the character it is at)."""

    def __init__(self, text: str, where: str) -> None:
        self.text, self.where, self.i = text, where, 0

    def fail(self, message: str) -> ConstraintSpecError:
        shown = self.text if len(self.text) < 120 else self.text[:117] + "..."
        return ConstraintSpecError(f"{self.where}: {message} at character {self.i + 1} of {shown!r} (docs/constraints.md)")

    def skip(self) -> None:
        while self.i < len(self.text) and self.text[self.i].isspace():
            self.i += 1

    def peek(self, *options: str) -> str | None:
        self.skip()
        return next((o for o in options if self.text.startswith(o, self.i)), None)

    def take(self, *options: str) -> str | None:
        found = self.peek(*options)
        if found is not None:
            self.i += len(found)
        return found

    def expect(self, option: str, what: str) -> None:
        if self.take(option) is None:
            raise self.fail(f"expected {option!r} {what}")

    def match(self, pattern: re.Pattern) -> str | None:
        """The text ``pattern`` matches here (after spaces), consumed; None where it does not match."""
        self.skip()
        m = pattern.match(self.text, self.i)
        if m is None:
            return None
        self.i = m.end()
        return m.group()

    def word(self) -> str | None:
        return self.match(WORD)

    def number(self) -> float | None:
        found = self.match(NUMBER)
        return None if found is None else float(found)

    def name(self, what: str) -> str:
        """A group or class name: quoted, or the text up to the next ``,``, ``)`` or ``|``."""
        self.skip()
        if self.i < len(self.text) and self.text[self.i] in "\"'":
            quote = self.text[self.i]
            end = self.text.find(quote, self.i + 1)
            if end < 0:
                raise self.fail(f"the quoted {what} is not closed")
            value, self.i = self.text[self.i + 1:end], end + 1
            return value
        m = BARE_NAME.match(self.text, self.i)
        value = m.group().strip()
        if not value:
            raise self.fail(f"expected a {what} name")
        self.i = m.end()
        return value


MINUS = ("-", "−")


def parse(text: str, where: str = "constraint") -> Parsed:
    """Read a spec (see the module docstring); raises :class:`ConstraintSpecError` naming the place and the fix."""
    if not isinstance(text, str) or not text.strip():
        raise ConstraintSpecError(f"{where}: empty; write a sum of rates such as 'FNR(group=a) - FNR(group=b)' (docs/constraints.md)")
    constraints = []
    for piece in _split(text):
        reader = _Reader(piece, where)
        two_sided = reader.take("|") is not None
        rates = _sum(reader)
        if two_sided:
            reader.expect("|", "to close the absolute value |...|")
        if reader.take("<=", "≤") is not None:
            if reader.word() != "gamma":
                raise reader.fail("the slack is the run's gamma (--gamma, a sweep's --gammas): write '<= gamma' or leave it out")
        reader.skip()
        if reader.i < len(piece):
            raise reader.fail("expected '+', '-', ';' or the end")
        constraints.append(rates)
        if two_sided:
            constraints.append(tuple(Rate(-r.weight, r.pred, r.conditions, r.text, r.shorthand) for r in rates))
    return Parsed(text, tuple(constraints))


def _split(text: str) -> list[str]:
    """The constraints of a spec: its pieces between ``;`` outside quotes."""
    pieces, current, quote = [], "", None
    for ch in text:
        if quote is None and ch in "\"'":
            quote = ch
        elif ch == quote:
            quote = None
        if ch == ";" and quote is None:
            pieces.append(current)
            current = ""
        else:
            current += ch
    pieces.append(current)
    return [p for p in pieces if p.strip()] or [text]


def _sum(reader: _Reader) -> tuple[Rate, ...]:
    rates, sign = [], 1.0
    if reader.take(*MINUS):
        sign = -1.0
    else:
        reader.take("+")
    while True:
        rates.append(_term(reader, sign))
        if reader.take("+"):
            sign = 1.0
        elif reader.take(*MINUS):
            sign = -1.0
        else:
            return tuple(rates)


def _term(reader: _Reader, sign: float) -> Rate:
    start = reader.i
    weight = reader.number()
    if weight is not None:
        reader.take("*")
    name = reader.word()
    if name is None:
        raise reader.fail(f"expected a rate: P(pred=CLASS | ...) or one of {', '.join(SHORTHANDS)}")
    upper = name.upper()
    if upper != "P" and upper not in SHORTHANDS:
        near = difflib.get_close_matches(upper, [*SHORTHANDS, "P"], n=1)
        raise reader.fail(f"unknown rate {name!r}" + (f" (did you mean {near[0]}?)" if near else "")
                          + f"; the rates are P(pred=CLASS | ...), {', '.join(SHORTHANDS)}")
    reader.expect("(", f"after {name}")
    pred: str | int
    if upper == "P":
        if reader.word() != "pred":
            raise reader.fail("P(...) starts with the predicted class: P(pred=CLASS | conditions)")
        reader.expect("=", "after pred")
        pred = reader.name("class")
        conditions = _conditions(reader) if reader.take("|") else ()
    else:
        pred = SHORTHANDS[upper][0]
        conditions = () if reader.peek(")") else _conditions(reader)
        if SHORTHANDS[upper][1] is not None and any(c.key == "label" for c in conditions):
            raise reader.fail(f"{upper} fixes the label (the {'positive' if SHORTHANDS[upper][1] else 'negative'} class); condition it on "
                              "groups only, or write P(pred=CLASS | label=..., group=...)")
    reader.expect(")", "to close the rate")
    text = reader.text[start:reader.i].strip()
    return Rate(sign * (1.0 if weight is None else weight), pred, tuple(conditions), text, upper if upper != "P" else "")


def _conditions(reader: _Reader) -> tuple[Condition, ...]:
    out = []
    while True:
        key = reader.word()
        if key not in KEYS:
            raise reader.fail(f"expected a condition group=NAME or label=NAME (or != NAME), got {key!r}")
        op = reader.take("!=", "≠", "=")
        if op is None:
            raise reader.fail(f"expected '=' or '!=' after {key}")
        out.append(Condition(key, reader.name(key), op == "="))
        if not reader.take(","):
            return tuple(out)


# ------------------------------------------------------------------------------------------ names to a rate problem
def _resolve(name: str, names: tuple[str, ...], what: str, rate: Rate, where: str, plural: str) -> int:
    if name in names:
        return names.index(name)
    lower = {n.lower(): n for n in names}
    near = difflib.get_close_matches(name.lower(), list(lower), n=1)  # a case slip first: 'Female' for 'female'
    hint = f" (did you mean {lower[near[0]]!r}?)" if near else ""
    raise ConstraintSpecError(f"{where}: unknown {what} {name!r} in {rate.text}{hint}; the {plural} of this dataset are "
                              f"{', '.join(repr(n) for n in names)} (its schema's names); write one of them, quoted if it holds ',', ')' or '|'")


def _cells(rate: Rate, group_names: tuple[str, ...], class_names: tuple[str, ...], where: str) -> tuple[frozenset[int], frozenset[int], int]:
    """(labels, groups, predicted class) of one rate."""
    c = len(class_names)
    if rate.shorthand:
        if c != 2:
            raise ConstraintSpecError(f"{where}: {rate.text}: {rate.shorthand} is for a binary label (a positive and a negative class); this "
                                      f"dataset has {c} classes: write P(pred=CLASS | label=CLASS, group=GROUP)")
        pred, label = SHORTHANDS[rate.shorthand]
        labels = frozenset(range(c)) if label is None else frozenset({label})
    else:
        pred = _resolve(str(rate.pred), class_names, "class", rate, where, "classes")
        labels = frozenset(range(c))
    groups = frozenset(range(len(group_names)))
    for cond in rate.conditions:
        names, plural = (group_names, "groups") if cond.key == "group" else (class_names, "classes")
        index = _resolve(cond.name, names, cond.key if cond.key == "group" else "class", rate, where, plural)
        keep = {index} if cond.equal else set(range(len(names))) - {index}
        if cond.key == "group":
            groups = groups & keep
        else:
            labels = labels & keep
    if not labels or not groups:
        raise ConstraintSpecError(f"{where}: {rate.text} selects no (label, group) cell (its conditions exclude each other); "
                                  "drop or change one condition")
    return labels, groups, pred


def compile_spec(parsed: Parsed, group_names: tuple[str, ...], class_names: tuple[str, ...], gamma: float, name: str = "custom",
                 where: str = "constraint") -> RateProblem:
    """The rate problem of a parsed spec on a dataset with these groups and classes, every slack γ (module docstring)."""
    G, c = len(group_names), len(class_names)
    resolved = [[(_cells(r, group_names, class_names, where), r.weight) for r in rates] for rates in parsed.constraints]
    all_labels, all_groups = frozenset(range(c)), frozenset(range(G))
    cells = [cell for rates in resolved for (cell, _) in rates]
    if all(labels == all_labels for labels, _, _ in cells):
        partition = Partition("group", G, c)
    elif all(groups == all_groups for _, groups, _ in cells):
        partition = Partition("label", G, c)
    else:
        partition = Partition("label_group", G, c)

    def parts(labels: frozenset[int], groups: frozenset[int]) -> tuple[int, ...]:
        if partition.kind == "group":
            return tuple(sorted(groups))
        if partition.kind == "label":
            return tuple(sorted(labels))
        return tuple(sorted(partition.part(label=y, group=a) for y in labels for a in groups))

    constraints = []
    for j, rates in enumerate(resolved):
        weights: dict[tuple[int, ...], np.ndarray] = {}
        for (labels, groups, pred), weight in rates:
            row = weights.setdefault(parts(labels, groups), np.zeros(c))
            row[pred] += weight
        weights = {s: w for s, w in weights.items() if np.any(w != 0.0)}
        if not weights:
            raise ConstraintSpecError(f"{where}: constraint {j + 1} of {parsed.label!r} is identically zero (its rates cancel); "
                                      "write rates of different cells or classes")
        constraints.append({"subsets": list(weights), "weights": np.stack(list(weights.values())), "gamma": float(gamma), "name": f"{name}[{j}]"})
    return custom(partition, constraints, name)
