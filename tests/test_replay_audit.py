"""The seed-replay membership attack (raco_bench/audit/replay.py) as a regression test of secret randomness.

An attacker who reads a run's logs (its configuration and seed) and knows D and the record replays training in
both worlds. Under ``randomness=reproducible`` that regenerates the run's noise, every released model is
reproduced exactly, and the audited ε̂ is far above the claim; under ``randomness=secret`` (the default) no
replay reproduces any run and ε̂ stays at or below the claim (docs/privacy.md, "Threat model")."""

from __future__ import annotations

import pytest

from raco_bench.audit.replay import ReplayAttack, run_replay

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def test_replaying_logged_seeds_breaks_reproducible_runs_only():
    loud = run_replay(ReplayAttack(randomness="reproducible", runs=100))
    print(loud.summary())
    assert loud.exact_replays == 200  # every released model regenerated from what its run logged
    assert loud.bound.epsilon_lower > 2 * loud.claimed_epsilon  # 2.39 at 50 counted runs per world, a claim of 0.99

    quiet = run_replay(ReplayAttack(randomness="secret", runs=100))
    print(quiet.summary())
    assert quiet.exact_replays == 0
    assert quiet.bound.epsilon_lower <= quiet.claimed_epsilon


def test_the_attack_refuses_too_few_runs():
    with pytest.raises(ValueError, match="at least 20 released models"):
        ReplayAttack(runs=10).validate()
