"""Shared batch draws (docs/packs.md, "Shared batches"): configurations with the same seed draw their Poisson batches from
one stream, and a pack computes the configurations that drew the same batch as dense products.

The contract is unchanged: a configuration trained in a pack ends as it does alone (same draws, up to reduction order).
Each configuration's batch is still Poisson with its own rate, independent across rows and steps, so its own ε is the
same; runs that share draws are not independent of each other, so accounted tuning and the white-box audit keep their
own draws."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from test_packs import _assert_same, _three_classes
from test_packs import _runs as runs_in_packs

from baselines.dp_fermi.engine import FermiEngine, fermi_release, shared_parts
from raco_bench.methods.lagrangian import engine as lagrangian
from raco_bench.methods.lagrangian.engine import LagrangianEngine, StepNoise
from raco_bench.packs.draws import distinct_batches
from raco_bench.packs.rows import GatheredRows, IndexedRows
from raco_bench.packs.tensors import take_rows
from raco_bench.privacy import counter_rng as rng
from raco_bench.sweeps.spec import SweepSpec
from raco_bench.training.config import RunConfig, batch_stream_id, stream_id
from raco_bench.training.loop import execute
from raco_bench.training.pack import train_pack

# two seeds; seed 7 has three configurations at one batch size (one shared batch) and one at another; every other
# setting differs, T included. Keep the settings of a group's members different (σ, s_L, C, τ, the dual rule): a bug that
# reads one member's setting for its whole group then breaks the equivalence below.
SHARED = [
    ("raco-dp", dict(batch_size=512, noise_multiplier=2.0, laplace_scale=1.0, lr=0.5, dual_lr=0.5), 0.02, 14, 7),
    ("raco-dp", dict(batch_size=512, noise_multiplier=4.0, laplace_scale=2.0, dual_update="hard", dual_lr=1.0), 0.05, 9, 7),
    ("raco-dp", dict(batch_size=512, noise_multiplier=1.0, laplace_scale=0.5, temperature=2.0, clip_norm=0.3), 0.05, 14, 7),
    ("raco-dp", dict(batch_size=1024, noise_multiplier=3.0, laplace_scale=1.0), 0.05, 11, 7),
    ("raco-dp", dict(batch_size=512, noise_multiplier=2.5, laplace_scale=1.5, lr=0.2), 0.05, 14, 8),
    ("raco-dp", dict(batch_size=512, noise_multiplier=6.0, laplace_scale=3.0), 0.10, 12, 8),
]


def _runs(adult, specs, constraint="demographic-parity", draws="shared", method=None):
    return runs_in_packs(adult, [(method or m, p, g, T, seed) for m, p, g, T, seed in specs], eval_every=5, constraint=constraint, draws=draws)


@pytest.mark.parametrize("constraint", ["demographic-parity", "equalized-odds"])
@pytest.mark.parametrize("products", [IndexedRows, GatheredRows], ids=["indexed", "gathered"])
def test_configurations_that_share_batches_equal_their_runs_alone(adult, constraint, products):
    """Three configurations share one batch, two another (dense products); one stands alone (the other row products)."""
    runs = _runs(adult, SHARED, constraint)
    engine = LagrangianEngine(runs)
    shared, alone = engine.settings.shared_groups
    assert sorted(map(sorted, shared)) == [[0, 1, 2], [4, 5]] and alone == [3]
    for res, run in zip(train_pack(runs, products=products), _runs(adult, SHARED, constraint)):
        _assert_same(res, execute(run), rtol=1e-4)


@pytest.mark.parametrize("constraint", ["demographic-parity", "equalized-odds"])
def test_three_class_configurations_that_share_batches_equal_their_runs_alone(adult, constraint):
    """The general (c-class) step on groups of configurations that share a batch (G × k × M arrays, k > 1)."""
    three = _three_classes(adult)
    runs = _runs(three, SHARED, constraint)
    assert LagrangianEngine(runs).data.n_classes == 3
    for res, run in zip(train_pack(runs), _runs(three, SHARED, constraint)):
        _assert_same(res, execute(run), rtol=1e-4)


@pytest.mark.parametrize("group", [3, 1], ids=["one group of three", "each alone"])
def test_each_configuration_of_a_shared_batch_clips_to_its_own_norm(adult, group):
    """With one valid row in the batch and no Gaussian noise, a configuration's released gradient (weight and bias) is
    that row's clipped gradient: its norm is the configuration's own C wherever C binds, whether the configurations are
    computed as one group sharing the batch or each alone. Two-class models clip r₀ ⊗ [x; 1] and −r₀ ⊗ [x; 1] together."""
    engine = LagrangianEngine(_runs(adult, SHARED[:3]))
    clip = torch.tensor([1e-3, 2e-3, 5e-4])
    s = dataclasses.replace(engine.settings, noise_std=torch.zeros(3), clip_norm=clip)
    noise = StepNoise.draw(s, engine.data, 1)
    one_row = dataclasses.replace(noise, valid=torch.zeros_like(noise.valid).index_fill_(1, torch.tensor([0]), True))
    norms = []
    for idx in ([torch.arange(3)] if group == 3 else [torch.tensor([k]) for k in range(3)]):
        grad_w, grad_b, _, _ = lagrangian._gradients(idx, 1, engine.state, engine.data, s, engine.rates, one_row, IndexedRows, group)
        norms += torch.cat([grad_w.flatten(1), grad_b], 1).norm(dim=1).tolist()
    assert norms == pytest.approx(clip.tolist(), rel=1e-5)


@pytest.mark.parametrize("method", ["dp-sgd", "sgda", "sgd"])
def test_every_lagrangian_method_shares_batches_equivalently(adult, method):
    specs = [(method, {"batch_size": p["batch_size"], "lr": p.get("lr", 0.5)}, g, T, seed) for _, p, g, T, seed in SHARED]
    for res, run in zip(train_pack(_runs(adult, specs)), _runs(adult, specs)):
        _assert_same(res, execute(run), rtol=1e-4)


def test_dp_fermi_draws_shared_batches_alone_and_in_a_pack(adult):
    """Two groups of configurations that share a batch (three and two: the smaller one padded by repeating a member),
    beside one of another batch size (a step draws each distinct batch once, multiplies each group with its rows
    together, and the configuration alone on its own)."""
    specs = [("dp-fermi", {"batch_size": b, "lr": lr, "noise_multiplier": 2.0}, 0.05, 8, seed)
             for lr, b, seed in ((0.1, 512, 7), (0.2, 512, 8), (0.3, 512, 7), (0.4, 640, 7), (0.5, 512, 8), (0.6, 512, 7))]
    runs = _runs(adult, specs)
    assert runs[0].ctx.batch_seed == runs[2].ctx.batch_seed == runs[5].ctx.batch_seed != runs[1].ctx.batch_seed
    assert runs[3].ctx.batch_seed not in (runs[0].ctx.batch_seed, runs[1].ctx.batch_seed)  # another batch size: its own stream
    assert runs[0].ctx.batch_seed != runs[0].ctx.stream_id
    settings = FermiEngine(runs).settings
    parts = shared_parts(distinct_batches(settings.batch_seeds, settings.sampling_rate)[1].tolist())
    assert [k for _, k in parts] == [3, 1] and parts[1][0] == [3] and sorted(set(parts[0][0])) == [0, 1, 2, 4, 5] and len(parts[0][0]) == 6
    for res, run in zip(train_pack(runs), _runs(adult, specs)):
        alone = execute(run)
        _assert_same(res, alone, rtol=1e-4)
        assert [e["w_norm"] for e in res.history] == pytest.approx([e["w_norm"] for e in alone.history], rel=1e-4)


@pytest.mark.parametrize("classes,constraint,privacy", [(2, "demographic-parity", "full"), (2, "equalized-odds", "full"),
                                                        (2, "demographic-parity", "none"), (3, "equalized-odds", "full")])
@pytest.mark.parametrize("products", [IndexedRows, GatheredRows], ids=["indexed", "gathered"])
def test_a_dp_fermi_step_with_shared_batches_releases_what_each_configuration_releases_alone(adult, classes, constraint, privacy, products):
    """One step's release, tensor by tensor (θ's noisy sums and W's), of a pack mixing two groups that share a batch
    (one padded) and a configuration alone, against each configuration's release computed on its own (its own batch,
    its own noise, no sharing), after three steps so that W is not at its start."""
    data = _three_classes(adult) if classes == 3 else adult
    specs = [("dp-fermi", {"batch_size": b, "lr": lr, "lr_w": 0.5, "fairness": 2.0, "noise_multiplier": 2.0, "privacy": privacy}, 0.05, 8, seed)
             for lr, b, seed in ((0.1, 512, 7), (0.2, 512, 8), (0.3, 512, 7), (0.4, 640, 7), (0.5, 512, 8))]
    engine = FermiEngine(_runs(data, specs, constraint=constraint), products)
    for _ in range(3):
        engine.step()
    args = (engine.data, engine.ctx_ids, engine.groups)
    together = fermi_release(engine.state, *args, engine.settings, products)
    for k in range(len(specs)):
        one = torch.tensor([k])
        alone = fermi_release(take_rows(engine.state, one), *args, take_rows(engine.settings, one), products)
        for name in ("grad_w", "grad_b", "grad_W"):  # float32 sums over a batch of ~500 rows in another order: 2e-5 of the largest
            reference = getattr(alone, name)[0]
            torch.testing.assert_close(getattr(together, name)[k], reference, rtol=1e-5, atol=max(1e-4, 2e-5 * float(reference.abs().max())),
                                       msg=f"{name} of {k}")


def test_the_batch_stream_is_shared_by_seed_and_batch_size_and_nothing_else_and_own_by_default():
    base = RunConfig(seed=3, params={"batch_size": 512})
    other = dataclasses.replace(base, method="dp-fermi", params={"batch_size": 512, "lr": 0.1}, gamma=0.1, epsilon=3.0)
    own = [stream_id(c, c.params) for c in (base, other)]
    assert own[0] != own[1]
    assert [batch_stream_id(c, c.params) for c in (base, other)] == [None, None]  # the default: each run its own batches (its stream)
    shared = [dataclasses.replace(c, batch_draws="shared") for c in (base, other)]
    ids = [batch_stream_id(c, c.params) for c in shared]
    assert ids[0] == ids[1] and ids[0] not in own  # another method, ε, γ and learning rate: the same batches
    assert batch_stream_id(dataclasses.replace(shared[0], seed=4), base.params) != ids[0]
    assert batch_stream_id(dataclasses.replace(shared[0], split_seed=1), base.params) != ids[0]
    # another expected batch size (another q): another stream, so that runs at two rates are independent (docs/privacy.md)
    assert batch_stream_id(shared[0], {"batch_size": 1024}) != ids[0]
    assert stream_id(shared[0], base.params) == own[0]  # the noise streams stay the run's own
    with pytest.raises(ValueError, match="batch_draws"):
        dataclasses.replace(base, batch_draws="pooled").validate()


def test_each_shared_batch_is_poisson_with_its_own_rate_independent_across_rows_and_steps():
    """Two rates drawn from one shared batch stream: each row is in configuration k's batch with probability q_k, and
    inclusions are uncorrelated across rows and across steps, whatever the other configuration's rate (z-scores
    below 5 over 20,000 steps × 300 rows)."""
    n, steps, qs = 300, 20_000, torch.tensor([0.05, 0.2], dtype=torch.float64)
    shared = torch.full((2,), 12345, dtype=torch.int64)
    incl = np.zeros((2, steps, n), dtype=np.float64)
    for t in range(1, steps + 1):
        rows, valid = rng.poisson_rows(rng.stream_keys(shared, t, rng.BATCH), n, qs)
        for k in range(2):
            incl[k, t - 1, rows[k][valid[k]].numpy()] = 1.0
    for k, q in enumerate(qs.tolist()):
        x = incl[k]
        se = np.sqrt(q * (1 - q) / steps)
        assert np.abs((x.mean(0) - q) / se).max() < 5.0  # every row at its own rate
        centred = x - q
        pair_se = q * (1 - q) / np.sqrt(steps * (n - 1))
        assert abs((centred[:, 1:] * centred[:, :-1]).mean() / pair_se) < 5.0  # neighbouring rows
        step_se = q * (1 - q) / np.sqrt((steps - 1) * n)
        assert abs((centred[1:] * centred[:-1]).mean() / step_se) < 5.0  # consecutive steps
    # and alone: a run's own stream with the shared seed draws exactly configuration k's batch
    alone = rng.Stream(999, batch_seed=12345).batch(17, n, 0.2)
    rows, valid = rng.poisson_rows(rng.stream_keys(shared, 17, rng.BATCH), n, qs)
    assert torch.equal(alone, rows[1][valid[1]])


def test_accounted_tuning_and_the_audit_keep_independent_draws():
    accounted = SweepSpec(dataset="adult", tuning="accounted", checkpoint="private")
    assert accounted.draws == "own" and SweepSpec(dataset="adult").draws == "shared"
    with pytest.raises(ValueError, match="independent runs"):
        SweepSpec(dataset="adult", tuning="accounted", checkpoint="private", batch_draws="shared")
    from raco_bench.methods.audit_view import AuditView

    @dataclasses.dataclass(frozen=True)
    class Settings:  # an engine's K = 1 settings, as a view holds them
        seeds: torch.Tensor
        batch_seeds: torch.Tensor
        lr: torch.Tensor

    view = AuditView(release=None, apply=None, noise={}, bound={}, state=None, worlds={}, expected_batch=1.0,
                     settings=Settings(torch.tensor([1]), torch.tensor([99]), torch.tensor([0.1])))
    seeds = torch.arange(5, dtype=torch.int64)
    many = view.repeated(seeds)
    assert torch.equal(many.batch_seeds, seeds) and torch.equal(many.seeds, seeds)  # every audited run its own batches


def test_a_live_set_that_takes_over_blocks_draws_what_it_would_draw_fresh(adult):
    """The take-over's index mapping (PackSettings.restricted): a live set, in an order unlike the pack's, that takes over
    the blocks drawn for the whole pack reads, at every later step of the block, each configuration's own batch rows and
    noise, the same as settings restricted to it that draw everything afresh; the batches are not drawn again."""
    from raco_bench.packs.tensors import take_rows

    engine = LagrangianEngine(_runs(adult, SHARED))
    s, data = engine.settings, engine.data
    StepNoise.draw(s, data, 1)  # the whole pack's blocks, drawn at step 1
    live = torch.tensor([5, 1, 4, 0])  # seed 8's and seed 7's batches at B = 512, in a new order; seed 7's at B = 1024 finished
    taken, fresh = s.restricted(live), take_rows(s, live)
    assert taken.batches(data.n).first == 1 and len(taken.batch_draws[0]) < len(s.batch_draws[0])
    for t in range(2, 6):
        a, b = StepNoise.draw(taken, data, t), StepNoise.draw(fresh, data, t)
        assert a.widths == b.widths and torch.equal(a.laplace, b.laplace) and torch.equal(a.gaussian, b.gaussian)
        for k in range(len(live)):
            rows_a, valid_a = a.batch_rows(torch.tensor([k]), a.widths[k])
            rows_b, valid_b = b.batch_rows(torch.tensor([k]), b.widths[k])
            assert torch.equal(rows_a, rows_b) and bool(valid_a.all()), (t, k)
    assert taken.batches(data.n).first == 1  # still the block the whole pack drew
