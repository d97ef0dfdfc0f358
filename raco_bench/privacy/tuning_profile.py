"""Privacy of a private random search from the base run's privacy profile (after Koskela, Redberg & Wang, ICML 2024,
"Privacy Profiles for Private Selection", arXiv 2402.06701; docs/privacy.md, "Accounted tuning").

The search M runs a base mechanism Q (one training run of a randomly drawn configuration, with its private
selection releases) K times independently, K drawn from a distribution with generating function φ
(:mod:`raco_bench.privacy.rounds`), and releases the run whose noisy validation score is largest (nothing when
K = 0). Q's outputs are ordered by that score, whose noise makes ties a null event. Q's privacy profile is
δ_Q(ε) = max over neighbouring X, X′ and both directions of the hockey-stick divergence H_{e^ε}(Q(X) ‖ Q(X′)),
read from the run's privacy loss distribution (the joint PLD for RaCO-DP's shared-batch step, each method's own
PLD otherwise, all through :func:`raco_bench.privacy.events.pld`).

**Theorem** (the bound this module implements; its equations are numbered here). For every ε ≥ ε̃ ≥ 0 and ε̂ ≥ 0,

    δ_M(ε) ≤ E[K] · δ_Q(ε̃) + e^{ε̃} ∫₀¹ [ φ′(b(u)) − e^{ε−ε̃} φ′(u) ]₊ du,                      (1)
    b(u) = min{ 1,  e^{ε̂} u + δ_Q(ε̂),  1 − e^{−ε̂} (1 − δ_Q(ε̂) − u) }.                          (2)

Proof. Let q, q′ be the densities of Q(X), Q(X′) and F, F′ their distribution functions in the score order.
(i) The largest of K independent draws has distribution function φ(F), so M(X) has density φ′(F(y)) q(y) (Koskela
et al.'s starting point: the output density through the generating function); K = 0 releases the same nothing in
both worlds. (ii) Pointwise, with ε = ε̃ + ε₂,

    [φ′(F) q − e^ε φ′(F′) q′]₊ ≤ φ′(F) [q − e^{ε̃} q′]₊ + e^{ε̃} q′ [φ′(F) − e^{ε₂} φ′(F′)]₊.       (3)

(iii) φ′ increases, so φ′(F) ≤ φ′(1) = E[K], and ∫ [q − e^{ε̃} q′]₊ ≤ δ_Q(ε̃): the first term of (1).
(iv) Applied to the lower set {≤ y}, (ε̂, δ_Q(ε̂))-DP in one direction gives F(y) ≤ e^{ε̂} F′(y) + δ_Q(ε̂), and in the
other, on the complement, 1 − F′(y) ≤ e^{ε̂}(1 − F(y)) + δ_Q(ε̂): together F(y) ≤ b(F′(y)). With φ′ increasing and
F′(Y) uniform on [0, 1] for Y ~ Q(X′), the second term of (3) integrates to at most the second term of (1). ∎

(1) needs Q's profile at two points only, ε̃ and ε̂, as Papernot & Steinke's Theorem 2 needs two Rényi orders
(:mod:`raco_bench.privacy.tuning`): every run whose profile at ε̃ and ε̂ is at most the values used is covered by
the same bound, which is how the sweep holds every drawn configuration to a reference (:mod:`raco_bench.sweeps.accounted`).
The full profile (b as the minimum over every ε̂) tightens (1) by about 2 % in ε on RaCO-DP's run, which is not
worth holding every run to the whole curve. Checks (tests/test_tuning_profile.py): with K = 1, (1) is the base
profile; for a pure ε₀-DP base the release is (2 + η)ε₀-DP, Papernot & Steinke's pure-DP result (3ε₀, Liu & Talwar's,
for the geometric); (1) is never below the exact δ of the best of K Gaussian scores; it grows with E[K]; and it is
below the RDP theorem's ε where the suite uses it.

The integral is exact: b is affine on [0, u*], [u*, 1 − δ̂] and constant on [1 − δ̂, 1], u* = (1 − δ̂)/(1 + e^{ε̂}); on
an affine piece b(u) = au + c the integrand is positive on a half-line (:meth:`Rounds.excess_halfline`), and
∫ φ′(au + c) du = φ(au + c)/a.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from raco_bench.privacy.rounds import Rounds

GRID_STEP = 0.05  # the coarsest lattice of ε̃ and ε̂ the optimiser tries (any point gives a valid bound)
GRID_MAX = 12.0  # the largest ε the lattice reaches


@dataclass(frozen=True)
class ProfilePoints:
    """The two values of the base run's privacy profile that (1) reads: δ_Q(ε̃) and δ_Q(ε̂)."""

    eps_tilde: float
    delta_tilde: float
    eps_hat: float
    delta_hat: float

    def covers(self, delta_tilde: float, delta_hat: float) -> bool:
        """Whether a run with these two profile values is covered by the bound computed from this pair."""
        return delta_tilde <= self.delta_tilde and delta_hat <= self.delta_hat


def _piece(rounds: Rounds, a, c, k, lo, hi):
    """∫_{lo}^{hi} [φ′(au + c) − k φ′(u)]₊ du where the integrand's positive set is a half-line (arrays broadcast)."""
    A, B = rounds.excess_halfline(a, c, k)
    with np.errstate(divide="ignore", invalid="ignore"):
        cut = B / A
    lo, hi = np.broadcast_arrays(np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64))
    start = np.clip(np.where(A > 0, cut, lo), lo, hi)
    end = np.clip(np.where(A < 0, cut, hi), start, hi)
    end = np.where((A == 0) & ~(B < 0), start, end)  # A = 0: positive everywhere (B < 0) or nowhere
    with np.errstate(divide="ignore", invalid="ignore"):
        upper = np.where(a > 0, (rounds.pgf(a * end + c) - rounds.pgf(a * start + c)) / np.where(a > 0, a, 1.0),
                         rounds.dpgf(np.minimum(c, 1.0)) * (end - start))
    lower = k * (rounds.pgf(end) - rounds.pgf(start))
    return np.maximum(upper - lower, 0.0)


def excess_integral(rounds: Rounds, k, eps_hat, delta_hat):
    """∫₀¹ [φ′(b(u)) − k φ′(u)]₊ du with b of (2), exactly (arrays broadcast); k ≥ 1."""
    k, eh, dh = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64) for x in (k, eps_hat, delta_hat)))
    dh = np.clip(dh, 0.0, 1.0)
    mid = (1 - dh) / (1 + np.exp(eh))
    top = 1 - dh
    first = _piece(rounds, np.exp(eh), dh, k, 0.0, mid)
    second = _piece(rounds, np.exp(-eh), 1 - np.exp(-eh) * (1 - dh), k, mid, top)
    third = _piece(rounds, np.zeros_like(k), np.ones_like(k), k, top, 1.0)
    return first + second + third


def theorem_1(rounds: Rounds, eps, eps_tilde, delta_tilde, eps_hat, delta_hat):
    """The right-hand side of (1), capped at 1 (arrays broadcast; ε ≥ ε̃)."""
    eps_tilde = np.asarray(eps_tilde, dtype=np.float64)
    term2 = excess_integral(rounds, np.exp(eps - eps_tilde), eps_hat, delta_hat)
    return np.minimum(1.0, rounds.mean * np.asarray(delta_tilde, dtype=np.float64) + np.exp(eps_tilde) * term2)


def release_delta(rounds: Rounds, eps: float, p: ProfilePoints) -> float:
    """(1): an upper bound on the search's δ at ``eps`` (≥ ε̃) from the base profile's two values ``p``."""
    if eps < p.eps_tilde:
        raise ValueError(f"(1) needs eps >= eps_tilde, got {eps} < {p.eps_tilde}")
    return float(theorem_1(rounds, eps, p.eps_tilde, p.delta_tilde, p.eps_hat, p.delta_hat))


def release_epsilon(rounds: Rounds, p: ProfilePoints, delta: float, tol: float = 1e-6) -> float:
    """The smallest ε ≥ ε̃ at which (1) with the values ``p`` is at most ``delta`` (inf when none below GRID_MAX + ε̃ is)."""
    lo, hi = p.eps_tilde, p.eps_tilde + GRID_MAX
    if release_delta(rounds, lo, p) <= delta:
        return lo
    if release_delta(rounds, hi, p) > delta:
        return math.inf
    while hi - lo > tol:  # (1) decreases in ε
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if release_delta(rounds, mid, p) <= delta else (mid, hi)
    return hi


Profile = Callable[[np.ndarray], np.ndarray]  # ε (sorted array) -> δ_Q(ε), both directions


def best_points(profile: Profile, rounds: Rounds, delta: float) -> tuple[ProfilePoints, float]:
    """The pair (ε̃, ε̂) whose (1) gives the smallest end-to-end ε at ``delta``, and that ε: the best pair on a lattice of
    spacing 0.05 up to GRID_MAX, then on lattices 20 and 100 times finer around it (any pair gives a valid bound; the
    search only finds a good one)."""
    step = GRID_STEP
    grid = np.round(np.arange(0.0, GRID_MAX + step / 2, step), 10)
    tilde, hat, eps = _best_on(profile, rounds, delta, grid, grid, 0.0, GRID_MAX)
    for fine in (step / 20, step / 100):
        around = lambda x: np.round(np.arange(max(0.0, x - 20 * fine), x + 20 * fine + fine / 2, fine), 12)  # noqa: E731
        tilde, hat, eps = _best_on(profile, rounds, delta, around(tilde), around(hat), max(0.0, eps - 0.05), eps)
    dt, dh = (float(x) for x in np.clip(np.asarray(profile(np.array([tilde, hat])), dtype=np.float64), 0.0, 1.0))
    points = ProfilePoints(tilde, dt, hat, dh)
    return points, release_epsilon(rounds, points, delta)


def _best_on(profile: Profile, rounds: Rounds, delta: float, tildes: np.ndarray, hats: np.ndarray, lo: float, hi: float):
    """(ε̃, ε̂, ε): the pair among ``tildes`` × ``hats`` whose (1) reaches ``delta`` at the smallest ε in [lo, hi] (bisection)."""
    dt = np.clip(np.asarray(profile(tildes), dtype=np.float64), 0.0, 1.0)
    dh = np.clip(np.asarray(profile(hats), dtype=np.float64), 0.0, 1.0)

    def bound(eps: float) -> tuple[float, float, float]:
        n = int(np.searchsorted(tildes, eps, side="right"))  # ε̃ ≤ ε
        if n == 0:
            return math.inf, 0.0, 0.0
        total = theorem_1(rounds, eps, tildes[:n, None], dt[:n, None], hats[None, :], dh[None, :])
        i, j = np.unravel_index(int(np.nanargmin(total)), total.shape)
        return float(total[i, j]), float(tildes[i]), float(hats[j])

    if bound(hi)[0] > delta:
        raise ValueError(f"the search's epsilon at delta={delta:g} exceeds {hi:g}: its base run spends too much")
    while hi - lo > 1e-5:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if bound(mid)[0] <= delta else (mid, hi)
    _, t, h = bound(hi)
    return t, h, hi


def pld_profile(pld) -> Profile:
    """δ_Q(ε) of a dp-accounting PLD (add/remove: the larger of its two directions), for sorted ε."""
    from dp_accounting.pld.privacy_loss_distribution import PrivacyLossDistribution

    if not isinstance(pld, PrivacyLossDistribution):
        raise TypeError(f"expected a PrivacyLossDistribution, got {type(pld).__name__}")

    def profile(eps: np.ndarray) -> np.ndarray:
        return hockey_stick(pld, np.asarray(eps, dtype=np.float64))

    return profile


def hockey_stick(pld, eps: np.ndarray) -> np.ndarray:
    """δ(ε) = max over the PLD's two directions of inf_mass + Σ_{l > ε} p(l)(1 − e^{ε − l}), at every ε (any order).

    dp-accounting's own ``get_delta_for_epsilon`` computes the same sum in a Python loop over the loss grid (seconds
    for a long run); this evaluates it with suffix sums over each direction's dense pmf. tests/test_tuning_profile.py
    holds the two equal."""
    eps = np.asarray(eps, dtype=np.float64)
    pmfs = [getattr(pld, "_pmf_remove", None), getattr(pld, "_pmf_add", None)]
    if pmfs[0] is None or not hasattr(pmfs[0], "to_dense_pmf"):  # not the dp-accounting layout this reads: its public (slow) path
        order = np.argsort(eps)
        out = np.empty_like(eps)
        out[order] = np.asarray(pld.get_delta_for_epsilon(eps[order]), dtype=np.float64)
        return out
    best = np.zeros_like(eps)
    for pmf in pmfs:
        if pmf is None:
            continue
        dense = pmf.to_dense_pmf()
        losses = (dense._lower_loss + np.arange(len(dense._probs))) * dense._discretization
        probs = np.asarray(dense._probs, dtype=np.float64)
        upper = np.concatenate([np.cumsum(probs[::-1])[::-1], [0.0]])  # Σ_{j ≥ i} p_j
        lower = np.concatenate([np.cumsum((probs * np.exp(-losses))[::-1])[::-1], [0.0]])  # Σ_{j ≥ i} p_j e^{−l_j}
        i = np.searchsorted(losses, eps, side="right")  # first loss > ε
        delta = dense._infinity_mass + upper[i] - np.exp(eps) * lower[i]
        best = np.maximum(best, np.clip(delta, 0.0, 1.0))
    return best


def run_pld(event):
    """The PLD of a run's event, its compositions built here and not kept: :func:`raco_bench.privacy.events.pld` keeps every
    PLD it builds, and accounted tuning probes hundreds of T (each a PLD of up to a few MB). One step's PLD is still kept
    (:func:`raco_bench.privacy.accounting.step_pld`)."""
    from raco_bench.privacy import events

    return events.build_pld(event, run_pld)


def search_epsilon(event, rounds: Rounds, delta: float) -> tuple[float, ProfilePoints]:
    """(ε, points): the end-to-end ε at ``delta`` of a search whose every run releases ``event``, by (1) at its best pair."""
    points, eps = best_points(pld_profile(run_pld(event)), rounds, delta)
    return eps, points


def run_deltas(event, points: ProfilePoints) -> tuple[float, float]:
    """The run's own δ_Q(ε̃) and δ_Q(ε̂), at the pair ``points`` names."""
    d = hockey_stick(run_pld(event), np.array([points.eps_tilde, points.eps_hat]))
    return float(d[0]), float(d[1])


def covered(event, points: ProfilePoints) -> bool:
    """Whether a run releasing ``event`` is covered by the bound computed from ``points`` (its δ at ε̃ and ε̂ at most theirs).
    The run's RDP curve, converted to δ at each point (an upper bound on its profile), settles most runs in milliseconds;
    its PLD settles the rest."""
    from raco_bench.privacy import events
    from raco_bench.privacy.rdp import ORDERS
    from raco_bench.privacy.tuning import rdp_to_delta

    curve = events.rdp(event)
    if points.covers(rdp_to_delta(ORDERS, curve, points.eps_tilde), rdp_to_delta(ORDERS, curve, points.eps_hat)):
        return True
    return points.covers(*run_deltas(event, points))
