"""RaCO-DP (Algorithm 1) as a method plugin, and the Lagrangian SGDA family it belongs to.

The family shares one step (:func:`raco_bench.training.step.sgda_step`) and one hyperparameter
set; its members differ only in whether they use the rate constraints and whether they are private:

| method | constraints | privacy |
|---|---|---|
| raco-dp | yes | Laplace histogram + clipped Gaussian gradient, PLD-accounted (joint PLD for a shared batch) |
| sgda (baselines) | yes | none: exact histogram, no clipping, no noise |
| dp-sgd (baselines) | no | clipped Gaussian gradient, PLD-accounted |
| sgd (baselines) | no | none |
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from raco_bench.methods.base import Context, Method, check_positive
from raco_bench.models import build_model
from raco_bench.privacy.accounting import HISTOGRAM_BATCH_MODES, StepMechanism, epsilon, separate_composition_epsilon
from raco_bench.training.step import StepSettings, TrainData, TrainState, sgda_step

DUAL_UPDATES = ("soft", "hard")


@dataclass(frozen=True)
class SGDAHyper:
    """Defaults from raco_dp_spec.md §5.2's ranges, tuned on Adult at ε = 1 (see the README)."""

    batch_size: int = 1024  # expected batch size B; q = B / n_train
    noise_multiplier: float = 4.0  # σ_m: Gaussian std σ_m·C on the clipped sum (private methods)
    laplace_scale: float = 2.0  # s_L: Laplace(0, s_L) per histogram cell (raco-dp; the sweeps' "b")
    clip_norm: float = 1.0  # C (private methods)
    temperature: float = 1.0  # τ, multiplies the logits (spec Q7)
    lr: float = 0.5  # η_θ
    dual_lr: float = 0.5  # η_λ
    dual_update: str = "soft"  # soft | hard (spec Q8)
    histogram_batch: str = "shared"  # shared | independent (spec Q5)
    lambda_max: float | None = None  # optional box projection of λ (spec Q9)
    dual_momentum: float = 0.0  # spec Q18
    clip_constraint_value: bool = False  # clip Γ̂ to [0, 1] as the reference code does (spec Q6)
    model: str = "logistic"  # logistic | mlp
    hidden: int = 64  # MLP width
    default_steps: int = 2000  # T of non-private members when the run sets no steps

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


def check_batch(ctx: Context, batch_size: int) -> float:
    """q = B / n, validated against the training-set size."""
    if batch_size > ctx.n_train:
        raise ValueError(f"invalid batch_size={batch_size}: q = batch_size / n_train must be in (0, 1]; n_train = {ctx.n_train}")
    return batch_size / ctx.n_train


def plan_steps(ctx: Context, mech: StepMechanism | None, default_steps: int) -> int:
    """T: the run's steps, or the largest the (ε, δ) budget allows (checked either way)."""
    run = ctx.run
    if mech is None:
        return run.steps or min(default_steps, run.max_steps)
    if run.steps is not None:
        spent = epsilon(mech, run.steps, run.delta, run.selection)
        if spent > run.epsilon:
            raise ValueError(
                f"steps={run.steps} would spend epsilon={spent:.4f} > the budget {run.epsilon}; "
                "lower steps, raise epsilon, or leave steps unset to calibrate it"
            )
        return run.steps
    T = ctx.cache.max_steps(mech, run.epsilon, run.delta, run.max_steps, run.selection)
    if T == 0:
        raise ValueError(
            f"the budget epsilon={run.epsilon}, delta={run.delta} does not allow a single step with q={mech.sampling_rate:.4g}, "
            f"noise_multiplier={mech.noise_multiplier}, laplace_scale={mech.laplace_scale}; raise the noise or epsilon, or lower batch_size"
        )
    return T


def selection_note(selection) -> str:
    return f", composed with {selection.count} Laplace({selection.laplace_scale:g}) validation-count releases (private checkpoint selection)"


def train_tensors(ctx: Context, with_parts: bool) -> TrainData:
    ds, dev = ctx.dataset, ctx.device
    X = torch.as_tensor(ds.train.X, device=dev)
    y = torch.as_tensor(ds.train.y, device=dev)
    if not with_parts:
        return TrainData.build(X, y, ds.n_classes)
    parts = torch.as_tensor(ctx.problem.partition.assign(ds.train.y, ds.train.group), device=dev)
    return TrainData.build(X, y, ds.n_classes, parts, ctx.problem.partition.n_parts)


class LagrangianSGDA(Method):
    """Simultaneous (DP) gradient descent-ascent on the rate-constrained Lagrangian (paper eqs. 2–3, 10–12)."""

    Hyper = SGDAHyper
    constrained: ClassVar[bool]

    def step_mechanism(self, hyper: SGDAHyper, n_train: int) -> StepMechanism | None:
        """What one step releases (None for non-private members); the sweep driver calibrates from it too."""
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

    def prepare(self, ctx: Context) -> None:
        h = ctx.hyper
        q = check_batch(ctx, h.batch_size)
        mech = self.step_mechanism(h, ctx.n_train)
        ctx.steps = plan_steps(ctx, mech, h.default_steps)
        ctx.extra["model"] = build_model(h.model, ctx.dataset.n_features, ctx.dataset.n_classes, h.hidden)
        ctx.extra["data"] = train_tensors(ctx, self.constrained)
        ctx.extra["settings"] = StepSettings(
            sampling_rate=q,
            expected_batch=float(h.batch_size),
            clip_norm=h.clip_norm if self.private else None,
            noise_std=h.noise_multiplier * h.clip_norm if self.private else 0.0,
            laplace_scale=h.laplace_scale if (self.private and self.constrained) else None,
            temperature=h.temperature, lr=h.lr, dual_lr=h.dual_lr, dual_update=h.dual_update,
            histogram_batch=h.histogram_batch, lambda_max=h.lambda_max, dual_momentum=h.dual_momentum,
            clip_constraint_value=h.clip_constraint_value,
        )
        ctx.privacy = self._privacy(ctx, mech)

    def _privacy(self, ctx: Context, mech: StepMechanism | None) -> dict:
        run, T = ctx.run, ctx.steps
        if mech is None:
            return {"private": False, "notion": "none", "delta": run.delta, "steps": T, "epsilon_spent": math.inf, "accounting": "none (non-private)"}
        joint = mech.laplace_scale is not None and mech.histogram_batch == "shared"
        out = {
            "private": True, "notion": "record-level add/remove DP", "delta": run.delta, "target_epsilon": run.epsilon, "steps": T,
            "epsilon_spent": epsilon(mech, T, run.delta, run.selection), "sampling_rate": mech.sampling_rate,
            "noise_multiplier": mech.noise_multiplier, "laplace_scale": mech.laplace_scale,
            "histogram_batch": mech.histogram_batch if mech.laplace_scale is not None else None,
            "accounting": ("joint PLD of one Poisson batch feeding Gaussian and Laplace" if joint else "dp-accounting PLD of Poisson-subsampled mechanisms")
                          + (selection_note(run.selection) if run.selection is not None else ""),
        }
        if mech.laplace_scale is not None:
            out["epsilon_separate_composition_reference"] = separate_composition_epsilon(mech, T, run.delta)
            out["epsilon_separate_composition_note"] = (
                "[reference only] what composing the two subsampled mechanisms separately claims (the reference implementation); "
                "it understates a shared batch"
            )
        return out

    def init_state(self, ctx: Context, generator: torch.Generator) -> TrainState:
        J = ctx.problem.n_constraints if self.constrained else 0
        zeros = torch.zeros(J, device=ctx.device)
        return TrainState(self.model(ctx).init(generator, ctx.device), zeros, zeros.clone(), 0, generator)

    def step(self, ctx: Context, state: TrainState) -> TrainState:
        new, release = sgda_step(state, ctx.extra["data"], self.model(ctx), ctx.extra["settings"], ctx.rates if self.constrained else None)
        new.last_release = release
        return new

    def report(self, ctx: Context, state: TrainState) -> dict:
        if not self.constrained or state.last_release is None:
            return {}
        est = state.last_release.constraint_estimates
        label = "noisy_constraint_max" if self.private else "batch_constraint_max_nonprivate"
        return {"lambda_max": float(state.lam.max()), label: float(est.max())}


class RacoDP(LagrangianSGDA):
    name = "raco-dp"
    description = "RaCO-DP: DP-SGDA with a Laplace-noised rate histogram (Yaghini et al.)"
    private = True
    constrained = True
