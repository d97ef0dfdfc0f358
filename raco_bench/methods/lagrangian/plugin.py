"""RaCO-DP (Algorithm 1) as a method plugin, and the Lagrangian SGDA family it belongs to.

The family shares one step (:func:`raco_bench.methods.lagrangian.step.sgda_step`) and one hyperparameter
set; its members differ only in whether they use the rate constraints and whether they are private:

| method | constraints | privacy |
|---|---|---|
| raco-dp | yes | Laplace histogram + clipped Gaussian gradient, PLD-accounted (joint PLD for a shared batch) |
| sgda | yes | none: exact histogram, no clipping, no noise |
| dp-sgd | no | clipped Gaussian gradient, PLD-accounted |
| sgd | no | none |

The algorithm, its privacy and the decisions taken are in docs/methods/raco-dp.md; the other members
have their own pages there.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import torch

from raco_bench.data.tensors import TrainData
from raco_bench.methods.base import Budget, Context, Method, PrivacyPlan, check_positive
from raco_bench.methods.common import batch_choices, check_batch, plan_steps, selection_note, train_tensors
from raco_bench.methods.lagrangian.audit import lagrangian_view
from raco_bench.methods.lagrangian.engine import LagrangianEngine
from raco_bench.methods.lagrangian.step import StepSettings, TrainState, lagrangian_report, sgda_step
from raco_bench.models import build_model
from raco_bench.privacy.accounting import HISTOGRAM_BATCH_MODES, StepMechanism, epsilon, separate_composition_epsilon, smallest_noise_within
from raco_bench.privacy.calibration import NO_NOISE_SUFFICES, StepNoiseProblem, StepsProblem
from raco_bench.privacy.counter_rng import Stream

DUAL_UPDATES = ("soft", "hard")
STEP_BUDGETS = ("noise", "steps")
FEWEST_SEARCHED_STEPS = 50  # step_budget=steps: T searched log-uniformly from here (fewer rarely trains) to the sweep's cap


@dataclass(frozen=True)
class SGDAHyper:
    """Defaults inside the searched ranges (docs/methods/raco-dp.md), tuned on Adult at ε = 1."""

    batch_size: int = 1024  # expected batch size B; q = B / n_train
    noise_multiplier: float = 4.0  # σ_m: Gaussian std σ_m·C on the clipped sum (private methods)
    laplace_scale: float = 2.0  # s_L: Laplace(0, s_L) per histogram cell (raco-dp; the sweeps' "b")
    clip_norm: float = 1.0  # C (private methods)
    temperature: float = 1.0  # τ, multiplies the logits (docs/methods/raco-dp.md, D7)
    lr: float = 0.5  # η_θ
    dual_lr: float = 0.5  # η_λ
    dual_update: str = "soft"  # soft | hard (docs/methods/raco-dp.md, D8)
    histogram_batch: str = "shared"  # shared | independent (docs/methods/raco-dp.md, D5)
    lambda_max: float | None = None  # optional box projection of λ (docs/methods/raco-dp.md, D9)
    dual_momentum: float = 0.0  # docs/methods/raco-dp.md, D18
    clip_constraint_value: bool = False  # clip Γ̂ to [0, 1] as the reference code does (docs/methods/raco-dp.md, D6)
    model: str = "logistic"  # logistic | mlp
    hidden: int = 64  # MLP width
    default_steps: int = 2000  # T of non-private members when the run sets no steps
    step_budget: str = "noise"  # private members: noise = σ as set, T from the accountant | steps = T = train_steps, σ calibrated
    train_steps: int = 1000  # step_budget=steps: T (capped by the run's max_steps); σ is the smallest that fits the budget

    def validate(self) -> None:
        if not isinstance(self.batch_size, int) or isinstance(self.batch_size, bool) or self.batch_size < 1:
            raise ValueError(f"invalid batch_size={self.batch_size!r}: the expected batch size must be a positive integer")
        check_positive(self, "noise_multiplier", "laplace_scale", allow_zero=True)
        check_positive(self, "clip_norm", "lr", "dual_lr", "temperature")
        if self.dual_update not in DUAL_UPDATES:
            raise ValueError(f"invalid dual_update={self.dual_update!r}: choose one of {DUAL_UPDATES}")
        if self.histogram_batch not in HISTOGRAM_BATCH_MODES:
            raise ValueError(f"invalid histogram_batch={self.histogram_batch!r}: choose one of {HISTOGRAM_BATCH_MODES}")
        if self.lambda_max is not None and not self.lambda_max > 0:
            raise ValueError(f"invalid lambda_max={self.lambda_max!r}: must be > 0 (or none)")
        if not 0 <= self.dual_momentum < 1:
            raise ValueError(f"invalid dual_momentum={self.dual_momentum!r}: must be in [0, 1)")
        if self.model not in ("logistic", "mlp"):
            raise ValueError(f"invalid model={self.model!r}: choose 'logistic' or 'mlp'")
        if self.hidden < 1 or self.default_steps < 1:
            raise ValueError("hidden and default_steps must be >= 1")
        if self.step_budget not in STEP_BUDGETS:
            raise ValueError(f"invalid step_budget={self.step_budget!r}: choose one of {STEP_BUDGETS} (noise: T from the accountant; "
                             "steps: T = train_steps, noise calibrated)")
        if not isinstance(self.train_steps, int) or isinstance(self.train_steps, bool) or self.train_steps < 1:
            raise ValueError(f"invalid train_steps={self.train_steps!r}: T must be a positive integer")


@dataclass(frozen=True)
class SGDAPlan:
    """A Lagrangian-family run, resolved: the model, the training tensors and the step's numbers."""

    model: object
    data: TrainData
    settings: StepSettings


PRIVACY_FIELDS = ("noise_multiplier", "clip_norm")
HISTOGRAM_FIELDS = ("laplace_scale", "histogram_batch")
DUAL_FIELDS = ("dual_lr", "dual_update", "lambda_max", "dual_momentum", "clip_constraint_value", "temperature")


class LagrangianSGDA(Method):
    """Simultaneous (DP) gradient descent-ascent on the rate-constrained Lagrangian (paper eqs. 2–3, 10–12)."""

    Hyper = SGDAHyper
    constrained: ClassVar[bool]
    engine = LagrangianEngine

    def search_space(self, n_train: int) -> dict:
        """Ranges of docs/methods/raco-dp.md; privacy and dual settings only where the member uses them."""
        from ray import tune

        space = {"lr": tune.loguniform(1e-3, 0.3), "batch_size": tune.choice(batch_choices(n_train))}
        if self.constrained:
            space.update(temperature=tune.uniform(0.5, 4.0), dual_lr=tune.loguniform(1e-2, 1.0))
        if self.private:
            space.update(noise_multiplier=tune.uniform(1.0, 10.0), clip_norm=tune.loguniform(1.0, 30.0))
        if self.private and self.constrained:
            space.update(laplace_scale=tune.uniform(1.0, 20.0))
        return space

    def sweep_space(self, n_train: int, step_budget: str, max_steps: int) -> dict:
        """:meth:`search_space` under a sweep's step budget (docs/sweeps.md, "Step budget"): ``steps`` searches T
        log-uniformly over [50, max_steps] and calibrates σ; ``either`` searches that choice too. A non-private member
        (SGDA, SGD) always searches its T over the same range, whatever the step budget: a reference tuned as the private
        methods are, whose T the accountant does not choose (docs/methods/sgda.md)."""
        space = self.search_space(n_train)
        if not self.private:
            space["default_steps"] = self._searched_steps(max_steps)
            return space
        if step_budget == "noise":
            return space
        space["train_steps"] = self._searched_steps(max_steps)
        from ray import tune

        if step_budget == "steps":
            space.pop("noise_multiplier")
            space["step_budget"] = "steps"
        else:
            space["step_budget"] = tune.choice(["noise", "steps"])
        return space

    @staticmethod
    def _searched_steps(max_steps: int):
        """T's domain in a sweep: log-uniform integers over [50, max_steps] (the cap itself where it is below 50)."""
        from ray import tune

        low = min(FEWEST_SEARCHED_STEPS, max_steps)
        return tune.lograndint(low, max_steps + 1) if max_steps > low else low

    def applicable(self, hyper: SGDAHyper) -> dict:
        drop = set()
        if not self.private:
            drop |= set(PRIVACY_FIELDS) | {"laplace_scale"}
        if not self.constrained:
            drop |= set(DUAL_FIELDS) | set(HISTOGRAM_FIELDS)
        if self.private:
            drop.add("default_steps")  # T is calibrated from the budget, or searched (train_steps)
        if not self.private or hyper.step_budget == "noise":
            drop |= {"step_budget", "train_steps"}
        if hyper.model != "mlp":
            drop.add("hidden")
        return {k: v for k, v in dataclasses.asdict(hyper).items() if k not in drop}

    def step_mechanism(self, hyper: SGDAHyper, n_train: int) -> StepMechanism | None:
        """What one step releases (None for non-private members)."""
        if not self.private:
            return None
        h = hyper
        if h.noise_multiplier <= 0 or (self.constrained and h.laplace_scale <= 0):
            raise ValueError(
                f"method {self.name} is private but noise_multiplier={h.noise_multiplier}, laplace_scale={h.laplace_scale}: "
                "zero noise gives no privacy; use a positive noise, or method 'sgda' / 'sgd' for non-private training"
            )
        return StepMechanism(
            sampling_rate=h.batch_size / n_train,
            noise_multiplier=h.noise_multiplier,
            laplace_scale=h.laplace_scale if self.constrained else None,
            histogram_batch=h.histogram_batch,
        )

    def calibration(self, hyper: SGDAHyper, n_train: int, budget: Budget) -> StepsProblem | StepNoiseProblem | None:
        """T for the budget (private members, step_budget=noise), or σ for T = train_steps (step_budget=steps)."""
        mech = self.step_mechanism(hyper, n_train)
        if mech is None:
            return None
        if hyper.step_budget == "steps":
            return StepNoiseProblem(mech, min(hyper.train_steps, budget.max_steps), budget.epsilon, budget.delta, budget.selection)
        return StepsProblem(mech, budget.epsilon, budget.delta, budget.max_steps, budget.selection)

    def resolved(self, hyper: SGDAHyper, n_train: int, budget: Budget, cache=None) -> SGDAHyper:
        """``hyper`` with its calibrated σ where the step budget is searched (unchanged otherwise); ValueError when no σ fits."""
        if not self.private or hyper.step_budget != "steps":
            return hyper
        from raco_bench.privacy.calibration import CalibrationCache

        problem = self.calibration(hyper, n_train, budget)
        sigma = (cache or CalibrationCache()).solve(problem)
        if sigma == NO_NOISE_SUFFICES:
            raise ValueError(f"no noise multiplier lets T={problem.steps} steps fit epsilon={budget.epsilon} with laplace_scale={hyper.laplace_scale}: "
                             "the Laplace histogram alone spends the budget; lower train_steps or raise laplace_scale")
        return dataclasses.replace(hyper, noise_multiplier=sigma)

    def privacy_event(self, hyper: SGDAHyper, n_train: int, budget: Budget):
        """T steps of the step's event (Poisson-sampled Gaussian; RaCO-DP's shared-batch Gaussian + Laplace), then the
        private selection's Laplace releases."""
        mech = self.step_mechanism(hyper, n_train)
        if mech is None:
            return None
        if budget.steps is None:
            raise ValueError(f"method {self.name}: the privacy event needs T (budget.steps); calibrate it first")
        if hyper.step_budget == "steps" and int(budget.steps) > min(hyper.train_steps, budget.max_steps):
            # σ is calibrated to spend ε in T = train_steps (capped): more steps with it overspend, a run prepare refuses
            raise ValueError(f"method {self.name}: step_budget=steps calibrates σ for T = {min(hyper.train_steps, budget.max_steps)} "
                             f"(train_steps, capped at max_steps) but the event asks for T = {budget.steps}, which overspends the "
                             "budget; pass the T the run trained")
        from dp_accounting.dp_event import SelfComposedDpEvent  # here: the plugin trains where dp-accounting is absent (a kit)

        from raco_bench.privacy import events

        mech = self.step_mechanism(self.resolved(hyper, n_train, budget), n_train)
        return events.compose(SelfComposedDpEvent(events.step_event(mech), int(budget.steps)), events.selection_event(budget.selection))

    def calibrated(self, problem: StepsProblem | StepNoiseProblem, value: float) -> dict:
        if isinstance(problem, StepNoiseProblem):
            if value == NO_NOISE_SUFFICES:
                return {"skip": f"no noise multiplier lets T={problem.steps} steps fit the budget: the Laplace histogram alone spends it"}
            return {"steps": problem.steps, "params": {"noise_multiplier": value}}
        if int(value) == 0:
            return {"skip": "the privacy budget does not allow a single step with this configuration"}
        return {"steps": int(value)}

    def prepare(self, ctx: Context) -> None:
        if self.private and ctx.hyper.step_budget == "steps":  # σ calibrated for T = train_steps, then T checked as a fixed T is
            ctx.hyper = self.resolved(ctx.hyper, ctx.n_train, ctx.budget, ctx.cache)
            run = ctx.config
            problem = StepsProblem(self.step_mechanism(ctx.hyper, ctx.n_train), run.epsilon, run.delta, run.max_steps, run.selection)
            ctx.steps = plan_steps(ctx, problem, ctx.hyper.default_steps) if run.steps is not None else min(ctx.hyper.train_steps, run.max_steps)
        else:
            problem = self.calibration(ctx.hyper, ctx.n_train, ctx.budget)
            ctx.steps = plan_steps(ctx, problem, ctx.hyper.default_steps)
        h = ctx.hyper
        q = check_batch(ctx, h.batch_size)
        ctx.plan = SGDAPlan(
            model=build_model(h.model, ctx.dataset.n_features, ctx.dataset.n_classes, h.hidden),
            data=train_tensors(ctx, self.constrained),
            settings=StepSettings(
                sampling_rate=q,
                expected_batch=float(h.batch_size),
                clip_norm=h.clip_norm if self.private else None,
                noise_std=h.noise_multiplier * h.clip_norm if self.private else 0.0,
                laplace_scale=h.laplace_scale if (self.private and self.constrained) else None,
                temperature=h.temperature, lr=h.lr, dual_lr=h.dual_lr, dual_update=h.dual_update,
                histogram_batch=h.histogram_batch, lambda_max=h.lambda_max, dual_momentum=h.dual_momentum,
                clip_constraint_value=h.clip_constraint_value,
            ),
        )
        ctx.privacy = self._privacy(ctx, problem.mechanism if problem else None).as_dict()
        if self.private and ctx.privacy["epsilon_spent"] > ctx.config.epsilon * (1 + 1e-9):  # the last word, whatever calibrated T or σ
            raise ValueError(f"T={ctx.steps} with noise_multiplier={h.noise_multiplier} spends epsilon={ctx.privacy['epsilon_spent']:.4f} > the "
                             f"budget {ctx.config.epsilon}; nothing was trained")

    def _privacy(self, ctx: Context, mech: StepMechanism | None) -> PrivacyPlan:
        run, T = ctx.config, ctx.steps
        if mech is None:
            return PrivacyPlan.none(T, run.delta)
        joint = mech.laplace_scale is not None and mech.histogram_batch == "shared"
        details = {"sampling_rate": mech.sampling_rate, "noise_multiplier": mech.noise_multiplier}
        if mech.laplace_scale is not None:
            details.update(
                laplace_scale=mech.laplace_scale, histogram_batch=mech.histogram_batch,
                epsilon_separate_composition_reference=separate_composition_epsilon(mech, T, run.delta),
                epsilon_separate_composition_note=(
                    "[reference only] what composing the two subsampled mechanisms separately claims (the reference implementation); "
                    "it understates a shared batch"),
            )
        accounting = ("joint PLD of one Poisson batch feeding Gaussian and Laplace" if joint else "dp-accounting PLD of Poisson-subsampled mechanisms")
        return PrivacyPlan(
            private=True, notion="record-level add/remove DP", delta=run.delta, steps=T, target_epsilon=run.epsilon,
            epsilon_spent=epsilon(mech, T, run.delta, run.selection),
            accounting=accounting + (selection_note(run.selection) if run.selection is not None else ""),
            details=tuple(details.items()),
        )

    def init_state(self, ctx: Context, stream: Stream) -> TrainState:
        J = ctx.problem.n_constraints if self.constrained else 0
        zeros = torch.zeros(J, device=ctx.device)
        return TrainState(self.model(ctx).init(stream), zeros, zeros.clone(), 0, stream)

    def step(self, ctx: Context, state: TrainState) -> TrainState:
        plan = ctx.plan
        new, release = sgda_step(state, plan.data, plan.model, plan.settings, ctx.rates if self.constrained else None)
        new.last_release = release
        return new

    def audit_view(self, run, canary_row: int, engine=None):
        return lagrangian_view(run, canary_row, engine)

    def audit_noise(self, hyper: SGDAHyper, sampling_rate: float, steps: int, epsilon_: float, delta: float) -> dict:
        """σ (and s_L, keeping the configuration's ratio) scaled together until ``steps`` steps spend ``epsilon_``."""
        sigma0, lap0 = hyper.noise_multiplier, (hyper.laplace_scale if self.constrained else None)

        def spent(f: float) -> float:
            return epsilon(StepMechanism(sampling_rate, f * sigma0, None if lap0 is None else f * lap0), steps, delta)

        f = smallest_noise_within(spent, epsilon_, 1e6, "the audited run cannot meet the claim")
        fixed = {"step_budget": "noise"} if hyper.step_budget != "noise" else {}  # the audit fixes σ and T itself: no recalibration
        return {"noise_multiplier": f * sigma0} | ({"laplace_scale": f * lap0} if lap0 is not None else {}) | fixed

    def report(self, ctx: Context, state: TrainState) -> dict:
        return lagrangian_report(self, state.lam, state.last_release.constraint_estimates if state.last_release is not None else None)


class RacoDP(LagrangianSGDA):
    name = "raco-dp"
    description = "RaCO-DP: DP-SGDA with a Laplace-noised rate histogram (Yaghini et al.)"
    private = True
    constrained = True
    style = ("#4477AA", "o")  # Tol bright blue (docs/results.md, "Figures")
    doc = "docs/methods/raco-dp.md"
    compared_with = ("dp-fermi", "dp-fermi-a-only", "sgda")  # the papers' claims: against DP-FERMI (both notions) and non-private SGDA


class SGDA(LagrangianSGDA):
    name = "sgda"
    description = "non-private SGDA on the same rate-constrained Lagrangian (exact histogram, no clipping, no noise)"
    private = False
    constrained = True
    style = ("#228833", "^")  # Tol bright green
    doc = "docs/methods/sgda.md"


class DPSGD(LagrangianSGDA):
    """DP-SGD with Opacus' semantics: flat per-sample clipping to C, N(0, σ²C²) added to the sum,
    division by the expected batch size, Poisson sampling; accounted with dp-accounting's PLD."""

    name = "dp-sgd"
    description = "DP-SGD (unconstrained), Poisson sampling, PLD-accounted"
    private = True
    constrained = False
    gamma_is_input = False
    in_default_sweeps = False
    timing_reference = True
    style = ("#AA3377", "D")  # Tol bright purple
    doc = "docs/methods/dp-sgd.md"


class SGD(LagrangianSGDA):
    name = "sgd"
    description = "non-private SGD on the cross-entropy (unconstrained)"
    private = False
    constrained = False
    gamma_is_input = False
    in_default_sweeps = False
    style = ("#CCBB44", "v")  # Tol bright yellow
    doc = "docs/methods/dp-sgd.md"
