"""The toy's step for K configurations at once: Poisson batch, per-example clipping, Gaussian noise, one SGD step."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from raco_bench.packs.engine import Engine, vector
from raco_bench.privacy import clip_noise
from raco_bench.privacy import counter_rng as rng


@dataclass(frozen=True)
class ToySettings:
    seeds: torch.Tensor  # K
    steps: torch.Tensor  # K
    sampling_rate: torch.Tensor  # K, float64
    clip: torch.Tensor  # K
    noise_std: torch.Tensor  # K: σ·C
    lr: torch.Tensor  # K
    expected_batch: torch.Tensor  # K
    private: bool
    source: rng.Keystream


@dataclass
class ToyState:
    weight: torch.Tensor  # K × c × d
    bias: torch.Tensor  # K × c
    step: int

    def params(self, k: int) -> dict:
        return {"weight": self.weight[k], "bias": self.bias[k]}


@dataclass(frozen=True)
class ToyRelease:
    grad_w: torch.Tensor  # K × c × d: the noisy clipped sum
    grad_b: torch.Tensor  # K × c


def release(state: ToyState, X: torch.Tensor, y: torch.Tensor, s: ToySettings) -> ToyRelease:
    """Step ``state.step + 1``'s noisy sum of clipped per-example gradients, for every configuration."""
    t = state.step + 1
    rows, valid = rng.poisson_rows(rng.stream_keys(s.seeds, t, rng.BATCH, s.source), X.shape[0], s.sampling_rate)
    x = X[rows]  # K × M × d
    z = torch.einsum("kmd,kcd->kmc", x, state.weight) + state.bias[:, None]
    r = torch.softmax(z, -1) - torch.nn.functional.one_hot(y[rows], z.shape[-1]).to(z.dtype)  # ∂CE/∂z
    norms_sq = r.square().sum(-1) * (x.square().sum(-1) + 1.0)  # ‖r ⊗ [x; 1]‖²
    r = r * clip_noise.clip_factors(norms_sq, s.clip[:, None], valid)[..., None]
    grad_w, grad_b = torch.einsum("kmc,kmd->kcd", r, x), r.sum(1)
    if s.private:
        c, d = grad_w.shape[1:]  # noise: c·d weight entries, then c biases
        noise = rng.normal(rng.stream_keys(s.seeds, t, rng.GAUSSIAN, s.source), c * d + c).to(grad_w.dtype)
        grad_w, grad_b = clip_noise.add_gaussian([grad_w, grad_b], s.noise_std, noise)
    return ToyRelease(grad_w, grad_b)


def apply(state: ToyState, s: ToySettings, r: ToyRelease) -> ToyState:
    live = (s.steps > state.step).to(state.weight.dtype)  # a configuration past its T keeps its model
    scale = (s.lr / s.expected_batch * live)
    return ToyState(state.weight - scale[:, None, None] * r.grad_w, state.bias - scale[:, None] * r.grad_b, state.step + 1)


def settings_of(runs: list) -> ToySettings:
    h = [r.ctx.hyper for r in runs]
    return ToySettings(vector(runs, [r.ctx.stream_id for r in runs], torch.int64), vector(runs, [r.ctx.steps for r in runs], torch.int64),
                       vector(runs, [r.ctx.plan.q for r in runs], torch.float64), vector(runs, [x.clip_norm for x in h]),
                       vector(runs, [x.noise_multiplier * x.clip_norm for x in h]), vector(runs, [x.lr for x in h]),
                       vector(runs, [float(x.batch_size) for x in h]), True, runs[0].ctx.source)


class ToyEngine(Engine):
    def __init__(self, runs: list, products=None) -> None:
        self.settings = settings_of(runs)
        self.steps = self.settings.steps
        init = [r.method.init_state(r.ctx, r.ctx.stream()) for r in runs]
        self.state = ToyState(torch.stack([i.weight[0] for i in init]), torch.stack([i.bias[0] for i in init]), 0)
        self.X, self.y = runs[0].ctx.plan.X, runs[0].ctx.plan.y

    def step(self) -> None:
        self.state = apply(self.state, self.settings, release(self.state, self.X, self.y, self.settings))
