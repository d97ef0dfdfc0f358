"""DP post-processing (Jagielski et al., ICML 2019, their first algorithm): a private version of Hardt,
Price & Srebro's derived predictor, generalised to any rate constraint (docs/methods/dp-postprocess.md).

1. A base classifier Ŷ is trained without the group: DP-SGD (``privacy="full"``) or plain SGD
   (``privacy="sensitive-attribute"``, where x and y are public).
2. After its last step, one release: the confusion histogram n[y, a, ŷ] of Ŷ on the training rows,
   each cell + Laplace(b). Its L1 sensitivity is 1 under add/remove (one record is in one cell) and
   2 when one record's group changes.
3. A linear program picks the randomised predictor Ỹ with P(Ỹ = 1 | Ŷ = ŷ, A = a) = p[a, ŷ]: minimise the
   noisy error subject to the run's rate constraints Γ_j(p) ≤ γ_j on the noisy histogram. Every rate
   of Ỹ is linear in p given the counts, so any constraint of the suite (demographic parity,
   equalized odds, FNR, custom) is one LP row. A slack variable per constraint, priced far above
   the error, keeps the LP feasible when the noisy counts make it infeasible.

**Ỹ needs the group at prediction time** (disparate treatment). Every result, legend and page
says so. Its metrics are those of one seeded draw of Ỹ on each split (hard metrics) and of its
prediction probabilities (soft values and group losses).

Privacy (docs/methods/dp-postprocess.md): ``full`` spends ``histogram_share`` of ε on the histogram
(Laplace scale 1/(share·ε)) and calibrates the base model's T for the rest; the printed ε is the
exact PLD composition of both (dp-accounting), never more than ε. ``sensitive-attribute``: the
histogram alone, Laplace scale 2/ε, pure ε-DP with respect to the group.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch
from dp_accounting.dp_event import LaplaceDpEvent, SelfComposedDpEvent
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from baselines.dp_postprocess.audit import postprocess_view
from raco_bench.methods.base import Budget, Context, Method, PrivacyPlan, check_positive
from raco_bench.methods.common import batch_choices, check_batch, plan_steps, selection_note, train_tensors
from raco_bench.methods.lagrangian.step import StepSettings, TrainState, sgda_step
from raco_bench.models import build_model
from raco_bench.privacy import events
from raco_bench.privacy.accounting import DISCRETIZATION, StepMechanism, selection_for, selection_pld, smallest_noise_within, step_pld
from raco_bench.privacy.calibration import StepsProblem
from raco_bench.privacy.counter_rng import LAPLACE, PREDICTION, Stream

PRIVACY_MODES = ("full", "sensitive-attribute")
SLACK_PRICE = 100.0  # LP price of one unit of constraint violation, against an error in [0, 1]


@dataclass(frozen=True)
class DPPostprocessHyper:
    privacy: str = "full"  # full (record-level DP, DP-SGD base) | sensitive-attribute (non-private base)
    histogram_share: float = 0.2  # full: share of ε spent by the confusion histogram
    batch_size: int = 1024  # base model: expected batch size
    lr: float = 0.5  # base model: learning rate
    noise_multiplier: float = 4.0  # base model (full): σ of DP-SGD
    clip_norm: float = 1.0  # base model (full): C
    default_steps: int = 2000  # base model's T in sensitive-attribute mode (full: calibrated)
    model: str = "logistic"
    hidden: int = 64

    def validate(self) -> None:
        if self.privacy not in PRIVACY_MODES:
            raise ValueError(f"invalid privacy={self.privacy!r}: choose one of {PRIVACY_MODES}")
        if not 0 < self.histogram_share < 1:
            raise ValueError(f"invalid histogram_share={self.histogram_share!r}: the histogram's share of epsilon must be in (0, 1)")
        check_positive(self, "lr", "noise_multiplier", "clip_norm")
        if not isinstance(self.batch_size, int) or self.batch_size < 1 or self.default_steps < 1:
            raise ValueError("batch_size and default_steps must be positive integers")
        if self.model not in ("logistic", "mlp"):
            raise ValueError(f"invalid model={self.model!r}: choose 'logistic' or 'mlp'")


@dataclass(frozen=True)
class PostprocessPlan:
    model: object
    data: object  # TrainData
    settings: StepSettings
    group: torch.Tensor
    laplace_scale: float  # per histogram cell
    lp_rates: tuple  # (CompiledRates in float64, part of each (label, group) cell), for the LP


@dataclass
class PostprocessState:
    base: TrainState
    table: torch.Tensor | None = None  # p[a, ŷ] = P(Ỹ = 1 | Ŷ = ŷ, A = a), G × 2, after the last step
    lp_violation: float | None = None  # the LP's slack (0: the noisy constraints hold)
    released: torch.Tensor | None = None  # the noisy confusion histogram (the one private release)

    @property
    def step(self) -> int:
        return self.base.step


def confusion_counts(y: torch.Tensor, group: torch.Tensor, pred: torch.Tensor, n_groups: int) -> torch.Tensor:
    """n[y, a, ŷ]: training rows per (label, group, base prediction), 2 × G × 2 (float64)."""
    cell = (y * n_groups + group) * 2 + pred
    return torch.bincount(cell, minlength=4 * n_groups).double().view(2, n_groups, 2)


def release_confusion(counts: torch.Tensor, scale: float, stream: Stream, step: int) -> torch.Tensor:
    """The one private release: every confusion cell + Laplace(``scale``) from the run's stream."""
    return counts + scale * stream.laplace(step, counts.numel(), LAPLACE, torch.float64).cpu().view_as(counts)


def derived_histograms(counts: torch.Tensor, table: torch.Tensor, parts: np.ndarray, n_parts: int) -> torch.Tensor:
    """Expected prediction histograms H[l, k] of Ỹ per part, for K tables p (K × G × 2): K × P × 2.
    ``parts[y, a]`` is the part of the (label, group) cell."""
    ones = (counts[None] * table[:, None]).sum(-1)  # K × y × a: expected Ỹ = 1 per cell
    totals = counts.sum(-1)[None].expand_as(ones)
    H = torch.zeros(table.shape[0], n_parts, 2, dtype=counts.dtype)
    idx = torch.as_tensor(parts.reshape(-1))
    H[:, :, 1].index_add_(1, idx, ones.reshape(table.shape[0], -1))
    H[:, :, 0].index_add_(1, idx, (totals - ones).reshape(table.shape[0], -1))
    return H


def solve_derived_predictor(counts: torch.Tensor, rates, gamma: np.ndarray, parts: np.ndarray) -> tuple[torch.Tensor, float]:
    """The LP: p minimising the error on ``counts`` (2 × G × 2, clamped at 0) subject to Γ(p) ≤ γ + slack, p ∈ [0, 1];
    returns (p as G × 2, total slack). Γ is affine in p, so its map is read from 1 + 2G evaluations."""
    from scipy.optimize import linprog

    G = counts.shape[1]
    n = counts.clamp_min(0.0)
    m = 2 * G
    basis = torch.cat([torch.zeros(1, m, dtype=torch.float64), torch.eye(m, dtype=torch.float64)]).view(m + 1, G, 2)
    values = rates.values(derived_histograms(n, basis, parts, rates.n_parts)).numpy()  # (m+1) × J
    offset, A = values[0], (values[1:] - values[0]).T  # Γ(p) = offset + A p
    total = max(float(n.sum()), 1.0)
    error = ((n[0] - n[1]) / total).reshape(-1).numpy()  # error = const + Σ (n[0,a,ŷ] − n[1,a,ŷ]) p[a,ŷ] / N
    J = A.shape[0]
    cost = np.concatenate([error, np.full(J, SLACK_PRICE)])
    A_ub = np.hstack([A, -np.eye(J)])
    result = linprog(cost, A_ub=A_ub, b_ub=gamma - offset, bounds=[(0, 1)] * m + [(0, None)] * J, method="highs")
    if result.status != 0:
        raise RuntimeError(f"the post-processing LP failed: {result.message}")
    return torch.as_tensor(result.x[:m], dtype=torch.float64).view(G, 2).clamp(0.0, 1.0), float(result.x[m:].sum())


def postprocess_epsilon(mech: StepMechanism | None, steps: int, histogram: float, histogram_sensitivity: float, delta: float,
                        selection=None, relation: str = "add-remove") -> float:
    """ε of the whole run: ``steps`` base steps (if private), the Laplace histogram and the private selection (if any), one PLD."""
    pld = pld_lib.from_laplace_mechanism(histogram / histogram_sensitivity, value_discretization_interval=DISCRETIZATION)
    if mech is not None:
        pld = pld.compose(step_pld(mech).self_compose(steps))
    if selection is not None:
        pld = pld.compose(selection_pld(selection_for(selection, relation)))
    return float(pld.get_epsilon_for_delta(delta))


class DPPostprocess(Method):
    name = "dp-postprocess"
    description = "DP post-processing (Jagielski et al. 2019): noisy confusion histogram + LP; USES THE GROUP AT PREDICTION"
    private = True
    Hyper = DPPostprocessHyper
    gamma_is_input = True
    style = ("#000000", "*")
    doc = "docs/methods/dp-postprocess.md"
    final_only = True
    pyfunc_model = True  # a randomised predictor with a group input column (raco_bench/tracking/pyfunc.py)

    def search_space(self, n_train: int) -> dict:
        from ray import tune

        return {"lr": tune.loguniform(1e-3, 1.0), "batch_size": tune.choice(batch_choices(n_train)),
                "noise_multiplier": tune.uniform(1.0, 10.0), "clip_norm": tune.loguniform(0.3, 10.0),
                "histogram_share": tune.choice([0.05, 0.1, 0.2, 0.4])}

    def applicable(self, hyper: DPPostprocessHyper) -> dict:
        drop = {"hidden"} if hyper.model != "mlp" else set()
        drop |= {"histogram_share", "noise_multiplier", "clip_norm"} if hyper.privacy != "full" else {"default_steps"}
        return {k: v for k, v in dataclasses.asdict(hyper).items() if k not in drop}

    @staticmethod
    def base_mechanism(hyper: DPPostprocessHyper, n_train: int) -> StepMechanism | None:
        return StepMechanism(hyper.batch_size / n_train, hyper.noise_multiplier) if hyper.privacy == "full" else None

    @staticmethod
    def selection(run_selection):
        """The private selection as this method makes it: its model exists only after the last step, so the run
        releases one noisy validation count vector (``final_only``), and one is what is charged."""
        return None if run_selection is None else dataclasses.replace(run_selection, count=1)

    def calibration(self, hyper: DPPostprocessHyper, n_train: int, budget: Budget) -> StepsProblem | None:
        """T of the DP-SGD base for (1 − histogram_share)·ε (full mode; the histogram takes the rest)."""
        mech = self.base_mechanism(hyper, n_train)
        if mech is None:
            return None
        return StepsProblem(mech, (1 - hyper.histogram_share) * budget.epsilon, budget.delta, budget.max_steps, self.selection(budget.selection))

    def privacy_event(self, hyper: DPPostprocessHyper, n_train: int, budget: Budget):
        """Record-level mode: T DP-SGD base steps, the Laplace confusion histogram (scale 1/(share·ε), L1 sensitivity 1)
        and the one selection release."""
        if hyper.privacy != "full":
            raise events.UnsupportedEvent("dp-postprocess privacy='sensitive-attribute' is not a record-level claim (its base model is "
                                          "not private); its events are stated under add/remove only with privacy=full")
        if budget.steps is None:
            raise ValueError("dp-postprocess: the privacy event needs T (budget.steps); calibrate it first")
        base = SelfComposedDpEvent(events.step_event(self.base_mechanism(hyper, n_train)), int(budget.steps))
        return events.compose(base, LaplaceDpEvent(self.histogram_scale(hyper, budget.epsilon)), events.selection_event(self.selection(budget.selection)))

    @staticmethod
    def histogram_scale(hyper: DPPostprocessHyper, epsilon: float) -> float:
        """The confusion histogram's Laplace scale in record-level mode: its share of the budget, pure DP."""
        return 1.0 / (hyper.histogram_share * epsilon)

    def calibrated(self, problem: StepsProblem, value: float) -> dict:
        if int(value) == 0:
            return {"skip": "the privacy budget does not allow a single base-model step with this configuration"}
        return {"steps": int(value)}

    def prepare(self, ctx: Context) -> None:
        h, ds, run = ctx.hyper, ctx.dataset, ctx.config
        if ds.n_classes != 2:
            raise ValueError(f"dp-postprocess derives a binary predictor; dataset {ds.name!r} has {ds.n_classes} classes")
        q = check_batch(ctx, h.batch_size)
        full = h.privacy == "full"
        problem = self.calibration(h, ctx.n_train, ctx.budget)
        T = plan_steps(ctx, problem, h.default_steps)
        selection = self.selection(run.selection)
        if full:
            scale, sensitivity, relation = self.histogram_scale(h, run.epsilon), 1.0, "add-remove"
        else:
            selection_eps = 2.0 * selection.count / selection.laplace_scale if selection else 0.0
            if selection_eps >= run.epsilon:
                raise ValueError(f"the private checkpoint selection alone spends epsilon={selection_eps:g} >= the budget {run.epsilon}; "
                                 "raise selection_noise or use checkpoint=last")
            scale, sensitivity, relation = 2.0 / (run.epsilon - selection_eps), 2.0, "replace"
        mech = self.base_mechanism(h, ctx.n_train)
        spent = postprocess_epsilon(mech, T, scale, sensitivity, run.delta, selection, relation)  # what the settings below read
        if spent > run.epsilon * (1 + 1e-6):
            raise ValueError(f"this configuration spends epsilon={spent:.4f} > the budget {run.epsilon}; lower steps or raise the noise")
        settings = StepSettings(  # the base steps draw and noise as the accounted mechanism says (q alone where it is not private)
            sampling_rate=mech.sampling_rate if full else q, expected_batch=float(h.batch_size), clip_norm=h.clip_norm if full else None,
            noise_std=mech.noise_multiplier * h.clip_norm if full else 0.0, laplace_scale=None, temperature=1.0, lr=h.lr,
            dual_lr=1.0, dual_update="soft", histogram_batch="shared", lambda_max=None, dual_momentum=0.0, clip_constraint_value=False,
        )
        parts = ctx.problem.partition.assign(np.repeat(np.arange(2), ds.n_groups), np.tile(np.arange(ds.n_groups), 2)).reshape(2, ds.n_groups)
        ctx.plan = PostprocessPlan(build_model(h.model, ds.n_features, 2, h.hidden), train_tensors(ctx, with_parts=False), settings,
                                   torch.as_tensor(ds.train.group, device=ctx.device), scale,
                                   (ctx.problem.compile("cpu", torch.float64), parts))
        ctx.steps = T
        if full:
            notion = "record-level add/remove DP (full); the derived predictor USES THE GROUP AT PREDICTION"
            accounting = (f"dp-accounting PLD: {T} x PoissonSampled(Gaussian({h.noise_multiplier:g})) base steps (calibrated for "
                          f"{1 - h.histogram_share:g} of epsilon) + one Laplace({scale:.4g}) confusion histogram (L1 sensitivity 1)")
        else:
            notion = ("sensitive-attribute DP only (x and y public; the base model is not private): NOT comparable with record-level DP; "
                      "the derived predictor USES THE GROUP AT PREDICTION")
            accounting = f"one Laplace({scale:.4g}) confusion histogram, L1 sensitivity 2 (one group changed): pure DP"
        accounting += selection_note(selection) if selection else ""
        details = {"privacy_mode": h.privacy, "sampling_rate": settings.sampling_rate, "histogram_laplace_scale": scale,
                   "histogram_sensitivity": sensitivity, "neighbour_relation": relation, "needs_group_at_prediction": True}
        if full:
            details["noise_multiplier"] = mech.noise_multiplier
        ctx.privacy = PrivacyPlan(True, notion, accounting, run.delta, T, run.epsilon, spent, details=tuple(details.items())).as_dict()

    def audit_view(self, run, canary_row: int, engine=None):
        return postprocess_view(run, canary_row, engine)

    def audit_noise(self, hyper: DPPostprocessHyper, sampling_rate: float, steps: int, epsilon_: float, delta: float) -> dict:
        """The base model's σ scaled until its ``steps`` steps and the histogram (its share of ``epsilon_``) spend ``epsilon_``."""
        scale = self.histogram_scale(hyper, epsilon_)

        def spent(sigma: float) -> float:
            return postprocess_epsilon(StepMechanism(sampling_rate, sigma), steps, scale, 1.0, delta)

        return {"noise_multiplier": smallest_noise_within(spent, epsilon_, 1e6, "the audited run cannot meet the claim")}

    def init_state(self, ctx: Context, stream: Stream) -> PostprocessState:
        zeros = torch.zeros(0, device=ctx.device)
        return PostprocessState(TrainState(ctx.plan.model.init(stream), zeros, zeros.clone(), 0, stream))

    def step(self, ctx: Context, state: PostprocessState) -> PostprocessState:
        plan = ctx.plan
        base, release = sgda_step(state.base, plan.data, plan.model, plan.settings, None)
        base.last_release = release  # its batch, kept for tests and audits (never released)
        if base.step < ctx.steps:
            return PostprocessState(base)
        return self.postprocess(ctx, base)

    def postprocess(self, ctx: Context, base: TrainState) -> PostprocessState:
        """The one histogram release and the LP, after the base model's last step."""
        plan, ds = ctx.plan, ctx.dataset
        with torch.no_grad():
            pred = plan.model.logits(base.params, plan.data.X).argmax(1)
        counts = release_confusion(confusion_counts(plan.data.y.cpu(), plan.group.cpu(), pred.cpu(), ds.n_groups), plan.laplace_scale,
                                   base.stream, base.step)
        rates, parts = plan.lp_rates
        table, slack = solve_derived_predictor(counts, rates, ctx.problem.gamma, parts)
        return PostprocessState(base, table.to(ctx.device), slack, counts)

    def params(self, state: PostprocessState) -> dict:
        params = dict(state.base.params)
        if state.table is not None:
            params["postprocess"] = state.table
        return params

    def eval_outputs(self, ctx: Context, params: dict, split) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probabilities of Ỹ and one seeded draw of it; before the post-processing, the base model."""
        base = {k: v for k, v in params.items() if k != "postprocess"}
        logits = ctx.plan.model.logits(base, split.X)
        table = params.get("postprocess")
        if table is None:
            return logits, None
        p1 = table.to(logits.dtype)[split.group, logits.argmax(1)]
        u = ctx.stream().uniform(0, len(p1), PREDICTION, logits.dtype).to(logits.device)
        probs = torch.stack([1 - p1, p1], 1).clamp_min(1e-6)
        return probs.log(), (u < p1).long()

    def report(self, ctx: Context, state: PostprocessState) -> dict:
        return {} if state.lp_violation is None else {"lp_slack": state.lp_violation}


__all__ = ["DPPostprocess", "confusion_counts", "derived_histograms", "postprocess_epsilon", "release_confusion", "solve_derived_predictor"]
