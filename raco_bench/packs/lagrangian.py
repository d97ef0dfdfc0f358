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

import dataclasses
from dataclasses import dataclass

import torch

from raco_bench.constraints.problem import CompiledRates
from raco_bench.privacy import counter_rng as rng
from raco_bench.training.step import TrainData


def take_rows(pack, index: torch.Tensor):
    """A pack's settings or state dataclass restricted to the configurations at ``index``: every tensor field
    (leading dimension K) indexed, every other field (flags, the step count) kept."""
    fields = {f.name: getattr(pack, f.name) for f in dataclasses.fields(pack)}
    return type(pack)(**{k: (v[index] if isinstance(v, torch.Tensor) else v) for k, v in fields.items()})


def put_rows(whole, index: torch.Tensor, part):
    """``whole`` with the configurations at ``index`` replaced by ``part`` (a :func:`take_rows` of it, advanced);
    non-tensor fields (the step count) come from ``part``."""
    def merged(a, b):
        if not isinstance(a, torch.Tensor):
            return b
        out = a.clone()
        out[index] = b
        return out

    return type(whole)(**{f.name: merged(getattr(whole, f.name), getattr(part, f.name)) for f in dataclasses.fields(whole)})


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
    estimates: torch.Tensor  # K × J: each configuration's last Γ̂ (its method's report() shows the max; zeros before step 1)
    step: int  # steps taken (the same for every configuration; those past T_k are frozen)

    def params(self, k: int) -> dict[str, torch.Tensor]:
        return {"weight": self.weight[k], "bias": self.bias[k]}


def _softmax(z: torch.Tensor) -> torch.Tensor:
    """softmax over the last (class) dimension; torch's kernel is slow for the few classes of these tasks."""
    e = torch.exp(z - z.max(-1, keepdim=True).values)
    return e / e.sum(-1, keepdim=True)


def chunk_size(s: PackSettings, data: TrainData, device: torch.device) -> int:
    """Configurations per chunk of a step: on the CPU the gathered batches of a chunk (≈ 4 MB) stay in cache
    between the forward and backward products, which makes a step several times faster than one pass
    over all K; on a GPU one chunk holds up to 1 GB."""
    n, d = data.X.shape
    q = float(s.sampling_rate.max())
    per_config = (n * q + 6 * (n * q + 1) ** 0.5 + 16) * (d + data.table.shape[1]) * data.X.element_size()
    budget = 2**30 if device.type == "cuda" else 4 * 2**20
    return max(1, min(s.size, int(budget // per_config)))


@dataclass(frozen=True)
class StepNoise:
    """One step's draws for every configuration of the pack (drawn at once: the generator's cost is per call)."""

    rows: torch.Tensor  # K × M batch rows (line 1), padded
    valid: torch.Tensor  # K × M
    laplace: torch.Tensor | None  # K × (P·c) unit Laplace (line 3)
    gaussian: torch.Tensor | None  # K × (c·d + c) unit Gaussians (line 6), weight then bias

    @staticmethod
    def draw(s: PackSettings, data: TrainData, n_parts: int, t: int) -> "StepNoise":
        rows, valid = rng.poisson_rows(rng.stream_keys(s.seeds, t, rng.BATCH), data.n, s.sampling_rate)
        c, d = data.n_classes, data.X.shape[1]
        lap = rng.laplace(rng.stream_keys(s.seeds, t, rng.LAPLACE), n_parts * c) if s.private and s.constrained else None
        gauss = rng.normal(rng.stream_keys(s.seeds, t, rng.GAUSSIAN), c * d + c) if s.private else None
        return StepNoise(rows, valid, lap, gauss)


def _gradients(sl: slice, state: PackState, data: TrainData, s: PackSettings, rates: CompiledRates | None, noise: StepNoise):
    """Lines 1–6 for the configurations in ``sl``: (Σ clipped gradients + noise for weight and bias, Γ̂ or None)."""
    temperature = s.temperature[sl, None, None]
    rows, valid = noise.rows[sl], noise.valid[sl]  # line 1
    width = int(valid.sum(1).max()) if rows.numel() else 0
    rows, valid = rows[:, :width], valid[:, :width]  # this chunk's widest batch
    flat = rows.reshape(-1)  # index_select copies whole rows: much faster than advanced indexing with a K × M index
    table = torch.index_select(data.table, 0, flat).view(*rows.shape, -1)  # k × M × (c + 1 + P)
    Xb = torch.index_select(data.X, 0, flat).view(*rows.shape, -1)  # k × M × d
    mask = valid.to(Xb.dtype)
    weight = state.weight[sl]
    logits = torch.baddbmm(state.bias[sl, None, :], Xb, weight.transpose(1, 2))
    probs = _softmax(temperature * logits)
    c = data.n_classes
    coef = estimates = None
    if s.constrained and rates is not None:
        part = table[..., c + 1 :].argmax(-1, keepdim=True).expand(-1, -1, c)  # each row's part, one index per class column
        hard = s.hard[sl]
        hist_probs = probs
        if bool(hard.any()):  # dual_update = hard: the one-hot argmax histogram
            hist_probs = torch.where(hard[:, None, None], torch.nn.functional.one_hot(probs.argmax(-1), c).to(probs.dtype), probs)
        H = probs.new_zeros(probs.shape[0], rates.n_parts, c).scatter_add_(1, part, hist_probs * mask[..., None])  # line 2: k × P × c
        if s.private:  # line 3: Ĥ = H + Lap(s_L), iid per cell
            H = H + s.laplace_scale[sl, None, None] * noise.laplace[sl].to(H.dtype).view_as(H)
        coef_parts, estimates = rates.dual_quantities(H, state.lam[sl], s.expected_batch[sl])  # lines 4 and 8
        coef = torch.gather(coef_parts, 1, part)  # each row's coefficients (padding rows get weight zero below)
    # lines 5–6: rank-1 per-sample gradients r_i ⊗ [x_i; 1], clipped to C, summed, noised
    residual = probs - table[..., :c]
    if coef is not None:
        residual = torch.addcmul(residual, probs, coef - (coef * probs).sum(-1, keepdim=True))
    residual = residual * temperature
    norms_sq = residual.square().sum(-1) * table[..., c]
    factor = torch.rsqrt(norms_sq).mul_(s.clip_norm[sl, None]).clamp_(max=1.0) * mask
    residual = residual * factor[..., None]
    grad_w = torch.bmm(residual.transpose(1, 2), Xb)
    grad_b = residual.sum(1)
    if s.private:
        d = grad_w.shape[2]
        z = noise.gaussian[sl].to(grad_w.dtype)
        grad_w = grad_w + s.noise_std[sl, None, None] * z[:, : c * d].view_as(grad_w)
        grad_b = grad_b + s.noise_std[sl, None] * z[:, c * d :]
    return grad_w, grad_b, estimates


def pack_step(state: PackState, data: TrainData, s: PackSettings, rates: CompiledRates | None, chunk: int | None = None) -> PackState:
    """One simultaneous primal-dual step for every configuration still within its T (in chunks of ``chunk``);
    configurations past their T are left out of the computation and keep their state."""
    live = s.steps > state.step
    if not bool(live.all()):
        index = torch.nonzero(live).flatten()
        return put_rows(state, index, _step(take_rows(state, index), data, take_rows(s, index), rates, chunk))
    return _step(state, data, s, rates, chunk)


def _step(state: PackState, data: TrainData, s: PackSettings, rates: CompiledRates | None, chunk: int | None) -> PackState:
    """The step of configurations that are all within their T."""
    t = state.step + 1
    chunk = chunk or s.size
    noise = StepNoise.draw(s, data, rates.n_parts if rates is not None else 0, t)
    parts = [_gradients(slice(i, i + chunk), state, data, s, rates, noise) for i in range(0, s.size, chunk)]
    grad_w = torch.cat([p[0] for p in parts]) if len(parts) > 1 else parts[0][0]
    grad_b = torch.cat([p[1] for p in parts]) if len(parts) > 1 else parts[0][1]
    step_size = -s.lr / s.expected_batch  # line 7: divide by B
    weight = state.weight + step_size[:, None, None] * grad_w
    bias = state.bias + step_size[:, None] * grad_b

    lam, velocity, estimates = state.lam, state.velocity, state.estimates
    if parts[0][2] is not None:  # line 9: projected ascent on λ (optionally with momentum and a box)
        estimates = torch.cat([p[2] for p in parts]) if len(parts) > 1 else parts[0][2]
        ascent = torch.where(s.clip_constraint_value[:, None], estimates.clamp(0.0, 1.0), estimates) - s.gamma
        momentum = s.dual_momentum[:, None]
        with_momentum = momentum > 0
        velocity = torch.where(with_momentum, momentum * velocity + s.dual_lr[:, None] * ascent, velocity)
        lam = torch.where(with_momentum, lam + velocity, lam + s.dual_lr[:, None] * ascent).clamp_min(0.0)
        lam = torch.minimum(lam, s.lambda_max[:, None])
    return PackState(weight, bias, lam, velocity, estimates, t)
