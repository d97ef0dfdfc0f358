"""The two products a linear model's step takes with its batch rows, for K configurations at once.

Each configuration k has its own padded batch ``rows[k]`` (K × M row indices into X, n × d). A
logistic-regression step needs

* the logits ``X[rows[k]] @ weight[k]ᵀ + bias[k]``, class-major (c × K × M), and
* the gradient sums ``Σ_i residual[:, k, i] ⊗ X[rows[k, i]]`` (K × c × d), the sum over the batch of
  the rank-1 per-sample gradients r_i ⊗ x_i (the bias's is ``residual.sum(2)``).

A softmax step needs less (docs/packs.md, "Speed"): the logits relative to the last class
(``relative_logits``, (c − 1) × K × M; for two classes, the margin z₀ − z₁) and the gradient sums from
the first c − 1 classes' residuals (``head_sums``), the last class's being minus their sum.

Two ways to compute them give the same numbers up to floating-point summation order:

* :class:`GatheredRows` copies the rows out (K × M × d) and uses batched matrix products. On a GPU
  the copy is cheap and ``bmm`` is what it does best.
* :class:`IndexedRows` copies nothing: the logits are a sampled dense product (only the entries that
  exist are computed, ``torch.sparse.sampled_addmm``) and the gradient sums are weighted sums of rows
  read straight from X (``embedding_bag`` in sum mode). On a CPU the copy of B × d floats per
  configuration per step is what bounds a pack; skipping it makes a step about twice as fast
  (``raco-bench bench throughput``).

:func:`rows_for` picks by device; the equivalence tests run both on the CPU.
"""

from __future__ import annotations

import warnings

import torch


class GatheredRows:
    """Batch rows copied out once (K × M × d); products are batched matrix products."""

    def __init__(self, X: torch.Tensor, rows: torch.Tensor) -> None:
        self.Xb = torch.index_select(X, 0, rows.reshape(-1)).view(*rows.shape, X.shape[1])

    def logits(self, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(bias[:, :, None], weight, self.Xb.transpose(1, 2)).transpose(0, 1)

    def gradient_sums(self, residual: torch.Tensor) -> torch.Tensor:
        return torch.bmm(residual.transpose(0, 1), self.Xb)

    def relative_logits(self, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """The logits minus the last class's, (c − 1) × K × M."""
        z = self.logits(weight, bias)
        return z[:-1] - z[-1:]

    def head_sums(self, head: torch.Tensor) -> torch.Tensor:
        """The gradient sums (K × c × d) of a softmax residual given by its first c − 1 classes ``head``."""
        return _with_last(self.gradient_sums(head))


def _with_last(sums: torch.Tensor) -> torch.Tensor:
    """Gradient sums of the first c − 1 classes (K × (c − 1) × d) completed with the last class's, minus their sum (the
    residual of a softmax sums to zero over classes)."""
    return torch.cat([sums, -sums.sum(1, keepdim=True)], 1)


class IndexedRows:
    """Products read straight from X by row index; no K × M × d copy is made.

    Both products use that the model's logits enter the step only through a softmax. Its
    probabilities do not change when a row's logits are shifted by a constant, so :meth:`logits`
    returns them relative to the last class (c − 1 products per row instead of c). And the gradient
    of any function of the softmax with respect to the logits sums to zero over classes, so the
    last class's gradient sum is minus the sum of the others' (c − 1 weighted sums instead of c).
    """

    def __init__(self, X: torch.Tensor, rows: torch.Tensor) -> None:
        self.X, self.rows = X, rows

    def _columns(self, classes: int) -> torch.Tensor:
        """Row indices repeated per class, in (class, configuration, slot) order: entry (j, k, i) is rows[k, i]."""
        K, M = self.rows.shape
        return self.rows.expand(classes, K, M).reshape(-1)

    def logits(self, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """The logits minus the last class's logit (its row is zero)."""
        return _with_zero_row(self.relative_logits(weight, bias))

    def relative_logits(self, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """The logits minus the last class's, (c − 1) × K × M."""
        K, c, d = weight.shape
        M = self.rows.shape[1]
        if M == 0:
            return weight.new_zeros(c - 1, K, 0)
        cols = self._columns(c - 1)
        crow = torch.arange(0, (c - 1) * K * M + 1, M, device=cols.device)
        relative = (weight[:, :-1] - weight[:, -1:]).transpose(0, 1).reshape((c - 1) * K, d)
        with warnings.catch_warnings():  # torch warns once that sparse CSR is a beta feature
            warnings.simplefilter("ignore", UserWarning)
            pattern = torch.sparse_csr_tensor(crow, cols, torch.zeros(cols.numel(), dtype=weight.dtype, device=cols.device),
                                              ((c - 1) * K, self.X.shape[0]), check_invariants=False)
            products = torch.sparse.sampled_addmm(pattern, relative, self.X.t(), beta=0.0)
        return products.values().view(c - 1, K, M) + (bias[:, :-1] - bias[:, -1:]).T[:, :, None]

    def gradient_sums(self, residual: torch.Tensor) -> torch.Tensor:
        """Σ_i residual[j, k, i] · x_i; ``residual`` must sum to zero over classes j (a softmax gradient)."""
        return self.head_sums(residual[:-1])

    def head_sums(self, head: torch.Tensor) -> torch.Tensor:
        """The gradient sums (K × c × d) of a softmax residual given by its first c − 1 classes ``head``."""
        c1, K, M = head.shape
        if M == 0:
            return head.new_zeros(K, c1 + 1, self.X.shape[1])
        cols = self._columns(c1)
        offsets = torch.arange(0, c1 * K * M, M, device=cols.device)
        weights = head.contiguous().view(-1)  # contiguous: torch's fast kernel
        sums = torch.nn.functional.embedding_bag(cols, self.X, offsets, mode="sum", per_sample_weights=weights)
        return _with_last(sums.view(c1, K, self.X.shape[1]).transpose(0, 1))


def _with_zero_row(relative: torch.Tensor) -> torch.Tensor:
    """Relative logits ((c − 1) × K × M) with the last class's row of zeros appended: c × K × M."""
    c1, K, M = relative.shape
    out = relative.new_zeros(c1 + 1, K, M)
    out[:-1] = relative
    return out


class SharedRows:
    """Batches shared by groups of configurations (runs that share their batch draws, docs/packs.md, "Shared batches"):
    ``rows`` (G × M) holds the batch of each of G groups of ``group`` consecutive configurations. Each group's rows
    are copied out once (G × M × d) and both products are batched matrix products over every configuration of a
    group at once, with :class:`IndexedRows`'s two identities (c − 1 classes)."""

    def __init__(self, X: torch.Tensor, rows: torch.Tensor, group: int = 1) -> None:
        G, M = rows.shape
        self.group = group
        self.Xb = torch.index_select(X, 0, rows.reshape(-1)).view(G, M, X.shape[1])

    def logits(self, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """The logits minus the last class's logit (its row is zero)."""
        return _with_zero_row(self.relative_logits(weight, bias))

    def relative_logits(self, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """The logits minus the last class's, (c − 1) × S × M."""
        S, c, d = weight.shape
        G, M, k = self.Xb.shape[0], self.Xb.shape[1], self.group
        relative = (weight[:, :-1] - weight[:, -1:]).reshape(G, k * (c - 1), d)
        shift = (bias[:, :-1] - bias[:, -1:]).reshape(G, k * (c - 1), 1)
        products = torch.baddbmm(shift, relative, self.Xb.transpose(1, 2))  # G × k(c − 1) × M
        return products.view(G, k, c - 1, M).permute(2, 0, 1, 3).reshape(c - 1, S, M)

    def gradient_sums(self, residual: torch.Tensor) -> torch.Tensor:
        """Σ_i residual[j, k, i] · x_i; ``residual`` must sum to zero over classes j (a softmax gradient)."""
        return self.head_sums(residual[:-1])

    def head_sums(self, head: torch.Tensor) -> torch.Tensor:
        """The gradient sums (S × c × d) of a softmax residual given by its first c − 1 classes ``head``."""
        c1, S, M = head.shape
        G, k = self.Xb.shape[0], self.group
        weights = head.reshape(c1, G, k, M).permute(1, 2, 0, 3).reshape(G, k * c1, M)
        return _with_last(torch.bmm(weights, self.Xb).view(S, c1, -1))


RowProducts = type[GatheredRows] | type[IndexedRows] | type[SharedRows]


def rows_for(device: torch.device) -> RowProducts:
    """The faster of the two on ``device``: indexed products on a CPU, gathered rows on a GPU."""
    return GatheredRows if device.type == "cuda" else IndexedRows
