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
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np
from scipy import special, stats

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


def best_guesses(scores: np.ndarray, included: np.ndarray, delta: float, confidence: float,
                 fractions: tuple[float, ...] = GUESS_FRACTIONS) -> GuessBound:
    """ε̂ from canary scores (higher: more likely in) and their true inclusion, the best over the guess counts, each
    tried at a Bonferroni share (1 − confidence) / len(fractions)."""
    m = len(scores)
    order = np.argsort(scores, kind="stable")
    level = (1.0 - confidence) / len(fractions)
    best = GuessBound(0.0, 0, 0, 0)
    for f in fractions:
        k = max(1, int(f * m))
        if 2 * k > m:
            continue
        v = int(included[order[-k:]].sum() + (~included[order[:k]]).sum())
        eps = epsilon_lower(m, 2 * k, v, delta, level)
        if eps > best.epsilon_lower or best.guesses == 0:
            best = GuessBound(eps, 2 * k, v, k)
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

    def validate(self) -> None:
        from raco_bench.methods import get_method

        if not get_method(self.method).private:
            raise ValueError(f"method {self.method!r} is not private: there is no claimed epsilon to audit")
        if not isinstance(self.canaries, int) or self.canaries < 20:
            raise ValueError(f"invalid canaries={self.canaries!r}: use at least 20 (a few thousand for a useful bound)")
        check_confidence(self.confidence)


@dataclass(frozen=True)
class OneRunResult:
    audit: OneRunAudit
    bound: GuessBound
    claimed_epsilon: float
    steps: int
    included: int
    seconds: float

    def summary(self) -> str:
        b, a = self.bound, self.audit
        return (f"{a.method} on {a.dataset}, one run of {self.steps} steps with {a.canaries} canaries ({self.included} included): "
                f"{b.correct} of {b.guesses} guesses correct (k = {b.k}); audited epsilon >= {b.epsilon_lower:.3f} at "
                f"{a.confidence:.0%} confidence against a claimed epsilon of {self.claimed_epsilon:.3f} ({self.seconds:.0f} s)")

    def params(self) -> dict:
        a = self.audit
        return {"method": a.method, "dataset": a.dataset, "epsilon": a.epsilon, "delta": a.delta, "runs": 1, "canaries": a.canaries,
                "confidence": a.confidence, "seed": a.seed, "steps": self.steps, "sampling_rate": "the configuration's",
                "variant": "one run", "guesses": self.bound.guesses, "correct": self.bound.correct, **dict(a.params)}

    def metrics(self) -> dict[str, float]:
        return {"epsilon_claimed": self.claimed_epsilon, "epsilon_audited": self.bound.epsilon_lower, "audit_seconds": self.seconds,
                "guesses": float(self.bound.guesses), "correct_guesses": float(self.bound.correct)}

    def note(self) -> str:
        return (f"{self.audit.canaries} canaries, each a new feature column (value {CANARY_VALUE:g}, zero for every real row) with a random "
                "label and group, included with probability 1/2 in one full training run; score: the released model's log-probability "
                "of the canary's label (black-box)")


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

    from raco_bench.data.catalog import load_table
    from raco_bench.training.config import RunConfig
    from raco_bench.training.loop import execute, prepare_run

    audit.validate()
    t0 = time.perf_counter()
    table = load_table(audit.dataset)
    ds, included = with_canaries(table.dataset(0, "public", table.split(0)), audit.canaries, np.random.default_rng(audit.seed))
    cfg = RunConfig(dataset=audit.dataset, method=audit.method, epsilon=audit.epsilon, delta=audit.delta, seed=audit.seed,
                    steps=audit.steps, checkpoint="last", params=dict(audit.params),
                    randomness="reproducible")  # an audit is repeatable from its --seed; the noise's distribution is the same
    run = prepare_run(cfg, ds)
    require_record_level(run.ctx.privacy, audit.method)
    result = execute(run)
    params = {k: torch.as_tensor(v, device=run.ctx.device) for k, v in result.reported_params.items()}
    logits, _ = run.method.eval_outputs(run.ctx, params, run.evals["test"])
    logp = torch.log_softmax(logits.float(), dim=1)
    y = torch.as_tensor(ds.test.y, dtype=torch.long, device=logp.device)
    scores = logp.gather(1, y[:, None])[:, 0].cpu().numpy()
    bound = best_guesses(scores, included, audit.delta, audit.confidence)
    return OneRunResult(audit, bound, float(run.ctx.privacy["epsilon_spent"]), run.ctx.steps, int(included.sum()),
                        time.perf_counter() - t0)
