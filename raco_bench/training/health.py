"""Whether a model is worth reading: the health verdict of a run, of a selected configuration and of a figure point
(docs/results.md, "Health of a result").

A verdict is ``ok`` or the flags of the rules a result breaks, each with a sentence that gives its numbers:

* ``few-steps``: fewer than :data:`MIN_PASSES` expected pass over the training split, T·B/n < 1 (B the expected batch
  size; a method without one takes full-batch steps, one pass each): the model has barely moved from its start;
* ``constant``: test accuracy within :data:`NOISE_Z` standard errors of the best constant predictor's, or below it. The
  constant predictor is the best constant that meets the constraint on the split's labels, as its family declares it
  (:func:`constant_accuracy`; the majority rate for demographic parity and equalized odds), and the
  standard error is a proportion's at that rate on the split's rows, √(c(1 − c)/n);
* ``one-class``: at least :data:`ONE_CLASS_SHARE` of the test predictions are one class: a constraint met this way is
  met by not classifying;
* ``capped``: T reached the cap on steps with less than :data:`CAP_SHARE` of a finite ε spent: the cap, not the budget,
  limited the model (the figures' ring, :mod:`raco_bench.report.marks`).

A rule whose inputs a record lacks (a store written before they were recorded) is not applied, and the verdict says
which were not. Selection may still pick a model with a flag (the papers' rule); every place that shows the model
shows its verdict beside it: the summary of ``raco-bench train`` and of a sweep, the ``health`` tag of its MLflow run,
the ``health`` column of ``runs.csv`` and of the satisfaction table, a mark on the figures and a note in the report.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MIN_PASSES = 1.0  # expected passes over the training split below which a run is too short to have learnt anything
NOISE_Z = 2.0  # standard errors of the test accuracy within which a model is not told apart from the constant predictor
ONE_CLASS_SHARE = 0.99  # share of the test predictions in one class from which a model predicts one class
CAP_SHARE = 0.9  # a capped model spent less than this share of its ε
RULES = ("few-steps", "constant", "one-class", "capped")
OK = "ok"


def constant_accuracy(family, task, labels, gamma: float) -> float:
    """The accuracy a model must beat on a split with these labels: the best constant predictor's that meets the
    constraint (what its family declares, :attr:`raco_bench.constraints.families.Family.constant`), else the majority rate."""
    bar = family.constant_accuracy(task, labels, gamma)
    if bar is not None:
        return bar
    y = np.asarray(labels)
    return float(np.bincount(y.astype(int)).max() / len(y)) if len(y) else math.nan


def passes(steps: float, batch_size: float | None, n_train: float) -> float:
    """Expected passes over the training split: T·B/n, or T for full-batch steps (no expected batch size)."""
    if batch_size is None or not (batch_size == batch_size):
        return float(steps)
    return float(steps) * float(batch_size) / float(n_train)


def capped(steps, spent, epsilon, cap) -> np.ndarray:
    """Element-wise: T reached the cap and less than CAP_SHARE of a finite ε was spent (NaN anywhere: not capped)."""
    t, used, eps, limit = (np.asarray(v, dtype=float) for v in (steps, spent, epsilon, cap))
    with np.errstate(invalid="ignore"):
        return (t >= limit) & np.isfinite(eps) & (used < CAP_SHARE * eps)


@dataclass(frozen=True)
class Evidence:
    """What a verdict is computed from; NaN where a record lacks it (then its rule is not applied). For a selected
    configuration, the means over its phase-2 seeds."""

    steps: float = math.nan
    passes: float = math.nan
    accuracy: float = math.nan  # test accuracy
    constant_accuracy: float = math.nan  # the best constant predictor's on the test split
    rows: float = math.nan  # test rows
    top_class_share: float = math.nan  # share of the test predictions in the most predicted class
    epsilon: float = math.inf  # the budget (inf: non-private)
    epsilon_spent: float = math.nan
    max_steps: float = math.nan

    @staticmethod
    def of(record) -> "Evidence":
        """From a record with the columns of a results row (``test_accuracy``, ``test_constant_accuracy``, ``test_rows``,
        ``test_top_class_share``, ``steps``, ``passes``, ``epsilon``, ``epsilon_spent``, ``max_steps``); a missing one is NaN."""
        def get(key: str) -> float:
            try:
                value = float(record.get(key))
            except (TypeError, ValueError):  # absent (None) or not a number
                return math.nan
            return value

        eps = get("epsilon")
        return Evidence(steps=get("steps"), passes=get("passes"), accuracy=get("test_accuracy"), constant_accuracy=get("test_constant_accuracy"),
                        rows=get("test_rows"), top_class_share=get("test_top_class_share"), epsilon=math.inf if math.isnan(eps) else eps,
                        epsilon_spent=get("epsilon_spent"), max_steps=get("max_steps"))


@dataclass(frozen=True)
class Health:
    """A verdict: the flags of the rules broken (none: ``ok``), a sentence per flag, the rules not applied."""

    flags: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()
    unchecked: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.flags

    @property
    def label(self) -> str:
        """``ok`` or the flags, e.g. ``constant+one-class`` (a column, a tag)."""
        return "+".join(self.flags) or OK

    @property
    def text(self) -> str:
        """The verdict in words, with its numbers."""
        text = "; ".join(self.reasons) if self.flags else "ok: none of the degenerate-result rules applies"
        if self.unchecked:
            text += f" (not checked, not recorded: {', '.join(self.unchecked)})"
        return text


def judge(e: Evidence) -> Health:
    """The verdict on ``e`` (the rules of the module docstring)."""
    flags, reasons, unchecked = [], [], []
    if math.isfinite(e.passes):
        if e.passes < MIN_PASSES:
            flags.append("few-steps")
            reasons.append(f"few steps: T = {e.steps:.0f} is {e.passes:.2g} expected passes over the training split (the rule: at least "
                           f"{MIN_PASSES:g})")
    else:
        unchecked.append("few-steps")
    if math.isfinite(e.accuracy) and math.isfinite(e.constant_accuracy) and e.rows > 0:
        c = e.constant_accuracy
        noise = NOISE_Z * math.sqrt(max(c * (1.0 - c), 0.0) / e.rows)
        if e.accuracy <= c + noise:
            flags.append("constant")
            where = "below" if e.accuracy < c - noise else "within noise of"
            reasons.append(f"constant: test accuracy {e.accuracy:.4f} is {where} the constant predictor's {c:.4f} "
                           f"(± {noise:.4f}, {NOISE_Z:g} standard errors on {e.rows:.0f} test rows)")
    else:
        unchecked.append("constant")
    if math.isfinite(e.top_class_share):
        if e.top_class_share >= ONE_CLASS_SHARE:
            flags.append("one-class")
            reasons.append(f"one class: {100 * e.top_class_share:.1f} % of the test predictions are one class")
    else:
        unchecked.append("one-class")
    if bool(capped(e.steps, e.epsilon_spent, e.epsilon, e.max_steps)):
        flags.append("capped")
        reasons.append(f"capped: T reached the cap {e.max_steps:.0f} with ε = {e.epsilon_spent:.2g} of {e.epsilon:g} spent")
    return Health(tuple(flags), tuple(reasons), tuple(unchecked))
