"""One step of (DP) stochastic gradient descent-ascent: Algorithm 1 of the RaCO-DP paper.

The step is a function of explicit state (parameters, multipliers, dual velocity, generator) and
returns the new state, so many configurations can later be batched. The same function covers:

* RaCO-DP: clipping, Gaussian noise and a Laplace-noised histogram;
* non-private SGDA: exact histogram, no clipping, no noise;
* DP-SGD and SGD: no constraints (``rates=None``).

Line numbers refer to Algorithm 1 in raco_dp_spec.md §2.1.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from raco_bench.constraints.problem import CompiledRates
from raco_bench.models import LogisticRegression, Params
from raco_bench.privacy import noise
from raco_bench.privacy.sampling import poisson_batch
from raco_bench.training.objective import lagrangian_residual, lagrangian_value, tempered_softmax


@dataclass
class TrainState:
    params: Params
    lam: torch.Tensor  # J multipliers, λ_0 = 0
    dual_velocity: torch.Tensor
    step: int
    generator: torch.Generator


@dataclass(frozen=True)
class TrainData:
    """The training split as device tensors, with per-sample constants precomputed."""

    X: torch.Tensor
    y: torch.Tensor
    y_onehot: torch.Tensor
    parts: torch.Tensor | None
    sq_norms: torch.Tensor  # ‖x‖² + 1, for the rank-1 gradient norms

    @property
    def n(self) -> int:
        return int(self.X.shape[0])


@dataclass(frozen=True)
class StepSettings:
    """Resolved numbers of a step; ``None`` clip / noise / Laplace mean "not applied"."""

    sampling_rate: float  # q
    expected_batch: float  # B = q·n
    clip_norm: float | None
    noise_std: float  # σ_m·C, added to the clipped sum (0: none)
    laplace_scale: float | None  # None: exact histogram (non-private)
    temperature: float
    lr: float
    dual_lr: float
    dual_update: str = "soft"
    histogram_batch: str = "shared"
    histogram_sampling_rate: float | None = None
    lambda_max: float | None = None
    dual_momentum: float = 0.0
    clip_constraint_value: bool = False


@dataclass(frozen=True)
class StepRelease:
    """What a step releases beyond the model: the post-processed constraint estimates Γ̂ (eq. 12)."""

    constraint_estimates: torch.Tensor | None


def _noisy_histogram(
    state: TrainState, data: TrainData, rates: CompiledRates, model, s: StepSettings, idx: torch.Tensor, probs: torch.Tensor
) -> torch.Tensor:
    """Lines 2–3: Ĥ = H + Lap(s_L) from the gradient batch (shared) or a fresh one (independent)."""
    if s.histogram_batch == "independent":
        idx = poisson_batch(data.n, s.histogram_sampling_rate or s.sampling_rate, state.generator, data.X.device)
        probs = tempered_softmax(model.logits(state.params, data.X[idx]), s.temperature)
    if s.dual_update == "hard":  # one-hot argmax histogram, the only one released (spec Q8)
        probs = torch.nn.functional.one_hot(probs.argmax(1), probs.shape[1]).to(probs.dtype)
    H = rates.histogram(probs, data.parts[idx])
    if s.laplace_scale is not None:
        H = H + noise.laplace(tuple(H.shape), s.laplace_scale, state.generator, H)
    return H


def sgda_step(state: TrainState, data: TrainData, model, s: StepSettings, rates: CompiledRates | None = None) -> tuple[TrainState, StepRelease]:
    """One simultaneous primal-dual step (Algorithm 1, lines 1–9)."""
    g = state.generator
    idx = poisson_batch(data.n, s.sampling_rate, g, data.X.device)  # line 1
    Xb = data.X[idx]
    logits = model.logits(state.params, Xb)
    probs = tempered_softmax(logits, s.temperature)

    coef = H = sizes = None
    if rates is not None:
        H = _noisy_histogram(state, data, rates, model, s, idx, probs)  # lines 2–3
        sizes = rates.subset_sizes(H)  # line 4, post-processing
        # eq. 10 scaled by B: c_x = B · Σ_j λ_j Σ_{I∋x} w_j[I,k] / n̂_I
        coef = (s.expected_batch * rates.part_coefficients(state.lam, sizes))[data.parts[idx]]

    # lines 5–6: per-sample gradients, clipped to C, summed, noised, divided by B
    if isinstance(model, LogisticRegression):
        residual = lagrangian_residual(probs, data.y_onehot[idx], coef, s.temperature)
        grads = model.clipped_grad_sum(state.params, Xb, residual, s.clip_norm, data.sq_norms[idx])
    else:
        c = coef if coef is not None else probs.new_zeros(probs.shape)
        objective = lambda z, yi, ci: lagrangian_value(z, yi, ci, s.temperature)  # noqa: E731
        grads = model.clipped_grad_sum_of(state.params, Xb, objective, data.y[idx], c, s.clip_norm)
    params = {}
    for name, p in state.params.items():
        gsum = grads[name]
        if s.noise_std > 0:
            gsum = gsum + noise.gaussian(tuple(gsum.shape), s.noise_std, g, gsum)
        params[name] = p - (s.lr / s.expected_batch) * gsum  # line 7

    lam, velocity, estimates = state.lam, state.dual_velocity, None
    if rates is not None:
        estimates = rates.values(H, sizes)  # line 8, eq. 12
        ascent = (estimates.clamp(0.0, 1.0) if s.clip_constraint_value else estimates) - rates.gamma
        velocity = s.dual_momentum * velocity + s.dual_lr * ascent
        lam = (lam + velocity).clamp_min(0.0)  # line 9, Π onto ℝ^J_{≥0}
        if s.lambda_max is not None:
            lam = lam.clamp_max(s.lambda_max)
    new_state = TrainState(params, lam, velocity, state.step + 1, g)
    return new_state, StepRelease(estimates)
