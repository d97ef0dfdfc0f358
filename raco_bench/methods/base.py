"""The method plugin interface: one object per method, the same in `raco-bench train`, in a Ray trial
and in the benchmarks (docs/architecture.md, "Methods").

A method is one class, registered by name in :mod:`raco_bench.methods` (the only place that lists
methods). It owns every fact about itself that generic code needs:

* its hyperparameters, a frozen dataclass (``Hyper``) with defaults and ``validate``;
* its search space in Ray Tune's sampling vocabulary (:meth:`Method.search_space`);
* whether γ is a training input or only a selection criterion (``gamma_is_input``), whether it is
  private (``private``), which constraint families it supports (:meth:`Method.supports`, reading the capability a
  family declares);
* its privacy calibration as a value object (:meth:`Method.calibration`), solved through the cache by
  the trainer and, in parallel, by the sweep driver: a calibrated T or σ is derived in one place;
* its typed, frozen run plan (``ctx.plan``) and its privacy plan (:class:`PrivacyPlan`), fixed
  by :meth:`Method.prepare` before anything trains;
* its diagnostics (:meth:`Method.report`, logged by every runner whatever their names);
* its plotting style and the hyperparameters that apply to a given setting.

Training is a pure function of explicit state (:meth:`init_state`, :meth:`step`). The runner
(:mod:`raco_bench.training.loop`) owns evaluation, checkpoint rules and reporting, so every method is
measured the same way.
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from raco_bench.constraints.families import Family
from raco_bench.constraints.problem import CompiledRates, RateProblem
from raco_bench.data.tabular import TabularDataset
from raco_bench.models import Params
from raco_bench.privacy.calibration import CalibrationCache, CalibrationProblem
from raco_bench.privacy.counter_rng import REPRODUCIBLE, Keystream, Stream
from raco_bench.settings import check_positive, parse_dataclass, parse_value

__all__ = ["Budget", "Context", "Method", "PrivacyPlan", "check_positive", "parse_dataclass", "parse_value"]


@dataclass(frozen=True)
class Budget:
    """What a run grants a method: the (ε, δ) budget, the step cap, the run's fixed T (if any) and the
    private checkpoint selection that shares the budget (if any)."""

    epsilon: float
    delta: float
    max_steps: int
    steps: int | None = None
    selection: Any = None  # SelectionRelease | None

    @staticmethod
    def of(run) -> "Budget":
        return Budget(run.epsilon, run.delta, run.max_steps, run.steps, run.selection)


@dataclass(frozen=True)
class PrivacyPlan:
    """A method's privacy, fixed before training: the notion, how it is accounted, what it spends, and
    what it reads outside the budget. ``details`` are extra numbers worth logging (σ, q, ...)."""

    private: bool
    notion: str
    accounting: str
    delta: float
    steps: int
    target_epsilon: float | None = None
    epsilon_spent: float = math.inf
    outside_budget: tuple[str, ...] = ()
    details: tuple[tuple[str, Any], ...] = ()

    @staticmethod
    def none(steps: int, delta: float) -> "PrivacyPlan":
        return PrivacyPlan(False, "none", "none (non-private)", delta, steps)

    def as_dict(self) -> dict:
        """Flat form for results and logs; a non-private plan carries no privacy parameters."""
        out = {"private": self.private, "notion": self.notion, "accounting": self.accounting, "steps": self.steps,
               "epsilon_spent": self.epsilon_spent, "outside_budget": list(self.outside_budget)}
        if self.private:
            out.update(delta=self.delta, target_epsilon=self.target_epsilon, **dict(self.details))
        return out


@dataclass
class Context:
    """Everything a method may read while planning and training one run. ``plan`` is the method's own
    typed, frozen plan (model, tensors, resolved settings), set by :meth:`Method.prepare`."""

    dataset: TabularDataset
    config: Any  # the run's RunConfig (ctx.config.seed, ctx.config.epsilon, ...)
    hyper: Any  # the method's Hyper instance
    problem: RateProblem  # the run's rate constraints (every method is evaluated on them)
    rates: CompiledRates
    device: torch.device
    cache: CalibrationCache
    steps: int = 0
    privacy: dict = field(default_factory=dict)
    plan: Any = None
    source: Keystream = REPRODUCIBLE  # the run's word source: secret (keyed) or reproducible (docs/privacy.md, "Threat model")
    stream_id: int = 0  # the run's stream: its configuration and seed (raco_bench.training.config.stream_id)
    batch_stream_id: int | None = None  # its gradient batches' stream (None: its own; raco_bench.training.config.batch_stream_id)

    def stream(self) -> Stream:
        """The run's random numbers: every draw of the run comes from here (or from a pack drawing the same)."""
        return Stream(self.stream_id, self.device, self.source, self.batch_stream_id)

    @property
    def batch_seed(self) -> int:
        """The id of the stream the run's gradient batches come from (its own stream unless batches are shared)."""
        return self.stream_id if self.batch_stream_id is None else self.batch_stream_id

    @property
    def n_train(self) -> int:
        return len(self.dataset.train)

    @property
    def budget(self) -> Budget:
        return Budget.of(self.config)


class Method(ABC):
    name: ClassVar[str]
    description: ClassVar[str]
    private: ClassVar[bool]
    Hyper: ClassVar[type]
    gamma_is_input: ClassVar[bool] = True  # False: trained without γ; γ only selects among its runs
    in_default_sweeps: ClassVar[bool] = True
    learning_rate_keys: ClassVar[tuple[str, ...]] = ("lr",)
    timing_reference: ClassVar[bool] = False  # the method other step times are divided by
    style: ClassVar[tuple[str, str]] = ("#56B4E9", "P")  # (colour, marker) in every figure
    variant_of: ClassVar[str | None] = None  # another method's name when this one is it under another setting (shares its colour)
    doc: ClassVar[str] = ""  # its page in docs/methods/
    final_only: ClassVar[bool] = False  # True: only the last step yields the method's model (the only checkpoint a rule may pick)
    pyfunc_model: ClassVar[bool] = True  # False: its parameters are not a plain model, so no MLflow pyfunc model is logged
    engine: ClassVar[type | None] = None  # its batched engine (the protocol of raco_bench.packs.engine), if it has one
    published_as: ClassVar[tuple[str, str] | None] = None  # (method, privacy notion) of the published points it reproduces (results/references.csv)
    compared_with: ClassVar[tuple[str, ...]] = ()  # methods a study's page compares it with, repeat by repeat (paired differences, verdicts)

    def hyperparameters(self, overrides: dict[str, Any] | None = None) -> Any:
        """The method's hyperparameters with ``overrides`` (strings are parsed by field type), validated."""
        return parse_dataclass(self.Hyper, overrides or {}, owner=f"method {self.name}")

    def check_train_size(self, hyper: Any, n_train: int) -> None:
        """Refuse, before any data is loaded, hyperparameters that cannot fit ``n_train`` training rows
        (by default: an expected batch size larger than the training split)."""
        batch = getattr(hyper, "batch_size", None)
        if batch is not None and batch > n_train:
            raise ValueError(f"invalid batch_size={batch}: the expected batch size cannot exceed the training split "
                             f"({n_train} rows, so q = batch_size / n_train would exceed 1); choose batch_size <= {n_train}")

    def supports(self, family: Family) -> str | None:
        """None if the method can train under the constraint ``family``, else the reason it cannot. A method that trains under
        any rate problem keeps this default; one written for a fairness notion reads the capability the family declares
        (``family.notion``, :mod:`raco_bench.constraints.families`)."""
        return None

    @abstractmethod
    def search_space(self, n_train: int) -> dict[str, Any]:
        """Hyperparameter name → a Ray Tune domain (``tune.uniform``, ``tune.loguniform``, ``tune.choice``, …)
        or a constant. ``n_train`` bounds the batch sizes."""

    def sweep_space(self, n_train: int, step_budget: str, max_steps: int) -> dict[str, Any]:
        """The space a sweep searches: :meth:`search_space`, changed by the sweep's step budget for a method that takes T
        from the accountant (``noise``: as it is; ``steps``: T searched, σ calibrated; ``either``: the choice searched too)."""
        return self.search_space(n_train)

    def applicable(self, hyper: Any) -> dict[str, Any]:
        """The hyperparameters that matter for this method (what is logged); all of them by default."""
        return dataclasses.asdict(hyper)

    def calibration(self, hyper: Any, n_train: int, budget: Budget) -> CalibrationProblem | None:
        """The privacy calibration this configuration needs under ``budget`` (None: nothing to calibrate)."""
        return None

    def calibrated(self, problem: CalibrationProblem, value: float) -> dict:
        """What a solved calibration fixes in a sweep trial: ``{"steps": T}`` and/or ``{"params": {...}}``."""
        return {}

    @abstractmethod
    def prepare(self, ctx: Context) -> None:
        """Set ``ctx.plan``, ``ctx.steps`` and ``ctx.privacy``; raise ValueError on a bad plan."""

    @abstractmethod
    def init_state(self, ctx: Context, stream: Stream) -> Any:
        """The initial state; it must hold the run's random stream (every draw comes from it) and expose ``params``."""

    @abstractmethod
    def step(self, ctx: Context, state: Any) -> Any:
        """One training step; returns the new state."""

    def model(self, ctx: Context):
        return ctx.plan.model

    def params(self, state: Any) -> Params:
        return state.params

    def eval_outputs(self, ctx: Context, params: Params, split: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(logits N × c, hard predictions N or None) of the model ``params`` on an evaluation split; None
        lets the evaluation take the argmax. A randomised predictor returns log-probabilities and one draw."""
        return self.model(ctx).logits(params, split.X), None

    def report(self, ctx: Context, state: Any) -> dict:
        """Diagnostics to log at an evaluation (private releases only, or labelled otherwise)."""
        return {}

    def tuning_knob(self, hyper: Any, n_train: int, budget: Budget) -> CalibrationProblem | None:
        """The calibration accounted tuning solves under its RDP reference instead of the budget: the method's own
        calibration by default; a method that calibrates nothing may name a knob here (None: the run is fixed)."""
        return self.calibration(hyper, n_train, budget)

    def privacy_event(self, hyper: Any, n_train: int, budget: Budget) -> Any:
        """What one run releases, as a composition of mechanism events (:mod:`raco_bench.privacy.events`) under add/remove
        adjacency; None for a non-private method. The run's knobs are fixed: ``budget.steps`` for a method that calibrates
        T, the noise in ``hyper`` for one that calibrates it. Raises UnsupportedEvent when the method's claim is not
        record-level (its events would be stated under another relation)."""
        if not self.private:
            return None
        from raco_bench.privacy.events import UnsupportedEvent

        raise UnsupportedEvent(f"method {self.name} describes no mechanism events")

    # -- optional capabilities: core drivers ask for them, never for a method by name (docs/architecture.md, "Adding a method")

    def audit_view(self, run: Any, canary_row: int, engine: Any = None) -> Any:
        """What the white-box audit observes of one step of ``run`` (a prepared run, logistic regression) with
        training row ``canary_row`` turned into the canary: a :class:`raco_bench.methods.audit_view.AuditView`, or None when
        the method has no audit view. ``engine`` replaces the engine module the view calls (the tests plant bugs there)."""
        return None

    def audit_noise(self, hyper: Any, sampling_rate: float, steps: int, epsilon: float, delta: float) -> dict[str, Any]:
        """Hyperparameter overrides under which ``steps`` steps at ``sampling_rate`` spend exactly ``epsilon`` (the audited
        claim); {} when the method calibrates its own noise to the run's budget."""
        return {}

    @classmethod
    def auditable(cls) -> bool:
        """Whether the white-box audit covers this method (a private method that defines an audit view)."""
        return cls.private and cls.audit_view is not Method.audit_view
