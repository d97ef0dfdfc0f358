"""Sampling configurations from a method's search space (docs/architecture.md, "Search spaces").

A method declares its space in Ray Tune's vocabulary (:meth:`Method.search_space`): ``tune.uniform``,
``tune.loguniform``, ``tune.choice`` and friends, plus :class:`ZeroOr` for a point mass at zero. The
sweep draws configurations itself, from a generator seeded by (sweep seed, method), so a sweep's
configurations are a deterministic list (what makes resuming and idempotent logging simple), then
hands the list to Tune as a grid. Continuous values are rounded to 2 significant digits, so that
privacy calibrations repeat across configurations and sweeps and the cache serves them.
Configuration 0 is always the method's defaults, an anchor every sweep has.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


def round2(x: float) -> float:
    return float(f"{x:.2g}")


@dataclass(frozen=True)
class ZeroOr:
    """0 with probability ``p_zero``, else a draw from ``domain`` (e.g. an unregularised anchor)."""

    domain: Any
    p_zero: float

    def sample(self, random_state: np.random.Generator) -> Any:
        return 0.0 if random_state.uniform() < self.p_zero else self.domain.sample(random_state=random_state)


def sample_value(domain: Any, rng: np.random.Generator) -> Any:
    if not hasattr(domain, "sample"):
        return domain  # a constant
    value = domain.sample(random_state=rng)
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return round2(value)
    return value


def sample_configs(method, n: int, n_train: int, seed: int, step_budget: str = "noise", max_steps: int = 5000) -> list[dict]:
    """``n`` configurations of ``method`` (a :class:`~raco_bench.methods.base.Method`) from its space under the sweep's
    ``step_budget`` (:meth:`~raco_bench.methods.base.Method.sweep_space`); config 0 is its defaults."""
    space = method.sweep_space(n_train, step_budget, max_steps)
    rng = np.random.default_rng(np.random.SeedSequence([seed, sum(map(ord, method.name))]))
    batch = getattr(method.Hyper(), "batch_size", None)  # full-batch methods have none
    default = {"batch_size": min(batch, max(1, n_train // 4))} if batch is not None else {}
    return [default] + [sample_config(space, rng) for _ in range(n - 1)]


def sample_config(space: dict, rng: np.random.Generator) -> dict:
    """One configuration from ``space`` (a method's :meth:`~raco_bench.methods.base.Method.sweep_space`), drawn from ``rng``."""
    return {k: sample_value(space[k], rng) for k in sorted(space)}
