"""Mechanism events (raco_bench/privacy/events.py; docs/privacy.md, "Mechanism events"): each event's RDP curve agrees with
dp-accounting's own RDP accountant where it has one, and each private method's events say what its run releases: their PLD
ε is the ε the method reports (its own accounting), and for budget tailoring, which reports a zCDP conversion, their ρ is the
sum of the ρ its noise is calibrated from. Planted bugs in the events module and in each method's events go red."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
from dp_accounting import dp_event as ev
from dp_accounting.rdp import rdp_privacy_accountant as dp_rdp

from raco_bench.methods import get_method
from raco_bench.methods.base import Budget
from raco_bench.privacy import events
from raco_bench.privacy.rdp import ORDERS, laplace_rdp
from raco_bench.training.config import RunConfig
from raco_bench.training.loop import prepare_run

sys.path.insert(0, str(Path(__file__).parent))
from mutants import first_catch, load_mutant  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
INTEGER_ORDERS = tuple(float(a) for a in ORDERS if a == int(a))


# ---------------------------------------------------------------- the events module against dp-accounting


def check_rdp_matches_dp_accounting(module) -> None:
    """Gaussian, Poisson-sampled Gaussian and Laplace curves, and their compositions, equal dp-accounting's (integer orders)."""
    orders = np.array(INTEGER_ORDERS)
    gauss = module.rdp(ev.GaussianDpEvent(3.0), INTEGER_ORDERS)
    assert np.allclose(gauss, orders / (2 * 9.0), rtol=1e-9), "Gaussian RDP"
    sampled = module.rdp(ev.PoissonSampledDpEvent(0.03, ev.GaussianDpEvent(2.0)), INTEGER_ORDERS)
    theirs = dp_rdp._compute_rdp_poisson_subsampled_gaussian(0.03, 2.0, orders)
    assert np.allclose(sampled, theirs, rtol=1e-6, atol=1e-12), "Poisson-sampled Gaussian RDP"
    acct = dp_rdp.RdpAccountant(list(INTEGER_ORDERS))
    acct.compose(ev.LaplaceDpEvent(2.5))
    assert np.allclose(module.rdp(ev.LaplaceDpEvent(2.5), INTEGER_ORDERS), acct._rdp, rtol=1e-9), "Laplace RDP"
    both = ev.ComposedDpEvent((ev.SelfComposedDpEvent(ev.PoissonSampledDpEvent(0.03, ev.GaussianDpEvent(2.0)), 50), ev.LaplaceDpEvent(2.5)))
    acct = dp_rdp.RdpAccountant(list(INTEGER_ORDERS))
    acct.compose(both)
    assert np.allclose(module.rdp(both, INTEGER_ORDERS), acct._rdp, rtol=1e-6), "composition"


def check_pld_matches_dp_accounting(module) -> None:
    from dp_accounting.pld.pld_privacy_accountant import PLDAccountant

    e = ev.ComposedDpEvent((ev.SelfComposedDpEvent(ev.PoissonSampledDpEvent(0.02, ev.GaussianDpEvent(1.5)), 100), ev.LaplaceDpEvent(4.0),
                            ev.GaussianDpEvent(20.0)))
    theirs = PLDAccountant(value_discretization_interval=1e-4).compose(e).get_epsilon(1e-5)
    assert module.epsilon(e, 1e-5) == pytest.approx(theirs, rel=1e-3), "PLD epsilon"


def test_the_events_agree_with_dp_accounting():
    check_rdp_matches_dp_accounting(events)
    check_pld_matches_dp_accounting(events)


def test_the_joint_step_is_at_least_its_parts_and_zcdp_is_linear():
    joint = events.SharedBatchStepEvent(0.03, 4.0, 2.0)
    gauss = ev.PoissonSampledDpEvent(0.03, ev.GaussianDpEvent(4.0))
    assert np.all(events.rdp(joint) >= events.rdp(gauss) - 1e-12)
    assert np.allclose(events.rdp(ev.ZCDpEvent(0.1)), 0.1 * np.array(ORDERS))
    with pytest.raises(events.UnsupportedEvent, match="zCDP"):
        events.pld(ev.ZCDpEvent(0.1))
    with pytest.raises(events.UnsupportedEvent, match="SampledWithReplacement"):
        events.rdp(ev.SampledWithReplacementDpEvent(100, 10, ev.GaussianDpEvent(1.0)))


EVENT_BUGS = {
    "Gaussian RDP at half its value": [("        return a / (2 * event.noise_multiplier**2) if", "        return a / (4 * event.noise_multiplier**2) if")],
    "sampled Gaussian at the wrong rate": [("        mech = StepMechanism(event.sampling_probability, inner.noise_multiplier if gauss",
                                            "        mech = StepMechanism(event.sampling_probability / 2, inner.noise_multiplier if gauss")],
    "composition keeps only the first event": [("        return sum((_rdp(e, orders) for e in event.events), np.zeros_like(a))",
                                                "        return _rdp(event.events[0], orders)")],
    "self-composition counted once": [("        return event.count * _rdp(event.event, orders)", "        return _rdp(event.event, orders)")],
    "PLD of a composition drops the rest": [("            out = out.compose(part(e))", "            out = out")],
}


@pytest.mark.parametrize("bug", list(EVENT_BUGS))
def test_a_planted_bug_in_the_events_is_caught(bug):
    module = load_mutant((ROOT / "raco_bench/privacy/events.py").read_text(), EVENT_BUGS[bug], bug, "events_mutant_", "raco_bench/privacy/events.py")
    assert first_catch(module, [check_rdp_matches_dp_accounting, check_pld_matches_dp_accounting]), f"planted bug not caught: {bug}"


# ---------------------------------------------------------------- each method's events against its own accounting

RUNS = {  # a private record-level run of each method, on Adult, with a private checkpoint selection (its releases are events too)
    "raco-dp": dict(steps=200, epsilon=10.0),
    "dp-sgd": dict(steps=200, epsilon=10.0),
    "dp-fermi": dict(steps=200, epsilon=10.0, params={"noise_multiplier": 2.0, "privacy": "full"}),
    "dp-postprocess": dict(steps=200, epsilon=10.0, params={"privacy": "full"}),
    "budget-tailoring": dict(steps=20, epsilon=2.0),
}
PLUGINS = {"raco-dp": ("raco_bench/methods/lagrangian/plugin.py", "RacoDP"), "dp-sgd": ("raco_bench/methods/lagrangian/plugin.py", "DPSGD"),
           "dp-fermi": ("baselines/dp_fermi/plugin.py", "DPFermi"), "dp-postprocess": ("baselines/dp_postprocess/plugin.py", "DPPostprocess"),
           "budget-tailoring": ("baselines/budget_tailoring/plugin.py", "BudgetTailoring")}


@pytest.fixture(scope="module")
def prepared(adult):
    out = {}
    for name, run in RUNS.items():
        cfg = RunConfig(dataset="adult", method=name, epsilon=run["epsilon"], steps=run["steps"], checkpoint="private", params=run.get("params", {}))
        out[name] = prepare_run(cfg, adult)
    return out


def check_events_state_the_run(method, run) -> None:
    """The events of ``method`` (the real plugin or a mutant's) for the prepared ``run`` (prepared by the real plugin)."""
    ctx = run.ctx
    budget = Budget(ctx.config.epsilon, ctx.config.delta, ctx.config.max_steps, ctx.steps, ctx.config.selection)
    event = method.privacy_event(ctx.hyper, ctx.n_train, budget)
    reported = float(ctx.privacy["epsilon_spent"])
    if method.name != "budget-tailoring":
        assert events.epsilon(event, ctx.config.delta) == pytest.approx(reported, rel=2e-3), f"{method.name}: events' epsilon vs the reported one"
        return
    z = ctx.plan.budget  # the ρ the method's noise is calibrated from, release by release
    curve = events.rdp(event)
    sel = ctx.config.selection
    expected = np.array(ORDERS) * (z.counts + z.stage1 + z.stage2) + sel.count * laplace_rdp(sel.laplace_scale)
    assert np.allclose(curve, expected, rtol=1e-9), f"{method.name}: events' RDP vs its rho accounting"
    assert events.epsilon(event, ctx.config.delta, "rdp") <= reported * (1 + 1e-9)


@pytest.mark.parametrize("name", list(RUNS))
def test_each_method_events_state_what_its_run_releases(name, prepared):
    check_events_state_the_run(get_method(name), prepared[name])


METHOD_EVENT_BUGS = {
    "raco-dp": ("selection releases left out", [("        return events.compose(SelfComposedDpEvent(events.step_event(mech), int(budget.steps)), "
                                                 "events.selection_event(budget.selection))",
                                                 "        return SelfComposedDpEvent(events.step_event(mech), int(budget.steps))")]),
    "dp-sgd": ("one step fewer", [("SelfComposedDpEvent(events.step_event(mech), int(budget.steps))",
                                   "SelfComposedDpEvent(events.step_event(mech), int(budget.steps) - 1)")]),
    "dp-fermi": ("two blocks counted as one",
                 [("GaussianDpEvent(hyper.noise_multiplier / math.sqrt(plan.blocks))", "GaussianDpEvent(hyper.noise_multiplier)")]),
    "dp-postprocess": ("histogram left out", [("        return events.compose(base, LaplaceDpEvent(self.histogram_scale(hyper, budget.epsilon)), ",
                                               "        return events.compose(base, ")]),
    "budget-tailoring": ("stage 1 left out", [("GaussianDpEvent(1.0 / math.sqrt(2 * (z.total - z.selection)))",
                                               "GaussianDpEvent(1.0 / math.sqrt(2 * z.stage2))")]),
}


@pytest.mark.parametrize("name", list(METHOD_EVENT_BUGS))
def test_a_planted_bug_in_a_method_events_is_caught(name, prepared):
    bug, edits = METHOD_EVENT_BUGS[name]
    path, cls = PLUGINS[name]
    module = load_mutant((ROOT / path).read_text(), edits, f"{name} {bug}", "plugin_events_mutant_", path)
    caught = first_catch(module, [lambda m: check_events_state_the_run(getattr(m, cls)(), prepared[name])])
    assert caught, f"planted bug not caught: {name}: {bug}"


def test_claims_that_are_not_record_level_have_no_events():
    n = 30162
    budget = Budget(1.0, 1e-5, 1000, 100, None)
    for name, params in (("dp-fermi", {"privacy": "sensitive-attribute", "noise_multiplier": 2.0}), ("dp-postprocess", {"privacy": "sensitive-attribute"}),
                         ("pf-ld", {})):
        m = get_method(name)
        with pytest.raises(events.UnsupportedEvent):
            m.privacy_event(m.hyperparameters(params), n, budget)
    assert get_method("sgda").privacy_event(get_method("sgda").hyperparameters({}), n, budget) is None
    assert math.isinf(events.epsilon(ev.NonPrivateDpEvent(), 1e-5))
