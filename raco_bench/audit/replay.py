"""The seed-replay membership attack: whoever reads a run's logs tries to regenerate its noise.

The attacker of differential privacy knows D, the target record x, the algorithm and, here, everything the
run logged: its configuration with its seed, and its released model. World D trains on D, world D′ on
D ∪ {x}. For each released model the attacker replays training in both worlds with the counter generator's
reproducible words for the logged configuration, and compares: the statistic is

    ‖w − w_D‖ − ‖w − w_D′‖,

positive when the released model w is closer to the D′ replay. Under ``randomness=reproducible`` the replay in
the true world reproduces w exactly, so the worlds separate perfectly and the audited ε̂ is limited only by
the number of runs: the printed ε does not hold against the logs. Under ``randomness=secret`` the run's words
are ChaCha20 under a key written nowhere, the replays draw other noise, and the statistic is one more
test that ε bounds: ε̂ must stay at or below the claim (docs/audit.md, "The replay attack";
docs/privacy.md, "Threat model").

The threshold is chosen on half of each world's runs and counted on the other half
(:func:`raco_bench.audit.bounds.audit_epsilon`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from raco_bench.audit.bounds import AuditBound, audit_epsilon, check_confidence, require_record_level
from raco_bench.methods import DEFAULT_METHOD


@dataclass(frozen=True)
class ReplayAttack:
    dataset: str = "adult"
    method: str = DEFAULT_METHOD
    epsilon: float = 1.0
    delta: float = 1e-5
    randomness: str = "secret"  # the victims' randomness: what the attack is run against
    runs: int = 200  # released models per world
    train_rows: int | None = 2000  # D: the first rows of the training split (the replays train this many rows each)
    steps: int | None = None  # T of the victims (None: the most the budget allows)
    confidence: float = 0.95
    params: tuple = (("batch_size", 256),)  # method hyperparameter overrides, as (key, value) pairs (q = 256 / 2,000 by default)

    def validate(self) -> None:
        from raco_bench.privacy.counter_rng import RANDOMNESS_MODES

        check_confidence(self.confidence)
        if self.randomness not in RANDOMNESS_MODES:
            raise ValueError(f"invalid randomness={self.randomness!r}: choose one of {RANDOMNESS_MODES}")
        if self.runs < 20:
            raise ValueError(f"invalid runs={self.runs}: at least 20 released models per world (half choose the test, half are counted)")
        if self.train_rows is not None and self.train_rows < 10:
            raise ValueError(f"invalid train_rows={self.train_rows}: at least 10 rows (or none for the whole split)")


@dataclass(frozen=True)
class ReplayResult:
    attack: ReplayAttack
    bound: AuditBound
    claimed_epsilon: float
    statistic_d: np.ndarray
    statistic_d_prime: np.ndarray
    exact_replays: int  # released models that a replay reproduced to 1e-5 (the attacker regenerated their noise)

    def summary(self) -> str:
        a, r = self.attack, self.bound
        return (f"replay attack on {a.method} ({a.dataset}, {a.train_rows or 'all'} training rows, randomness={a.randomness}): "
                f"{self.exact_replays} of {2 * r.runs_per_world} released models reproduced exactly from their logs; "
                f"audited epsilon >= {r.epsilon_lower:.3f} at {r.confidence:.0%} confidence (TPR {r.true_positive_rate:.3f}, "
                f"FPR {r.false_positive_rate:.3f} on the held-out half) against a claimed epsilon of {self.claimed_epsilon:.3f}")

    def params(self) -> dict:
        a = self.attack
        return {"method": a.method, "dataset": a.dataset, "epsilon": a.epsilon, "delta": a.delta, "runs": a.runs, "confidence": a.confidence,
                "steps": a.steps or "the budget's", "sampling_rate": "the configuration's", "variant": f"replay, randomness={a.randomness}",
                "train_rows": a.train_rows or "all", **dict(a.params)}

    def metrics(self) -> dict[str, float]:
        return {"epsilon_claimed": self.claimed_epsilon, "epsilon_audited": self.bound.epsilon_lower, "epsilon_audited_upper": self.bound.epsilon_upper,
                "true_positive_rate": self.bound.true_positive_rate, "false_positive_rate": self.bound.false_positive_rate,
                "exact_replays": float(self.exact_replays)}

    def note(self) -> str:
        return (f"the attacker knows D, the record and every logged setting of each run (seed included), replays its training in both "
                f"worlds with the reproducible generator and compares with the released model; randomness={self.attack.randomness}")


def worlds(attack: ReplayAttack, split_seed: int = 0):
    """(D, D′): the training split (its first ``train_rows`` rows) and the same plus one record, the first test row."""
    from raco_bench.audit.preprocessing import split_of

    table, idx = split_of(attack.dataset, split_seed, attack.train_rows)
    d = table.dataset(split_seed, "public", idx)
    d_prime = table.dataset(split_seed, "public", {**idx, "train": np.append(idx["train"], idx["test"][0])})
    return d, d_prime


def _flat(params: dict) -> np.ndarray:
    return np.concatenate([np.asarray(v, dtype=np.float64).reshape(-1) for v in params.values()])


def _train(configs: list, dataset, source, cache) -> tuple[list[np.ndarray], list]:
    """The released models of ``configs`` on ``dataset``, all drawing from ``source`` (packs where the method has an engine)."""
    from raco_bench.training.loop import prepare_run
    from raco_bench.training.pack import train_runs

    results = train_runs([prepare_run(c, dataset, cache, source=source) for c in configs])
    return [_flat(r.reported_params) for r in results], results


def run_replay(attack: ReplayAttack, progress: Callable[[str], None] | None = None) -> ReplayResult:
    """Train ``runs`` victims per world under ``attack.randomness``, replay each from its logged configuration in both
    worlds, and bound ε from how well the replays tell the worlds apart."""
    from raco_bench.privacy.calibration import CalibrationCache
    from raco_bench.privacy.counter_rng import REPRODUCIBLE, Keystream
    from raco_bench.training.config import RunConfig

    attack.validate()
    d, d_prime = worlds(attack)
    cache = CalibrationCache()
    base = RunConfig(dataset=attack.dataset, method=attack.method, epsilon=attack.epsilon, delta=attack.delta, steps=attack.steps,
                     randomness=attack.randomness, params=dict(attack.params))
    victims = {"D": [replace(base, seed=i) for i in range(attack.runs)],
               "D'": [replace(base, seed=attack.runs + i) for i in range(attack.runs)]}
    released, logged, claimed = {}, {}, None
    for world, data in (("D", d), ("D'", d_prime)):
        if progress:
            progress(f"world {world}: training {attack.runs} victims")
        models, results = _train(victims[world], data, Keystream.for_mode(attack.randomness), cache)
        require_record_level(results[0].privacy, attack.method)
        claimed = max(claimed or 0.0, max(r.privacy["epsilon_spent"] for r in results))
        released[world] = np.stack(models)
        logged[world] = [RunConfig(**{**r.config, "randomness": "reproducible"}) for r in results]  # what the logs hold
    stats, exact = {}, 0
    for world in ("D", "D'"):
        if progress:
            progress(f"world {world}: replaying {attack.runs} logged runs in both worlds")
        replay_d = np.stack(_train(logged[world], d, REPRODUCIBLE, cache)[0])
        replay_dp = np.stack(_train(logged[world], d_prime, REPRODUCIBLE, cache)[0])
        w = released[world]
        dist_d, dist_dp = np.linalg.norm(w - replay_d, axis=1), np.linalg.norm(w - replay_dp, axis=1)
        exact += int((np.minimum(dist_d, dist_dp) < 1e-5).sum())
        stats[world] = dist_d - dist_dp
    bound = audit_epsilon(stats["D"], stats["D'"], attack.delta, attack.confidence)
    return ReplayResult(attack, bound, float(claimed), stats["D"], stats["D'"], exact)
