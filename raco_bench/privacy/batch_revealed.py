"""Exact accounting of Poisson-sampled Gaussian releases whose batch an adversary may know.

Some mechanisms add an unnoised, public term that depends on which rows were sampled (PF-LD's public
gradient, docs/methods/pf-ld.md). The released output then may reveal the batch, and the usual
amplification by subsampling, which needs the batch hidden, does not apply. Sampling still helps:
at a step that did not sample the record that differs between neighbours, the two output
distributions are identical, so that step's privacy loss is 0. At a step that did sample it, the
loss is that of a Gaussian mechanism. With K ~ Binomial(T, q) the number of steps that sample the
record, the composed privacy loss given K = k is a Gaussian one of μ² = k/σ² (plus the unsampled
releases' μ²), and

    δ(ε) = Σ_k P(K = k) · δ_G(ε; μ_k),   δ_G(ε; μ) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2),

exactly: the hockey-stick divergence is linear in the mixture over k, whose weights are the same under
both neighbours. Every μ here is a Gaussian's shift over its noise std, with the shift being the L2
change one neighbour causes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from scipy.special import log_ndtr
from scipy.stats import binom

from raco_bench.privacy.accounting import smallest_noise_within
from raco_bench.privacy.calibration import NOISE, CalibrationCache, CalibrationProblem, Knob


def gaussian_delta(epsilon: float, mu: np.ndarray) -> np.ndarray:
    """δ(ε) of a Gaussian mechanism with shift/std μ (0 where μ = 0), computed in logs for large ε."""
    mu = np.asarray(mu, dtype=np.float64)
    out = np.zeros_like(mu)
    pos = mu > 0
    m = mu[pos]
    a = log_ndtr(-epsilon / m + m / 2)
    b = epsilon + log_ndtr(-epsilon / m - m / 2)
    out[pos] = np.exp(a) * -np.expm1(np.minimum(b - a, 0.0))
    return out


@dataclass(frozen=True)
class RevealedBatchPlan:
    """``steps`` Poisson-sampled (rate ``sampling_rate``) Gaussian releases of noise multiplier ``sigma_sampled`` whose
    batch may be revealed, plus unsampled Gaussian releases adding ``fixed_mu2`` = Σ (shift/std)²."""

    steps: int
    sampling_rate: float
    sigma_sampled: float
    fixed_mu2: float = 0.0

    def delta(self, epsilon: float) -> float:
        k = np.arange(self.steps + 1)
        weights = binom.pmf(k, self.steps, self.sampling_rate)
        keep = weights > 1e-300
        mu = np.sqrt(k[keep] / self.sigma_sampled**2 + self.fixed_mu2)
        return float(np.dot(weights[keep], gaussian_delta(epsilon, mu)))

    def epsilon(self, delta: float) -> float:
        """The smallest ε with δ(ε) ≤ ``delta`` (bisection on the decreasing δ(ε), upper end returned)."""
        if self.delta(0.0) <= delta:
            return 0.0
        lo, hi = 0.0, 1.0
        while self.delta(hi) > delta:
            lo, hi = hi, hi * 2
            if hi > 1e4:
                return math.inf
        while hi - lo > 1e-6 * max(1.0, hi):
            mid = (lo + hi) / 2
            lo, hi = (lo, mid) if self.delta(mid) <= delta else (mid, hi)
        return hi


@dataclass(frozen=True)
class RevealedBatchNoise(CalibrationProblem):
    """The smallest σ such that ``steps`` sampled releases of multiplier σ·√(q·steps/(1−s)), ``unsampled`` releases of
    multiplier σ·√(unsampled/s) (s = ``unsampled_share``) and the fixed releases (``fixed_mu2``) spend ≤ ``target_epsilon``.
    With these multipliers the expected μ² of the sampled and unsampled releases is 1/σ²: σ is the noise of one
    Gaussian with the same mean privacy loss."""

    knob: ClassVar[Knob] = NOISE
    steps: int
    sampling_rate: float
    unsampled: int
    unsampled_share: float
    fixed_mu2: float
    target_epsilon: float
    delta: float

    def multipliers(self, sigma: float) -> tuple[float, float]:
        """(σ of the sampled releases, σ of the unsampled ones; ∞ when there are none)."""
        if self.unsampled == 0:
            return sigma * math.sqrt(self.sampling_rate * self.steps), math.inf
        s = self.unsampled_share
        return sigma * math.sqrt(self.sampling_rate * self.steps / (1 - s)), sigma * math.sqrt(self.unsampled / s)

    def plan(self, sigma: float) -> RevealedBatchPlan:
        sampled, unsampled = self.multipliers(sigma)
        extra = self.unsampled / unsampled**2 if math.isfinite(unsampled) else 0.0
        return RevealedBatchPlan(self.steps, self.sampling_rate, sampled, self.fixed_mu2 + extra)

    def spent(self, sigma: float) -> float:
        return self.plan(sigma).epsilon(self.delta)

    def key(self) -> str:
        from dataclasses import asdict

        return CalibrationCache._versioned({"kind": "revealed_batch_noise", **asdict(self)})

    def solve(self) -> float:
        if self.fixed_mu2 > 0 and RevealedBatchPlan(0, self.sampling_rate, 1.0, self.fixed_mu2).epsilon(self.delta) >= self.target_epsilon:
            raise ValueError(f"the fixed releases alone spend epsilon >= {self.target_epsilon}; raise their noise (count_noise) or epsilon")
        return smallest_noise_within(self.spent, self.target_epsilon, 1e6, "raise epsilon, or lower the sampling rate or the number of steps")

    def within_budget(self, value: float) -> bool:
        return value > 0 and self.spent(value) <= self.target_epsilon
