"""The toy method's plugin: hyperparameters, search space, calibration of T, its privacy events, one step."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from dp_accounting.dp_event import GaussianDpEvent, PoissonSampledDpEvent, SelfComposedDpEvent

from raco_bench.methods.base import Budget, Context, Method, PrivacyPlan
from raco_bench.methods.common import check_batch, plan_steps
from raco_bench.models import LogisticRegression
from raco_bench.privacy import events
from raco_bench.privacy.accounting import StepMechanism, epsilon, smallest_noise_within
from raco_bench.privacy.calibration import StepsProblem
from raco_bench.privacy.counter_rng import Stream
from toy_plugin import engine
from toy_plugin.audit import toy_view


@dataclass(frozen=True)
class ToyHyper:
    batch_size: int = 256
    noise_multiplier: float = 2.0
    clip_norm: float = 1.0
    lr: float = 0.5
    default_steps: int = 100

    def validate(self) -> None:
        if self.noise_multiplier <= 0 or self.clip_norm <= 0 or self.lr <= 0:
            raise ValueError("noise_multiplier, clip_norm and lr must be > 0")


@dataclass(frozen=True)
class ToyPlan:
    model: LogisticRegression
    X: torch.Tensor
    y: torch.Tensor
    q: float


class ToyDPSGD(Method):
    name = "toy-dp-sgd"
    description = "a toy DP-SGD written as a plugin from scratch (tests/toy_plugin)"
    private = True
    Hyper = ToyHyper
    gamma_is_input = False
    in_default_sweeps = False
    engine = engine.ToyEngine

    def search_space(self, n_train: int) -> dict:
        from ray import tune

        return {"lr": tune.loguniform(0.05, 1.0), "noise_multiplier": tune.uniform(1.0, 4.0)}

    def step_mechanism(self, hyper: ToyHyper, n_train: int) -> StepMechanism:
        return StepMechanism(hyper.batch_size / n_train, hyper.noise_multiplier)

    def calibration(self, hyper: ToyHyper, n_train: int, budget: Budget) -> StepsProblem:
        return StepsProblem(self.step_mechanism(hyper, n_train), budget.epsilon, budget.delta, budget.max_steps, budget.selection)

    def calibrated(self, problem: StepsProblem, value: float) -> dict:
        return {"steps": int(value)} if int(value) else {"skip": "no step fits the budget"}

    def privacy_event(self, hyper: ToyHyper, n_train: int, budget: Budget):
        step = PoissonSampledDpEvent(hyper.batch_size / n_train, GaussianDpEvent(hyper.noise_multiplier))
        return events.compose(SelfComposedDpEvent(step, int(budget.steps)), events.selection_event(budget.selection))

    def prepare(self, ctx: Context) -> None:
        h, ds = ctx.hyper, ctx.dataset
        q = check_batch(ctx, h.batch_size)
        ctx.steps = plan_steps(ctx, self.calibration(h, ctx.n_train, ctx.budget), h.default_steps)
        ctx.plan = ToyPlan(LogisticRegression(ds.n_features, ds.n_classes), torch.as_tensor(ds.train.X, device=ctx.device),
                           torch.as_tensor(ds.train.y, device=ctx.device), q)
        run = ctx.config
        spent = events.epsilon(self.privacy_event(h, ctx.n_train, Budget(run.epsilon, run.delta, run.max_steps, ctx.steps, run.selection)), run.delta)
        ctx.privacy = PrivacyPlan(True, "record-level add/remove DP", "mechanism events, PLD", run.delta, ctx.steps, run.epsilon, spent).as_dict()

    def init_state(self, ctx: Context, stream: Stream) -> engine.ToyState:
        p = ctx.plan.model.init(stream)
        return engine.ToyState(p["weight"][None], p["bias"][None], 0)

    def step(self, ctx: Context, state: engine.ToyState) -> engine.ToyState:
        s = engine.settings_of([_Run(self, ctx)])  # the single run is a pack of one: one code path
        return engine.apply(state, s, engine.release(state, ctx.plan.X, ctx.plan.y, s))

    def params(self, state: engine.ToyState) -> dict:
        return state.params(0)

    def audit_noise(self, hyper: ToyHyper, sampling_rate: float, steps: int, epsilon_: float, delta: float) -> dict:
        def spent(sigma: float) -> float:
            return epsilon(StepMechanism(sampling_rate, sigma), steps, delta)

        return {"noise_multiplier": smallest_noise_within(spent, epsilon_, 1e6, "no noise meets the claim")}

    def audit_view(self, run, canary_row: int, engine_module=None):
        return toy_view(run, canary_row, engine_module)


@dataclass(frozen=True)
class _Run:
    method: Method
    ctx: Context
