"""One step of (DP) stochastic gradient descent-ascent: Algorithm 1 of the RaCO-DP paper.

The step is a function of explicit state (parameters, multipliers, dual velocity, step count and the
run's random stream) and returns the new state. Step t draws its batch and noise from the counter
generator's streams of (seed, t) (:mod:`raco_bench.privacy.counter_rng`), so the same configuration
draws the same numbers inside a pack (:mod:`raco_bench.packs`). The same function covers:

* RaCO-DP: clipping, Gaussian noise and a Laplace-noised histogram;
* non-private SGDA: exact histogram, no clipping, no noise;
* DP-SGD and SGD: no constraints (``rates=None``).

Line numbers refer to Algorithm 1 as listed in docs/methods/raco-dp.md ("One step").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from raco_bench.constraints.problem import CompiledRates
from raco_bench.data.tensors import TrainData
from raco_bench.models import Batch, Params
from raco_bench.objective import tempered_softmax
from raco_bench.privacy.counter_rng import HISTOGRAM_BATCH, Stream


@dataclass
class TrainState:
    params: Params
    lam: torch.Tensor  # J multipliers, λ_0 = 0
    dual_velocity: torch.Tensor
    step: int
    stream: Stream
    last_release: "StepRelease | None" = None


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
    """What a step releases beyond the model: the noisy histogram Ĥ (a Laplace release; exact, and so
    not private, for non-private methods) and its post-processed constraint estimates Γ̂ (eq. 12).

    ``batch`` (the sampled row indices) is NOT released: it is kept for white-box tests and audits,
    which recompute the exact quantities of the step and compare (tests/test_step_privacy.py)."""

    histogram: torch.Tensor | None
    constraint_estimates: torch.Tensor | None
    batch: torch.Tensor | None = None


@dataclass(frozen=True)
class StepDraws:
    """The randomness of one step, given instead of drawn (white-box sensitivity tests and audits):
    the gradient batch's row indices, unit Gaussians for the gradient noise (one per parameter, in
    parameter order) and unit Laplace draws for the histogram (parts × classes). The step scales them
    by its own σ·C and s_L, exactly as it scales its own draws."""

    batch: torch.Tensor
    gaussian: torch.Tensor | None = None
    laplace: torch.Tensor | None = None


def _histogram(state: TrainState, data: TrainData, model, s: StepSettings, rows: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
    """Line 2: H[l, k] = Σ_{x∈B∩D_l} p_k(x) on the gradient batch (shared) or a fresh batch (independent)."""
    if s.histogram_batch == "independent":
        hidx = state.stream.batch(state.step + 1, data.n, s.histogram_sampling_rate or s.sampling_rate, HISTOGRAM_BATCH)
        rows = data.table[hidx]
        probs = tempered_softmax(model.logits(state.params, data.X[hidx]), s.temperature)
    if s.dual_update == "hard":  # the one-hot argmax histogram is the only one released (docs/methods/raco-dp.md, D8)
        probs = torch.nn.functional.one_hot(probs.argmax(1), probs.shape[1]).to(probs.dtype)
    return data.parts_onehot(rows).T @ probs


def sgda_step(
    state: TrainState, data: TrainData, model, s: StepSettings, rates: CompiledRates | None = None, draws: StepDraws | None = None
) -> tuple[TrainState, StepRelease]:
    """One simultaneous primal-dual step (Algorithm 1, lines 1–9); ``draws`` replaces its randomness."""
    stream, t = state.stream, state.step + 1
    idx = draws.batch if draws is not None else stream.batch(t, data.n, s.sampling_rate)  # line 1
    rows = data.table[idx]
    Xb = data.X[idx]
    probs = tempered_softmax(model.logits(state.params, Xb), s.temperature)
    n_gauss = sum(p.numel() for p in state.params.values()) if s.noise_std > 0 else 0
    if draws is not None:
        z = draws.gaussian if n_gauss else None
    else:
        z = stream.normal(t, n_gauss, dtype=Xb.dtype) if n_gauss else None

    coef = estimates = H = None
    if rates is not None:
        H = _histogram(state, data, model, s, rows, probs)  # line 2
        if s.laplace_scale is not None:  # line 3: Ĥ = H + Lap(s_L), iid per cell
            if draws is not None:
                H = H + s.laplace_scale * draws.laplace
            else:
                H = H + s.laplace_scale * stream.laplace(t, H.numel(), dtype=H.dtype).view_as(H)
        # lines 4 and 8 (post-processing of Ĥ): n̂_I, Γ̂ (eq. 12), and eq. 10's coefficients scaled by B
        coef_parts, estimates = rates.dual_quantities(H, state.lam, s.expected_batch)
        coef = data.parts_onehot(rows) @ coef_parts

    # lines 5–6: per-sample gradients, clipped to C, summed, noised; line 7 divides by B
    batch = Batch(Xb, data.y[idx], data.labels_onehot(rows), data.sq_norms(rows))
    grads = model.lagrangian_grad_sum(state.params, batch, probs, coef, s.temperature, s.clip_norm)
    params, offset = {}, 0
    for name, p in state.params.items():
        gsum = grads[name]
        if n_gauss:
            gsum = torch.add(gsum, z[offset : offset + p.numel()].view_as(p), alpha=s.noise_std)
            offset += p.numel()
        params[name] = torch.add(p, gsum, alpha=-s.lr / s.expected_batch)  # line 7

    lam, velocity = state.lam, state.dual_velocity
    if rates is not None:
        estimates = estimates.to(lam.device)
        ascent = (estimates.clamp(0.0, 1.0) if s.clip_constraint_value else estimates) - rates.gamma
        if s.dual_momentum > 0:
            velocity = torch.add(s.dual_momentum * velocity, ascent, alpha=s.dual_lr)
            lam = (lam + velocity).clamp_min_(0.0)
        else:
            lam = torch.add(lam, ascent, alpha=s.dual_lr).clamp_min_(0.0)  # line 9, Π onto ℝ^J_{≥0}
        if s.lambda_max is not None:
            lam = lam.clamp_max_(s.lambda_max)
    return TrainState(params, lam, velocity, t, stream), StepRelease(H, estimates, idx)


def lagrangian_report(method, lam: torch.Tensor, estimates: torch.Tensor | None) -> dict:
    """The diagnostics a Lagrangian run logs at each evaluation: the largest multiplier and the largest Γ̂ of
    the last step (a released, noisy value for private members; an exact batch value otherwise)."""
    if not method.constrained or estimates is None:
        return {}
    label = "noisy_constraint_max" if method.private else "batch_constraint_max_nonprivate"
    return {"lambda_max": float(lam.max()), label: float(estimates.max())}
