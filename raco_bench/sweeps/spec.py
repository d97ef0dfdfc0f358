"""What a sweep runs: dataset, constraint, ε and γ grids, methods, and the two-phase protocol sizes."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, fields, replace

from raco_bench.training.config import RunConfig

RUN = RunConfig()  # the run defaults a sweep shares: written once, in RunConfig
TUNING_MODES = ("not-accounted", "accounted")  # outside the budget (the papers) | accounted tuning (docs/sweeps.md)
SEARCHES = ("random", "tpe")  # phase 1's configurations: random draws | Optuna's TPE, asked in rounds (docs/sweeps.md, "Search")
STEP_BUDGETS = ("noise", "steps", "either")  # σ searched, T from the accountant | T searched, σ calibrated | both (docs/sweeps.md)
NEW_FIELDS = {"search": "random", "search_batch": 25, "step_budget": "noise", "repeat": 0,  # at these values a sweep keeps its id from before them
              "schema": "", "data": "", "files_digest": "", "constraint_spec": ""}


@dataclass(frozen=True)
class SweepSpec:
    """The paper's two-phase protocol (docs/sweeps.md): phase 1 tries ``n_configs`` random
    configurations per (method, ε, γ) with ``phase1_seeds`` seeds each and picks the best validation
    accuracy among those meeting γ on validation; phase 2 trains ``phase2_seeds`` fresh seeds of it."""

    dataset: str
    constraint: str = RUN.constraint
    constraint_spec: str = ""  # a custom constraint's text (docs/constraints.md); empty: the registered family `constraint`
    epsilons: tuple[float, ...] = (0.5, 1.0, 3.0, 9.0)
    gammas: tuple[float, ...] = (0.02, 0.05, 0.1)
    methods: tuple[str, ...] = ()  # empty: every method marked for default sweeps that supports the constraint
    n_configs: int = 200
    phase1_seeds: int = 5
    phase2_seeds: int = 20
    delta: float = RUN.delta
    max_steps: int = RUN.max_steps
    eval_every: int = RUN.eval_every
    sample_seed: int = 0
    experiment: str = ""
    preprocessing: str = RUN.preprocessing  # public | paper (outside the budget, labelled everywhere)
    checkpoint: str = RUN.checkpoint  # one rule for every method: last | private (charged) | paper (outside the budget, labelled everywhere)
    selection_noise: float = RUN.selection_noise  # checkpoint=private: Laplace scale per validation count
    selection_checkpoints: int = RUN.selection_checkpoints  # checkpoint=private: competing checkpoints per run
    tuning: str = "not-accounted"  # not-accounted: the two-phase protocol | accounted: private random search (docs/sweeps.md)
    tuning_mean: float = 10.0  # accounted: E[K], the mean number of configurations per search
    tuning_shape: float = 1.0  # accounted: η of K's truncated negative binomial (1: geometric, 0: logarithmic; inf: K ~ Poisson)
    tuning_repeats: int = 5  # accounted: independent repetitions of the whole search (each one private release)
    randomness: str = RUN.randomness  # secret: keyed noise, never regenerable from the logs | reproducible: from the logged seed (labelled)
    batch_draws: str = "auto"  # auto: shared batches per seed, own under accounted tuning | own | shared (docs/packs.md, "Shared batches")
    search: str = "random"  # random: independent draws | tpe: Optuna's TPE (the papers' search), asked in rounds of search_batch
    search_batch: int = 25  # tpe: configurations asked per (method, ε, γ) and round (a round trains them all before the next ask)
    step_budget: str = "noise"  # noise: σ searched, T from the accountant | steps: T searched, σ calibrated | either: a searched choice
    repeat: int = 0  # which repeat of the whole protocol: r > 0 resamples the train/validation split and the search (docs/results.md, "Repeats and intervals")
    schema: str = ""  # a user's dataset (docs/datasets.md, "Your own data"): its schema file; dataset is then the schema's name
    data: str = ""  # its table (CSV or Parquet); empty: the file the schema names
    files_digest: str = ""  # the sha256 of the schema and table when the sweep started: every trial checks it (see with_user_data)

    def with_user_data(self, schema: str, data: str | None = None) -> "SweepSpec":
        """This sweep on a user's dataset: the schema's name, the files' absolute paths and their digest (a changed file is
        a new sweep, and a trial refuses files that changed while the sweep runs)."""
        from pathlib import Path

        from raco_bench.data.catalog import dataset_schema, files_digest

        parsed = dataset_schema(None, schema)
        experiment = self.experiment if self.experiment != f"{self.dataset}-{self.constraint}" else ""
        return replace(self, dataset=parsed.name, schema=str(Path(schema).expanduser().resolve()),
                       data=str(Path(data).expanduser().resolve()) if data else "", files_digest=files_digest(schema, data), experiment=experiment)

    @property
    def run(self) -> RunConfig:
        """The run template of every trial of this sweep: the sweep's fields that are run settings (same names as
        RunConfig's; empty text as None where the run's default is None), where its batches come from (:attr:`draws`)
        and which train/validation split its repeat trains on; a trial sets the method, ε, γ, seed and hyperparameters
        on it (:func:`raco_bench.sweeps.plan.make_trial`)."""
        unset = {f.name for f in fields(RunConfig) if f.default is None}  # a setting unset in a run is "" in a sweep (its flags' text)
        names = {f.name for f in fields(RunConfig)} & {f.name for f in fields(self)}
        shared = {k: None if k in unset and getattr(self, k) == "" else getattr(self, k) for k in names}
        return RunConfig(**{**shared, "batch_draws": self.draws, "validation_split": self.repeat})

    @property
    def family(self):
        """The sweep's constraint family (:func:`raco_bench.constraints.families.family`): refuses an unknown name."""
        from raco_bench.constraints.families import family

        return family(self.constraint, self.constraint_spec or None)

    @property
    def search_seed(self) -> int:
        """The seed of phase 1's search: ``sample_seed`` for the protocol's first run (repeat 0, as before repeats existed),
        a seed of its own for each later repeat, so that a repeat searches afresh."""
        if not self.repeat:
            return self.sample_seed
        digest = hashlib.sha256(f"search of repeat {self.repeat} from sample seed {self.sample_seed}".encode()).digest()
        return int.from_bytes(digest[:4], "little") >> 1

    @property
    def draws(self) -> str:
        """Where the runs' Poisson batches come from: ``batch_draws``, with ``auto`` resolved. Runs that share batch draws
        are not independent of each other, and accounted tuning's guarantee needs independent runs: ``own`` there."""
        if self.batch_draws != "auto":
            return self.batch_draws
        return "own" if self.tuning == "accounted" else "shared"

    @property
    def rounds(self):
        """Accounted tuning: the distribution of K, the number of runs of each search."""
        from raco_bench.privacy.rounds import Rounds

        return Rounds.of(self.tuning_mean, self.tuning_shape)

    @property
    def selection(self):
        from raco_bench.privacy.accounting import SelectionRelease

        return SelectionRelease(float(self.selection_noise), int(self.selection_checkpoints)) if self.checkpoint == "private" else None

    def __post_init__(self) -> None:
        if not self.experiment:
            object.__setattr__(self, "experiment", f"{self.dataset}-{self.constraint}")
        if not self.methods:
            from raco_bench.methods import default_methods

            object.__setattr__(self, "methods", default_methods(self.family))
        object.__setattr__(self, "methods", tuple(self.methods))
        if not self.epsilons or any(not (e > 0 and math.isfinite(e)) for e in self.epsilons):
            raise ValueError(f"epsilons must be finite numbers > 0 (non-private methods run without one), got {self.epsilons}")
        if not self.gammas or any(not (0 <= g <= 1) for g in self.gammas):
            raise ValueError(f"gammas must be in [0, 1] (the constraint slack bounds a difference of rates; above 1 it constrains nothing), "
                             f"got {self.gammas}")
        if not (isinstance(self.repeat, int) and self.repeat >= 0):
            raise ValueError(f"repeat must be an integer >= 0 (0: the protocol's split and search), got {self.repeat!r}")
        for name in ("n_configs", "phase1_seeds", "phase2_seeds", "max_steps", "eval_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0 < self.delta < 1:
            raise ValueError(f"delta must be in (0, 1), got {self.delta}")
        from raco_bench.data.schema import PREPROCESSING_MODES
        from raco_bench.training.config import CHECKPOINT_RULES

        if self.preprocessing not in PREPROCESSING_MODES:
            raise ValueError(f"invalid preprocessing={self.preprocessing!r}: choose one of {PREPROCESSING_MODES}")
        if self.checkpoint not in CHECKPOINT_RULES:
            raise ValueError(f"invalid checkpoint={self.checkpoint!r}: choose one of {tuple(CHECKPOINT_RULES)}")
        self.selection  # validates the private selection's settings
        from raco_bench.privacy.counter_rng import RANDOMNESS_MODES

        if self.randomness not in RANDOMNESS_MODES:
            raise ValueError(f"invalid randomness={self.randomness!r}: choose one of {RANDOMNESS_MODES}")
        if self.tuning not in TUNING_MODES:
            raise ValueError(f"invalid tuning={self.tuning!r}: choose one of {TUNING_MODES}")
        from raco_bench.training.config import BATCH_DRAWS

        if self.batch_draws not in ("auto", *BATCH_DRAWS):
            raise ValueError(f"invalid batch_draws={self.batch_draws!r}: choose one of {('auto', *BATCH_DRAWS)}")
        if self.search not in SEARCHES:
            raise ValueError(f"invalid search={self.search!r}: choose one of {SEARCHES}")
        if self.search_batch < 1:
            raise ValueError(f"search_batch must be >= 1, got {self.search_batch}")
        if self.step_budget not in STEP_BUDGETS:
            raise ValueError(f"invalid step_budget={self.step_budget!r}: choose one of {STEP_BUDGETS}")
        if self.tuning == "accounted" and self.search != "random":
            raise ValueError("accounted tuning's guarantee (the privacy-profile bound) needs K independent runs of one fixed random search, and TPE chooses "
                             "each configuration from the results of the earlier ones: use --search random (the default) with --tuning accounted")
        if self.tuning == "accounted" and self.step_budget != "noise":
            raise ValueError("accounted tuning calibrates its reference run's T from the budget (docs/sweeps.md, \"Accounted tuning\"): "
                             "use --step-budget noise with --tuning accounted")
        if self.tuning == "accounted":
            if self.checkpoint != "private":
                raise ValueError(f"accounted tuning selects on noisy validation scores that each run releases inside its budget: "
                                 f"use --checkpoint private (the default with --tuning accounted), not {self.checkpoint!r}")
            if not (self.tuning_mean > 1 and math.isfinite(self.tuning_mean)):
                raise ValueError(f"invalid tuning mean {self.tuning_mean!r}: E[K] must be a finite number > 1")
            if not self.tuning_shape >= 0:
                raise ValueError(f"invalid tuning shape {self.tuning_shape!r}: eta must be a number >= 0 (inf: K ~ Poisson)")
            if self.tuning_repeats < 1:
                raise ValueError(f"tuning_repeats must be >= 1, got {self.tuning_repeats}")
            if self.batch_draws == "shared":
                raise ValueError("accounted tuning's guarantee (the privacy-profile bound) needs independent runs, and runs with shared batch draws are not "
                                 "independent of each other: use --batch-draws own (the default with --tuning accounted)")

    @property
    def sweep_id(self) -> str:
        """Deterministic id: the same spec always maps to the same MLflow parents and Tune experiments."""
        identity = asdict(self)
        if self.tuning == "not-accounted":  # sweeps from before accounted tuning keep their ids (and can be resumed)
            for k in ("tuning", "tuning_mean", "tuning_shape", "tuning_repeats"):
                identity.pop(k)
        for k, default in NEW_FIELDS.items():  # nor do sweeps from before the TPE search and the step-budget parametrisation
            if identity[k] == default:
                identity.pop(k)
        return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:12]

    def demo(self) -> "SweepSpec":
        """The README's main job: enough configurations (trained as packs) for RaCO-DP to meet γ and reach phase 2,
        in about a minute and a half on 2 CPU cores (every default method; 72 s measured on 2026-11-24)."""
        return replace(self, epsilons=(1.0,), gammas=(0.05, 0.1), n_configs=12, phase1_seeds=2, phase2_seeds=5, max_steps=600,
                       eval_every=25, experiment=self.experiment + "-demo")

    def smoke(self) -> "SweepSpec":
        """A small sweep that finishes in a few minutes on 2 CPU cores."""
        return replace(self, epsilons=(1.0,), gammas=(0.05,), n_configs=2, phase1_seeds=2, phase2_seeds=2, max_steps=300,
                       eval_every=50, experiment=self.experiment + "-smoke")
