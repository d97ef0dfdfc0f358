"""The one-run audit's bounds (Steinke, Nasr & Jagielski 2023; the f-DP bound of Mahloujifar, Melis & Chaudhuri 2025, against
jax-privacy's implementation on saved scores) and the audit end to end on a real run."""

from __future__ import annotations

import pathlib

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
    assert all(b.epsilon_lower <= strict.claimed_epsilon for b in strict.bounds.values()), strict.summary()
    weak = run_one_run(OneRunAudit(method="dp-sgd", epsilon=1000.0, canaries=1000, steps=2000, params=(("noise_multiplier", 0.3),)))
    assert weak.bound.epsilon_lower > 1.5, weak.summary()
    assert weak.bounds["fdp"].epsilon_lower >= weak.bounds["snj"].epsilon_lower  # the same guesses, the tighter bound
    assert weak.bound.epsilon_lower <= weak.claimed_epsilon
    assert set(weak.metrics()) >= {"epsilon_audited", "epsilon_audited_snj", "epsilon_audited_fdp"}


def test_a_non_private_method_or_a_non_record_claim_is_refused():
    with pytest.raises(ValueError, match="not private"):
        OneRunAudit(method="sgda").validate()
    with pytest.raises(ValueError, match="not record-level"):
        run_one_run(OneRunAudit(method="pf-ld", canaries=50))
    with pytest.raises(ValueError, match="invalid bounds"):
        OneRunAudit(bounds=("snj", "rdp")).validate()


# ---------------------------------------------------------------- the f-DP bound (raco_bench/audit/fdp.py)

FIXTURE = pathlib.Path(__file__).resolve().parent / "fixtures" / "one_run_fdp_jax.json"


def check_fdp_matches_jax_privacy(module) -> None:
    """The suite's guesses on saved audit scores, and both bounds on them, against jax-privacy's (tests/fixtures/README.md)."""
    import json

    from raco_bench.audit import one_run

    fixture = json.loads(FIXTURE.read_text())
    for f in fixture["files"]:
        record = f["record"]
        scores, included = np.array(record["scores"]), np.array(record["included"], dtype=bool)
        assert [(c["k"], c["r"], c["v"]) for c in f["cases"]] == one_run.guesses(scores, included, tuple(record["guess_fractions"]))
    for c in [c for f in fixture["files"] for c in f["cases"]] + fixture["grid"]:
        got = module.epsilon_lower(c["m"], c["r"], c["v"], c["delta"], c["level"], "gaussian")
        assert got == pytest.approx(c["fdp"], abs=2e-5), f"f-DP bound at (m, r, v) = {(c['m'], c['r'], c['v'])}: {got:.6f}, jax-privacy {c['fdp']:.6f}"
        snj = one_run.epsilon_lower(c["m"], c["r"], c["v"], c["delta"], c["level"])
        assert snj == pytest.approx(c["snj"], abs=2e-5), f"SNJ bound at {(c['m'], c['r'], c['v'])}: {snj:.6f}, jax-privacy {c['snj']:.6f}"


def test_the_fdp_bound_is_jax_privacys_on_saved_scores():
    from raco_bench.audit import fdp

    check_fdp_matches_jax_privacy(fdp)


def _gaussian_scores(rng, m: int, mu: float):
    """Each canary's score N(μ, 1) when in, N(0, 1) when out: exactly μ-GDP in every canary's membership."""
    included = rng.random(m) < 0.5
    return rng.normal(np.where(included, mu, 0.0), 1.0), included


def check_gaussian_bound_holds_on_gaussian_guesses(module) -> None:
    """On the Gaussian mechanism whose trade-off is the hypothesis' own shape, ε̂ exceeds the true ε in at most ~5 % of audits."""
    from raco_bench.audit import one_run

    rng = np.random.default_rng(1)
    mu, delta = 0.8, 1e-5
    true_eps = brentq_eps(mu, delta)
    over = 0
    for _ in range(100):
        scores, included = _gaussian_scores(rng, 1000, mu)
        (k, r, v), = one_run.guesses(scores, included, (0.2,))
        over += module.epsilon_lower(1000, r, v, delta, 0.05, "gaussian") > true_eps
    assert over <= 10, f"the f-DP bound exceeded the true epsilon {true_eps:.3f} in {over} of 100 audits"


def brentq_eps(mu: float, delta: float) -> float:
    """ε of μ-GDP at δ."""
    from scipy import optimize

    from raco_bench.audit.fdp import gaussian_delta

    return optimize.brentq(lambda e: gaussian_delta(mu, e) - delta, 0.0, 50.0)


def check_dp_bound_holds_on_randomised_response(module) -> None:
    """Under the (ε, δ) curve family the bound holds for any mechanism: on ε-DP randomised response it exceeds ε in at most ~5 %."""
    rng = np.random.default_rng(0)
    eps, m, over = 1.0, 2000, 0
    for _ in range(100):
        right = rng.random(m) < special.expit(eps)
        over += module.epsilon_lower(m, m, int(right.sum()), 1e-5, 0.05, "dp") > eps
    assert over <= 10, f"the (epsilon, delta)-curve f-DP bound exceeded epsilon in {over} of 100 audits"


def test_each_fdp_family_holds_at_its_confidence_on_its_own_mechanism():
    from raco_bench.audit import fdp

    check_gaussian_bound_holds_on_gaussian_guesses(fdp)
    check_dp_bound_holds_on_randomised_response(fdp)
    assert fdp.gaussian_delta(fdp.gaussian_mu(2.0, 1e-5), 2.0) == pytest.approx(1e-5, rel=1e-6)


FDP_BUGS = {
    "the starting mass without the level": [("    right, wrong = level * v / m, level * (r - v) / m", "    right, wrong = v / m, (r - v) / m")],
    "one more wrong guess per level": [("right + i / (r - i) * (needed - wrong)", "right + (i + 1) / (r - i) * (needed - wrong)")],
    "the Gaussian hypothesis at 0.9 mu": [("        return lambda y: float(special.ndtr(special.ndtri(min(max(y, 0.0), 1.0)) - mu))",
                                           "        return lambda y: float(special.ndtr(special.ndtri(min(max(y, 0.0), 1.0)) - 0.9 * mu))")],
    "the blow-up's delta left out": [("        return lambda y: max(0.0, (y - delta) / e, 1.0 - delta - e * (1.0 - y))",
                                      "        return lambda y: max(0.0, y / e, 1.0 - e * (1.0 - y))")],
}


@pytest.mark.parametrize("bug", list(FDP_BUGS))
def test_a_planted_bug_in_the_fdp_bound_is_caught(bug):
    from mutants import first_catch, load_mutant

    path = pathlib.Path(__file__).resolve().parents[1] / "raco_bench/audit/fdp.py"
    module = load_mutant(path.read_text(), FDP_BUGS[bug], bug, "fdp_mutant_", "raco_bench/audit/fdp.py")
    checks = [check_fdp_matches_jax_privacy, check_gaussian_bound_holds_on_gaussian_guesses, check_dp_bound_holds_on_randomised_response]
    if "delta left out" in bug:  # the (ε, δ) family, which jax-privacy does not compute: its own check, at a δ that matters
        checks = [lambda m: check_dp_family_with_delta(m)]
    assert first_catch(module, checks), f"planted bug not caught: {bug}"


def check_dp_family_with_delta(module) -> None:
    """The (ε, δ)-curve hypothesis at a large δ: f̄⁻¹(y) = max(0, (y − δ)e^{−ε}, 1 − δ − e^ε(1 − y)) written out."""
    inverse = module.blow_up_inverse("dp", 1.0, 0.1)
    for y in (0.05, 0.2, 0.5, 0.95):
        want = max(0.0, (y - 0.1) / np.e, 1 - 0.1 - np.e * (1 - y))
        assert inverse(y) == pytest.approx(want), f"f̄⁻¹({y}) = {inverse(y)}, the (epsilon, delta) curve gives {want}"
