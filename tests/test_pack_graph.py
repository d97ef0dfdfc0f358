"""The ahead step replayed as a CUDA graph (raco_bench/methods/lagrangian/graphed.py; docs/packs.md, "Graphed steps"),
checked on the CPU, where ``graph=True`` runs the graph's body eagerly on the same buffers: the state held in place,
the clock and the offsets advanced on the device, each block of draws copied into its buffer, the configurations in
lanes of similar batch sizes. With one batch size a graphed pack computes exactly what the ahead step computes (the
same operations on the same values) and must agree bit for bit; with several, each lane sums over its own width, and
it agrees as a pack agrees with its runs alone. Each planted fault below (a slot read one step late, a block not
copied, a clock a step ahead, a kept state overwritten, a lane cut too narrow) breaks that. On a device,
tests/test_packs_cuda.py runs the captured graph (the default there)."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest
import torch
from test_pack_ahead import _meta_steps
from test_packs import MIXED, PER_METHOD, _assert_same, _runs, _three_classes
from test_shared_batches import SHARED

from raco_bench.methods.lagrangian import engine as lagrangian
from raco_bench.methods.lagrangian.graphed import StepGraph
from raco_bench.packs import draws as pack_draws
from raco_bench.packs.draws import FixedBatches
from raco_bench.packs.rows import GatheredRows, IndexedRows
from raco_bench.training import pack as pack_module
from raco_bench.training.loop import execute
from raco_bench.training.pack import PackCheckpoint, train_pack, train_runs


def _identical(a, b) -> None:
    for x, y in zip(a, b):
        assert x.steps == y.steps and x.reported == y.reported and x.history == y.history
        for name in y.final_params:
            np.testing.assert_array_equal(x.final_params[name], y.final_params[name])


def _graphed_equals_ahead(dataset, specs, products=GatheredRows, **kwargs):
    """A graphed pack against the same pack op by op: bit for bit where every configuration has one batch size (one lane,
    at the pack's width), else to the tolerance of a pack against its runs alone (lanes sum over fewer padded slots)."""
    graphed_pack = train_pack(_runs(dataset, specs, **kwargs), products=products, ahead=True, graph=True)
    ahead_pack = train_pack(_runs(dataset, specs, **kwargs), products=products, ahead=True, graph=False)
    if len({p.get("batch_size") for _, p, *_ in specs}) == 1:
        _identical(graphed_pack, ahead_pack)
    else:
        for a, b in zip(graphed_pack, ahead_pack):
            _assert_same(a, b, rtol=1e-4)
    return graphed_pack


@pytest.fixture
def short_blocks(monkeypatch):
    """Blocks of draws 4 steps long, so that a pack of 40 steps copies ten blocks of each purpose into its buffers."""
    monkeypatch.setattr(pack_draws, "AHEAD_STEPS", 4)


@pytest.mark.parametrize("constraint,products", [("demographic-parity", GatheredRows), ("equalized-odds", IndexedRows)],
                         ids=["dp-gathered", "eo-indexed"])
def test_a_graphed_pack_computes_exactly_what_the_ahead_step_computes(adult, constraint, products, short_blocks):
    """MIXED: batch sizes, noise, both dual rules, momentum, a box, T = 40, 25, 33, 1 (masked, then left out: a new
    graph over the live ones, stepping them by index), in lanes: as the ahead pack and its runs alone. The same with one
    batch size (one lane, at the pack's width): bit for bit the ahead pack."""
    pack = _graphed_equals_ahead(adult, MIXED, products, constraint=constraint)
    for res, run in zip(pack, _runs(adult, MIXED, constraint=constraint)):
        _assert_same(res, execute(run), rtol=1e-4)
    _graphed_equals_ahead(adult, [(m, {**p, "batch_size": 512}, g, T, seed) for m, p, g, T, seed in MIXED], products, constraint=constraint)


def test_graphed_packs_of_shared_batches_three_classes_and_every_method(adult, short_blocks):
    _graphed_equals_ahead(adult, SHARED, draws="shared", eval_every=5)
    _graphed_equals_ahead(_three_classes(adult), [(m, p, g, min(T, 15), seed) for m, p, g, T, seed in MIXED[:3]], constraint="equalized-odds")
    for method, params in PER_METHOD.items():
        _graphed_equals_ahead(adult, [(method, p, 0.05, T, seed) for (p, T, seed) in zip(params, (15, 9), (4, 5))])


def test_a_graphed_pack_selects_checkpoints_as_the_ahead_step(adult):
    specs = [("raco-dp", dict(batch_size=512, lr=1.0), 0.05, 20, 7), ("raco-dp", dict(batch_size=1024, lr=0.5, dual_update="hard"), 0.02, 15, 8)]
    for rule in ("paper", "private"):
        _graphed_equals_ahead(adult, specs, eval_every=5, checkpoint=rule)


@pytest.mark.parametrize("fault", ["late slot", "stale block", "clock ahead"])
def test_each_planted_fault_in_the_graph_breaks_the_equality(adult, short_blocks, monkeypatch, fault):
    """The test above is not blind: reading step t + 1's draws, keeping the first block of draws for every step, or a
    clock one step ahead (the live mask then stops a configuration a step early) each make it fail."""
    if fault == "late slot":
        monkeypatch.setattr(StepGraph, "_draws", lambda self, j: tuple(
            b.index_select(1, (self.offset[j : j + 1] + 1).clamp(max=b.shape[1] - 1)).squeeze(1) for b in self.buffers[j]))
    elif fault == "stale block":
        load = StepGraph._load
        monkeypatch.setattr(StepGraph, "_load", lambda self, j, block: load(self, j, block) if self.buffers[j] is None else None)
    else:
        hold = StepGraph._hold
        monkeypatch.setattr(StepGraph, "_hold", lambda self, state: (hold(self, state), self.clock.add_(1)))
    with pytest.raises(AssertionError):
        _graphed_equals_ahead(adult, MIXED)


def test_a_cut_batch_is_drawn_again_from_a_copy_of_the_state_the_graph_overwrote(adult, monkeypatch, short_blocks):
    """A flagged batch makes the pack take the steps since its last settle again, with exact draws, from the state
    before them. With a width far below the batches' nearly every step is flagged, and the graphed pack still equals the
    ahead one and its runs alone. A graph overwrites its state in place at every step, so the state kept is a copy:
    with flags forced from step 7 on (the batches themselves whole), the steps 6-10 are taken again from the state
    the evaluation at step 5 left, which keeping the graph's own buffers instead (planted) has overwritten by then.
    Blocks of 4 steps, so a stretch taken again crosses blocks of draws; with the second configuration ending at step 6,
    the stretches after it are taken again in the lanes of the live ones (stepped by index). (The plant needs one graph
    throughout: a new live set's graph copies the state into buffers of its own.)"""
    narrow, at = FixedBatches.__init__, FixedBatches.at
    specs = [(m, p, g, T, seed) for (m, p, g, _, seed), T in zip(MIXED[:3], (12, 6, 12))]
    with monkeypatch.context() as m:
        m.setattr(FixedBatches, "__init__", lambda self, streams, rates, n, source, last_step, width=None, steps=1:
                  narrow(self, streams, rates, n, source, last_step, 64, steps))
        for res, run in zip(_graphed_equals_ahead(adult, specs), _runs(adult, specs)):
            _assert_same(res, execute(run), rtol=1e-4)
    def flagged_from_step_7(self, t):
        at(self, t)  # a new block where t leaves the last one
        rows, valid, cut = self.block
        forced = cut | (self.first + torch.arange(cut.shape[1]) > 6)
        if not torch.equal(forced, cut):
            self.block = (rows, valid, forced)  # what the graph copies into its buffers
        return rows[:, t - self.first], valid[:, t - self.first], forced[:, t - self.first]

    monkeypatch.setattr(FixedBatches, "at", flagged_from_step_7)
    _graphed_equals_ahead(adult, specs, eval_every=5)
    same_set = [(m, p, g, 12, seed) for m, p, g, _, seed in specs]  # one graph throughout: a settle without a redo at step 5
    _graphed_equals_ahead(adult, same_set, eval_every=5)
    monkeypatch.setattr(lagrangian, "cloned", lambda state: state)  # planted: the kept state is the graph's buffers
    with pytest.raises(AssertionError):
        _graphed_equals_ahead(adult, same_set, eval_every=5)


def test_a_graphed_pack_resumed_from_a_checkpoint_ends_as_one_never_stopped(adult, short_blocks, monkeypatch):
    """A restored state is not the graph's buffers: the graph copies it in, with its clock and offsets, and goes on."""
    specs = MIXED[:3]
    whole = train_runs(_runs(adult, specs, eval_every=7))
    saves = []

    class _Killed(Exception):
        pass

    def save(state):
        saves.append(state)
        if state["pack"] is not None and state["pack"]["state"]["step"] >= 13:
            raise _Killed

    monkeypatch.setattr(pack_module, "train_pack", functools.partial(train_pack, ahead=True, graph=True))
    with pytest.raises(_Killed):
        train_runs(_runs(adult, specs, eval_every=7), checkpoint=PackCheckpoint(save, None, every_s=0.0))
    resumed = train_runs(_runs(adult, specs, eval_every=7), checkpoint=PackCheckpoint(lambda s: None, saves[-1], every_s=0.0))
    for a, b in zip(resumed, whole):
        _assert_same(a, b, rtol=1e-4)


def test_lanes_group_similar_batch_sizes_and_a_lane_cut_too_narrow_is_caught(adult, monkeypatch):
    """B from 64 to 2,048 with shared and own batches: the lanes cover every stepped configuration once, each lane's
    widest batch is at most twice its narrowest, a lane's width holds its widest batch, and the pack equals its runs
    alone. A lane cut to half its width (planted) either trips the cut flag, so the stretch is taken again exactly and the
    pack still equals its runs alone, or loses rows: the flag is what guards it, so with the flag ignored too it fails."""
    specs = [("raco-dp", {**MIXED[0][1], "batch_size": b, "lr": 0.1 + 0.05 * i}, 0.05, 12, i % 3) for i, b in enumerate((64, 2048, 256, 1024, 700))]
    engine = lagrangian.LagrangianEngine(_runs(adult, specs, draws="shared"), graph=True, ahead=True)
    lanes = engine.ahead.lanes
    covered = sorted(k for lane in lanes for k in lane.index.tolist())
    assert covered == list(range(len(specs))) and len(lanes) >= 3
    n = engine.data.n
    for lane in lanes:
        q = lane.settings.sampling_rate.tolist()
        widths = [lagrangian.rng.poisson_width(n, n * x) for x in q]
        assert max(widths) <= lagrangian.LANE_RATIO * min(widths) and lane.width == max(widths)
    for res, run in zip(train_pack(_runs(adult, specs, draws="shared"), ahead=True, graph=True), _runs(adult, specs, draws="shared")):
        _assert_same(res, execute(run), rtol=1e-4)
    draws = lagrangian.Lane.draws

    def half_width(self, rows, valid, cut, n):
        return draws(dataclasses.replace(self, width=self.width // 2), rows, valid, cut, n)

    monkeypatch.setattr(lagrangian.Lane, "draws", half_width)
    for res, run in zip(train_pack(_runs(adult, specs, draws="shared"), ahead=True, graph=True), _runs(adult, specs, draws="shared")):
        _assert_same(res, execute(run), rtol=1e-4)  # every half-width batch flagged and drawn again exactly
    monkeypatch.setattr(lagrangian.AheadSteps, "settle", lambda self, state: (setattr(self, "pending", False), state)[1])  # planted: no redo
    with pytest.raises(AssertionError):
        for res, run in zip(train_pack(_runs(adult, specs, draws="shared"), ahead=True, graph=True), _runs(adult, specs, draws="shared")):
            _assert_same(res, execute(run), rtol=1e-4)


def test_a_graphed_step_reads_nothing_back_and_copies_nothing_up(adult, monkeypatch):
    """What a capture refuses (a value read back, host data copied up) the graph's body and the work around it never
    do: on the meta device, over a step that copies new blocks into the buffers and the steps after it."""
    monkeypatch.setattr(lagrangian.AheadSteps, "__init__", _graphed_init(lagrangian.AheadSteps.__init__))
    for counter in _meta_steps(adult, MIXED[:3], steps=3):
        assert counter.reads == [] and counter.uploads == [] and counter.total > 0


def _graphed_init(init):
    def with_graph(self, settings, data, rates, products, graph=None):
        init(self, settings, data, rates, products, True)
    return with_graph
