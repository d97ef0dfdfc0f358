"""Rényi DP of the suite's per-step mechanisms, computed from the same base privacy loss the PLD accountant uses.

dp-accounting's RDP accountant has the events that accounted hyperparameter tuning needs (repeat and
select, Papernot & Steinke 2022) but cannot represent RaCO-DP's step: one Poisson batch feeding a
Gaussian and a Laplace release (docs/privacy.md, "Accounted tuning"). This module computes that
step's RDP curve ε(α) itself.

The base pair (P₀, P₁) of one step, both releases normalised to sensitivity 1, has privacy loss
S = S_G + S_L (:class:`raco_bench.privacy.joint_pld.GaussianLaplaceLoss`): S_G ~ N(−v/2, v) under
P₀ with v = Σ σ_i⁻², and S_L the Laplace loss. Poisson subsampling at rate q gives μ = (1−q)P₀ + qP₁,
and add/remove adjacency needs both directions:

* remove, D_α(μ‖P₀) = 1/(α−1) · log E_{P₀}[(1 − q + q e^S)^α]. For integer α the binomial expansion is
  exact: Σ_j C(α, j)(1−q)^{α−j} q^j E_{P₀}[e^{jS}], and E_{P₀}[e^{jS}] factorises into the Gaussian moment
  e^{v j(j−1)/2} and the Laplace moment (j/(2j−1)) e^{(j−1)/s} + ((j−1)/(2j−1)) e^{−j/s}, s the scale.
* add, D_α(P₀‖μ) = 1/(α−1) · log E_{P₀}[(1 − q + q e^S)^{1−α}]: a bounded integrand, integrated numerically
  (Gauss–Hermite over S_G, the two Laplace atoms and Gauss–Legendre over its density).

The step's RDP is the larger of the two. Fractional orders use the next integer order (Rényi
divergence does not decrease with the order), so every value is an upper bound. An independent
histogram batch composes the two subsampled mechanisms; a whole run adds its private selection's
Laplace releases (:meth:`RdpCurve.of_run`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.special import gammaln, logsumexp

from raco_bench.privacy.accounting import StepMechanism

ORDERS = tuple([1.25, 1.5, 1.75] + list(range(2, 33)) + [40, 48, 56, 64, 80, 96, 128, 192, 256])
HERMITE_NODES, LEGENDRE_NODES = 160, 48


def laplace_log_moment(scale: float | None, j: np.ndarray) -> np.ndarray:
    """log E_{P₀}[e^{j S_L}] for integer j ≥ 0 (0 without a Laplace release)."""
    j = np.asarray(j, dtype=np.float64)
    if scale is None:
        return np.zeros_like(j)
    with np.errstate(divide="ignore"):
        a = np.log(j / (2 * j - 1)) + (j - 1) / scale
        b = np.log((j - 1) / (2 * j - 1)) - j / scale
    out = np.logaddexp(a, b)
    return np.where(j == 0, 0.0, np.where(j == 1, 0.0, out))


def remove_rdp(q: float, gauss_var: float, laplace_scale: float | None, alpha: int) -> float:
    """D_α(μ‖P₀) for an integer α ≥ 2, exact (binomial expansion, in logs)."""
    j = np.arange(alpha + 1, dtype=np.float64)
    log_binom = gammaln(alpha + 1) - gammaln(j + 1) - gammaln(alpha - j + 1)
    with np.errstate(divide="ignore"):
        terms = (log_binom + (alpha - j) * math.log1p(-q) if q < 1 else np.where(j == alpha, log_binom, -np.inf)) + j * math.log(q)
    terms = terms + gauss_var * j * (j - 1) / 2 + laplace_log_moment(laplace_scale, j)
    return float(logsumexp(terms)) / (alpha - 1)


@functools.lru_cache(maxsize=None)
def _nodes(kind: str, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss–Hermite (probabilists') or Gauss–Legendre nodes and weights: they depend on the count only, and computing
    them is most of an RDP evaluation's time."""
    x, w = (np.polynomial.hermite_e.hermegauss if kind == "hermite" else np.polynomial.legendre.leggauss)(count)
    x.setflags(write=False), w.setflags(write=False)
    return x, w


def add_rdp(q: float, gauss_var: float, laplace_scale: float | None, alpha: float) -> float:
    """D_α(P₀‖μ) for q < 1 by quadrature of the bounded integrand (1 − q + q e^S)^{1−α} under P₀."""
    x, w = _nodes("hermite", HERMITE_NODES)
    w = w / math.sqrt(2 * math.pi)
    gauss = -gauss_var / 2 + math.sqrt(gauss_var) * x  # S_G under P₀

    def log_f(s: np.ndarray) -> np.ndarray:  # log (1 − q + q e^s)^{1−α}
        return (1 - alpha) * np.logaddexp(math.log1p(-q), math.log(q) + s)

    def log_gauss_mean(u: np.ndarray) -> np.ndarray:  # log E_G[f(G + u)] for each u
        return logsumexp(log_f(gauss[None, :] + np.asarray(u)[:, None]) + np.log(w)[None, :], axis=1)

    if laplace_scale is None:
        return float(log_gauss_mean(np.zeros(1))[0]) / (alpha - 1)
    e0 = 1.0 / laplace_scale
    atoms = np.array([-e0, e0])
    atom_w = np.array([0.5, 0.5 * math.exp(-e0)])
    t, tw = _nodes("legendre", LEGENDRE_NODES)
    u = e0 * t  # the density A e^{−u/2} on (−e0, e0), A = e^{−e0/2} / 4
    dens_w = tw * e0 * math.exp(-e0 / 2) / 4 * np.exp(-u / 2)
    logs = np.concatenate([log_gauss_mean(atoms) + np.log(atom_w), log_gauss_mean(u) + np.log(dens_w)])
    return float(logsumexp(logs)) / (alpha - 1)


@lru_cache(maxsize=256)
def step_rdp(mech: StepMechanism, orders: tuple[float, ...] = ORDERS) -> np.ndarray:
    """ε(α) of one step of ``mech`` at each order (shared batch, or one release): max of both directions."""
    if not mech.private:
        raise ValueError("a step without noise has infinite RDP")
    if mech.laplace_scale is not None and mech.noise_multiplier is not None and mech.histogram_batch != "shared":
        # two independent Poisson batches: two subsampled mechanisms, composed
        return (_subsampled_rdp(mech.sampling_rate, mech.noise_multiplier**-2, None, orders)
                + _subsampled_rdp(mech.hist_rate, 0.0, mech.laplace_scale, orders))
    v = 0.0 if mech.noise_multiplier is None else mech.noise_multiplier**-2
    return _subsampled_rdp(mech.sampling_rate if mech.noise_multiplier is not None else mech.hist_rate, v, mech.laplace_scale, orders)


def _subsampled_rdp(q: float, gauss_var: float, laplace_scale: float | None, orders: tuple[float, ...]) -> np.ndarray:
    out = []
    for alpha in orders:
        remove = remove_rdp(q, gauss_var, laplace_scale, max(2, int(math.ceil(alpha))))
        add = add_rdp(q, gauss_var, laplace_scale, alpha) if q < 1 else remove  # q = 1: both mechanisms are symmetric
        out.append(max(remove, add))
    return np.array(out)


def laplace_rdp(scale: float, orders: tuple[float, ...] = ORDERS) -> np.ndarray:
    """ε(α) of one unsubsampled Laplace release of L1 sensitivity 1 (Mironov 2017, Prop. 6), at integer orders and
    the next integer for fractional ones."""
    return np.array([laplace_log_moment(scale, np.array([max(2, math.ceil(a))]))[0] / (max(2, math.ceil(a)) - 1) for a in orders])


def rdp_to_epsilon(orders: tuple[float, ...], rdp: np.ndarray, delta: float) -> float:
    """The smallest ε over orders of the standard conversion ε = ε(α) + log((α−1)/α) − (log δ + log α)/(α−1)
    (Balle et al. 2020, Prop. 12, as dp-accounting uses it)."""
    best = math.inf
    for a, r in zip(orders, rdp):
        if a <= 1 or not math.isfinite(r):
            continue
        best = min(best, r + math.log1p(-1 / a) - (math.log(delta) + math.log(a)) / (a - 1))
    return max(best, 0.0)


@dataclass(frozen=True)
class RdpCurve:
    """An RDP curve at fixed orders; curves compose by addition."""

    orders: tuple[float, ...]
    values: tuple[float, ...]

    @staticmethod
    def of_steps(mech: StepMechanism, steps: int, orders: tuple[float, ...] = ORDERS) -> "RdpCurve":
        return RdpCurve(orders, tuple(float(x) for x in steps * step_rdp(mech, orders)))

    @staticmethod
    def of_run(mech: StepMechanism, steps: int, selection=None, orders: tuple[float, ...] = ORDERS) -> "RdpCurve":
        """A whole run: ``steps`` steps of ``mech`` and, with a private checkpoint selection, its ``count`` Laplace
        releases of the validation counts (L1 sensitivity 1 under add/remove)."""
        curve = RdpCurve.of_steps(mech, steps, orders)
        if selection is None:
            return curve
        return curve.compose(RdpCurve(orders, tuple(float(x) for x in selection.count * laplace_rdp(selection.laplace_scale, orders))))

    def compose(self, other: "RdpCurve") -> "RdpCurve":
        if self.orders != other.orders:
            raise ValueError("RDP curves at different orders cannot be composed")
        return RdpCurve(self.orders, tuple(a + b for a, b in zip(self.values, other.values)))

    def epsilon(self, delta: float) -> float:
        return rdp_to_epsilon(self.orders, np.array(self.values), delta)
