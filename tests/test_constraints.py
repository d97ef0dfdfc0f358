"""Rate constraints: builder counts, hand-computed rates, validation, sensitivity, fairlearn agreement."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from fairlearn.metrics import demographic_parity_difference, equalized_odds_difference

from raco_bench.constraints import (
    Partition,
    RateConstraint,
    RateProblem,
    custom,
    demographic_parity,
    equalized_odds,
    false_negative_rate,
)
from raco_bench.training.evaluation import fairness_gaps


@pytest.mark.parametrize("G,c", [(2, 2), (9, 2), (3, 4)])
def test_builder_counts(G, c):
    assert demographic_parity(G, c, 0.1).n_constraints == c * G
    assert equalized_odds(G, c, 0.1).n_constraints == c * c * G
    assert false_negative_rate(c, 0.1).n_constraints == c
    assert equalized_odds(G, c, 0.1).partition.n_parts == c * G


def test_acs_has_18_constraints():
    assert demographic_parity(9, 2, 0.05).n_constraints == 18


def _toy():
    # 6 samples: groups [0,0,0,1,1,1], labels [1,0,1,1,0,0]
    probs = torch.tensor([[0.2, 0.8], [0.6, 0.4], [0.1, 0.9], [0.7, 0.3], [0.5, 0.5], [0.9, 0.1]], dtype=torch.float64)
    group = np.array([0, 0, 0, 1, 1, 1])
    label = np.array([1, 0, 1, 1, 0, 0])
    return probs, group, label


def _values(problem, probs, group, label):
    rates = problem.compile(dtype=torch.float64)
    parts = torch.as_tensor(problem.partition.assign(label, group))
    return rates.values(rates.histogram(probs, parts)).numpy()


def test_demographic_parity_hand_computed():
    probs, group, label = _toy()
    v = _values(demographic_parity(2, 2, 0.0), probs, group, label)
    p1_a0 = (0.8 + 0.4 + 0.9) / 3
    p1_a1 = (0.3 + 0.5 + 0.1) / 3
    # order: (k=0,a=0), (k=0,a=1), (k=1,a=0), (k=1,a=1)
    np.testing.assert_allclose(v, [(1 - p1_a0) - (1 - p1_a1), (1 - p1_a1) - (1 - p1_a0), p1_a0 - p1_a1, p1_a1 - p1_a0])


def test_equalized_odds_hand_computed():
    probs, group, label = _toy()
    problem = equalized_odds(2, 2, 0.0)
    v = dict(zip(problem.names, _values(problem, probs, group, label)))
    tpr_a0 = (0.8 + 0.9) / 2  # y=1, group 0: samples 0, 2
    tpr_a1 = 0.3  # y=1, group 1: sample 3
    fpr_a0 = 0.4  # y=0, group 0: sample 1
    fpr_a1 = (0.5 + 0.1) / 2
    assert v["eo[k=1,y=1,a=0]"] == pytest.approx(tpr_a0 - tpr_a1)
    assert v["eo[k=1,y=0,a=1]"] == pytest.approx(fpr_a1 - fpr_a0)
    assert v["eo[k=0,y=1,a=1]"] == pytest.approx((1 - tpr_a1) - (1 - tpr_a0))


def test_false_negative_rate_hand_computed():
    probs, group, label = _toy()
    v = _values(false_negative_rate(2, 0.0, classes=[1]), probs, group, label)
    assert v[0] == pytest.approx(1 - (0.8 + 0.9 + 0.3) / 3)


def test_custom_constraint_and_hard_rates():
    probs, group, label = _toy()
    part = Partition("group", 2, 2)
    problem = custom(part, [{"subsets": [[0], [0, 1]], "weights": [[0, 1], [0, -1]], "gamma": 0.1, "name": "a0-vs-all"}])
    hard = torch.nn.functional.one_hot(probs.argmax(1), 2).double()
    v = _values(problem, hard, group, label)
    # hard predictions: group 0 -> [1, 0, 1]; all -> [1, 0, 1, 0, 0, 0] (argmax of a tie is class 0)
    assert v[0] == pytest.approx(2 / 3 - 2 / 6)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(subsets=((0,), (5,)), weights=np.zeros((2, 2)), gamma=0.1), "do not exist"),
        (dict(subsets=((0,), (1,)), weights=np.zeros((3, 2)), gamma=0.1), "shape"),
        (dict(subsets=(), weights=np.zeros((0, 2)), gamma=0.1), "empty"),
        (dict(subsets=((0,), (1,)), weights=np.zeros((2, 2)), gamma=float("nan")), "finite"),
        (dict(subsets=((0,), (1,)), weights=np.zeros((2, 2)), gamma=float("inf")), "finite"),
    ],
)
def test_invalid_definitions_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RateProblem(Partition("group", 2, 2), (RateConstraint(**kwargs),))


def test_empty_problem_raises():
    with pytest.raises(ValueError, match="no constraints"):
        RateProblem(Partition("group", 2, 2), ())


# custom constraints (raco_bench/constraints/spec.py) on three groups and four classes, one per partition kind, with
# overlapping subsets: a row is still in one part of the histogram
CUSTOM_SPECS = ("P(pred=1 | group=0) - P(pred=1 | group!=0)", "P(pred=3 | label=2) + P(pred=0 | label!=2) - P(pred=0)",
                "|P(pred=2 | label=1, group=2) - P(pred=2)|; 0.5*P(pred=0 | label=3) - P(pred=1 | group=1)")


def test_histogram_l1_sensitivity_at_most_one():
    """Adding or removing any one sample changes the histogram by at most 1 in L1 (paper §4.1), for the built-in
    families and custom ones built the way a run builds them (its family's problem, its partition's parts)."""
    from raco_bench.constraints.families import Task, custom_family

    gen = torch.Generator().manual_seed(0)
    custom_problems = tuple(custom_family(f"c{i}", spec).problem(Task.sized(3, 4), 0.1) for i, spec in enumerate(CUSTOM_SPECS))
    assert [p.partition.kind for p in custom_problems] == ["group", "label", "label_group"]
    for problem in (demographic_parity(3, 4, 0.1), equalized_odds(3, 4, 0.1), false_negative_rate(4, 0.1), *custom_problems):
        rates = problem.compile(dtype=torch.float64)
        n = 60
        probs = torch.softmax(3 * torch.randn(n, 4, generator=gen, dtype=torch.float64), 1)
        parts = torch.as_tensor(problem.partition.assign(np.arange(n) % 4, np.arange(n) % 3))
        H = rates.histogram(probs, parts)
        for i in range(n):
            keep = torch.arange(n) != i
            diff = (H - rates.histogram(probs[keep], parts[keep])).abs().sum()
            assert diff <= 1 + 1e-12
            assert diff == pytest.approx(1.0)  # a probability vector moves exactly one row


def test_part_coefficients_are_gradient_of_lagrangian_term():
    """Σ_x Σ_k coef[part(x), k] p_xk equals Σ_j λ_j Γ_j computed from the same histogram (eqs. 10, 12)."""
    gen = torch.Generator().manual_seed(1)
    problem = equalized_odds(3, 2, 0.1)
    rates = problem.compile(dtype=torch.float64)
    probs = torch.softmax(torch.randn(40, 2, generator=gen, dtype=torch.float64), 1)
    parts = torch.as_tensor(problem.partition.assign(np.arange(40) % 2, np.arange(40) % 3))
    H = rates.histogram(probs, parts)
    sizes = rates.subset_sizes(H)
    lam = torch.rand(problem.n_constraints, generator=gen, dtype=torch.float64)
    lhs = (rates.part_coefficients(lam, sizes)[parts] * probs).sum()
    assert float(lhs) == pytest.approx(float(lam @ rates.values(H, sizes)))


def test_gaps_agree_with_fairlearn():
    rng = np.random.default_rng(0)
    for _ in range(5):
        n = 500
        y = rng.integers(0, 2, n)
        g = rng.integers(0, 3, n)
        pred = (rng.random(n) < 0.3 + 0.2 * (g == 1) + 0.3 * y).astype(int)
        gaps = fairness_gaps(torch.as_tensor(pred)[None], torch.as_tensor(y), torch.as_tensor(g), 3, 2)[0]
        assert gaps["dp_gap"] == pytest.approx(demographic_parity_difference(y, pred, sensitive_features=g))
        assert gaps["eo_gap"] == pytest.approx(equalized_odds_difference(y, pred, sensitive_features=g))
        assert gaps["fnr"] == pytest.approx(np.mean(pred[y == 1] == 0))


def test_dual_quantities_cpu_fast_path_matches_torch_path_and_reference():
    """The CPU path (one compiled loop) equals the torch path and the separate part_coefficients / values."""
    gen = torch.Generator().manual_seed(5)
    problem = equalized_odds(4, 3, 0.1)
    rates = problem.compile(dtype=torch.float64)
    H = 20 * torch.rand(problem.partition.n_parts, 3, generator=gen, dtype=torch.float64) - 2  # noisy: may be < 0
    lam = torch.rand(problem.n_constraints, generator=gen, dtype=torch.float64)
    coef, est = rates.dual_quantities(H, lam, 512.0)
    sizes = rates.subset_sizes(H)
    torch.testing.assert_close(coef, 512.0 * rates.part_coefficients(lam, sizes))
    torch.testing.assert_close(est, rates.values(H, sizes))
    # the torch path (used on other devices), forced by a CPU tensor subclass-free trick: call it directly
    MH = rates.membership @ H
    inv = MH.sum(1, keepdim=True).clamp_min(1.0).reciprocal()
    torch.testing.assert_close(rates.weights @ (MH * inv).reshape(-1), est)
