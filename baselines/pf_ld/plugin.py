"""PF-LD: Private and Fair Lagrangian Dual (Tran, Fioretto, Van Hentenryck, AAAI 2021), reimplemented
from the paper with the decisions of docs/methods/pf-ld.md.

min_θ J(θ) + Σ_i λ_i |μ(D_{P_i}) − μ(D_{G_i})| with μ(S) the mean soft score P(ŷ = 1 | x) over S:
demographic parity compares each group {A = a} with the whole population, equalized odds each
(A = a, Y = y) cell with {Y = y}. The group is not a model input.

**Privacy notion: sensitive-attribute DP only** (neighbours differ in one record's group a_i; x and
y are public). It is weaker than the record-level DP of RaCO-DP, and every result says so.

Each step (paper eq. 8, as reconstructed in the docs):

* the public part, exact and unnoised: ∇_θ [J(θ; B) + Σ_i λ_i s_i μ(B_{P_i})] (it reads only x, y; μ(B_P) divides
  by the expected count q·|D_P|, as the group terms do);
* the private part: Σ_i λ_i s_i (1/N̄_i) Σ_{z ∈ B_{G_i}} clip(∇_θ h(z), C_p) + N(0, σ_p² Δ_p² I), with
  N̄_i = q·n̂_i the expected batch count of the cell from *released* counts n̂ and
  Δ_p = 2 λ_max C_p / min_i N̄_i (Thm 1: moving one record between two cells changes two terms);
* θ ← θ − η (public − private).

Every epoch (``round(n / B)`` steps) the dual step (eq. 10) releases the signed violations
v_i = μ(D_{P_i}) − Σ_{z ∈ G_i} min(h(z), C_d) / n̂_i + N(0, σ_d² Δ_d²), Δ_d = √2 C_d / min_i n̂_i (Thm 2),
then λ_i ← clip(λ_i + s |ṽ_i|, 0, λ_max) and s_i ← sign(ṽ_i): the sign the primal step needs is
post-processing of this release (gap 1 of the paper).

Accounting (docs/methods/pf-ld.md): the unnoised public gradient depends on which rows were sampled, so
the released θ may reveal the batch, and amplification by subsampling (which needs it hidden) is not
claimed. A step that did not sample the record whose group differs still has privacy loss 0, so the
suite accounts the T primal releases exactly as a Binomial(T, q) mixture of Gaussian compositions,
with the E dual releases and the count release composed in
(:mod:`raco_bench.privacy.batch_revealed`). ``noise_multiplier`` σ is the noise of one Gaussian of
the same mean privacy loss: σ_p = σ √(qT / (1 − s)) and σ_d = σ √(E / s), s = ``dual_share``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import torch
from torch.func import grad, vmap

from raco_bench.constraints.families import Family, family
from raco_bench.data.tensors import TrainData
from raco_bench.methods.base import Budget, Context, Method, PrivacyPlan, check_positive
from raco_bench.methods.common import batch_choices, check_batch, selection_note, train_tensors
from raco_bench.methods.space import ZeroOr
from raco_bench.models import LogisticRegression, build_model
from raco_bench.privacy.batch_revealed import RevealedBatchNoise
from raco_bench.privacy.counter_rng import GAUSSIAN, GROUP_COUNTS, SECOND_GAUSSIAN, Stream

PRIVACY_MODES = ("sensitive-attribute", "none")
CONSTRAINTS = ("demographic-parity", "equalized-odds")  # the notions it enforces (a family's declared notion)
COUNT_SENSITIVITY = math.sqrt(2.0)  # moving one record between two cells: L2 shift √2 of the count vector


def selection_epsilon(selection) -> float:
    """Pure ε of a private checkpoint selection when one group changes: each release's validation counts move
    between two cells (an L1 shift of 2), so each costs 2 / scale."""
    return 0.0 if selection is None else 2.0 * selection.count / selection.laplace_scale


@dataclass(frozen=True)
class PFLDHyper:
    lambda_max: float = 1.0  # λ_max, the cap of every multiplier: PF-LD's fairness knob (0: plain SGD)
    lr: float = 0.3  # α
    dual_lr: float = 0.1  # s, the dual step
    batch_size: int = 1024  # expected batch size (Poisson, q = B / n)
    clip_primal: float = 1.0  # C_p, the clip of each ∇h(z) in the group terms (the paper used 10; docs/methods/pf-ld.md)
    clip_dual: float = 1.0  # C_d, the clip of h in the dual release (h ∈ [0, 1], so 1 is a no-op)
    dual_share: float = 0.25  # share of the Gaussian budget (in 1/σ²) spent by the dual releases
    count_noise: float = 50.0  # std of the Gaussian noise on the cell counts (normalisers)
    noise_multiplier: float | None = None  # σ: one Gaussian of the run's mean privacy loss; none = calibrated
    privacy: str = "sensitive-attribute"  # sensitive-attribute | none (non-private F-LD)
    default_steps: int = 300  # T when the run sets no steps (every primal step costs budget: no amplification)
    model: str = "logistic"
    hidden: int = 64

    def validate(self) -> None:
        if self.privacy not in PRIVACY_MODES:
            raise ValueError(f"invalid privacy={self.privacy!r}: choose one of {PRIVACY_MODES}")
        check_positive(self, "lambda_max", allow_zero=True)
        check_positive(self, "lr", "dual_lr", "clip_primal", "clip_dual", "count_noise")
        if not 0 < self.dual_share < 1:
            raise ValueError(f"invalid dual_share={self.dual_share!r}: the dual's share of the budget must be in (0, 1)")
        if self.noise_multiplier is not None:
            check_positive(self, "noise_multiplier")
        if not isinstance(self.batch_size, int) or self.batch_size < 1 or self.default_steps < 1:
            raise ValueError("batch_size and default_steps must be positive integers")
        if self.model not in ("logistic", "mlp"):
            raise ValueError(f"invalid model={self.model!r}: choose 'logistic' or 'mlp'")


@dataclass(frozen=True)
class PFLDPlan:
    """A PF-LD run, resolved: the model, the tensors, the cells and the noise of each release. In private mode ``q``,
    ``epoch`` and the multipliers are read from the accountant (:class:`RevealedBatchNoise`) whose ε the run reports, so
    the step cannot draw or noise other than what was accounted (tests/test_step_accountant.py)."""

    model: object
    data: TrainData
    cells: torch.Tensor  # the constraint cell of each training row (group, or label·G + group)
    populations: torch.Tensor  # the population of each cell (0 = everyone, or the label)
    row_population: torch.Tensor  # the population of each training row
    population_sizes: torch.Tensor  # exact, public (they depend on y only)
    counts: torch.Tensor  # exact cell counts, released with noise in init_state
    q: float
    epoch: int  # steps between dual releases
    sigma: float  # σ of the whole run (0: non-private)
    sigma_primal: float
    sigma_dual: float
    count_noise: float = 0.0  # std of the cell-count release (0: none, non-private)


@dataclass
class PFLDState:
    params: dict
    lam: torch.Tensor  # one multiplier per cell
    sign: torch.Tensor  # sign of the last released violation per cell
    step: int
    stream: Stream
    n_hat: torch.Tensor  # released cell counts (floored at 1): every normaliser
    last_violation: torch.Tensor | None = None
    batch: torch.Tensor | None = None  # the last step's Poisson sample (kept for tests and audits, never released)


def score_grads(model, params: dict, X: torch.Tensor) -> dict:
    """Per-sample gradients of h(x) = softmax(z(x))₁, the soft score of the positive class (any model)."""
    def h(p: dict, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(model.logits(p, x[None])[0], 0)[1]

    return vmap(grad(h), in_dims=(None, 0))(params, X)


def _factors(norms: torch.Tensor, clip: float | None) -> torch.Tensor:
    return torch.ones_like(norms) if clip is None else (clip / norms.clamp_min(1e-12)).clamp(max=1.0)


def clipped_score_sum(model, params: dict, X: torch.Tensor, weights: torch.Tensor, clip: float | None) -> dict:
    """Σ_j w_j clip(∇_θ h(x_j), C). Logistic regression in closed form (∇h = r ⊗ [x; 1] with r = p₁(e₁ − p), so
    ‖∇h‖ = ‖r‖·√(‖x‖² + 1)); any other model by per-sample autodiff (:func:`score_grads`)."""
    if isinstance(model, LogisticRegression):
        p = torch.softmax(model.logits(params, X), 1)
        r = p[:, 1:2] * (torch.nn.functional.one_hot(torch.ones_like(X[:, 0], dtype=torch.int64), 2).to(p.dtype) - p)
        norms = r.norm(dim=1) * torch.sqrt(X.square().sum(1) + 1.0)
        return model.clipped_grad_sum(params, X, r * (weights * _factors(norms, clip))[:, None], None)
    grads = score_grads(model, params, X)
    norms = torch.sqrt(sum(g.flatten(1).square().sum(1) for g in grads.values()))
    return {k: torch.tensordot(weights * _factors(norms, clip), g, dims=1) for k, g in grads.items()}


def primal_sensitivity(lambda_max: float, clip: float, expected_cell_batch: torch.Tensor) -> float:
    """Δ_p = 2 λ_max C_p / min_i N̄_i (Thm 1 with public normalisers): a record moving between two cells."""
    return 2.0 * lambda_max * clip / float(expected_cell_batch.min())


def dual_sensitivity(clip: float, n_hat: torch.Tensor) -> float:
    """Δ_d = √2 C_d / min_i n̂_i (Thm 2 with released normalisers)."""
    return math.sqrt(2.0) * clip / float(n_hat.min())


class PFLD(Method):
    name = "pf-ld"
    description = "PF-LD: private and fair Lagrangian dual (Tran et al. 2021), sensitive-attribute DP only"
    private = True
    Hyper = PFLDHyper
    gamma_is_input = False
    style = ("#66CCEE", "X")  # Tol bright cyan
    doc = "docs/methods/pf-ld.md"

    def supports(self, family: Family) -> str | None:
        if family.notion in CONSTRAINTS:
            return None
        return f"pf-ld enforces {' or '.join(CONSTRAINTS)} only (its constraints are group-vs-population equalities)"

    def search_space(self, n_train: int) -> dict:
        """Ranges of docs/methods/pf-ld.md; λ_max = 0 (plain SGD) in one configuration in ten."""
        from ray import tune

        return {
            "lambda_max": ZeroOr(tune.loguniform(0.1, 50.0), 0.1), "lr": tune.loguniform(0.01, 1.0),
            "dual_lr": tune.loguniform(0.01, 10.0), "clip_primal": tune.choice([1.0, 5.0, 10.0, 20.0, 50.0]),
            "dual_share": tune.choice([0.1, 0.25, 0.5]), "batch_size": tune.choice(batch_choices(n_train)),
            "default_steps": tune.choice([100, 300, 1000]),
        }

    def applicable(self, hyper: PFLDHyper) -> dict:
        drop = {"hidden"} if hyper.model != "mlp" else set()
        if hyper.privacy == "none":
            drop |= {"clip_primal", "clip_dual", "dual_share", "count_noise", "noise_multiplier"}
        return {k: v for k, v in dataclasses.asdict(hyper).items() if k not in drop}

    @staticmethod
    def schedule(hyper: PFLDHyper, n_train: int, steps: int | None, max_steps: int) -> tuple[int, int]:
        """(T, steps between dual releases): T is the run's steps or the default capped by ``max_steps``; a dual
        release every epoch (round(n / B) steps)."""
        return steps or min(hyper.default_steps, max_steps), max(1, round(n_train / hyper.batch_size))

    def calibration(self, hyper: PFLDHyper, n_train: int, budget: Budget) -> RevealedBatchNoise | None:
        """σ for the budget (the private selection's pure ε, if any, comes off it first), unless fixed or non-private."""
        if hyper.privacy == "none" or hyper.noise_multiplier is not None:
            return None
        return self.accountant(hyper, n_train, budget, budget.epsilon - selection_epsilon(budget.selection))

    def accountant(self, hyper: PFLDHyper, n_train: int, budget: Budget, target: float) -> RevealedBatchNoise:
        T, epoch = self.schedule(hyper, n_train, budget.steps, budget.max_steps)
        if not target > 0:
            raise ValueError(f"the private checkpoint selection alone spends the budget epsilon={budget.epsilon}; raise selection_noise")
        return RevealedBatchNoise(steps=T, sampling_rate=hyper.batch_size / n_train, unsampled=T // epoch, unsampled_share=hyper.dual_share,
                                  fixed_mu2=COUNT_SENSITIVITY**2 / hyper.count_noise**2, target_epsilon=target, delta=budget.delta)

    @staticmethod
    def accounted_count_noise(accountant: RevealedBatchNoise) -> float:
        """The std of the cell-count release the accountant composed (its μ² = Δ²/std², Δ = √2; ∞ where it composed none)."""
        return COUNT_SENSITIVITY / math.sqrt(accountant.fixed_mu2) if accountant.fixed_mu2 > 0 else math.inf

    def calibrated(self, problem: RevealedBatchNoise, value: float) -> dict:
        return {"steps": problem.steps, "params": {"noise_multiplier": value}}

    def prepare(self, ctx: Context) -> None:
        h, ds, run = ctx.hyper, ctx.dataset, ctx.config
        fam = family(run.constraint, run.constraint_spec)
        reason = self.supports(fam)
        if reason:
            raise ValueError(reason)
        if ds.n_classes != 2:
            raise ValueError(f"pf-ld is for binary classification; dataset {ds.name!r} has {ds.n_classes} classes")
        q = check_batch(ctx, h.batch_size)  # validated here; a private run reads it from its accountant below
        n, G, dev = ctx.n_train, ds.n_groups, ctx.device
        T, epoch = self.schedule(h, n, run.steps, run.max_steps)
        eo = fam.notion == "equalized-odds"
        y, group = ds.train.y.astype(np.int64), ds.train.group.astype(np.int64)
        cells = y * G + group if eo else group
        n_cells = 2 * G if eo else G
        populations = np.repeat(np.arange(2), G) if eo else np.zeros(G, dtype=np.int64)
        row_population = y if eo else np.zeros(n, dtype=np.int64)
        data = train_tensors(ctx, with_parts=False)
        private = h.privacy != "none"
        sigma, sigma_p, sigma_d, spent, count_noise = 0.0, 0.0, 0.0, math.inf, 0.0
        if private:
            selection_eps = selection_epsilon(run.selection)
            accountant = self.accountant(h, n, ctx.budget, run.epsilon - selection_eps)
            sigma = h.noise_multiplier if h.noise_multiplier is not None else ctx.cache.solve(accountant)
            spent = accountant.spent(sigma) + selection_eps
            if spent > run.epsilon * (1 + 1e-9):
                raise ValueError(f"noise_multiplier={sigma} spends epsilon={spent:.4f} > the budget {run.epsilon}; raise it or leave it unset")
            sigma_p, sigma_d = accountant.multipliers(sigma)
            # the step reads what the accountant composed: its sampling rate, T and count noise (its T // epoch dual releases
            # are the schedule's, which the accountant was built from)
            q, T, count_noise = accountant.sampling_rate, accountant.steps, self.accounted_count_noise(accountant)
        as_t = lambda a, dtype=torch.int64: torch.as_tensor(a, dtype=dtype, device=dev)  # noqa: E731
        ctx.plan = PFLDPlan(
            model=build_model(h.model, ds.n_features, 2, h.hidden), data=data, cells=as_t(cells), populations=as_t(populations),
            row_population=as_t(row_population), population_sizes=as_t(np.bincount(row_population, minlength=2), data.X.dtype),
            counts=as_t(np.bincount(cells, minlength=n_cells), data.X.dtype), q=q, epoch=epoch, sigma=sigma,
            sigma_primal=sigma_p, sigma_dual=sigma_d,
            count_noise=count_noise,
        )
        ctx.steps = T
        if not private:
            ctx.privacy = PrivacyPlan.none(T, run.delta).as_dict()
            return
        accounting = (f"exact, batch revealed: {T} primal Gaussian releases at q = {q:.4g} with no amplification claimed (the unnoised "
                      f"public gradient may reveal the batch; a step that did not sample the record adds no loss: Binomial(T, q) mixture), "
                      f"{T // epoch} full-data dual releases and the Gaussian cell-count release (shift √2)")
        accounting += (selection_note(run.selection) + " (pure DP, composed by addition)") if run.selection else ""
        details = {"privacy_mode": h.privacy, "sampling_rate": q, "noise_multiplier": sigma, "noise_multiplier_primal": sigma_p,
                   "noise_multiplier_dual": sigma_d, "dual_every": epoch, "count_noise": count_noise, "neighbour_relation": "one group changed",
                   "group_counts": f"normalisers from cell counts + N(0, {count_noise:.6g}²), inside the budget"}
        notion = "sensitive-attribute DP only (x and y public; neighbours differ in one group): NOT comparable with record-level DP"
        ctx.privacy = PrivacyPlan(True, notion, accounting, run.delta, T, run.epsilon, spent, details=tuple(details.items())).as_dict()

    # ------------------------------------------------------------------ training
    def init_state(self, ctx: Context, stream: Stream) -> PFLDState:
        """θ_0, λ = 0 and the one release of the cell counts (floored at 1)."""
        plan, h = ctx.plan, ctx.hyper
        counts = plan.counts
        if h.privacy != "none":
            counts = counts + plan.count_noise * stream.normal(0, counts.numel(), GROUP_COUNTS, counts.dtype)
        zeros = torch.zeros_like(counts)
        return PFLDState(plan.model.init(stream), zeros, zeros.clone(), 0, stream, counts.clamp_min(1.0))

    def step(self, ctx: Context, state: PFLDState) -> PFLDState:
        h, plan, t = ctx.hyper, ctx.plan, state.step + 1
        private = h.privacy != "none"
        idx = state.stream.batch(t, ctx.n_train, plan.q)
        Xb, yb, cb, pb = plan.data.X[idx], plan.data.y[idx], plan.cells[idx], plan.row_population[idx]
        coef = state.lam * state.sign  # λ_i s_i per cell

        # public part: ∇[J(θ; B) + Σ_i λ_i s_i μ(B_{P_i})], exact (x and y only)
        params = {k: v.detach().requires_grad_(True) for k, v in state.params.items()}
        z = plan.model.logits(params, Xb)
        score = torch.softmax(z, 1)[:, 1]
        pop_batch = (plan.q * plan.population_sizes).clamp_min(1.0)  # expected, like the group terms' q·n̂ (exact: y is public)
        pop_coef = torch.zeros(2, dtype=z.dtype, device=z.device).index_add_(0, plan.populations, coef)
        public = torch.nn.functional.cross_entropy(z, yb, reduction="sum") / h.batch_size + (score * (pop_coef / pop_batch)[pb]).sum()
        public_grad = dict(zip(params, torch.autograd.grad(public, list(params.values()))))

        # private part: Σ_i λ_i s_i (1/N̄_i) Σ_{z ∈ B_{G_i}} clip(∇h(z), C_p) + N(0, σ_p² Δ_p² I)
        expected = (plan.q * state.n_hat).clamp_min(1.0)
        weights = (coef / expected)[cb]
        if bool((weights != 0).any()):
            private_sum = clipped_score_sum(plan.model, state.params, Xb, weights, h.clip_primal if private else None)
        else:
            private_sum = {k: torch.zeros_like(v) for k, v in state.params.items()}
        if private:
            std = plan.sigma_primal * primal_sensitivity(h.lambda_max, h.clip_primal, expected)
            noise = state.stream.normal(t, sum(p.numel() for p in state.params.values()), GAUSSIAN, Xb.dtype)
            offset = 0
            for name, p in state.params.items():
                private_sum[name] = private_sum[name] + std * noise[offset : offset + p.numel()].view_as(p)
                offset += p.numel()
        new_params = {k: (p - h.lr * (public_grad[k] - private_sum[k])).detach() for k, p in state.params.items()}
        new = PFLDState(new_params, state.lam, state.sign, t, state.stream, state.n_hat, state.last_violation, idx)
        if t % plan.epoch == 0:
            new = self.dual_step(ctx, new)
        return new

    def dual_step(self, ctx: Context, state: PFLDState) -> PFLDState:
        """Eq. 10 on the whole training set: release the signed violations, then λ ← clip(λ + s|ṽ|, 0, λ_max)."""
        h, plan = ctx.hyper, ctx.plan
        private = h.privacy != "none"
        with torch.no_grad():
            score = torch.softmax(plan.model.logits(state.params, plan.data.X), 1)[:, 1]
            if private:
                score = score.clamp(max=h.clip_dual)
            n_cells = state.n_hat.numel()
            cell_mean = torch.zeros(n_cells, dtype=score.dtype, device=score.device).index_add_(0, plan.cells, score) / state.n_hat
            pop_mean = torch.zeros(2, dtype=score.dtype, device=score.device).index_add_(0, plan.row_population, score) / plan.population_sizes.clamp_min(1.0)
            v = pop_mean[plan.populations] - cell_mean
            if private and math.isfinite(plan.sigma_dual):
                std = plan.sigma_dual * dual_sensitivity(h.clip_dual, state.n_hat)
                v = v + std * state.stream.normal(state.step, n_cells, SECOND_GAUSSIAN, v.dtype)
            lam = (state.lam + h.dual_lr * v.abs()).clamp(0.0, h.lambda_max)
        return PFLDState(state.params, lam, torch.sign(v), state.step, state.stream, state.n_hat, v, state.batch)

    def report(self, ctx: Context, state: PFLDState) -> dict:
        out = {"lambda_max": float(state.lam.max())}
        if state.last_violation is not None:
            out["noisy_violation_max" if ctx.hyper.privacy != "none" else "violation_max_nonprivate"] = float(state.last_violation.abs().max())
        return out
