"""The distribution of K, the number of runs of a private random search (docs/privacy.md, "Accounted tuning").

Three families, each through its probability generating function φ(z) = E[z^K], which is what both
tuning theorems read (:mod:`raco_bench.privacy.tuning`, Rényi DP; :mod:`raco_bench.privacy.tuning_profile`,
privacy profiles):

* the **truncated negative binomial** TNB(η, γ) of Papernot & Steinke (ICLR 2022), shape η ≥ 0, K ≥ 1:
  P(K = k) ∝ C(k + η − 1, k)(1 − γ)^k, so φ(z) = ((1 − (1 − γ)z)^{−η} − 1) / (γ^{−η} − 1) for η > 0 and
  φ(z) = log(1 − (1 − γ)z) / log γ for η = 0 (the logarithmic distribution; η = 1 is the geometric);
* the **Poisson** distribution of mean μ, written η = ∞ as dp-accounting does: φ(z) = e^{μ(z − 1)}. K = 0
  has probability e^{−μ}: the search then trains nothing and releases nothing;
* a **fixed** K = n (φ(z) = z^n), for the limits the tests check (n = 1 is one untuned run).

Every family has a φ′ that one monotone map turns into an affine function of z (for the TNB
(φ′/c)^{−1/(η+1)} = 1 − (1 − γ)z, for the Poisson log(φ′/μ) = μ(z − 1), for a fixed n (φ′/n)^{1/(n−1)} = z),
so the set where φ′(az + c) exceeds k·φ′(z) is a half-line in z (:meth:`Rounds.excess_halfline`), which
makes the profile theorem's integral exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

POISSON = math.inf  # the shape η that names the Poisson distribution (dp-accounting's RepeatAndSelectDpEvent convention)


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


@dataclass(frozen=True)
class Rounds:
    """K's distribution: ``kind`` "tnb" (shape η, mean E[K] > 1), "poisson" (mean μ > 0) or "fixed" (K = ``mean``)."""

    kind: str
    mean: float
    shape: float = 1.0  # η of the TNB (ignored otherwise)

    def __post_init__(self) -> None:
        if self.kind == "tnb":
            tnb_gamma(self.shape, self.mean)  # validates the mean and the shape
        elif self.kind == "poisson":
            if not (self.mean > 0 and math.isfinite(self.mean)):
                raise ValueError(f"the Poisson mean must be a finite number > 0, got {self.mean}")
        elif self.kind == "fixed":
            if not (float(self.mean).is_integer() and self.mean >= 1):
                raise ValueError(f"a fixed number of runs must be an integer >= 1, got {self.mean}")
        else:
            raise ValueError(f"unknown distribution of K {self.kind!r}: 'tnb', 'poisson' or 'fixed'")

    @staticmethod
    def of(mean: float, shape: float) -> "Rounds":
        """The sweep's (E[K], η) pair: η = ∞ (:data:`POISSON`) is the Poisson distribution, any finite η ≥ 0 the TNB."""
        return Rounds("poisson", float(mean)) if shape == POISSON else Rounds("tnb", float(mean), float(shape))

    @property
    def gamma(self) -> float:
        return tnb_gamma(self.shape, self.mean)

    def describe(self) -> str:
        if self.kind == "poisson":
            return f"K ~ Poisson(E[K] = {self.mean:g})"
        if self.kind == "fixed":
            return f"K = {self.mean:g}"
        return f"K ~ TNB(eta = {self.shape:g}, E[K] = {self.mean:g})"

    def pgf(self, z):
        """φ(z) = E[z^K] for z ∈ [0, 1] (arrays welcome)."""
        z = np.asarray(z, dtype=np.float64)
        if self.kind == "fixed":
            return z ** int(self.mean)
        if self.kind == "poisson":
            return np.exp(self.mean * (z - 1))
        g, eta = self.gamma, self.shape
        base = 1 - (1 - g) * z
        if eta == 0:
            return np.log(base) / math.log(g)
        return np.expm1(-eta * np.log(base)) / math.expm1(-eta * math.log(g))

    def dpgf(self, z):
        """φ′(z) = E[K z^{K−1}]: increasing on [0, 1], with φ′(1) = E[K]."""
        z = np.asarray(z, dtype=np.float64)
        if self.kind == "fixed":
            n = int(self.mean)
            return n * z ** (n - 1)
        if self.kind == "poisson":
            return self.mean * np.exp(self.mean * (z - 1))
        g, eta = self.gamma, self.shape
        base = 1 - (1 - g) * z
        if eta == 0:
            return (1 - g) / (math.log(1 / g) * base)
        return eta * (1 - g) * base ** (-eta - 1) / math.expm1(-eta * math.log(g))

    def excess_halfline(self, a, c, k):
        """(A, B) with {z ∈ [0, 1] : φ′(a z + c) > k φ′(z)} = {z : A z > B}, for a ≥ 0, a z + c ≤ 1, k ≥ 1 (arrays welcome)."""
        a, c, k = (np.asarray(x, dtype=np.float64) for x in (a, c, k))
        if self.kind == "poisson":  # μ(az + c − 1) > log k + μ(z − 1)
            return self.mean * (a - 1), np.log(k) - self.mean * c
        if self.kind == "fixed":
            n = int(self.mean)
            if n == 1:  # φ′ ≡ 1: never above k ≥ 1
                return np.zeros_like(a), np.zeros_like(a)
            kappa = k ** (1.0 / (n - 1))  # az + c > κ z (z ≥ 0)
            return a - kappa, -c
        rho, kappa = 1 - self.gamma, k ** (1.0 / (self.shape + 1))  # 1 − ρz > κ(1 − ρ(az + c)), both sides > 0
        return rho * (kappa * a - 1), kappa * (1 - rho * c) - 1

    def sample(self, rng: np.random.Generator) -> int:
        """One K: ≥ 1 for the TNB, ≥ 0 for the Poisson (0: the search trains and releases nothing)."""
        if self.kind == "fixed":
            return int(self.mean)
        if self.kind == "poisson":
            return int(rng.poisson(self.mean))
        gamma = self.gamma
        if self.shape == 0:
            return int(rng.logseries(1.0 - gamma))
        while True:  # numpy's negative binomial counts failures before η successes of probability γ; truncate at 0
            k = int(rng.negative_binomial(self.shape, gamma))
            if k >= 1:
                return k
