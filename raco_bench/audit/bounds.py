"""An empirical lower bound on ε from a distinguishing test between two neighbouring worlds.

A mechanism M is (ε, δ)-DP only if, for every test S, P[M(D) ∈ S] ≤ e^ε P[M(D′) ∈ S] + δ in both
directions. Running M many times on D and D′ and counting how often a threshold test fires gives
Clopper–Pearson confidence bounds on those two probabilities, and so a lower bound on ε that holds
with the stated confidence (Jagielski, Ullman & Oprea 2020; Nasr et al. 2021). The threshold must not
be chosen on the runs that are counted: :func:`audit_epsilon` picks it on one half and counts the
other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class AuditBound:
    epsilon_lower: float  # ε̂: the audited lower bound (0 when the test gives no evidence)
    confidence: float
    threshold: float
    direction: str  # "above": the test fires when the statistic exceeds the threshold in world D′
    true_positive_rate: float  # on the counted half, world D′
    false_positive_rate: float  # on the counted half, world D
    runs_per_world: int


def clopper_pearson(k: int, n: int, alpha: float) -> tuple[float, float]:
    """Two-sided (1 − alpha) Clopper–Pearson interval of a binomial proportion k/n."""
    lo = 0.0 if k == 0 else float(stats.beta.ppf(alpha / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.ppf(1 - alpha / 2, k + 1, n - k))
    return lo, hi


def epsilon_lower_bound(k_pos: int, n_pos: int, k_neg: int, n_neg: int, delta: float, confidence: float) -> float:
    """ε ≥ ln((TPR_low − δ) / FPR_high) for a test firing k_pos/n_pos times on D′ and k_neg/n_neg on D."""
    alpha = 1 - confidence
    tpr_lo, _ = clopper_pearson(k_pos, n_pos, alpha / 2)  # both bounds at alpha/2: jointly (1 − alpha)
    _, fpr_hi = clopper_pearson(k_neg, n_neg, alpha / 2)
    if tpr_lo - delta <= 0 or fpr_hi <= 0:
        return 0.0
    return max(0.0, math.log((tpr_lo - delta) / fpr_hi))


def _best_threshold(a: np.ndarray, b: np.ndarray, delta: float, confidence: float) -> tuple[float, str]:
    """The threshold and direction with the largest bound on the selection half (a: world D, b: world D′)."""
    best = (-1.0, 0.0, "above")
    values = np.unique(np.concatenate([a, b]))
    for thr in (values[:-1] + values[1:]) / 2 if len(values) > 1 else values:  # midpoints: margins on both sides
        for direction in ("above", "below"):
            pos = int((b > thr).sum() if direction == "above" else (b < thr).sum())
            neg = int((a > thr).sum() if direction == "above" else (a < thr).sum())
            eps = epsilon_lower_bound(pos, len(b), neg, len(a), delta, confidence)
            if eps > best[0]:
                best = (eps, float(thr), direction)
    return best[1], best[2]


def audit_epsilon(stat_d: np.ndarray, stat_d_prime: np.ndarray, delta: float, confidence: float = 0.95) -> AuditBound:
    """ε̂ from a scalar statistic of the released output, observed on runs in D and in D′.

    The first half of each world's runs chooses the threshold and direction; the second half is counted.
    """
    a, b = np.asarray(stat_d, dtype=float), np.asarray(stat_d_prime, dtype=float)
    ha, hb = len(a) // 2, len(b) // 2
    thr, direction = _best_threshold(a[:ha], b[:hb], delta, confidence)
    a2, b2 = a[ha:], b[hb:]
    pos = int((b2 > thr).sum() if direction == "above" else (b2 < thr).sum())
    neg = int((a2 > thr).sum() if direction == "above" else (a2 < thr).sum())
    eps = epsilon_lower_bound(pos, len(b2), neg, len(a2), delta, confidence)
    return AuditBound(eps, confidence, thr, direction, pos / len(b2), neg / len(a2), min(len(a), len(b)))
