"""The f-DP bound of the one-run audit (Mahloujifar, Melis & Chaudhuri, ICML 2025, "Auditing f-Differential Privacy in
One Run", arXiv 2410.22235; docs/audit.md, "One run").

The audit's game is the one of :mod:`raco_bench.audit.one_run`: m canaries, each in the training data independently with
probability 1/2, one run, and r guesses (abstaining on the other m − r canaries), v of them correct. A hypothesis is a
symmetric trade-off function f (f-DP: no test tells the worlds of one canary apart with type-I error α and type-II
error below f(α)); write f̄(x) = 1 − f(x), increasing and concave.

The bound. Fix canary j and everything but its membership. The test "guess j is 'in' and at least c − 1 other
guesses are correct" is a function of the released model, so f-DP bounds its power by f̄ of its size, in both
directions (a guess "out" likewise). Averaging over j and the other memberships (f̄ is concave) gives, for every
c = 1, …, r,

    E[V·1{V ≥ c}] / m  ≤  f̄( E[(r − V)·1{V ≥ c − 1}] / m ).                                       (F1)

The audit rejects f at level τ when no distribution of V satisfying (F1) has P[V ≥ v] ≥ τ. Their Algorithm 3 decides
this: start from the least mass that P[V ≥ v] = τ puts at or above v, all at v (r_v = τv/m correct, h_v = τ(r − v)/m
wrong guesses, as fractions of m), and walk down the levels i = v − 1, …, 0, adding at each the least mass (F1)
demands,

    h_i = max(h_{i+1}, f̄⁻¹(r_{i+1})),   r_i = r_{i+1} + i/(r − i) · (h_i − h_{i+1});                 (F2)

if the total then exceeds what r guesses can hold, r_0 + h_0 > r/m, the hypothesis is rejected. ε̂ is the largest ε
whose hypothesis is rejected, in one of two families:

* ``dp`` (the audit's ``fdp-dp``, its default beside the SNJ bound): f is the (ε, δ)-DP curve itself,
  f̄⁻¹(y) = max(0, (y − δ)e^{−ε}, 1 − δ − e^ε(1 − y)); its ε̂ holds for every mechanism, as the Steinke–Nasr–Jagielski
  bound does;
* ``gaussian`` (the audit's ``fdp-gaussian``, only when asked for; the paper's and jax-privacy's): f is the trade-off
  curve of the Gaussian mechanism that is exactly (ε, δ)-DP, μ-GDP with μ(ε, δ) solving
  Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) = δ, so f̄⁻¹(y) = Φ(Φ⁻¹(y) − μ). Its ε̂ bounds the ε of a mechanism whose trade-off
  curve is the Gaussian's: a hypothesis, not a lower bound for every (ε, δ)-DP mechanism, and not RaCO-DP's shape (its
  δ(ε′) lies above the matched Gaussian's by up to 1.63× at T = 2,285 and 5.1× at T = 181; on randomised response at ε
  this family's ε̂ exceeded ε in 20 of 20 audits: issue 45's review).

tests/test_one_run_audit.py checks (F2) against jax-privacy's implementation on a saved audit's scores
(tests/fixtures/one_run_fdp_jax.json), that each family's ε̂ exceeds the true ε of simulated mechanisms of that family
at no more than the stated rate, and that planted bugs in the recursion go red.
"""

from __future__ import annotations

import math

from scipy import special

FAMILIES = ("gaussian", "dp")


def gaussian_delta(mu: float, eps: float) -> float:
    """δ(ε) of μ-GDP: Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)."""
    if mu <= 0:
        return 0.0
    return float(special.ndtr(-eps / mu + mu / 2) - math.exp(eps) * special.ndtr(-eps / mu - mu / 2))


def gaussian_mu(eps: float, delta: float) -> float:
    """The μ whose μ-GDP is exactly (ε, δ)-DP (δ(ε) increases with μ; bisection to 1e-12 relative)."""
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    lo, hi = 0.0, 1.0
    while gaussian_delta(hi, eps) < delta:
        lo, hi = hi, 2 * hi
    while hi - lo > 1e-12 * hi:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if gaussian_delta(mid, eps) < delta else (lo, mid)
    return hi  # the larger end: a μ no smaller than exact, so the hypothesis is no stronger than the (ε, δ) claim's Gaussian


def blow_up_inverse(family: str, eps: float, delta: float):
    """f̄⁻¹ of the family's hypothesis at (ε, δ)."""
    if family == "gaussian":
        mu = gaussian_mu(eps, delta)
        return lambda y: float(special.ndtr(special.ndtri(min(max(y, 0.0), 1.0)) - mu))
    if family == "dp":
        e = math.exp(eps)
        return lambda y: max(0.0, (y - delta) / e, 1.0 - delta - e * (1.0 - y))
    raise ValueError(f"unknown f-DP family {family!r}: one of {FAMILIES}")


def rejects(inverse, m: int, r: int, v: int, level: float) -> bool:
    """Algorithm 3: True when no distribution of the correct guesses V satisfying (F1) has P[V ≥ v] ≥ ``level``."""
    if not 0 <= v <= r <= m:
        raise ValueError(f"need 0 <= v <= r <= m, got v={v}, r={r}, m={m}")
    if r == 0 or v == 0:
        return False
    right, wrong = level * v / m, level * (r - v) / m
    for i in range(v - 1, -1, -1):  # (F2), from level v down to 0
        needed = max(wrong, inverse(right))
        if needed == wrong:  # nothing added here, so nothing below either: (F2) is at its fixed point
            break
        right, wrong = right + i / (r - i) * (needed - wrong), needed
    return right + wrong > r / m


def epsilon_lower(m: int, r: int, v: int, delta: float, level: float, family: str = "gaussian") -> float:
    """The largest ε whose hypothesis of ``family`` the audit rejects at ``level`` (0 when even ε = 0 is not rejected)."""
    if not rejects(blow_up_inverse(family, 0.0, delta), m, r, v, level):
        return 0.0
    lo, hi = 0.0, 1.0
    while rejects(blow_up_inverse(family, hi, delta), m, r, v, level):
        lo, hi = hi, 2.0 * hi
        if hi > 1e3:
            return lo
    while hi - lo > 1e-6:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if rejects(blow_up_inverse(family, mid, delta), m, r, v, level) else (lo, mid)
    return lo
