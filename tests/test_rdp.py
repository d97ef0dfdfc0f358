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
