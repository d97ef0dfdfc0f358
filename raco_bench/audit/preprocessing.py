"""The preprocessing attack: one extreme record against data-dependent feature scaling.

World D is a dataset's training split; world D′ is D plus one record whose numeric column (Adult:
capital-gain) is set to an absurd value (1e9). Under the papers' preprocessing the training split's
own standard deviation scales the column, so the extreme record shrinks that feature of every other
row to about zero and the released model's weight on it changes visibly: the record is detected far
beyond what the claimed ε allows. Under public preprocessing (docs/privacy.md) the record is clipped
to the column's public range and its influence is bounded by the mechanism's clipping and noise.

Everything else is held equal: the same split of the original rows, the same method, hyperparameters
and seeds in both worlds. The statistic is the released model's margin weight on the column
(class 1 minus class 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from raco_bench.audit.bounds import AuditBound, audit_epsilon
from raco_bench.methods import DEFAULT_METHOD

NO_EVALUATION = 10**9  # the attack reads only the released weights: no evaluation during training


@dataclass(frozen=True)
class PreprocessingAttack:
    dataset: str = "adult"
    column: str = "capital-gain"
    value: float = 1e9
    preprocessing: str = "public"
    method: str = DEFAULT_METHOD
    epsilon: float = 1.0
    delta: float = 1e-5
    runs: int = 300  # per world
    train_rows: int | None = None  # keep only this many training rows of D (a faster, smaller audit)
    params: tuple = ()  # method hyperparameter overrides, as (key, value) pairs


@dataclass(frozen=True)
class AttackResult:
    attack: PreprocessingAttack
    bound: AuditBound
    claimed_epsilon: float
    statistic_d: np.ndarray
    statistic_d_prime: np.ndarray

    def summary(self) -> str:
        a, b, r = self.statistic_d, self.statistic_d_prime, self.bound
        return (f"preprocessing={self.attack.preprocessing}: weight on {self.attack.column} {a.mean():.3f} ± {a.std():.3f} in D, "
                f"{b.mean():.3f} ± {b.std():.3f} in D' ({r.runs_per_world} runs each); audited epsilon >= {r.epsilon_lower:.3f} "
                f"at {r.confidence:.0%} confidence (TPR {r.true_positive_rate:.3f}, FPR {r.false_positive_rate:.3f} on the held-out half) "
                f"against a claimed epsilon of {self.claimed_epsilon:.3f}")


def split_of(dataset: str, split_seed: int, train_rows: int | None):
    """(table, split indices) of an audit's world D: the dataset's split, its training rows cut to the first ``train_rows``."""
    from raco_bench.data.catalog import load_table

    table = load_table(dataset)
    idx = table.split(split_seed)
    if train_rows is not None:
        idx = {**idx, "train": idx["train"][:train_rows]}
    return table, idx


def worlds(attack: PreprocessingAttack, split_seed: int = 0):
    """(D, D′) as TabularDatasets that differ by exactly one training record, encoded each on its own."""
    table, idx = split_of(attack.dataset, split_seed, attack.train_rows)
    src = int(idx["train"][0])
    features = table.frame.iloc[src].to_dict()
    features[attack.column] = attack.value
    bigger = table.with_row(features, int(table.label[src]), int(table.group[src]))
    new_row = len(table.frame)
    d = table.dataset(split_seed, attack.preprocessing, idx)
    d_prime = bigger.dataset(split_seed, attack.preprocessing, {**idx, "train": np.append(idx["train"], new_row)})
    return d, d_prime


def run_attack(attack: PreprocessingAttack) -> AttackResult:
    """Train ``attack.runs`` runs per world, each world's runs as one pack (docs/packs.md: a pack trains each run
    exactly as alone), with reproducible randomness so that seed s draws the same noise in both worlds."""
    from dataclasses import replace

    import torch

    from raco_bench.training.config import RunConfig
    from raco_bench.training.loop import prepare_run
    from raco_bench.training.pack import train_runs

    torch.set_num_threads(1)
    d, d_prime = worlds(attack)
    col = d.feature_names.index(attack.column)
    out = {}
    claimed = 0.0
    cfg = RunConfig(dataset=attack.dataset, method=attack.method, epsilon=attack.epsilon, delta=attack.delta,
                    preprocessing=attack.preprocessing, params=dict(attack.params), randomness="reproducible",
                    eval_every=NO_EVALUATION)
    for label, ds in (("D", d), ("D'", d_prime)):
        runs = [prepare_run(replace(cfg, seed=seed), ds) for seed in range(attack.runs)]
        claimed = max(claimed, max(run.ctx.privacy["epsilon_spent"] for run in runs))
        results = train_runs(runs)
        out[label] = np.array([float(r.final_params["weight"][1, col] - r.final_params["weight"][0, col]) for r in results])
    bound = audit_epsilon(out["D"], out["D'"], attack.delta)
    return AttackResult(attack, bound, claimed, out["D"], out["D'"])
