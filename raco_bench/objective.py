"""The per-sample Lagrangian of RaCO-DP (paper eq. 10), in the scaled form the trainer clips.

Algorithm 1 line 5 clips g_x = (1/B)∇ℓ(x) + ∇r_x at C/B, with B = q·n the expected batch size and
r_x = Σ_j λ_j Σ_{I∋x} Σ_k w_j[I,k] σ_τ(h(x))_k / n̂_I. Multiplying by B, the trainer clips

    u_x = CE(τ·z_x, y_x) + Σ_k c_x[k] σ_τ(z_x)_k,      c_x = B · coef[part(x)]

at C, sums, adds N(0, σ²C²) and divides by B, which is the same thing (docs/methods/raco-dp.md, "One step", 5).
Its gradient with respect to the logits z is

    ∂u/∂z = τ·[(p − e_y) + p ⊙ (c − ⟨c, p⟩)],     p = softmax(τ·z).
"""

from __future__ import annotations

import torch


def tempered_softmax(logits: torch.Tensor, tau: float) -> torch.Tensor:
    """σ_τ(z) = softmax(τ·z): τ multiplies the logits (an inverse temperature, docs/methods/raco-dp.md, D7)."""
    return torch.softmax(tau * logits, dim=-1)


def lagrangian_value(logits: torch.Tensor, y: torch.Tensor, coef: torch.Tensor, tau: float) -> torch.Tensor:
    """u per sample (works on one sample, shape (c,), or on a batch, shape (B, c))."""
    logp = torch.log_softmax(tau * logits, dim=-1)
    ce = -logp.gather(-1, y.long().unsqueeze(-1)).squeeze(-1)
    return ce + (coef * logp.exp()).sum(-1)


def lagrangian_residual(probs: torch.Tensor, y_onehot: torch.Tensor, coef: torch.Tensor | None, tau: float) -> torch.Tensor:
    """∂u/∂z for a batch, given p = σ_τ(z); ``coef=None`` is the unconstrained cross-entropy."""
    r = probs - y_onehot
    if coef is not None:
        r = torch.addcmul(r, probs, coef - (coef * probs).sum(1, keepdim=True))
    return r if tau == 1.0 else tau * r
