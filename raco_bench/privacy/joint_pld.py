"""Privacy loss distribution of ONE Poisson sample feeding a Gaussian and a Laplace release.

Algorithm 1 (RaCO-DP) uses the same Poisson batch for the Laplace histogram and the clipped
Gaussian gradient. dp-accounting cannot express PoissonSampled(Gaussian ⊗ Laplace), and composing
two separately subsampled mechanisms understates ε for a shared batch (docs/methods/raco-dp.md, D5). This
module builds that joint PLD.

Construction (add/remove adjacency, both mechanisms normalised to sensitivity 1):

* Base pair P_0 = N(0, σ²) ⊗ Lap(0, s_L), P_1 = N(1, σ²) ⊗ Lap(1, s_L). The base privacy loss
  S = log dP_1/dP_0 = S_G + S_L with S_G ~ N(∓v/2, v), v = 1/σ², and S_L ∈ [−1/s_L, 1/s_L] with
  two atoms and an exponential density in between (docs/methods/raco-dp.md, D5). S's CDF under P_j is the
  convolution of the two, computed here in closed form (no discretisation of S_L):
  ∫ e^{cu} Φ((t−u)/τ) du has an antiderivative in Φ.
* Subsampling: μ = (1−q)P_0 + qP_1. The remove pair (μ, P_0) has loss log(1−q+q e^S); the add pair
  (P_0, μ) has loss −log(1−q+q e^S). Their hockey-stick curves are exact functions of the
  survival functions of S under P_0 and P_1 (using dP_1 = e^S dP_0):

      δ_remove(ε) = q·SF_1(s*) − (e^ε − 1 + q)·SF_0(s*),   s* = log((e^ε − 1 + q)/q)
      δ_add(ε)    = CDF_0(s') − e^ε[(1−q)·CDF_0(s') + q·CDF_1(s')],   s' = log((e^{−ε} − 1 + q)/q)

* Discretisation: dp-accounting's pessimistic connect-the-dots construction
  (``create_pmf_pessimistic_connect_dots_fixed_gap``) from these curves, the same algorithm
  dp-accounting uses for its own Gaussian and Laplace PLDs, so the result is an upper bound that
  is as tight as theirs.

Several Gaussians released from one batch combine into one Gaussian with v = Σ σ_i⁻² (the
"Gaussian ⊗ Gaussian" analogue used to validate the construction).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from scipy.special import log_ndtr, ndtr

if TYPE_CHECKING:  # dp-accounting is imported where a distribution is built (raco_bench/privacy/accounting.py)
    from dp_accounting.pld import pld_pmf
    from dp_accounting.pld.privacy_loss_distribution import PrivacyLossDistribution

TAIL_Z = 8.5  # Gaussian quantile beyond which base-loss mass (< 1e-17) is left to +∞ / −∞


def _log1mexp(x: np.ndarray) -> np.ndarray:
    """log(1 − e^x) for x ≤ 0, stable."""
    x = np.minimum(x, -1e-300)
    with np.errstate(divide="ignore"):
        return np.where(x > -math.log(2.0), np.log(-np.expm1(x)), np.log1p(-np.exp(x)))


def _log_ndtr_diff(alpha: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """log(Φ(β) − Φ(α)) for β ≥ α, stable in both tails."""
    upper = log_ndtr(-alpha) + _log1mexp(log_ndtr(-beta) - log_ndtr(-alpha))  # Q(α) − Q(β)
    lower = log_ndtr(beta) + _log1mexp(log_ndtr(alpha) - log_ndtr(beta))
    return np.where(alpha > 0, upper, lower)


@dataclass(frozen=True)
class GaussianLaplaceLoss:
    """The base privacy loss S = S_G + S_L of the product mechanism (Gaussian variance-sum ``gauss_var``
    = Σ σ_i⁻², Laplace scale ``laplace_scale`` or None for no Laplace)."""

    gauss_var: float
    laplace_scale: float | None

    def __post_init__(self) -> None:
        if not self.gauss_var > 0 or not math.isfinite(self.gauss_var):
            raise ValueError("the joint PLD needs a Gaussian release with a finite, positive noise multiplier")
        if self.laplace_scale is not None and not self.laplace_scale > 0:
            raise ValueError(f"laplace_scale must be positive, got {self.laplace_scale}")

    @property
    def tau(self) -> float:
        return math.sqrt(self.gauss_var)

    def _mean(self, which: int) -> float:
        return (0.5 if which == 1 else -0.5) * self.gauss_var

    def _components(self, which: int):
        """Atoms [(location, weight)], continuous density A·e^{c u} on (−e0, e0), e0 = 1/s_L."""
        e0 = 1.0 / self.laplace_scale
        big, small = 0.5, 0.5 * math.exp(-e0)
        atoms = [(-e0, big), (e0, small)] if which == 0 else [(e0, big), (-e0, small)]
        return atoms, math.exp(-e0 / 2) / 4.0, (-0.5 if which == 0 else 0.5), e0

    def distribution(self, s: np.ndarray, which: int, upper: bool) -> np.ndarray:
        """P_which(S > s) if ``upper`` else P_which(S ≤ s)."""
        s = np.asarray(s, dtype=np.float64)
        tau, t = self.tau, s - self._mean(which)
        # Φ-side: CDF uses Φ((t−u)/τ); SF uses Q((t−u)/τ) = Φ((u−t)/τ).
        sign = -1.0 if upper else 1.0
        if self.laplace_scale is None:
            return ndtr(sign * t / tau)
        atoms, A, c, e0 = self._components(which)
        out = sum(w * ndtr(sign * (t - a) / tau) for a, w in atoms)
        a, b = -e0, e0
        edge = (math.exp(c * b) * ndtr(sign * (t - b) / tau) - math.exp(c * a) * ndtr(sign * (t - a) / tau)) / c
        alpha, beta = (a - t - c * tau**2) / tau, (b - t - c * tau**2) / tau
        gauss = np.exp(c * t + 0.5 * c * c * tau**2 + _log_ndtr_diff(alpha, beta)) / c
        integral = edge + sign * gauss  # J_Q = edge − gauss (survival), J_Φ = edge + gauss (CDF)
        return np.clip(out + A * integral, 0.0, 1.0)

    def support(self) -> tuple[float, float]:
        """Values (s_lo, s_hi) outside which S has negligible mass under P_0 and P_1."""
        e0 = 0.0 if self.laplace_scale is None else 1.0 / self.laplace_scale
        half = 0.5 * self.gauss_var
        return -half - TAIL_Z * self.tau - e0, half + TAIL_Z * self.tau + e0


def hockey_stick_remove(loss: GaussianLaplaceLoss, q: float, eps: np.ndarray) -> np.ndarray:
    """δ(ε) of the remove pair (μ, P_0) for μ = (1−q)P_0 + qP_1."""
    eps = np.asarray(eps, dtype=np.float64)
    gap = np.expm1(eps) + q  # e^ε − 1 + q
    out = -np.expm1(eps)  # 1 − e^ε where ε ≤ log(1−q): every loss exceeds ε
    ok = gap > 0
    s_star = np.log(gap[ok] / q)
    out[ok] = q * loss.distribution(s_star, 1, upper=True) - gap[ok] * loss.distribution(s_star, 0, upper=True)
    return np.clip(out, 0.0, 1.0)


def hockey_stick_add(loss: GaussianLaplaceLoss, q: float, eps: np.ndarray) -> np.ndarray:
    """δ(ε) of the add pair (P_0, μ)."""
    eps = np.asarray(eps, dtype=np.float64)
    gap = np.expm1(-eps) + q  # e^{−ε} − 1 + q
    out = np.zeros_like(eps)
    ok = gap > 0
    s_prime = np.log(gap[ok] / q)
    cdf0 = loss.distribution(s_prime, 0, upper=False)
    cdf1 = loss.distribution(s_prime, 1, upper=False)
    out[ok] = cdf0 - np.exp(eps[ok]) * ((1 - q) * cdf0 + q * cdf1)
    return np.clip(out, 0.0, 1.0)


def _connect_dots(curve, lower: float, upper: float, discretization: float) -> pld_pmf.PLDPmf:
    lo = math.floor(lower / discretization)
    hi = max(math.ceil(upper / discretization), lo + 1)
    eps = np.arange(lo, hi + 1) * discretization
    deltas = np.minimum.accumulate(curve(eps))
    from dp_accounting.pld import pld_pmf

    return pld_pmf.create_pmf_pessimistic_connect_dots_fixed_gap(discretization, lo, hi, deltas)


def shared_batch_pld(
    sampling_rate: float,
    noise_multipliers: tuple[float, ...],
    laplace_scale: float | None,
    discretization: float = 1e-4,
) -> PrivacyLossDistribution:
    """PLD of one step of PoissonSampled(Gaussian(σ_1) ⊗ … ⊗ Laplace(s_L)) on a shared batch."""
    q = float(sampling_rate)
    if not 0 < q <= 1:
        raise ValueError(f"sampling rate must be in (0, 1], got {q}")
    if not noise_multipliers or any(not s > 0 for s in noise_multipliers):
        raise ValueError(f"noise multipliers must be positive, got {noise_multipliers}")
    loss = GaussianLaplaceLoss(sum(s**-2 for s in noise_multipliers), laplace_scale)
    s_lo, s_hi = loss.support()

    def subsampled(s: float) -> float:
        return math.log1p(q * math.expm1(s)) if q < 1 else s

    remove = _connect_dots(lambda e: hockey_stick_remove(loss, q, e), subsampled(s_lo), subsampled(s_hi), discretization)
    add = _connect_dots(lambda e: hockey_stick_add(loss, q, e), -subsampled(s_hi), -subsampled(s_lo), discretization)
    from dp_accounting.pld.privacy_loss_distribution import PrivacyLossDistribution

    return PrivacyLossDistribution(remove, add)
