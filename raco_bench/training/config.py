"""Run configuration: the run-level settings; each method's hyperparameters live in its ``Hyper``.

``params`` holds overrides of the method's hyperparameters (strings from ``--set key=value`` or
values); they are parsed and validated against the method's dataclass before anything runs.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
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


WHEN = ("always", "private", "selection", "set", "never")  # when a run records a setting: see RunConfig, "Roles"


def setting(default=None, *, stream: bool | str, factory=None, planned: bool = True, column: bool = False, when: str = "always"):
    """A :class:`RunConfig` field with its roles: ``stream`` (part of the run's stream id, :func:`stream_id`, which changes
    what the run draws; ``"not default"``: only where it differs from its default, so that runs from before the field keep
    their stream ids — what a new setting that changes the draws declares; declared by every field, never by default), ``planned`` (a
    sweep's trial carries it), ``column`` (a column of the pack table and of the one results reader) and ``when`` a run
    records it (MLflow param ``run.<name>``, pack-table cell): always | private (a private method only) | selection
    (checkpoint=private only) | set (where it is not None) | never."""
    assert when in WHEN, when
    metadata = {"stream": stream, "planned": planned, "column": column, "when": when}
    return field(default_factory=factory, metadata=metadata) if factory is not None else field(default=default, metadata=metadata)


@dataclass(frozen=True)
class RunConfig:
    """One run's settings, the one configuration shape from a sweep's plan to its table.

    Roles: each field says, where it is declared, whether it is part of the run's stream id, whether a sweep's trial
    carries it, whether it is a column of the pack table (``configs.csv``) and of the results reader, and when a run
    records it (:func:`setting`). A sweep's trial is its sweep identity plus these fields
    (:func:`raco_bench.sweeps.plan.make_trial`), its pack-table row and MLflow params are read from them
    (:func:`recorded_settings`), so adding a run setting touches this class and the code that uses the setting, not the
    sweep driver, the trial or the reader."""

    dataset: str = setting("adult", stream=True, column=True)
    method: str = setting(DEFAULT_METHOD, stream=True, column=True)
    # a registered family, or the name of a custom one (constraint_spec)
    constraint: str = setting("demographic-parity", stream=True, column=True)
    # a custom constraint's text (docs/constraints.md); None: the registered family `constraint`
    constraint_spec: str | None = setting(None, stream="not default", column=True, when="set")
    gamma: float = setting(0.05, stream=True, column=True)
    epsilon: float = setting(1.0, stream=True, column=True, when="private")
    delta: float = setting(1e-5, stream=True, column=True, when="private")
    steps: int | None = setting(None, stream=True)  # None: the largest T the budget allows (RaCO-DP, DP-SGD) / the method's default
    max_steps: int = setting(5000, stream=True)  # cap on T for every method when steps is unset (the reference code's MAX_STEPS)
    seed: int = setting(0, stream=True, column=True)
    split_seed: int = setting(0, stream=True)
    # 0: the protocol's train/validation split; r > 0: its r-th resample, test split fixed (a study's repeat)
    validation_split: int = setting(0, stream="not default")
    # public: feature domains from the catalog (no budget); paper: z-scoring, outside the budget
    preprocessing: str = setting("public", stream=True, column=True)
    # the reported model: last (the private last iterate) | paper (outside the budget) | private (charged)
    checkpoint: str = setting("last", stream=True, column=True)
    selection_noise: float = setting(50.0, stream=True, column=True, when="selection")  # checkpoint=private: Laplace scale on each validation count
    # checkpoint=private: how many evenly spaced checkpoints compete (each one release)
    selection_checkpoints: int = setting(5, stream=True, column=True, when="selection")
    eval_every: int = setting(25, stream=False)
    device: str = setting("cpu", stream=False, planned=False)  # where it runs: chosen by the machine that trains it
    # secret: keyed noise, the ε holds against the logs; reproducible: noise regenerable from the logged seed
    randomness: str = setting("secret", stream=False, column=True)
    # release exact training-set metrics (OUTSIDE the budget, labelled); checkpoint=paper reads them anyway
    train_metrics: bool = setting(False, stream=False)
    # own: Poisson batches from the run's own stream; shared: from one stream per seed (docs/packs.md, "Shared batches");
    # not part of the stream id: batch_stream_id
    batch_draws: str = setting("own", stream=False, column=True)
    # a user's dataset: its schema file (then dataset is the schema's name; docs/datasets.md, "Your own data"), and its
    # table (CSV or Parquet; None: the file the schema names); where they lie is not the identity, their name is
    schema: str | None = setting(None, stream=False, column=True, when="set")  # a column: the store's ε reads its public train_rows
    data: str | None = setting(None, stream=False, when="set")
    params: dict = setting(factory=dict, stream=False, when="never")  # the method's hyperparameters (its Hyper) and calibrated values

    @classmethod
    def from_record(cls, record: Mapping[str, Any], **overrides: Any) -> "RunConfig":
        """The run a record (a sweep's trial, a pack-table row) describes: every field it names, ``overrides`` on top,
        RunConfig's defaults for the rest (the defaults are written here only)."""
        names = {f.name for f in fields(cls)}
        return cls(**{**{k: v for k, v in record.items() if k in names}, **overrides})

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


def run_fields(role: str) -> tuple[str, ...]:
    """The names of RunConfig's fields with a role (:func:`setting`): ``stream``, ``planned`` or ``column``, in declaration order."""
    return tuple(f.name for f in fields(RunConfig) if f.metadata[role])


def recorded(name: str, value: Any, private: bool, checkpoint: str) -> bool:
    """Whether a run records setting ``name`` (its ``when``, :func:`setting`): a run of a ``private`` method under the
    ``checkpoint`` rule, whose setting has this ``value``."""
    when = RunConfig.__dataclass_fields__[name].metadata["when"]
    return {"always": True, "private": private, "selection": checkpoint == "private", "set": value is not None, "never": False}[when]


def recorded_settings(config: Mapping[str, Any], private: bool = True) -> dict[str, Any]:
    """The settings of ``config`` (a RunConfig's fields as a dict, or a trial) that a run records: MLflow's ``run.<name>``
    params and the pack table's cells."""
    checkpoint = config.get("checkpoint", RunConfig.checkpoint)
    return {k: v for k, v in config.items() if k in RunConfig.__dataclass_fields__ and recorded(k, v, private, checkpoint)}


NOT_IDENTITY = tuple(f.name for f in fields(RunConfig) if not f.metadata["stream"])  # what does not change a run's draws


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


def _at_default(value: Any, default: Any) -> bool:
    """Whether a setting holds its default (an empty text where the default is None counts: no custom constraint)."""
    return value == default or (default is None and value == "")


def stream_id(cfg: RunConfig, hyperparameters: dict) -> int:
    """The run's stream id, a signed 64-bit hash of its configuration (every run field that changes training, the
    resolved hyperparameters) and its seed. Two configurations of a sweep never share a stream unless they are
    the same configuration with the same seed; a configuration draws the same stream alone and in a pack
    (docs/privacy.md, "Random numbers")."""
    defaults = RunConfig()
    identity = {k: v for k, v in cfg.to_dict().items() if k not in NOT_IDENTITY
                and not (RunConfig.__dataclass_fields__[k].metadata["stream"] == "not default" and _at_default(v, getattr(defaults, k)))}
    identity["hyperparameters"] = hyperparameters
    return _signed_hash(identity)
