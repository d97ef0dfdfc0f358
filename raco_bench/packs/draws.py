"""Noise drawn ahead: every configuration's draws of one purpose for a block of upcoming steps, in one generator call.

The counter generator's words depend only on (stream id, step, purpose) (:mod:`raco_bench.privacy.counter_rng`), so
step t's draws are the same numbers whether a configuration draws them alone, a pack draws them for step t, or a pack
draws them as part of a block of steps t … t + L − 1. Drawing ahead changes only how many calls the generator gets:
on a CPU each call has a fixed cost of about 0.1 ms (the stream keys, the cipher, the conversion), which is most of
what a step's Laplace histogram noise costs (docs/packs.md, "Speed").

Nothing drawn ahead is released or logged: a block holds the draws of steps that have not been taken yet, in the
pack's memory, and is dropped when the pack moves past it. A block is at most :data:`BLOCK_BYTES` of float64 draws
(the memory model counts it: :mod:`raco_bench.packs.memory`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from raco_bench.privacy import counter_rng as rng

BLOCK_BYTES = 4 * 2**20  # float64 draws of one purpose held ahead for a pack
BLOCK_STEPS = 16  # at most this many steps per block


def block_steps(configs: int, count: int) -> int:
    """Steps per block for ``configs`` configurations drawing ``count`` numbers each per step (at least 1)."""
    return max(1, min(BLOCK_STEPS, BLOCK_BYTES // max(1, 8 * configs * count)))


class DrawAhead:
    """One purpose's draws (e.g. :func:`~raco_bench.privacy.counter_rng.laplace`) for the configurations of ``seeds``,
    ``count`` per step, drawn in blocks of steps and never past ``last_step`` (the pack's longest T)."""

    def __init__(self, seeds: torch.Tensor, purpose: int, count: int, draw: Callable[[rng.StreamKeys, int], torch.Tensor],
                 source: rng.Keystream, last_step: int) -> None:
        self.seeds, self.purpose, self.count, self.draw, self.source = seeds, purpose, count, draw, source
        self.last_step, self.steps = last_step, block_steps(int(seeds.shape[0]), count)
        self.first, self.block = 0, None

    def at(self, t: int) -> torch.Tensor:
        """Step ``t``'s draws, K × count: the same numbers as ``draw(stream_keys(seeds, t, purpose, source), count)``."""
        if self.block is None or not self.first <= t < self.first + self.block.shape[1]:
            steps = torch.arange(t, max(t, min(t + self.steps - 1, self.last_step)) + 1, device=self.seeds.device)
            self.block = self.draw(rng.stream_keys(self.seeds[:, None], steps[None, :], self.purpose, self.source), self.count)
            self.first = t
        return self.block[:, t - self.first]
