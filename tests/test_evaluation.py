"""Batched evaluation (raco_bench/training/evaluation.py) against a per-model reference written from the definitions:
accuracy, each constraint's exact value Γ_j with hard predictions (eq. 6), the max soft value, and the logits layout."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from raco_bench.constraints import demographic_parity, equalized_odds
from raco_bench.training.evaluation import (
    LOSS_METRICS,
    EvalSplit,
    _general_counts,
    evaluate_linear,
    evaluate_logits,
    fairness_gaps,
    linear_logits,
    predictions,
    split_counts,
)


def _reference_values(problem, probs: np.ndarray, parts: np.ndarray) -> np.ndarray:
    """Γ_j = Σ_I Σ_k w_j[I, k] · (Σ_{x ∈ I} p(x)_k) / |I| for one model (probs N × c), by loops over subsets."""
    rates = problem.compile(dtype=torch.float64)
    membership, weights = rates.membership.numpy(), rates.weights.numpy()
    per_subset = []
    for u in range(membership.shape[0]):
        rows = np.isin(parts, np.nonzero(membership[u])[0])
        per_subset.append(probs[rows].sum(0) / max(1, rows.sum()))
    return weights @ np.concatenate(per_subset).reshape(-1) if per_subset else np.zeros(0)


@pytest.mark.parametrize("c", [2, 3])
@pytest.mark.parametrize("builder", [demographic_parity, equalized_odds])
def test_batched_evaluation_equals_a_per_model_reference(builder, c):
    rng = np.random.default_rng(3 + c)
    N, d, G, K = 900, 5, 3, 4
    X = torch.as_tensor(rng.normal(size=(N, d)), dtype=torch.float32)
    y = torch.as_tensor(rng.integers(0, c, N))
    group = torch.as_tensor(rng.integers(0, G, N))
    problem = builder(G, c, 0.05)
    parts = problem.partition.assign(y.numpy(), group.numpy())
    split = EvalSplit(X, y, group, torch.as_tensor(parts))
    weight = torch.as_tensor(rng.normal(size=(K, c, d)), dtype=torch.float32)
    bias = torch.as_tensor(rng.normal(size=(K, c)), dtype=torch.float32)
    taus = [1.0, 2.0, 0.5, 3.0]
    gammas = torch.full((K, problem.n_constraints), 0.05)
    logits = linear_logits(weight, bias, X)
    assert logits.shape == (N, c, K)
    out = evaluate_logits(logits, split, taus, G, c, problem.compile(), gammas)
    for k in range(K):
        z = (X @ weight[k].T + bias[k]).double().numpy()
        np.testing.assert_allclose(logits[:, :, k].double().numpy(), z, rtol=1e-5, atol=1e-5)
        pred = z.argmax(1)
        assert out[k]["accuracy"] == pytest.approx(float(np.mean(pred == y.numpy())))
        hard = _reference_values(problem, np.eye(c)[pred], parts)
        assert out[k]["constraint_values"] == pytest.approx(hard.tolist(), abs=1e-6)
        assert out[k]["max_constraint"] == pytest.approx(float(hard.max()), abs=1e-6)
        assert out[k]["satisfied"] == bool((hard <= 0.05 + 1e-12).all())
        zt = taus[k] * z
        soft = np.exp(zt - zt.max(1, keepdims=True))
        soft /= soft.sum(1, keepdims=True)
        assert out[k]["max_soft_constraint"] == pytest.approx(float(_reference_values(problem, soft, parts).max()), abs=1e-5)
        single = fairness_gaps(torch.as_tensor(pred)[None], y, group, G, c)[0]  # the one-model path (checked against fairlearn)
        for key in ("dp_gap", "eo_gap"):
            assert out[k][key] == pytest.approx(single[key])
        log_probs = zt - zt.max(1, keepdims=True) - np.log(np.exp(zt - zt.max(1, keepdims=True)).sum(1, keepdims=True))
        ce = -log_probs[np.arange(N), y.numpy()]
        per_group = [float(ce[group.numpy() == g].mean()) for g in range(G)]  # the bounded-group-loss family
        assert out[k]["group_losses"] == pytest.approx(per_group, rel=1e-4)
        assert out[k]["worst_group_loss"] == pytest.approx(max(per_group), rel=1e-4)
        if c == 2:
            positives = y.numpy() == 1
            assert out[k]["fnr"] == pytest.approx(float(np.mean(pred[positives] == 0)))
        else:
            assert "fnr" not in out[k]


def test_predictions_pick_what_argmax_picks_with_ties_and_nans():
    nan = float("nan")
    rows = [[0.0, 1.0, 1.0], [2.0, 2.0, 2.0], [nan, 5.0, 1.0], [1.0, nan, nan], [1.0, 3.0, nan], [float("-inf"), float("-inf"), -1.0]]
    logits = torch.tensor(rows)[:, :, None].expand(-1, -1, 2).contiguous()  # N × c × K
    assert predictions(logits).tolist() == torch.tensor(rows).argmax(1)[:, None].expand(-1, 2).tolist()


def _split(rng, N, d, G, c, builder=demographic_parity):
    X = torch.as_tensor(rng.normal(size=(N, d)), dtype=torch.float32)
    y = torch.as_tensor(rng.integers(0, c, N))
    group = torch.as_tensor(rng.integers(0, G, N))
    problem = builder(G, c, 0.05)
    return EvalSplit(X, y, group, torch.as_tensor(problem.partition.assign(y.numpy(), group.numpy()))), problem


def test_the_two_class_margin_path_equals_the_general_path():
    """Two-class models are counted from the margin z₁ − z₀ (sigmoid, softplus, one product per statistic); the
    general path (softmax over both logits) gives the same counts, ties (margin 0 predicts class 0) included."""
    rng = np.random.default_rng(11)
    N, G, K = 600, 3, 5
    split, problem = _split(rng, N, 4, G, 2, equalized_odds)
    logits = torch.as_tensor(rng.normal(size=(N, 2, K)), dtype=torch.float32)
    logits[::7, 1] = logits[::7, 0]  # exact ties
    taus = torch.tensor([1.0, 0.5, 2.0, 3.0, 1.5])
    n_parts = problem.compile().n_parts
    fast = split_counts(logits, split, taus, G, 2, n_parts)
    slow = _general_counts(logits, predictions(logits), split, taus, G, 2, n_parts)
    torch.testing.assert_close(fast.counts, slow.counts, rtol=0, atol=0)
    torch.testing.assert_close(fast.hard, slow.hard, rtol=0, atol=0)
    torch.testing.assert_close(fast.soft.float(), slow.soft.float(), rtol=1e-5, atol=1e-3)
    torch.testing.assert_close(fast.loss_sums.float(), slow.loss_sums.float(), rtol=1e-5, atol=1e-3)


def test_a_nan_margin_takes_the_argmax_rules():
    """A NaN logit in class 1 only makes argmax pick class 1 (NaN counts as the largest): the margin alone cannot
    tell, so a split with a NaN margin is counted by the general path and predicts what argmax predicts."""
    rng = np.random.default_rng(12)
    N, G = 200, 2
    split, problem = _split(rng, N, 3, G, 2)  # demographic parity: the parts are the groups, whatever the labels
    split.y[:50] = 1  # where argmax predicts class 1 and a margin rule would predict 0
    logits = torch.as_tensor(rng.normal(size=(N, 2, 1)), dtype=torch.float32)
    logits[:50, 1] = float("nan")
    out = evaluate_logits(logits, split, [1.0], G, 2, problem.compile(), torch.full((1, problem.n_constraints), 0.05))[0]
    assert out["accuracy"] == pytest.approx(float((logits[:, :, 0].argmax(1) == split.y).double().mean()))


def _linear_models(rng, N: int, d: int, G: int, c: int, K: int):
    """A split with equalized-odds parts and K random linear models of c classes, their targets γ = 0.05."""
    split, problem = _split(rng, N, d, G, c, equalized_odds)
    weight = torch.as_tensor(rng.normal(size=(K, c, d)), dtype=torch.float32)
    bias = torch.as_tensor(rng.normal(size=(K, c)), dtype=torch.float32)
    return split, problem, weight, bias, torch.full((K, problem.n_constraints), 0.05)


@pytest.mark.parametrize("c", [2, 3])
def test_a_chunked_evaluation_equals_one_pass(c):
    """evaluate_linear sums its statistics over chunks of rows; any chunk size gives what one pass over the logits gives."""
    N, G = 900, 3
    split, problem, weight, bias, gammas = _linear_models(np.random.default_rng(13 + c), N, 5, G, c, 4)
    taus = [1.0, 2.0, 0.5, 3.0]
    whole = evaluate_logits(linear_logits(weight, bias, split.X), split, taus, G, c, problem.compile(), gammas)
    for rows in (7, 256, N):
        chunked = evaluate_linear(weight, bias, split, taus, G, c, problem.compile(), gammas, rows=rows)
        for a, b in zip(chunked, whole):
            assert a.keys() == b.keys()
            for key in a:
                assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-6), (rows, key)


def test_a_chunked_evaluation_of_a_diverged_model_takes_the_argmax_rules():
    """A model whose class-1 weights are NaN predicts class 1 everywhere under argmax; the chunked evaluation (margins
    from a product of weight differences) sees the NaN margins and counts those chunks by the general path."""
    rng = np.random.default_rng(14)
    N, d, G = 300, 4, 2
    split, problem = _split(rng, N, d, G, 2)
    weight = torch.as_tensor(rng.normal(size=(2, 2, d)), dtype=torch.float32)
    bias = torch.zeros(2, 2)
    weight[1, 1, 0] = float("nan")
    gammas = torch.full((2, problem.n_constraints), 0.05)
    chunked = evaluate_linear(weight, bias, split, [1.0, 1.0], G, 2, problem.compile(), gammas, rows=64)
    assert chunked[1]["accuracy"] == pytest.approx(float((split.y == 1).double().mean()))
    whole = evaluate_logits(linear_logits(weight, bias, split.X), split, [1.0, 1.0], G, 2, problem.compile(), gammas)
    assert chunked[0]["accuracy"] == pytest.approx(whole[0]["accuracy"])


@pytest.mark.parametrize("c", [2, 3])
def test_an_evaluation_without_losses_gives_the_same_counts_and_no_loss_metrics(c):
    """losses=False (what a pack computes at steps no checkpoint rule can report) leaves out exactly LOSS_METRICS."""
    G = 2
    split, problem, weight, bias, gammas = _linear_models(np.random.default_rng(15 + c), 700, 4, G, c, 3)
    taus = [1.0, 2.0, 0.5]
    full = evaluate_linear(weight, bias, split, taus, G, c, problem.compile(), gammas, rows=128)
    counts = evaluate_linear(weight, bias, split, taus, G, c, problem.compile(), gammas, rows=128, losses=False)
    whole = evaluate_logits(linear_logits(weight, bias, split.X), split, taus, G, c, problem.compile(), gammas, losses=False)
    for a, b, w in zip(full, counts, whole):
        assert set(a) - set(b) == set(LOSS_METRICS) and set(b) == set(w)
        assert b == {k: v for k, v in a.items() if k not in LOSS_METRICS} == w


@pytest.mark.parametrize("builder", [demographic_parity, equalized_odds])
def test_the_compiled_counts_equal_the_torch_counts_ties_and_diverged_models_included(builder):
    """Without the loss metrics a CPU counts two-class margins in one compiled pass (docs/packs.md, "Fused row passes");
    its counts are the torch path's: a model with zero weights (every margin 0: a tie predicts class 0), a model with a
    NaN weight and one with an infinite weight (their chunks fall back to the general path's argmax rules) included."""
    rng = np.random.default_rng(16)
    N, d, G, K = 500, 4, 3, 6
    split, problem = _split(rng, N, d, G, 2, builder)
    weight = torch.as_tensor(rng.normal(size=(K, 2, d)), dtype=torch.float32)
    bias = torch.as_tensor(rng.normal(size=(K, 2)), dtype=torch.float32)
    weight[1], bias[1] = 0.0, 0.0
    weight[2, 1, 0], weight[3, 0, 1] = float("nan"), float("inf")
    gammas = torch.full((K, problem.n_constraints), 0.05)
    taus = [1.0] * K
    for models in (slice(0, 2), slice(None)):  # finite margins (the compiled pass), then with the diverged models (the fallback)
        for rows in (64, N):
            args = (weight[models], bias[models], split, taus[models], G, 2, problem.compile(), gammas[models])
            compiled = evaluate_linear(*args, rows=rows, losses=False)
            torch_path = evaluate_linear(*args, rows=rows)  # with the loss metrics: the torch path
            for a, b in zip(compiled, torch_path):
                assert a == {k: v for k, v in b.items() if k not in LOSS_METRICS}
        assert compiled[1]["accuracy"] == pytest.approx(float((split.y == 0).double().mean()))  # all ties: class 0
        margin = linear_logits(weight[:1], bias[:1], split.X)[:, :, 0]
        assert compiled[0]["accuracy"] == pytest.approx(float(((margin[:, 1] > margin[:, 0]).long() == split.y).double().mean()))
