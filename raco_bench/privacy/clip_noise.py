"""The one clip-and-noise path of the batched engines and the models' clipped sums (docs/privacy.md, "Clipping and noise").

Every engine clips per-record gradients with :func:`clip_factors` (or, for gradients of rank one, :func:`clip_rank_one`,
which on a CPU is one compiled pass) and noises their sums with :func:`add_gaussian`, so a change here reaches every
engine at once, and tests/test_clip_noise.py plants its bugs here once and watches the white-box audit of every method
go red. Engines call these through the module (``clip_noise.clip_factors(...)``)."""

from __future__ import annotations

import math

import numpy as np
import torch

from raco_bench.jit import kernel


def clip_factors(norms_sq: torch.Tensor, clip: torch.Tensor | float, mask: torch.Tensor | None = None) -> torch.Tensor:
    """min(1, C/‖g‖) per record from its squared norm ‖g‖² (C broadcast as given; a zero norm gives 1), times ``mask``
    (0 for padding slots). Multiplying a record's gradient by it clips the gradient to norm C."""
    factor = torch.rsqrt(norms_sq).mul_(clip).clamp_(max=1.0)
    return factor * mask if mask is not None else factor


def clip_rank_one(residual: torch.Tensor, row_sq: torch.Tensor, clip: torch.Tensor, mask: torch.Tensor,
                  compiled: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-record gradients of rank one, R_i ⊗ [x_i; 1], each clipped to norm C: the clipped R_i and their sum over records.

    ``residual`` (j × G × k × M) holds R_i (j rows) for the k configurations of each of G groups of M records (a group's
    records are shared by its k configurations); ``row_sq`` (G × 1 × M) is the squared norm of [x_i; 1] times the weight of
    R's rows, so that ‖g_i‖² = Σ_rows R_i² · row_sq_i (2(‖x_i‖² + 1) where R holds r₀ of two classes, r₁ = −r₀);
    ``clip`` (G × k × 1) is each configuration's C (inf: no clipping); ``mask`` (G × 1 × M) is 0 for padding slots.
    Returns R_i · min(1, C/‖g_i‖) · mask_i (j × G × k × M; ``residual`` may be overwritten) and its sums (j × G × k).

    On a CPU, for float32 and one row (two classes), one compiled pass (:func:`_clip_rows`) computes what the torch
    form below computes in seven: the factor C / max(C, ‖g_i‖) equals min(1, C/‖g_i‖) (and 1 for a zero gradient).
    ``compiled``: False takes the torch form wherever the compiled pass would apply (tests compare the two)."""
    applies = residual.device.type == "cpu" and residual.dtype == torch.float32 and residual.shape[0] == 1
    if applies and compiled is not False:
        j, G, k, M = residual.shape
        if row_sq.numel() != G * M or mask.numel() != G * M or clip.numel() != G * k:
            raise ValueError(f"clip_rank_one: row_sq and mask must be G × 1 × M = {G} × 1 × {M}, clip G × k × 1 = {G} × {k} × 1")
        out, sums = residual.contiguous(), residual.new_empty(G, k)
        _clip_rows(out.view(G, k, M).numpy(), row_sq.reshape(G, M).contiguous().numpy(), clip.reshape(G, k).contiguous().numpy(),
                   mask.reshape(G, M).contiguous().numpy(), sums.numpy())
        return out, sums[None]
    factor = clip_factors(residual.square().sum(0) * row_sq, clip, mask)
    out = residual * factor
    return out, out.sum(-1)


@kernel
def _clip_rows(r, row_sq, clip, mask, sums):
    """:func:`clip_rank_one` for one row of R in float32, in place: r (G × k × M), row_sq and mask (G × M), clip and sums (G × k)."""
    G, k, M = r.shape
    for g in range(G):
        q, m = row_sq[g], mask[g]
        for j in range(k):
            C, rr, total = clip[g, j], r[g, j], np.float32(0.0)
            if C == np.inf:
                for i in range(M):
                    rr[i] = rr[i] * m[i]
                    total += rr[i]
            else:
                for i in range(M):
                    rr[i] = rr[i] * (C / max(C, math.sqrt(rr[i] * rr[i] * q[i]))) * m[i]
                    total += rr[i]
            sums[g, j] = total


def add_gaussian(blocks: list[torch.Tensor], std: torch.Tensor, unit: torch.Tensor) -> list[torch.Tensor]:
    """Each block (K × …) plus std_k times its slice of ``unit`` (K × total unit Gaussians, the blocks' elements in
    order): the Gaussian release of the clipped sums, noise std σC per configuration."""
    out, offset = [], 0
    for block in blocks:
        size = block[0].numel()
        out.append(block + std.view(-1, *([1] * (block.dim() - 1))) * unit[:, offset : offset + size].view_as(block))
        offset += size
    return out
