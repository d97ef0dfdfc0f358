"""Budget tailoring's audit view: what the white-box audit observes of a one-step run (docs/audit.md).

The run's releases, in order, all full batch (every row in every release):

1. the group counts + N(0, count_noise²) (L2 sensitivity 1);
2. with the tailored allocation, stage 1: the moment matrix of u = clip([x; 1; y], U) + a symmetric Gaussian
   (Frobenius sensitivity U²), then, under the β fitted from that noisy matrix, each group's sum of squared
   residuals clipped to Δ_r² + Gaussian noise; the budget weights and every later noise std follow from them;
3. the step: per group, the sum of clipped gradients (‖·‖ ≤ Δ) and of clipped losses (≤ L), each + Gaussian noise
   of that group's std.

The view computes them for K runs at once from the plugin's own exact sums (``BudgetTailoring.group_sums``, the
clipping and the stage-1 formulas of the plugin's module) and the same stream draws the
plugin makes (tests/test_whitebox_audit.py checks that the releases agree). Every std the run derives from its
own releases (the weights) the auditor derives the same way, from the release it observed. The view observes one
step (the audit's ``--steps 1``); the private checkpoint selection is covered by the claim but not observed.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from dataclasses import dataclass

import torch

from raco_bench.methods.audit_view import CANARY_SCALE, AuditView, WorstCase, confident
from raco_bench.packs.engine import vector
from raco_bench.privacy import counter_rng as rng


@dataclass(frozen=True)
class TailoringAuditSettings:
    seeds: torch.Tensor
    sampling_rate: torch.Tensor  # 1: full batch
    private: bool
    source: rng.Keystream


@dataclass
class TailoringAuditState:
    phase: int  # the next release: 0 counts (and moments), 1 residual sums, 2 the step
    n_hat: torch.Tensor  # K × G, released counts (floored at 1)
    beta: torch.Tensor  # K × (D − 1), fitted from the released moment matrix (tailored allocation)
    fitted: torch.Tensor  # K, bool: the matrix was positive definite (else the plugin falls back to uniform weights)
    grad_std: torch.Tensor  # K × G
    loss_std: torch.Tensor  # K × G


@dataclass(frozen=True)
class World:
    ctx: object  # the run's context with its plan restricted to this world's rows
    Z: torch.Tensor  # [x; 1; y] per row (float64)
    group: torch.Tensor


def _world(ctx, X: torch.Tensor, y: torch.Tensor, group: torch.Tensor) -> World:
    G = ctx.dataset.n_groups
    plan = dataclasses.replace(ctx.plan, X=X, y=y, y_onehot=torch.nn.functional.one_hot(y, 2).to(X.dtype), sq_norms=X.pow(2).sum(1) + 1.0,
                               group=group, rows=tuple(torch.nonzero(group == k)[:, 0] for k in range(G)))
    Z = torch.cat([X, torch.ones_like(X[:, :1]), y[:, None].to(X.dtype)], 1).double()
    return World(dataclasses.replace(ctx, plan=plan), Z, group)


def _upper(D: int) -> torch.Tensor:
    return torch.triu(torch.ones(D, D, dtype=torch.bool))


def tailoring_view(run, row: int, module=None) -> AuditView:
    """The view of ``run`` (one step) with training row ``row`` as the canary; ``module`` replaces the plugin module whose
    formulas the view calls (``gaussian_std``, ``clip_rows``, ``group_noise_std``; by default the module of the run's plugin)."""
    module = module or inspect.getmodule(run.method)
    ctx, h, plan = run.ctx, run.ctx.hyper, run.ctx.plan
    G, T, budget = ctx.dataset.n_groups, int(ctx.steps), plan.budget
    tailored = h.allocation == "tailored"
    x, y = plan.X[row] * CANARY_SCALE, 1 - plan.y[row]
    g = plan.group[row : row + 1]
    worlds = {"D": _world(ctx, plan.X, plan.y, plan.group),
              "D'": _world(ctx, torch.cat([plan.X, x[None]]), torch.cat([plan.y, y[None]]), torch.cat([plan.group, g])),
              "canary": _world(ctx, x[None].clone(), y[None].clone(), g.clone())}
    start = run.method.init_state(ctx, ctx.stream()).params
    start = {**start, "bias": confident(start["bias"], y)}
    sums = {name: run.method.group_sums(w.ctx, start) for name, w in worlds.items()}  # every run starts here: exact sums per world
    D = worlds["D"].Z.shape[1]
    upper = _upper(D)
    share = budget.stage1 / (G + 1) if tailored else 0.0
    moment_std = module.gaussian_std(h.row_bound**2, share) if tailored else math.nan
    residual_std = module.gaussian_std(h.residual_clip**2, share) if tailored else math.nan

    def normal(s, step: int, purpose: int, count: int) -> torch.Tensor:
        return rng.normal(rng.stream_keys(s.seeds, step, purpose, s.source), count).to(torch.float64)

    def release(state, world, s):
        w, K = worlds[world], len(s.seeds)
        if state.phase == 0:
            counts = torch.bincount(w.group, minlength=G).double()[None].expand(K, G)
            blocks = {"counts": counts + (h.count_noise * normal(s, 0, rng.GROUP_COUNTS, G) if s.private else 0.0)}
            if tailored:
                U = module.clip_rows(w.Z, h.row_bound)
                m = (U.T @ U)[upper][None].expand(K, -1)
                blocks["moments"] = m + (moment_std * normal(s, 0, rng.STAGE_ONE, int(upper.sum())) if s.private else 0.0)
            return blocks, blocks
        if state.phase == 1:
            ok = state.fitted
            r2 = (w.Z[:, -1:] - w.Z[:, :-1] @ state.beta.T).square().clamp(0.0, h.residual_clip**2)  # n × K
            sums_k = torch.zeros(K, G, dtype=torch.float64).index_add_(1, w.group, r2.T)
            if s.private:
                sums_k = sums_k + residual_std * normal(s, 1, rng.STAGE_ONE, G)
            return {"residual_sums": torch.where(ok[:, None], sums_k, 0.0)}, (sums_k, ok)
        grads, losses = sums[world]  # G × P, G
        P = grads.shape[1]
        grad = grads[None].expand(K, G, P)
        loss = losses[None].expand(K, G)
        if s.private:
            grad = grad + state.grad_std[:, :, None] * normal(s, 1, rng.GAUSSIAN, G * P).view(K, G, P)
            loss = loss + state.loss_std * normal(s, 1, rng.SECOND_GAUSSIAN, G)
        return {**{f"gradient_{k}": grad[:, k] for k in range(G)}, **{f"loss_{k}": loss[:, k, None] for k in range(G)}}, None

    def stds(weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (module.group_noise_std(weights, budget.stage2, T, h.grad_clip), module.group_noise_std(weights, budget.stage2, T, h.loss_clip))

    def apply(state, s, raw):
        K = len(s.seeds)
        if state.phase == 0:
            n_hat = raw["counts"].clamp_min(1.0)
            if tailored:
                moments = torch.zeros(K, D, D, dtype=torch.float64)
                moments[:, upper] = raw["moments"]
                moments = moments + moments.triu(1).transpose(1, 2)
                xtx, xty = moments[:, :-1, :-1], moments[:, :-1, -1]
                fitted = torch.linalg.cholesky_ex(xtx).info == 0  # positive definite: the plugin's smallest eigenvalue > 0
                beta = torch.linalg.solve(torch.where(fitted[:, None, None], xtx, torch.eye(D - 1, dtype=xtx.dtype)), xty[..., None])[..., 0]
                return TailoringAuditState(1, n_hat, beta, fitted, state.grad_std, state.loss_std)
            weights = torch.full((K, G), 1.0 / G if h.allocation == "equal" else 1.0, dtype=torch.float64)
            return TailoringAuditState(2, n_hat, state.beta, state.fitted, *stds(weights))
        if state.phase == 1:
            sums_k, ok = raw
            se2 = sums_k / state.n_hat
            ok = ok & (sums_k > 0).all(1)
            weights = torch.where(ok[:, None], se2 / se2.sum(1, keepdim=True), 1.0 / G)
            return TailoringAuditState(2, state.n_hat, state.beta, state.fitted, *stds(weights))
        return dataclasses.replace(state, phase=3)

    one = vector([run], [1.0], torch.float64)
    settings = TailoringAuditSettings(vector([run], [ctx.stream_id], torch.int64), one, True, ctx.source)
    zeros = torch.zeros(1, G, dtype=torch.float64)
    state = TailoringAuditState(0, zeros, torch.zeros(1, D - 1, dtype=torch.float64), torch.zeros(1, dtype=torch.bool), zeros, zeros)
    noise = {"counts": ("gauss", vector([run], [h.count_noise], torch.float64))}
    bound = {"counts": 1.0}
    if tailored:
        noise |= {"moments": ("gauss", vector([run], [moment_std], torch.float64)), "residual_sums": ("gauss", vector([run], [residual_std], torch.float64))}
        bound |= {"moments": h.row_bound**2, "residual_sums": h.residual_clip**2}
    for k in range(G):
        noise |= {f"gradient_{k}": ("gauss", lambda st, k=k: st.grad_std[:, k]), f"loss_{k}": ("gauss", lambda st, k=k: st.loss_std[:, k])}
        bound |= {f"gradient_{k}": h.grad_clip, f"loss_{k}": h.loss_clip}
    rho_gauss = budget.total - budget.selection

    def worst(steps: int) -> list[WorstCase]:
        return [WorstCase(math.sqrt(2 * rho_gauss), None, sampled=False)]  # every Gaussian release together, at its claim

    return AuditView(release, apply, noise, bound, state, settings, {k: w.ctx.plan for k, w in worlds.items()}, float(len(plan.X)),
                     unobserved="the private checkpoint selection" if ctx.config.selection is not None else "",
                     phases=lambda steps: (3 if tailored else 2) if steps == 1 else _one_step(steps), sampled=lambda state: False, worst=worst, start=start)


def _one_step(steps: int) -> int:
    raise ValueError(f"the budget-tailoring audit view observes one step; got steps={steps} (use --steps 1)")
