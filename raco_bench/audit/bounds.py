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

MAX_THRESHOLDS = 4000  # candidate thresholds a selection half tries
MIN_FIRES = 30  # a candidate test must fire at least this often in D′ on the selection half


@dataclass(frozen=True)
class AuditBound:
    epsilon_lower: float  # ε̂: the audited lower bound (0 when the test gives no evidence)
    confidence: float
    threshold: float
    direction: str  # "above": the test fires when the statistic exceeds the threshold in world D′
    true_positive_rate: float  # on the counted half, world D′
    false_positive_rate: float  # on the counted half, world D
    runs_per_world: int
    epsilon_upper: float = float("inf")  # the interval's other end: ln((TPR_high − δ) / FPR_low) of the chosen test

    @property
    def point_epsilon(self) -> float:
        """ln(TPR / FPR) on the counted half, without a confidence margin (inf when FPR = 0, 0 when TPR = 0)."""
        if self.false_positive_rate == 0:
            return math.inf
        if self.true_positive_rate == 0:
            return 0.0
        return max(0.0, math.log(self.true_positive_rate / self.false_positive_rate))

    @property
    def interval(self) -> tuple[float, float]:
        """[ε̂, upper end]: where the chosen test's log-ratio lies at the stated confidence; ε̂ is the DP lower bound."""
        return self.epsilon_lower, self.epsilon_upper


def check_confidence(confidence: float) -> None:
    if not 0.5 <= confidence < 1:
        raise ValueError(f"invalid confidence={confidence!r}: must be in [0.5, 1)")


def require_record_level(privacy: dict, method: str) -> None:
    """An audit that adds or removes whole records bounds record-level DP only: refuse any other claim (a lower bound
    on a notion the run does not claim would raise false alarms)."""
    notion = str(privacy.get("notion", ""))
    if not notion.startswith("record-level"):
        raise ValueError(f"{method} claims {notion!r}, not record-level DP: an audit that adds a whole record does not test that claim "
                         "(audit the method's record-level mode: for DP-FERMI, method dp-fermi with privacy=full, its default)")


def clopper_pearson(k, n, alpha: float):
    """Two-sided (1 − alpha) Clopper–Pearson interval of a binomial proportion k/n (scalars or arrays)."""
    k, n = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore"):
        lo = np.where(k == 0, 0.0, stats.beta.ppf(alpha / 2, np.maximum(k, 1e-300), n - k + 1))
        hi = np.where(k == n, 1.0, stats.beta.ppf(1 - alpha / 2, k + 1, np.maximum(n - k, 1e-300)))
    if lo.ndim == 0:
        return float(lo), float(hi)
    return lo, hi


def _bounds(k_pos, n_pos: int, k_neg, n_neg: int, delta: float, confidence: float) -> np.ndarray:
    alpha = 1 - confidence
    tpr_lo, _ = clopper_pearson(k_pos, n_pos, alpha / 2)  # both bounds at alpha/2: jointly (1 − alpha)
    _, fpr_hi = clopper_pearson(k_neg, n_neg, alpha / 2)
    tpr_lo, fpr_hi = np.atleast_1d(tpr_lo), np.atleast_1d(fpr_hi)
    with np.errstate(divide="ignore", invalid="ignore"):
        eps = np.log((tpr_lo - delta) / fpr_hi)
    return np.where((tpr_lo - delta > 0) & (fpr_hi > 0), np.maximum(eps, 0.0), 0.0)


def epsilon_lower_bound(k_pos: int, n_pos: int, k_neg: int, n_neg: int, delta: float, confidence: float) -> float:
    """ε ≥ ln((TPR_low − δ) / FPR_high) for a test firing k_pos/n_pos times on D′ and k_neg/n_neg on D."""
    return float(_bounds(k_pos, n_pos, k_neg, n_neg, delta, confidence)[0])


def _fires(values: np.ndarray, thresholds: np.ndarray, direction: str) -> np.ndarray:
    """How many ``values`` lie above (or below) each threshold."""
    v = np.sort(values)
    if direction == "above":
        return len(v) - np.searchsorted(v, thresholds, side="right")
    return np.searchsorted(v, thresholds, side="left")


def _best_threshold(a: np.ndarray, b: np.ndarray, delta: float, confidence: float) -> tuple[float, str]:
    """The threshold and direction with the largest bound on the selection half (a: world D, b: world D′)."""
    values = np.unique(np.concatenate([a, b]))
    if len(values) > MAX_THRESHOLDS:  # many runs: candidates at tail quantiles (the bound lives in the tails) and the bulk
        tails = np.geomspace(0.5 / len(values), 0.5, MAX_THRESHOLDS // 2)
        values = np.unique(np.quantile(values, np.concatenate([tails, 1.0 - tails])))
    thresholds = (values[:-1] + values[1:]) / 2 if len(values) > 1 else values  # midpoints: margins on both sides
    best = (-1.0, float(thresholds[0]), "above")
    for direction in ("above", "below"):
        pos = _fires(b, thresholds, direction)
        eps = _bounds(pos, len(b), _fires(a, thresholds, direction), len(a), delta, confidence)
        eps = np.where(pos >= min(MIN_FIRES, len(b) // 20), eps, -0.5)  # a test that fires a handful of times overfits its half
        i = int(np.argmax(eps))
        if eps[i] > best[0]:
            best = (float(eps[i]), float(thresholds[i]), direction)
    return best[1], best[2]


def audit_epsilon(stat_d: np.ndarray, stat_d_prime: np.ndarray, delta: float, confidence: float = 0.95) -> AuditBound:
    """ε̂ from a scalar statistic of the released output, observed on runs in D and in D′.

    The first half of each world's runs chooses the threshold and direction; the second half is counted.
    """
    return audit_best({"statistic": (stat_d, stat_d_prime)}, delta, confidence)[1]


def audit_best(candidates: dict[str, tuple[np.ndarray, np.ndarray]], delta: float, confidence: float = 0.95) -> tuple[str, AuditBound]:
    """ε̂ from the best of several statistics, each observed on the same runs in D and in D′ (``name -> (D, D′)``).

    The first half of each world's runs chooses the statistic, its threshold and its direction (the largest
    bound there); only the second half is counted, so the choice costs no confidence.
    """
    best = None
    for name, (a, b) in candidates.items():
        a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
        ha, hb = len(a) // 2, len(b) // 2
        thr, direction = _best_threshold(a[:ha], b[:hb], delta, confidence)
        pos, neg = _fires(b[:hb], np.array([thr]), direction)[0], _fires(a[:ha], np.array([thr]), direction)[0]
        score = epsilon_lower_bound(int(pos), hb, int(neg), ha, delta, confidence)
        if best is None or score > best[0]:
            best = (score, name, thr, direction, a[ha:], b[hb:], min(len(a), len(b)))
    _, name, thr, direction, a2, b2, runs = best
    pos = int((b2 > thr).sum() if direction == "above" else (b2 < thr).sum())
    neg = int((a2 > thr).sum() if direction == "above" else (a2 < thr).sum())
    eps = epsilon_lower_bound(pos, len(b2), neg, len(a2), delta, confidence)
    return name, AuditBound(eps, confidence, thr, direction, pos / len(b2), neg / len(a2), runs,
                            _upper(pos, len(b2), neg, len(a2), delta, confidence))


def _upper(k_pos: int, n_pos: int, k_neg: int, n_neg: int, delta: float, confidence: float) -> float:
    """ln((TPR_high − δ) / FPR_low): the upper end of the chosen test's log-ratio at the stated confidence (inf when FPR_low = 0)."""
    alpha = 1 - confidence
    _, tpr_hi = clopper_pearson(k_pos, n_pos, alpha / 2)
    fpr_lo, _ = clopper_pearson(k_neg, n_neg, alpha / 2)
    if fpr_lo <= 0:
        return float("inf")
    return max(0.0, float(np.log(max(tpr_hi - delta, 1e-300) / fpr_lo)))
