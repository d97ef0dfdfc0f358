"""Adding a method touches only its folder and one registry line (docs/architecture.md, "Adding a method").

tests/toy_plugin/ is a method written from scratch: a plugin, a batched engine and an audit view. Registered by one
entry in the registry (here, for the test's duration), it trains alone and in packs, is tuned with accounted tuning
and audited by the white-box audit, through the suite's unchanged core."""

from __future__ import annotations

import numpy as np
import pytest

from raco_bench.methods import REGISTRY

TOY = "toy-dp-sgd"


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(REGISTRY, TOY, "toy_plugin.plugin:ToyDPSGD")  # the one registry line
    yield


def _runs(adult, k: int, **params):
    from raco_bench.privacy.counter_rng import Keystream
    from raco_bench.training.config import RunConfig
    from raco_bench.training.loop import prepare_run

    source = Keystream.for_mode("reproducible")
    return [prepare_run(RunConfig(dataset="adult", method=TOY, epsilon=1.0, seed=i, eval_every=25, params={"lr": 0.1 * (i + 1), **params},
                                  randomness="reproducible"), adult, source=source) for i in range(k)]


def test_the_toy_trains_alone_and_in_a_pack_to_the_same_models(registered, adult, one_torch_thread):
    from raco_bench.training.loop import execute
    from raco_bench.training.pack import pack_blocker, train_runs

    runs = _runs(adult, 3, default_steps=60)
    assert all(pack_blocker(r) is None for r in runs)
    assert 0 < runs[0].ctx.privacy["epsilon_spent"] <= 1.0 and runs[0].ctx.steps > 60  # T calibrated to ε through the toy's events
    packed = train_runs(runs)
    alone = [execute(r) for r in _runs(adult, 3, default_steps=60)]
    for a, b in zip(packed, alone):
        assert a.steps == b.steps and np.allclose(a.final_params["weight"], b.final_params["weight"], atol=1e-5)
        assert [h["step"] for h in a.history] == [h["step"] for h in b.history]  # the same evaluations, the same recorder
        assert a.last["test"]["accuracy"] == pytest.approx(b.last["test"]["accuracy"], abs=1e-4)


def test_the_toy_is_tuned_with_accounted_tuning_within_its_claim(registered):
    import numpy as np

    from raco_bench.methods import get_method
    from raco_bench.methods.base import Budget
    from raco_bench.privacy.counter_rng import Keystream
    from raco_bench.privacy.tuning_profile import ProfilePoints, hockey_stick, release_epsilon, run_pld
    from raco_bench.sweeps import accounted
    from raco_bench.sweeps.plan import make_trial
    from raco_bench.sweeps.spec import SweepSpec

    spec = SweepSpec(dataset="adult", epsilons=(2.0,), gammas=(0.05,), methods=(TOY,), tuning="accounted", checkpoint="private",
                     tuning_repeats=1, tuning_mean=3.0, max_steps=2000)
    trials, refs = accounted.accounted_trials(spec, 28_829, lambda m, e, g, c, p, s: make_trial(spec, 1, m, e, g, c, p, s), Keystream.fresh())
    ref, plugin = refs[(TOY, 2.0)], get_method(TOY)
    assert ref.knob == "steps" and ref.epsilon_end_to_end <= 2.0 and trials
    p = ref.points
    deltas = np.max([hockey_stick(run_pld(plugin.privacy_event(plugin.hyperparameters(t["params"]), 28_829,
                                                               Budget(2.0, spec.delta, spec.max_steps, t["steps"], spec.selection))),
                                  [p.eps_tilde, p.eps_hat]) for t in trials if not t.get("skip")], axis=0)
    worst = ProfilePoints(p.eps_tilde, float(deltas[0]), p.eps_hat, float(deltas[1]))
    assert release_epsilon(spec.rounds, worst, spec.delta) <= ref.epsilon_end_to_end + 1e-9


def test_the_toy_is_audited_by_the_white_box_audit(registered, one_torch_thread):
    from raco_bench.audit.whitebox import WhiteBoxAudit, auditable, run_whitebox

    assert TOY in auditable()
    r = run_whitebox(WhiteBoxAudit(method=TOY, runs=20_000, rows=64, sampling_rate=1.0))
    assert r.claimed_epsilon == pytest.approx(1.0, rel=2e-3)  # the toy calibrates its own T; with steps=1 its σ is the audited one
    assert r.bound.epsilon_lower <= r.claimed_epsilon, r.summary()
    assert r.bound.epsilon_lower >= 0.1, r.summary()  # the audit sees the toy's releases
