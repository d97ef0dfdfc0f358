"""The batch-revealed accountant (raco_bench/privacy/batch_revealed.py): exact against dp-accounting where the two
coincide (q = 1), between amplified and unamplified accounting otherwise, and its δ(ε) against a simulation of the
privacy loss that draws which steps sample the record."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest

from raco_bench.privacy.batch_revealed import RevealedBatchNoise, RevealedBatchPlan, gaussian_delta

DELTA = 1e-5


def _dp_accounting(events, delta=DELTA) -> float:
    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    for event, count in events:
        acc.compose(event, count)
    return acc.get_epsilon(delta)


@pytest.mark.parametrize("sigma, T", [(2.0, 1), (10.0, 50), (30.0, 400)])
def test_full_sampling_equals_dp_accounting_composition(sigma, T):
    ours = RevealedBatchPlan(T, 1.0, sigma).epsilon(DELTA)
    assert ours == pytest.approx(_dp_accounting([(dp_accounting.GaussianDpEvent(sigma), T)]), rel=5e-3)


@pytest.mark.parametrize("q, sigma, T", [(0.05, 1.0, 200), (0.2, 3.0, 100)])
def test_sampling_lies_between_amplified_and_unamplified(q, sigma, T):
    ours = RevealedBatchPlan(T, q, sigma).epsilon(DELTA)
    amplified = _dp_accounting([(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), T)])
    unamplified = _dp_accounting([(dp_accounting.GaussianDpEvent(sigma), T)])
    assert amplified < ours < unamplified


def test_delta_matches_a_simulation_of_the_privacy_loss():
    """δ(ε) = E_P[(1 − e^{ε − L})₊] with L the sum over steps of (sampled) · N(μ²/2, μ²), simulated directly."""
    rng = np.random.default_rng(0)
    T, q, sigma, fixed = 20, 0.3, 1.5, 0.2
    n = 2_000_000
    k = rng.binomial(T, q, size=n)  # how many steps sampled the record
    mu2 = k / sigma**2 + fixed
    loss = rng.normal(mu2 / 2, np.sqrt(mu2))
    plan = RevealedBatchPlan(T, q, sigma, fixed)
    for eps in (0.5, 1.5, 3.0):
        simulated = float(np.mean(np.clip(1 - np.exp(eps - loss), 0, None)))
        assert plan.delta(eps) == pytest.approx(simulated, rel=0.02, abs=1e-5)


def test_gaussian_delta_is_the_analytic_gaussian_mechanism():
    from scipy.stats import norm

    for eps, mu in ((0.5, 1.0), (3.0, 0.7), (40.0, 2.0)):
        expected = norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)
        assert float(gaussian_delta(eps, np.array([mu]))[0]) == pytest.approx(max(expected, 0.0), abs=1e-12)
    assert float(gaussian_delta(1.0, np.array([0.0]))[0]) == 0.0


def test_calibrated_noise_meets_the_budget_and_no_less_noise_does():
    problem = RevealedBatchNoise(steps=300, sampling_rate=0.05, unsampled=15, unsampled_share=0.25, fixed_mu2=0.001,
                                 target_epsilon=1.0, delta=DELTA)
    sigma = problem.solve()
    assert problem.within_budget(sigma) and problem.spent(sigma) <= 1.0
    assert problem.spent(sigma * 0.99) > 1.0
    sampled, unsampled = problem.multipliers(sigma)
    # the mean μ² of the sampled and unsampled releases is 1/σ²
    assert 0.05 * 300 / sampled**2 + 15 / unsampled**2 == pytest.approx(1 / sigma**2)
