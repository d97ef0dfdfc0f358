"""Interval estimates for a study's repeats, and the verdicts read from them (docs/results.md, "Repeats and intervals").

A study cell (method, ε, γ) run R times is R independent draws of the whole protocol: each repeat searches afresh,
selects on its own resampled train/validation split under a fresh key, then trains its winner on its phase-2 seeds.
The repeat is the unit of independence. The seeds of one repeat share its selected configuration, so they are not R·S
independent draws of the protocol's outcome; treating them as such (a bootstrap over seeds, or the spread of one
winner's seeds) measures the training noise of one configuration and misses the search-to-search spread, which is
what a verdict between methods must clear.

* :func:`mean_interval`: the mean over repeats of each repeat's mean over its seeds, with the Student-t interval on
  the R repeat means (R − 1 degrees of freedom). With R = 5 a percentile bootstrap over repeats (rliable's stratified
  bootstrap, built for many tasks and runs) covers about 84 % at a nominal 95 %, since it resamples five values as if
  they were the population; the t interval is exact for normal repeat means (95.0 % measured) and covers 91 % where a
  repeat's effect is right-skewed (log-normal, σ = 0.5: a selection that sometimes lands on a poor configuration;
  ``tests/test_intervals.py`` measures these coverages on 2,000 simulated cells). A cell whose repeats split between
  collapse and success is beyond any interval of five values: its page says how many repeats met γ.
* :func:`share_interval`: the share of runs meeting γ, with Wilson's score interval on the pooled runs at the effective
  sample size n / deff, the design effect deff ≥ 1 estimated from the spread of the repeats' shares (Kish): runs of one
  repeat share its winner, so they agree more than independent runs would.
* :func:`paired_difference`: method A − method B per repeat (both ran the same repeat: the same train/validation and
  test rows), with the t interval over the repeats both have. Pairing removes the split-to-split part of the spread.
* :func:`paired_share_difference`: the same for the share of runs meeting γ, whose per-repeat shares are counts out of a
  repeat's seeds: two repeats whose differences agree exactly (2 of 20 seeds more, twice) would give a t interval of
  width 0. Its variance is floored at what binomial sampling of the seeds alone gives the difference (Agresti and
  Caffo's adjusted shares, one success and one failure added to each side, so the floor is never 0), and the interval
  is clipped to [−1, 1].
* Every interval of a quantity with a known range (an error, a share, a gap: [0, 1]; a difference of two: [−1, 1]) is
  clipped to it (:mod:`raco_bench.report.ranges`): the mean lies in the range, so nothing of the coverage is lost,
  and two repeats no longer give a test error's interval such as [−2.38, 2.96].
* :func:`verdict`: "better", "worse" or "no detectable difference at this size", from whether the interval of the
  difference excludes 0, never from two means.

The test split is the same in every repeat, so no interval here covers the sampling noise of the test rows
themselves; a page's noise floor (:mod:`raco_bench.report.noise_floor`) states that one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

LEVEL = 0.95
BETTER, WORSE, NO_DIFFERENCE = "better", "worse", "no detectable difference at this size"
ONE_REPEAT = "one repeat: no interval, no verdict"


@dataclass(frozen=True)
class Interval:
    """An estimate with its two-sided interval at ``level``; ``n``: the independent units it rests on (repeats)."""

    estimate: float
    low: float
    high: float
    n: int
    level: float = LEVEL

    def text(self, digits: int = 4) -> str:
        """``0.1737 [0.1712, 0.1761]``, or the estimate alone (``n = 1``: no interval)."""
        if not math.isfinite(self.estimate):
            return ""
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            return f"{self.estimate:.{digits}f} (one repeat: no interval)"
        return f"{self.estimate:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"

    def excludes(self, value: float) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high) and not (self.low <= value <= self.high)


def t_quantile(p: float, df: int) -> float:
    """The p-quantile of Student's t with ``df`` degrees of freedom."""
    from scipy.stats import t

    return float(t.ppf(p, df))


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def t_interval(values: Sequence[float], level: float = LEVEL, within: tuple[float, float] | None = None) -> Interval:
    """The mean of ``values`` (independent units) with its Student-t interval, clipped to ``within`` when the values can
    only lie there (:mod:`raco_bench.report.ranges`: no coverage is lost); one value: no interval (NaN bounds)."""
    vals = [float(v) for v in values if math.isfinite(float(v))]
    if not vals:
        return Interval(math.nan, math.nan, math.nan, 0, level)
    mean = _mean(vals)
    if len(vals) == 1:
        return Interval(mean, math.nan, math.nan, 1, level)
    half = t_quantile(0.5 + level / 2, len(vals) - 1) * _sd(vals) / math.sqrt(len(vals))
    low, high = within if within is not None else (-math.inf, math.inf)
    return Interval(mean, max(low, mean - half), min(high, mean + half), len(vals), level)


def _sd(vals: Sequence[float]) -> float:
    """The sample standard deviation of ``vals`` (at least two values)."""
    mean = _mean(vals)
    return math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1))


def mean_interval(by_repeat: Sequence[Sequence[float]], level: float = LEVEL) -> Interval:
    """The mean over repeats of each repeat's mean over its runs (the module docstring); a repeat with no finite value
    (no winner, or every seed diverged) does not count."""
    means = [_mean(f) for f in ([float(v) for v in runs if math.isfinite(float(v))] for runs in by_repeat) if f]
    return t_interval(means, level)


def wilson(successes: float, n: float, level: float = LEVEL) -> tuple[float, float]:
    """Wilson's score interval for a proportion with ``successes`` of ``n`` (n may be fractional: an effective size)."""
    if n <= 0:
        return math.nan, math.nan
    from scipy.stats import norm

    z = float(norm.ppf(0.5 + level / 2))
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def design_effect(successes: Sequence[int], totals: Sequence[int]) -> float:
    """Kish's design effect of clustered binary outcomes: the observed variance of the clusters' shares over the variance
    binomial sampling alone would give them, floored at 1 (one cluster, or shares that agree more than chance: 1)."""
    shares = [s / n for s, n in zip(successes, totals) if n > 0]
    sizes = [n for n in totals if n > 0]
    if len(shares) < 2:
        return 1.0
    pooled = sum(successes) / sum(sizes)
    if pooled in (0.0, 1.0):
        return 1.0
    observed = sum((s - pooled) ** 2 for s in shares) / (len(shares) - 1)
    binomial = pooled * (1 - pooled) * _mean([1 / n for n in sizes])
    return max(1.0, observed / binomial)


def share_interval(successes: Sequence[int], totals: Sequence[int], level: float = LEVEL) -> Interval:
    """The pooled share of runs meeting γ over the repeats (``successes[r]`` of ``totals[r]``), with Wilson's interval at
    the effective sample size (the module docstring)."""
    n = sum(totals)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0, level)
    share = sum(successes) / n
    deff = design_effect(successes, totals)
    low, high = wilson(sum(successes) / deff, n / deff, level)
    return Interval(share, low, high, sum(1 for t in totals if t > 0), level)


def paired_difference(a: dict[int, float], b: dict[int, float], level: float = LEVEL, within: tuple[float, float] | None = None) -> Interval:
    """A − B over the repeats both have (``a``, ``b``: repeat -> that repeat's mean), with the t interval (clipped to
    ``within``, the range a difference can take)."""
    common = sorted(r for r in set(a) & set(b) if math.isfinite(a[r]) and math.isfinite(b[r]))
    return t_interval([a[r] - b[r] for r in common], level, within)


def paired_share_difference(a: dict[int, tuple[int, int]], b: dict[int, tuple[int, int]], level: float = LEVEL) -> Interval:
    """A − B in the share of runs meeting γ over the repeats both have (``a``, ``b``: repeat -> (runs meeting γ, runs)),
    with the t interval on the repeats' differences, its variance floored at the binomial one (the module docstring)."""
    common = sorted(r for r in set(a) & set(b) if a[r][1] > 0 and b[r][1] > 0)
    diffs = [a[r][0] / a[r][1] - b[r][0] / b[r][1] for r in common]
    plain = t_interval(diffs, level)
    if plain.n < 2:
        return plain

    def adjusted(met: int, runs: int) -> float:  # Agresti-Caffo: one success and one failure added
        p = (met + 1) / (runs + 2)
        return p * (1 - p) / (runs + 2)

    floor = _mean([adjusted(*a[r]) + adjusted(*b[r]) for r in common]) / len(common)
    half = t_quantile(0.5 + level / 2, plain.n - 1) * math.sqrt(max(_sd(diffs) ** 2 / plain.n, floor))
    return Interval(plain.estimate, max(-1.0, plain.estimate - half), min(1.0, plain.estimate + half), plain.n, level)


def verdict(difference: Interval, lower_is_better: bool = True) -> str:
    """From the interval of A − B alone: A is better where it excludes 0 on the good side, worse on the other, and
    otherwise no difference is detectable with this many repeats; one repeat has no interval, so no verdict at all."""
    if difference.n < 2:
        return ONE_REPEAT
    if not difference.excludes(0.0):
        return NO_DIFFERENCE
    below = difference.high < 0
    return BETTER if below == lower_is_better else WORSE
