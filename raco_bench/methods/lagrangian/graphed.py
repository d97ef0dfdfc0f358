"""The step a device runs ahead on, replayed as one CUDA graph (docs/packs.md, "Graphed steps").

On an H100 the ahead step (:func:`~raco_bench.methods.lagrangian.engine.ahead_step`) launches about 143 kernels per
step, and the host needs about 3 ms to launch them while the GPU works about 1.6 ms (docs/packs.md, "The GPU path"):
a pack waited for its host. A CUDA graph records those launches once and replays them with one call, so a step then
costs what the GPU needs.

A graph replays fixed addresses, so what a step reads and writes lives in buffers that stay put:

- the state: the pack's K configurations (weight, bias, λ, velocity, Γ̂), updated in place; a configuration past its T
  keeps its values (the live mask of ``ahead_update``), and a pack that left its finished configurations out steps
  the others by index (gathered, stepped, written back);
- the clock: step t as a 0-d tensor on the device, advanced inside the graph (the live mask reads it);
- the draws: each block of draws (:class:`~raco_bench.packs.draws.FixedBatches`,
  :class:`~raco_bench.packs.draws.DrawAhead`, at most 32 steps) is drawn outside the graph, as before, and copied
  into a buffer of the block's length; the graph reads step t's slice at an offset it advances itself;
- the flag of a batch cut at the fixed width, or-ed in place (the one :class:`AheadSteps.settle` reads).

Since the graph's operations cost the host nothing, a graphed step takes its configurations in lanes of similar batch
size, each at its own width (:class:`~raco_bench.methods.lagrangian.engine.Lane`), instead of one pass at the pack's
widest: with one lane it runs the ahead step's operations on the same values (bit for bit the same numbers), with
several it sums over fewer padded slots (the same to rounding). Each configuration still ends as it does alone
(tests/test_pack_graph.py, and on a device tests/test_packs_cuda.py).
Where no CUDA device is (``capture=False``), the same body runs eagerly on the same buffers: that is how the CPU
tests check the buffers, the clock, the offsets and the copies.
"""

from __future__ import annotations

import dataclasses

import torch

from raco_bench.packs.draws import DrawAhead, FixedBatches
from raco_bench.packs.tensors import tensor_fields


class StepGraph:
    """The ahead step of one stepped set of configurations (``owner``: an
    :class:`~raco_bench.methods.lagrangian.engine.AheadSteps` after its ``_use``), as a graph captured at its first
    step (``capture``) or its body run eagerly (no capture: the CPU). Built again when the stepped set changes."""

    def __init__(self, owner, capture: bool) -> None:
        self.owner, self.capture = owner, capture
        self.sources: list[FixedBatches | DrawAhead] = [x for x in (owner.batches, owner.laplace, owner.gaussian) if x is not None]
        self.seen: list[object] = [None] * len(self.sources)  # the block each buffer holds (the source's block object)
        self.buffers: list[tuple[torch.Tensor, ...] | None] = [None] * len(self.sources)
        device = owner.data.X.device
        self.offset = torch.zeros(len(self.sources), dtype=torch.int64, device=device)  # step t's slot in each block, less one
        self.clock = torch.zeros((), dtype=torch.int64, device=device)  # the steps taken, advanced by the graph
        self.state = None  # the state's buffers (a PackState), made at the first step
        self.fields: list[str] = []  # the state's tensor fields (packs.tensors.tensor_fields), read at the first step
        self.last = -1  # the step the buffers hold (the state, the clock and the offsets), -1: none yet
        self.graph: torch.cuda.CUDAGraph | None = None

    def step(self, state):
        """Step ``state.step + 1`` of the stepped configurations; the state returned holds this graph's buffers, which
        the next step overwrites (a caller keeping a state across steps clones it)."""
        t = state.step + 1
        for j, source in enumerate(self.sources):  # a new block is drawn outside the graph, as the ahead step draws it
            source.at(t)
            block = source.block
            if block is not self.seen[j]:
                self._load(j, block)
                self.offset[j].fill_(t - source.first - 1)
        if self.state is None or self.last != state.step or any(getattr(state, f) is not getattr(self.state, f) for f in self.fields):
            self._hold(state)
        if self.capture and self.graph is None:
            self._capture()
        if self.graph is not None:
            self.graph.replay()
        else:
            self._body()
        self.last = t
        return dataclasses.replace(self.state, step=t)

    def _load(self, j: int, block) -> None:
        """Copy source ``j``'s new block into its buffer (made at the first block: the source's fixed block length)."""
        parts = block if isinstance(block, tuple) else (block,)
        if self.buffers[j] is None:
            L = self.sources[j].steps
            self.buffers[j] = tuple(p.new_zeros((p.shape[0], L, *p.shape[2:])) for p in parts)
        for buf, p in zip(self.buffers[j], parts):
            buf[:, : p.shape[1]].copy_(p)
        self.seen[j] = block

    def _hold(self, state) -> None:
        """Put ``state`` (a restored checkpoint, a settle's steps taken again, or the first) into the buffers."""
        if self.state is None:
            self.fields = tensor_fields(state)
            self.state = dataclasses.replace(state, **{f: torch.empty_like(getattr(state, f)) for f in self.fields})
        for f in self.fields:
            getattr(self.state, f).copy_(getattr(state, f))
        self.clock.fill_(state.step)
        for j, source in enumerate(self.sources):
            self.offset[j].fill_(state.step - source.first)
        self.last = state.step

    def _draws(self, j: int) -> tuple[torch.Tensor, ...]:
        """Step t's slice of source ``j``'s buffer (the offset already advanced)."""
        return tuple(buf.index_select(1, self.offset[j : j + 1]).squeeze(1) for buf in self.buffers[j])

    def _body(self) -> None:
        """One step on the buffers: what the graph records."""
        o = self.owner
        self.clock.add_(1)
        self.offset.add_(1)
        draws = [self._draws(j) for j in range(len(self.sources))]
        rows, valid, cut = draws[0]
        noise = iter(d[0] for d in draws[1:])
        laplace = next(noise) if o.laplace is not None else None
        gaussian = next(noise) if o.gaussian is not None else None
        whole = self.state
        for where, new, was_cut in list(o.lane_updates(whole, self.clock, (rows, valid, cut), laplace, gaussian)):
            for f in self.fields:  # each lane at its own width, written back by index
                getattr(whole, f).index_copy_(0, where, getattr(new, f))
            o.cut.logical_or_(was_cut)

    def _capture(self) -> None:
        """Record :meth:`_body` as a graph: run once on a side stream first (lazy initialisations happen outside the
        capture), then captured; what that run changed in the buffers is put back, so the first replay is the step."""
        held = [b.clone() for b in self._mutable()]
        device = self.clock.device
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            self._body()
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._body()
        for b, h in zip(self._mutable(), held):
            b.copy_(h)
        self.graph = graph
        torch.cuda.empty_cache()  # the side stream's blocks and earlier graphs' pools, cached but unused: given back

    def release(self) -> None:
        """Drop the graph, its memory pool and its buffers of draws (a new stepped set has its own; a finished pack none).
        The state's buffers stay with whoever holds the last state returned."""
        if self.graph is not None:
            self.graph.reset()
            self.graph = None
        self.buffers, self.seen, self.state = [None] * len(self.sources), [None] * len(self.sources), None

    def _mutable(self) -> list[torch.Tensor]:
        """The buffers a step changes."""
        return [getattr(self.state, f) for f in self.fields] + [self.clock, self.offset, self.owner.cut]
