"""Run configuration: the run-level settings; each method's hyperparameters live in its ``Hyper``.

``params`` holds overrides of the method's hyperparameters (strings from ``--set key=value`` or
values); they are parsed and validated against the method's dataclass before anything runs.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from raco_bench.methods import DEFAULT_METHOD
from raco_bench.privacy.counter_rng import RANDOMNESS_MODES
from raco_bench.settings import parse_value

CHECKPOINT_RULES = {
    "last": "the last iterate (privately released; no data read outside the budget)",
    "paper": "the papers' rule: best validation accuracy among checkpoints whose exact train-set constraints hold "
             "(not privacy-accounted: reads train and validation rows outside the budget)",
    "private": "best noisy validation accuracy among checkpoints whose noisy validation constraints hold "
               "(Laplace-noised validation counts, charged to the budget)",
}

BATCH_DRAWS = ("own", "shared")  # where a run's Poisson batches come from (batch_stream_id)


@dataclass(frozen=True)
class RunConfig:
    dataset: str = "adult"
    method: str = DEFAULT_METHOD
    constraint: str = "demographic-parity"  # a registered family, or the name of a custom one (constraint_spec)
    constraint_spec: str | None = None  # a custom constraint's text (docs/constraints.md); None: the registered family `constraint`
    gamma: float = 0.05
    epsilon: float = 1.0
    delta: float = 1e-5
    steps: int | None = None  # None: the largest T the budget allows (RaCO-DP, DP-SGD) / the method's default
    max_steps: int = 5000  # cap on T for every method when steps is unset (the reference code's MAX_STEPS)
    seed: int = 0
    split_seed: int = 0
    validation_split: int = 0  # 0: the protocol's train/validation split; r > 0: its r-th resample, test split fixed (a study's repeat)
    preprocessing: str = "public"  # public: feature domains from the catalog (no budget); paper: z-scoring, outside the budget
    checkpoint: str = "last"  # the reported model: last (the private last iterate) | paper (outside the budget) | private (charged)
    selection_noise: float = 50.0  # checkpoint=private: Laplace scale on each validation count
    selection_checkpoints: int = 5  # checkpoint=private: how many evenly spaced checkpoints compete (each one release)
    eval_every: int = 25
    device: str = "cpu"
    randomness: str = "secret"  # secret: keyed noise, the ε holds against the logs; reproducible: noise regenerable from the logged seed
    train_metrics: bool = False  # release exact training-set metrics (OUTSIDE the budget, labelled); checkpoint=paper reads them anyway
    batch_draws: str = "own"  # own: Poisson batches from the run's own stream; shared: from one stream per seed (docs/packs.md, "Shared batches")
    schema: str | None = None  # a user's dataset: its schema file (then dataset is the schema's name; docs/datasets.md, "Your own data")
    data: str | None = None  # and its table (CSV or Parquet); None: the file the schema names as its table
    params: dict = field(default_factory=dict)

    def validate(self) -> None:
        if not (isinstance(self.epsilon, (int, float)) and self.epsilon > 0):
            raise ValueError(f"invalid epsilon={self.epsilon!r}: the privacy budget must be > 0 (use a non-private method for no privacy)")
        if not math.isfinite(self.epsilon):
            raise ValueError(f"invalid epsilon={self.epsilon!r}: an infinite budget is no privacy; train a non-private method "
                             "(sgda, sgd, or dp-fermi with --set privacy=none), or give a finite epsilon")
        if not 0 < self.delta < 1:
            raise ValueError(f"invalid delta={self.delta!r}: must be in (0, 1)")
        if not (math.isfinite(self.gamma) and 0 <= self.gamma <= 1):
            raise ValueError(f"invalid gamma={self.gamma!r}: the constraint slack bounds a difference of rates, so it must be in [0, 1] "
                             "(a gamma above 1 constrains nothing)")
        from raco_bench.constraints.families import family

        family(self.constraint, self.constraint_spec)  # an unknown name or a spec that does not read is refused here
        from raco_bench.data.schema import PREPROCESSING_MODES

        if self.preprocessing not in PREPROCESSING_MODES:
            raise ValueError(f"invalid preprocessing={self.preprocessing!r}: choose one of {PREPROCESSING_MODES}")
        if self.checkpoint not in CHECKPOINT_RULES:
            raise ValueError(f"invalid checkpoint={self.checkpoint!r}: choose one of {tuple(CHECKPOINT_RULES)}")
        if self.checkpoint == "private":
            self.selection  # validates the selection's noise and count
        if self.steps is not None and self.steps < 1:
            raise ValueError(f"invalid steps={self.steps!r}: must be >= 1 (or unset to use the privacy budget)")
        if self.max_steps < 1:
            raise ValueError(f"invalid max_steps={self.max_steps!r}: must be >= 1")
        if self.eval_every < 1:
            raise ValueError(f"invalid eval_every={self.eval_every!r}: must be >= 1")
        if not (isinstance(self.validation_split, int) and self.validation_split >= 0):
            raise ValueError(f"invalid validation_split={self.validation_split!r}: an integer >= 0 (0: the protocol's train/validation split)")
        if self.batch_draws not in BATCH_DRAWS:
            raise ValueError(f"invalid batch_draws={self.batch_draws!r}: choose one of {BATCH_DRAWS} (docs/packs.md, \"Shared batches\")")
        if self.data is not None and self.schema is None:
            raise ValueError(f"data={self.data!r} needs its schema file (--schema SCHEMA); draft one with `raco-bench schema draft {self.data}`")
        if self.randomness not in RANDOMNESS_MODES:
            raise ValueError(f"invalid randomness={self.randomness!r}: choose one of {RANDOMNESS_MODES} (docs/privacy.md, \"Threat model\")")

    @property
    def releases_train_metrics(self) -> bool:
        """Whether the run evaluates the training split and releases its exact metrics (outside the budget)."""
        return self.train_metrics or self.checkpoint == "paper"

    @property
    def selection(self):
        """The private checkpoint selection's release (None unless checkpoint == "private")."""
        from raco_bench.privacy.accounting import SelectionRelease

        if self.checkpoint != "private":
            return None
        return SelectionRelease(float(self.selection_noise), int(self.selection_checkpoints))

    def with_overrides(self, overrides: dict[str, Any]) -> "RunConfig":
        """Apply ``key=value`` overrides: run fields by name, everything else to the method's params."""
        run_fields = {f.name: f for f in fields(self) if f.name != "params"}
        run_updates, params = {}, dict(self.params)
        for key, raw in overrides.items():
            if key in run_fields:
                run_updates[key] = parse_value(key, raw, run_fields[key].type)
            else:
                params[key] = raw
        return replace(self, params=params, **run_updates)

    def to_dict(self) -> dict:
        return asdict(self)


# what does not change a run's draws: where it runs, how often it is evaluated, and what is released about it
NOT_IDENTITY = ("device", "eval_every", "randomness", "train_metrics", "params", "batch_draws",  # batch_draws: batch_stream_id
                "schema", "data")  # where a user's dataset lies: its name is the identity, as a catalog dataset's


def batch_stream_id(cfg: RunConfig, hyperparameters: dict) -> int | None:
    """The stream a run draws its Poisson gradient batches from: None for its own stream (``batch_draws=own``), or
    (``shared``) the id of one stream per (dataset, split seed, seed, expected batch size), which every configuration
    with that seed and batch size shares (``hyperparameters``: the run's resolved ones; a method without a batch size
    draws no Poisson batches).

    Either way the run's batch at step t includes each row independently with probability q, independently across
    steps (:func:`raco_bench.privacy.counter_rng.poisson_rows`), so its own ε is the same. Runs that share a batch
    stream draw the same batches, which a pack computes as dense products (docs/packs.md, "Shared batches"); they are
    not independent of each other, so whatever needs independent runs (accounted tuning, the white-box audit) keeps
    ``own``, and the store's ε composes them as one release (:mod:`raco_bench.privacy.store`). The batch size is part
    of the stream so that runs at different rates are independent: from one stream their batches would be different
    functions of the same uniforms, neither the same release nor independent ones."""
    if cfg.batch_draws == "own":
        return None
    rows = {"dataset": cfg.dataset, "split_seed": cfg.split_seed, "seed": cfg.seed, "batch_size": hyperparameters.get("batch_size")}
    if cfg.validation_split:  # another training split: other rows (split 0 keeps the ids of the protocol's split)
        rows["validation_split"] = cfg.validation_split
    return _signed_hash({"shared batches of": rows})


def _signed_hash(identity: dict) -> int:
    """A signed 64-bit hash of ``identity`` (a JSON-able dict), the form of every stream id."""
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).digest()
    return int.from_bytes(digest[:8], "little", signed=True)


def stream_id(cfg: RunConfig, hyperparameters: dict) -> int:
    """The run's stream id, a signed 64-bit hash of its configuration (every run field that changes training, the
    resolved hyperparameters) and its seed. Two configurations of a sweep never share a stream unless they are
    the same configuration with the same seed; a configuration draws the same stream alone and in a pack
    (docs/privacy.md, "Random numbers")."""
    identity = {k: v for k, v in cfg.to_dict().items() if k not in NOT_IDENTITY}
    for key in ("validation_split", "constraint_spec"):  # at their defaults, runs keep the stream ids from before these fields
        if not identity[key]:
            identity.pop(key)
    identity["hyperparameters"] = hyperparameters
    return _signed_hash(identity)
