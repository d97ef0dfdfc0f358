"""The store's ε: what a reader of every run a store holds on one training set gets (docs/privacy.md, "The store's ε").

Each run's ε holds for a reader of that run. A store holds many runs on the same rows, so a reader of the whole store
sees the composition of every run's releases. Runs whose gradient batches come from one stream at one sampling rate
(``batch_draws=shared``: one stream per (dataset, split seed, seed, expected batch size),
:func:`raco_bench.training.config.batch_stream_id`) draw the *same* Poisson batch at every step, so they are not
independent mechanisms: at step t they are one Poisson-subsampled mechanism releasing every such run's noisy
quantities from one batch. This module composes a store that way:

* a run's event (``Method.privacy_event``, :mod:`raco_bench.privacy.events`) splits into its **batched** part, the
  T steps that read its gradient batches (``PoissonSampledDpEvent(q, GaussianDpEvent(σ))``, RaCO-DP's
  :class:`~raco_bench.privacy.events.SharedBatchStepEvent`), and the **rest** (count releases, a confusion histogram,
  the private selection, a histogram drawn from its own batch, a full-batch method's releases), which reads no shared
  batch and composes as it is;
* runs that draw the same batches form a group. At step t the group's active runs (those with T_k ≥ t) release, from
  one batch of rate q, Gaussian sums of multipliers σ_k and Laplace histograms of scales s_k, each normalised to
  sensitivity 1. One record changes every one of them, so the step's base mechanism is their product, and
  (each a post-processing of its one-dimensional pair) it is dominated by:

  - the Gaussians together: one Gaussian of multiplier (Σ_k σ_k⁻²)^(−1/2) (the product of independent Gaussians
    with shifts 1/σ_k is a Gaussian of shift ‖(1/σ_k)‖₂ after a rotation: exact);
  - the Laplaces together: one Laplace of scale (Σ_k 1/s_k)⁻¹. Scaled by 1/s_k each histogram has unit Laplace noise
    and L1 sensitivity 1/s_k; concatenated they are one Laplace mechanism of L1 sensitivity Σ_k 1/s_k, whose
    worst-case pair is the shift concentrated in one coordinate (the claim the step accountant already makes for a
    histogram whose unit of mass spreads over cells). tests/test_store_privacy.py checks the dominance numerically;

  so the group's step is the joint shared-batch step (:func:`raco_bench.privacy.joint_pld.shared_batch_pld`) of those
  two, subsampled once. A group's steps form segments of constant active set (a run drops out after its T);
* everything is composed with the PLD accountant: the groups' segments, the other runs' batched parts, the rests.

Groups of different sampling rates never share draws (the rate is part of the batch stream), so they are independent.
A store that holds a run with no record-level claim (a non-private method, a sensitive-attribute-only notion) gives a
reader of the whole store no record-level guarantee: its ε is ∞, with the reason.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

from dp_accounting import dp_event as ev

from raco_bench.privacy import events

__all__ = ["BatchedPart", "StoreRelease", "StoreEpsilon", "split_batched", "store_epsilon", "store_event"]


@dataclass(frozen=True)
class BatchedPart:
    """``steps`` steps, each one Poisson batch of rate ``sampling_rate`` feeding Gaussian releases of total precision
    ``gaussian`` = Σ σ⁻² and Laplace releases of total ``laplace`` = Σ 1/s (each normalised to sensitivity 1)."""

    sampling_rate: float
    steps: int
    gaussian: float = 0.0
    laplace: float = 0.0


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
    """The ε of a store at δ: ``epsilon`` with the batch sharing as it was drawn, ``independent`` as if every run had
    drawn its own batches (``--batch-draws own``), the largest per-run ε, and how the runs grouped."""

    epsilon: float
    independent: float
    largest_run: float
    delta: float
    runs: int
    shared_groups: int  # groups of at least two runs that drew the same batches
    largest_group: int
    not_record_level: tuple[str, ...] = field(default=())  # runs without a record-level claim (then ε = ∞)
    outside_budget: tuple[str, ...] = field(default=())  # what runs list outside their budget (not covered here either)

    def describe(self) -> str:
        """One line for a summary, a run's description or a report."""
        outside = (f"; OUTSIDE THE BUDGET, as the runs list it: {'; '.join(self.outside_budget)}" if self.outside_budget else "")
        return self._figure() + outside

    def _figure(self) -> str:
        if self.not_record_level:
            kinds = Counter(label.split(":", 1)[0].split(" ", 1)[0] for label in self.not_record_level)  # labels start with the method
            why = {}
            for label in self.not_record_level:
                why.setdefault(label.split(":", 1)[0].split(" ", 1)[0], label.split(": ", 1)[-1])
            shown = "; ".join(f"{n} {kind}: {why[kind][:100]}" for kind, n in kinds.items())
            return (f"store epsilon = inf at delta {self.delta:g}: {len(self.not_record_level)} of {self.runs} runs have no record-level "
                    f"claim ({shown}); a reader of the whole store gets no record-level guarantee")
        shared = (f"; {self.shared_groups} groups of runs drew the same batches (up to {self.largest_group} runs), each composed as one "
                  f"release, {self.independent:.4g} had every run drawn its own (--batch-draws own)" if self.shared_groups else
                  "; no two runs drew the same batches")
        return (f"store epsilon = {self.epsilon:.4g} at delta {self.delta:g} for a reader of all {self.runs} runs (the composition of "
                f"every run's releases; largest per-run epsilon {self.largest_run:.4g}){shared}")


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
        return [BatchedPart(event.sampling_probability, 1, event.noise_multiplier ** -2, 1.0 / event.laplace_scale)], []
    return [], [event]


def _step(q: float, gaussian: float, laplace: float) -> ev.DpEvent:
    """One step of a group: one Poisson batch feeding the combined Gaussian and Laplace releases."""
    if laplace == 0.0:
        return ev.PoissonSampledDpEvent(q, ev.GaussianDpEvent(gaussian ** -0.5))
    if gaussian == 0.0:
        return ev.PoissonSampledDpEvent(q, ev.LaplaceDpEvent(1.0 / laplace))
    return events.SharedBatchStepEvent(q, gaussian ** -0.5, 1.0 / laplace)


def group_event(parts: list[BatchedPart]) -> ev.DpEvent:
    """The steps of runs that drew the same batches (one rate): at each step one batch feeds every active run's
    releases; segments of constant active set, in order of T."""
    q = parts[0].sampling_rate
    out, done = [], 0
    for T in sorted({p.steps for p in parts}):
        active = [p for p in parts if p.steps >= T]
        out.append(ev.SelfComposedDpEvent(_step(q, sum(p.gaussian for p in active), sum(p.laplace for p in active)), T - done))
        done = T
    return events.compose(*out)


def store_event(releases: Iterable[StoreRelease], shared: bool = True) -> ev.DpEvent:
    """The composition of every release, runs with the same batches and rate composed as one release (``shared``; else
    each run on its own batches). Every release must have an event."""
    groups: dict[tuple, list[BatchedPart]] = defaultdict(list)
    rest: list[ev.DpEvent] = []
    for i, r in enumerate(releases):
        parts, other = split_batched(r.event)
        rest += other
        for j, p in enumerate(parts):
            key = (r.batches, p.sampling_rate) if (shared and r.batches is not None) else ("own", i, j)
            groups[key].append(p)
    return events.compose(*(group_event(g) for g in groups.values()), *rest)


def _groups(releases: list[StoreRelease]) -> list[int]:
    sizes: dict[tuple, set[int]] = defaultdict(set)
    for i, r in enumerate(releases):
        if r.batches is None:
            continue
        for p in split_batched(r.event)[0]:
            sizes[(r.batches, p.sampling_rate)].add(i)
    return [len(s) for s in sizes.values() if len(s) > 1]


def store_epsilon(releases: Iterable[StoreRelease], delta: float) -> StoreEpsilon:
    """The store's ε at ``delta`` (its PLD), beside the independent figure and the largest per-run ε."""
    releases = list(releases)
    missing = tuple(f"{r.label}: {r.reason}" if r.reason else r.label for r in releases if r.event is None)
    if missing or not releases:
        return StoreEpsilon(math.inf if releases else 0.0, math.inf if releases else 0.0, math.inf if missing else 0.0, delta,
                            len(releases), 0, 0, missing)
    groups = _groups(releases)
    largest = max(r.epsilon if r.epsilon is not None else events.epsilon(r.event, delta) for r in releases)
    shared = events.epsilon(store_event(releases), delta)
    independent = events.epsilon(store_event(releases, shared=False), delta) if groups else shared
    return StoreEpsilon(shared, independent, largest, delta, len(releases), len(groups), max(groups, default=1))
