"""The one-run audit's bound (Steinke, Nasr & Jagielski 2023) and the audit end to end on a real run."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import special, stats

from raco_bench.audit.one_run import OneRunAudit, best_guesses, epsilon_lower, p_value, run_one_run


def test_without_delta_the_p_value_is_the_randomised_response_tail():
    assert p_value(100, 40, 30, 1.0, 0.0) == pytest.approx(stats.binom.sf(29, 40, special.expit(1.0)))
    assert p_value(100, 40, 30, 1.0, 1e-5) > p_value(100, 40, 30, 1.0, 0.0)  # δ only loosens it
    assert p_value(100, 40, 30, 2.0, 0.0) > p_value(100, 40, 30, 1.0, 0.0)  # a larger ε explains more correct guesses


def test_the_bound_holds_at_its_confidence_on_randomised_response():
    """Guesses exactly as good as ε-DP allows (each right with probability e^ε/(1 + e^ε)): ε̂ exceeds ε in at most ~5 %
    of audits, and comes near ε when the guesses are many."""
    rng = np.random.default_rng(0)
    eps, m = 1.0, 2000
    over, values = 0, []
    for _ in range(200):
        included = rng.random(m) < 0.5
        right = rng.random(m) < special.expit(eps)
        guess_in = np.where(right, included, ~included)
        scores = guess_in + 1e-3 * rng.random(m)  # the "in" guesses first, in random order
        bound = best_guesses(scores, included, 1e-5, 0.95, fractions=(0.5,))
        over += bound.epsilon_lower > eps
        values.append(bound.epsilon_lower)
    assert over <= 15
    assert np.median(values) > 0.6 * eps


def test_a_planted_overconfident_bound_is_caught_by_the_same_check():
    """The check above has teeth: dropping the δ term and testing at 50 % confidence overstates ε̂ on the same runs."""
    rng = np.random.default_rng(0)
    over = 0
    for _ in range(200):
        rng.random(2000)  # the inclusion draws, as above (this count does not need them)
        right = rng.random(2000) < special.expit(1.0)
        v = int(right.sum())
        over += epsilon_lower(2000, 2000, v, 0.0, 0.5) > 1.0
    assert over > 15


def _reference_p_value(m, r, v, eps, delta):
    """Theorem 5.2's p-value written out term by term (no vectorisation), to pin the implementation."""
    from math import comb, exp

    p = exp(eps) / (1 + exp(eps))
    pmf = [comb(r, k) * p**k * (1 - p) ** (r - k) for k in range(r + 1)]
    tail = sum(pmf[v:])
    if delta == 0 or v == 0:
        return min(1.0, tail)
    alpha = max(sum(pmf[v - i : v]) / i for i in range(1, v + 1))
    return min(1.0, tail + 2 * m * delta * alpha)


GRID = [(m, r, v, eps, delta) for m in (100, 1000) for r in (20, 60) for v in (r // 2, 3 * r // 4, r) for eps in (0.5, 2.0)
        for delta in (0.0, 1e-5, 1e-3)]


def check_p_value_matches_the_theorem(module) -> None:
    for m, r, v, eps, delta in GRID:
        got, want = module.p_value(m, r, v, eps, delta), _reference_p_value(m, r, v, eps, delta)
        assert got == pytest.approx(want, rel=1e-9, abs=1e-15), f"p_value{(m, r, v, eps, delta)} = {got}, the theorem gives {want}"


def test_the_p_value_is_the_theorem():
    from raco_bench.audit import one_run

    check_p_value_matches_the_theorem(one_run)


P_VALUE_BUGS = {
    "m delta instead of 2 m delta": [("    return min(1.0, tail + 2.0 * m * delta * alpha)", "    return min(1.0, tail + m * delta * alpha)")],
    "window sum not divided by i": [("    alpha = float((np.cumsum(below) / np.arange(1, v + 1)).max())", "    alpha = float(np.cumsum(below).max())")],
    "tail from v + 1": [("    tail = float(stats.binom.sf(v - 1, r, p))", "    tail = float(stats.binom.sf(v, r, p))")],
}


@pytest.mark.parametrize("bug", list(P_VALUE_BUGS))
def test_a_planted_bug_in_the_p_value_is_caught(bug):
    import pathlib

    from mutants import first_catch, load_mutant

    path = pathlib.Path(__file__).resolve().parents[1] / "raco_bench/audit/one_run.py"
    module = load_mutant(path.read_text(), P_VALUE_BUGS[bug], bug, "one_run_mutant_", "raco_bench/audit/one_run.py")
    assert first_catch(module, [check_p_value_matches_the_theorem]), f"planted bug not caught: {bug}"


def test_epsilon_lower_inverts_the_p_value():
    eps = epsilon_lower(1000, 200, 150, 1e-5, 0.05)
    assert p_value(1000, 200, 150, eps * 0.999, 1e-5) < 0.05 <= p_value(1000, 200, 150, eps * 1.01, 1e-5)


def test_one_run_audits_a_real_run_and_has_power_when_privacy_is_weak():
    """At a claimed ε of 1 RaCO-DP stays below it; DP-SGD at σ = 0.3 (claimed ε in the hundreds) is caught memorising."""
    strict = run_one_run(OneRunAudit(method="raco-dp", canaries=300))
    assert strict.bound.epsilon_lower <= strict.claimed_epsilon, strict.summary()
    weak = run_one_run(OneRunAudit(method="dp-sgd", epsilon=1000.0, canaries=1000, steps=2000, params=(("noise_multiplier", 0.3),)))
    assert weak.bound.epsilon_lower > 1.5, weak.summary()
    assert weak.bound.epsilon_lower <= weak.claimed_epsilon


def test_a_non_private_method_or_a_non_record_claim_is_refused():
    with pytest.raises(ValueError, match="not private"):
        OneRunAudit(method="sgda").validate()
    with pytest.raises(ValueError, match="not record-level"):
        run_one_run(OneRunAudit(method="pf-ld", canaries=50))
