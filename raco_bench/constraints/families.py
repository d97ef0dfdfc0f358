"""Constraint families: the one registry (docs/architecture.md, "Adding a constraint"; docs/constraints.md).

A family is one :class:`Family` entry of :data:`FAMILIES`, which declares everything the suite needs of it:

* ``build``: its rate problem on a task (the dataset's groups and classes) at slack γ (:mod:`raco_bench.constraints.builders`);
* ``gap``: its test-time metric, the one a report draws (a key of :data:`raco_bench.constraints.gaps.GAPS`, or
  :data:`~raco_bench.constraints.gaps.CONSTRAINT_VALUE` when the constraint value is its own test-time value), and
  ``axis``, that metric's axis label; ``gap_is_constraint`` when the gap is the constraint value itself (the FNR bound:
  its figure is accuracy against it, with the γ lines);
* ``constant``: what the best constant predictor that meets it scores (the health verdict's bar and phase 1's failure bar,
  :mod:`raco_bench.training.health`): :func:`best_constant_accuracy` works for any rate problem;
* ``value_range``: what its constraint value, the largest over its constraints, can be (a report clips its intervals
  to it: :mod:`raco_bench.report.ranges`): [0, 1] for demographic parity and equalized odds (each constraint is a
  difference of two rates, and its classes' differences sum to 0, so the largest is at least 0; a side with no rows has
  rates 0, and the other side's differences are then all at least 0) and for the FNR bound
  (a rate); a custom family declares none (a weighted sum of rates can be negative or above 1);
* ``notion``: the capability the methods read to say whether they support it (``Method.supports``). A method that
  trains under any rate problem (RaCO-DP, SGDA: the Lagrangian of eq. 10 takes any eq. 6 constraint; DP post-processing's
  LP; the unconstrained methods) supports every family; a method written for one fairness notion (DP-FERMI's ERMI
  regulariser, PF-LD's group-versus-population equalities) supports a family whose ``notion`` is one it implements.
  The family declares what it *is*, not which methods exist (core code names no method: tests/test_structure.py), so a
  new method or a new family is one entry in one place.

A custom family comes from a text spec (:mod:`raco_bench.constraints.spec`) that a schema file declares by name or the
command line gives (``--constraint-spec``): a linear combination of rates, with ``notion`` None (the general methods
train it) and its own value as its gap. :func:`family` is the one way from a run's ``constraint`` and
``constraint_spec`` to its family.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from raco_bench.constraints import builders
from raco_bench.constraints.gaps import CONSTRAINT_VALUE
from raco_bench.constraints.problem import RateProblem
from raco_bench.constraints.spec import ConstraintSpecError, compile_spec, parse

NOTIONS = ("demographic-parity", "equalized-odds")  # the fairness notions a notion-specific method can implement
CUSTOM = "custom"  # the name of a spec given without one (--constraint-spec alone)


@dataclass(frozen=True)
class Task:
    """What a constraint is built on: the dataset's groups and classes by name (public: its schema declares them)."""

    group_names: tuple[str, ...]
    class_names: tuple[str, ...]

    @property
    def n_groups(self) -> int:
        return len(self.group_names)

    @property
    def n_classes(self) -> int:
        return len(self.class_names)

    @staticmethod
    def sized(n_groups: int, n_classes: int) -> "Task":
        """A task known only by its sizes (names "0", "1", ...)."""
        return Task(tuple(str(g) for g in range(n_groups)), tuple(str(k) for k in range(n_classes)))

    @staticmethod
    def of(dataset) -> "Task":
        """The task of a loaded dataset (``group_names``, ``class_names``)."""
        return Task(tuple(dataset.group_names), tuple(dataset.class_names))

    @staticmethod
    def of_schema(schema) -> "Task":
        """The task a dataset's schema declares (:class:`raco_bench.data.schema_file.DatasetSchema`), before any row is read:
        the same names as the loaded dataset's."""
        return Task(tuple(schema.group_names), tuple(schema.label.classes.names))


def best_constant_accuracy(problem: RateProblem, shares: Sequence[float]) -> float | None:
    """The best accuracy of a constant, possibly randomised, predictor that meets every constraint of ``problem`` on a split
    whose class shares are ``shares``; None when none meets them.

    A constant predictor predicts class k with probability π_k whatever the row, so its rate of class k is π_k on every
    subset and each constraint value Γ_j = Σ_I Σ_k w_j[I, k] π_k is linear in π (eq. 6); its accuracy is Σ_k π_k r_k.
    With two classes, π = (1 − p, p) and the feasible p form an interval: the best is at one of its ends (demographic
    parity and equalized odds: every Γ_j is 0, so the majority rate; FNR ≤ γ: p ≥ 1 − γ, so max(γ·r₀ + (1 − γ)·r₁, r₁)).
    With more classes it is a linear program over the simplex."""
    shares = np.asarray(shares, dtype=float)
    if len(shares) != problem.partition.n_classes or not np.all(np.isfinite(shares)):
        return None
    A = problem.weight_tensor().sum(1)  # J × c: Γ_j(π) = A_j · π
    gamma = problem.gamma
    if len(shares) == 2:
        lo, hi = 0.0, 1.0
        for a, g in zip(A, gamma):
            slope, base = a[1] - a[0], a[0]  # Γ_j = base + slope · p ≤ γ_j
            if abs(slope) <= 1e-15:
                if base > g + 1e-12:
                    return None
            elif slope > 0:
                hi = min(hi, (g - base) / slope)
            else:
                lo = max(lo, (g - base) / slope)
        if lo > hi + 1e-12:
            return None
        return float(max(shares[1] * p + shares[0] * (1 - p) for p in (min(max(lo, 0.0), 1.0), min(max(hi, 0.0), 1.0))))
    from scipy.optimize import linprog

    c = len(shares)
    found = linprog(-shares, A_ub=A, b_ub=gamma, A_eq=np.ones((1, c)), b_eq=[1.0], bounds=[(0.0, 1.0)] * c, method="highs")
    return float(-found.fun) if found.status == 0 else None


@dataclass(frozen=True)
class Family:
    """A constraint family: every part the suite needs of it (the module docstring)."""

    name: str
    build: Callable[[Task, float], RateProblem]
    gap: str  # a key of GAPS, or CONSTRAINT_VALUE
    axis: str  # the gap's axis label on a figure
    constant: Callable[[RateProblem, Sequence[float]], float | None]
    notion: str | None  # one of NOTIONS, or None: a general rate constraint
    gap_is_constraint: bool = False  # the gap is the constraint value (its figure: accuracy against it, with the γ lines)
    summary: str = ""  # one line for the command line's help and the docs
    spec: str | None = None  # a custom family's text (raco_bench.constraints.spec)
    value_range: tuple[float, float] | None = None  # what its constraint value (the largest over its constraints) can be; None: not declared

    def problem(self, task: Task, gamma: float) -> RateProblem:
        """Its rate problem on ``task`` at slack γ."""
        return self.build(task, gamma)

    def constant_accuracy(self, task: Task, labels, gamma: float) -> float | None:
        """What the best constant predictor that meets it scores on a split with these labels (None: none meets it)."""
        y = np.asarray(labels, dtype=np.int64)
        shares = np.bincount(y, minlength=task.n_classes)[: task.n_classes] / len(y) if len(y) else np.full(task.n_classes, math.nan)
        return self.constant(self.problem(task, gamma), shares)

    @property
    def gap_column(self) -> str:
        """The results column of its test-time gap (``test_<gap>``)."""
        return f"test_{self.gap}"


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("demographic-parity", lambda task, gamma: builders.demographic_parity(task.n_groups, task.n_classes, gamma),
           gap="dp_gap", axis="test demographic-parity gap (between groups)", constant=best_constant_accuracy, notion="demographic-parity",
           value_range=(0.0, 1.0),
           summary="P(ŷ=k | a) − P(ŷ=k | not a) ≤ γ for every class k and group a (eqs. 7, 13)"),
    Family("equalized-odds", lambda task, gamma: builders.equalized_odds(task.n_groups, task.n_classes, gamma),
           gap="eo_gap", axis="test equalized-odds gap (between groups)", constant=best_constant_accuracy, notion="equalized-odds",
           value_range=(0.0, 1.0),
           summary="P(ŷ=k | y, a) − P(ŷ=k | y, not a) ≤ γ for every class k, label y and group a (eqs. 14-16)"),
    # The experiments bound the FNR of the positive class (binary) / of every class (multiclass).
    Family("false-negative-rate", lambda task, gamma: builders.false_negative_rate(
               task.n_classes, gamma, classes=[1] if task.n_classes == 2 else None, n_groups=task.n_groups),
           gap="fnr", axis="test false-negative rate", constant=best_constant_accuracy, notion=None, gap_is_constraint=True,
           value_range=(0.0, 1.0),
           summary="1 − P(ŷ=k | y=k) ≤ γ for the positive class (binary) or every class (eq. 17)"),
)}


def names() -> tuple[str, ...]:
    """The registered families' names (read at call time: a test may register one)."""
    return tuple(FAMILIES)


def custom_family(name: str, text: str) -> Family:
    """The family of a custom spec (:mod:`raco_bench.constraints.spec`), named ``name``; its syntax is checked here, its names
    when it is built on a task (:func:`check_names`)."""
    if name in FAMILIES:
        raise ConstraintSpecError(f"constraint {name!r}: a custom constraint cannot take the name of the registered family {name!r}; "
                                  "name it otherwise (--constraint NAME beside --constraint-spec, or another key in the schema)")
    parsed = parse(text, f"constraint {name!r}")
    return Family(name, lambda task, gamma: compile_spec(parsed, task.group_names, task.class_names, gamma, name, f"constraint {name!r}"),
                  gap=CONSTRAINT_VALUE, axis=f"test {parsed.label}", constant=best_constant_accuracy, notion=None, summary=parsed.label,
                  spec=text)


def family(name: str, spec: str | None = None) -> Family:
    """The family of a run's ``constraint`` and ``constraint_spec``: the custom family of ``spec`` when there is one, else
    the registered family ``name``."""
    if spec is not None:
        return custom_family(name, spec)
    try:
        return FAMILIES[name]
    except KeyError:
        raise ConstraintSpecError(f"unknown constraint {name!r}; choose one of: {', '.join(FAMILIES)}, a constraint your schema declares "
                                  "(its `constraints` key), or write one with --constraint-spec (docs/constraints.md)") from None


def declared(name: str | None, spec: str | None, schema_constraints: dict[str, str] | None = None) -> tuple[str, str | None]:
    """The (constraint, constraint_spec) a run records for ``--constraint name`` and ``--constraint-spec spec`` on a dataset
    whose schema declares ``schema_constraints`` (name → spec): a registered family, a schema's constraint (its text
    recorded with it, so a run never needs its schema to know it), or a spec given on the command line (named ``name``,
    by default :data:`CUSTOM`). Refuses an unknown name with the choices."""
    declared_here = schema_constraints or {}
    if spec is not None:
        name = name or CUSTOM
        if name in declared_here and " ".join(declared_here[name].split()) != " ".join(spec.split()):
            raise ConstraintSpecError(f"constraint {name!r} is declared by the schema as {declared_here[name]!r}; give --constraint-spec "
                                      "another name (--constraint NAME) or drop it to use the schema's")
        custom_family(name, spec)
        return name, spec
    if name is None:
        raise ConstraintSpecError("name a constraint (--constraint) or write one (--constraint-spec)")
    if name in FAMILIES:
        return name, None
    if name in declared_here:
        custom_family(name, declared_here[name])
        return name, declared_here[name]
    mine = f", or one your schema declares: {', '.join(declared_here)}" if declared_here else ", a constraint your schema declares (its `constraints` key)"
    raise ConstraintSpecError(f"unknown constraint {name!r}; choose one of: {', '.join(FAMILIES)}{mine}, or write one with "
                              "--constraint-spec (docs/constraints.md)")


def met_by_every_constant(problem: RateProblem) -> bool:
    """Whether every constant predictor meets ``problem`` at any γ ≥ 0: each constraint is a difference of rates (its weights on
    each class sum to zero over its subsets, so Γ_j = 0 for a constant predictor), as demographic parity, equalized odds and
    a custom FNR(group=a) − FNR(group=b) are. Such a constraint is met by not classifying; the noise floor decides which γ
    a split can tell from zero (docs/results.md, "Noise floor")."""
    return bool(np.all(np.abs(problem.weight_tensor().sum(1)) <= 1e-12))


def check_names(fam: Family, task: Task) -> None:
    """Build ``fam`` on ``task`` once, so that a group, class or cell its spec names but the dataset lacks is refused now, before
    anything is trained (the message names it and the dataset's names)."""
    fam.problem(task, 0.0)


def build_constraint(name: str, n_groups: int, n_classes: int, gamma: float, spec: str | None = None,
                     task: Task | None = None) -> RateProblem:
    """The rate problem of constraint ``name`` (or of its ``spec``) on a task with these sizes (``task``: its names, which a
    custom spec needs) at slack γ."""
    task = task if task is not None else Task.sized(n_groups, n_classes)
    if (task.n_groups, task.n_classes) != (n_groups, n_classes):
        raise ValueError(f"the task has {task.n_groups} groups and {task.n_classes} classes, not {n_groups} and {n_classes}")
    return family(name, spec).problem(task, gamma)
