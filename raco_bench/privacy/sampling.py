"""Poisson subsampling: every example joins the batch independently with probability q.

The batch size is Binomial(n, q) and is never truncated or padded here (docs/methods/raco-dp.md, D14); an empty batch is
a valid outcome. Everything downstream divides by the expected batch size q·n, never by |B|
(docs/methods/raco-dp.md, D3), so the realised size is not released.

Sampling draws the gaps between kept indices instead of n coin flips: in a sequence of independent
Bernoulli(q) trials the gaps between successes are iid Geometric(q) on {1, 2, …}, so
G = ⌊log U / log(1 − q)⌋ + 1 with U ~ Uniform(0, 1] gives exactly the same distribution of batches
while drawing about q·n numbers instead of n (n = 28,829 and q = 0.018 on Adult: ~600 draws).
"""

from __future__ import annotations

import math

import torch


def poisson_batch(n: int, q: float, generator: torch.Generator, device: torch.device | str = "cpu") -> torch.Tensor:
    """Indices (sorted, int64) of a Poisson sample of ``range(n)`` at rate ``q``."""
    if not 0 < q <= 1:
        raise ValueError(f"sampling rate must be in (0, 1], got {q}")
    if q == 1:
        return torch.arange(n, device=device)
    log1mq = math.log1p(-q)
    chunks: list[torch.Tensor] = []
    position = -1  # index of the last kept example
    while True:
        remaining = n - 1 - position
        # enough gaps to pass the end with overwhelming probability; loop again otherwise
        m = int(remaining * q + 6.0 * math.sqrt(remaining * q + 1.0) + 16)
        u = 1.0 - torch.rand(m, generator=generator, device=device, dtype=torch.float64)  # (0, 1]
        gaps = torch.floor(torch.log(u) / log1mq).to(torch.int64) + 1
        idx = position + torch.cumsum(gaps, 0)
        if int(idx[-1]) >= n:
            chunks.append(idx[idx < n])
            break
        chunks.append(idx)
        position = int(idx[-1])
    return chunks[0] if len(chunks) == 1 else torch.cat(chunks)


def bernoulli_batch(n: int, q: float, generator: torch.Generator, device: torch.device | str = "cpu") -> torch.Tensor:
    """The same distribution as :func:`poisson_batch` from n coin flips (the reference form)."""
    if not 0 < q <= 1:
        raise ValueError(f"sampling rate must be in (0, 1], got {q}")
    keep = torch.rand(n, generator=generator, device=device) < q
    return keep.nonzero().squeeze(1)
