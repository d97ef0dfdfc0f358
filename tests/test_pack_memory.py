"""The memory model of a pack and the pack size it gives a sweep (raco_bench/training/pack_memory.py; docs/packs.md, "Memory").

The model against measured peaks is a benchmark (`raco-bench bench memory`), never a test; these check its structure
and how a sweep uses it."""

from __future__ import annotations

import pytest

from raco_bench.sweeps.plan import auto_pack_size, pack_memory_fit, phase1_trials
from raco_bench.sweeps.spec import SweepSpec
from raco_bench.training.pack_memory import PROCESS_BYTES, DataShape, estimate, evaluations_of, largest_pack, pack_budget

ADULT = DataShape(n_train=28_829, n_features=104, n_classes=2, n_parts=4, eval_rows=9_611)
HEART = DataShape(n_train=161_722, n_features=30, n_classes=2, n_parts=4, eval_rows=44_139)


def _total(shape: DataShape, k: int, batch: float = 1024, evaluations: int = 202) -> int:
    return estimate([batch] * k, [evaluations] * k, shape.n_train, shape.n_features, shape.n_classes, shape.n_parts, shape.eval_rows,
                    selection=True).total


def test_the_estimate_grows_with_every_input_and_adds_its_parts():
    base = estimate([1024.0] * 64, [202] * 64, ADULT.n_train, ADULT.n_features, 2, 4, ADULT.eval_rows)
    assert base.total == base.tables + base.state + base.step + base.evaluation + base.history
    assert _total(ADULT, 128) > base.total
    assert _total(ADULT, 64, batch=4096) > base.total and _total(ADULT, 64, evaluations=400) > base.total
    assert _total(HEART, 64) > base.total  # a larger training split
    assert _total(ADULT, 64) > base.total  # private selection holds the validation logits
    assert evaluations_of(5000, 25) == 202 and evaluations_of(5000, 25, 5) == 207
    mixed = estimate([256.0] * 32 + [4096.0] * 32, [202] * 64, ADULT.n_train, ADULT.n_features, 2, 4, ADULT.eval_rows)
    assert base.step < mixed.step < _total(ADULT, 64, batch=4096)  # a step's arrays are the widest chunk's, not K × the widest batch


def test_the_largest_pack_is_the_largest_that_fits():
    budget = 1.5 * _total(HEART, 100)
    k = largest_pack(256, HEART, 1024, 202, budget)
    assert _total(HEART, k) <= budget < _total(HEART, k + 1)
    assert largest_pack(256, HEART, 1024, 202, 10 * _total(HEART, 256)) == 256  # the limit binds
    assert largest_pack(256, HEART, 1024, 202, 0.0) == 1  # a single run trains whatever the model says


def test_a_sweep_sizes_its_packs_by_the_nodes_free_memory():
    spec = SweepSpec(dataset="adult", methods=("raco-dp",), epsilons=(1.0,), gammas=(0.05,))
    trials = phase1_trials(spec, ADULT.n_train)
    plenty = pack_memory_fit(trials, spec, ADULT, slots=2, free=64 * 2**30)
    assert auto_pack_size(len(trials), 2, False, plenty) == auto_pack_size(len(trials), 2, False) == 250
    widest = max(t["params"]["batch_size"] for t in trials)
    free = int(2 * (PROCESS_BYTES + ADULT.dataset_bytes + _total(ADULT, 40, widest)) / 0.7) + 64  # two slots, 40 configurations each
    assert pack_budget(2, ADULT, free) == pytest.approx(_total(ADULT, 40, widest), rel=1e-6)
    tight = pack_memory_fit(trials, spec, ADULT, slots=2, free=free)
    assert auto_pack_size(len(trials), 2, False, tight) == 40
    assert auto_pack_size(len(trials), 2, True, tight) == 500  # GPU trials: one per slot, not sized by the host's memory


def test_a_pack_keeps_freed_memory_in_the_process():
    """glibc's thresholds are raised (raco_bench/packs/allocator.py); on this Linux machine mallopt accepts both."""
    from raco_bench.packs.allocator import keep_freed_memory

    assert keep_freed_memory() and keep_freed_memory()  # idempotent


def test_freed_memory_kept_by_a_pack_can_be_handed_back_before_a_measurement():
    """`raco-bench bench memory` trims the heap before it reads a pack's "before": otherwise the pack reuses what the
    process freed earlier and its growth understates it (docs/packs.md, "The measurement, corrected")."""
    import numpy as np

    from raco_bench.benchmarks.pack_memory import resident
    from raco_bench.packs.allocator import keep_freed_memory, release_freed_memory

    assert keep_freed_memory()
    release_freed_memory()
    before = resident()
    block = np.ones(48 * 2**20 // 8)  # 48 MiB, below the raised mmap threshold: it comes from the heap
    del block
    kept = resident() - before
    assert kept > 40 * 2**20  # freed, and still resident
    assert release_freed_memory()
    assert resident() - before < 8 * 2**20  # handed back


def test_a_gpu_pack_is_the_largest_the_devices_free_memory_fits():
    """A GPU trial sizes its packs from its device's free memory (docs/packs.md, "The GPU path"): the largest K whose GPU
    estimate, less the host's history, fits 80 % of the free memory less the dataset's tensors; more free memory or
    fewer distinct batch streams, a larger pack."""
    from raco_bench.training.pack_memory import FREE_SHARE_GPU, largest_pack_on_device

    def on_device(k: int, streams: int | None = None) -> int:
        return estimate([1024.0] * k, [202] * k, ADULT.n_train, ADULT.n_features, 2, 4, ADULT.eval_rows, gpu=True, selection=True,
                        batch_streams=streams).on_device

    free = 20 * 2**30
    k = largest_pack_on_device(10**6, ADULT, 1024.0, 202, free)
    budget = FREE_SHARE_GPU * free - ADULT.dataset_bytes
    assert on_device(k) <= budget < on_device(k + 1) and k > 1024
    assert largest_pack_on_device(10**6, ADULT, 1024.0, 202, 2 * free) > k
    assert largest_pack_on_device(10**6, ADULT, 1024.0, 202, free, batch_streams=40) >= k
    assert largest_pack_on_device(100, ADULT, 1024.0, 202, free) == 100 and largest_pack_on_device(10**6, ADULT, 1024.0, 202, 0) == 1
    gpu = estimate([1024.0] * 256, [202] * 256, ADULT.n_train, ADULT.n_features, 2, 4, ADULT.eval_rows, gpu=True)
    assert gpu.total == gpu.on_device + gpu.history  # the history is the host's


def test_a_trial_trains_its_configurations_in_packs_of_at_most_max_pack(adult, monkeypatch):
    """``train_runs(max_pack=)``: consecutive packs of at most that many, each configuration ending as in one pack."""
    from test_packs import MIXED, _assert_same, _runs

    from raco_bench.training import pack as pack_run

    sizes = []
    real = pack_run.train_pack
    monkeypatch.setattr(pack_run, "train_pack", lambda runs, *a, **k: sizes.append(len(runs)) or real(runs, *a, **k))
    specs = [(m, p, g, min(T, 12), seed) for m, p, g, T, seed in MIXED]
    whole = pack_run.train_runs(_runs(adult, specs))
    split = pack_run.train_runs(_runs(adult, specs), max_pack=3)
    assert sizes == [4, 3, 1]
    for a, b in zip(split, whole):
        _assert_same(a, b, rtol=1e-4)
