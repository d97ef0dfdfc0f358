"""RDP of the per-step mechanisms (raco_bench/privacy/rdp.py): dp-accounting's RDP in its limit cases (a pure
Poisson-subsampled Gaussian, a pure Laplace), the quadrature of the add direction, and consistency with the PLD."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest

from raco_bench.privacy.accounting import StepMechanism, epsilon
from raco_bench.privacy.rdp import ORDERS, RdpCurve, add_rdp, remove_rdp, step_rdp

INTEGER = np.array([float(a).is_integer() for a in ORDERS])


def _dp_accounting_rdp(event) -> np.ndarray:
    acc = dp_accounting.rdp.RdpAccountant(list(ORDERS))
    acc.compose(event)
    return np.array(acc._rdp)


@pytest.mark.parametrize("q, sigma", [(0.035, 4.0), (0.2, 1.5), (0.01, 0.8), (1.0, 2.0)])
def test_gaussian_limit_equals_dp_accounting(q, sigma):
    event = dp_accounting.GaussianDpEvent(sigma)
    reference = _dp_accounting_rdp(dp_accounting.PoissonSampledDpEvent(q, event) if q < 1 else event)
    ours = step_rdp(StepMechanism(q, sigma, None))
    np.testing.assert_allclose(ours[INTEGER], reference[INTEGER], rtol=1e-9)
    if q <= 0.05:  # fractional orders: the next integer's value, an upper bound (dp-accounting's own series does not converge at q = 0.2)
        assert (ours >= reference * (1 - 1e-9)).all()


@pytest.mark.parametrize("scale", [0.5, 1.0, 3.0])
def test_laplace_limit_equals_dp_accounting(scale):
    reference = _dp_accounting_rdp(dp_accounting.LaplaceDpEvent(scale))
    np.testing.assert_allclose(step_rdp(StepMechanism(1.0, None, scale))[INTEGER], reference[INTEGER], rtol=1e-9)


def test_add_direction_quadrature_is_converged_and_the_gaussian_case_is_dominated():
    from raco_bench.privacy import rdp

    for a in (2.0, 8.0, 64.0):
        base = add_rdp(0.035, 1 / 16, 2.0, a)
        before = (rdp.HERMITE_NODES, rdp.LEGENDRE_NODES)
        try:
            rdp.HERMITE_NODES, rdp.LEGENDRE_NODES = 2 * before[0], 2 * before[1]
            assert add_rdp(0.035, 1 / 16, 2.0, a) == pytest.approx(base, rel=1e-8)
        finally:
            rdp.HERMITE_NODES, rdp.LEGENDRE_NODES = before
        assert add_rdp(0.2, 1 / 2.25, None, a) <= remove_rdp(0.2, 1 / 2.25, None, int(a)) * (1 + 1e-9)  # Mironov et al.: remove dominates


def test_joint_step_rdp_epsilon_upper_bounds_the_pld_epsilon():
    mech = StepMechanism(1024 / 28829, 4.0, 2.0)
    rdp_eps = RdpCurve.of_steps(mech, 1000).epsilon(1e-5)
    pld_eps = epsilon(mech, 1000, 1e-5)
    assert pld_eps <= rdp_eps <= 1.3 * pld_eps
    assert math.isfinite(rdp_eps)


def test_independent_batches_and_a_private_selection_compose_as_dp_accounting_does():
    from raco_bench.privacy.accounting import SelectionRelease

    q, sigma, scale, T = 0.035, 4.0, 3.0, 200
    mech = StepMechanism(q, sigma, scale, histogram_batch="independent")
    ints = tuple(a for a in ORDERS if float(a).is_integer())
    acc = dp_accounting.rdp.RdpAccountant(list(ints))
    acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), T)
    acc.compose(dp_accounting.LaplaceDpEvent(50.0), 5)
    ours = RdpCurve.of_run(StepMechanism(q, sigma, None), T, SelectionRelease(50.0, 5), ints)
    np.testing.assert_allclose(np.array(ours.values), np.array(acc._rdp), rtol=1e-9)
    # the independent histogram adds a subsampled Laplace, so it costs more than the Gaussian alone and less than unsubsampled
    both = RdpCurve.of_steps(mech, T, ints).epsilon(1e-5)
    assert RdpCurve.of_steps(StepMechanism(q, sigma, None), T, ints).epsilon(1e-5) < both
    assert both < RdpCurve.of_steps(StepMechanism(q, sigma, None), T, ints).compose(
        RdpCurve.of_steps(StepMechanism(1.0, None, scale), T, ints)).epsilon(1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("alpha", [2.0, 6.0])
def test_add_direction_equals_a_direct_integration_over_the_outputs(alpha):
    """D_α(P₀‖μ) = 1/(α−1)·log ∫∫ p₀^α μ^{1−α} over (Gaussian output, Laplace output), integrated directly from the
    two densities (independent of the privacy-loss representation the module uses)."""
    from scipy import integrate, stats

    q, sigma, b = 0.2, 1.2, 1.5

    def integrand(y: float, x: float) -> float:
        p0 = stats.norm.pdf(x, 0, sigma) * stats.laplace.pdf(y, 0, b)
        p1 = stats.norm.pdf(x, 1, sigma) * stats.laplace.pdf(y, 1, b)
        mu = (1 - q) * p0 + q * p1
        return p0**alpha * mu ** (1 - alpha) if p0 > 0 else 0.0

    value, _ = integrate.dblquad(integrand, -10 * sigma, 1 + 10 * sigma, -30 * b, 1 + 30 * b, epsabs=1e-10, epsrel=1e-7)
    assert add_rdp(q, sigma**-2, b, alpha) == pytest.approx(math.log(value) / (alpha - 1), rel=1e-4)
