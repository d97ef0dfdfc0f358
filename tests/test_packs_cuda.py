"""Packs on a CUDA device (docs/packs.md, "Equivalence", "The GPU path"): the contract of tests/test_packs.py on the
GPU, where a pack multiplies copied-out rows (``GatheredRows``) and evaluates 65,536 rows at a time. Each configuration
trained in a pack on the device ends as it does alone on the device (same draws: the counter generator computes the
same words on any device). Skipped where no CUDA device is present; on a machine with one:
``python -m pytest tests/test_packs_cuda.py``."""

from __future__ import annotations

import pytest
import torch
from test_packs import MIXED, PER_METHOD, _assert_same, _three_classes
from test_packs import _runs as runs_on
from test_shared_batches import SHARED

from raco_bench.methods.lagrangian.engine import LagrangianEngine
from raco_bench.training.loop import execute
from raco_bench.training.pack import train_pack

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")


def _runs(ds, specs, **kwargs):
    return runs_on(ds, specs, eval_every=5, device="cuda", **kwargs)


def _same_on_cuda(ds, specs, **kwargs) -> None:
    runs = _runs(ds, specs, **kwargs)
    engine = LagrangianEngine(runs) if runs[0].method.name != "dp-fermi" else None
    assert engine is None or engine.data.X.device.type == "cuda"
    for res, run in zip(train_pack(runs), _runs(ds, specs, **kwargs)):
        _assert_same(res, execute(run), rtol=1e-4)


@pytest.mark.parametrize("constraint", ["demographic-parity", "equalized-odds"])
def test_a_mixed_raco_dp_pack_on_cuda_equals_its_runs_alone(adult, constraint):
    _same_on_cuda(adult, MIXED, constraint=constraint)


@pytest.mark.parametrize("method", list(PER_METHOD))
def test_every_lagrangian_method_packs_equivalently_on_cuda(adult, method):
    _same_on_cuda(adult, [(method, p, 0.05, T, seed) for (p, T, seed) in zip(PER_METHOD[method], (30, 17), (4, 5))])


@pytest.mark.parametrize("constraint", ["demographic-parity", "equalized-odds"])
def test_configurations_sharing_batches_on_cuda_equal_their_runs_alone(adult, constraint):
    _same_on_cuda(adult, SHARED, constraint=constraint, draws="shared")


def test_a_three_class_pack_on_cuda_equals_its_runs_alone(adult):
    _same_on_cuda(_three_classes(adult), SHARED, draws="shared")


@pytest.mark.parametrize("checkpoint", ["paper", "private"])
def test_checkpoint_rules_on_cuda_pick_what_a_run_alone_picks(adult, checkpoint):
    specs = [("raco-dp", dict(batch_size=512, lr=1.0), 0.05, 60, 7), ("raco-dp", dict(batch_size=1024, lr=0.5, dual_update="hard"), 0.02, 45, 8)]
    for res, run in zip(train_pack(_runs(adult, specs, checkpoint=checkpoint)), _runs(adult, specs, checkpoint=checkpoint)):
        alone = execute(run)
        _assert_same(res, alone, rtol=1e-4)
        assert res.reported["step"] == alone.reported["step"]


@pytest.mark.parametrize("privacy", ["full", "none"])
def test_dp_fermi_packs_equivalently_on_cuda(adult, privacy):
    specs = [("dp-fermi", dict(batch_size=256, privacy=privacy, fairness=2.0, lr=0.3, lr_w=0.8, clip_theta=0.5, clip_w=2.0, w_radius=1.0,
                               noise_multiplier=1.5), 0.05, 30, 0),
             ("dp-fermi", dict(batch_size=1024, privacy=privacy, fairness=0.5, noise_multiplier=3.0), 0.05, 18, 1)]
    _same_on_cuda(adult, specs)


def test_the_ahead_step_on_cuda_never_synchronises_with_the_host(adult):
    """Between two evaluations the step a device runs ahead on (the default on CUDA) makes no synchronising call: torch's
    sync debug mode raises on any (a value read back, a pageable copy, nonzero); the blocks of draws included (step 33)."""
    engine = LagrangianEngine(_runs(adult, [(m, p, g, 40, seed) for m, p, g, _, seed in MIXED[:3]]))  # none ends: no new live set
    assert engine.ahead is not None
    engine.step()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(35):
            engine.step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    engine.settle()
    assert engine.state.step == 36


def test_the_host_path_on_cuda_still_equals_its_runs_alone(adult):
    """The host path (ahead=False: chunks, shared-batch groups, read-backs), which DP-FERMI's engine still takes."""
    for res, run in zip(train_pack(_runs(adult, MIXED), ahead=False), _runs(adult, MIXED)):
        _assert_same(res, execute(run), rtol=1e-4)


def test_the_graphed_step_on_cuda_is_captured_and_equals_the_step_op_by_op(adult):
    """The default on CUDA replays the ahead step as a CUDA graph (docs/packs.md, "Graphed steps"): captured at the first
    step, again for the live set left once configurations finish (MIXED: T = 40, 25, 33, 1), in lanes of similar batch
    sizes, and computing what the same step launched op by op computes (up to the order of sums over padded slots)."""
    graphed = LagrangianEngine(_runs(adult, MIXED))
    assert graphed.ahead.graphed and graphed.ahead.capture
    first, lanes = [], []
    for _ in range(40):
        graphed.step()
        first.append(graphed.ahead.graph.graph is not None)
        lanes.append(len(graphed.ahead.lanes))
    graphed.settle()
    assert all(first) and graphed.ahead.active is not None  # a graph over the live ones at the end
    assert lanes[0] >= 2 and lanes[-1] == 1  # B = 256 and 512 in one lane, 1,024 and 2,048 in another; at the end one configuration
    plain = LagrangianEngine(_runs(adult, MIXED), graph=False)
    for _ in range(40):
        plain.step()
    plain.settle()
    for name in ("weight", "bias", "lam"):
        torch.testing.assert_close(getattr(graphed.state, name), getattr(plain.state, name), rtol=1e-4, atol=1e-5)
