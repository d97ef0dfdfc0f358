"""Poisson subsampling: every example joins the batch independently with probability q.

The batch size is Binomial(n, q) and is never truncated or padded here (spec Q14); an empty batch is
a valid outcome. Everything downstream divides by the expected batch size q·n, never by |B|
(spec Q3), so the realised size is not released.
"""

from __future__ import annotations

import torch


def poisson_batch(n: int, q: float, generator: torch.Generator, device: torch.device | str = "cpu") -> torch.Tensor:
    """Indices (sorted, int64) of a Poisson sample of ``range(n)`` at rate ``q``."""
    if not 0 < q <= 1:
        raise ValueError(f"sampling rate must be in (0, 1], got {q}")
    keep = torch.rand(n, generator=generator, device=device) < q
    return keep.nonzero().squeeze(1)
