"""Privacy of hyperparameter tuning by random search with a random number of runs (Papernot & Steinke, ICLR 2022).

Run K independent trainings, K drawn from a truncated negative binomial distribution (shape η ≥ 0;
η = 0 is the logarithmic and η = 1 the geometric distribution), and release only the best one by a
score that is itself private. If one training is (λ, ε(λ))-RDP at every order, the release is
(λ, ε′(λ))-RDP with (their Theorem 2)

    ε′(λ) = ε(λ) + (1 + η) · min_λ̂ [ (1 − 1/λ̂) ε(λ̂) + log(1/γ) / λ̂ ] + log E[K] / (λ − 1),

where γ ∈ (0, 1) is the distribution's other parameter, fixed by its mean E[K]. The training's RDP
curve may come from :mod:`raco_bench.privacy.rdp`, which is how RaCO-DP's joint step enters.
"""

from __future__ import annotations

import math

import numpy as np

from raco_bench.privacy.accounting import largest_within
from raco_bench.privacy.rdp import RdpCurve, rdp_to_epsilon


def tnb_mean(shape: float, gamma: float) -> float:
    """E[K] of the truncated negative binomial with parameters (η = ``shape``, γ)."""
    if shape == 0:  # logarithmic: P(K = k) ∝ (1 − γ)^k / k
        return (1 - gamma) / (gamma * math.log(1 / gamma))
    return shape * (1 - gamma) / (gamma * (1 - gamma**shape))


def tnb_gamma(shape: float, mean: float) -> float:
    """The γ whose distribution has mean ``mean`` (E[K] decreases in γ; bisection)."""
    if not mean > 1:
        raise ValueError(f"the mean number of runs must be > 1, got {mean}")
    if shape < 0 or not math.isfinite(shape):
        raise ValueError(f"the shape must be a finite number >= 0 (use Poisson for the limit), got {shape}")
    lo, hi = 1e-12, 1 - 1e-12
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if tnb_mean(shape, mid) > mean else (lo, mid)
    return (lo + hi) / 2


def repeat_and_select(curve: RdpCurve, mean: float, shape: float) -> RdpCurve:
    """ε′(λ) of the best of K ~ TNB(η = ``shape``, mean ``mean``) runs of a mechanism with RDP ``curve`` (Theorem 2),
    then monotone in λ (a lower order may take a higher order's bound)."""
    orders = np.array(curve.orders, dtype=np.float64)
    eps = np.array(curve.values, dtype=np.float64)
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


def release_orders(curve: RdpCurve, mean: float, shape: float, delta: float) -> tuple[int, int, float]:
    """(i, j, ε): the orders λ = orders[i] and λ̂ = orders[j] whose two RDP values alone give the best end-to-end
    (ε, δ) of :func:`repeat_and_select`, and that ε. Theorem 2 needs only these two values: every run whose RDP at
    λ and at λ̂ is at most the curve's is covered by the same ε (:func:`two_order_epsilon`)."""
    orders, eps = np.array(curve.orders, dtype=np.float64), np.array(curve.values, dtype=np.float64)
    gamma = tnb_gamma(shape, mean)
    j = int(np.argmin(_constant_terms(orders, eps, gamma, shape)))
    best = (math.inf, 0)
    for i in range(len(orders)):
        if orders[i] > 1:
            value = two_order_epsilon(curve.orders, i, j, float(eps[i]), float(eps[j]), mean, shape, delta)
            best = min(best, (value, i))
    return best[1], j, best[0]


def two_order_epsilon(orders: tuple[float, ...], i: int, j: int, eps_i: float, eps_j: float, mean: float, shape: float, delta: float) -> float:
    """End-to-end (ε, δ) of the best of K ~ TNB(``shape``, ``mean``) runs, each (λ, ε_i)-RDP at λ = orders[i] and
    (λ̂, ε_j)-RDP at λ̂ = orders[j] (Theorem 2 for that pair), converted at λ or at any lower order (RDP grows with the order)."""
    o = np.array(orders, dtype=np.float64)
    gamma = tnb_gamma(shape, mean)
    released = eps_i + _constant_terms(o[j : j + 1], np.array([eps_j]), gamma, shape)[0] + math.log(mean) / (o[i] - 1)
    lower = o[(o > 1) & (o <= o[i])]
    return rdp_to_epsilon(tuple(lower), np.full(len(lower), released), delta)


def end_to_end_epsilon(mech, steps: int, delta: float, mean: float, shape: float, selection=None) -> float:
    """ε of the model released by accounted random search: K ~ TNB(``shape``, ``mean``) runs of ``steps`` steps of
    ``mech`` (each with its private selection, if any), the best one released."""
    from raco_bench.privacy.rdp import RdpCurve

    return repeat_and_select(RdpCurve.of_run(mech, steps, selection), mean, shape).epsilon(delta)


def tuned_max_steps(mech, target_epsilon: float, delta: float, mean: float, shape: float, selection=None, cap: int = 100_000) -> int:
    """The largest T ≤ ``cap`` whose end-to-end ε (tuning included) is at most ``target_epsilon``; 0 if none is.
    Bisection on the monotone ε(T) (:func:`raco_bench.privacy.accounting.largest_within`)."""
    return largest_within(lambda t: end_to_end_epsilon(mech, t, delta, mean, shape, selection), target_epsilon, cap)
