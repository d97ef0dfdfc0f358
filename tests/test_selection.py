"""Private checkpoint selection: its release (noise scale, sensitivity), its accounting and the loop's rule."""

from __future__ import annotations

import math

import dp_accounting as dpa
import numpy as np
import pytest
import torch

from raco_bench.constraints import demographic_parity
from raco_bench.privacy.accounting import SelectionRelease, StepMechanism, epsilon, max_steps
from raco_bench.privacy.counter_rng import Keystream, Stream
from raco_bench.training.evaluation import EvalSplit
from raco_bench.training.selection import PrivateSelector, selection_steps, validation_counts


def _split(n=600, groups=20, seed=0):
    gen = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 2, (n,), generator=gen)
    g = torch.randint(0, groups, (n,), generator=gen)
    problem = demographic_parity(groups, 2, 0.05)
    parts = torch.as_tensor(problem.partition.assign(y.numpy(), g.numpy()))
    return EvalSplit(torch.zeros(n, 1), y, g, parts), problem.compile(dtype=torch.float64)


def test_selection_counts_have_l1_sensitivity_one():
    split, rates = _split()
    logits = torch.randn(len(split.y), 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    full = validation_counts(logits, split, rates.n_parts, 2)
    assert float(full.sum()) == len(split.y)
    for i in (0, 17, 599):
        keep = torch.arange(len(split.y)) != i
        less = EvalSplit(split.X[keep], split.y[keep], split.group[keep], split.parts[keep])
        assert float((full - validation_counts(logits[keep], less, rates.n_parts, 2)).abs().sum()) == 1.0


def test_selection_noise_is_laplace_with_the_stated_scale():
    """Through PrivateSelector.observe: released − exact counts have E|·| = b within 1 % (160,000 cells)."""
    split, rates = _split()
    logits = torch.randn(len(split.y), 2, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    exact = validation_counts(logits, split, rates.n_parts, 2)
    selector = PrivateSelector.for_run(SelectionRelease(7.5, 1), rates, Stream(3, "cpu", Keystream(bytes(32))))
    for t in range(2000):
        selector.observe(t, logits, split)
    noise = torch.stack([e["noisy_counts"] for e in selector.releases]) - exact
    assert float(noise.abs().mean()) == pytest.approx(7.5, rel=0.01)
    assert abs(float(noise.mean())) < 5 * math.sqrt(2) * 7.5 / math.sqrt(noise.numel())


def test_selection_is_composed_into_the_accounted_epsilon():
    """ε of training + K selection releases equals dp-accounting's event composition, and calibration keeps it in budget."""
    mech, sel, T, delta = StepMechanism(0.02, 1.1, None), SelectionRelease(40.0, 6), 700, 1e-5
    acc = dpa.pld.PLDAccountant(dpa.NeighboringRelation.ADD_OR_REMOVE_ONE, value_discretization_interval=1e-4)
    acc.compose(dpa.ComposedDpEvent([dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.02, dpa.GaussianDpEvent(1.1)), T),
                                     dpa.SelfComposedDpEvent(dpa.LaplaceDpEvent(40.0), 6)]))
    assert epsilon(mech, T, delta, sel) == pytest.approx(acc.get_epsilon(delta), rel=1e-3)
    assert epsilon(mech, T, delta, sel) > epsilon(mech, T, delta)
    T_sel = max_steps(mech, 1.0, delta, 10_000, sel)
    assert T_sel < max_steps(mech, 1.0, delta, 10_000) and epsilon(mech, T_sel, delta, sel) <= 1.0 < epsilon(mech, T_sel + 1, delta, sel)
    with pytest.raises(ValueError, match="selection noise"):
        SelectionRelease(0.0, 3)


def test_selection_steps_are_evenly_spaced_and_end_at_T():
    assert selection_steps(100, 5) == [20, 40, 60, 80, 100]
    assert selection_steps(3, 5) == [1, 2, 3]


def test_private_checkpoint_rule_in_a_run(adult):
    from raco_bench.training.config import RunConfig
    from raco_bench.training.loop import train

    cfg = RunConfig(method="raco-dp", checkpoint="private", selection_noise=30.0, selection_checkpoints=4, eval_every=1000)
    result = train(cfg, adult)
    p = result.privacy
    assert p["outside_budget"] == [] and p["end_to_end"] and p["epsilon_spent"] <= 1.0
    mech = StepMechanism(1024 / result.dataset["n_train"], 4.0, 2.0, "shared")
    assert p["epsilon_spent"] == pytest.approx(epsilon(mech, result.steps, 1e-5, cfg.selection), rel=1e-9)
    steps = selection_steps(result.steps, 4)
    assert [e["step"] for e in result.selection_releases] == steps
    if result.reported["rule_note"].endswith("last iterate"):
        assert result.reported["step"] == result.steps
    else:
        best = max((e for e in result.selection_releases if e["noisy_feasible"]), key=lambda e: e["noisy_val_accuracy"])
        assert result.reported["step"] == best["step"] == result.reported["noisy_validation"]["step"]
        entry = next(h for h in result.history if h["step"] == best["step"])
        assert result.reported["test"] == entry["test"]
    assert set(result.reported_params) == {"weight", "bias"} and np.all(np.isfinite(result.reported_params["weight"]))


def test_selection_under_replace_adjacency_counts_two_releases_per_checkpoint():
    """Flipping a record's group moves one validation count between two cells (L1 shift 2): under the
    replace relation each selection checkpoint costs two unit Laplace releases."""
    from raco_bench.privacy.accounting import GaussianPlan, plan_epsilon, selection_pld

    sel = SelectionRelease(50.0, 5)
    base = dict(sampling_rate=0.03, steps=300, blocks=2, count_noise=50.0)
    add_remove = GaussianPlan(**base, relation="add-remove")
    replace = GaussianPlan(**base, relation="replace", count_sensitivity=math.sqrt(2))
    for plan, releases in ((add_remove, 5), (replace, 10)):
        without = GaussianPlan(**{**plan.__dict__, "selection": None})
        from raco_bench.privacy.accounting import plan_pld

        expected = plan_pld(without, 3.0).compose(selection_pld(SelectionRelease(50.0, releases))).get_epsilon_for_delta(1e-5)
        with_sel = GaussianPlan(**{**plan.__dict__, "selection": sel})
        assert plan_epsilon(with_sel, 3.0, 1e-5) == pytest.approx(expected, rel=1e-9)
