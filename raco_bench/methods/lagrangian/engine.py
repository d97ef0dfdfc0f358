"""Algorithm 1 for K configurations at once: the Lagrangian family (RaCO-DP, SGDA, DP-SGD, SGD) with
logistic regression, as batched tensors (parameters K × c × d, multipliers K × J).

Every configuration keeps its own σ, s_L, C, τ, η_θ, η_λ, expected batch size B (its own q), γ,
dual-update rule, seed and T. Step t of configuration k draws its Poisson batch, its Laplace
histogram noise and its Gaussian gradient noise from the streams of (seed_k, t)
(:mod:`raco_bench.privacy.counter_rng`), exactly the numbers :func:`raco_bench.methods.lagrangian.step.sgda_step`
draws when the configuration trains alone; only floating-point reduction order differs. A
configuration whose T has passed keeps its state while the others go on.

Batches have different sizes: a step groups configurations of similar batch size into chunks
(:func:`chunks`) and pads each chunk to its widest batch (slots past a configuration's batch
read row n − 1 with weight zero). The batch products are :mod:`raco_bench.packs.rows`'s. The step
follows ``sgda_step`` line by line; the line numbers are Algorithm 1's (docs/methods/raco-dp.md,
"One step"). How it is made fast, and measured: docs/packs.md, "Speed".
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch

from raco_bench.constraints.problem import CompiledRates
from raco_bench.data.tensors import TrainData
from raco_bench.methods.lagrangian import fused
from raco_bench.methods.lagrangian.graphed import StepGraph
from raco_bench.methods.lagrangian.step import lagrangian_report
from raco_bench.packs.draws import BatchesAhead, DrawAhead, FixedBatches, ahead_steps, distinct_batches
from raco_bench.packs.engine import INF, Engine, vector
from raco_bench.packs.rows import GatheredRows, RowProducts, SharedRows, rows_for
from raco_bench.packs.tensors import batch_groups, chunk_budget, chunks, cloned, padded_groups, put_rows, softmax, take_rows
from raco_bench.privacy import clip_noise
from raco_bench.privacy import counter_rng as rng


@dataclass(frozen=True)
class PackSettings:
    """Per-configuration numbers of a pack (vectors of length K; J columns for γ)."""

    seeds: torch.Tensor  # int64: each configuration's stream id (raco_bench.training.config.stream_id)
    batch_seeds: torch.Tensor  # int64: the stream of its gradient batches (its own, or one shared per seed: batch_stream_id)
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
    source: rng.Keystream = rng.REPRODUCIBLE  # the pack's word source (one for every configuration)

    @property
    def size(self) -> int:
        return int(self.seeds.shape[0])

    def restricted(self, index: torch.Tensor) -> "PackSettings":
        """These settings for the configurations at ``index`` (:func:`take_rows`), built once per distinct ``index``: a
        pack whose shorter configurations have finished asks for the same live set at every step, and the subset keeps
        its own :attr:`batch_draws`. A pack's live set only shrinks: a new one takes over, for its own configurations,
        what the live set before it drew ahead (:meth:`ahead`, :meth:`batches`; no draw is made twice), and the earlier
        set's blocks are dropped, so a pack holds one set's blocks, not one per finished configuration."""
        key = tuple(index.tolist())
        if key not in self._subsets:
            before, earlier = next(reversed(self._subsets.items()), (tuple(range(self.size)), self))
            subset = self._subsets[key] = take_rows(self, index)
            where = {k: i for i, k in enumerate(before)}
            if all(k in where for k in key):  # as a pack's live sets are
                subset._take_over(earlier, torch.tensor([where[k] for k in key], dtype=torch.int64, device=self.seeds.device))
            for s in (self, *self._subsets.values()):
                if s is not subset:
                    s._ahead.clear()
        return self._subsets[key]

    def _take_over(self, earlier: "PackSettings", index: torch.Tensor) -> None:
        """Hold the part of the blocks ``earlier`` drew ahead that is these settings': its configurations at ``index``
        (noise, per configuration) and the distinct batches these settings draw (batches, per distinct stream)."""
        mine, theirs = self.batch_draws[0], earlier.batch_draws[0]
        position = {tuple(pair): i for i, pair in enumerate(theirs.tolist())}
        for key, ahead in earlier._ahead.items():
            if isinstance(ahead, BatchesAhead):
                self._ahead[key] = ahead.restricted(torch.tensor([position[tuple(pair)] for pair in mine.tolist()], dtype=torch.int64,
                                                                 device=index.device))
            else:
                self._ahead[key] = ahead.restricted(index)

    @functools.cached_property
    def _subsets(self) -> dict[tuple[int, ...], "PackSettings"]:
        return {}

    def ahead(self, purpose: int, count: int, draw) -> DrawAhead:
        """The draws of ``purpose`` (``count`` per configuration and step, by ``draw``) for these configurations, drawn
        a block of steps at a time (:mod:`raco_bench.packs.draws`); one per (purpose, count) until :meth:`restricted`
        drops it."""
        key = (purpose, count)
        if key not in self._ahead:
            self._ahead[key] = DrawAhead(self.seeds, purpose, count, draw, self.source, int(self.steps.max()))
        return self._ahead[key]

    @functools.cached_property
    def _ahead(self) -> dict[tuple[int, int], DrawAhead | BatchesAhead]:
        return {}

    def batches(self, n: int) -> BatchesAhead:
        """The distinct Poisson batches (:attr:`batch_draws`) on ``n`` rows, drawn a block of steps at a time
        (:class:`~raco_bench.packs.draws.BatchesAhead`); taken over or dropped with the noise by :meth:`restricted`."""
        key = (rng.BATCH, -n)  # one per size of the rows drawn from (an audit's worlds differ by a row)
        if key not in self._ahead:
            distinct, _ = self.batch_draws
            self._ahead[key] = BatchesAhead(distinct[:, 0], distinct[:, 1].view(torch.float64), n, self.source, int(self.steps.max()))
        return self._ahead[key]

    @functools.cached_property
    def batch_list(self) -> list[int]:
        """:attr:`batch_draws`' second part as a list: which distinct batch each configuration draws."""
        return self.batch_draws[1].tolist()

    @functools.cached_property
    def shared_groups(self) -> tuple[list[list[int]], list[int]]:
        """The configurations that draw the same batches (at least two), as groups, and the others (sorted)."""
        return batch_groups(self.batch_list)

    @functools.cached_property
    def switches(self) -> "Switches":
        """Which per-configuration options any configuration of these settings uses (:class:`Switches`), found once:
        a step skips the arithmetic of an option no configuration uses."""
        return Switches(bool(self.hard.any()), bool((self.dual_momentum > 0).any()), bool(self.clip_constraint_value.any()),
                        bool(torch.isfinite(self.lambda_max).any()))

    @functools.cached_property
    def batch_draws(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The distinct (batch stream, q) pairs (D × 2, q's float64 bits as int64) and which one each configuration
        draws (K): a step draws each distinct batch once. Computed once per settings (they do not change by step)."""
        return distinct_batches(self.batch_seeds, self.sampling_rate)


@dataclass(frozen=True)
class Switches:
    """Whether any configuration of a pack uses each option (:attr:`PackSettings.switches`)."""

    hard: bool  # dual_update = hard
    momentum: bool  # dual_momentum > 0
    clip_value: bool  # clip_constraint_value
    box: bool  # a finite lambda_max


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


FEW_PARTS = 2  # up to this many parts, the histogram and the coefficients are products with the part one-hot


@dataclass(frozen=True)
class PackData:
    """The training split as a pack reads it: X (n × d) and, class-major, one table of per-row constants
    (one gather per step fetches a batch's): rows 0…c−1 the one-hot label, row c ‖x‖² + 1 (the squared
    norm of [x; 1]), then the row's part, as P one-hot rows where there are at most :data:`FEW_PARTS`
    parts, else as one row holding the index (a float; 0 without constraints).

    ``fused``: a step's two-class per-row passes run as compiled loops (:mod:`raco_bench.methods.lagrangian.fused`,
    :func:`~raco_bench.privacy.clip_noise.clip_rank_one`; docs/packs.md, "Fused row passes"). By default where they
    apply: float32 on a CPU. The torch form computes the same numbers up to rounding on any device.

    ``ahead``: the step the device runs ahead on (:class:`AheadSteps`; docs/packs.md, "The GPU path"): torch forms
    only, shapes fixed per pack, nothing read back to the host between evaluations. By default on every device but
    the CPU."""

    X: torch.Tensor
    per_row: torch.Tensor
    n_classes: int
    n_parts: int
    fused: bool = False
    ahead: bool = False

    @staticmethod
    def of(data: TrainData, fused: bool | None = None, ahead: bool | None = None) -> "PackData":
        c = data.n_classes
        onehot = data.table[:, c + 1 :]
        if 0 < data.n_parts <= FEW_PARTS:
            part = onehot.T
        else:
            part = (onehot.argmax(1).to(data.X.dtype) if data.n_parts else data.X.new_zeros(data.n))[None]
        if ahead is None:
            ahead = data.X.device.type != "cpu"
        if fused is None:
            fused = not ahead and data.X.device.type == "cpu" and data.X.dtype == torch.float32
        return PackData(data.X, torch.cat([data.table[:, : c + 1].T, part]).contiguous(), c, data.n_parts, fused and not ahead, ahead)

    @property
    def few_parts(self) -> bool:
        return 0 < self.n_parts <= FEW_PARTS

    @property
    def n(self) -> int:
        return int(self.X.shape[0])


def slot_bytes(data: PackData, products: RowProducts) -> int:
    """Bytes that one padded batch slot of one configuration takes in a step's arrays: the copied row and
    its constants for gathered rows, the per-class arrays for indexed products."""
    width = data.X.shape[1] + data.per_row.shape[0] if products is GatheredRows else 4 * data.n_classes
    return width * data.X.element_size()


@dataclass(frozen=True)
class StepNoise:
    """One step's draws for every configuration of the pack (drawn at once: the generator's cost is per call)."""

    rows: torch.Tensor  # D × M: each distinct batch's rows (line 1), padded
    valid: torch.Tensor  # D × M
    laplace: torch.Tensor | None  # K × (P·c) unit Laplace (line 3)
    gaussian: torch.Tensor | None  # K × (c·d + c) unit Gaussians (line 6), weight then bias
    batch: torch.Tensor  # K: which distinct batch each configuration drew (equal: the same rows, from one batch stream and q)
    widths: list[int]  # K: each configuration's batch size

    @staticmethod
    def draw(s: PackSettings, data: PackData, t: int) -> "StepNoise":
        """Each distinct (batch stream, q) draws its batch once; the configurations that share it share the rows. The
        batches and the Laplace and Gaussian draws come from blocks drawn ahead (the same numbers, fewer generator calls)."""
        rows, valid, sizes = s.batches(data.n).at(t)
        c, d = data.n_classes, data.X.shape[1]
        lap = s.ahead(rng.LAPLACE, data.n_parts * c, rng.laplace).at(t) if s.private and s.constrained else None
        gauss = s.ahead(rng.GAUSSIAN, c * d + c, rng.normal).at(t) if s.private else None
        return StepNoise(rows, valid, lap, gauss, s.batch_draws[1], [sizes[b] for b in s.batch_list])

    def batch_rows(self, idx: torch.Tensor | slice, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch rows and their validity of the configurations at ``idx``, their first ``width`` slots."""
        b = self.batch[idx]
        return self.rows[b, :width], self.valid[b, :width]


def _gradients(idx: torch.Tensor | slice, width: int, state: PackState, data: PackData, s: PackSettings, rates: CompiledRates | None,
               noise: StepNoise, products: RowProducts, group: int = 1):
    """Lines 1–6 for the configurations at ``idx``, padded to ``width`` slots: (Σ clipped gradients + noise for
    weight and bias, Γ̂ or None, the released histogram Ĥ (S × P × c) or None).

    The S configurations are G groups of ``group`` consecutive configurations that drew the same batch (1: each its
    own; :attr:`PackSettings.shared_groups`). Per-row arrays are class-major, c × G × k × M: a sum over classes is a few
    contiguous vector operations, and what depends only on the batch (its rows, their constants, the padding mask)
    is G × 1 × M, computed once per group and broadcast over its k configurations."""
    c, k = data.n_classes, group
    lead = idx[::k] if isinstance(idx, torch.Tensor) else slice(None, None, k)  # each group's first configuration
    rows, valid = noise.batch_rows(lead, width)  # line 1, G × M
    G, M = rows.shape
    constants = torch.index_select(data.per_row, 1, rows.reshape(-1)).view(-1, G, 1, M)  # (c + 1 + P) × G × 1 × M
    mask = valid.to(constants.dtype).view(G, 1, M)
    batch = products(data.X, rows) if k == 1 else SharedRows(data.X, rows, group=k)
    temperature = s.temperature[idx].view(G, k, 1)
    two = c == 2  # the logits as the margin z₀ − z₁ and the residual as r₀ alone (r₁ = −r₀): 1 × G × k × M
    logits = (batch.relative_logits if two else batch.logits)(state.weight[idx], state.bias[idx])
    z = temperature * logits.unflatten(1, (G, k))  # c × G × k × M up to a per-row shift (two classes: τ(z₀ − z₁))
    constrained = s.constrained and rates is not None
    residual, estimates, H = (_two_class_residual if two else _residual)(z, constants, mask, temperature, idx, state, data, s,
                                                                         rates if constrained else None, noise)
    # lines 5–6: rank-1 per-sample gradients r_i ⊗ [x_i; 1], clipped to C, summed, noised
    row_sq = 2 * constants[c] if two else constants[c]  # ‖[x_i; 1]‖² = ‖x_i‖² + 1, twice for r₀ alone: ‖(r₀, −r₀)‖² = 2r₀²
    residual, sums = clip_noise.clip_rank_one(residual, row_sq, s.clip_norm[idx].view(G, k, 1), mask, compiled=data.fused)
    residual = residual.flatten(1, 2)  # c × S × M (two classes: 1 × S × M)
    grad_b = sums.flatten(1).T
    if two:  # class 1's sums are minus class 0's
        grad_w, grad_b = batch.head_sums(residual), torch.cat([grad_b, -grad_b], 1)
    else:
        grad_w = batch.gradient_sums(residual)
    if s.private:
        grad_w, grad_b = clip_noise.add_gaussian([grad_w, grad_b], s.noise_std[idx], noise.gaussian[idx].to(grad_w.dtype))
    return grad_w, grad_b, estimates, H


def _release(H: torch.Tensor, idx, state: PackState, s: PackSettings, rates: CompiledRates, noise: StepNoise, ahead: bool = False):
    """Lines 3, 4 and 8 from the exact histogram H (S × P × c): Ĥ = H + Lap(s_L) iid per cell (private methods), the
    part coefficients of the current λ (S × P × c) and Γ̂ (S × J); ``ahead``: in torch on any device (the compiled
    host loop of the dual quantities reads the histogram back)."""
    if s.private:  # line 3
        H = H + s.laplace_scale[idx, None, None] * noise.laplace[idx].to(H.dtype).view_as(H)
    coef_parts, estimates = rates.dual_quantities(H, state.lam[idx], s.expected_batch[idx], host=not ahead)  # lines 4 and 8
    return H, coef_parts, estimates


def _fused_release(p0: torch.Tensor, part1: torch.Tensor, mask: torch.Tensor, idx, state: PackState, s: PackSettings, rates: CompiledRates,
                   noise: StepNoise):
    """Lines 2–4 and 8 for two classes and at most two parts on the host (``data.fused``), from p₀ (G × k × M): Ĥ (S × P × 2)
    and Γ̂ (S × J) as tensors, and the coefficients (S × P × 2) as a numpy array, for
    :func:`~raco_bench.methods.lagrangian.fused.two_class_residual`. Two compiled calls
    (:func:`~raco_bench.methods.lagrangian.fused.noisy_histogram`, the rates' ``dual_quantities_host``) where torch takes
    a dozen operations on arrays of a few hundred numbers, each costing more than its arithmetic."""
    i = idx.numpy() if isinstance(idx, torch.Tensor) else np.arange(s.size)[idx]
    H = fused.noisy_histogram(p0, part1, mask, s.hard.numpy(), noise.laplace.numpy() if s.private else None, s.laplace_scale.numpy(), i,
                              rates.n_parts)  # lines 2–3
    coef_parts, estimates = rates.dual_quantities_host(H, state.lam.numpy(), s.expected_batch.numpy(), i)  # lines 4 and 8
    return torch.from_numpy(H), coef_parts, torch.from_numpy(estimates)


def _part_rows(constants: torch.Tensor, mask: torch.Tensor, data: PackData):
    """Each batch row's part, G × M, as the masked one-hot G × P × M (few parts: batched products with it), or as the
    index G × 1 × M (a scatter and a gather by it). Padding slots are in no part."""
    c = data.n_classes
    return (constants[c + 1 :, :, 0] * mask[:, 0]).transpose(0, 1) if data.few_parts else constants[c + 1].long()


def _part_sums(values: torch.Tensor, part: torch.Tensor, mask: torch.Tensor, data: PackData, n_parts: int) -> torch.Tensor:
    """Line 2's sums over a batch's rows per part of ``values`` (j × G × k × M): G × k × P × j, padding slots left
    out. With few parts, a batched product with the masked part one-hot: scatter_add's adds into two bins per
    configuration form a serial chain that is 3× slower. Otherwise a scatter by part index."""
    j, G, k, M = values.shape
    if data.few_parts:  # the one-hot on the left: P × M times M × jk is 4× faster than jk × M times M × P on a CPU
        sums = torch.bmm(part, values.transpose(0, 1).reshape(G, j * k, M).transpose(1, 2))  # G × P × jk
        return sums.view(G, -1, j, k).permute(0, 3, 1, 2)
    return values.new_zeros(j, G, k, n_parts).scatter_add_(3, part.expand(j, G, k, M), values * mask).permute(1, 2, 3, 0)


def _part_counts(part: torch.Tensor, mask: torch.Tensor, data: PackData, n_parts: int) -> torch.Tensor:
    """Each part's number of batch rows, G × 1 × P × 1 (it depends on the batch alone: one count per group)."""
    if data.few_parts:
        return part.sum(2)[:, None, :, None]
    return mask.new_zeros(mask.shape[0], 1, n_parts).scatter_add_(2, part, mask)[..., None]


def _per_row(per_part: torch.Tensor, part: torch.Tensor, data: PackData) -> torch.Tensor:
    """Each batch row's entry of ``per_part`` (G × k × P × j, e.g. the part coefficients): j × G × k × M (padding rows
    get weight zero later)."""
    G, k, P, j = per_part.shape
    if data.few_parts:
        rows = torch.bmm(per_part.permute(0, 3, 1, 2).reshape(G, j * k, P), part)  # G × jk × M
        return rows.view(G, j, k, -1).transpose(0, 1)
    return torch.gather(per_part.permute(3, 0, 1, 2), 3, part.expand(j, G, k, part.shape[-1]))


def _residual(z: torch.Tensor, constants: torch.Tensor, mask: torch.Tensor, temperature: torch.Tensor, idx, state: PackState, data: PackData,
              s: PackSettings, rates: CompiledRates | None, noise: StepNoise):
    """Lines 2–5 for any number of classes: the per-row gradient of the Lagrangian with respect to the logits
    (c × G × k × M: τ times the gradient with respect to the tempered logits), Γ̂ and the released histogram Ĥ
    (S × P × c; None without constraints)."""
    c, (_, G, k, _) = data.n_classes, z.shape
    probs = softmax(z, dim=0)
    coef = estimates = H = None
    if rates is not None:
        hist_probs = probs
        if s.switches.hard:  # dual_update = hard: the one-hot argmax histogram
            classes = torch.arange(c, device=probs.device).view(c, 1, 1, 1)
            predicted = (probs.argmax(0)[None] == classes).to(probs.dtype)  # the one-hot argmax, c × G × k × M
            hist_probs = torch.where(s.hard[idx].view(G, k, 1), predicted, probs)
        part, P = _part_rows(constants, mask, data), rates.n_parts
        H = _part_sums(hist_probs, part, mask, data, P)  # line 2
        H, coef_parts, estimates = _release(H.reshape(G * k, P, c), idx, state, s, rates, noise, data.ahead)
        coef = _per_row(coef_parts.view(G, k, P, c), part, data)  # each row's coefficients, c × G × k × M
    residual = probs - constants[:c]
    if coef is not None:
        residual = torch.addcmul(residual, probs, coef - (coef * probs).sum(0))
    return residual * temperature, estimates, H


def _two_class_residual(z: torch.Tensor, constants: torch.Tensor, mask: torch.Tensor, temperature: torch.Tensor, idx, state: PackState,
                        data: PackData, s: PackSettings, rates: CompiledRates | None, noise: StepNoise):
    """:func:`_residual` for two classes, in arrays of G × k × M rather than 2 × G × k × M (docs/packs.md, "Speed"), from
    the tempered margin ``z`` = τ(z₀ − z₁) (1 × G × k × M): τr₀ alone, 1 × G × k × M. With ``data.fused`` and at most two
    parts, after the histogram it is one compiled pass (:func:`~raco_bench.methods.lagrangian.fused.two_class_residual`).

    With p₀ = sigmoid(z₀ − z₁) and p₁ = 1 − p₀, the gradient of the Lagrangian with respect to the logits is
    r₀ = p₀ − y₀ + p₀p₁(a₀ − a₁) and r₁ = −r₀, with a_j the row's coefficient of class j (eq. 13); the histogram's
    class-1 column is the part's batch count minus its class-0 column. The hard dual update counts class 0 where
    p₀ ≥ ½: argmax of the probabilities picks the first of tied classes, and p₀ rounds to ½ for margins within about
    6e-8 of 0, so this is the single run's argmax, ties included."""
    c, (_, G, k, _) = data.n_classes, z.shape
    p0 = torch.sigmoid(z[0])
    estimates = H = coef_parts = None
    if data.fused and (rates is None or data.few_parts):  # the compiled passes
        part1 = constants[c + 2] if rates is not None and rates.n_parts == 2 else constants[0]  # (a placeholder where no part 1)
        if rates is not None:
            H, coef_parts, estimates = _fused_release(p0, part1, mask, idx, state, s, rates, noise)
        return fused.two_class_residual(p0, constants[0], part1, coef_parts, temperature)[None], estimates, H
    r0 = p0 - constants[0]
    if rates is not None:
        hist0 = torch.where(s.hard[idx].view(G, k, 1), (p0 >= 0.5).to(p0.dtype), p0) if s.switches.hard else p0
        part, P = _part_rows(constants, mask, data), rates.n_parts
        H0 = _part_sums(hist0[None], part, mask, data, P)  # line 2
        H = torch.cat([H0, _part_counts(part, mask, data, P) - H0], 3)
        H, coef_parts, estimates = _release(H.reshape(G * k, P, 2), idx, state, s, rates, noise, data.ahead)
        gap = (coef_parts[..., 0] - coef_parts[..., 1]).view(G, k, P, 1)  # a₀ − a₁ per part
        row_gap = _per_row(gap, part, data)[0]
        r0 = torch.ops.aten.sigmoid_backward(row_gap, p0).add_(r0)  # + p₀(1 − p₀)(a₀ − a₁), one pass for the product
    return (r0 * temperature)[None], estimates, H


def pack_step(state: PackState, data: PackData, s: PackSettings, rates: CompiledRates | None, products: RowProducts | None = None,
              budget: int | None = None) -> PackState:
    """One simultaneous primal-dual step for every configuration still within its T, in :func:`chunks`
    of at most ``budget`` bytes (default :func:`chunk_budget`), batch products by ``products`` (default
    :func:`~raco_bench.packs.rows.rows_for` the device); configurations past their T are left out of the
    computation and keep their state."""
    products = products or rows_for(data.X.device)
    budget = budget or chunk_budget(data.X.device)
    live = s.steps > state.step
    if not bool(live.any()):
        return state
    if not bool(live.all()):
        index = torch.nonzero(live).flatten()
        return put_rows(state, index, _step(take_rows(state, index), data, s.restricted(index), rates, products, budget))
    return _step(state, data, s, rates, products, budget)


@dataclass(frozen=True)
class PackRelease:
    """What one step releases for every configuration of a pack (lines 3 and 6): the noisy sums of clipped
    gradients and the noisy histogram Ĥ, with the Γ̂ computed from it (line 8). Everything after is
    post-processing (:func:`apply_release`). The white-box audit (:mod:`raco_bench.audit.whitebox`) reads it."""

    grad_w: torch.Tensor  # K × c × d
    grad_b: torch.Tensor  # K × c
    histogram: torch.Tensor | None  # K × P × c (None: unconstrained)
    estimates: torch.Tensor | None  # K × J


def step_release(state: PackState, data: PackData, s: PackSettings, rates: CompiledRates | None, products: RowProducts | None = None,
                 budget: int | None = None) -> PackRelease:
    """Lines 1–8 of step ``state.step + 1`` for every configuration (all within their T), in :func:`chunks`."""
    products = products or rows_for(data.X.device)
    budget = budget or chunk_budget(data.X.device)
    t = state.step + 1
    noise = StepNoise.draw(s, data, t)
    widths = noise.widths
    shared, alone = s.shared_groups
    work = group_chunks(shared, widths, slot_bytes(data, SharedRows), budget)
    work += [(g, 1) for g in chunks([widths[k] for k in alone], slot_bytes(data, products), budget, members=alone)]
    if len(work) == 1 and work[0][0] == list(range(s.size)):
        grad_w, grad_b, estimates, H = _gradients(slice(None), max(widths), state, data, s, rates, noise, products, work[0][1])
        return PackRelease(grad_w, grad_b, H, estimates)
    grad_w, grad_b = torch.empty_like(state.weight), torch.empty_like(state.bias)
    constrained = s.constrained and rates is not None
    estimates = torch.empty_like(state.estimates) if constrained else None
    H = state.weight.new_empty(s.size, rates.n_parts, data.n_classes) if constrained else None
    for group, size in work:
        idx = torch.tensor(group, device=state.weight.device)
        gw, gb, est, hist = _gradients(idx, max(widths[k] for k in group), state, data, s, rates, noise, products, size)
        grad_w[idx], grad_b[idx] = gw, gb  # a configuration repeated as padding writes its own values again
        if est is not None:
            estimates[idx], H[idx] = est, hist.to(H.dtype)
    return PackRelease(grad_w, grad_b, H, estimates)


def group_chunks(groups: list[list[int]], widths: list[int], per_slot: int, budget: int, slack: float = 1.25) -> list[tuple[list[int], int]]:
    """Groups of configurations that share a batch, packed into chunks like :func:`chunks` packs configurations: groups
    whose widths are within ``slack`` (+ 64 rows) of the chunk's narrowest, padded arrays within ``budget``. A chunk
    is (slots, k): every group's members padded to the chunk's largest group size k by repeating its first member
    (a repeated configuration computes its own values twice), ready for :class:`SharedRows` with ``group=k``."""
    out: list[list[list[int]]] = []
    for g in sorted(groups, key=lambda g: widths[g[0]]):
        if out:
            chunk = out[-1]
            k = max(len(g), *(len(h) for h in chunk))
            if widths[g[0]] <= slack * widths[chunk[0][0]] + 64 and (len(chunk) + 1) * k * max(widths[g[0]], 1) * per_slot <= budget:
                chunk.append(g)
                continue
        out.append([g])
    return [padded_groups(chunk) for chunk in out]


def apply_release(state: PackState, s: PackSettings, release: PackRelease) -> PackState:
    """Lines 7 and 9: the primal step from the released gradient sums and the dual step from Γ̂."""
    step_size = -s.lr / s.expected_batch  # line 7: divide by B
    weight = state.weight + step_size[:, None, None] * release.grad_w
    bias = state.bias + step_size[:, None] * release.grad_b

    lam, velocity, estimates = state.lam, state.velocity, release.estimates
    if estimates is None:
        estimates = state.estimates
    else:  # line 9: projected ascent on λ (optionally with momentum and a box)
        on = s.switches  # an option no configuration uses costs nothing
        ascent = (torch.where(s.clip_constraint_value[:, None], estimates.clamp(0.0, 1.0), estimates) if on.clip_value else estimates) - s.gamma
        dual_step = s.dual_lr[:, None] * ascent
        if on.momentum:
            momentum = s.dual_momentum[:, None]
            with_momentum = momentum > 0
            velocity = torch.where(with_momentum, momentum * velocity + dual_step, velocity)
            lam = torch.where(with_momentum, lam + velocity, lam + dual_step)
        else:
            lam = lam + dual_step
        lam = lam.clamp_min(0.0)
        if on.box:
            lam = torch.minimum(lam, s.lambda_max[:, None])
    return PackState(weight, bias, lam, velocity, estimates, state.step + 1)


def _step(state: PackState, data: PackData, s: PackSettings, rates: CompiledRates | None, products: RowProducts, budget: int) -> PackState:
    """The step of configurations that are all within their T."""
    return apply_release(state, s, step_release(state, data, s, rates, products, budget))


# ---------------------------------------------------------------- the step a device runs ahead on

COMPACT = 0.75  # an ahead pack leaves its finished configurations out of its steps once the live ones are at most this share


class ExactBatches:
    """The Poisson batches of D distinct (stream, rate) pairs drawn exactly, as a run alone draws them
    (:func:`~raco_bench.privacy.counter_rng.poisson_rows`: as many rounds as a batch needs, read back to the host): the
    draws :class:`AheadSteps` takes a stretch of steps again with where a fixed-width batch may have been cut."""

    def __init__(self, streams: torch.Tensor, rates: torch.Tensor, n: int, source: rng.Keystream) -> None:
        self.streams, self.rates, self.n, self.source = streams, rates, n, source

    def at(self, t: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        rows, valid = rng.poisson_rows(rng.stream_keys(self.streams, t, rng.BATCH, self.source), self.n, self.rates)
        return rows, valid, torch.zeros(rows.shape[0], dtype=torch.bool, device=rows.device)


def ahead_step(state: PackState, data: PackData, s: PackSettings, rates: CompiledRates | None, products: RowProducts,
               batches: FixedBatches | ExactBatches, laplace: DrawAhead | None, gaussian: DrawAhead | None) -> tuple[PackState, torch.Tensor]:
    """Step ``state.step + 1`` of every configuration of ``s`` in one pass, without reading anything back to the host:
    the batches at the pack's fixed width (``batches``), every configuration reading its distinct batch's rows by index
    (one product per configuration, whatever groups share a batch), the noise of the step from blocks drawn ahead on the
    device, and the configurations past their T computing as the others do and keeping their state (a live mask, not
    an index). Returns the state and whether a live configuration's batch may have been cut at the fixed width (a
    device bool)."""
    t = state.step + 1
    return ahead_update(state, data, s, rates, products, *batches.at(t), laplace.at(t) if laplace is not None else None,
                        gaussian.at(t) if gaussian is not None else None, t)


def ahead_update(state: PackState, data: PackData, s: PackSettings, rates: CompiledRates | None, products: RowProducts, rows: torch.Tensor,
                 valid: torch.Tensor, cut: torch.Tensor, laplace: torch.Tensor | None, gaussian: torch.Tensor | None,
                 t: int | torch.Tensor) -> tuple[PackState, torch.Tensor]:
    """:func:`ahead_step` from step ``t``'s draws, given: the distinct batches' rows, validity and cut flags (D × width,
    D × width, D), the unit Laplace and Gaussian draws (K × count, or None), and ``t`` itself, a number or a 0-d tensor
    on the device (the graphed step's clock, :mod:`raco_bench.methods.lagrangian.graphed`). The state returned counts
    ``state.step + 1`` steps."""
    which = s.batch_draws[1]
    noise = StepNoise(rows, valid, laplace, gaussian, which, [])
    grad_w, grad_b, estimates, H = _gradients(slice(None), rows.shape[1], state, data, s, rates, noise, products)
    new = apply_release(state, s, PackRelease(grad_w, grad_b, H, estimates))
    live = s.steps >= t
    kept = lambda a, b: torch.where(live.view(-1, *([1] * (a.dim() - 1))), a, b)  # noqa: E731
    out = PackState(kept(new.weight, state.weight), kept(new.bias, state.bias), kept(new.lam, state.lam), kept(new.velocity, state.velocity),
                    kept(new.estimates, state.estimates), state.step + 1)
    return out, (cut[which] & live).any()


LANE_RATIO = 2.0  # a graphed step's lanes: each lane's widest batch width at most this many times its narrowest
MAX_LANES = 8  # and at most this many lanes (the ratio grows where the widths spread further)


@dataclass(frozen=True)
class Lane:
    """Configurations of a stepped set whose batches are of similar size, stepped at their own width (a graphed step,
    docs/packs.md, "Graphed steps": a lane adds operations, which a graph replays without the host)."""

    index: torch.Tensor  # their positions in the stepped set
    where: torch.Tensor  # their positions in the pack's state
    settings: PackSettings  # theirs
    batches: torch.Tensor  # their distinct batches' positions among the stepped set's
    width: int  # the padded width of their widest batch
    exact: ExactBatches  # their batches drawn exactly, for a stretch taken again

    def draws(self, rows: torch.Tensor, valid: torch.Tensor, cut: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Their batches from the stepped set's (drawn at the pack's width, with its flags ``cut``), cut to this lane's
        width, and whether each may reach past it: flagged at the pack's width, or its last slot here holds a row before
        the last (the gaps had not yet passed the end)."""
        rows, valid = rows.index_select(0, self.batches)[:, : self.width], valid.index_select(0, self.batches)[:, : self.width]
        return rows, valid, cut.index_select(0, self.batches) | (rows[:, -1] < n - 1)


def lanes_of(s: PackSettings, n: int, active: torch.Tensor | None) -> list[Lane]:
    """The lanes of the stepped configurations ``s`` (``active``: their positions in the pack, None: all): their
    distinct batches by padded width, a new lane wherever a width passes :data:`LANE_RATIO` times its lane's narrowest
    (the ratio raised until there are at most :data:`MAX_LANES`). Read on the host, once per stepped set."""
    distinct, which = s.batch_draws
    rates = distinct[:, 1].view(torch.float64).tolist()
    widths = [rng.poisson_width(n, n * q) for q in rates]  # n where q = 1 (the width is at most n)
    order = sorted(range(len(widths)), key=widths.__getitem__)
    ratio = max(LANE_RATIO, (widths[order[-1]] / max(1, widths[order[0]])) ** (1 / MAX_LANES) * 1.000001)
    groups: list[list[int]] = []
    for i in order:
        if groups and widths[i] <= ratio * widths[groups[-1][0]]:
            groups[-1].append(i)
        else:
            groups.append([i])
    which_host, device, lanes = which.tolist(), which.device, []
    for group in groups:
        members = set(group)
        index = torch.tensor([k for k, b in enumerate(which_host) if b in members], dtype=torch.int64, device=device)
        mine = torch.tensor(sorted(group), dtype=torch.int64, device=device)
        mine_settings = take_rows(s, index)
        mine_settings.switches, mine_settings.batch_list  # noqa: B018 - cached properties, computed here, never inside a step
        lanes.append(Lane(index, index if active is None else active[index], mine_settings, mine, max(widths[i] for i in group),
                          ExactBatches(distinct[mine, 0], distinct[mine, 1].view(torch.float64), n, s.source)))
    return lanes


class AheadSteps:
    """A pack's steps on a device, queued without waiting for the host (docs/packs.md, "The GPU path").

    Between two evaluations nothing is read back: every shape is fixed (the batch width is the pack's widest rate's
    mean + 6 sd + 16, :class:`~raco_bench.packs.draws.FixedBatches`), the live set is a mask, the noise is drawn on the
    device, and the step is one pass over every configuration (:func:`ahead_step`), so the number of operations per
    step does not depend on K, on how many configurations share a batch, or on their batch sizes. Which
    configurations are live is known on the host from their T; once the finished ones are more than a quarter of those
    stepped (:data:`COMPACT`), the pack leaves them out (a new index, made at the step after their last evaluation).

    A batch whose gaps have not reached the last row within the fixed width (more than 6 sd above its mean: about one
    draw in 10⁹) is flagged on the device; :meth:`settle`, which the driver calls before it reads anything (an
    evaluation, a checkpoint, the end), reads the flags once and, where one is set, takes the steps since the last
    settle again from the state before them with exact draws (:class:`ExactBatches`). Every draw is a function of
    (stream, step, purpose), so those steps end exactly as a run alone's."""

    def __init__(self, settings: PackSettings, data: PackData, rates: CompiledRates | None, products: RowProducts,
                 graph: bool | None = None) -> None:
        self.settings, self.data, self.rates, self.products = settings, data, rates, products
        on_cuda = data.X.device.type == "cuda"
        self.graphed = on_cuda if graph is None else graph  # the step as a graph (:mod:`.graphed`); without CUDA its body runs eagerly
        self.capture = self.graphed and on_cuda
        self.T = settings.steps.tolist()  # read once, before the first step
        self.T_np = np.asarray(self.T)
        self.active: np.ndarray | None = None  # the configurations stepped (None: all)
        self.index: torch.Tensor | None = None  # the same, on the device
        distinct = settings.batch_draws[0]
        self.width = FixedBatches(distinct[:, 0], distinct[:, 1].view(torch.float64), data.n, settings.source, max(self.T)).width
        self.graph: StepGraph | None = None
        self.lanes: list[Lane] | None = None  # graphed: the stepped set in lanes of similar batch sizes (None: one pass at the pack's width)
        self._use(settings)
        self.cut = torch.zeros((), dtype=torch.bool, device=data.X.device)  # whether a batch since the last settle may have been cut
        self.pending = False  # steps were taken since the last settle
        self.since: PackState | None = None  # the state before the first of them

    def _use(self, s: PackSettings) -> None:
        """Step the configurations of ``s``: what a step needs of them is found now, on the host, never inside a step."""
        s.switches, s.batch_list  # noqa: B018 - cached properties, computed here
        distinct = s.batch_draws[0]
        streams, rates, last = distinct[:, 0], distinct[:, 1].view(torch.float64), max(self.T)
        c, d, P = self.data.n_classes, self.data.X.shape[1], self.data.n_parts
        self.stepped = s
        K, D = s.size, int(streams.shape[0])
        self.batches = FixedBatches(streams, rates, self.data.n, s.source, last, self.width, ahead_steps(D, self.width))
        self.exact = ExactBatches(streams, rates, self.data.n, s.source)
        self.laplace = (DrawAhead(s.seeds, rng.LAPLACE, P * c, rng.laplace, s.source, last, ahead_steps(K, 2 * P * c))
                        if s.private and s.constrained else None)
        self.gaussian = DrawAhead(s.seeds, rng.GAUSSIAN, c * d + c, rng.normal, s.source, last, ahead_steps(K, c * d + c)) if s.private else None
        self.lanes = lanes_of(s, self.data.n, self.index) if self.graphed else None  # a graph replays a lane's operations for free
        if self.graph is not None:
            self.graph.release()
        self.graph = StepGraph(self, self.capture) if self.graphed else None  # a new stepped set: a new graph

    def _ahead_step(self, state: PackState, exact: bool = False) -> tuple[PackState, torch.Tensor]:
        """Step ``state.step + 1`` (``exact``: with the batches drawn exactly) and whether a batch may have been cut. A
        graphed step's graph takes its steps; here it takes only a flagged stretch again, lane by lane, exactly."""
        if self.lanes is not None:
            assert exact, "a graphed pack's steps are its graph's (StepGraph.step)"
            t = state.step + 1
            out, cut = state, torch.zeros((), dtype=torch.bool, device=state.weight.device)
            for where, new, lane_cut in self.lane_updates(state, t, (), self.laplace.at(t) if self.laplace is not None else None,
                                                          self.gaussian.at(t) if self.gaussian is not None else None, exact=True):
                out, cut = put_rows(out, where, new), cut | lane_cut
            return out, cut
        part = take_rows(state, self.index) if self.active is not None else state
        part, cut = ahead_step(part, self.data, self.stepped, self.rates, self.products, self.exact if exact else self.batches, self.laplace,
                               self.gaussian)
        return (put_rows(state, self.index, part) if self.active is not None else part), cut

    def close(self) -> None:
        """A finished pack: its graph released and the loop between the graph and these steps cut, so what they hold on
        the device is freed when the engine is (not at the next garbage collection)."""
        if self.graph is not None:
            self.graph.release()
            self.graph = None

    def lane_updates(self, state: PackState, t: int | torch.Tensor, batches: tuple, laplace: torch.Tensor | None, gaussian: torch.Tensor | None,
                     exact: bool = False):
        """Each lane's step from ``state``, given the stepped set's draws of step ``t`` (``batches``: rows, valid, cut at
        the pack's width; ``exact``: each lane draws its batches exactly at the host's step ``t`` instead): (its positions
        in the state, its new part, whether one of its batches may have been cut). Lanes are disjoint: every part is read
        from ``state`` as it was."""
        for lane in self.lanes:
            draws = lane.exact.at(t) if exact else lane.draws(*batches, self.data.n)
            pick = lambda noise: noise.index_select(0, lane.index) if noise is not None else None  # noqa: E731
            new, cut = ahead_update(take_rows(state, lane.where), self.data, lane.settings, self.rates, self.products, *draws, pick(laplace),
                                    pick(gaussian), t)
            yield lane.where, new, cut

    def step(self, state: PackState) -> PackState:
        t = state.step + 1
        stepped = self.T_np if self.active is None else self.T_np[self.active]
        live = int((stepped >= t).sum())  # on the host, from the T's: a few microseconds for thousands
        if not live:
            return state
        if live <= COMPACT * len(stepped):  # only after some configuration's last step, which it evaluated
            state = self.settle(state)
            self.active = np.flatnonzero(self.T_np >= t)
            self.index = torch.tensor(self.active, device=state.weight.device)
            self._use(take_rows(self.settings, self.index))
        if not self.pending:  # a graph's state is its buffers, which the next step overwrites: the state kept is a copy
            self.since, self.pending = (cloned(state) if self.graph is not None else state), True
        if self.graph is not None:
            return self.graph.step(state)  # the cut flag or-ed in place, inside the step
        state, cut = self._ahead_step(state)
        self.cut.logical_or_(cut)
        return state

    def settle(self, state: PackState) -> PackState:
        """``state`` once every step since the last settle is known to have drawn its batches whole: one read of the
        flags; where one is set, those steps taken again with exact draws."""
        if not self.pending:
            return state
        cut, self.pending = bool(self.cut), False
        if not cut:
            return state
        self.cut.zero_()  # in place: a graph or-s into this flag
        redo, end = self.since, state.step
        while redo.step < end:
            redo, _ = self._ahead_step(redo, exact=True)
        return redo


# ---------------------------------------------------------------- the engine the pack driver builds


def lagrangian_settings(runs: list, constrained: bool | None = None, private: bool | None = None) -> PackSettings:
    """The per-configuration numbers of ``runs``: members of one Lagrangian method, or of a method whose plan holds the
    family's step settings (``plan.settings``, e.g. DP post-processing's DP-SGD base; then say ``constrained`` and
    ``private``)."""
    dev = runs[0].ctx.device
    vec = lambda values, dtype=torch.float32: vector(runs, values, dtype)  # noqa: E731
    st = [r.ctx.plan.settings for r in runs]
    method = runs[0].method
    constrained = method.constrained if constrained is None else constrained
    private = method.private if private is None else private
    return PackSettings(
        seeds=vec([r.ctx.stream_id for r in runs], torch.int64),
        batch_seeds=vec([r.ctx.batch_seed for r in runs], torch.int64),
        steps=vec([r.ctx.steps for r in runs], torch.int64),
        sampling_rate=vec([s.sampling_rate for s in st], torch.float64),
        expected_batch=vec([s.expected_batch for s in st]),
        clip_norm=vec([s.clip_norm if s.clip_norm is not None else INF for s in st]),
        noise_std=vec([s.noise_std for s in st]),
        laplace_scale=vec([s.laplace_scale or 0.0 for s in st]),
        temperature=vec([s.temperature for s in st]),
        lr=vec([s.lr for s in st]),
        dual_lr=vec([s.dual_lr for s in st]),
        hard=vec([s.dual_update == "hard" for s in st], torch.bool),
        lambda_max=vec([s.lambda_max if s.lambda_max is not None else INF for s in st]),
        dual_momentum=vec([s.dual_momentum for s in st]),
        clip_constraint_value=vec([s.clip_constraint_value for s in st], torch.bool),
        gamma=torch.stack([r.ctx.rates.gamma for r in runs]) if constrained else torch.zeros(len(runs), 0, device=dev),
        private=private,
        constrained=constrained,
        source=runs[0].ctx.source,
    )


class LagrangianEngine(Engine):
    """The Lagrangian family (RaCO-DP, SGDA, DP-SGD, SGD) as a pack; ``ahead`` (default: on any device but the CPU) takes
    the steps a device runs ahead on (:class:`AheadSteps`), ``graph`` (default: on CUDA) replays that step as a CUDA
    graph (:mod:`raco_bench.methods.lagrangian.graphed`; without CUDA, True runs the graph's body eagerly)."""

    runs_ahead = True

    @classmethod
    def blocker(cls, run) -> str | None:
        if run.method.constrained and run.ctx.hyper.histogram_batch != "shared":
            return "histogram_batch=independent has no batched engine yet"
        return super().blocker(run)

    @classmethod
    def pack_key(cls, run) -> tuple:
        return tuple(run.ctx.plan.data.table.shape)  # one layout of the training tensors per pack

    def __init__(self, runs: list, products: RowProducts | None = None, ahead: bool | None = None, graph: bool | None = None) -> None:
        first = runs[0]
        self.settings = lagrangian_settings(runs)
        self.steps = self.settings.steps
        init = [first.method.init_state(r.ctx, r.ctx.stream()) for r in runs]
        K, J, dev = len(runs), init[0].lam.shape[0], first.ctx.device
        self.state = PackState(torch.stack([i.params["weight"] for i in init]), torch.stack([i.params["bias"] for i in init]),
                               torch.zeros(K, J, device=dev), torch.zeros(K, J, device=dev), torch.zeros(K, J, device=dev), 0)
        self.method, self.data = first.method, PackData.of(first.ctx.plan.data, ahead=ahead)
        self.rates = first.ctx.rates if first.method.constrained else None
        self.products = products or rows_for(dev)
        if graph and not self.data.ahead:
            raise ValueError("graph=True replays the step a device runs ahead on: ask for it too (ahead=True), or train on CUDA")
        self.ahead = AheadSteps(self.settings, self.data, self.rates, self.products, graph) if self.data.ahead else None
        self._host: PackState | None = None  # the state on the host as of its step (ahead: read at settle)

    def step(self) -> None:
        if self.ahead is not None:
            self.state = self.ahead.step(self.state)
        else:
            self.state = pack_step(self.state, self.data, self.settings, self.rates, self.products)

    def close(self) -> None:
        if self.ahead is not None:
            self.ahead.close()

    def settle(self) -> None:
        """Before anything of the state is read (ahead: the flags of cut batches, then the state on the host in one
        transfer, for :meth:`params` and :meth:`report`)."""
        if self.ahead is None:
            return
        self.state = st = self.ahead.settle(self.state)
        if st.weight.device.type != "cpu":
            parts = (st.weight, st.bias, st.lam, st.estimates)
            host = torch.cat([x.reshape(x.shape[0], -1) for x in parts], 1).cpu().split([x[0].numel() for x in parts], 1)  # one transfer
            w, b, lam, est = (h.reshape(x.shape) for h, x in zip(host, parts))
            self._host = PackState(w, b, lam, lam, est, st.step)

    def _read(self) -> PackState:
        """The state to read a configuration's values from: the host copy :meth:`settle` made, where it is current."""
        return self._host if self._host is not None and self._host.step == self.state.step else self.state

    def params(self, k: int) -> dict:
        return self._read().params(k)

    def report(self, k: int) -> dict:
        state = self._read()
        return lagrangian_report(self.method, state.lam[k], state.estimates[k])
