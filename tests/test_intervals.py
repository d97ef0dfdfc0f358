"""The interval estimates of a study's repeats (raco_bench/report/intervals.py): coverage measured on simulated repeats,
the design effect of clustered shares, and verdicts read from intervals alone."""

from __future__ import annotations

import math

import numpy as np
import pytest

from raco_bench.report.intervals import (
    BETTER,
    NO_DIFFERENCE,
    ONE_REPEAT,
    WORSE,
    Interval,
    design_effect,
    mean_interval,
    paired_difference,
    paired_share_difference,
    share_interval,
    t_interval,
    verdict,
    wilson,
)
from raco_bench.report.ranges import UNIT, difference

R, S, TRIALS = 5, 20, 2000  # five repeats of twenty seeds, as a study cell; 2,000 simulated cells (±0.01 on a coverage)


def _cells(rng: np.random.Generator, skewed: bool) -> np.ndarray:
    """TRIALS cells of R repeats × S seeds around a true mean of 0: a repeat's effect (its search and split), normal or
    right-skewed (a selection that sometimes lands on a poor configuration), plus each seed's noise."""
    if skewed:
        effect = rng.lognormal(0.0, 0.5, (TRIALS, R, 1))
        effect -= math.exp(0.5**2 / 2)  # centred on its true mean
    else:
        effect = rng.normal(0.0, 1.0, (TRIALS, R, 1))
    return effect + rng.normal(0.0, 0.5, (TRIALS, R, S))


@pytest.mark.parametrize("skewed", [False, True])
def test_the_repeats_interval_covers_the_true_mean_at_its_level_where_a_bootstrap_of_five_does_not(skewed):
    rng = np.random.default_rng(7)
    cells = _cells(rng, skewed)
    covered = 0
    for cell in cells:
        iv = mean_interval(cell.tolist())
        covered += iv.low <= 0.0 <= iv.high
    coverage = covered / TRIALS
    assert (0.93 if not skewed else 0.89) <= coverage <= 0.97, coverage  # measured: 0.950 normal, 0.912 skewed
    means = cells.mean(axis=2)  # (TRIALS, R)
    boot = means[:, rng.integers(0, R, (500, R))].mean(axis=2)  # a percentile bootstrap over the five repeat means
    low, high = np.quantile(boot, 0.025, axis=1), np.quantile(boot, 0.975, axis=1)
    assert ((low <= 0) & (0 <= high)).mean() < 0.90  # why the t interval: five resampled values under-cover


def test_a_mean_interval_skips_repeats_without_a_value_and_one_repeat_has_no_interval():
    iv = mean_interval([[0.2, 0.2], [math.nan], [0.3, 0.3], []])
    assert iv.n == 2 and iv.estimate == pytest.approx(0.25) and iv.low < 0.25 < iv.high
    one = mean_interval([[0.1, 0.3]])
    assert one.n == 1 and one.estimate == pytest.approx(0.2) and math.isnan(one.low) and "one repeat" in one.text()
    assert verdict(paired_difference({0: 0.1}, {0: 0.5})) == ONE_REPEAT  # one common repeat: no interval, no verdict


def test_shares_of_clustered_runs_get_wider_intervals_that_cover():
    """Runs of one repeat share its winner: a repeat's share of runs meeting γ varies more than binomially. The design
    effect widens Wilson's interval to cover the true share; the interval that treats every run as independent does not."""
    rng = np.random.default_rng(3)
    truth, covered, naive = 0.7, 0, 0
    for _ in range(TRIALS):
        p = rng.beta(7.0 * 1.5, 3.0 * 1.5, R)  # each repeat's own chance of meeting γ, around 0.7
        successes = rng.binomial(S, p)
        iv = share_interval(successes.tolist(), [S] * R)
        covered += iv.low <= truth <= iv.high
        lo, hi = wilson(successes.sum(), R * S)
        naive += lo <= truth <= hi
    assert covered / TRIALS >= 0.90 and naive / TRIALS < 0.80, (covered / TRIALS, naive / TRIALS)
    assert design_effect([20, 20, 20], [20, 20, 20]) == 1.0 and design_effect([0, 20], [20, 20]) > 10
    assert share_interval([20] * R, [S] * R).low > 0.95  # all met γ: the interval is not a point


def test_verdicts_come_from_the_interval_of_the_paired_difference():
    a = {0: 0.170, 1: 0.172, 2: 0.171, 3: 0.173, 4: 0.170}
    worse = {r: v + 0.01 + 0.001 * (r % 2) for r, v in a.items()}
    assert verdict(paired_difference(a, worse)) == BETTER and verdict(paired_difference(worse, a)) == WORSE
    assert verdict(paired_difference(a, worse), lower_is_better=False) == WORSE  # e.g. a share meeting γ: higher is better
    noisy = {0: 0.165, 1: 0.180, 2: 0.168, 3: 0.176, 4: 0.171}
    d = paired_difference(a, noisy)
    assert d.low < 0 < d.high and verdict(d) == NO_DIFFERENCE
    assert paired_difference(a, {9: 0.1}).n == 0  # no common repeat
    assert Interval(0.1, 0.05, 0.15, 3).text(2) == "0.10 [0.05, 0.15]"


def test_a_paired_share_difference_is_never_a_point_and_covers():
    """Shares of 20 seeds are counts: two repeats can differ by exactly the same 3 of 20, and a plain t interval on the
    differences then has width 0 and reads as a verdict. The binomial floor keeps it open, and within [-1, 1]; on
    simulated clustered shares (each repeat's own chance of meeting gamma) it covers the true difference. Red when the
    floor is left out (the identical repeats give a point) or the clip is (two repeats, t with one degree of freedom)."""
    same = paired_share_difference({0: (17, 20), 1: (17, 20)}, {0: (14, 20), 1: (14, 20)})
    assert same.low < 0 < same.high and verdict(same, lower_is_better=False) == NO_DIFFERENCE
    wide = paired_share_difference({0: (20, 20), 1: (2, 20)}, {0: (0, 20), 1: (20, 20)})
    assert -1.0 <= wide.low and wide.high <= 1.0
    assert paired_share_difference({0: (17, 20)}, {0: (10, 20)}).n == 1  # one repeat: no interval
    rng = np.random.default_rng(5)
    covered = 0
    for _ in range(TRIALS):
        pa, pb = rng.beta(8.0, 2.0, R), rng.beta(6.0, 4.0, R)  # true mean difference 0.8 - 0.6
        a = {r: (int(rng.binomial(S, pa[r])), S) for r in range(R)}
        b = {r: (int(rng.binomial(S, pb[r])), S) for r in range(R)}
        iv = paired_share_difference(a, b)
        covered += iv.low <= 0.2 <= iv.high
    assert covered / TRIALS >= 0.93, covered / TRIALS


def test_an_interval_of_a_bounded_quantity_stays_in_its_range_and_keeps_its_coverage_and_verdicts():
    """Parkinsons' page (DP-FERMI at ε = 1, γ = 0.005): two repeats with a model, one a constant predictor at 0.50, one a
    model at 0.08, gave a test error of 0.29 [−2.38, 2.96] and a figure whose axis ran to −2.5. The mean of values in
    [0, 1] is in [0, 1], so the interval clipped to it covers exactly when the unclipped one does, and a difference
    clipped to [−1, 1] keeps its verdict. Clipping to anything narrower than the range (the values seen, say) loses
    coverage: measured here on skewed bounded cells of two and three repeats."""
    two = t_interval([0.50, 0.08], within=UNIT)
    plain = t_interval([0.50, 0.08])
    assert plain.low < -2.3 and plain.high > 2.9  # as the page printed it
    assert (two.low, two.high) == (0.0, 1.0) and two.estimate == pytest.approx(0.29) and two.n == 2
    assert t_interval([0.2, 0.21, 0.19], within=UNIT) == t_interval([0.2, 0.21, 0.19])  # inside its range: unchanged
    rng = np.random.default_rng(11)
    truth = 0.2 / (0.2 + 1.5)  # the mean of Beta(0.2, 1.5): most repeats near 0, a few far above
    for n in (2, 3):
        cells = rng.beta(0.2, 1.5, (TRIALS, n))
        clipped = [t_interval(c.tolist(), within=UNIT) for c in cells]
        unclipped = [t_interval(c.tolist()) for c in cells]
        assert all(0.0 <= iv.low <= iv.high <= 1.0 for iv in clipped)
        assert [iv.low <= truth <= iv.high for iv in clipped] == [iv.low <= truth <= iv.high for iv in unclipped]
        seen = [iv.low <= truth <= iv.high and min(c) <= truth <= max(c) for iv, c in zip(unclipped, cells)]
        assert np.mean(seen) < np.mean([iv.low <= truth <= iv.high for iv in clipped]) - 0.05  # the values seen are no range
        a, b = rng.uniform(0, 1, (TRIALS, n)), rng.uniform(0, 1, (TRIALS, n))
        for x, y in zip(a[:200], b[:200]):
            pa, pb = dict(enumerate(x.tolist())), dict(enumerate(y.tolist()))
            clipped_d, plain_d = paired_difference(pa, pb, within=difference(UNIT)), paired_difference(pa, pb)
            assert -1.0 <= clipped_d.low and clipped_d.high <= 1.0 and verdict(clipped_d) == verdict(plain_d)
