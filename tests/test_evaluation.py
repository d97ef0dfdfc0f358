"""Batched evaluation (raco_bench/training/evaluation.py) against a per-model reference written from the definitions:
accuracy, each constraint's exact value Γ_j with hard predictions (eq. 6), the max soft value, and the logits layout."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from raco_bench.constraints import demographic_parity, equalized_odds
from raco_bench.training.evaluation import EvalSplit, evaluate_logits, fairness_gaps, linear_logits, predictions


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
