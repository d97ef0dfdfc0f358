"""Cached calibration: the largest number of steps T for a target (ε, δ).

A calibration costs a dozen PLD compositions (about a second to ten seconds on 2 cores), and sweeps
ask for the same (q, σ, s_L, mode, ε, δ) tuple again and again. Results are kept in memory and in a
JSON file in the per-user cache directory, shared by every process on the machine (Ray trials
included). Writes are atomic (temp file + rename); a lost race only costs a recomputation.
The key holds every input that changes T, plus the dp-accounting version and this module's
algorithm version, so a changed accountant never reuses stale entries.

A cached value is never trusted on its own: before it is returned, its ε is recomputed (one PLD
composition) and checked against the budget. A stale or tampered entry that would overspend is
discarded, recomputed and overwritten, with a warning.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import warnings
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field, replace
from importlib.metadata import version
from pathlib import Path
from typing import ClassVar

from raco_bench.privacy.accounting import (
    DISCRETIZATION,
    GaussianPlan,
    SelectionRelease,
    StepMechanism,
    epsilon,
    largest_within,
    max_steps,
    plan_epsilon,
    plan_min_noise,
    smallest_noise_within,
)

ALGORITHM_VERSION = 3  # 3: noise multipliers are the first point of a fixed grid that fits (accounting.smallest_noise_within)
CACHE_ENV = "RACO_BENCH_CACHE"


def default_cache_path() -> Path:
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser() / "calibration.json"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "raco-bench" / "calibration.json"


@dataclass
class CalibrationCache:
    path: Path | None = field(default_factory=default_cache_path)
    _memory: dict[str, float] = field(default_factory=dict)
    hits: int = 0
    misses: int = 0
    stale: int = 0

    @staticmethod
    def _versioned(payload: dict) -> str:
        payload = {**payload, "discretization": DISCRETIZATION, "dp_accounting": version("dp-accounting"), "algorithm": ALGORITHM_VERSION}
        return json.dumps(payload, sort_keys=True)

    @classmethod
    def key(cls, mech: StepMechanism, target_epsilon: float, delta: float, cap: int, selection: SelectionRelease | None = None) -> str:
        """Cache key of the largest T for ``mech`` at (ε, δ) under ``cap`` (with a private selection, if any)."""
        payload = {"mechanism": asdict(mech), "target_epsilon": float(target_epsilon), "delta": float(delta), "cap": int(cap)}
        if selection is not None:
            payload["selection"] = asdict(selection)
        return cls._versioned(payload)

    def lookup(self, key: str) -> float | None:
        if key not in self._memory:
            stored = self._load().get(key)
            if stored is None:
                return None
            self._memory[key] = stored
        return self._memory[key]

    def put(self, key: str, value: float) -> None:
        self.put_many({key: value})

    def put_many(self, values: dict[str, float]) -> None:
        """Store ``values`` (key → value) in memory and in one write of the file."""
        self._memory.update(values)
        self._store(values)

    def _load(self) -> dict[str, float]:
        if self.path is None or not self.path.is_file():
            return {}
        try:
            return json.loads(self.path.read_text())
        except (OSError, json.JSONDecodeError):
            return {}

    def _store(self, values: dict[str, float]) -> None:
        if self.path is None or not values:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            entries = self._load()
            entries.update(values)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".calibration.")
            with os.fdopen(fd, "w") as fh:
                json.dump(entries, fh)
            os.replace(tmp, self.path)
        except OSError:
            pass  # a read-only cache directory only costs recomputation

    @classmethod
    def plan_key(cls, plan: GaussianPlan, target_epsilon: float, delta: float) -> str:
        """Cache key of the smallest per-block noise multiplier of a :class:`GaussianPlan`."""
        return cls._versioned({"kind": "plan_noise", "plan": asdict(plan), "target_epsilon": float(target_epsilon), "delta": float(delta)})

    def max_steps(self, mech: StepMechanism, target_epsilon: float, delta: float, cap: int = 100_000,
                  selection: SelectionRelease | None = None) -> int:
        """Cached :func:`~raco_bench.privacy.accounting.max_steps`."""
        return int(self.solve(StepsProblem(mech, target_epsilon, delta, cap, selection)))

    def plan_noise(self, plan: GaussianPlan, target_epsilon: float, delta: float) -> float:
        """Cached :func:`~raco_bench.privacy.accounting.plan_min_noise`."""
        return self.solve(NoiseProblem(plan, target_epsilon, delta))

    def solve(self, problem: CalibrationProblem) -> float:
        """``problem``'s value from the cache (re-verified against the budget) or solved and stored."""
        return float(self._get_or_compute(problem.key(), problem.solve, problem.within_budget))

    def _get_or_compute(self, key: str, compute, within_budget):
        """The cached value if it still meets the budget (``within_budget``), else a recomputed one."""
        value = self.lookup(key)
        if value is not None:
            if within_budget(value):
                self.hits += 1
                return value
            warnings.warn(f"discarding a cached calibration that overspends its budget (value {value}); recomputing", stacklevel=3)
            self.stale += 1
        self.misses += 1
        value = _checked(compute(), within_budget)
        self.put(key, value)
        return value


def _checked(value: float, within_budget) -> float:
    """``value`` if it meets the budget; a solver that overspends is a bug, and its value is never stored or returned."""
    if not within_budget(value):
        raise RuntimeError(f"a computed calibration (value {value}) does not meet its own budget: the solver is wrong; nothing was trained")
    return value


def solve_checked(problem: CalibrationProblem) -> float:
    """``problem`` solved and its value checked against the budget, as :meth:`CalibrationCache.solve` checks a computed
    value: what a sweep's parallel calibration tasks run (where the searches evaluate ε through the memoised
    :func:`~raco_bench.privacy.accounting.epsilon`, the check of T re-reads the value the search computed)."""
    return float(_checked(problem.solve(), problem.within_budget))


# ------------------------------------------------------------------ calibration problems (value objects)
@dataclass(frozen=True)
class Knob:
    """What a calibration sets: ``name`` ("steps" or a hyperparameter), whether it is an integer, and whether a larger
    value spends more privacy (T, a budget ρ) or less (a noise multiplier)."""

    name: str
    integer: bool
    increasing: bool

    def most_within(self, ok, cap: float = 1e6) -> float:
        """The value that spends the most among those where ``ok(value)`` holds (``ok`` monotone in the knob): the
        largest T ≤ ``cap`` (0 if none), the smallest noise, the largest budget (to a relative 1e-3, on the safe
        side; ValueError if none up to ``cap``)."""
        if self.integer:
            return float(largest_within(lambda v: 0.0 if ok(v) else 1.0, 0.5, int(cap)))
        failure = f"no {self.name} up to {cap:g} passes"
        if not self.increasing:
            return smallest_noise_within(lambda v: 0.0 if ok(v) else 1.0, 0.5, cap, failure)
        return 1.0 / smallest_noise_within(lambda u: 0.0 if ok(1.0 / u) else 1.0, 0.5, cap, failure)


STEPS = Knob("steps", integer=True, increasing=True)
NOISE = Knob("noise_multiplier", integer=False, increasing=False)


class CalibrationProblem(ABC):
    """A privacy calibration as a value: a cache ``key``, how to ``solve`` it, and how to check a value
    against the budget (``within_budget``). Methods build them (:meth:`Method.calibration`); the trainer
    solves one through the cache (:meth:`CalibrationCache.solve`), the sweep driver solves many in
    parallel Ray tasks. ``knob`` says what the value sets, so that other criteria (accounted tuning's RDP
    reference) can solve for the same knob."""

    knob: ClassVar[Knob]

    @abstractmethod
    def key(self) -> str: ...

    @abstractmethod
    def solve(self) -> float: ...

    @abstractmethod
    def within_budget(self, value: float) -> bool: ...


@dataclass(frozen=True)
class StepsProblem(CalibrationProblem):
    """The largest T whose ε (with the private selection, if any) fits the budget."""

    knob: ClassVar[Knob] = STEPS

    mechanism: StepMechanism
    target_epsilon: float
    delta: float
    cap: int
    selection: SelectionRelease | None = None

    def key(self) -> str:
        return CalibrationCache.key(self.mechanism, self.target_epsilon, self.delta, self.cap, self.selection)

    def solve(self) -> float:
        return float(max_steps(self.mechanism, self.target_epsilon, self.delta, self.cap, self.selection))

    def within_budget(self, value: float) -> bool:
        if value < 0 or value != int(value) or value > self.cap:
            return False
        return value == 0 or epsilon(self.mechanism, int(value), self.delta, self.selection) <= self.target_epsilon


NO_NOISE_SUFFICES = math.inf  # a StepNoiseProblem's value when no Gaussian noise meets the budget (the Laplace part alone spends it)
NOISE_LIMIT = 1e4  # the largest noise multiplier a StepNoiseProblem tries


@dataclass(frozen=True)
class StepNoiseProblem(CalibrationProblem):
    """The smallest Gaussian noise multiplier σ with which ``steps`` steps of ``mechanism`` (its own σ ignored; its
    sampling rate and Laplace scale kept) fit the budget: the step budget searched, σ calibrated (docs/sweeps.md,
    "Step budget"). ``NO_NOISE_SUFFICES`` when even σ = NOISE_LIMIT does not."""

    knob: ClassVar[Knob] = NOISE

    mechanism: StepMechanism
    steps: int
    target_epsilon: float
    delta: float
    selection: SelectionRelease | None = None

    def spent(self, sigma: float) -> float:
        return epsilon(replace(self.mechanism, noise_multiplier=float(sigma)), self.steps, self.delta, self.selection)

    def key(self) -> str:
        payload = {"kind": "step_noise", "mechanism": {**asdict(self.mechanism), "noise_multiplier": None}, "steps": int(self.steps),
                   "target_epsilon": float(self.target_epsilon), "delta": float(self.delta)}
        if self.selection is not None:
            payload["selection"] = asdict(self.selection)
        return CalibrationCache._versioned(payload)

    def solve(self) -> float:
        if not self.spent(NOISE_LIMIT) <= self.target_epsilon:  # one evaluation decides a configuration no σ saves
            return NO_NOISE_SUFFICES
        # σ = NOISE_LIMIT fits, so the grid's first point at or above it does too: the search ends at or below it
        return smallest_noise_within(self.spent, self.target_epsilon, 2 * NOISE_LIMIT, "unreachable: checked at the limit")

    def within_budget(self, value: float) -> bool:
        if value == NO_NOISE_SUFFICES:
            return self.spent(NOISE_LIMIT) > self.target_epsilon
        return value > 0 and self.spent(value) <= self.target_epsilon


@dataclass(frozen=True)
class NoiseProblem(CalibrationProblem):
    """The smallest per-block noise multiplier σ whose :class:`GaussianPlan` fits the budget."""

    knob: ClassVar[Knob] = NOISE

    plan: GaussianPlan
    target_epsilon: float
    delta: float

    def spent(self, sigma: float) -> float:
        return plan_epsilon(self.plan, sigma, self.delta)

    def key(self) -> str:
        return CalibrationCache.plan_key(self.plan, self.target_epsilon, self.delta)

    def solve(self) -> float:
        return float(plan_min_noise(self.plan, self.target_epsilon, self.delta))

    def within_budget(self, value: float) -> bool:
        return value > 0 and self.spent(value) <= self.target_epsilon

