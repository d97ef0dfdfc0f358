"""DP-FERMI (Lowy, Gupta, Razaviyayn, ICLR 2023), reimplemented from the paper (dp_fermi_spec.md §5).

min_θ max_{W∈𝒲} L̂(θ) + λ·(1/n)Σ_i ψ̂_i(θ, W), by simultaneous stochastic gradient descent-ascent
with W_0 = 0, Poisson batches at rate q = m/n, averages divided by the expected batch size m and
projection of W onto a Frobenius ball of radius ``w_radius`` after every W step. λ (``fairness``)
is the fairness knob. Demographic parity uses the ERMI of (Ŷ, S); equalized odds one W_y per label
with P̂_{S|Y=y} (per-sample ψ̂ with the sample's own label: an unbiased estimate of the paper's
p̂_Y-weighted sum). P̂_S is computed from the training split (as in the paper).

Two privacy calibrations, named in every result:

* ``privacy="full"``: record-level add/remove DP of (x, y, s), the notion RaCO-DP has. Per-sample
  θ-gradients of ℓ_i + λψ̂_i clipped to ``clip_theta``, per-sample W-gradients of ψ̂_i clipped to
  ``clip_w``; both sums get Gaussian noise σ·C and are divided by m; λ multiplies the W block after
  the noise. Both blocks come from one Poisson batch, so one step is PoissonSampled(Gaussian(σ/√2))
  (joint L2 sensitivity √2 after scaling each block by its clip norm); σ is calibrated with
  dp-accounting's PLD accountant for the run's (ε, δ, T). P̂_S is outside the accounted budget
  (labelled).
* ``privacy="sensitive-attribute"``: the paper's weaker notion (neighbours differ in one s_i; x and y
  are public) with Theorem 3.3's noise, σ_θ = √(16 L_θ² D² ln(1/δ) T/(ε² n² ρ)) and
  σ_W = √(16 T ln(1/δ)/(ε² n² ρ)), applied with std λσ on both blocks. The loss gradient gets no
  noise. For logistic regression L_θ is checked against the data bound max‖[x;1]‖/4 and raised to it
  if needed; the theorem's conditions are checked before training.

Not reproduced (documented defects of the official code, spec §2): the one-cell regularizer, the group
order dependence, W_0 ~ N(0,1), shuffled epochs, the unweighted EO sum.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from baselines.ermi import linear_coefficients, project_frobenius, w_gradient_sum
from raco_bench.methods.base import Context, Method, check_positive
from raco_bench.methods.raco_dp import check_batch, train_tensors
from raco_bench.models import LogisticRegression, build_model
from raco_bench.privacy.accounting import gaussian_epsilon
from raco_bench.privacy.sampling import poisson_batch
from raco_bench.training.objective import lagrangian_residual, lagrangian_value

PRIVACY_MODES = ("full", "sensitive-attribute", "none")
# full mode releases two blocks (θ, W) from one batch, each clipped and noised with the same multiplier σ:
# after scaling each block by its clip norm the joint L2 sensitivity is √2, i.e. one Gaussian with σ/√2.
BLOCK_SENSITIVITY = math.sqrt(2.0)
FAIRNESS = {"demographic-parity": "dp", "equalized-odds": "eo"}


@dataclass(frozen=True)
class DPFermiHyper:
    fairness: float = 1.0  # λ, the fairness weight
    privacy: str = "full"  # full | sensitive-attribute | none
    batch_size: int = 1024  # expected batch size m (q = m/n)
    lr: float = 0.5  # η_θ
    lr_w: float = 0.5  # η_w
    w_radius: float = 5.0  # Frobenius-ball radius D of 𝒲
    clip_theta: float = 1.0  # C_θ (full)
    clip_w: float = 1.0  # C_W (full)
    noise_multiplier: float | None = None  # full: σ; none = calibrated from (ε, δ, T)
    lipschitz_theta: float = 5.0  # L_θ (sensitive-attribute)
    default_steps: int = 1000  # T when the run sets no steps
    model: str = "logistic"
    hidden: int = 64

    def validate(self) -> None:
        if self.privacy not in PRIVACY_MODES:
            raise ValueError(f"invalid privacy={self.privacy!r}: choose one of {PRIVACY_MODES}")
        check_positive(self, "fairness", allow_zero=True)
        check_positive(self, "lr", "lr_w", "w_radius", "clip_theta", "clip_w", "lipschitz_theta")
        if self.noise_multiplier is not None:
            check_positive(self, "noise_multiplier")
        if not isinstance(self.batch_size, int) or self.batch_size < 1 or self.default_steps < 1:
            raise ValueError("batch_size and default_steps must be positive integers")
        if self.model not in ("logistic", "mlp"):
            raise ValueError(f"invalid model={self.model!r}: choose 'logistic' or 'mlp'")


def theorem_3_3_noise(lipschitz: float, radius: float, delta: float, steps: int, epsilon: float, n: int, rho: float) -> tuple[float, float]:
    """(σ_θ, σ_W) of DP-FERMI Theorem 3.3 (sensitive-attribute DP):
    σ_θ² = 16 L² D² ln(1/δ) T / (ε² n² ρ),  σ_W² = 16 T ln(1/δ) / (ε² n² ρ)."""
    log_term = math.log(1 / delta)
    sigma_w = math.sqrt(16 * steps * log_term / (epsilon**2 * n**2 * rho))
    return lipschitz * radius * sigma_w, sigma_w


@dataclass
class FermiState:
    params: dict
    W: torch.Tensor  # (contexts, G, c)
    step: int
    generator: torch.Generator


def _conditional_group_rates(ctx_ids: np.ndarray, s: np.ndarray, n_ctx: int, G: int) -> np.ndarray:
    counts = np.zeros((n_ctx, G))
    np.add.at(counts, (ctx_ids, s), 1.0)
    return counts / np.maximum(counts.sum(1, keepdims=True), 1.0)


class DPFermi(Method):
    name = "dp-fermi"
    description = "DP-FERMI: ERMI-regularised DP-SGDA (Lowy et al. 2023), reimplemented from the paper"
    private = True
    Hyper = DPFermiHyper

    # ------------------------------------------------------------------ planning
    @staticmethod
    def planned_steps(hyper: DPFermiHyper, steps: int | None, max_steps: int) -> int:
        """T: the run's steps, else the default capped by ``max_steps`` (the sweep driver calibrates σ for it)."""
        return steps or min(hyper.default_steps, max_steps)

    def prepare(self, ctx: Context) -> None:
        h, ds, run = ctx.hyper, ctx.dataset, ctx.run
        if run.constraint not in FAIRNESS:
            raise ValueError(f"dp-fermi regularises {' or '.join(FAIRNESS)}; got constraint {run.constraint!r}")
        eo = FAIRNESS[run.constraint] == "eo"
        q = check_batch(ctx, h.batch_size)
        T = self.planned_steps(h, run.steps, run.max_steps)
        n, G, c = ctx.n_train, ds.n_groups, ds.n_classes
        ctx_ids = ds.train.y if eo else np.zeros(n, dtype=np.int64)
        n_ctx = c if eo else 1
        cond = _conditional_group_rates(ctx_ids, ds.train.group, n_ctx, G)
        p_i = cond[ctx_ids, ds.train.group]
        dev = ctx.device
        data = train_tensors(ctx, with_parts=False)
        ctx.extra.update(
            model=build_model(h.model, ds.n_features, c, h.hidden), data=data, s=torch.as_tensor(ds.train.group, device=dev),
            ctx_ids=torch.as_tensor(ctx_ids, device=dev), inv_sqrt_p=torch.as_tensor(1.0 / np.sqrt(p_i), dtype=data.X.dtype, device=dev),
            n_ctx=n_ctx, q=q,
        )
        ctx.steps = T
        base = {"delta": run.delta, "steps": T, "sampling_rate": q, "privacy_mode": h.privacy,
                "group_proportions_note": "P̂_S (or P̂_{S|Y}) is computed exactly from the training split, outside the accounted budget"}
        if h.privacy == "none":
            ctx.extra.update(sigma=0.0, sigma_theta=0.0, sigma_w=0.0)
            ctx.privacy = {**base, "private": False, "notion": "none", "epsilon_spent": math.inf, "accounting": "none (non-private)"}
        elif h.privacy == "full":
            sigma = h.noise_multiplier if h.noise_multiplier is not None else ctx.cache.noise_multiplier(q, T, run.epsilon, run.delta) * BLOCK_SENSITIVITY
            spent = gaussian_epsilon(sigma / BLOCK_SENSITIVITY, q, T, run.delta)
            if spent > run.epsilon * (1 + 1e-9):
                raise ValueError(f"noise_multiplier={sigma} with T={T} spends epsilon={spent:.4f} > the budget {run.epsilon}; raise it or leave it unset")
            ctx.extra.update(sigma=sigma)
            ctx.privacy = {**base, "private": True, "notion": "record-level add/remove DP (full)", "target_epsilon": run.epsilon,
                           "epsilon_spent": spent, "noise_multiplier": sigma,
                           "accounting": "dp-accounting PLD: PoissonSampled(Gaussian(sigma/sqrt(2))) per step (theta and W blocks from one batch)"}
        else:
            ctx.privacy = {**base, **self._sensitive_attribute_plan(ctx, ctx_ids, T, eo)}

    def _sensitive_attribute_plan(self, ctx: Context, ctx_ids: np.ndarray, T: int, eo: bool) -> dict:
        h, ds, run = ctx.hyper, ctx.dataset, ctx.run
        n, m, eps, delta = ctx.n_train, h.batch_size, run.epsilon, run.delta
        cells = ds.train.y * ds.n_groups + ds.train.group if eo else ds.train.group
        counts = np.bincount(cells)
        counts = counts[counts > 0]
        rho = (counts.min() - 1) / n if not eo else counts.min() / n
        if rho <= 0:
            raise ValueError("sensitive-attribute calibration needs every non-empty group to hold at least 2 training rows (rho > 0)")
        if eps > 2 * math.log(1 / delta):
            raise ValueError(f"Theorem 3.3 needs epsilon <= 2 ln(1/delta) = {2 * math.log(1 / delta):.3f}")
        t_min = math.ceil((n * math.sqrt(eps) / (2 * m)) ** 2)
        if T < t_min:
            raise ValueError(f"Theorem 3.3 needs T >= (n sqrt(eps) / (2m))^2 = {t_min} steps; set --steps {t_min} or more")
        L = h.lipschitz_theta
        if isinstance(ctx.extra["model"], LogisticRegression):
            data_bound = float(np.sqrt((ds.train.X.astype(np.float64) ** 2).sum(1).max() + 1.0) / 4.0)
            L = max(L, data_bound)  # the bound must hold on the data (spec §5.1)
        else:
            raise ValueError("sensitive-attribute calibration is implemented for logistic regression (the paper's tabular model)")
        sigma_theta, sigma_w = theorem_3_3_noise(L, h.w_radius, delta, T, eps, n, rho)
        ctx.extra.update(sigma_theta=sigma_theta, sigma_w=sigma_w)
        return {"private": True, "notion": "sensitive-attribute DP only (DP-FERMI Def. 2.2; x and y public): NOT comparable with record-level DP",
                "target_epsilon": eps, "epsilon_spent": eps, "accounting": "DP-FERMI Theorem 3.3 noise formula",
                "rho": rho, "lipschitz_theta_used": L, "sigma_theta": sigma_theta, "sigma_w": sigma_w, "theorem_conditions_hold": True}

    # ------------------------------------------------------------------ training
    def init_state(self, ctx: Context, generator: torch.Generator) -> FermiState:
        ds = ctx.dataset
        W = torch.zeros(ctx.extra["n_ctx"], ds.n_groups, ds.n_classes, device=ctx.device)
        return FermiState(self.model(ctx).init(generator, ctx.device), W, 0, generator)

    def step(self, ctx: Context, state: FermiState) -> FermiState:
        h, e, g = ctx.hyper, ctx.extra, state.generator
        model, data = e["model"], e["data"]
        m = float(h.batch_size)
        idx = poisson_batch(ctx.n_train, e["q"], g, ctx.device)
        rows = data.table[idx]
        Xb, cb, sb, ipb = data.X[idx], e["ctx_ids"][idx], e["s"][idx], e["inv_sqrt_p"][idx]
        F = torch.softmax(model.logits(state.params, Xb), 1)
        coef = h.fairness * linear_coefficients(state.W, cb, sb, ipb)  # λψ̂_i = ⟨coef_i, F_i⟩ − λ
        full = h.privacy == "full"
        clip_theta = h.clip_theta if full else None
        if isinstance(model, LogisticRegression):
            residual = lagrangian_residual(F, data.labels_onehot(rows), coef, 1.0)
            gtheta = model.clipped_grad_sum(state.params, Xb, residual, clip_theta, data.sq_norms(rows))
        else:
            objective = lambda z, yi, ci: lagrangian_value(z, yi, ci, 1.0)  # noqa: E731
            gtheta = model.clipped_grad_sum_of(state.params, Xb, objective, data.y[idx], coef, clip_theta)
        gw = w_gradient_sum(state.W, F, cb, sb, ipb, h.clip_w if full else None)

        params = {}
        for name, p in state.params.items():
            grad = gtheta[name] / m
            if full:
                grad = grad + e["sigma"] * h.clip_theta / m * torch.randn(p.shape, generator=g, device=p.device, dtype=p.dtype)
            elif h.privacy == "sensitive-attribute" and h.fairness > 0:
                grad = grad + h.fairness * e["sigma_theta"] * torch.randn(p.shape, generator=g, device=p.device, dtype=p.dtype)
            params[name] = p - h.lr * grad
        wgrad = gw / m
        if full:
            wgrad = wgrad + e["sigma"] * h.clip_w / m * torch.randn(wgrad.shape, generator=g, device=wgrad.device, dtype=wgrad.dtype)
        elif h.privacy == "sensitive-attribute":
            wgrad = wgrad + e["sigma_w"] * torch.randn(wgrad.shape, generator=g, device=wgrad.device, dtype=wgrad.dtype)
        W = project_frobenius(state.W + h.lr_w * h.fairness * wgrad, h.w_radius)
        return FermiState(params, W, state.step + 1, g)

    def report(self, ctx: Context, state: FermiState) -> dict:
        return {"w_norm": float(state.W.norm())}
