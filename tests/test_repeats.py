"""Repeats of a study's protocol (docs/results.md, "Repeats"): repeat r resamples the train/validation split with the
test split fixed, searches afresh, and every trial of the sweep trains on that split; repeat 0 is the protocol as it
was before repeats existed (same rows, same sweep ids, same streams)."""

from __future__ import annotations

import numpy as np
import pytest

from raco_bench.data import load_dataset
from raco_bench.data.tabular import split_indices
from raco_bench.methods import get_method
from raco_bench.methods.space import sample_configs
from raco_bench.sweeps.plan import phase1_trials
from raco_bench.sweeps.spec import SweepSpec
from raco_bench.sweeps.trial import run_config
from raco_bench.training.config import NOT_IDENTITY, RunConfig, _signed_hash, batch_stream_id, stream_id
from raco_bench.training.loop import prepare_run


def test_a_resample_keeps_the_test_rows_and_redraws_train_and_validation_within_the_same_strata():
    rng = np.random.default_rng(0)
    y, g = rng.integers(0, 2, 4000), rng.integers(0, 3, 4000)
    base, again = split_indices(y, g, 0), split_indices(y, g, 0, validation_split=0)
    assert all(np.array_equal(base[k], again[k]) for k in base)
    one, two = split_indices(y, g, 0, validation_split=1), split_indices(y, g, 0, validation_split=2)
    for other in (one, two):
        assert np.array_equal(other["test"], base["test"])
        assert np.array_equal(np.sort(np.concatenate([other["train"], other["val"]])), np.sort(np.concatenate([base["train"], base["val"]])))
        assert not np.array_equal(other["val"], base["val"])
        strata = y * 3 + g
        assert np.array_equal(np.bincount(strata[other["val"]], minlength=6), np.bincount(strata[base["val"]], minlength=6))
    assert not np.array_equal(one["val"], two["val"])
    with pytest.raises(ValueError, match="validation_split"):
        split_indices(y, g, 0, validation_split=-1)


def test_repeat_zero_is_the_protocol_as_before_and_a_later_repeat_searches_and_splits_afresh():
    base = SweepSpec(dataset="adult", epsilons=(1.0,), gammas=(0.05,), methods=("raco-dp", "sgda"), n_configs=6, phase1_seeds=1)
    later = SweepSpec(dataset="adult", epsilons=(1.0,), gammas=(0.05,), methods=("raco-dp", "sgda"), n_configs=6, phase1_seeds=1, repeat=3)
    assert SweepSpec(**{**base.__dict__, "repeat": 0}).sweep_id == base.sweep_id and later.sweep_id != base.sweep_id
    assert base.search_seed == base.sample_seed and later.search_seed != base.search_seed
    t0, t3 = phase1_trials(base, 28829), phase1_trials(later, 28829)
    assert [t["params"] for t in t0][0] == [t["params"] for t in t3][0]  # configuration 0 is the defaults in every repeat
    assert [t["params"] for t in t0][1:] != [t["params"] for t in t3][1:]
    assert {t["validation_split"] for t in t3} == {3} and {t["validation_split"] for t in t0} == {0}
    cfg = run_config(t3[0], "cpu")
    assert cfg.validation_split == 3
    zero = run_config(t0[0], "cpu")
    before = {k: v for k, v in zero.to_dict().items() if k not in NOT_IDENTITY and k not in ("validation_split", "constraint_spec")}
    assert stream_id(zero, {}) == _signed_hash({**before, "hyperparameters": {}})  # split 0 (and no custom constraint) hashes as before the fields existed
    assert stream_id(cfg, {}) != stream_id(RunConfig(**{**cfg.__dict__, "validation_split": 0}), {})
    shared = dict(batch_draws="shared")
    assert batch_stream_id(RunConfig(**shared, validation_split=1), {}) != batch_stream_id(RunConfig(**shared), {})
    with pytest.raises(ValueError, match="repeat"):
        SweepSpec(dataset="adult", repeat=-1)


def test_a_run_trains_and_selects_on_its_repeat_split_and_refuses_a_dataset_of_another():
    ds1 = load_dataset("synthetic", validation_split=1)
    ds0 = load_dataset("synthetic")
    assert np.array_equal(ds1.test.X, ds0.test.X) and not np.array_equal(ds1.val.X, ds0.val.X)
    cfg = RunConfig(dataset="synthetic", method="sgda", steps=5, eval_every=5, validation_split=1)
    run = prepare_run(cfg)
    assert run.ctx.dataset.validation_split == 1 and np.array_equal(run.ctx.dataset.val.X, ds1.val.X)
    with pytest.raises(ValueError, match="train/validation split 0"):
        prepare_run(cfg, ds0)
    with pytest.raises(ValueError, match="validation_split"):
        RunConfig(validation_split=-2).validate()


def test_non_private_references_search_their_steps_like_the_private_methods():
    """SGDA and SGD search T log-uniformly over [50, the sweep's cap] whatever the step budget (docs/methods/sgda.md);
    configuration 0 keeps the defaults."""
    for name in ("sgda", "sgd"):
        for budget in ("noise", "steps"):
            configs = sample_configs(get_method(name), 40, 28829, 0, budget, 3000)
            steps = [c["default_steps"] for c in configs[1:]]
            assert "default_steps" not in configs[0] and all(50 <= t <= 3000 for t in steps) and min(steps) < 300 < 1500 < max(steps)
    assert "default_steps" not in sample_configs(get_method("raco-dp"), 5, 28829, 0)[1]


def test_stream_ids_are_those_of_the_code_before_runconfig_declared_its_roles():
    """Pinned from 156ad06 (before RunConfig's fields declared their roles): the same configurations give the same
    stream ids, so a resumed sweep's runs draw what they drew before."""
    hyper = {"batch_size": 256, "lr": 0.1}
    cases = [(RunConfig(), 3334208388823646379), (RunConfig(method="sgda", seed=3, gamma=0.1), 6211984715041687044),
             (RunConfig(validation_split=2), 4506372002913190555),
             (RunConfig(constraint_spec="|FNR(group=a) - FNR(group=b)| <= gamma", constraint="fnr-gap"), -4716065236593010593),
             (RunConfig(constraint_spec=""), 3334208388823646379)]
    assert [stream_id(cfg, hyper) for cfg, _ in cases] == [pinned for _, pinned in cases]
