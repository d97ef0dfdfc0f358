"""The synthetic experiment of Alabi & Wiggins (their Table 1): mixtures of linear models with groups of very
different sizes, private linear regression by budget tailoring (DPSE) against the equal split (DPNoSE),
and the smallest group's mean squared prediction error (docs/methods/budget-tailoring.md, "Synthetic
experiment").

Each group k has its own slopes β_k: y = ⟨x, β_k⟩ + N(0, σ_e²), x ~ N(0, s² I_P). One linear model is fit
to all groups by the same two stages as the ``budget-tailoring`` method (the functions of
:mod:`baselines.budget_tailoring.plugin`), with the squared loss in place of the cross-entropy:
stage 1 estimates each group's residual standard error privately and allocates the budget, stage 2
runs projected full-batch DP gradient descent on Σ losses + G·max(0, worst group's loss − η).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from baselines.budget_tailoring.plugin import ZCDPBudget, clip_rows, group_noise_std, penalised_direction, tailored_weights

# Table 1's setting: K = 5, the largest group 20× the others (10,000 and 500 rows)
SIZES = (10_000, 500, 500, 500, 500)
SLOPES = ((-10.0, 10.0), (10.0, -10.0), (10.0, 1.0), (-10.0, -1.0), (-1.0, 1.0))


@dataclass(frozen=True)
class SyntheticSetting:
    sizes: tuple[int, ...] = SIZES
    slopes: tuple[tuple[float, ...], ...] = SLOPES
    noise: float = 1.0  # σ_e
    feature_scale: float = 0.15  # x ~ N(0, s² I): puts the MSPE on the scale of the paper's Table 1 (not stated there)
    test_rows: int = 2_000  # per group, for the MSPE
    steps: int = 200  # T
    lr: float = 0.5
    grad_clip: float = 5.0  # Δ
    loss_clip: float = 25.0  # L
    row_bound: float = 5.0  # U, stage 1 (rows [x; 1; y] are clipped to it)
    residual_clip: float = 5.0  # Δ_r
    box: float = 20.0  # R (the slopes reach 10)
    stage1_share: float = 0.2
    count_noise: float = 50.0
    public_counts: bool = True  # the paper's assumption: group sizes are public (else released with count_noise)
    penalty: float = 0.0  # G
    loss_bound: float = 0.0  # η


def make_groups(setting: SyntheticSetting, gen: torch.Generator, rows: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(X, y, group): ``rows[k]`` rows of group k."""
    P = len(setting.slopes[0])
    X, y, g = [], [], []
    for k, (n, beta) in enumerate(zip(rows, setting.slopes)):
        x = setting.feature_scale * torch.randn(n, P, generator=gen, dtype=torch.float64)
        X.append(x)
        y.append(x @ torch.tensor(beta, dtype=torch.float64) + setting.noise * torch.randn(n, generator=gen, dtype=torch.float64))
        g.append(torch.full((n,), k, dtype=torch.int64))
    return torch.cat(X), torch.cat(y), torch.cat(g)


def fit(setting: SyntheticSetting, allocation: str, rho: float, gen: torch.Generator,
        X: torch.Tensor, y: torch.Tensor, group: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(θ = [β; intercept], budget weights) of one private fit; the budget is ρ-zCDP in total."""
    K = len(setting.sizes)
    normal = lambda k: torch.randn(k, generator=gen, dtype=torch.float64)  # noqa: E731
    counts = torch.bincount(group, minlength=K).double()
    count_rho = 0.0 if setting.public_counts else 1 / (2 * setting.count_noise**2)
    budget = ZCDPBudget.allot(rho, count_rho, 0.0, setting.stage1_share, allocation == "tailored", "raise rho or count_noise")
    n_hat = counts if setting.public_counts else (counts + setting.count_noise * normal(K)).clamp_min(1.0)
    if allocation == "tailored":
        weights, _, _ = tailored_weights(X, y, group, K, n_hat, budget.stage1, setting.row_bound, setting.residual_clip, normal)
    elif allocation == "equal":
        weights = torch.full((K,), 1.0 / K, dtype=torch.float64)
    else:
        weights = torch.ones(K, dtype=torch.float64)
    grad_std = group_noise_std(weights, budget.stage2, setting.steps, setting.grad_clip)
    loss_std = group_noise_std(weights, budget.stage2, setting.steps, setting.loss_clip)
    Xt = torch.cat([X, torch.ones_like(X[:, :1])], 1)
    theta = torch.zeros(Xt.shape[1], dtype=torch.float64)
    onehot = torch.nn.functional.one_hot(group, K).double()
    for _ in range(setting.steps):
        r = Xt @ theta - y
        grads = clip_rows(2 * r[:, None] * Xt, setting.grad_clip)  # ∇(y − ⟨x̃, θ⟩)², clipped to Δ
        grad_sums = onehot.T @ grads + grad_std[:, None] * normal(K * Xt.shape[1]).view(K, -1)
        loss_sums = onehot.T @ r.square().clamp(0.0, setting.loss_clip) + loss_std * normal(K)
        theta = (theta - setting.lr * penalised_direction(grad_sums, loss_sums, n_hat, setting.penalty, setting.loss_bound))
        theta = theta.clamp(-setting.box, setting.box)
    return theta, weights


def mspe(theta: torch.Tensor, X: torch.Tensor, y: torch.Tensor, group: torch.Tensor, K: int) -> np.ndarray:
    r = (torch.cat([X, torch.ones_like(X[:, :1])], 1) @ theta - y).square()
    return (torch.zeros(K, dtype=torch.float64).index_add_(0, group, r) / torch.bincount(group, minlength=K)).numpy()


def run_experiment(setting: SyntheticSetting, rhos: list[float], allocations: list[str], trials: int, seed: int = 0) -> list[dict]:
    """Per (ρ, allocation): the per-group MSPE averaged over ``trials`` fresh data sets and noise draws, with its standard error."""
    K = len(setting.sizes)
    rows = []
    for i, rho in enumerate(rhos):
        for j, allocation in enumerate(allocations):
            errors, weights = [], []
            for trial in range(trials):
                gen = torch.Generator().manual_seed(seed * 1_000_003 + trial)  # the same data for every (ρ, allocation)
                X, y, g = make_groups(setting, gen, setting.sizes)
                Xs, ys, gs = make_groups(setting, gen, (setting.test_rows,) * K)
                noise_gen = torch.Generator().manual_seed(((seed * 1_000 + trial) * 100 + i) * 10 + j)
                theta, w = fit(setting, allocation, rho, noise_gen, X, y, g)
                errors.append(mspe(theta, Xs, ys, gs, K))
                weights.append(w.numpy())
            E, W = np.array(errors), np.array(weights)
            row = {"rho": rho, "allocation": allocation, "trials": trials, "smallest_group": int(np.argmin(setting.sizes))}
            for k in range(K):
                row[f"mspe_{k + 1}"] = float(E[:, k].mean())
                row[f"mspe_{k + 1}_se"] = float(E[:, k].std(ddof=1) / math.sqrt(trials)) if trials > 1 else math.nan
                row[f"weight_{k + 1}"] = float(W[:, k].mean())
            rows.append(row)
    return rows
