"""The two-class Lagrangian step's per-row residual and its release as compiled loops on a CPU (docs/packs.md, "Fused
row passes").

For two classes the gradient of the Lagrangian with respect to the tempered margin z = τ(z₀ − z₁) of row i is
r₀ = p₀ − y₀ + p₀(1 − p₀)(a₀ − a₁)[part(i)] (eq. 13; :func:`~raco_bench.methods.lagrangian.engine._two_class_residual`),
and the step clips τr₀. In torch that is five passes over the step's per-row arrays (the per-row coefficient gap, its
product with p₀(1 − p₀), the label's subtraction, the sum, the factor τ); :func:`two_class_residual` is one, for at
most two parts: the row's gap is a + d·[part(i) = 1], with a the gap of part 0 and d the gap of part 1 minus a.
Before it, :func:`noisy_histogram` releases every configuration's histogram (lines 2–3) in one pass over p₀.
"""

from __future__ import annotations

import numpy as np
import torch

from raco_bench.jit import kernel


def noisy_histogram(p0: torch.Tensor, part1: torch.Tensor, mask: torch.Tensor, hard: np.ndarray, laplace: np.ndarray | None, scale: np.ndarray,
                    index: np.ndarray, n_parts: int) -> np.ndarray:
    """Lines 2–3 for the S = G·k configurations of a chunk: Ĥ (S × P × 2, float32), P ≤ 2 parts.

    The exact histogram sums each batch row's soft prediction p₀ (G × k × M; where ``hard[index[s]]``, the one-hot
    [p₀ ≥ ½] of the hard dual update) over the rows of each part (``part1``, G × 1 × M: the row's indicator of part 1;
    ``mask`` 0 for padding slots); class 1's column is the part's row count minus class 0's. Where ``laplace`` is
    given (the pack's unit Laplace draws of this step, K × 2P), each cell gets s_L times its draw, configuration
    ``index[s]``'s row and scale: the float32 arithmetic of :func:`~raco_bench.methods.lagrangian.engine._release`,
    H + s_L·float32(Lap)."""
    G, k, M = p0.shape
    _check(p0, part1, mask, n_parts)
    if laplace is not None and laplace.shape[1] != 2 * n_parts:
        raise ValueError(f"the Laplace draws have {laplace.shape[1]} numbers per configuration; the histogram has {2 * n_parts} cells")
    if len(hard) != len(scale) or (laplace is not None and len(laplace) != len(scale)):
        raise ValueError(f"hard, scale and the Laplace draws must hold one entry per configuration, {len(scale)}")
    if len(index) != G * k or (len(index) and not 0 <= index.min() <= index.max() < len(scale)):
        raise ValueError(f"index must name one of the {len(scale)} configurations for each of the chunk's {G * k}")
    out = np.empty((G * k, n_parts, 2), np.float32)
    _noisy_histogram(p0.numpy(), part1.reshape(G, M).numpy(), mask.reshape(G, M).numpy(), hard,
                     laplace if laplace is not None else np.zeros((1, 2 * n_parts)), scale, index, laplace is not None, out)
    return out


def _check(p0: torch.Tensor, part1: torch.Tensor, per_row: torch.Tensor, n_parts: int) -> None:
    """The kernels read what they are given without bounds checks: refuse what they were not written for (``part1`` and
    ``per_row`` are the call's G × 1 × M arrays)."""
    if p0.dtype != torch.float32 or p0.device.type != "cpu" or p0.dim() != 3:
        raise ValueError(f"the compiled two-class passes take float32 CPU arrays G × k × M, got {p0.dtype} {tuple(p0.shape)} on {p0.device}")
    G, _, M = p0.shape
    if part1.numel() != G * M or per_row.numel() != G * M:
        raise ValueError(f"per-row arrays must be G × 1 × M = {G} × 1 × {M}")
    if n_parts not in (1, 2):
        raise ValueError(f"the compiled two-class passes handle one or two parts, not {n_parts}: use the torch form (PackData.fused=False)")


@kernel
def _noisy_histogram(p0, part1, mask, hard, laplace, scale, index, private, out):
    G, k, M = p0.shape
    P = out.shape[1]
    half, zero = np.float32(0.5), np.float32(0.0)
    for g in range(G):
        q, valid = part1[g], mask[g]
        rows1 = rows = zero
        for i in range(M):
            rows += valid[i]
            rows1 += valid[i] * q[i]
        for j in range(k):
            n = g * k + j
            m = index[n]
            p = p0[g, j]
            mass = mass1 = zero
            if hard[m]:
                for i in range(M):
                    h = valid[i] if p[i] >= half else zero
                    mass += h
                    mass1 += h * q[i]
            else:
                for i in range(M):
                    mass += valid[i] * p[i]
                    mass1 += valid[i] * q[i] * p[i]
            if P == 1:
                out[n, 0, 0], out[n, 0, 1] = mass, rows - mass
            else:
                out[n, 0, 0], out[n, 0, 1] = mass - mass1, (rows - rows1) - (mass - mass1)
                out[n, 1, 0], out[n, 1, 1] = mass1, rows1 - mass1
            if private:
                for c in range(2 * P):
                    out[n, c // 2, c % 2] += scale[m] * np.float32(laplace[m, c])


def two_class_residual(p0: torch.Tensor, y0: torch.Tensor, part1: torch.Tensor, coef: np.ndarray | None, temperature: torch.Tensor) -> torch.Tensor:
    """τ(p₀ − y₀ + p₀(1 − p₀)·(a₀ − a₁)[part]) for p₀ (G × k × M, float32), y₀ and part1 (G × 1 × M: the label of class 0 and
    the row's indicator of part 1), the part coefficients ``coef`` (G·k × P × 2 with P ≤ 2; None: no constraint term)
    and τ (G × k × 1): G × k × M."""
    G, k, M = p0.shape
    _check(p0, part1, y0, 2 if coef is None else coef.shape[1])
    if coef is not None and coef.shape != (G * k, coef.shape[1], 2):
        raise ValueError(f"the coefficients have shape {coef.shape}; the chunk needs ({G * k}, P, 2)")
    out = torch.empty_like(p0)
    _residual(p0.contiguous().numpy(), y0.reshape(G, M).contiguous().numpy(), part1.reshape(G, M).contiguous().numpy(),
              coef if coef is not None else np.zeros((G * k, 1, 2), np.float32), temperature.reshape(G, k).contiguous().numpy(), out.numpy())
    return out


@kernel
def _residual(p0, y0, part1, coef, tau, out):
    """:func:`two_class_residual` in float32: p0 and out G × k × M, y0 and part1 G × M, coef G·k × P × 2, tau G × k."""
    G, k, M = p0.shape
    one = np.float32(1.0)
    for g in range(G):
        y, q = y0[g], part1[g]
        for j in range(k):
            n = g * k + j
            a = coef[n, 0, 0] - coef[n, 0, 1]  # a₀ − a₁ of part 0
            d = (coef[n, 1, 0] - coef[n, 1, 1]) - a if coef.shape[1] == 2 else np.float32(0.0)
            p, o, t = p0[g, j], out[g, j], tau[g, j]
            for i in range(M):
                o[i] = (p[i] - y[i] + p[i] * (one - p[i]) * (a + d * q[i])) * t
