"""The white-box audit: many one-step (or few-step) runs with and without a canary, observing what each
step releases, through the suite's own batched engines (docs/audit.md).

World D is a configuration's training rows; world D′ adds one canary record. Each run draws its own
seed; in both worlds a run releases, step by step, the noisy sum of clipped gradients (and, for
RaCO-DP, the Laplace histogram), exactly as :func:`raco_bench.methods.lagrangian.engine.step_release` or
:func:`baselines.dp_fermi.engine.fermi_release` compute them when the configuration trains. The auditor
is the strongest one that DP must withstand: it knows every record but the canary, every
intermediate model and which other records each batch holds (Poisson sampling hides only the
canary's own inclusion). So it subtracts the other records' exact contribution (the same step
replayed without noise on D, with the run's seed: the same batch of other rows) and is left with
noise, plus the canary's clipped contribution when the canary was sampled.

Its statistic is the likelihood ratio of the claimed mechanism, per step
    L_t = Σ_blocks (⟨g, v⟩ − ‖v‖²/2) / s_b²   (Gaussian blocks, noise std s_b, canary contribution v)
        + Σ_cells (|h| − |h − u|) / s_L      (the Laplace histogram, canary mass u),
composed over steps as Σ_t log(1 − q + q·e^{L_t}) (the Poisson mixture); with each release block alone
(the gradient, the histogram, DP-FERMI's W) as more candidates, so that a mechanism broken in one
release is not hidden by another's noise. Which statistic and threshold is chosen on half of the runs and the
other half is counted (:func:`raco_bench.audit.bounds.audit_best`).

The starting model is chosen by the auditor (DP holds for every data-independent initial model): a
bias that makes every prediction confident, so that the canary's soft prediction puts its whole
histogram mass in one cell, the worst case the Laplace release is accounted for. The canary is a
training row with its label flipped and its features scaled up, so that its gradient is clipped to
exactly C.

How tight the audit can be with its number of runs is measured, not guessed: the same statistic and
bound on runs simulated from the accountant's own worst case (:func:`ideal_epsilon`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from raco_bench.audit.bounds import AuditBound, audit_best, check_confidence, require_record_level
from raco_bench.methods import DEFAULT_METHOD
from raco_bench.methods.audit_view import CANARY_SCALE, AuditView
from raco_bench.packs.tensors import take_rows


def auditable() -> tuple[str, ...]:
    """The methods whose plugin gives an audit view (``Method.audit_view``)."""
    from raco_bench.methods import registry

    return tuple(name for name, cls in registry().items() if cls.auditable())


@dataclass(frozen=True)
class WhiteBoxAudit:
    method: str = DEFAULT_METHOD
    dataset: str = "adult"
    epsilon: float = 1.0  # the claimed ε of the audited run (its noise is calibrated to it)
    delta: float = 1e-5
    steps: int = 1  # T of each audited run
    runs: int = 100_000  # per world
    rows: int | None = 4096  # training rows of D (None: all); q is kept, so the expected batch shrinks with it
    sampling_rate: float | None = None  # q of the audited runs (default: the configuration's B / n_train)
    confidence: float = 0.95
    params: tuple = ()  # hyperparameter overrides, as (key, value) pairs
    seed: int = 0
    device: str = "cpu"

    def validate(self) -> None:
        if self.method not in auditable():
            raise ValueError(f"the white-box audit covers {', '.join(auditable())}; got method={self.method!r} "
                             "(other methods: the one-run audit, `raco-bench audit one-run`)")
        if not (self.epsilon > 0 and math.isfinite(self.epsilon)):
            raise ValueError(f"invalid epsilon={self.epsilon!r}: the claimed budget must be a finite number > 0")
        if not isinstance(self.steps, int) or self.steps < 1:
            raise ValueError(f"invalid steps={self.steps!r}: an audited run takes at least one step")
        if not isinstance(self.runs, int) or self.runs < 20:
            raise ValueError(f"invalid runs={self.runs!r}: at least 20 runs per world (half choose the test, half count)")
        if self.rows is not None and self.rows < 16:
            raise ValueError(f"invalid rows={self.rows!r}: keep at least 16 training rows (or none: all)")
        if self.sampling_rate is not None and not 0 < self.sampling_rate <= 1:
            raise ValueError(f"invalid sampling_rate={self.sampling_rate!r}: must be in (0, 1]")
        check_confidence(self.confidence)


@dataclass(frozen=True)
class AuditResult:
    audit: WhiteBoxAudit
    bound: AuditBound
    claimed_epsilon: float
    ideal: AuditBound  # the same audit on the accountant's own worst case: what this many runs can show
    statistic: str  # the candidate statistic the selection half chose
    point_epsilon: float  # ln(TPR / FPR) on the counted half (no confidence margin; inf when FPR = 0)
    settings: dict  # what the audited runs used: q, expected batch, clipping, noise
    seconds: float
    unobserved: str = ""  # what the claim covers that the audit view does not observe
    observed: tuple[str, ...] = ("gradient",)  # the release blocks the audit saw

    def summary(self) -> str:
        b = self.bound
        return (f"{self.audit.method} on {self.audit.dataset}, {self.audit.steps} step(s), q = {self.settings['sampling_rate']:.4g}, "
                f"{b.runs_per_world} runs per world: audited epsilon >= {b.epsilon_lower:.3f} at {b.confidence:.0%} confidence "
                f"(interval [{b.epsilon_lower:.3f}, {b.epsilon_upper:.3f}]) "
                f"(statistic {self.statistic}; TPR {b.true_positive_rate:.4f}, FPR {b.false_positive_rate:.4f} on the counted half) "
                f"against a claimed epsilon of {self.claimed_epsilon:.3f}; with this many runs an exact implementation of the claim "
                f"reaches {self.ideal.epsilon_lower:.3f} ({self.seconds:.0f} s)")

    def params(self) -> dict:
        """What MLflow records of the audit: its settings, and what the audited runs used."""
        a = self.audit
        return {"method": a.method, "dataset": a.dataset, "epsilon": a.epsilon, "delta": a.delta, "steps": a.steps, "runs": a.runs,
                "confidence": a.confidence, "seed": a.seed, "statistic": self.statistic, "variant": "white-box", **self.settings, **dict(a.params)}

    def note(self) -> str:
        """What the audit observed, and what of the claim it did not."""
        a = self.audit
        unobserved = f"; the claim also covers {self.unobserved}, not observed" if self.unobserved else ""
        return (f"{a.steps}-step runs from an auditor-chosen start; canary = a training row with its label flipped and features "
                f"x{CANARY_SCALE:g}; observed: every noisy release ({', '.join(self.observed)}){unobserved}")

    def metrics(self) -> dict[str, float]:
        b = self.bound
        return {"epsilon_claimed": self.claimed_epsilon, "epsilon_audited": b.epsilon_lower, "epsilon_audited_point": self.point_epsilon,
                "epsilon_audited_upper": b.epsilon_upper,
                "epsilon_ideal_at_runs": self.ideal.epsilon_lower, "true_positive_rate": b.true_positive_rate,
                "false_positive_rate": b.false_positive_rate, "audit_seconds": self.seconds}


# ---------------------------------------------------------------- the configuration and its data


def calibrated_run(audit: WhiteBoxAudit):
    """The prepared run whose ``audit.steps`` steps spend exactly the claimed ε (to the calibration's tolerance): the
    method's :meth:`~raco_bench.methods.base.Method.audit_noise` overrides (e.g. σ and s_L scaled together), or its own
    calibration of σ to the run's budget."""
    from raco_bench.data.catalog import load_table
    from raco_bench.methods import get_method
    from raco_bench.training.config import RunConfig
    from raco_bench.training.loop import prepare_run

    table = load_table(audit.dataset)
    idx = table.split(0)
    n_full = len(idx["train"])
    if audit.rows is not None:
        idx = {**idx, "train": idx["train"][: audit.rows]}
    ds = table.dataset(0, "public", idx)
    n = len(idx["train"])
    method = get_method(audit.method)
    params = dict(audit.params)
    hyper = method.hyperparameters(params)
    if hasattr(hyper, "batch_size"):  # q is kept as rows shrink; a full-batch method reads every row (q = 1)
        q = audit.sampling_rate if audit.sampling_rate is not None else min(1.0, hyper.batch_size / n_full)
        params["batch_size"] = max(1, round(q * n))
        q = params["batch_size"] / n
    elif audit.sampling_rate not in (None, 1.0):
        raise ValueError(f"method {audit.method} reads every training row in every step (q = 1); drop --sampling-rate")
    else:
        q = 1.0
    params.update(method.audit_noise(method.hyperparameters(params), q, audit.steps, audit.epsilon, audit.delta))
    cfg = RunConfig(dataset=audit.dataset, method=audit.method, epsilon=audit.epsilon, delta=audit.delta, steps=audit.steps,
                    checkpoint="last", device=audit.device, params=params,
                    randomness="reproducible")  # an audit is repeatable from its --seed; the noise's distribution is the same
    return prepare_run(cfg, ds)


# ---------------------------------------------------------------- the statistic


def step_log_ratios(observed: dict, canary: dict, noise: dict) -> dict[str, torch.Tensor]:
    """Per run, the claimed mechanism's log-likelihood ratio of the canary's presence in this release: per release
    block and in total ("joint"), from the release minus the other records' part. ``noise[block]`` = (kind, scale per run)."""
    out = {}
    for name, (kind, scale) in noise.items():
        g, v = observed[name].double(), canary[name].double()
        s = scale.double()[:, None]
        if kind == "gauss":
            out[name] = ((g * v).sum(1) - 0.5 * v.square().sum(1)) / s[:, 0].square()
        else:
            out[name] = ((g.abs() - (g - v).abs()) / s).sum(1)
    out["joint"] = sum(out.values())
    return out


def mixture(log_ratio: torch.Tensor, q: float) -> torch.Tensor:
    """log(1 − q + q·e^L): the step's log-likelihood ratio when the canary is in the batch with probability q."""
    if q >= 1.0:
        return log_ratio
    return torch.logaddexp(torch.full_like(log_ratio, math.log1p(-q)), math.log(q) + log_ratio)


def statistics(fam: AuditView, seeds: torch.Tensor, world: str, steps: int) -> dict[str, np.ndarray]:
    """The candidate statistics of runs with ``seeds`` in ``world`` ("D" or "D'"): the joint one and, when the view has
    several release blocks, one per block."""
    q = float(fam.settings.sampling_rate[0])
    K = len(seeds)
    s = fam.repeated(seeds)
    replay = fam.repeated(seeds, private=False)
    alone = fam.repeated(seeds, private=False, sampling_rate=torch.ones_like(s.sampling_rate))
    dev = seeds.device
    state = take_rows(fam.state, torch.zeros(K, dtype=torch.long, device=dev))
    total = {k: torch.zeros(K, dtype=torch.float64, device=dev) for k in ("joint", *fam.noise)}
    for _ in range(fam.phases(steps)):
        blocks, raw = fam.release(state, world, s)
        others, _ = fam.release(state, "D", replay)
        canary, _ = fam.release(state, "canary", alone)
        observed = {k: blocks[k] - others[k] for k in blocks}
        noise = {k: (fam.noise[k][0], fam.scale(k, state, K)) for k in blocks}
        sampled = fam.sampled(state)
        for k, L in step_log_ratios(observed, canary, noise).items():
            total[k] += mixture(L, q) if sampled else L
        state = fam.apply(state, s, raw)
    return {k: v.cpu().numpy() for k, v in total.items() if k == "joint" or len(total) > 2}  # one block: its statistic is the joint one


# ---------------------------------------------------------------- the audit


def _chunk(fam: AuditView, runs: int) -> int:
    """Runs per engine call: about 128 MiB of gathered batch rows on a CPU, 4 GiB on a GPU."""
    X = fam.worlds["D"].X
    B = float(fam.settings.sampling_rate[0]) * X.shape[0]
    budget = 2**32 if X.device.type == "cuda" else 2**27
    return max(64, min(runs, int(budget / ((B + 8 * math.sqrt(B) + 16) * (X.shape[1] + 8) * 4))))


def run_whitebox(audit: WhiteBoxAudit, progress: Callable[[str, int], None] | None = None, engine=None, view: Callable | None = None) -> AuditResult:
    """Audit ``audit``'s configuration; ``progress(world, runs done)`` after each engine call. The tests audit planted bugs:
    ``engine`` replaces the engine module the method's audit view calls, ``view(run, canary_row)`` the view itself."""
    audit.validate()
    t0 = time.perf_counter()
    torch.manual_seed(audit.seed)
    run = calibrated_run(audit)
    require_record_level(run.ctx.privacy, audit.method)
    claimed = float(run.ctx.privacy["epsilon_spent"])
    fam = view(run, 0) if view is not None else run.method.audit_view(run, 0, engine)
    fam.phases(audit.steps)  # a view that cannot observe this many steps refuses now, before any run
    chunk = _chunk(fam, audit.runs)
    stats: dict[str, dict[str, list]] = {"D": {}, "D'": {}}
    for w, world in enumerate(("D", "D'")):
        base = audit.seed * 10**9 + w * audit.runs
        for start in range(0, audit.runs, chunk):
            seeds = torch.arange(base + start, base + min(audit.runs, start + chunk), dtype=torch.int64, device=run.ctx.device)
            for k, v in statistics(fam, seeds, world, audit.steps).items():
                stats[world].setdefault(k, []).append(v)
            if progress:
                progress(world, min(audit.runs, start + chunk))
    candidates = {k: (np.concatenate(stats["D"][k]), np.concatenate(stats["D'"][k])) for k in stats["D"]}
    name, bound = audit_best(candidates, audit.delta, audit.confidence)
    s = fam.settings
    details = run.ctx.privacy
    settings = {"sampling_rate": float(s.sampling_rate[0]), "expected_batch": fam.expected_batch, "training_rows": int(fam.worlds["D"].X.shape[0]),
                **{f"noise_std_{k}": float(v[1][0]) for k, v in fam.noise.items() if not callable(v[1])},
                **{k: float(details[k]) for k in ("noise_multiplier", "laplace_scale") if k in details}}
    ideal = ideal_epsilon(fam, audit)
    return AuditResult(audit, bound, claimed, ideal, name, bound.point_epsilon, settings, time.perf_counter() - t0, fam.unobserved, tuple(fam.noise))


def ideal_epsilon(fam: AuditView, audit: WhiteBoxAudit) -> AuditBound:
    """The audit's bound on runs drawn from the accountant's worst case (the same runs, statistic and bound):
    every Gaussian release sees the canary at exactly its clipping norm, a Laplace release its whole unit mass in
    one cell, each sampled release's inclusion Bernoulli(q) (:meth:`AuditView.worst_case`). What this many runs can
    show for a mechanism that spends exactly its claim; the audit of the real engine is tight when it comes near."""
    q = float(fam.settings.sampling_rate[0])
    gen = np.random.default_rng(audit.seed + 7)
    n = audit.runs
    ones = torch.ones(n, dtype=torch.float64)
    out = {}
    for world in (0, 1):
        total = torch.zeros(n, dtype=torch.float64)
        for w in fam.worst_case(audit.steps):
            p = q if w.sampled else 1.0
            inc = torch.as_tensor((gen.random(n) < p) if world else np.zeros(n, bool), dtype=torch.float64)
            observed, canary, noise = {}, {}, {}
            if w.gauss_mu is not None:
                observed["gradient"] = torch.as_tensor(gen.standard_normal(n))[:, None] + w.gauss_mu * inc[:, None]
                canary["gradient"], noise["gradient"] = torch.full((n, 1), w.gauss_mu, dtype=torch.float64), ("gauss", ones)
            if w.laplace_scale is not None:
                observed["histogram"] = torch.as_tensor(gen.laplace(0.0, w.laplace_scale, n))[:, None] + inc[:, None]
                canary["histogram"], noise["histogram"] = torch.ones(n, 1, dtype=torch.float64), ("laplace", w.laplace_scale * ones)
            L = step_log_ratios(observed, canary, noise)["joint"]  # the statistic the real runs get
            total += mixture(L, q) if w.sampled else L
        out[world] = total.numpy()
    return audit_best({"joint": (out[0], out[1])}, audit.delta, audit.confidence)[1]
