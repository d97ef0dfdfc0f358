"""The two batch-row products of a pack (raco_bench/packs/rows.py) against a per-configuration reference, for
several classes: logits (indexed: relative to the last class, which the softmax does not see) and gradient sums
(indexed: the last class as minus the others, valid for residuals that sum to zero over classes)."""

from __future__ import annotations

import pytest
import torch

from raco_bench.packs.rows import GatheredRows, IndexedRows


@pytest.mark.parametrize("c", [2, 3, 4])
def test_row_products_equal_a_per_configuration_reference(c):
    gen = torch.Generator().manual_seed(c)
    n, d, K, M = 60, 5, 3, 9
    X = torch.randn(n, d, generator=gen, dtype=torch.float64)
    rows = torch.sort(torch.randint(0, n - 1, (K, M), generator=gen), 1).values
    rows[1, 6:] = n - 1  # padding slots, as poisson_rows leaves them
    weight = torch.randn(K, c, d, generator=gen, dtype=torch.float64)
    bias = torch.randn(K, c, generator=gen, dtype=torch.float64)
    residual = torch.randn(c, K, M, generator=gen, dtype=torch.float64)
    residual -= residual.mean(0, keepdim=True)  # a softmax gradient sums to zero over classes
    ref_logits = torch.stack([(X[rows[k]] @ weight[k].T + bias[k]).T for k in range(K)], 1)  # c × K × M
    ref_sums = torch.stack([residual[:, k] @ X[rows[k]] for k in range(K)])  # K × c × d

    gathered = GatheredRows(X, rows)
    torch.testing.assert_close(gathered.logits(weight, bias), ref_logits)
    torch.testing.assert_close(gathered.gradient_sums(residual), ref_sums)

    indexed = IndexedRows(X, rows)
    torch.testing.assert_close(indexed.logits(weight, bias), ref_logits - ref_logits[-1:])
    torch.testing.assert_close(indexed.gradient_sums(residual), ref_sums)
    torch.testing.assert_close(torch.softmax(indexed.logits(weight, bias), 0), torch.softmax(ref_logits, 0))
