"""Packs: a configuration trained inside a pack draws the same batches and noise and ends with the same result
as the same configuration trained alone (docs/packs.md, "Equivalence")."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from baselines.dp_fermi.engine import FermiEngine
from raco_bench.methods.lagrangian.engine import LagrangianEngine, pack_step, slot_bytes
from raco_bench.packs.rows import GatheredRows, IndexedRows
from raco_bench.packs.tensors import chunks
from raco_bench.privacy import counter_rng as rng
from raco_bench.privacy.counter_rng import Keystream
from raco_bench.training.config import RunConfig
from raco_bench.training.loop import execute, prepare_run
from raco_bench.training.pack import PackCheckpoint, pack_blocker, train_pack, train_runs

# a pack mixing batch sizes, noise levels, dual rules, targets, seeds and step counts
MIXED = [
    ("raco-dp", dict(batch_size=256, noise_multiplier=2.0, laplace_scale=1.0, clip_norm=0.5, temperature=2.0, lr=0.3, dual_lr=0.2), 0.05, 40, 0),
    ("raco-dp", dict(batch_size=1024, noise_multiplier=5.0, laplace_scale=4.0, clip_norm=2.0, lr=1.0, dual_update="hard"), 0.02, 25, 1),
    ("raco-dp", dict(batch_size=512, dual_momentum=0.5, lambda_max=2.0, clip_constraint_value=True, dual_lr=1.0), 0.10, 33, 2),
    ("raco-dp", dict(batch_size=2048, noise_multiplier=1.5, laplace_scale=0.5), 0.05, 1, 3),
]
PER_METHOD = {
    "sgda": [dict(batch_size=256, lr=0.2, dual_lr=0.3), dict(batch_size=1024, dual_update="hard", temperature=3.0)],
    "dp-sgd": [dict(batch_size=256, noise_multiplier=2.0, clip_norm=0.3), dict(batch_size=1024, noise_multiplier=6.0, lr=2.0)],
    "sgd": [dict(batch_size=256, lr=0.1), dict(batch_size=2048, lr=1.0)],
}


@pytest.fixture(params=[IndexedRows, GatheredRows], ids=["indexed", "gathered"])
def products(request):
    """Both ways of multiplying batch rows (raco_bench/packs/rows.py): each must give the runs' results alone."""
    return request.param


SOURCE = Keystream(bytes(range(32)))  # one secret key for the pack and the runs alone: a pack equals its runs alone under a key


def _runs(adult, specs, eval_every=10, checkpoint="last", constraint="demographic-parity", draws="own", device="cpu"):
    return [prepare_run(RunConfig(method=m, params=p, gamma=g, steps=T, seed=seed, epsilon=50.0, eval_every=eval_every, checkpoint=checkpoint,
                                  constraint=constraint, train_metrics=True, batch_draws=draws, device=device), adult, source=SOURCE)
            for m, p, g, T, seed in specs]


def _close(a: np.ndarray, b: np.ndarray, rtol: float) -> float:
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-12))


def _assert_same(pack, alone, rtol: float):
    assert pack.steps == alone.steps and pack.privacy == alone.privacy and pack.config == alone.config
    for name in alone.final_params:
        assert _close(pack.final_params[name], alone.final_params[name], rtol) <= rtol, name
    assert [e["step"] for e in pack.history] == [e["step"] for e in alone.history]
    for e_pack, e_alone in zip(pack.history, alone.history):
        for split in ("train", "val", "test"):
            for key in ("accuracy", "max_constraint", "dp_gap", "eo_gap"):
                # metrics are counts over ≥ 5,088 rows: one prediction flipped by round-off moves them by ≤ 2e-4
                assert e_pack[split][key] == pytest.approx(e_alone[split][key], abs=5e-4), (e_pack["step"], split, key)
        for key in ("lambda_max", "noisy_constraint_max", "batch_constraint_max_nonprivate"):
            if key in e_alone:
                assert e_pack[key] == pytest.approx(e_alone[key], rel=100 * rtol, abs=1e-5), (e_pack["step"], key)
    assert pack.reported["step"] == alone.reported["step"]


def test_one_step_in_a_pack_equals_one_step_alone(adult, products):
    """After one step every parameter agrees to 1e-5 relative: the same batch, the same noise, only the order of
    floating-point sums differs."""
    specs = [(m, dict(p), g, 1, seed) for m, p, g, _, seed in MIXED]
    runs = _runs(adult, specs)
    assert LagrangianEngine(runs).data.few_parts  # demographic parity, two groups: the one-hot product path
    pack = train_pack(runs, products=products)
    for res, run in zip(pack, _runs(adult, specs)):
        alone = execute(run)
        for name in alone.final_params:
            assert _close(res.final_params[name], alone.final_params[name], 1e-5) <= 1e-5


def test_a_mixed_raco_dp_pack_equals_its_runs_alone(adult, products):
    """After up to 40 steps the parameters agree to 1e-4 relative: float32 round-off (~1e-7 per operation) is
    carried by the iterates, but the batches and noise are identical, so the trajectories cannot drift apart."""
    runs = _runs(adult, MIXED)
    pack = train_pack(runs, products=products)
    for res, run in zip(pack, _runs(adult, MIXED)):
        _assert_same(res, execute(run), rtol=1e-4)
    frozen = pack[3]  # T = 1 inside a pack that runs 40 steps: it stopped changing after its own T
    assert frozen.steps == 1 and [e["step"] for e in frozen.history] == [1]


def test_equalized_odds_packs_equivalently(adult, products):
    """Equalized odds has four parts (label × group): the histogram is a scatter by part index, where
    demographic parity's two parts use a product with the part one-hot (raco_bench/methods/lagrangian/engine.py)."""
    specs = [(m, p, g, T, seed) for m, p, g, T, seed in MIXED[:3]]
    runs = _runs(adult, specs, constraint="equalized-odds")
    assert not LagrangianEngine(runs).data.few_parts
    for res, run in zip(train_pack(runs, products=products), _runs(adult, specs, constraint="equalized-odds")):
        _assert_same(res, execute(run), rtol=1e-4)


SHARED_CHUNK = [  # batch sizes within 1.25× of each other: one chunk, so the shorter batches carry padding slots
    ("raco-dp", dict(batch_size=500, noise_multiplier=2.0, laplace_scale=1.0, lr=0.5, dual_lr=0.5), 0.02, 12, 10),
    ("raco-dp", dict(batch_size=520, noise_multiplier=4.0, laplace_scale=2.0, dual_update="hard", dual_lr=1.0), 0.02, 12, 11),
    ("raco-dp", dict(batch_size=540, noise_multiplier=1.0, laplace_scale=0.5, temperature=2.0), 0.05, 9, 12),
]


@pytest.mark.parametrize("constraint", ["demographic-parity", "equalized-odds"])
def test_configurations_sharing_a_chunk_equal_their_runs_alone(adult, products, constraint):
    """Padding slots (a shorter batch inside its chunk's width) must count in no histogram cell and no gradient:
    both histogram paths (one-hot product for two parts, scatter for four) and both row products."""
    runs = _runs(adult, SHARED_CHUNK, constraint=constraint)
    for res, run in zip(train_pack(runs, products=products), _runs(adult, SHARED_CHUNK, constraint=constraint)):
        _assert_same(res, execute(run), rtol=1e-4)


def _three_classes(adult):
    """Adult relabelled into three classes (the label plus whether age is above its median): every dataset of the
    catalog is binary, and the pack step has a general path for more classes beside its two-class one."""
    from raco_bench.data.tabular import Split

    cut = float(np.median(adult.train.X[:, 0]))
    relabel = lambda s: Split(s.X, s.y + (s.X[:, 0] > cut).astype(np.int64), s.group)  # noqa: E731
    return dataclasses.replace(adult, name="adult-three-classes", train=relabel(adult.train), val=relabel(adult.val), test=relabel(adult.test),
                               class_names=("low", "middle", "high"))


@pytest.mark.parametrize("constraint", ["demographic-parity", "equalized-odds"])
def test_a_three_class_pack_equals_its_runs_alone(adult, products, constraint):
    """The general (c-class) step and evaluation: softmax over classes, per-class histograms and coefficients."""
    three = _three_classes(adult)
    for specs in (MIXED[:3], [("dp-sgd", p, 0.05, 20, seed) for p, seed in zip(PER_METHOD["dp-sgd"], (4, 5))]):
        runs = _runs(three, specs, constraint=constraint)
        assert LagrangianEngine(runs).data.n_classes == 3
        for res, run in zip(train_pack(runs, products=products), _runs(three, specs, constraint=constraint)):
            _assert_same(res, execute(run), rtol=1e-4)


@pytest.mark.parametrize("method", list(PER_METHOD))
def test_every_lagrangian_method_packs_equivalently(adult, method, products):
    specs = [(method, p, 0.05, T, seed) for (p, T, seed) in zip(PER_METHOD[method], (30, 17), (4, 5))]
    for res, run in zip(train_pack(_runs(adult, specs), products=products), _runs(adult, specs)):
        _assert_same(res, execute(run), rtol=1e-4)


@pytest.mark.parametrize("checkpoint", ["paper", "private"])
def test_checkpoint_rules_pick_the_same_checkpoint_in_a_pack(adult, checkpoint):
    specs = [("raco-dp", dict(batch_size=512, lr=1.0), 0.05, 60, 7), ("raco-dp", dict(batch_size=1024, lr=0.5, dual_update="hard"), 0.02, 45, 8)]
    for res, run in zip(train_pack(_runs(adult, specs, eval_every=5, checkpoint=checkpoint)), _runs(adult, specs, eval_every=5, checkpoint=checkpoint)):
        alone = execute(run)
        _assert_same(res, alone, rtol=1e-4)
        assert res.reported["rule"] == checkpoint and res.reported["step"] == alone.reported["step"]
        for name in alone.reported_params:
            assert _close(res.reported_params[name], alone.reported_params[name], 1e-4) <= 1e-4
        if checkpoint == "private":
            assert [r["step"] for r in res.selection_releases] == [r["step"] for r in alone.selection_releases]
            for a, b in zip(res.selection_releases, alone.selection_releases):
                torch.testing.assert_close(a["noisy_counts"], b["noisy_counts"], rtol=0, atol=2.0)  # same Laplace draws, counts ±1 row
        # the loss metrics exist exactly where an entry can be reported: the last step, the private checkpoints, the paper
        # rule's improvements; the same entries in a pack and alone, and every reported split has them
        with_losses = [e["step"] for e in res.history if "worst_group_loss" in e["val"]]
        assert with_losses == [e["step"] for e in alone.history if "worst_group_loss" in e["val"]]
        assert res.steps in with_losses and len(with_losses) < len(res.history)
        for split in ("train", "val", "test"):
            assert {"group_losses", "worst_group_loss", "max_soft_constraint"} <= set(res.reported[split]) and "worst_group_loss" in res.last[split]
            assert res.reported[split]["worst_group_loss"] == pytest.approx(alone.reported[split]["worst_group_loss"], rel=1e-3)


@pytest.mark.parametrize("privacy,constraint", [("full", "demographic-parity"), ("none", "demographic-parity"), ("full", "equalized-odds")])
def test_dp_fermi_packs_equivalently(adult, privacy, constraint, products):
    """Demographic parity (one context, two groups) and equalized odds (a context per label: four cells of W)."""
    # σ given (calibrating it for ε = 50 by PLD takes ~30 s; calibration is tested with the plugin, tests/test_baselines.py)
    specs = [("dp-fermi", dict(batch_size=256, privacy=privacy, fairness=2.0, lr=0.3, lr_w=0.8, clip_theta=0.5, clip_w=2.0, w_radius=1.0,
                               noise_multiplier=1.5), 0.05, 30, 0),
             ("dp-fermi", dict(batch_size=1024, privacy=privacy, fairness=0.5, noise_multiplier=3.0), 0.05, 18, 1)]
    _same_fermi_pack(adult, specs, constraint, products)


@pytest.mark.parametrize("constraint", ["demographic-parity", "equalized-odds"])
def test_a_three_class_dp_fermi_pack_equals_its_runs_alone(adult, constraint, products):
    """DP-FERMI's general (c-class) step: softmax over classes, per-cell coefficients for each class (the two-class
    step works on the margin)."""
    specs = [("dp-fermi", dict(batch_size=512, privacy="full", fairness=2.0, lr=0.3, clip_theta=0.5, noise_multiplier=1.5), 0.05, 20, 2)]
    _same_fermi_pack(_three_classes(adult), specs, constraint, products)


def _same_fermi_pack(dataset, specs, constraint, products):
    runs = _runs(dataset, specs, constraint=constraint)
    engine = FermiEngine(runs)  # W: contexts × groups, a context per label under equalized odds
    assert tuple(engine.state.W.shape[1:3]) == ((engine.data.n_classes if constraint == "equalized-odds" else 1), 2)
    for res, run in zip(train_pack(runs, products=products), _runs(dataset, specs, constraint=constraint)):
        alone = execute(run)
        _assert_same(res, alone, rtol=1e-4)
        assert [e["w_norm"] for e in res.history] == pytest.approx([e["w_norm"] for e in alone.history], rel=1e-4)


def test_runs_without_a_batched_engine_train_alone_in_the_same_call(adult):
    specs = [("raco-dp", dict(batch_size=512, model="mlp", hidden=8), 0.05, 12, 0), ("raco-dp", dict(batch_size=512), 0.05, 12, 0),
             ("dp-fermi", dict(batch_size=256, noise_multiplier=3.0), 0.05, 12, 1), ("raco-dp", dict(batch_size=256), 0.05, 12, 1)]
    # DP-FERMI at a given σ: no calibration (σ for ε = 50 by PLD takes ~40 s and is not what this test is about)
    runs = _runs(adult, specs)
    assert pack_blocker(runs[0]) is not None and pack_blocker(runs[1]) is None
    results = train_runs(runs)
    fresh = _runs(adult, specs)
    _assert_same(results[0], execute(fresh[0]), rtol=0)  # the MLP trains alone: bit for bit
    for i in (1, 2, 3):  # two packs (raco-dp, dp-fermi), each in its own engine
        _assert_same(results[i], execute(fresh[i]), rtol=1e-4)
    with pytest.raises(ValueError, match="cannot join a pack"):
        train_pack(runs)
    with pytest.raises(ValueError, match="one method"):
        train_pack([runs[1], runs[2]])


def test_chunks_bound_padding_and_memory_and_keep_every_configuration_once():
    widths = [1000, 260, 4100, 1100, 250, 2000, 1240, 0, 4000]
    groups = chunks(widths, per_slot=8, budget=10**9)
    assert sorted(k for g in groups for k in g) == list(range(len(widths)))
    for g in groups:  # padded to the widest: at most 1.25 × the narrowest + 64 rows
        assert max(widths[k] for k in g) <= 1.25 * min(widths[k] for k in g) + 64
    assert [sorted(g) for g in groups] == [[7], [1, 4], [0, 3, 6], [5], [2, 8]]
    small = chunks([1000] * 10, per_slot=8, budget=3 * 1000 * 8)  # three configurations' arrays per chunk
    assert [len(g) for g in small] == [3, 3, 3, 1]


@pytest.mark.parametrize("products", [IndexedRows, GatheredRows], ids=["indexed", "gathered"])
def test_a_step_does_not_depend_on_how_the_pack_is_chunked(adult, products):
    """One chunk of four configurations and two chunks of two give the same state (same draws, same sums), for
    configurations whose settings all differ."""
    settings = [dict(noise_multiplier=2.0, laplace_scale=1.0, lr=0.5, dual_lr=0.5), dict(noise_multiplier=4.0, laplace_scale=3.0, dual_update="hard"),
                dict(noise_multiplier=1.0, laplace_scale=0.5, temperature=2.0, clip_norm=0.3), dict(noise_multiplier=3.0, dual_momentum=0.5, lr=2.0)]
    specs = [("raco-dp", dict(batch_size=512, **p), 0.02 * (seed + 1), 8, seed) for seed, p in enumerate(settings)]
    engine = LagrangianEngine(_runs(adult, specs), products)
    two_per_chunk = 2 * 700 * slot_bytes(engine.data, products)  # batches of 512 ± 3σ rows: two fit, three do not
    one, two = engine.state, engine.state
    for _ in range(8):
        one = pack_step(one, engine.data, engine.settings, engine.rates, products)
        two = pack_step(two, engine.data, engine.settings, engine.rates, products, budget=two_per_chunk)
    for name in ("weight", "bias", "lam", "estimates"):
        torch.testing.assert_close(getattr(one, name), getattr(two, name), rtol=1e-5, atol=1e-7)
    assert bool((one.estimates != 0).all())  # the histogram path ran for every configuration


class _Killed(Exception):
    """The pack's worker dying between two checkpoints."""


def test_a_pack_resumed_from_its_checkpoint_ends_exactly_as_an_uninterrupted_one(adult):
    """train_runs saves the pack's state (engine tensors, step, recorders, finished results); a second attempt
    restored from the last save trains only the rest, and every draw is a function of (stream, step), so the results
    are bit for bit those of an uninterrupted pack. Mixed with a run that trains alone (no batched engine), whose
    finished result is kept by the checkpoint."""
    specs = MIXED[:3] + [("raco-dp", dict(batch_size=512, model="mlp", hidden=8), 0.05, 12, 0)]
    whole = train_runs(_runs(adult, specs, eval_every=7, checkpoint="private"))
    saves = []

    def save(state):
        saves.append(torch.save(state, __import__("io").BytesIO()) or state)  # the state must be serialisable
        if len(saves) == 3:
            raise _Killed

    with pytest.raises(_Killed):
        train_runs(_runs(adult, specs, eval_every=7, checkpoint="private"), checkpoint=PackCheckpoint(save, None, every_s=0.0))
    state = saves[-1]
    assert state["pack"]["state"]["step"] >= 1 and 3 in state["results"]  # the MLP run alone finished first
    seen = []
    resumed = train_runs(_runs(adult, specs, eval_every=7, checkpoint="private"), progress=lambda k, e: seen.append((k, e["step"])),
                         checkpoint=PackCheckpoint(lambda s: None, state, every_s=0.0))
    for a, b in zip(resumed, whole):
        assert a.config == b.config and a.steps == b.steps and a.reported == b.reported and a.history == b.history
        for name in b.final_params:
            np.testing.assert_array_equal(a.final_params[name], b.final_params[name])
            np.testing.assert_array_equal(a.reported_params[name], b.reported_params[name])
    assert (0, 7) in seen  # the restored evaluations are replayed to the live curves (points already stored are skipped there)


def test_only_the_live_configurations_hold_noise_drawn_ahead(adult, monkeypatch):
    """A pack whose configurations finish at different T steps a shrinking live set (one restricted settings per set);
    a new live set takes over the blocks drawn ahead (raco_bench/packs/draws.py) for its configurations and the
    earlier set's are dropped, so a pack holds one set's blocks at a time and draws no step's batches or noise twice."""
    drawn = []  # (purpose, step, key) of every stream drawn: batches, Gaussian and Laplace noise
    for name in ("poisson_rows", "normal", "laplace"):
        real = getattr(rng, name)

        def counting(keys, *args, real=real):
            drawn.extend(zip(((keys.tag >> 32) & 255).flatten().tolist(), (keys.tag >> 40).flatten().tolist(), keys.key.flatten().tolist()))
            return real(keys, *args)

        monkeypatch.setattr(rng, name, counting)
    engine = LagrangianEngine(_runs(adult, MIXED))  # T = 40, 25, 33 and 1
    drawn.clear()  # the initial parameters' draws
    for _ in range(40):
        engine.step()
    settings = [engine.settings, *engine.settings._subsets.values()]
    assert len(settings) == 4  # the whole pack, then the live sets after T = 1, 25 and 33
    holding = [s for s in settings if any(a.block is not None for a in s._ahead.values())]
    assert len(holding) == 1 and holding[0] is settings[-1]
    assert len(drawn) == len(set(drawn)) and {p for p, _, _ in drawn} == {rng.BATCH, rng.GAUSSIAN, rng.LAPLACE}
