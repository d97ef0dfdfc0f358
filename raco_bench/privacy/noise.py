"""Noise draws from an explicit generator (so a training step is a function of its state)."""

from __future__ import annotations

import torch


def laplace(shape: tuple[int, ...], scale: float, generator: torch.Generator, like: torch.Tensor) -> torch.Tensor:
    """iid Laplace(0, scale) (paper eq. 9), drawn as scale·(E_1 − E_2) with E_i ~ Exp(1)."""
    e = torch.empty((2, *shape), dtype=like.dtype, device=like.device).exponential_(generator=generator)
    return torch.sub(e[0], e[1]).mul_(scale)


def gaussian(shape: tuple[int, ...], std: float, generator: torch.Generator, like: torch.Tensor) -> torch.Tensor:
    """iid N(0, std²)."""
    return std * torch.randn(shape, generator=generator, dtype=like.dtype, device=like.device)

