"""DP-FERMI's step for K configurations at once (logistic regression), as batched tensors: parameters
K × c × d, the ERMI variable W as K × contexts × G × c.

Every configuration keeps its own λ (fairness), η_θ, η_w, C_θ, C_W, σ, radius D, expected batch size,
seed, T and its own released group proportions P̂_S. Step t draws the Poisson batch and one Gaussian
vector (θ's parameters in order, then W) from the streams of (seed, t), exactly as
``baselines.dp_fermi.DPFermi.step`` does alone; the formulas are those of ``baselines/dp_fermi/ermi.py``
(docs/methods/dp-fermi.md), written for a leading configuration dimension.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from raco_bench.data.tensors import TrainData
from raco_bench.packs.draws import distinct_batches
from raco_bench.packs.engine import INF, Engine, vector
from raco_bench.packs.rows import RowProducts, SharedRows, rows_for
from raco_bench.packs.tensors import batch_groups, chunks, padded_groups, put_rows, softmax, take_rows
from raco_bench.privacy import clip_noise
from raco_bench.privacy import counter_rng as rng


@dataclass(frozen=True)
class FermiPackSettings:
    seeds: torch.Tensor
    batch_seeds: torch.Tensor  # the streams of the gradient batches (each run's own unless shared: batch_stream_id)
    steps: torch.Tensor
    sampling_rate: torch.Tensor  # float64
    batch: torch.Tensor  # m
    lr: torch.Tensor
    lr_w: torch.Tensor
    fairness: torch.Tensor
    clip_theta: torch.Tensor  # inf: none
    clip_w: torch.Tensor  # inf: none
    noise_theta: torch.Tensor  # σ·C_θ (0: none)
    noise_w: torch.Tensor  # σ·C_W
    radius: torch.Tensor
    private: bool
    source: rng.Keystream = rng.REPRODUCIBLE  # the pack's word source (one for every configuration)

    @property
    def size(self) -> int:
        return int(self.seeds.shape[0])

    @functools.cached_property
    def batch_draws(self) -> tuple[torch.Tensor, torch.Tensor, list[tuple[list[int], int]]]:
        """The distinct (batch stream, q) pairs (:func:`~raco_bench.packs.draws.distinct_batches`), which one each
        configuration draws, and the configurations grouped by the batch they share (:func:`shared_parts`); found once
        per settings (they do not change by step)."""
        distinct, which = distinct_batches(self.batch_seeds, self.sampling_rate)
        return distinct, which, shared_parts(which.tolist())


@dataclass
class FermiPackState:
    weight: torch.Tensor  # K × c × d
    bias: torch.Tensor  # K × c
    W: torch.Tensor  # K × contexts × G × c
    inv_sqrt_p: torch.Tensor  # K × contexts × G, from each configuration's released counts
    step: int

    def params(self, k: int) -> dict[str, torch.Tensor]:
        return {"weight": self.weight[k], "bias": self.bias[k]}


def fermi_pack_step(state: FermiPackState, data: TrainData, ctx_ids: torch.Tensor, groups: torch.Tensor, s: FermiPackSettings,
                    products: RowProducts | None = None) -> FermiPackState:
    """One DP-FERMI step for every configuration within its T (batch products by ``products``, default
    :func:`~raco_bench.packs.rows.rows_for` the device), in groups of similar expected batch size
    (:func:`~raco_bench.methods.lagrangian.engine.chunks`); the others keep their state."""
    products = products or rows_for(data.X.device)
    live = s.steps > state.step
    if not bool(live.any()):
        return state
    # configurations of similar expected batch size step together (each group pads to its own widest batch)
    typical = (s.sampling_rate * data.n).tolist()
    live_k = torch.nonzero(live).flatten().tolist()
    grouped = chunks([int(typical[k]) for k in live_k], 1, 2**62)
    if len(grouped) == 1 and len(live_k) == s.size:
        return _step(state, data, ctx_ids, groups, s, products)
    before, after = state, state
    for group in grouped:  # every group steps from the same state (the step count included)
        index = torch.tensor([live_k[i] for i in group], device=state.weight.device)
        after = put_rows(after, index, _step(take_rows(before, index), data, ctx_ids, groups, take_rows(s, index), products))
    return after


@dataclass(frozen=True)
class FermiRelease:
    """What one DP-FERMI step releases for every configuration: the noisy sums of clipped θ gradients and of
    clipped W gradients (one Gaussian vector). The update after it is post-processing (:func:`apply_fermi_release`);
    the white-box audit (:mod:`raco_bench.audit.whitebox`) reads it."""

    grad_w: torch.Tensor  # K × c × d
    grad_b: torch.Tensor  # K × c
    grad_W: torch.Tensor  # K × contexts × G × c


def _step(state: FermiPackState, data: TrainData, ctx_ids: torch.Tensor, groups: torch.Tensor, s: FermiPackSettings,
          products: RowProducts) -> FermiPackState:
    return apply_fermi_release(state, s, fermi_release(state, data, ctx_ids, groups, s, products))


def fermi_release(state: FermiPackState, data: TrainData, ctx_ids: torch.Tensor, groups: torch.Tensor, s: FermiPackSettings,
                  products: RowProducts | None = None) -> FermiRelease:
    """The release of step ``state.step + 1`` for every configuration of ``s`` (all within their T, one batch-size group).

    Each distinct batch is drawn once. Configurations that draw the same batch (docs/packs.md, "Shared batches") are
    multiplied with its rows together (:class:`~raco_bench.packs.rows.SharedRows`, groups padded to one size by
    repeating a member, which computes its own values twice); the others by ``products``."""
    products = products or rows_for(data.X.device)
    t = state.step + 1
    distinct, which, parts = s.batch_draws  # each distinct batch drawn once
    rows, valid = rng.poisson_rows(rng.stream_keys(distinct[:, 0], t, rng.BATCH, s.source), data.n, distinct[:, 1].view(torch.float64))
    c, d, cells = data.n_classes, data.X.shape[1], state.W.shape[1] * state.W.shape[2]
    z = rng.normal(rng.stream_keys(s.seeds, t, rng.GAUSSIAN, s.source), c * d + c + cells * c) if s.private else None
    if len(parts) == 1 and parts[0][1] == 1:  # no two configurations share a batch
        rows, valid = rows[which], valid[which]
        return _release(state, data, ctx_ids, groups, s, products(data.X, rows), rows, valid, z)
    out = FermiRelease(torch.empty_like(state.weight), torch.empty_like(state.bias), torch.empty_like(state.W))
    for members, k in parts:
        idx = torch.tensor(members, device=rows.device)
        b = which[idx]
        batch = SharedRows(data.X, rows[b[::k]], group=k) if k > 1 else products(data.X, rows[b])
        part = _release(take_rows(state, idx), data, ctx_ids, groups, take_rows(s, idx), batch, rows[b], valid[b], None if z is None else z[idx])
        out.grad_w[idx], out.grad_b[idx], out.grad_W[idx] = part.grad_w, part.grad_b, part.grad_W  # a repeated member writes its own values again
    return out


def shared_parts(batch: list[int]) -> list[tuple[list[int], int]]:
    """The configurations of a step as (members, k): the configurations that share a batch (``batch[i]``: which distinct
    batch configuration i draws) in groups of k consecutive members, each group padded to the largest by repeating its
    first member; then those alone as (members, 1)."""
    shared, alone = batch_groups(batch)
    return ([padded_groups(shared)] if shared else []) + ([(alone, 1)] if alone else [])


def _release(state: FermiPackState, data: TrainData, ctx_ids: torch.Tensor, groups: torch.Tensor, s: FermiPackSettings, batch,
             rows: torch.Tensor, valid: torch.Tensor, z: torch.Tensor | None) -> FermiRelease:
    """:func:`fermi_release` for configurations whose batch rows (K × M), products with them (``batch``) and unit Gaussian
    draws (``z``, None without privacy) are given."""
    K = s.size
    M = rows.shape[1]
    table = torch.index_select(data.table, 0, rows.reshape(-1)).view(K, M, -1)
    c = data.n_classes
    n_ctx, G = state.W.shape[1], state.W.shape[2]
    cells = n_ctx * G  # (context, group) cells: every per-row quantity of W depends on the row's cell alone
    cell = torch.index_select(ctx_ids * G + groups, 0, rows.reshape(-1)).view(K, 1, M)
    onehot = (cell == torch.arange(cells, device=rows.device)[:, None]).to(table.dtype)  # K × cells × M
    # λψ̂_i = ⟨coef_i, F_i⟩ − λ with a_i = 2 W[ctx_i, s_i] / √p_i − Σ_r W[ctx_i, r]² (baselines/dp_fermi/ermi.py), per cell
    W = state.W.reshape(K, cells, c)
    ipb = state.inv_sqrt_p.reshape(K, cells, 1)  # 1/√p̂ of each cell
    colsq = (state.W**2).sum(2).repeat_interleave(G, dim=1)  # K × cells × c: Σ_r W[ctx, r]² of each cell's context
    coef = s.fairness[:, None, None] * (2.0 * ipb * W - colsq)
    inner = colsq - 2.0 * ipb * W + ipb**2  # ‖∇_W ψ̂_i‖² = 4 Σ_k F_ik² · inner[cell_i, k]
    mask = valid.to(table.dtype)
    sums = _two_class_sums if c == 2 else _sums
    head, grad_b, per_cell = sums(batch.relative_logits(state.weight, state.bias), table, onehot, mask, coef, inner, s)
    grad_w = batch.head_sums(head)  # θ's residual sums to zero over classes: the last class's sums are minus the others'
    per_cell = per_cell.view(K, n_ctx, G, c)  # Σ_{i ∈ cell} w_i F_i, w_i the clipping factor of row i's W gradient
    gW = -2.0 * state.W * per_cell.sum(2, keepdim=True) + 2.0 * ipb.view(K, n_ctx, G, 1) * per_cell
    if s.private:
        d, z = grad_w.shape[2], z.to(grad_w.dtype)
        grad_w, grad_b = clip_noise.add_gaussian([grad_w, grad_b], s.noise_theta, z[:, : c * d + c])
        (gW,) = clip_noise.add_gaussian([gW], s.noise_w, z[:, c * d + c :])
    return FermiRelease(grad_w, grad_b, gW)


def _sums(relative: torch.Tensor, table: torch.Tensor, onehot: torch.Tensor, mask: torch.Tensor, coef: torch.Tensor,
          inner: torch.Tensor, s: FermiPackSettings) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """From the logits relative to the last class ((c − 1) × K × M), the rows' label and norm columns (``table``), their
    cell one-hot (K × cells × M) and each cell's coefficients and W-gradient constants (K × cells × c): θ's sums of
    per-sample gradients clipped to C_θ, as the clipped residual's first c − 1 classes ((c − 1) × K × M, for
    ``head_sums``) and the bias's sums (K × c), and each cell's Σ w_i F_i (K × cells × c), w_i clipping row i's W
    gradient to C_W."""
    c = coef.shape[2]
    F = softmax(torch.cat([relative, torch.zeros_like(relative[:1])]).permute(1, 2, 0))  # K × M × c
    per_row = torch.bmm(onehot.transpose(1, 2), torch.cat([coef, inner], 2))  # K × M × 2c: coef_i, inner_i
    coef_rows, inner_rows = per_row[..., :c], per_row[..., c:]
    # θ: rank-1 per-sample gradients of CE + ⟨coef, F⟩, clipped to C_θ
    residual = F - table[..., :c]
    residual = torch.addcmul(residual, F, coef_rows - (coef_rows * F).sum(-1, keepdim=True))
    norms_sq = residual.square().sum(-1) * table[..., c]
    residual = residual * clip_noise.clip_factors(norms_sq, s.clip_theta[:, None], mask)[..., None]
    weight = clip_noise.clip_factors(4.0 * (F**2 * inner_rows).sum(-1).clamp_min(0.0), s.clip_w[:, None], mask)  # ‖∇_W ψ̂_i‖ = 2√(…)
    return residual.permute(2, 0, 1)[:-1], residual.sum(1), torch.bmm(onehot, weight[..., None] * F)


def _two_class_sums(relative: torch.Tensor, table: torch.Tensor, onehot: torch.Tensor, mask: torch.Tensor, coef: torch.Tensor,
                    inner: torch.Tensor, s: FermiPackSettings) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`_sums` for two classes in arrays of K × M (docs/packs.md, "Speed"). With p₀ = sigmoid(z₀ − z₁) and
    p₁ = 1 − p₀, the θ residual is r₀ = p₀ − y₀ + p₀p₁(coef₀ − coef₁) and r₁ = −r₀ (the softmax identity of the
    Lagrangian engine), a row's θ gradient has squared norm 2r₀²(‖x‖² + 1) and its W gradient 4(p₀²inner₀ + p₁²inner₁),
    and a cell's Σ w_i F_i is (Σ w_i p₀ᵢ, Σ w_i − Σ w_i p₀ᵢ)."""
    per_row = torch.bmm(torch.stack([coef[..., 0] - coef[..., 1], inner[..., 0], inner[..., 1]], 1), onehot)  # K × 3 × M
    gap, inner0, inner1 = per_row.unbind(1)
    p0 = torch.sigmoid(relative[0])  # K × M
    p1 = 1.0 - p0
    r0 = torch.addcmul(p0 - table[..., 0], p0 * p1, gap)
    r0 = r0 * clip_noise.clip_factors(2.0 * r0.square() * table[..., 2], s.clip_theta[:, None], mask)
    sum0 = r0.sum(1, keepdim=True)
    weight = clip_noise.clip_factors(4.0 * (p0.square() * inner0 + p1.square() * inner1).clamp_min(0.0), s.clip_w[:, None], mask)
    cell0, cell_w = torch.bmm(onehot, (weight * p0)[..., None]), torch.bmm(onehot, weight[..., None])  # K × cells × 1 each
    return r0[None], torch.cat([sum0, -sum0], 1), torch.cat([cell0, cell_w - cell0], 2)


def apply_fermi_release(state: FermiPackState, s: FermiPackSettings, release: FermiRelease) -> FermiPackState:
    """Descent on θ, ascent on W projected onto the radius-D ball per context."""
    step = (s.lr / s.batch)
    weight_new = state.weight - step[:, None, None] * release.grad_w
    bias_new = state.bias - step[:, None] * release.grad_b
    W = state.W + (s.lr_w * s.fairness / s.batch)[:, None, None, None] * release.grad_W
    norms_W = W.flatten(2).norm(dim=2).clamp_min(1e-12)  # Π onto {‖W_ctx‖_F ≤ D} per context block
    W = W * (s.radius[:, None] / norms_W).clamp(max=1.0)[..., None, None]
    return FermiPackState(weight_new, bias_new, W, state.inv_sqrt_p, state.step + 1)


# ---------------------------------------------------------------- the engine the pack driver builds


class FermiEngine(Engine):
    """DP-FERMI as a pack."""

    @classmethod
    def pack_key(cls, run) -> tuple:
        return run.ctx.hyper.privacy, tuple(run.ctx.plan.data.table.shape)  # one privacy mode and tensor layout per pack

    def __init__(self, runs: list, products: RowProducts | None = None) -> None:
        first = runs[0]
        init = [first.method.init_state(r.ctx, r.ctx.stream()) for r in runs]
        h = [r.ctx.hyper for r in runs]
        self.products = products or rows_for(first.ctx.device)
        private = h[0].privacy != "none"
        vec = lambda values, dtype=torch.float32: vector(runs, values, dtype)  # noqa: E731

        self.settings = FermiPackSettings(
            seeds=vec([r.ctx.stream_id for r in runs], torch.int64), batch_seeds=vec([r.ctx.batch_seed for r in runs], torch.int64),
            steps=vec([r.ctx.steps for r in runs], torch.int64),
            sampling_rate=vec([r.ctx.plan.q for r in runs], torch.float64), batch=vec([float(x.batch_size) for x in h]),
            lr=vec([x.lr for x in h]), lr_w=vec([x.lr_w for x in h]), fairness=vec([x.fairness for x in h]),
            clip_theta=vec([x.clip_theta if private else INF for x in h]), clip_w=vec([x.clip_w if private else INF for x in h]),
            noise_theta=vec([r.ctx.plan.sigma * x.clip_theta if private else 0.0 for r, x in zip(runs, h)]),
            noise_w=vec([r.ctx.plan.sigma * x.clip_w if private else 0.0 for r, x in zip(runs, h)]),
            radius=vec([x.w_radius for x in h]), private=private, source=first.ctx.source)
        self.steps = self.settings.steps
        self.state = FermiPackState(torch.stack([i.params["weight"] for i in init]), torch.stack([i.params["bias"] for i in init]),
                                    torch.stack([i.W for i in init]), torch.stack([i.inv_sqrt_p for i in init]), 0)
        plan = first.ctx.plan
        self.data, self.ctx_ids, self.groups = plan.data, plan.ctx_ids, plan.s

    def step(self) -> None:
        self.state = fermi_pack_step(self.state, self.data, self.ctx_ids, self.groups, self.settings, self.products)

    def report(self, k: int) -> dict:
        return {"w_norm": float(self.state.W[k].norm())}
