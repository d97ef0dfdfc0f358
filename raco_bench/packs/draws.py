"""Noise and batches drawn ahead: every configuration's draws of one purpose (or every distinct Poisson batch) for a
block of upcoming steps, in one generator call.

The counter generator's words depend only on (stream id, step, purpose) (:mod:`raco_bench.privacy.counter_rng`), so
step t's draws are the same numbers whether a configuration draws them alone, a pack draws them for step t, or a pack
draws them as part of a block of steps t … t + L − 1. Drawing ahead changes only how many calls the generator gets:
on a CPU each call has a fixed cost of about 0.1 ms (the stream keys, the cipher, the conversion), which is most of
what a step's Laplace histogram noise costs (docs/packs.md, "Speed").

Nothing drawn ahead is released or logged: a block holds the draws of steps that have not been taken yet, in the
pack's memory, and is dropped when the pack moves past it. A block is at most :data:`BLOCK_BYTES` of float64 draws
(the memory model counts it: :mod:`raco_bench.training.pack_memory`). Batches drawn ahead (:class:`BatchesAhead`) are the same
rows a configuration draws alone at each step: a Poisson sample depends only on its stream's key and its rate
(:func:`~raco_bench.privacy.counter_rng.poisson_rows`), not on which other streams or steps are drawn in the same call.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from raco_bench.privacy import counter_rng as rng

BLOCK_BYTES = 4 * 2**20  # float64 draws of one purpose held ahead for a pack
BLOCK_STEPS = 16  # at most this many steps per block
AHEAD_STEPS = 32  # a pack that runs ahead on a device draws at most this many steps of one purpose in one call
AHEAD_BYTES = 2 * 2**30  # and at most this much device memory per call (BYTES_PER_WORD per word drawn)
BYTES_PER_WORD = 72  # device memory per 64-bit word a call draws at its peak: the cipher's state and rows in int64, the
# rolled rows, a rotation's temporary, the sums, the words (16 + 16 + 12 + 4 + 16 + 8, counted from counter_rng.chacha20_blocks)


def block_steps(configs: int, count: int) -> int:
    """Steps per block for ``configs`` configurations drawing ``count`` numbers each per step (at least 1)."""
    return max(1, min(BLOCK_STEPS, BLOCK_BYTES // max(1, 8 * configs * count)))


def ahead_steps(streams: int, words: int) -> int:
    """Steps per call of a pack that runs ahead, for ``streams`` streams of ``words`` words each per step: at most
    :data:`AHEAD_STEPS`, and at most :data:`AHEAD_BYTES` of the call's memory (at least 1)."""
    return max(1, min(AHEAD_STEPS, AHEAD_BYTES // max(1, BYTES_PER_WORD * streams * words)))


def distinct_batches(batch_seeds: torch.Tensor, sampling_rate: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The distinct (batch stream, q) pairs of a pack's configurations (D × 2, q's float64 bits as int64) and which one
    each configuration draws (K): configurations that share their batch stream and rate draw the same Poisson batch
    at every step (docs/packs.md, "Shared batches"), so a step draws each distinct batch once."""
    pairs = torch.stack([batch_seeds, sampling_rate.view(torch.int64)], 1)
    distinct, which = torch.unique(pairs, dim=0, return_inverse=True)
    return distinct, which


class DrawAhead:
    """One purpose's draws (e.g. :func:`~raco_bench.privacy.counter_rng.laplace`) for the configurations of ``seeds``,
    ``count`` per step, drawn in blocks of steps and never past ``last_step`` (the pack's longest T). ``steps`` fixes the
    block's length (a pack that runs ahead on a device: the steps' range is then checked here, once, so that drawing a
    block reads nothing back); by default it is :func:`block_steps`."""

    def __init__(self, seeds: torch.Tensor, purpose: int, count: int, draw: Callable[[rng.StreamKeys, int], torch.Tensor],
                 source: rng.Keystream, last_step: int, steps: int | None = None) -> None:
        self.seeds, self.purpose, self.count, self.draw, self.source = seeds, purpose, count, draw, source
        self.last_step, self.steps, self.fixed = last_step, steps or block_steps(int(seeds.shape[0]), count), steps is not None
        if self.fixed:
            rng.check_steps(last_step, source)
        self.first, self.block = 0, None

    def restricted(self, index: torch.Tensor) -> "DrawAhead":
        """These draws for the configurations at ``index`` only, holding their part of the block already drawn."""
        out = DrawAhead(self.seeds[index], self.purpose, self.count, self.draw, self.source, self.last_step, self.steps if self.fixed else None)
        if self.block is not None:
            out.first, out.block = self.first, self.block[index]
        return out

    def at(self, t: int) -> torch.Tensor:
        """Step ``t``'s draws, K × count: the same numbers as ``draw(stream_keys(seeds, t, purpose, source), count)``."""
        if self.block is None or not self.first <= t < self.first + self.block.shape[1]:
            steps = torch.arange(t, max(t, min(t + self.steps - 1, self.last_step)) + 1, device=self.seeds.device)
            keys = rng.stream_keys(self.seeds[:, None], steps[None, :], self.purpose, self.source, checked=not self.fixed)
            self.block, self.first = self.draw(keys, self.count), t
        return self.block[:, t - self.first]


class BatchesAhead:
    """The Poisson batches of D distinct (batch stream, rate) pairs (``streams``, ``rates``: D each) on ``n`` rows,
    drawn for a block of steps in one :func:`~raco_bench.privacy.counter_rng.poisson_rows` call and never past
    ``last_step``. A block holds at most :data:`BLOCK_BYTES`, counted at 16 bytes per uniform drawn (the rows and the
    draws behind them), or a single step where one step alone is more (:func:`block_steps`)."""

    def __init__(self, streams: torch.Tensor, rates: torch.Tensor, n: int, source: rng.Keystream, last_step: int) -> None:
        self.streams, self.rates, self.n, self.source, self.last_step = streams, rates, n, source, last_step
        self.steps = block_steps(int(streams.shape[0]), rng.poisson_width(n, n * float(rates.max())) * 2)  # rows and the draws behind them
        self.first, self.rows, self.valid, self.widths = 0, None, None, []

    def restricted(self, index: torch.Tensor) -> "BatchesAhead":
        """These batches for the distinct streams at ``index`` only, holding their part of the block already drawn."""
        out = BatchesAhead(self.streams[index], self.rates[index], self.n, self.source, self.last_step)
        if self.rows is not None:
            positions = index.tolist()
            out.first, out.rows, out.valid = self.first, self.rows[index], self.valid[index]
            out.widths = [[sizes[i] for i in positions] for sizes in self.widths]
        return out

    def at(self, t: int) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
        """Step ``t``'s batches as :func:`~raco_bench.privacy.counter_rng.poisson_rows` gives them for the D streams at
        step ``t`` (rows and valid, D × M; slots past a batch's end hold row n − 1 and are not valid) and each batch's
        size. M is the widest batch of the block, so a step may carry a few more invalid slots than it would alone."""
        if self.rows is None or not self.first <= t < self.first + self.rows.shape[1]:
            steps = torch.arange(t, max(t, min(t + self.steps - 1, self.last_step)) + 1, device=self.streams.device)
            D, L = int(self.streams.shape[0]), int(steps.shape[0])
            keys = rng.stream_keys(self.streams[:, None], steps[None, :], rng.BATCH, self.source)
            keys = rng.StreamKeys(keys.key.reshape(-1), keys.tag.reshape(-1), keys.source)
            rows, valid = rng.poisson_rows(keys, self.n, self.rates.repeat_interleave(L))
            self.rows, self.valid = rows.view(D, L, -1), valid.view(D, L, -1)
            self.widths, self.first = valid.sum(1).view(D, L).T.tolist(), t
        i = t - self.first
        return self.rows[:, i], self.valid[:, i], self.widths[i]

    @property
    def block(self) -> torch.Tensor | None:
        """The rows drawn ahead (D × L × M), None before the first draw."""
        return self.rows


class FixedBatches:
    """The Poisson batches of D distinct (batch stream, rate) pairs on ``n`` rows at a width fixed for the whole pack, for
    a step that never reads a value back to the host (docs/packs.md, "The GPU path"), drawn ``steps`` steps at a time:
    ``width`` uniforms per stream and step, the first round of :func:`~raco_bench.privacy.counter_rng.poisson_rows` at
    the pack's widest rate (its mean + 6 sd + 16). A batch is then the rows drawn alone, unless its gaps have not
    reached the last row within ``width`` uniforms (a batch more than 6 sd above its mean): :meth:`at` flags that on the
    device, and the pack takes those steps again with exact draws before anything of them is read
    (:class:`~raco_bench.methods.lagrangian.engine.AheadSteps`). The rates and the steps are checked here, once."""

    def __init__(self, streams: torch.Tensor, rates: torch.Tensor, n: int, source: rng.Keystream, last_step: int,
                 width: int | None = None, steps: int = 1) -> None:
        host = rates.cpu()
        if bool((host <= 0).any()) or bool((host > 1).any()):
            raise ValueError(f"sampling rates must be in (0, 1], got {host.tolist()}")
        rng.check_steps(last_step, source)
        qmax = float(host.max())
        self.streams, self.n, self.source, self.last_step, self.steps = streams, n, source, last_step, steps
        self.width = width or rng.poisson_width(n, n * qmax)  # n where q = 1
        self.log1mq = torch.log1p(-rates.clamp(max=1.0 - 1e-16))[:, None, None]
        self.full = (rates == 1.0)[:, None, None]
        self.first, self.block = 0, None

    def at(self, t: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Step ``t``'s batches (rows and valid, D × width; slots past a batch's end hold row n − 1 and are not valid)
        and, per stream, whether its batch may reach past the width (then not the rows drawn alone)."""
        if self.block is None or not self.first <= t < self.first + self.block[0].shape[1]:
            steps = torch.arange(t, max(t, min(t + self.steps - 1, self.last_step)) + 1, device=self.streams.device)
            keys = rng.stream_keys(self.streams[:, None], steps[None, :], rng.BATCH, self.source, checked=False)
            u = rng.uniform(keys, self.width)  # D × L × width
            gaps = torch.where(self.full, 1, torch.floor(torch.log(u) / self.log1mq).to(torch.int64) + 1)
            rows = torch.cumsum(gaps, 2) - 1
            valid = rows < self.n
            self.block, self.first = (torch.where(valid, rows, self.n - 1), valid, rows[:, :, -1] < self.n - 1), t
        rows, valid, cut = self.block
        i = t - self.first
        return rows[:, i], valid[:, i], cut[:, i]
