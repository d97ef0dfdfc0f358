"""The method plugin interface: one object per method, the same in `raco-bench train`, in a Ray trial
and in the benchmarks.

A method declares its hyperparameters as a frozen dataclass (``Hyper``, with defaults and a
``validate``), plans its privacy before anything runs (``prepare``: number of steps, noise,
accounting), and trains as a pure function of explicit state (``init_state`` and ``step``). The
runner (:mod:`raco_bench.training.loop`) owns evaluation, checkpoint selection and reporting, so
every method is measured the same way.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from raco_bench.constraints.problem import CompiledRates, RateProblem
from raco_bench.data.tabular import TabularDataset
from raco_bench.models import Params
from raco_bench.privacy.calibration import CalibrationCache


@dataclass
class Context:
    """Everything a method may read while planning and training one run."""

    dataset: TabularDataset
    run: Any  # RunConfig
    hyper: Any  # the method's Hyper instance
    problem: RateProblem  # the run's rate constraints (every method is evaluated on them)
    rates: CompiledRates
    device: torch.device
    cache: CalibrationCache
    steps: int = 0
    privacy: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)

    @property
    def n_train(self) -> int:
        return len(self.dataset.train)


class Method(ABC):
    name: ClassVar[str]
    description: ClassVar[str]
    private: ClassVar[bool]
    Hyper: ClassVar[type]

    def hyperparameters(self, overrides: dict[str, Any] | None = None) -> Any:
        """The method's hyperparameters with ``overrides`` (strings are parsed by field type), validated."""
        return parse_dataclass(self.Hyper, overrides or {}, owner=f"method {self.name}")

    @abstractmethod
    def prepare(self, ctx: Context) -> None:
        """Set ``ctx.steps`` and ``ctx.privacy`` (and anything in ``ctx.extra``); raise ValueError on a bad plan."""

    @abstractmethod
    def init_state(self, ctx: Context, generator: torch.Generator) -> Any:
        """The initial state; it must hold the generator and expose ``params``."""

    @abstractmethod
    def step(self, ctx: Context, state: Any) -> Any:
        """One training step; returns the new state."""

    def model(self, ctx: Context):
        return ctx.extra["model"]

    def params(self, state: Any) -> Params:
        return state.params

    def report(self, ctx: Context, state: Any) -> dict:
        """Extra quantities to log at an evaluation (private releases only, or labelled otherwise)."""
        return {}


def parse_value(key: str, raw: Any, annotation: Any) -> Any:
    """Parse ``raw`` (a string from the command line, or a value) to the annotated field type."""
    if not isinstance(raw, str):
        return raw
    text = raw.strip()
    ann = str(annotation)
    if text.lower() in {"none", "null"} and "None" in ann:
        return None
    try:
        if "bool" in ann:
            if text.lower() in {"1", "true", "yes"}:
                return True
            if text.lower() in {"0", "false", "no"}:
                return False
            raise ValueError
        if "int" in ann and "float" not in ann:
            return int(text)
        if "float" in ann:
            return float(text)
        return text
    except ValueError:
        raise ValueError(f"cannot parse {key}={raw!r} as {ann}") from None


def parse_dataclass(cls: type, overrides: dict[str, Any], owner: str) -> Any:
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise ValueError(f"unknown setting(s) {', '.join(unknown)} for {owner}; known settings: {', '.join(sorted(known))}")
    values = {k: parse_value(k, v, known[k].type) for k, v in overrides.items()}
    obj = cls(**values)
    if hasattr(obj, "validate"):
        obj.validate()
    return obj


def check_positive(obj: Any, *names: str, allow_zero: bool = False) -> None:
    import math

    for name in names:
        v = getattr(obj, name)
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and (v >= 0 if allow_zero else v > 0)
        if not ok:
            raise ValueError(f"invalid {name}={v!r}: must be a finite number {'>= 0' if allow_zero else '> 0'}")
