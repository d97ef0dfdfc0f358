"""Accounted random search (raco_bench/privacy/tuning.py) against dp-accounting's repeat-and-select event,
where dp-accounting can express the training (a Poisson-subsampled Gaussian)."""

from __future__ import annotations

import dp_accounting
import numpy as np
import pytest

from raco_bench.privacy.accounting import StepMechanism
from raco_bench.privacy.rdp import ORDERS, RdpCurve
from raco_bench.privacy.tuning import repeat_and_select, tnb_gamma, tnb_mean


@pytest.mark.parametrize("shape", [0.0, 0.5, 1.0, 3.0])
def test_gamma_gives_the_mean(shape):
    for mean in (2.0, 10.0, 50.0):
        assert tnb_mean(shape, tnb_gamma(shape, mean)) == pytest.approx(mean, rel=1e-9)


@pytest.mark.parametrize("shape, mean", [(0.0, 10.0), (1.0, 10.0), (0.5, 30.0), (2.0, 5.0)])
def test_repeat_and_select_equals_dp_accounting_on_dp_sgd(shape, mean):
    q, sigma, T = 0.035, 4.0, 500
    ints = [a for a in ORDERS if float(a).is_integer()]  # orders where the two RDP curves agree exactly
    inner = dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), T)
    acc = dp_accounting.rdp.RdpAccountant(ints)
    acc.compose(dp_accounting.dp_event.RepeatAndSelectDpEvent(inner, mean, shape))
    curve = RdpCurve.of_steps(StepMechanism(q, sigma, None), T, tuple(ints))
    ours = repeat_and_select(curve, mean, shape)
    np.testing.assert_allclose(np.array(ours.values), np.array(acc._rdp), rtol=1e-6)
    assert ours.epsilon(1e-5) == pytest.approx(acc.get_epsilon(1e-5), rel=1e-6)
    assert ours.epsilon(1e-5) > curve.epsilon(1e-5)  # tuning costs privacy


def test_tuned_steps_fit_the_end_to_end_budget_and_cost_steps():
    from raco_bench.privacy.accounting import max_steps
    from raco_bench.privacy.tuning import end_to_end_epsilon, tuned_max_steps

    mech = StepMechanism(1024 / 28829, 4.0, 2.0)  # RaCO-DP's default step on Adult
    T = tuned_max_steps(mech, 3.0, 1e-5, mean=10.0, shape=1.0)
    assert T >= 1
    assert end_to_end_epsilon(mech, T, 1e-5, 10.0, 1.0) <= 3.0 < end_to_end_epsilon(mech, T + 1, 1e-5, 10.0, 1.0)
    assert T < max_steps(mech, 3.0, 1e-5)  # accounting for the tuning leaves fewer steps than one untuned run gets
