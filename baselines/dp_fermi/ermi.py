"""ERMI and its min-max form (DP-FERMI, Lowy et al. 2023; docs/methods/dp-fermi.md).

With soft predictions F_i ∈ Δ^c, groups s_i ∈ [G] and P̂_S = diag(p̂_S):

    ERMI(Ŷ, S) = Σ_{j,r} p̂_{Ŷ,S}(j, r)² / (p̂_Ŷ(j) p̂_S(r)) − 1

    ψ̂_i(θ, W) = Σ_{r,j} [ −W_{rj}² F_ij + 2 W_{rj} F_ij 1{s_i = r} / √p̂_S(r) ] − 1      (W ∈ R^{G×c})

The batch average of ψ̂_i is concave in W, maximised at W*_{rj} = p̂_{Ŷ,S}(j, r)/(√p̂_S(r) p̂_Ŷ(j)),
where it equals ERMI. For equalized odds every label y has its own W_y and P̂_{S|Y=y}; the "context"
of sample i is then y_i (for demographic parity it is 0 for everyone).

Since ψ̂_i is linear in F_i for fixed W, ψ̂_i = ⟨a_i, F_i⟩ − 1 with
a_ij = −Σ_r W_{ctx_i, r j}² + 2 W_{ctx_i, s_i j} / √p̂(s_i | ctx_i): its θ-gradient has the same
form as RaCO-DP's per-sample regularizer, and the same rank-1 gradient engine serves both.
"""

from __future__ import annotations

import torch


def ermi(F: torch.Tensor, s: torch.Tensor, n_groups: int) -> torch.Tensor:
    """ERMI of soft predictions ``F`` (n × c) against groups ``s`` (empty groups are skipped)."""
    onehot = torch.nn.functional.one_hot(s, n_groups).to(F.dtype)
    joint = onehot.T @ F / F.shape[0]  # p̂_{Ŷ,S}(j, r) as (r, j)
    p_s = onehot.mean(0)
    p_y = F.mean(0)
    present = p_s > 0
    return (joint[present] ** 2 / (p_s[present, None] * p_y[None, :])).sum() - 1.0


def psi_mean(F: torch.Tensor, s: torch.Tensor, W: torch.Tensor, p_s: torch.Tensor) -> torch.Tensor:
    """Batch average of ψ̂_i (demographic parity form, one W)."""
    inv_sqrt = p_s.clamp_min(1e-300).rsqrt()
    onehot = torch.nn.functional.one_hot(s, W.shape[0]).to(F.dtype)
    quad = -(F * (W**2).sum(0)).sum(1)
    lin = 2.0 * ((onehot * inv_sqrt) @ W * F).sum(1)
    return (quad + lin).mean() - 1.0


def optimal_w(F: torch.Tensor, s: torch.Tensor, n_groups: int) -> torch.Tensor:
    onehot = torch.nn.functional.one_hot(s, n_groups).to(F.dtype)
    joint = onehot.T @ F / F.shape[0]
    p_s = onehot.mean(0)
    return joint / (p_s.clamp_min(1e-300).sqrt()[:, None] * F.mean(0)[None, :])


def linear_coefficients(W: torch.Tensor, ctx: torch.Tensor, s: torch.Tensor, inv_sqrt_p: torch.Tensor) -> torch.Tensor:
    """a_i (B × c) with ψ̂_i = ⟨a_i, F_i⟩ − 1, for W of shape (contexts, G, c)."""
    colsq = (W**2).sum(1)  # (contexts, c)
    return 2.0 * inv_sqrt_p[:, None] * W[ctx, s] - colsq[ctx]


def w_gradient_sum(
    W: torch.Tensor, F: torch.Tensor, ctx: torch.Tensor, s: torch.Tensor, inv_sqrt_p: torch.Tensor, clip: float | None
) -> torch.Tensor:
    """Σ_i clip(∇_W ψ̂_i, C) with ∇_{W_ctx} ψ̂_i = −2 W_ctx diag(F_i) + 2 e_{s_i} F_iᵀ / √p_i, in closed form.

    ‖∇_W ψ̂_i‖² = 4 Σ_j F_ij² (Σ_r W_{ctx,rj}² − 2 W_{ctx,s_i j}/√p_i + 1/p_i), so per-sample gradients are
    never materialised.
    """
    n_ctx, G, c = W.shape
    weight = torch.ones(F.shape[0], dtype=F.dtype, device=F.device)
    if clip is not None:
        colsq = (W**2).sum(1)
        inner = colsq[ctx] - 2.0 * inv_sqrt_p[:, None] * W[ctx, s] + (inv_sqrt_p**2)[:, None]
        norms = 2.0 * torch.sqrt((F**2 * inner).sum(1).clamp_min(0.0))
        weight = (clip / norms.clamp_min(1e-12)).clamp(max=1.0)
    wF = weight[:, None] * F
    per_ctx = torch.zeros(n_ctx, c, dtype=F.dtype, device=F.device).index_add_(0, ctx, wF)
    cell = torch.zeros(n_ctx * G, c, dtype=F.dtype, device=F.device).index_add_(0, ctx * G + s, wF * inv_sqrt_p[:, None])
    return -2.0 * W * per_ctx[:, None, :] + 2.0 * cell.view(n_ctx, G, c)


def per_sample_w_gradients(W: torch.Tensor, F: torch.Tensor, ctx: torch.Tensor, s: torch.Tensor, inv_sqrt_p: torch.Tensor) -> torch.Tensor:
    """Materialised ∇_W ψ̂_i (B × contexts × G × c), for tests."""
    n_ctx, G, c = W.shape
    out = torch.zeros(F.shape[0], n_ctx, G, c, dtype=F.dtype, device=F.device)
    rows = torch.arange(F.shape[0], device=F.device)
    out[rows, ctx] = -2.0 * W[ctx] * F[:, None, :]
    out[rows, ctx, s] += 2.0 * F * inv_sqrt_p[:, None]
    return out


def project_frobenius(W: torch.Tensor, radius: float) -> torch.Tensor:
    """Π onto {‖W_ctx‖_F ≤ radius} for every context block."""
    norms = W.flatten(1).norm(dim=1).clamp_min(1e-12)
    return W * (radius / norms).clamp(max=1.0)[:, None, None]
