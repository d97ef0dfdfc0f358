"""Algorithm 1 for K configurations at once: the Lagrangian family (RaCO-DP, SGDA, DP-SGD, SGD) with
logistic regression, as batched tensors (parameters K × c × d, multipliers K × J).

Every configuration keeps its own σ, s_L, C, τ, η_θ, η_λ, expected batch size B (its own q), γ,
dual-update rule, seed and T. Step t of configuration k draws its Poisson batch, its Laplace
histogram noise and its Gaussian gradient noise from the streams of (seed_k, t)
(:mod:`raco_bench.privacy.counter_rng`), exactly the numbers :func:`raco_bench.training.step.sgda_step`
draws when the configuration trains alone; only floating-point reduction order differs. A
configuration whose T has passed keeps its state while the others go on.

Batches have different sizes, so they are padded to the widest one (slots past a configuration's
batch gather row n − 1 with weight zero). The step follows ``sgda_step`` line by line; the line
numbers are Algorithm 1's (docs/methods/raco-dp.md, "One step").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from raco_bench.constraints.problem import CompiledRates
from raco_bench.privacy import counter_rng as rng
from raco_bench.training.step import TrainData


@dataclass(frozen=True)
class PackSettings:
    """Per-configuration numbers of a pack (vectors of length K; J columns for γ)."""

    seeds: torch.Tensor  # int64
    steps: torch.Tensor  # int64, T_k
    sampling_rate: torch.Tensor  # float64, q_k
    expected_batch: torch.Tensor  # B_k
    clip_norm: torch.Tensor  # C_k (inf: no clipping)
    noise_std: torch.Tensor  # σ_k·C_k (0: none)
    laplace_scale: torch.Tensor  # s_L (0: exact histogram)
    temperature: torch.Tensor
    lr: torch.Tensor
    dual_lr: torch.Tensor
    hard: torch.Tensor  # bool: the one-hot argmax histogram (dual_update = hard)
    lambda_max: torch.Tensor  # inf: none
    dual_momentum: torch.Tensor
    clip_constraint_value: torch.Tensor  # bool
    gamma: torch.Tensor  # K × J
    private: bool
    constrained: bool

    @property
    def size(self) -> int:
        return int(self.seeds.shape[0])


@dataclass
class PackState:
    weight: torch.Tensor  # K × c × d
    bias: torch.Tensor  # K × c
    lam: torch.Tensor  # K × J
    velocity: torch.Tensor  # K × J
    step: int  # steps taken (the same for every configuration; those past T_k are frozen)
    estimates: torch.Tensor | None = None  # K × J: each configuration's last Γ̂ (its method's report() shows the max)

    def params(self, k: int) -> dict[str, torch.Tensor]:
        return {"weight": self.weight[k], "bias": self.bias[k]}


def dual_quantities(rates: CompiledRates, H: torch.Tensor, lam: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:meth:`CompiledRates.dual_quantities` for K histograms: (part coefficients K × P × c, Γ̂ K × J)."""
    K, c = H.shape[0], rates.n_classes
    MH = torch.matmul(rates.membership, H)  # K × U × c
    inv_sizes = MH.sum(-1, keepdim=True).clamp_min(1.0).reciprocal()
    estimates = (MH * inv_sizes).reshape(K, -1) @ rates.weights.T
    coef = torch.matmul(rates.membership.T, (lam @ rates.weights).reshape(K, -1, c) * (inv_sizes * scale[:, None, None]))
    return coef, estimates


def pack_step(state: PackState, data: TrainData, s: PackSettings, rates: CompiledRates | None) -> PackState:
    """One simultaneous primal-dual step for every configuration still within its T."""
    t = state.step + 1
    active = s.steps >= t
    rows, valid = rng.poisson_rows(rng.stream_keys(s.seeds, t, rng.BATCH), data.n, s.sampling_rate)  # line 1
    table = data.table[rows]  # K × M × (c + 1 + P)
    Xb = data.X[rows]  # K × M × d
    mask = valid.to(Xb.dtype)
    logits = torch.baddbmm(state.bias[:, None, :], Xb, state.weight.transpose(1, 2))
    probs = torch.softmax(s.temperature[:, None, None] * logits, dim=-1)
    c = data.n_classes
    y_onehot = table[..., :c]

    coef = None
    lam, velocity, last = state.lam, state.velocity, state.estimates
    if s.constrained and rates is not None:
        parts = table[..., c + 1 :] * mask[..., None]  # K × M × P, zero on padding
        hist_probs = torch.where(s.hard[:, None, None], torch.nn.functional.one_hot(probs.argmax(-1), c).to(probs.dtype), probs)
        H = torch.bmm(parts.transpose(1, 2), hist_probs)  # line 2: K × P × c
        if s.private:  # line 3: Ĥ = H + Lap(s_L), iid per cell
            lap = rng.laplace(rng.stream_keys(s.seeds, t, rng.LAPLACE), H.shape[1] * H.shape[2]).to(H.dtype).view_as(H)
            H = H + s.laplace_scale[:, None, None] * lap
        coef_parts, estimates = dual_quantities(rates, H, lam, s.expected_batch)  # lines 4 and 8
        coef = torch.bmm(parts, coef_parts)

    # lines 5–6: rank-1 per-sample gradients r_i ⊗ [x_i; 1], clipped to C, summed, noised; line 7 divides by B
    residual = probs - y_onehot
    if coef is not None:
        residual = torch.addcmul(residual, probs, coef - (coef * probs).sum(-1, keepdim=True))
    residual = residual * s.temperature[:, None, None]
    norms_sq = residual.square().sum(-1) * table[..., c]
    factor = torch.rsqrt(norms_sq).mul_(s.clip_norm[:, None]).clamp_(max=1.0) * mask
    residual = residual * factor[..., None]
    grad_w = torch.bmm(residual.transpose(1, 2), Xb)
    grad_b = residual.sum(1)
    if s.private:
        d = grad_w.shape[2]
        z = rng.normal(rng.stream_keys(s.seeds, t, rng.GAUSSIAN), c * d + c).to(grad_w.dtype)
        grad_w = grad_w + s.noise_std[:, None, None] * z[:, : c * d].view_as(grad_w)
        grad_b = grad_b + s.noise_std[:, None] * z[:, c * d :]
    step_size = torch.where(active, -s.lr / s.expected_batch, torch.zeros_like(s.lr))
    weight = state.weight + step_size[:, None, None] * grad_w
    bias = state.bias + step_size[:, None] * grad_b

    if coef is not None:  # line 9: projected ascent on λ (optionally with momentum and a box)
        ascent = torch.where(s.clip_constraint_value[:, None], estimates.clamp(0.0, 1.0), estimates) - s.gamma
        momentum = s.dual_momentum[:, None]
        with_momentum = momentum > 0
        new_velocity = torch.where(with_momentum, momentum * velocity + s.dual_lr[:, None] * ascent, velocity)
        new_lam = torch.where(with_momentum, lam + new_velocity, lam + s.dual_lr[:, None] * ascent).clamp_min(0.0)
        new_lam = torch.minimum(new_lam, s.lambda_max[:, None])
        keep = active[:, None]
        lam, velocity = torch.where(keep, new_lam, lam), torch.where(keep, new_velocity, velocity)
        last = estimates if last is None else torch.where(keep, estimates, last)
    return PackState(weight, bias, lam, velocity, t, last)
