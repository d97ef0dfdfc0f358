"""The pack step a device runs ahead on (docs/packs.md, "The GPU path"): nothing read back to the host between
evaluations, a number of operations per step that does not grow with the pack, and the equivalence contract of
tests/test_packs.py (a configuration in a pack ends as it does alone) on that step, run here on the CPU."""

from __future__ import annotations

import pytest
from op_counts import OperationCounter, to_meta
from test_packs import MIXED, PER_METHOD, SOURCE, _assert_same, _runs, _three_classes
from test_shared_batches import SHARED

from raco_bench.methods.lagrangian import engine as lagrangian
from raco_bench.methods.lagrangian.engine import LagrangianEngine
from raco_bench.packs import draws as pack_draws
from raco_bench.packs.draws import FixedBatches
from raco_bench.packs.rows import GatheredRows, IndexedRows
from raco_bench.privacy import counter_rng as rng
from raco_bench.privacy.counter_rng import Keystream
from raco_bench.training.config import RunConfig
from raco_bench.training.loop import execute, prepare_run
from raco_bench.training.pack import train_pack

DEVICE_FORM = Keystream(SOURCE.secret, cpu_loop=False)  # the secret words as a GPU computes them (torch integer operations)


def _same_ahead(dataset, specs, products=GatheredRows, **kwargs):
    runs = _runs(dataset, specs, **kwargs)
    pack = train_pack(runs, products=products, ahead=True)
    for res, run in zip(pack, _runs(dataset, specs, **kwargs)):
        _assert_same(res, execute(run), rtol=1e-4)
    return pack


@pytest.mark.parametrize("constraint,products", [("demographic-parity", GatheredRows), ("equalized-odds", IndexedRows)],
                         ids=["dp-gathered", "eo-indexed"])
def test_an_ahead_pack_equals_its_runs_alone(adult, constraint, products):
    """Mixed batch sizes (one pass at the widest width), noise levels, dual rules, momentum, a λ box, targets and T (the
    finished configurations masked, then left out of the steps)."""
    _same_ahead(adult, MIXED, products, constraint=constraint)


def test_an_ahead_pack_of_shared_batches_and_three_classes_equals_its_runs_alone(adult):
    _same_ahead(adult, SHARED, draws="shared", eval_every=5)
    _same_ahead(_three_classes(adult), [(m, p, g, min(T, 15), seed) for m, p, g, T, seed in MIXED[:3]], constraint="equalized-odds")


@pytest.mark.parametrize("method", list(PER_METHOD))
def test_every_lagrangian_method_runs_ahead_equivalently(adult, method):
    _same_ahead(adult, [(method, p, 0.05, T, seed) for (p, T, seed) in zip(PER_METHOD[method], (15, 9), (4, 5))])


def test_an_ahead_pack_selects_checkpoints_as_its_runs_alone(adult):
    specs = [("raco-dp", dict(batch_size=512, lr=1.0), 0.05, 20, 7), ("raco-dp", dict(batch_size=1024, lr=0.5, dual_update="hard"), 0.02, 15, 8)]
    for rule in ("paper", "private"):
        pack = _same_ahead(adult, specs, eval_every=5, checkpoint=rule)
        assert all(res.reported["rule"] == rule for res in pack)


def test_a_batch_cut_at_the_fixed_width_is_drawn_again_exactly(adult, monkeypatch):
    """With a width far below the batches', nearly every step's batches are cut: the pack flags them on the device and,
    before it evaluates, takes those steps again with exact draws, so it still equals its runs alone. Skipping the
    steps taken again (the bug planted below) leaves the cut batches in and breaks the equivalence."""
    narrow = FixedBatches.__init__

    def at_width_64(self, streams, rates, n, source, last_step, width=None, steps=1):
        narrow(self, streams, rates, n, source, last_step, 64, steps)

    monkeypatch.setattr(FixedBatches, "__init__", at_width_64)
    specs = [(m, p, g, min(T, 12), seed) for m, p, g, T, seed in MIXED[:3]]
    _same_ahead(adult, specs)
    settle = lagrangian.AheadSteps.settle
    monkeypatch.setattr(lagrangian.AheadSteps, "settle", lambda self, state: (setattr(self, "pending", False), state)[1])  # planted: no redo
    with pytest.raises(AssertionError):
        _same_ahead(adult, specs)
    monkeypatch.setattr(lagrangian.AheadSteps, "settle", settle)


def test_finished_configurations_leave_the_steps(adult):
    """T = 40, 25, 33 and 1: the pack masks the finished configuration until the finished ones are a quarter of those it
    steps, then steps only the live ones (an index made after their last evaluation)."""
    engine = LagrangianEngine(_runs(adult, MIXED), ahead=True)
    stepped = []
    for _ in range(40):
        engine.step()
        stepped.append(len(engine.ahead.active) if engine.ahead.active is not None else 4)
    assert stepped[:2] == [4, 3] and stepped[25] == 2 and stepped[33] == 1


# ---------------------------------------------------------------- what a step asks of a GPU, counted on a CPU

def _specs(k: int, batch_sizes=(512,), seeds: int | None = None):
    """k RaCO-DP configurations cycling through ``batch_sizes``, with ``seeds`` seeds in all (shared draws: one batch
    per (seed, batch size)), every other setting as MIXED's first."""
    p = dict(MIXED[0][1])
    return [("raco-dp", {**p, "batch_size": batch_sizes[i % len(batch_sizes)], "lr": 0.1 + 0.01 * i}, 0.05, 30, i % (seeds or k))
            for i in range(k)]


def _meta_steps(adult, specs, steps: int = 3, draws: str = "own", constraint: str = "demographic-parity", source=DEVICE_FORM):
    """The operations of ``steps`` ahead steps of a pack of ``specs`` on the meta device, one counter per step."""
    engine = LagrangianEngine(_runs_with(adult, specs, draws, constraint, source), GatheredRows, ahead=True)
    ahead, state = to_meta(engine.ahead), to_meta(engine.state)
    counters = []
    for _ in range(steps):
        with OperationCounter() as counter:
            state = ahead.step(state)
        counters.append(counter)
    return counters


def _runs_with(adult, specs, draws, constraint, source):
    return [prepare_run(RunConfig(method=m, params=p, gamma=g, steps=T, seed=seed, epsilon=50.0, constraint=constraint, batch_draws=draws,
                                  randomness=source.mode), adult, source=source)
            for m, p, g, T, seed in specs]


@pytest.mark.parametrize("source", [DEVICE_FORM, rng.REPRODUCIBLE], ids=["secret", "reproducible"])
def test_an_ahead_step_reads_nothing_back_and_copies_nothing_up(adult, source):
    """On the meta device every read of a value raises (a meta tensor has none) and a copy of host data to the device is
    an operation the counter sees: an ahead step makes neither, under both word sources, with a hard dual rule, momentum
    and a box (MIXED), for two and four parts."""
    for constraint in ("demographic-parity", "equalized-odds"):
        for counter in _meta_steps(adult, MIXED[:3], source=source, constraint=constraint):
            assert counter.reads == [] and counter.uploads == []
            assert counter.total > 0


def test_the_operations_of_an_ahead_step_do_not_grow_with_the_pack(adult, monkeypatch):
    """The same settings in packs of 4, 16 and 64 configurations, with one batch size or four spread from 64 to 2,048
    (chunks of similar sizes, on the host path), own batches or shared ones (1 to 16 groups): every ahead step
    dispatches the same operations, the same number of times. A step that draws the next block of batches and noise
    (every AHEAD_STEPS steps, 4 here) adds the same draws whatever the pack; the steps between add nothing."""
    monkeypatch.setattr(pack_draws, "AHEAD_STEPS", 4)
    base = [c.counts for c in _meta_steps(adult, _specs(4), steps=8)]
    assert base[0] == base[4] and base[1] == base[2] == base[3] == base[5]
    for specs, batches in [(_specs(16), "own"), (_specs(64), "own"), (_specs(64, (64, 256, 1024, 2048)), "own"),
                           (_specs(64, seeds=1), "shared"), (_specs(64, (64, 256, 1024, 2048), seeds=4), "shared")]:
        assert [c.counts for c in _meta_steps(adult, specs, steps=5, draws=batches)] == base[:5], (len(specs), batches)
    drawing, between = sum(base[0].values()), sum(base[1].values())
    assert between < 250 and drawing - between < 2500  # ChaCha20's torch form: about 700 operations per purpose and block
    print(f"operations per ahead step: {between} between draws, {drawing} with a block of draws")


def test_the_host_path_grows_with_chunks_where_the_ahead_step_does_not(adult):
    """What the ahead step changes: on the host path (the CPU's) a step's operations grow with the number of chunks of
    batch sizes; counted here on the CPU for the same packs."""
    def host_ops(specs):
        engine = LagrangianEngine(_runs(adult, specs), GatheredRows, ahead=False)
        engine.step()
        with OperationCounter() as counter:
            engine.step()
        return counter.total

    assert host_ops(_specs(8, (64, 256, 1024, 2048))) > host_ops(_specs(8))
