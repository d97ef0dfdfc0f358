"""The papers' search: Optuna's TPE sampler, asked in rounds, told what the packs recorded (docs/sweeps.md, "Search").

The reference code tunes with Optuna (hydra-optuna-sweeper, "200 optimization runs"). Here each (method, ε, γ) cell
has its own TPE study (multivariate, grouped for the conditional parameters of :class:`ZeroOr`, seeded from
``--sample-seed`` and the cell). Phase 1 runs in rounds: every cell asks ``search_batch`` configurations, the round's
configurations × seeds train as packs (Ray Tune trials, as in random search), and the next round asks again.

The driver is our own ask/tell loop, not Ray Tune's ``OptunaSearch``: a Tune trial here is a pack of hundreds of
configurations, not one configuration, and a sweep's state is what MLflow holds. So a cell's study lives only in
memory and is rebuilt at every round from the recorded results of the earlier rounds (``add_trial``, which does not
touch the sampler), then asked with a freshly seeded sampler: an uninterrupted sweep and a resumed one propose
exactly the same configurations, given the same recorded results.

What a configuration tells its study:

* a method trained with γ (``gamma_is_input``): its mean validation accuracy over seeds, maximised, with one
  constraint ``mean validation constraint − γ`` (feasible at ≤ 0), the selection rule of :func:`raco_bench.sweeps.plan.select`;
* a γ-free method (trained once for every γ, e.g. DP-FERMI): two objectives, mean validation accuracy (max) and mean
  validation constraint (min), because its configurations serve every γ: TPE then searches the whole frontier;
* a configuration with a failed seed (:func:`raco_bench.sweeps.plan.failed_seed`) is told infeasible (constraint
  value 1, the largest a rate difference takes), or FAIL when no seed has finite metrics.

Configuration 0 (the method's defaults) trains in the first round, as in random search, and is not told: its
hyperparameters are not all in the search space. Floats are rounded to 2 significant digits before training, as random
search rounds them, and TPE is told the rounded values.
"""

from __future__ import annotations

import hashlib
import math
import warnings
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from raco_bench.methods.space import ZeroOr, round2

FAILED_CONSTRAINT = 1.0  # what a configuration with a failed seed tells its study as constraint value


@dataclass(frozen=True)
class Outcome:
    """A trained configuration as its study hears it: its parameters and the means over its seeds."""

    params: dict[str, Any]
    accuracy: float  # mean validation accuracy (NaN: every seed diverged)
    constraint: float  # mean validation constraint value
    failed: bool  # a seed failed (diverged, or fell below the constant predictor's accuracy)


def _zero_key(name: str) -> str:
    return f"{name}:zero"


def _distribution(domain: Any):
    """The Optuna distribution of a Ray Tune domain (uniform, log-uniform, choice, randint, lograndint)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
    from ray.tune.search.sample import Categorical, Float, Integer

    if isinstance(domain, Categorical):
        return CategoricalDistribution(list(domain.categories))
    sampler = type(domain.get_sampler()).__name__
    log = sampler == "_LogUniform"
    if isinstance(domain, Float) and sampler in ("_Uniform", "_LogUniform"):
        return FloatDistribution(float(domain.lower), float(domain.upper), log=log)
    if isinstance(domain, Integer) and sampler in ("_Uniform", "_LogUniform"):
        return IntDistribution(int(domain.lower), int(domain.upper) - 1, log=log)  # Tune's upper bound is exclusive
    raise ValueError(f"the TPE search cannot translate the domain {domain!r} (uniform, loguniform, choice, randint, lograndint are "
                     "supported); use --search random for this method or declare its space with those")


def distributions(space: dict[str, Any]) -> dict[str, Any]:
    """Every Optuna parameter of a method's search space: one per domain, two per :class:`ZeroOr` (``name:zero`` and the
    value when not zero); constants are not searched."""
    from optuna.distributions import CategoricalDistribution

    out = {}
    for name in sorted(space):
        domain = space[name]
        if isinstance(domain, ZeroOr):
            out[_zero_key(name)] = CategoricalDistribution([False, True])
            out[name] = _distribution(domain.domain)
        elif hasattr(domain, "sample"):
            out[name] = _distribution(domain)
    return out


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        value = value.item()
    return round2(value) if isinstance(value, float) else value


def _ask(trial, name: str, dist) -> Any:
    from optuna.distributions import CategoricalDistribution, FloatDistribution

    if isinstance(dist, CategoricalDistribution):
        return trial.suggest_categorical(name, list(dist.choices))
    if isinstance(dist, FloatDistribution):
        return trial.suggest_float(name, dist.low, dist.high, log=dist.log)
    return trial.suggest_int(name, dist.low, dist.high, log=dist.log)


def suggest(trial, space: dict[str, Any], dists: dict[str, Any] | None = None) -> dict[str, Any]:
    """One configuration from an asked Optuna trial, with the keys and rounding of random search (``dists``: the space's
    :func:`distributions`, when the caller holds them)."""
    dists = dists if dists is not None else distributions(space)
    params = {}
    for name in sorted(space):
        domain = space[name]
        if isinstance(domain, ZeroOr):
            zero = _ask(trial, _zero_key(name), dists[_zero_key(name)])
            params[name] = 0.0 if zero else _plain(_ask(trial, name, dists[name]))
        elif hasattr(domain, "sample"):
            params[name] = _plain(_ask(trial, name, dists[name]))
        else:
            params[name] = domain
    return params


def told_params(params: dict[str, Any], space: dict[str, Any], dists: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """A recorded configuration as Optuna parameters and their distributions (values outside a distribution, e.g. a
    bound rounded past, are clipped into it)."""
    dists = dists if dists is not None else distributions(space)
    values, used = {}, {}
    for name, dist in dists.items():
        if name.endswith(":zero"):
            base = name[: -len(":zero")]
            values[name], used[name] = float(params.get(base, 0.0)) == 0.0, dist
            continue
        if name not in params or (isinstance(space[name], ZeroOr) and float(params[name]) == 0.0):
            continue
        value = params[name]
        if hasattr(dist, "low"):
            value = min(max(value, dist.low), dist.high)
        elif value not in dist.choices:
            continue
        values[name], used[name] = value, dist
    return values, used


def cell_seed(sample_seed: int, method: str, epsilon: float | None, gamma: float | None) -> int:
    text = f"{sample_seed}|{method}|{epsilon}|{gamma}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")


@dataclass(frozen=True)
class CellSearch:
    """One (method, ε, γ) cell's TPE study; ``gamma`` None: a γ-free method, searched on two objectives."""

    space: dict[str, Any]
    gamma: float | None
    seed: int

    @cached_property
    def dists(self) -> dict[str, Any]:
        """The space's Optuna distributions, translated once per cell."""
        return distributions(self.space)

    def study(self, outcomes: list[Outcome]):
        """A fresh study holding ``outcomes`` (in order), with a sampler seeded for this cell."""
        import optuna
        from optuna.trial import TrialState, create_trial

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = optuna.samplers.TPESampler(seed=self.seed, multivariate=True, group=True, constant_liar=True)
        directions = ["maximize"] if self.gamma is not None else ["maximize", "minimize"]
        study = optuna.create_study(directions=directions, sampler=sampler)
        for o in outcomes:
            values, dists = told_params(o.params, self.space, self.dists)
            if not math.isfinite(o.accuracy) or not math.isfinite(o.constraint):
                study.add_trial(create_trial(state=TrialState.FAIL, params=values, distributions=dists))
                continue
            constraint = max(FAILED_CONSTRAINT, o.constraint) if o.failed else o.constraint
            if self.gamma is None:
                study.add_trial(create_trial(values=[o.accuracy, constraint], params=values, distributions=dists))
            else:
                study.add_trial(create_trial(value=o.accuracy, params=values, distributions=dists, constraints={"gamma": constraint - self.gamma}))
        return study

    def propose(self, outcomes: list[Outcome], n: int) -> list[dict[str, Any]]:
        """``n`` new configurations, asked after telling ``outcomes``; deterministic given them and the seed."""
        import optuna

        study = self.study(outcomes)
        out = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            for _ in range(n):
                out.append(suggest(study.ask(), self.space, self.dists))  # asked trials stay RUNNING: the constant liar spreads the batch
        return out
