"""The two batch-row products of a pack (raco_bench/packs/rows.py) against a per-configuration reference, for
several classes: logits (indexed: relative to the last class, which the softmax does not see) and gradient sums
(indexed: the last class as minus the others, valid for residuals that sum to zero over classes), and the softmax
step's forms of both: the logits relative to the last class and the sums from the first c − 1 classes' residuals."""

from __future__ import annotations

import pytest
import torch

from raco_bench.packs.rows import GatheredRows, IndexedRows, SharedRows


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


@pytest.mark.parametrize("c", [2, 3])
def test_relative_logits_and_head_sums_equal_the_reference_for_every_product(c):
    """What the softmax step uses (two classes: the margin and r₀ alone). A planted error (the bias left unshifted in the
    relative logits, or the last class's sum with the wrong sign) fails here."""
    gen = torch.Generator().manual_seed(10 + c)
    n, d, G, k, M = 60, 5, 2, 3, 9
    X = torch.randn(n, d, generator=gen, dtype=torch.float64)
    rows = torch.sort(torch.randint(0, n - 1, (G, M), generator=gen), 1).values
    per_config = rows.repeat_interleave(k, 0)  # G groups of k configurations that drew the same batch
    K = G * k
    weight = torch.randn(K, c, d, generator=gen, dtype=torch.float64)
    bias = torch.randn(K, c, generator=gen, dtype=torch.float64)
    residual = torch.randn(c, K, M, generator=gen, dtype=torch.float64)
    residual -= residual.mean(0, keepdim=True)
    ref_logits = torch.stack([(X[per_config[j]] @ weight[j].T + bias[j]).T for j in range(K)], 1)
    ref_sums = torch.stack([residual[:, j] @ X[per_config[j]] for j in range(K)])
    for products in (GatheredRows(X, per_config), IndexedRows(X, per_config), SharedRows(X, rows, group=k)):
        torch.testing.assert_close(products.relative_logits(weight, bias), ref_logits[:-1] - ref_logits[-1:])
        torch.testing.assert_close(products.head_sums(residual[:-1]), ref_sums)
        torch.testing.assert_close(products.gradient_sums(residual), ref_sums)
