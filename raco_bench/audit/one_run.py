"""The one-run audit (Steinke, Nasr & Jagielski, 2023): m canaries, each in the training data with probability
1/2, one full training run, and a guess for each canary (docs/audit.md, "One run").

The canaries are Dirac canaries in input space: canary j is a record whose only non-zero feature is a
new column j (zero for every real row), with a random label and group. A linear model can then only
learn canary j through weight j, which moves only when canary j is in a batch: its gradient, clipped to
C, lies along its own coordinate. Each canary is included independently with probability 1/2. After one
training run of the configuration, the auditor scores each canary by the released model's
log-probability of its label (black-box: the model's output on the canary). It guesses "in" for the k
highest scores and "out" for the k lowest, and abstains on the rest. (Held-out real rows with flipped
labels were tried first: a logistic regression on 28,829 rows does not memorise one of them, and the
audit showed ε̂ = 0 even for DP-SGD at a claimed ε of 592.)

The bound. For an (ε, δ)-DP run, the number of correct guesses V among r = 2k is, up to δ, no larger
in distribution than Binomial(r, e^ε/(1 + e^ε)): each guess is no better than randomised response.
Their Theorem 5.2 makes this exact with δ, as the p-value
    P[V ≥ v] ≤ P[Bin(r, p_ε) ≥ v] + 2mδ · max_{1≤i≤v} P[v − i ≤ Bin(r, p_ε) < v] / i,
and ε̂ is the largest ε this p-value rejects at the stated confidence. Several guess counts k are
tried, each at a Bonferroni share of the confidence, so that choosing k after seeing the scores
costs nothing.

Beside it, from the same canaries and guesses, the f-DP bound of Mahloujifar, Melis & Chaudhuri (ICML 2025;
:mod:`raco_bench.audit.fdp`): ``fdp-dp`` under the (ε, δ)-DP curve itself, a lower bound for every mechanism, stated by
default beside ``snj``; and, only when asked for, ``fdp-gaussian`` under the hypothesis that the run's trade-off curve is
the Gaussian's (the paper's and jax-privacy's). That hypothesis is not the run's: RaCO-DP's δ(ε′) lies above the matched
Gaussian's by up to 1.63× at T = 2,285 and 5.1× at T = 181, and on randomised response at ε the Gaussian family's ε̂
exceeded ε in 20 of 20 audits (issue 45's review). Its name, metric (``epsilon_audited_fdp_gaussian``), summary and
note say so. An audit states each bound it was asked for (``OneRunAudit.bounds``).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np
from scipy import special, stats

from raco_bench.audit import fdp
from raco_bench.audit.bounds import check_confidence, require_record_level
from raco_bench.methods import DEFAULT_METHOD

GUESS_FRACTIONS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5)  # k / m for the "in" and for the "out" guesses


def p_value(m: int, r: int, v: int, eps: float, delta: float) -> float:
    """An upper bound on P[≥ v correct of r guesses] when the run is (ε, δ)-DP over m canaries (Thm 5.2)."""
    if not 0 <= v <= r <= m:
        raise ValueError(f"need 0 <= v <= r <= m, got v={v}, r={r}, m={m}")
    p = special.expit(eps)  # the accuracy of ε-DP randomised response
    tail = float(stats.binom.sf(v - 1, r, p))
    if delta == 0 or v == 0:
        return min(tail, 1.0)
    below = stats.binom.pmf(np.arange(v - 1, -1, -1), r, p)  # P[Bin = v − 1], P[Bin = v − 2], …, P[Bin = 0]
    alpha = float((np.cumsum(below) / np.arange(1, v + 1)).max())
    return min(1.0, tail + 2.0 * m * delta * alpha)


def epsilon_lower(m: int, r: int, v: int, delta: float, level: float) -> float:
    """The largest ε whose p-value for (m, r, v) is below ``level`` (0 when even ε = 0 is not rejected)."""
    if r == 0 or p_value(m, r, v, 0.0, delta) >= level:
        return 0.0
    lo, hi = 0.0, 1.0
    while p_value(m, r, v, hi, delta) < level:
        lo, hi = hi, 2.0 * hi
        if hi > 1e3:
            return lo
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        if p_value(m, r, v, mid, delta) < level:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(frozen=True)
class GuessBound:
    epsilon_lower: float
    guesses: int  # r
    correct: int  # v
    k: int


GAUSSIAN_HYPOTHESIS = ("HYPOTHESIS, not a lower bound on the run's epsilon: assumes the run's trade-off curve is the Gaussian "
                       "mechanism's, which a DP-SGD-like run's is not")
BOUNDS = {  # name -> (ε̂ of (m, r, v, δ, level), what it is)
    "snj": (epsilon_lower, "Steinke, Nasr & Jagielski, Theorem 5.2"),
    "fdp-dp": (lambda m, r, v, delta, level: fdp.epsilon_lower(m, r, v, delta, level, "dp"),
               "f-DP, Mahloujifar, Melis & Chaudhuri, under the (epsilon, delta) trade-off curve"),
    "fdp-gaussian": (lambda m, r, v, delta, level: fdp.epsilon_lower(m, r, v, delta, level, "gaussian"),
                     f"f-DP, Mahloujifar, Melis & Chaudhuri, under the Gaussian trade-off {GAUSSIAN_HYPOTHESIS}"),
}
RENAMED = {"fdp": "fdp-gaussian"}  # issue 45's review: the name says the hypothesis


def guesses(scores: np.ndarray, included: np.ndarray, fractions: tuple[float, ...] = GUESS_FRACTIONS) -> list[tuple[int, int, int]]:
    """(k, r, v) for each guess count: "in" for the k highest scores, "out" for the k lowest, r = 2k guesses, v correct."""
    m = len(scores)
    order = np.argsort(scores, kind="stable")
    out = []
    for f in fractions:
        k = max(1, int(f * m))
        if 2 * k <= m:
            out.append((k, 2 * k, int(included[order[-k:]].sum() + (~included[order[:k]]).sum())))
    return out


def best_guesses(scores: np.ndarray, included: np.ndarray, delta: float, confidence: float,
                 fractions: tuple[float, ...] = GUESS_FRACTIONS, bound: str = "snj") -> GuessBound:
    """ε̂ by ``bound`` (a name in :data:`BOUNDS`) from canary scores (higher: more likely in) and their true inclusion, the
    best over the guess counts, each tried at a Bonferroni share (1 − confidence) / len(fractions)."""
    epsilon_of = BOUNDS[bound][0]
    m = len(scores)
    level = (1.0 - confidence) / len(fractions)
    best = GuessBound(0.0, 0, 0, 0)
    for k, r, v in guesses(scores, included, fractions):
        eps = epsilon_of(m, r, v, delta, level)
        if eps > best.epsilon_lower or best.guesses == 0:
            best = GuessBound(eps, r, v, k)
    return best


@dataclass(frozen=True)
class OneRunAudit:
    method: str = DEFAULT_METHOD
    dataset: str = "adult"
    epsilon: float = 1.0
    delta: float = 1e-5
    canaries: int = 1000
    steps: int | None = None  # T of the run (None: what the budget allows, as in training)
    confidence: float = 0.95
    params: tuple = ()
    seed: int = 0
    bounds: tuple[str, ...] = ("snj", "fdp-dp")  # lower bounds for every mechanism; the first is the headline epsilon_audited

    def validate(self) -> None:
        from raco_bench.methods import get_method

        renamed = [b for b in self.bounds if b in RENAMED]
        if renamed:
            raise ValueError(f"bound {renamed[0]!r} is now {RENAMED[renamed[0]]!r}: it holds only under the hypothesis that the run's "
                             "trade-off curve is Gaussian; fdp-dp is the f-DP bound for every mechanism")
        unknown = [b for b in self.bounds if b not in BOUNDS]
        if not self.bounds or unknown:
            raise ValueError(f"invalid bounds {list(self.bounds)!r}: choose one or more of {list(BOUNDS)}")
        if self.bounds[0] == "fdp-gaussian":
            raise ValueError("fdp-gaussian cannot be the headline epsilon_audited (it is not a lower bound on the run's epsilon): "
                             "list snj or fdp-dp first")
        if not get_method(self.method).private:
            raise ValueError(f"method {self.method!r} is not private: there is no claimed epsilon to audit")
        if not isinstance(self.canaries, int) or self.canaries < 20:
            raise ValueError(f"invalid canaries={self.canaries!r}: use at least 20 (a few thousand for a useful bound)")
        check_confidence(self.confidence)


@dataclass(frozen=True)
class OneRunResult:
    audit: OneRunAudit
    bounds: dict  # name -> GuessBound, in the audit's order, all from the same canaries and guesses
    claimed_epsilon: float
    steps: int
    included: int
    seconds: float
    scores: np.ndarray | None = None  # each canary's score, and whether it was included: what every bound reads
    inclusion: np.ndarray | None = None

    @property
    def bound(self) -> GuessBound:
        """The headline bound: the audit's first."""
        return self.bounds[self.audit.bounds[0]]

    def summary(self) -> str:
        a = self.audit
        parts = "; ".join(f"{b.epsilon_lower:.3f} by {BOUNDS[name][1]} ({b.correct} of {b.guesses} guesses correct, k = {b.k})"
                          for name, b in self.bounds.items())
        return (f"{a.method} on {a.dataset}, one run of {self.steps} steps with {a.canaries} canaries ({self.included} included): "
                f"audited epsilon >= {parts}, at {a.confidence:.0%} confidence against a claimed epsilon of {self.claimed_epsilon:.3f} "
                f"({self.seconds:.0f} s)")

    def params(self) -> dict:
        a = self.audit
        return {"method": a.method, "dataset": a.dataset, "epsilon": a.epsilon, "delta": a.delta, "runs": 1, "canaries": a.canaries,
                "confidence": a.confidence, "seed": a.seed, "steps": self.steps, "sampling_rate": "the configuration's",
                "variant": "one run", "guesses": self.bound.guesses, "correct": self.bound.correct, "bounds": ",".join(a.bounds),
                **dict(a.params)}

    def metrics(self) -> dict[str, float]:
        out = {"epsilon_claimed": self.claimed_epsilon, "epsilon_audited": self.bound.epsilon_lower, "audit_seconds": self.seconds,
               "guesses": float(self.bound.guesses), "correct_guesses": float(self.bound.correct)}
        out.update({f"epsilon_audited_{name.replace('-', '_')}": b.epsilon_lower for name, b in self.bounds.items()})
        return out

    def score_record(self) -> dict:
        """The scores and inclusions with what the bounds need (m, δ, confidence): a file any implementation can re-audit."""
        a = self.audit
        return {"method": a.method, "dataset": a.dataset, "epsilon_claimed": self.claimed_epsilon, "delta": a.delta, "confidence": a.confidence,
                "canaries": a.canaries, "seed": a.seed, "steps": self.steps, "guess_fractions": list(GUESS_FRACTIONS),
                "scores": [float(x) for x in self.scores], "included": [bool(x) for x in self.inclusion]}

    def note(self) -> str:
        hypothesis = (f"; epsilon_audited_fdp_gaussian is a {GAUSSIAN_HYPOTHESIS}" if "fdp-gaussian" in self.bounds else "")
        return (f"{self.audit.canaries} canaries, each a new feature column (value {CANARY_VALUE:g}, zero for every real row) with a random "
                "label and group, included with probability 1/2 in one full training run; score: the released model's log-probability "
                f"of the canary's label (black-box){hypothesis}")


CANARY_VALUE = 10.0  # a canary's one non-zero feature: its gradient is clipped to C, all of it along its own coordinate


def with_canaries(ds, m: int, gen: np.random.Generator):
    """(D with the included canaries, the inclusion mask): ``m`` new feature columns, zero for every real row; canary j
    is CANARY_VALUE in column j and zero elsewhere, with a random label and group. The canaries are the "test" split
    (the auditor scores every one); validation is the real one."""
    from raco_bench.data.tabular import Split

    d, c, G = ds.n_features, ds.n_classes, ds.n_groups
    included = gen.random(m) < 0.5
    X = np.zeros((m, d + m), dtype=np.float32)
    X[np.arange(m), d + np.arange(m)] = CANARY_VALUE
    canaries = Split(X, gen.integers(0, c, m), gen.integers(0, G, m))

    def widen(split: Split) -> Split:
        return Split(np.concatenate([split.X, np.zeros((len(split.y), m), dtype=np.float32)], 1), split.y, split.group)

    train = widen(ds.train)
    train = Split(np.concatenate([train.X, canaries.X[included]]), np.concatenate([train.y, canaries.y[included]]),
                  np.concatenate([train.group, canaries.group[included]]))
    names = ds.feature_names + tuple(f"canary_{j}" for j in range(m))
    return dataclasses.replace(ds, train=train, val=widen(ds.val), test=canaries, feature_names=names), included


def run_one_run(audit: OneRunAudit) -> OneRunResult:
    import torch

    from raco_bench.audit.preprocessing import NO_EVALUATION
    from raco_bench.data.catalog import load_table
    from raco_bench.training.config import RunConfig
    from raco_bench.training.loop import prepare_run
    from raco_bench.training.pack import train_runs

    audit.validate()
    t0 = time.perf_counter()
    table = load_table(audit.dataset)
    ds, included = with_canaries(table.dataset(0, "public", table.split(0)), audit.canaries, np.random.default_rng(audit.seed))
    cfg = RunConfig(dataset=audit.dataset, method=audit.method, epsilon=audit.epsilon, delta=audit.delta, seed=audit.seed,
                    steps=audit.steps, checkpoint="last", params=dict(audit.params), eval_every=NO_EVALUATION,
                    randomness="reproducible")  # an audit is repeatable from its --seed; the noise's distribution is the same
    run = prepare_run(cfg, ds)
    require_record_level(run.ctx.privacy, audit.method)
    result = train_runs([run])[0]  # through the method's batched engine where it has one: the same run, faster (docs/packs.md)
    params = {k: torch.as_tensor(v, device=run.ctx.device) for k, v in result.reported_params.items()}
    logits, _ = run.method.eval_outputs(run.ctx, params, run.evals["test"])
    logp = torch.log_softmax(logits.float(), dim=1)
    y = torch.as_tensor(ds.test.y, dtype=torch.long, device=logp.device)
    scores = logp.gather(1, y[:, None])[:, 0].cpu().numpy().astype(np.float64)
    bounds = {name: best_guesses(scores, included, audit.delta, audit.confidence, bound=name) for name in audit.bounds}
    return OneRunResult(audit, bounds, float(run.ctx.privacy["epsilon_spent"]), run.ctx.steps, int(included.sum()),
                        time.perf_counter() - t0, scores, included)
