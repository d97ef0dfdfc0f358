"""Privacy budget tailoring, "DPSE" (Alabi & Wiggins, TMLR), reimplemented from the paper with the fixes
of docs/methods/budget-tailoring.md. Full-record DP, accounted in ρ-zCDP and converted to (ε, δ).

Its fairness notion is **bounded group loss** (BGL): mean loss per group ≤ η. It trains for the
worst group's loss, not for rate constraints; on a rate-constraint sweep it is evaluated on the run's
constraints like every method, and every method is evaluated on the worst-group loss.

Stage 1 (τ-zCDP, Alg. 1): a private linear fit of the label on [x; 1] by Analyze-Gauss (one symmetric
Gaussian-noised moment matrix of rows clipped to norm U), then per group the noisy sum of clipped
squared residuals, s_k = √(S_k / n̂_k), and the budget weights w_k = s_k² / Σ s² (uniform when the
noisy moments are not positive definite or a noisy sum is ≤ 0).

Stage 2 (μ-zCDP, Alg. 3 with sums): T full-batch steps of projected DP gradient descent on
f(ℓ) + G·max(0, max_k ℓ_k − η). Per step and group, the clipped gradient sum (clip Δ) and the clipped
loss sum (losses clipped to [0, L]) each get ρ_k,t = μ w_k / (2T) of Gaussian noise
(std = sensitivity / √(2ρ)); the step is Σ_k M1_k / n̂ + G·1[violated]·M1_{k*} / n̂_{k*}, k* the noisy worst group,
then projection onto the box [−R, R]^P.

Allocation modes: ``tailored`` (DPSE), ``equal`` (DPNoSE, w_k = 1/K, no stage 1) and ``parallel``
(every group its full per-step budget, w_k = 1: valid by parallel composition for disjoint groups
under add/remove; the analysis in the docs shows it dominates any split).

Normalisers n̂ come from a Gaussian release of the group counts inside the budget (the paper
assumes group sizes public).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable, ClassVar

import torch
from dp_accounting.dp_event import GaussianDpEvent

from baselines.budget_tailoring.audit import tailoring_view
from raco_bench.methods.base import Budget, Context, Method, PrivacyPlan, check_positive
from raco_bench.models import Batch, build_model
from raco_bench.privacy import events
from raco_bench.privacy.calibration import CalibrationProblem, Knob
from raco_bench.privacy.counter_rng import GAUSSIAN, GROUP_COUNTS, SECOND_GAUSSIAN, STAGE_ONE, Stream

ALLOCATIONS = ("tailored", "equal", "parallel")


# ------------------------------------------------------------------ zCDP bookkeeping
def rho_for(epsilon: float, delta: float) -> float:
    """The largest ρ whose (ε, δ) conversion ε = ρ + 2√(ρ log(1/δ)) is ``epsilon``."""
    L = math.log(1 / delta)
    return (math.sqrt(L + epsilon) - math.sqrt(L)) ** 2 * (1 - 1e-9)  # a hair below, so rounding never overspends


def epsilon_for(rho: float, delta: float) -> float:
    """(ε, δ)-DP of ρ-zCDP (Bun & Steinke 2016, Prop. 1.3): ε = ρ + 2√(ρ log(1/δ))."""
    return rho + 2 * math.sqrt(rho * math.log(1 / delta))


def gaussian_std(sensitivity: float, rho: float) -> float:
    """Noise std of a ρ-zCDP Gaussian mechanism with L2 ``sensitivity``: Δ / √(2ρ)."""
    return sensitivity / math.sqrt(2 * rho)


@dataclass(frozen=True)
class ZCDPBudget:
    """How a run's ρ is spent: counts, stage 1 (τ), stage 2 (μ) and the private selection (if any)."""

    total: float
    counts: float
    selection: float
    stage1: float
    stage2: float

    @staticmethod
    def split(epsilon: float, delta: float, count_noise: float, stage1_share: float, tailored: bool,
              selection=None) -> "ZCDPBudget":
        counts = 1.0 / (2 * count_noise**2)  # L2 sensitivity 1 under add/remove
        sel = selection.count / (2 * selection.laplace_scale**2) if selection is not None else 0.0  # pure (1/b)-DP → (1/(2b²))-zCDP
        return ZCDPBudget.allot(rho_for(epsilon, delta), counts, sel, stage1_share, tailored,
                                f"raise count_noise or epsilon (epsilon={epsilon})")

    @staticmethod
    def allot(total: float, counts: float, selection: float, stage1_share: float, tailored: bool, fix: str) -> "ZCDPBudget":
        """Split ρ = ``total``: the count and selection releases first, then stage 1 (``stage1_share`` of the rest, tailored
        allocation only) and stage 2."""
        rest = total - counts - selection
        if rest <= 0:
            raise ValueError(f"the group-count release and the selection spend rho={counts + selection:.4g} >= the budget's rho={total:.4g}; {fix}")
        stage1 = stage1_share * rest if tailored else 0.0
        return ZCDPBudget(total, counts, selection, stage1, rest - stage1)


# ------------------------------------------------------------------ stage 1
def clip_rows(U: torch.Tensor, bound: float) -> torch.Tensor:
    return U * (bound / U.norm(dim=1, keepdim=True).clamp_min(1e-12)).clamp(max=1.0)


def noisy_moments(Z: torch.Tensor, row_bound: float, rho: float, normal: Callable[[int], torch.Tensor]) -> torch.Tensor:
    """Analyze-Gauss: Σ_i u_i u_iᵀ with u_i = clip(z_i, U), + a symmetric Gaussian matrix (upper triangle drawn,
    mirrored) of std U²/√(2ρ): one record moves the matrix by ‖u uᵀ‖_F = ‖u‖² ≤ U², so this is ρ-zCDP."""
    D = Z.shape[1]
    upper = torch.triu(torch.ones(D, D, dtype=torch.bool))
    noise = torch.zeros(D, D, dtype=torch.float64)
    noise[upper] = normal(int(upper.sum())).double() * gaussian_std(row_bound**2, rho)
    U = clip_rows(Z, row_bound)
    return U.T @ U + noise + noise.triu(1).T


def noisy_residual_sums(residual: torch.Tensor, group: torch.Tensor, n_groups: int, residual_clip: float, rho: float,
                        normal: Callable[[int], torch.Tensor]) -> torch.Tensor:
    """Per group Σ min(r_i², Δ_r²) + N(0, Δ_r⁴/(2ρ)): each release ρ-zCDP (sensitivity Δ_r²)."""
    sums = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, group, residual.double().square().clamp(0.0, residual_clip**2))
    return sums + normal(n_groups).double() * gaussian_std(residual_clip**2, rho)


def tailored_weights(X: torch.Tensor, target: torch.Tensor, group: torch.Tensor, n_groups: int, n_hat: torch.Tensor, rho: float,
                     row_bound: float, residual_clip: float, normal: Callable[[int], torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """Alg. 1: (w_k = s_k² / Σ s², s_k, uniform fallback used) from ρ-zCDP releases; ``normal(k)`` gives k unit Gaussians.

    ρ/(K+1) for the moment matrix of u = clip([x; 1; y], U) (Frobenius sensitivity U²), ρ/(K+1) for each
    group's sum of squared residuals clipped to [0, Δ_r²] (sensitivity Δ_r²)."""
    share = rho / (n_groups + 1)
    Z = torch.cat([X, torch.ones_like(X[:, :1]), target[:, None].to(X.dtype)], 1).double()
    moments = noisy_moments(Z, row_bound, share, normal)
    uniform = torch.full((n_groups,), 1.0 / n_groups, dtype=torch.float64)
    xtx, xty = moments[:-1, :-1], moments[:-1, -1]
    if float(torch.linalg.eigvalsh(xtx).min()) <= 0:
        return uniform, torch.full_like(uniform, math.nan), True
    beta = torch.linalg.solve(xtx, xty)
    sums = noisy_residual_sums(Z[:, -1] - Z[:, :-1] @ beta, group, n_groups, residual_clip, share, normal)
    if bool((sums <= 0).any()):
        return uniform, torch.full_like(uniform, math.nan), True
    se = torch.sqrt(sums / n_hat.double())
    return se.square() / se.square().sum(), se, False


# ------------------------------------------------------------------ stage 2
def group_noise_std(weights: torch.Tensor, rho_stage2: float, steps: int, sensitivity: float) -> torch.Tensor:
    """Std of group k's noise in each of its two releases per step: ρ_k,t = μ w_k / (2T)."""
    rho_kt = rho_stage2 * weights / (2 * steps)
    return sensitivity / torch.sqrt(2 * rho_kt)


def penalised_direction(grad_sums: torch.Tensor, loss_sums: torch.Tensor, n_hat: torch.Tensor, penalty: float, loss_bound: float) -> torch.Tensor:
    """∇h of f(ℓ) + G·max(0, max_k ℓ_k − η) from the noisy per-group sums (K × P and K): the mean gradient plus,
    when the noisy worst group's mean loss exceeds η, G times that group's mean gradient."""
    direction = grad_sums.sum(0) / n_hat.sum()
    means = loss_sums / n_hat
    worst = int(means.argmax())
    if penalty > 0 and float(means[worst]) - loss_bound >= 0:
        direction = direction + penalty * grad_sums[worst] / n_hat[worst]
    return direction


@dataclass(frozen=True)
class TailoringHyper:
    allocation: str = "tailored"  # tailored (DPSE) | equal (DPNoSE) | parallel
    penalty: float = 1.0  # G, the fixed multiplier of the worst-group term
    loss_bound: float = 0.0  # η, the bound on each group's mean loss (BGL)
    lr: float = 0.5  # constant step size
    grad_clip: float = 1.0  # Δ, per-example gradient clip
    loss_clip: float = 5.0  # L, per-example losses clipped to [0, L]
    stage1_share: float = 0.2  # τ / (τ + μ) (the paper's 0.2)
    row_bound: float = 5.0  # U, stage 1's row clip
    residual_clip: float = 1.0  # Δ_r, stage 1's residual clip
    count_noise: float = 50.0  # std of the Gaussian noise on the group counts
    box: float = 5.0  # R, projection onto [−R, R]^P (the paper's [−5, 5])
    default_steps: int = 30  # T (full-batch steps) when the run sets none
    rho: float | None = None  # the run's whole zCDP budget ρ; none = the largest (ε, δ) allows (accounted tuning sets it)
    model: str = "logistic"
    hidden: int = 64

    def validate(self) -> None:
        if self.allocation not in ALLOCATIONS:
            raise ValueError(f"invalid allocation={self.allocation!r}: choose one of {ALLOCATIONS}")
        check_positive(self, "penalty", "loss_bound", allow_zero=True)
        check_positive(self, "lr", "grad_clip", "loss_clip", "row_bound", "residual_clip", "count_noise", "box")
        if self.rho is not None and not (math.isfinite(self.rho) and self.rho > 0):
            raise ValueError(f"invalid rho={self.rho!r}: the zCDP budget must be a finite number > 0 (or none: from epsilon and delta)")
        if not 0 < self.stage1_share < 1:
            raise ValueError(f"invalid stage1_share={self.stage1_share!r}: must be in (0, 1)")
        if not isinstance(self.default_steps, int) or self.default_steps < 1:
            raise ValueError("default_steps must be a positive integer")
        if self.model not in ("logistic", "mlp"):
            raise ValueError(f"invalid model={self.model!r}: choose 'logistic' or 'mlp'")


@dataclass(frozen=True)
class TailoringPlan:
    model: object
    X: torch.Tensor
    y: torch.Tensor
    y_onehot: torch.Tensor
    sq_norms: torch.Tensor
    group: torch.Tensor
    rows: tuple  # row indices per group
    budget: ZCDPBudget


@dataclass
class TailoringState:
    params: dict
    step: int
    stream: Stream
    n_hat: torch.Tensor  # released group counts (floored at 1)
    weights: torch.Tensor  # budget weights w_k
    grad_std: torch.Tensor  # per group
    loss_std: torch.Tensor
    standard_errors: torch.Tensor
    fallback: bool
    last_worst: float = math.nan


@dataclass(frozen=True)
class RhoProblem(CalibrationProblem):
    """The largest zCDP budget ρ whose conversion ε = ρ + 2√(ρ log(1/δ)) fits ``target_epsilon`` (closed form)."""

    knob: ClassVar[Knob] = Knob("rho", integer=False, increasing=True)
    target_epsilon: float
    delta: float

    def key(self) -> str:
        return f"rho:{self.target_epsilon!r}:{self.delta!r}"

    def solve(self) -> float:
        return rho_for(self.target_epsilon, self.delta)

    def within_budget(self, value: float) -> bool:
        return value > 0 and epsilon_for(value, self.delta) <= self.target_epsilon


class BudgetTailoring(Method):
    name = "budget-tailoring"
    description = "privacy budget tailoring, DPSE (Alabi & Wiggins): zCDP DP-GD with a worst-group-loss penalty"
    private = True
    Hyper = TailoringHyper
    gamma_is_input = False
    style = ("#AAAAAA", "h")  # grey (#888888 looks like dp-fermi's red under protanopia: tests/test_report.py)
    doc = "docs/methods/budget-tailoring.md"

    def search_space(self, n_train: int) -> dict:
        from ray import tune

        return {"penalty": tune.choice([0.0, 0.5, 1.0, 2.0, 5.0, 10.0]), "loss_bound": tune.choice([0.0, 0.3, 0.5]),
                "lr": tune.loguniform(0.01, 2.0), "grad_clip": tune.choice([0.5, 1.0, 2.0, 5.0]),
                "stage1_share": tune.choice([0.1, 0.2, 0.3]), "default_steps": tune.choice([10, 30, 100])}

    def applicable(self, hyper: TailoringHyper) -> dict:
        drop = {"hidden"} if hyper.model != "mlp" else set()
        if hyper.allocation != "tailored":
            drop |= {"stage1_share", "row_bound", "residual_clip"}
        return {k: v for k, v in dataclasses.asdict(hyper).items() if k not in drop}

    def check_train_size(self, hyper, n_train: int) -> None:
        return None  # full batch

    def prepare(self, ctx: Context) -> None:
        h, ds, run, dev = ctx.hyper, ctx.dataset, ctx.config, ctx.device
        if ds.n_classes != 2:
            raise ValueError(f"budget-tailoring's stage 1 fits the label linearly; dataset {ds.name!r} has {ds.n_classes} classes (binary only)")
        T = run.steps or min(h.default_steps, run.max_steps)
        budget = self.zcdp_budget(h, ctx.budget)
        X = torch.as_tensor(ds.train.X, device=dev)
        y = torch.as_tensor(ds.train.y, device=dev)
        group = torch.as_tensor(ds.train.group, device=dev)
        rows = tuple(torch.nonzero(group == k)[:, 0] for k in range(ds.n_groups))
        ctx.plan = TailoringPlan(build_model(h.model, ds.n_features, 2, h.hidden), X, y, torch.nn.functional.one_hot(y, 2).to(X.dtype),
                                 X.pow(2).sum(1) + 1.0, group, rows, budget)
        ctx.steps = T
        composition = {"tailored": "sequential across groups (tailored weights)", "equal": "sequential across groups (equal weights)",
                       "parallel": "parallel across the disjoint groups (every group the full per-step budget)"}[h.allocation]
        accounting = (f"rho-zCDP, composed exactly: rho = {budget.total:.5g} = counts {budget.counts:.3g} + stage 1 {budget.stage1:.4g} "
                      f"+ stage 2 {budget.stage2:.4g} ({T} full-batch steps, {composition})"
                      + (f" + selection {budget.selection:.3g}" if run.selection else "")
                      + "; (epsilon, delta) by epsilon = rho + 2 sqrt(rho log(1/delta))")
        details = {"rho": budget.total, "rho_stage1": budget.stage1, "rho_stage2": budget.stage2, "rho_counts": budget.counts,
                   "allocation": h.allocation, "full_batch": True}
        ctx.privacy = PrivacyPlan(True, "record-level add/remove DP (rho-zCDP, converted)", accounting, run.delta, T, run.epsilon,
                                  epsilon_for(budget.total, run.delta), details=tuple(details.items())).as_dict()

    @staticmethod
    def zcdp_budget(hyper: TailoringHyper, budget: Budget) -> ZCDPBudget:
        """The run's ρ split: ρ from ``hyper.rho`` (checked against (ε, δ)) or the largest (ε, δ) allows."""
        sel = budget.selection
        if hyper.rho is None:
            return ZCDPBudget.split(budget.epsilon, budget.delta, hyper.count_noise, hyper.stage1_share, hyper.allocation == "tailored", sel)
        if epsilon_for(hyper.rho, budget.delta) > budget.epsilon * (1 + 1e-9):
            raise ValueError(f"rho={hyper.rho:g} spends epsilon={epsilon_for(hyper.rho, budget.delta):.4f} > the budget {budget.epsilon}; "
                             "lower rho or leave it unset")
        return ZCDPBudget.allot(hyper.rho, 1.0 / (2 * hyper.count_noise**2), sel.count / (2 * sel.laplace_scale**2) if sel else 0.0,
                                hyper.stage1_share, hyper.allocation == "tailored", f"raise count_noise or rho (rho={hyper.rho})")

    def tuning_knob(self, hyper: TailoringHyper, n_train: int, budget: Budget) -> "RhoProblem":
        """Accounted tuning sets ρ (the run's noise follows from it)."""
        return RhoProblem(budget.epsilon, budget.delta)

    def privacy_event(self, hyper: TailoringHyper, n_train: int, budget: Budget):
        """Every release but the selection is a Gaussian mechanism accounted at ρ_i = Δ_i²/(2σ_i²), so together they are
        one Gaussian of μ² = 2ρ (Gaussian composition is exact); then the selection's Laplace releases (not converted)."""
        z = self.zcdp_budget(hyper, budget)
        return events.compose(GaussianDpEvent(1.0 / math.sqrt(2 * (z.total - z.selection))), events.selection_event(budget.selection))

    def calibrated(self, problem: "RhoProblem", value: float) -> dict:
        return {"params": {"rho": value}}

    def audit_view(self, run, canary_row: int, engine=None):
        return tailoring_view(run, canary_row, engine)

    def init_state(self, ctx: Context, stream: Stream) -> TailoringState:
        """The count release and stage 1; the noise of every stage-2 release follows from them."""
        h, plan, G = ctx.hyper, ctx.plan, ctx.dataset.n_groups
        counts = torch.bincount(plan.group, minlength=G).double()
        n_hat = (counts + h.count_noise * stream.normal(0, G, GROUP_COUNTS, torch.float64)).clamp_min(1.0)
        se, fallback = torch.full((G,), math.nan, dtype=torch.float64), False
        if h.allocation == "tailored":
            draws = iter(range(1_000))
            normal = lambda k: stream.normal(next(draws), k, STAGE_ONE, torch.float64)  # noqa: E731
            weights, se, fallback = tailored_weights(plan.X, plan.y, plan.group, G, n_hat, plan.budget.stage1, h.row_bound,
                                                     h.residual_clip, normal)
        elif h.allocation == "equal":
            weights = torch.full((G,), 1.0 / G, dtype=torch.float64)
        else:
            weights = torch.ones(G, dtype=torch.float64)
        T = ctx.steps
        return TailoringState(plan.model.init(stream), 0, stream, n_hat, weights,
                              group_noise_std(weights, plan.budget.stage2, T, h.grad_clip),
                              group_noise_std(weights, plan.budget.stage2, T, h.loss_clip), se, fallback)

    def group_sums(self, ctx: Context, params: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """Per group: Σ clip(∇ℓ_i, Δ) flattened (K × P) and Σ min(ℓ_i, L) (K), exact."""
        h, plan = ctx.hyper, ctx.plan
        grads, losses = [], []
        for rows in plan.rows:
            Xk = plan.X[rows]
            z = plan.model.logits(params, Xk)
            probs = torch.softmax(z, 1)
            batch = Batch(Xk, plan.y[rows], plan.y_onehot[rows], plan.sq_norms[rows])
            g = plan.model.lagrangian_grad_sum(params, batch, probs, None, 1.0, h.grad_clip)
            grads.append(torch.cat([g[k].reshape(-1) for k in params]))
            losses.append(torch.nn.functional.cross_entropy(z, plan.y[rows], reduction="none").clamp(0.0, h.loss_clip).sum())
        return torch.stack(grads).double(), torch.stack(losses).double()

    def noisy_group_sums(self, ctx: Context, state: TailoringState, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Step t's releases: per group the clipped gradient and loss sums, each + Gaussian noise of its ρ_k,t."""
        grad_sums, loss_sums = self.group_sums(ctx, state.params)
        K, P = grad_sums.shape
        grad_sums = grad_sums + state.grad_std[:, None] * state.stream.normal(t, K * P, GAUSSIAN, torch.float64).view(K, P)
        return grad_sums, loss_sums + state.loss_std * state.stream.normal(t, K, SECOND_GAUSSIAN, torch.float64)

    def step(self, ctx: Context, state: TailoringState) -> TailoringState:
        h, t = ctx.hyper, state.step + 1
        with torch.no_grad():
            grad_sums, loss_sums = self.noisy_group_sums(ctx, state, t)
            direction = penalised_direction(grad_sums, loss_sums, state.n_hat, h.penalty, h.loss_bound)
            params, offset = {}, 0
            for name, p in state.params.items():
                d = direction[offset : offset + p.numel()].view_as(p).to(p.dtype)
                params[name] = (p - h.lr * d).clamp(-h.box, h.box)
                offset += p.numel()
        worst = float((loss_sums / state.n_hat).max())
        return dataclasses.replace(state, params=params, step=t, last_worst=worst)

    def report(self, ctx: Context, state: TailoringState) -> dict:
        out = {"noisy_worst_group_loss": state.last_worst, "stage1_fallback": float(state.fallback)}
        out.update({f"budget_weight_{k}": float(w) for k, w in enumerate(state.weights)})
        return out
