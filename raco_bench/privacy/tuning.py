"""Privacy of hyperparameter tuning by random search with a random number of runs (Papernot & Steinke, ICLR 2022), in
Rényi DP: the reference figure accounted tuning prints beside the privacy-profile bound it claims
(:mod:`raco_bench.privacy.tuning_profile`; docs/privacy.md, "Accounted tuning").

Run K independent trainings, K drawn from a truncated negative binomial distribution (shape η ≥ 0;
η = 0 is the logarithmic and η = 1 the geometric distribution) or a Poisson distribution
(:mod:`raco_bench.privacy.rounds`), and release only the best one by a score that is itself private.
If one training is (λ, ε(λ))-RDP at every order, the release is (λ, ε′(λ))-RDP with (their Theorem 2)

    ε′(λ) = ε(λ) + (1 + η) · min_λ̂ [ (1 − 1/λ̂) ε(λ̂) + log(1/γ) / λ̂ ] + log E[K] / (λ − 1),

where γ ∈ (0, 1) is the distribution's other parameter, fixed by its mean E[K]; for K ~ Poisson(μ) (their Theorem 6)

    ε′(λ) = ε(λ) + μ δ̂ + log μ / (λ − 1),   with the training (ε̂, δ̂)-DP at ε̂ = log(1 + 1/(λ − 1)),

δ̂ read from the same RDP curve (:func:`rdp_to_delta`). The training's RDP curve may come from
:mod:`raco_bench.privacy.rdp`, which is how RaCO-DP's joint step enters.
"""

from __future__ import annotations

import math

import numpy as np

from raco_bench.privacy.accounting import largest_within
from raco_bench.privacy.rdp import RdpCurve
from raco_bench.privacy.rounds import POISSON, tnb_gamma, tnb_mean

__all__ = ["POISSON", "end_to_end_epsilon", "rdp_to_delta", "repeat_and_select", "tnb_gamma", "tnb_mean", "tuned_max_steps"]


def rdp_to_delta(orders, values, eps: float) -> float:
    """The smallest δ at which a mechanism with RDP curve (``orders``, ``values``) is (ε, δ)-DP: at each order the better of
    δ ≤ exp((α − 1)(ε(α) − ε + log(1 − 1/α)) − log α) (Balle et al. 2020, Prop. 12) and δ ≤ √(1 − e^{−ε(α)}) (through KL)."""
    best = 0.0  # log δ
    for a, r in zip(orders, values):
        if not math.isfinite(r):
            continue
        if r <= 0:
            return 0.0
        log_delta = 0.5 * math.log1p(-math.exp(-r))
        if a > 1.01:
            log_delta = min(log_delta, (a - 1) * (r - eps + math.log1p(-1 / a)) - math.log(a))
        best = min(best, log_delta)
    return min(math.exp(best), 1.0)


def repeat_and_select(curve: RdpCurve, mean: float, shape: float) -> RdpCurve:
    """ε′(λ) of the best of K ~ TNB(η = ``shape``, mean ``mean``) runs of a mechanism with RDP ``curve`` (Theorem 2),
    then monotone in λ (a lower order may take a higher order's bound); ``shape`` = :data:`POISSON`: K ~ Poisson(``mean``)
    (Theorem 6)."""
    orders = np.array(curve.orders, dtype=np.float64)
    eps = np.array(curve.values, dtype=np.float64)
    if shape == POISSON:
        out = np.full_like(eps, np.inf)
        for i, lam in enumerate(orders):
            if lam > 1:
                delta_hat = rdp_to_delta(curve.orders, curve.values, math.log1p(1 / (lam - 1)))
                out[i] = eps[i] + mean * delta_hat + math.log(mean) / (lam - 1)
        return RdpCurve(curve.orders, tuple(float(x) for x in out))
    gamma = tnb_gamma(shape, mean)
    constant = float(np.min(_constant_terms(orders, eps, gamma, shape)))
    out = np.full_like(eps, np.inf)
    above = orders > 1
    out[above] = eps[above] + math.log(mean) / (orders[above] - 1) + constant
    out = np.minimum.accumulate(out[::-1])[::-1]  # RDP does not decrease with the order
    return RdpCurve(curve.orders, tuple(float(x) for x in out))


def _constant_terms(orders: np.ndarray, eps: np.ndarray, gamma: float, shape: float) -> np.ndarray:
    """(1 + η)·[(1 − 1/λ̂) ε(λ̂) + log(1/γ)/λ̂] at every order λ̂ ≥ 1 (inf elsewhere)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(orders >= 1, (1 + shape) * ((1 - 1 / orders) * eps + math.log(1 / gamma) / orders), np.inf)


def end_to_end_epsilon(mech, steps: int, delta: float, mean: float, shape: float, selection=None) -> float:
    """ε of the model released by accounted random search: K ~ TNB(``shape``, ``mean``) runs of ``steps`` steps of
    ``mech`` (each with its private selection, if any), the best one released."""
    return repeat_and_select(RdpCurve.of_run(mech, steps, selection), mean, shape).epsilon(delta)


def tuned_max_steps(mech, target_epsilon: float, delta: float, mean: float, shape: float, selection=None, cap: int = 100_000) -> int:
    """The largest T ≤ ``cap`` whose end-to-end ε (tuning included) is at most ``target_epsilon``; 0 if none is.
    Bisection on the monotone ε(T) (:func:`raco_bench.privacy.accounting.largest_within`)."""
    return largest_within(lambda t: end_to_end_epsilon(mech, t, delta, mean, shape, selection), target_epsilon, cap)
