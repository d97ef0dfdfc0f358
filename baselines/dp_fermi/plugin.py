"""DP-FERMI (Lowy, Gupta, Razaviyayn, ICLR 2023), reimplemented from the paper (docs/methods/dp-fermi.md).

min_θ max_{W∈𝒲} L̂(θ) + λ·(1/n)Σ_i ψ̂_i(θ, W), by simultaneous stochastic gradient descent-ascent
with W_0 = 0, Poisson batches at rate q = m/n, averages divided by the expected batch size m and
projection of W onto a Frobenius ball of radius ``w_radius`` after every W step. λ (``fairness``)
is the fairness knob. Demographic parity uses the ERMI of (Ŷ, S); equalized odds one W_y per label
with P̂_{S|Y=y} (per-sample ψ̂ with the sample's own label: an unbiased estimate of the paper's
p̂_Y-weighted sum).

P̂_S (or P̂_{S|Y}) is released privately, inside the budget: Gaussian noise of std ``count_noise`` on
the group (or label × group) counts, once before training, then normalised (counts floored at 1).

Two privacy notions, named in every result, both accounted exactly with dp-accounting's PLD (one
:class:`~raco_bench.privacy.accounting.GaussianPlan`, the same object the sweep calibrates):

* ``privacy="full"``: record-level add/remove DP of (x, y, s), the notion RaCO-DP has. Per-sample
  θ-gradients of ℓ_i + λψ̂_i clipped to ``clip_theta``, per-sample W-gradients of ψ̂_i clipped to
  ``clip_w``; both sums get Gaussian noise σ·C and are divided by m. Both blocks come from one
  Poisson batch: one step is PoissonSampled(Gaussian(σ/√2)). The counts have L2 sensitivity 1.
* ``privacy="sensitive-attribute"``: the paper's notion (neighbours differ in one s_i; x and y are
  public), with the same clipping and noise as full mode. Flipping s_i moves one sampled record's
  clipped contribution to another point of the clip balls (dp-accounting's REPLACE_ONE relation,
  PoissonSampled(Gaussian(σ/√2))) and one unit between two counts (L2 sensitivity √2). The loss
  gradient must stay inside the clip although it depends only on public values: left unclipped, it
  would reveal whether a record was sampled and remove the amplification by subsampling
  (docs/methods/dp-fermi.md). Replace-one is a stronger adjacency than add/remove for the same
  mechanism, so this mode needs more noise than full mode at the same ε: its only use is to
  reproduce the paper's notion, labelled as such.

  The paper calibrates this mode with Theorem 3.3 instead (:func:`theorem_3_3_noise`, kept for
  reference only). It does not hold for this model as trained: it gives each of θ and W the whole
  ε although both are released from one batch, its θ-sensitivity assumes a one-output model (a
  2-logit softmax exceeds it), its Lipschitz constant is violated on real data, and its P̂_S is
  exact. Clipping enforces the sensitivities the accountant uses, whatever the model or data.

Not reproduced (documented defects of the official code): the one-cell regularizer, the group
order dependence, W_0 ~ N(0,1), shuffled epochs, the unweighted EO sum.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import torch
from dp_accounting.dp_event import GaussianDpEvent, PoissonSampledDpEvent, SelfComposedDpEvent

from baselines.dp_fermi.audit import fermi_view
from baselines.dp_fermi.engine import FermiEngine
from baselines.dp_fermi.ermi import linear_coefficients, project_frobenius, w_gradient_sum
from raco_bench.constraints.families import Family, family
from raco_bench.data.tensors import TrainData
from raco_bench.methods.base import Budget, Context, Method, PrivacyPlan, check_positive
from raco_bench.methods.common import check_batch, selection_note, train_tensors
from raco_bench.methods.space import ZeroOr
from raco_bench.models import Batch, build_model
from raco_bench.privacy import events
from raco_bench.privacy.accounting import GaussianPlan, SelectionRelease, plan_epsilon
from raco_bench.privacy.calibration import NoiseProblem
from raco_bench.privacy.counter_rng import GROUP_COUNTS, Stream

PRIVACY_MODES = ("full", "sensitive-attribute", "none")
# every step releases two blocks (θ, W) from one batch, each clipped and noised with the same multiplier σ
BLOCKS = 2
FAIRNESS = {"demographic-parity": "dp", "equalized-odds": "eo"}  # the notions ERMI regularises (a family's declared notion)


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
    noise_multiplier: float | None = None  # σ per block; none = calibrated from (ε, δ, T)
    count_noise: float = 50.0  # std of the Gaussian noise on the group counts behind P̂_S (private modes)
    default_steps: int = 1000  # T when the run sets no steps
    model: str = "logistic"
    hidden: int = 64

    def validate(self) -> None:
        if self.privacy not in PRIVACY_MODES:
            raise ValueError(f"invalid privacy={self.privacy!r}: choose one of {PRIVACY_MODES}")
        check_positive(self, "fairness", allow_zero=True)
        check_positive(self, "lr", "lr_w", "w_radius", "clip_theta", "clip_w", "count_noise")
        if self.noise_multiplier is not None:
            check_positive(self, "noise_multiplier")
        if not isinstance(self.batch_size, int) or self.batch_size < 1 or self.default_steps < 1:
            raise ValueError("batch_size and default_steps must be positive integers")
        if self.model not in ("logistic", "mlp"):
            raise ValueError(f"invalid model={self.model!r}: choose 'logistic' or 'mlp'")


def theorem_3_3_noise(lipschitz: float, radius: float, delta: float, steps: int, epsilon: float, n: int, rho: float) -> tuple[float, float]:
    """(σ_θ, σ_W) of DP-FERMI Theorem 3.3 (sensitive-attribute DP), for reference only: the suite does
    not calibrate with it (see the module docstring for why it does not hold as the model is trained).
    σ_θ² = 16 L² D² ln(1/δ) T / (ε² n² ρ),  σ_W² = 16 T ln(1/δ) / (ε² n² ρ)."""
    log_term = math.log(1 / delta)
    sigma_w = math.sqrt(16 * steps * log_term / (epsilon**2 * n**2 * rho))
    return lipschitz * radius * sigma_w, sigma_w


@dataclass
class FermiState:
    params: dict
    W: torch.Tensor  # (contexts, G, c)
    step: int
    stream: Stream
    inv_sqrt_p: torch.Tensor | None = None  # (contexts, G): 1/√p̂(s | context) from the released counts
    released_counts: torch.Tensor | None = None  # the one release of the (context, group) counts (noisy in private modes)
    batch: torch.Tensor | None = None  # the last step's Poisson sample (kept for tests and audits, never released)


def cell_counts(ctx_ids: np.ndarray, s: np.ndarray, n_ctx: int, G: int) -> np.ndarray:
    """Training rows per (context, group) cell: the statistic P̂_S (P̂_{S|Y}) is computed from."""
    counts = np.zeros((n_ctx, G))
    np.add.at(counts, (ctx_ids, s), 1.0)
    return counts


def conditional_rates(counts: np.ndarray | torch.Tensor):
    """p̂(s | context) from (noisy) counts, each floored at 1 so that every rate is positive."""
    if isinstance(counts, torch.Tensor):
        c = counts.clamp_min(1.0)
        return c / c.sum(1, keepdim=True)
    c = np.maximum(counts, 1.0)
    return c / c.sum(1, keepdims=True)


@dataclass(frozen=True)
class FermiPlan:
    """A DP-FERMI run, resolved: model, training tensors, per-sample contexts and the settings of its releases. In a
    private mode ``q`` and ``count_noise`` are read from the :class:`~raco_bench.privacy.accounting.GaussianPlan` the
    accountant composed, and ``sigma`` is the multiplier its ε was computed with: the step and the engine read them
    here, so they cannot differ from what was accounted (tests/test_step_accountant.py)."""

    model: object
    data: TrainData
    s: torch.Tensor  # group per training row
    ctx_ids: torch.Tensor  # context per training row (0 for DP, the label for EO)
    n_ctx: int
    q: float
    counts: torch.Tensor  # exact (context, group) counts; released with noise in init_state
    sigma: float
    count_noise: float = 0.0  # std of the count release (0: none, non-private)


class DPFermi(Method):
    name = "dp-fermi"
    description = "DP-FERMI: ERMI-regularised DP-SGDA (Lowy et al. 2023), reimplemented from the paper"
    private = True
    Hyper = DPFermiHyper
    gamma_is_input = False
    learning_rate_keys = ("lr", "lr_w")
    style = ("#EE6677", "s")  # Tol bright red
    doc = "docs/methods/dp-fermi.md"
    engine = FermiEngine

    def supports(self, family: Family) -> str | None:
        if family.notion in FAIRNESS:
            return None
        return f"dp-fermi regularises {' or '.join(FAIRNESS)} only (ERMI has no form for {family.name!r})"

    def search_space(self, n_train: int) -> dict:
        """λ = 0 in one configuration in ten (the unregularised anchor), else log-uniform (docs/methods/dp-fermi.md)."""
        from ray import tune

        from raco_bench.methods.common import batch_choices

        return {
            "fairness": ZeroOr(tune.loguniform(0.05, 10.0), 0.1),
            "lr": tune.loguniform(1e-3, 1.0), "lr_w": tune.loguniform(1e-3, 1.0),
            "clip_theta": tune.uniform(1.0, 5.0), "clip_w": tune.uniform(1.0, 5.0), "w_radius": tune.uniform(1.0, 5.0),
            "batch_size": tune.choice(batch_choices(n_train)),
        }

    def applicable(self, hyper: DPFermiHyper) -> dict:
        drop = {"hidden"} if hyper.model != "mlp" else set()
        if hyper.privacy == "none":
            drop |= {"clip_theta", "clip_w", "noise_multiplier", "count_noise"}
        return {k: v for k, v in dataclasses.asdict(hyper).items() if k not in drop}

    # ------------------------------------------------------------------ planning
    @staticmethod
    def planned_steps(hyper: DPFermiHyper, steps: int | None, max_steps: int) -> int:
        """T: the run's steps, else the default capped by ``max_steps`` (σ is calibrated for it)."""
        return steps or min(hyper.default_steps, max_steps)

    @staticmethod
    def privacy_plan(hyper: DPFermiHyper, n_train: int, steps: int, selection: SelectionRelease | None = None) -> GaussianPlan | None:
        """What a run releases, for the accountant (None: non-private)."""
        if hyper.privacy == "none":
            return None
        sa = hyper.privacy == "sensitive-attribute"
        return GaussianPlan(
            sampling_rate=hyper.batch_size / n_train, steps=steps, blocks=BLOCKS, count_noise=hyper.count_noise,
            count_sensitivity=math.sqrt(2.0) if sa else 1.0, relation="replace" if sa else "add-remove", selection=selection,
        )

    def calibration(self, hyper: DPFermiHyper, n_train: int, budget: Budget) -> NoiseProblem | None:
        """σ for the budget, unless the configuration fixes it (or is not private)."""
        plan = self.privacy_plan(hyper, n_train, self.planned_steps(hyper, budget.steps, budget.max_steps), budget.selection)
        if plan is None or hyper.noise_multiplier is not None:
            return None
        return NoiseProblem(plan, budget.epsilon, budget.delta)

    def privacy_event(self, hyper: DPFermiHyper, n_train: int, budget: Budget):
        """Record-level mode: the group counts' Gaussian release (L2 sensitivity 1), T Poisson-sampled steps whose two
        clipped blocks each get N(0, σ²C_b²) (one Gaussian of multiplier σ/√2 per unit of sensitivity), the selection."""
        if hyper.privacy == "none":
            return None
        if hyper.privacy != "full":
            raise events.UnsupportedEvent(f"dp-fermi privacy={hyper.privacy!r} is not a record-level claim (one sensitive attribute "
                                          "replaced); its events are stated under add/remove only with privacy=full")
        if hyper.noise_multiplier is None:
            raise ValueError("dp-fermi: the privacy event needs noise_multiplier; calibrate it first")
        plan = self.privacy_plan(hyper, n_train, self.planned_steps(hyper, budget.steps, budget.max_steps), budget.selection)
        step = PoissonSampledDpEvent(plan.sampling_rate, GaussianDpEvent(hyper.noise_multiplier / math.sqrt(plan.blocks)))
        counts = GaussianDpEvent(plan.count_noise) if plan.count_noise is not None else None
        return events.compose(SelfComposedDpEvent(step, plan.steps), counts, events.selection_event(budget.selection))

    def calibrated(self, problem: NoiseProblem, value: float) -> dict:
        return {"steps": problem.plan.steps, "params": {"noise_multiplier": value}}

    def prepare(self, ctx: Context) -> None:
        h, ds, run = ctx.hyper, ctx.dataset, ctx.config
        fam = family(run.constraint, run.constraint_spec)
        reason = self.supports(fam)
        if reason:
            raise ValueError(reason)
        eo = FAIRNESS[fam.notion] == "eo"
        q = check_batch(ctx, h.batch_size)  # validated here; a private run reads it from the accounted plan below
        T = self.planned_steps(h, run.steps, run.max_steps)
        n, G, c = ctx.n_train, ds.n_groups, ds.n_classes
        ctx_ids = ds.train.y if eo else np.zeros(n, dtype=np.int64)
        n_ctx = c if eo else 1
        dev = ctx.device
        data = train_tensors(ctx, with_parts=False)
        plan = self.privacy_plan(h, n, T, run.selection)
        sigma, count_noise = 0.0, 0.0
        if plan is not None:
            q, count_noise = plan.sampling_rate, plan.count_noise  # the step draws and noises what the accountant composed
            problem = self.calibration(h, n, ctx.budget)
            sigma = h.noise_multiplier if problem is None else ctx.cache.solve(problem)
            spent = plan_epsilon(plan, sigma, run.delta)
            if spent > run.epsilon * (1 + 1e-9):
                raise ValueError(f"noise_multiplier={sigma} with T={T} spends epsilon={spent:.4f} > the budget {run.epsilon}; raise it or leave it unset")
        ctx.plan = FermiPlan(
            model=build_model(h.model, ds.n_features, c, h.hidden), data=data, s=torch.as_tensor(ds.train.group, device=dev),
            ctx_ids=torch.as_tensor(ctx_ids, device=dev), n_ctx=n_ctx, q=q,
            counts=torch.as_tensor(cell_counts(ctx_ids, ds.train.group, n_ctx, G), dtype=data.X.dtype, device=dev), sigma=sigma,
            count_noise=count_noise,
        )
        ctx.steps = T
        if plan is None:
            ctx.privacy = PrivacyPlan.none(T, run.delta).as_dict()
            return
        sa = h.privacy == "sensitive-attribute"
        notion = ("sensitive-attribute DP only (DP-FERMI Def. 2.2; x and y public): NOT comparable with record-level DP" if sa
                  else "record-level add/remove DP (full)")
        accounting = (f"dp-accounting PLD ({'REPLACE_ONE' if sa else 'ADD_OR_REMOVE_ONE'}): Gaussian count release "
                      f"(L2 sensitivity {plan.count_sensitivity:.4g}) + {T} x PoissonSampled(Gaussian(sigma/sqrt(2))) "
                      "(theta and W blocks from one batch, each clipped)") + (selection_note(run.selection) if run.selection else "")
        details = {"sampling_rate": plan.sampling_rate, "privacy_mode": h.privacy, "noise_multiplier": sigma, "count_noise": plan.count_noise,
                   "count_sensitivity": plan.count_sensitivity, "neighbour_relation": plan.relation,
                   "group_proportions": f"P̂_S from group counts + N(0, {plan.count_noise}²), inside the budget"}
        ctx.privacy = PrivacyPlan(True, notion, accounting, run.delta, T, run.epsilon, spent, details=tuple(details.items())).as_dict()

    # ------------------------------------------------------------------ training
    def init_state(self, ctx: Context, stream: Stream) -> FermiState:
        """θ_0 from the model, W_0 = 0, and the one private release of the group counts (P̂_S)."""
        ds, h, plan = ctx.dataset, ctx.hyper, ctx.plan
        params = self.model(ctx).init(stream)
        counts = plan.counts
        if h.privacy != "none":
            counts = counts + plan.count_noise * stream.normal(0, counts.numel(), GROUP_COUNTS, counts.dtype).view_as(counts)
        W = torch.zeros(plan.n_ctx, ds.n_groups, ds.n_classes, device=ctx.device)
        return FermiState(params, W, 0, stream, conditional_rates(counts).rsqrt(), counts)

    def theta_gradient_sum(self, ctx: Context, params: dict, batch: Batch, F: torch.Tensor, coef: torch.Tensor) -> dict:
        """Σ_i clip(∇_θ(ℓ_i + λψ̂_i), C_θ) (no clipping without privacy); the model computes it."""
        clip = ctx.hyper.clip_theta if ctx.hyper.privacy != "none" else None
        return ctx.plan.model.lagrangian_grad_sum(params, batch, F, coef, 1.0, clip)

    def step(self, ctx: Context, state: FermiState) -> FermiState:
        h, plan, stream, t = ctx.hyper, ctx.plan, state.stream, state.step + 1
        model, data = plan.model, plan.data
        m = float(h.batch_size)
        private = h.privacy != "none"
        idx = stream.batch(t, ctx.n_train, plan.q)
        rows = data.table[idx]
        Xb, cb, sb = data.X[idx], plan.ctx_ids[idx], plan.s[idx]
        ipb = state.inv_sqrt_p[cb, sb]
        F = torch.softmax(model.logits(state.params, Xb), 1)
        coef = h.fairness * linear_coefficients(state.W, cb, sb, ipb)  # λψ̂_i = ⟨coef_i, F_i⟩ − λ
        gtheta = self.theta_gradient_sum(ctx, state.params, Batch(Xb, data.y[idx], data.labels_onehot(rows), data.sq_norms(rows)), F, coef)
        gw = w_gradient_sum(state.W, F, cb, sb, ipb, h.clip_w if private else None)

        # one Gaussian draw per step: θ's parameters in order, then W (unit draws, scaled by σ·C_θ and σ·C_W)
        z = stream.normal(t, sum(p.numel() for p in state.params.values()) + gw.numel(), dtype=gw.dtype) if private else None
        params, offset = {}, 0
        for name, p in state.params.items():
            gsum = gtheta[name]
            if private:
                gsum = gsum + plan.sigma * h.clip_theta * z[offset : offset + p.numel()].view_as(p)
                offset += p.numel()
            params[name] = p - h.lr * gsum / m
        if private:
            gw = gw + plan.sigma * h.clip_w * z[offset:].view_as(gw)
        W = project_frobenius(state.W + h.lr_w * h.fairness * gw / m, h.w_radius)
        return FermiState(params, W, t, stream, state.inv_sqrt_p, state.released_counts, idx)

    def audit_view(self, run, canary_row: int, engine=None):
        return fermi_view(run, canary_row, engine)

    def report(self, ctx: Context, state: FermiState) -> dict:
        return {"w_norm": float(state.W.norm())}


@dataclass(frozen=True)
class DPFermiAttributeOnlyHyper(DPFermiHyper):
    """DP-FERMI's hyperparameters with the paper's privacy notion fixed: sensitive-attribute-only DP."""

    privacy: str = "sensitive-attribute"

    def validate(self) -> None:
        super().validate()
        if self.privacy != "sensitive-attribute":
            raise ValueError(f"dp-fermi-a-only trains under sensitive-attribute DP only, got privacy={self.privacy!r}; "
                             "use method dp-fermi for record-level DP (privacy=full) or no privacy (privacy=none)")


class DPFermiAttributeOnly(DPFermi):
    """DP-FERMI as its paper evaluates it: only the sensitive attribute is private (x and y public), the comparison the
    RaCO-DP paper draws. Its own method, so that a study shows it as its own legend entry ("[A-only DP]") beside the
    record-level DP-FERMI and never selects across the two notions (docs/methods/dp-fermi.md, "Privacy modes")."""

    name = "dp-fermi-a-only"
    description = "DP-FERMI under sensitive-attribute-only DP (its paper's notion; NOT comparable with record-level DP)"
    Hyper = DPFermiAttributeOnlyHyper
    variant_of = "dp-fermi"
    style = ("#EE6677", "p")  # dp-fermi's colour, its own marker
    in_default_sweeps = False  # a study names it (the papers' comparison); a default sweep compares record-level guarantees
    published_as = ("dp-fermi", "A-only DP")  # DP-FERMI's published figure data are under this notion (docs/results.md)
