"""The one clip-and-noise path of the batched engines and the models' clipped sums (docs/privacy.md, "Clipping and noise").

Every engine clips per-record gradients with :func:`clip_factors` and noises their sums with :func:`add_gaussian`,
so a change here reaches every engine at once, and tests/test_clip_noise.py plants its bugs here once and watches the
white-box audit of every method go red. Engines call these through the module (``clip_noise.clip_factors(...)``)."""

from __future__ import annotations

import torch


def clip_factors(norms_sq: torch.Tensor, clip: torch.Tensor | float, mask: torch.Tensor | None = None) -> torch.Tensor:
    """min(1, C/‖g‖) per record from its squared norm ‖g‖² (C broadcast as given; a zero norm gives 1), times ``mask``
    (0 for padding slots). Multiplying a record's gradient by it clips the gradient to norm C."""
    factor = torch.rsqrt(norms_sq).mul_(clip).clamp_(max=1.0)
    return factor * mask if mask is not None else factor


def add_gaussian(blocks: list[torch.Tensor], std: torch.Tensor, unit: torch.Tensor) -> list[torch.Tensor]:
    """Each block (K × …) plus std_k times its slice of ``unit`` (K × total unit Gaussians, the blocks' elements in
    order): the Gaussian release of the clipped sums, noise std σC per configuration."""
    out, offset = [], 0
    for block in blocks:
        size = block[0].numel()
        out.append(block + std.view(-1, *([1] * (block.dim() - 1))) * unit[:, offset : offset + size].view_as(block))
        offset += size
    return out
