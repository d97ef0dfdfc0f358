"""The store's ε: what a reader of every run a store holds on one training set gets (docs/privacy.md, "The store's ε").

Each run's ε holds for a reader of that run. A store holds many runs on the same rows, so a reader of the whole store
sees the composition of every run's releases. Runs whose gradient batches come from one stream at one sampling rate
under one key (``batch_draws=shared``: one stream per (dataset, split, seed, expected batch size),
:func:`raco_bench.training.config.batch_stream_id`, recorded on each run's row with the key's fingerprint) draw the
*same* Poisson batch at every step, so they are not independent mechanisms: at step t they are one Poisson-subsampled
mechanism releasing every such run's noisy quantities from one batch. This module composes a store that way:

* a run's event (``Method.privacy_event``, :mod:`raco_bench.privacy.events`) splits into its **batched** part, the
  T steps that read its gradient batches (``PoissonSampledDpEvent(q, GaussianDpEvent(σ))``, RaCO-DP's
  :class:`~raco_bench.privacy.events.SharedBatchStepEvent`), and the **rest** (count releases, a confusion histogram,
  the private selection, a histogram drawn from its own batch, a full-batch method's releases), which reads no shared
  batch and composes as it is;
* runs that draw the same batches form a group. At step t the group's active runs (those with T_k ≥ t) release, from
  one batch of rate q, Gaussian sums of multipliers σ_k and Laplace histograms of scales s_k, each normalised to
  sensitivity 1. One record changes every one of them: the step is one Poisson-subsampled product mechanism, its
  Gaussians together exactly one Gaussian of precision Σ σ_k⁻² (a rotation), its histograms kept apart
  (:func:`raco_bench.privacy.group_step.group_step_pld`: exact up to pessimistic discretisation). A group's steps form
  segments of constant active set (a run drops out after its T);
* everything is composed with the PLD accountant: each distinct step or release once, self-composed as often as it
  occurs (identical segments of several groups, phase 2's seeds of one configuration, are one), the parts composed
  pairwise. The loss grid is the suite's (1e-4) unless the store's ε is large: a first estimate of it (each step as the
  subsampled Gaussian of the same mean loss) sets a grid of about ε/10⁴ (:func:`grid_for`; a relative error near 10⁻⁴,
  always upward), so a paper-size store composes in minutes (``raco-bench bench store``, docs/privacy.md).

Groups of different sampling rates or keys never share draws, so they are independent. A run with no record-level claim
(a non-private method, a sensitive-attribute-only notion) gives a reader of the whole store no record-level guarantee:
the store's ε is ∞, with the reason, and the figure over the runs that have a claim is stated beside it. The store's ε is
never below a run's own printed ε (a run may print a looser figure than its events' PLD: budget tailoring prints its
zCDP conversion), since a reader of the store reads that run.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

import numpy as np
from dp_accounting import dp_event as ev
from dp_accounting.pld.privacy_loss_distribution import PrivacyLossDistribution

from raco_bench.privacy import events
from raco_bench.privacy.accounting import DISCRETIZATION
from raco_bench.privacy.group_step import base_grid, group_step_pld, laplace_pair

__all__ = ["BatchedPart", "StoreRelease", "StoreEpsilon", "grid_for", "split_batched", "store_epsilon"]

GRID_EPSILON = 1.0  # the loss grid is DISCRETIZATION while the estimated ε is below 2·GRID_EPSILON, coarser by powers of two above


@dataclass(frozen=True)
class BatchedPart:
    """``steps`` steps, each one Poisson batch of rate ``sampling_rate`` feeding Gaussian releases of total precision
    ``gaussian`` = Σ σ⁻² and Laplace histograms of scales ``laplace`` (each normalised to sensitivity 1)."""

    sampling_rate: float
    steps: int
    gaussian: float = 0.0
    laplace: tuple[float, ...] = ()


@dataclass(frozen=True)
class StoreRelease:
    """One run a store holds: its event (None: it has no record-level claim, ``reason`` says why), the key of the batches
    it draws (runs with the same key and rate draw the same batches; None: its own), a label for messages (starting with
    its method) and the ε it printed (None: computed from its event)."""

    event: ev.DpEvent | None
    batches: Hashable | None
    label: str = ""
    reason: str = ""
    epsilon: float | None = None


@dataclass(frozen=True)
class StoreEpsilon:
    """The ε of a store at δ. ``epsilon``: a reader of every run (∞ when a run has no record-level claim); ``private_only``:
    a reader of the runs that have one (those in ``not_record_level`` left out); ``independent``: those runs had each
    drawn its own batches (``--batch-draws own``); ``largest_run``: the largest ε a run printed. Each figure is at least
    ``largest_run``; ``composed`` is the composition itself, on the loss grid ``discretization``."""

    epsilon: float
    independent: float
    largest_run: float
    delta: float
    runs: int
    shared_groups: int  # groups of at least two runs that drew the same batches
    largest_group: int
    not_record_level: tuple[str, ...] = field(default=())  # runs without a record-level claim (then ε = ∞)
    outside_budget: tuple[str, ...] = field(default=())  # what runs list outside their budget (not covered here either)
    private_only: float = math.nan
    composed: float = math.nan
    discretization: float = DISCRETIZATION

    @property
    def end_to_end(self) -> bool:
        """True when the figure covers everything the runs read: every run has a record-level claim and none lists
        anything outside its budget."""
        return not self.not_record_level and not self.outside_budget

    def describe(self) -> str:
        """One line for a summary, a run's description or a report."""
        if self.end_to_end:
            coverage = "end to end: every run has a record-level claim and none reads anything outside its budget"
        else:
            coverage = "NOT END TO END: " + "; ".join(
                ([f"{len(self.not_record_level)} runs without a record-level claim"] if self.not_record_level else [])
                + ([f"OUTSIDE THE BUDGET, as the runs list it: {'; '.join(self.outside_budget)}"] if self.outside_budget else []))
        return f"{self._figure()}; {coverage}"

    def _shared(self) -> str:
        if not self.shared_groups:
            return "no two runs drew the same batches"
        return (f"{self.shared_groups} groups of runs drew the same batches (up to {self.largest_group} runs), each composed as one "
                f"release, {self.independent:.4g} had every run drawn its own (--batch-draws own)")

    def _figure(self) -> str:
        claimed = self.runs - len(self.not_record_level)
        if not self.not_record_level:
            return (f"store epsilon = {self.epsilon:.4g} at delta {self.delta:g} for a reader of all {self.runs} runs (the composition of "
                    f"every run's releases; largest per-run epsilon {self.largest_run:.4g}); {self._shared()}")
        kinds = Counter(label.split(":", 1)[0].split(" ", 1)[0] for label in self.not_record_level)  # labels start with the method
        why: dict[str, str] = {}
        for label in self.not_record_level:
            why.setdefault(label.split(":", 1)[0].split(" ", 1)[0], label.split(": ", 1)[-1])
        shown = "; ".join(f"{n} {kind}: {why[kind][:100]}" for kind, n in kinds.items())
        whole = (f"store epsilon = inf at delta {self.delta:g}: {len(self.not_record_level)} of {self.runs} runs have no record-level "
                 f"claim ({shown}); a reader of the whole store gets no record-level guarantee")
        if not claimed:
            return whole
        return (f"{whole}. Private runs only (the {claimed} with a record-level claim, the {len(self.not_record_level)} above left out): "
                f"store epsilon = {self.private_only:.4g} (largest per-run epsilon {self.largest_run:.4g}); {self._shared()}")


def split_batched(event: ev.DpEvent) -> tuple[list[BatchedPart], list[ev.DpEvent]]:
    """``event``'s steps that read its gradient batches, and the rest (composed as they are). A Poisson-sampled
    Laplace alone is a histogram drawn from the run's own batch (RaCO-DP's ``histogram_batch=independent``): rest."""
    if isinstance(event, ev.ComposedDpEvent):
        parts: list[BatchedPart] = []
        rest: list[ev.DpEvent] = []
        for e in event.events:
            p, r = split_batched(e)
            parts += p
            rest += r
        return parts, rest
    if isinstance(event, ev.SelfComposedDpEvent):
        parts, rest = split_batched(event.event)
        return ([BatchedPart(p.sampling_rate, p.steps * event.count, p.gaussian, p.laplace) for p in parts],
                [ev.SelfComposedDpEvent(r, event.count) for r in rest])
    if isinstance(event, ev.PoissonSampledDpEvent) and isinstance(event.event, ev.GaussianDpEvent):
        return [BatchedPart(event.sampling_probability, 1, event.event.noise_multiplier ** -2)], []
    if isinstance(event, events.SharedBatchStepEvent):
        return [BatchedPart(event.sampling_probability, 1, event.noise_multiplier ** -2, (event.laplace_scale,))], []
    return [], [event]


def _atoms(event: ev.DpEvent, count: int = 1) -> Iterable[tuple[ev.DpEvent, int]]:
    """The releases of a rest, each with how often it occurs."""
    if isinstance(event, ev.ComposedDpEvent):
        for e in event.events:
            yield from _atoms(e, count)
    elif isinstance(event, ev.SelfComposedDpEvent):
        yield from _atoms(event.event, count * event.count)
    elif not isinstance(event, ev.NoOpDpEvent):
        yield event, count


Segment = tuple[float, float, tuple[float, ...]]  # one step of a group: (q, Σ σ⁻², the scales of its histograms)


def segments(parts: list[BatchedPart]) -> list[tuple[Segment, int]]:
    """The steps of runs that drew the same batches (one rate): at each step one batch feeds every active run's
    releases; segments of constant active set, in order of T, each with its number of steps. A segment's histograms are
    listed longest-running run first, so each segment's are those of the next one followed by the runs that end in it."""
    q = parts[0].sampling_rate
    order = sorted(parts, key=lambda p: -p.steps)
    out, done = [], 0
    for T in sorted({p.steps for p in parts}):
        active = [p for p in order if p.steps >= T]
        scales = tuple(s for p in active for s in p.laplace)
        out.append(((q, sum(p.gaussian for p in active), scales), T - done))
        done = T
    return out


@dataclass
class _Pieces:
    """What a store composes: each group's segments and each other release, with how often each occurs."""

    groups: list[list[tuple[Segment, int]]] = field(default_factory=list)
    atoms: Counter = field(default_factory=Counter)


def _pieces(releases: list[StoreRelease], shared: bool) -> _Pieces:
    grouped: dict[tuple, list[BatchedPart]] = defaultdict(list)
    out = _Pieces()
    for i, r in enumerate(releases):
        parts, rest = split_batched(r.event)
        for e in rest:
            for atom, n in _atoms(e):
                out.atoms[atom] += n
        for j, p in enumerate(parts):
            key = (r.batches, p.sampling_rate) if (shared and r.batches is not None) else ("own", i, j)
            grouped[key].append(p)
    out.groups = [segments(g) for g in grouped.values()]
    return out


def _mean_var(q: float, v: float) -> tuple[float, float]:
    """Mean and variance of the privacy loss log(1 − q + q e^S) of a Poisson-subsampled Gaussian of precision v (S under
    the pair's first measure), by Gauss-Hermite quadrature: for choosing the loss grid only."""
    if v <= 0:
        return 0.0, 0.0
    x, w = np.polynomial.hermite_e.hermegauss(60)
    w = w / w.sum()
    s_b, s_a = -v / 2 + math.sqrt(v) * x, v / 2 + math.sqrt(v) * x  # S under P_0 and under P_1
    loss = (lambda s: np.log1p(q * np.expm1(s))) if q < 1 else (lambda s: s)
    m1 = (1 - q) * np.dot(w, loss(s_b)) + q * np.dot(w, loss(s_a))
    m2 = (1 - q) * np.dot(w, loss(s_b) ** 2) + q * np.dot(w, loss(s_a) ** 2)
    return float(m1), float(max(m2 - m1 * m1, 0.0))


def _gaussian_equivalent(event: ev.DpEvent) -> tuple[float, float]:
    """(q, precision) of the subsampled Gaussian with about the mean loss of ``event`` (a Laplace of scale s as precision
    1/s²): for choosing the loss grid only."""
    if isinstance(event, ev.GaussianDpEvent):
        return 1.0, event.noise_multiplier ** -2
    if isinstance(event, ev.LaplaceDpEvent):
        return 1.0, event.noise_multiplier ** -2
    if isinstance(event, ev.PoissonSampledDpEvent):
        return event.sampling_probability, _gaussian_equivalent(event.event)[1]
    if isinstance(event, events.SharedBatchStepEvent):
        return event.sampling_probability, event.noise_multiplier ** -2 + event.laplace_scale ** -2
    return 1.0, 0.0


def grid_for(pieces: _Pieces, delta: float) -> float:
    """The loss grid of a store's composition: DISCRETIZATION × 2^k, coarser as the store's ε grows (between ε/2·10⁴
    and ε/10⁴ above 2·:data:`GRID_EPSILON`), from a first estimate of the ε (the mean plus
    a normal quantile of the standard deviation of the summed losses, each step taken as the subsampled Gaussian of the
    same mean loss). The grid decides cost and a small pessimism, never soundness."""
    mean = var = 0.0
    for group in pieces.groups:
        for (q, gaussian, scales), n in group:
            m, s2 = _mean_var(q, gaussian + sum(s**-2 for s in scales))
            mean, var = mean + n * m, var + n * s2
    for atom, n in pieces.atoms.items():
        m, s2 = _mean_var(*_gaussian_equivalent(atom))
        mean, var = mean + n * m, var + n * s2
    from scipy.stats import norm

    estimate = mean + norm.isf(delta) * math.sqrt(var)
    return DISCRETIZATION * 2.0 ** max(0, math.floor(math.log2(max(estimate, 1e-12) / GRID_EPSILON)))


def _group_plds(group: list[tuple[Segment, int]], d: float, done: dict) -> None:
    """Each segment's step PLD, into ``done`` (segment → PLD; segments already there, from another group, are not computed
    again). A group's histograms are composed once, segment by segment from the fewest active runs to the most."""
    (q, gaussian, scales), _ = group[0]  # the first segment: every run active
    h = base_grid(gaussian, scales)
    laplaces, have = None, 0
    for segment, _ in reversed(group):
        q, gaussian, scales = segment
        if segment in done:
            continue
        if len(scales) >= 2:
            laplaces = laplace_pair(scales[have:], h, laplaces)
            have = len(scales)
            done[segment] = group_step_pld(q, gaussian, scales, d, laplaces, h)
        else:
            done[segment] = _small_step(q, gaussian, scales, d)


def _small_step(q: float, gaussian: float, scales: tuple[float, ...], d: float) -> PrivacyLossDistribution:
    """A step with at most one histogram: the same PLD a run's own accounting composes (cached there)."""
    sigma = gaussian ** -0.5
    step = events.SharedBatchStepEvent(q, sigma, scales[0]) if scales else ev.PoissonSampledDpEvent(q, ev.GaussianDpEvent(sigma))
    return events.pld(step, d)


def _compose(plds: list[tuple[PrivacyLossDistribution, int]]) -> PrivacyLossDistribution:
    """Every PLD self-composed as often as it occurs, then composed pairwise (a balanced tree: each level's sizes add)."""
    level = [p.self_compose(n) if n > 1 else p for p, n in plds]
    while len(level) > 1:
        level = [level[i].compose(level[i + 1]) if i + 1 < len(level) else level[i] for i in range(0, len(level), 2)]
    return level[0]


def composed_epsilon(pieces: _Pieces, delta: float, d: float | None = None) -> tuple[float, float]:
    """(ε at ``delta``, the loss grid) of everything in ``pieces``."""
    d = grid_for(pieces, delta) if d is None else d
    done: dict = {}
    steps: Counter = Counter()  # identical segments of several groups (or runs on their own batches) are one PLD, self-composed once
    for group in pieces.groups:
        _group_plds(group, d, done)
        for segment, n in group:
            steps[segment] += n
    plds = [(done[segment], n) for segment, n in steps.items()] + [(events.pld(atom, d), n) for atom, n in pieces.atoms.items()]
    if not plds:
        return 0.0, d
    return float(_compose(plds).get_epsilon_for_delta(delta)), d


def _group_sizes(releases: list[StoreRelease]) -> list[int]:
    sizes: dict[tuple, set[int]] = defaultdict(set)
    for i, r in enumerate(releases):
        if r.batches is None:
            continue
        for p in split_batched(r.event)[0]:
            sizes[(r.batches, p.sampling_rate)].add(i)
    return [len(s) for s in sizes.values() if len(s) > 1]


def store_epsilon(releases: Iterable[StoreRelease], delta: float) -> StoreEpsilon:
    """The store's ε at ``delta`` (its PLD), the figure over the runs with a record-level claim, the independent figure
    and the largest per-run ε. Each figure is at least the largest ε a run printed."""
    releases = list(releases)
    missing = tuple(f"{r.label}: {r.reason}" if r.reason else r.label for r in releases if r.event is None)
    claimed = [r for r in releases if r.event is not None]
    if not claimed:
        inf = math.inf if releases else 0.0
        return StoreEpsilon(inf, inf, 0.0, delta, len(releases), 0, 0, missing, private_only=0.0, composed=0.0)
    sizes = _group_sizes(claimed)
    own = {e: events.epsilon(e, delta) for e in {r.event for r in claimed if r.epsilon is None}}  # once per distinct event
    largest = max(r.epsilon if r.epsilon is not None else own[r.event] for r in claimed)
    composed, d = composed_epsilon(_pieces(claimed, shared=True), delta)
    independent = composed_epsilon(_pieces(claimed, shared=False), delta)[0] if sizes else composed
    private_only = max(composed, largest)
    return StoreEpsilon(math.inf if missing else private_only, max(independent, largest), largest, delta, len(releases), len(sizes),
                        max(sizes, default=1), missing, private_only=private_only, composed=composed, discretization=d)
