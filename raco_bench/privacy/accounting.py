"""Exact privacy accounting of a training run with dp-accounting's PLD accountant.

A :class:`StepMechanism` says what one step releases and how its batches are drawn:

* a clipped-gradient Gaussian (noise multiplier σ_m) and/or a Laplace histogram (scale s_L);
* ``histogram_batch="shared"``: one Poisson batch feeds both releases (Algorithm 1 as published):
  accounted with the project's joint PLD (:mod:`raco_bench.privacy.joint_pld`);
* ``histogram_batch="independent"``: the histogram reads its own Poisson batch: accounted exactly
  by composing PoissonSampled(Gaussian) and PoissonSampled(Laplace).

:func:`separate_composition_epsilon` is what the reference implementation reports (separate
composition, whatever the batch); the suite reports it beside the real ε, labelled as such.
Adjacency is add/remove-one throughout (docs/methods/raco-dp.md, D16).

dp-accounting is imported where a distribution is built, not with this module: a machine that trains from a benchmark
kit (``raco-bench bench throughput --kit``: a GPU machine with torch alone) answers :func:`epsilon` and
:func:`separate_composition_epsilon` from the values the accountant computed where the kit was written
(:func:`carried`, :func:`recording`), and never composes anything itself.
"""

from __future__ import annotations

import functools
import math
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Callable

from raco_bench.privacy.joint_pld import shared_batch_pld

if TYPE_CHECKING:
    from dp_accounting.pld.privacy_loss_distribution import PrivacyLossDistribution


def _pld_lib():
    from dp_accounting.pld import privacy_loss_distribution

    return privacy_loss_distribution

DISCRETIZATION = 1e-4
HISTOGRAM_BATCH_MODES = ("shared", "independent")


@dataclass(frozen=True)
class SelectionRelease:
    """Private checkpoint selection: ``count`` Laplace releases, each of a validation count vector with
    L1 sensitivity 1 under add/remove (one record is in one cell; 2 under replace, see
    :func:`selection_for`) and noise scale ``laplace_scale``, composed with the training releases
    (docs/privacy.md, "Checkpoint rules")."""

    laplace_scale: float
    count: int

    def __post_init__(self) -> None:
        if not (math.isfinite(self.laplace_scale) and self.laplace_scale > 0):
            raise ValueError(f"the selection noise (Laplace scale) must be a finite number > 0, got {self.laplace_scale}")
        if not isinstance(self.count, int) or self.count < 1:
            raise ValueError(f"the number of selection checkpoints must be an integer >= 1, got {self.count}")


@lru_cache(maxsize=64)
def selection_pld(selection: SelectionRelease) -> PrivacyLossDistribution:
    return _pld_lib().from_laplace_mechanism(selection.laplace_scale, value_discretization_interval=DISCRETIZATION).self_compose(selection.count)


@dataclass(frozen=True)
class StepMechanism:
    """What one step releases. ``noise_multiplier`` / ``laplace_scale`` = None: that release is absent;
    0 means released without noise (no privacy)."""

    sampling_rate: float
    noise_multiplier: float | None
    laplace_scale: float | None = None
    histogram_batch: str = "shared"
    histogram_sampling_rate: float | None = None

    def __post_init__(self) -> None:
        if not 0 < self.sampling_rate <= 1:
            raise ValueError(f"sampling rate q must be in (0, 1], got {self.sampling_rate}; q = expected batch size / n")
        if self.noise_multiplier is not None and not self.noise_multiplier >= 0:
            raise ValueError(f"noise multiplier must be >= 0, got {self.noise_multiplier}")
        if self.laplace_scale is not None and not self.laplace_scale >= 0:
            raise ValueError(f"Laplace scale must be >= 0, got {self.laplace_scale}")
        if self.histogram_batch not in HISTOGRAM_BATCH_MODES:
            raise ValueError(f"histogram_batch must be one of {HISTOGRAM_BATCH_MODES}, got {self.histogram_batch!r}")
        if self.histogram_sampling_rate is not None and not 0 < self.histogram_sampling_rate <= 1:
            raise ValueError(f"histogram sampling rate must be in (0, 1], got {self.histogram_sampling_rate}")

    @property
    def private(self) -> bool:
        """False when some release carries no noise (then ε = ∞)."""
        releases = [v for v in (self.noise_multiplier, self.laplace_scale) if v is not None]
        return bool(releases) and all(v > 0 for v in releases)

    @property
    def hist_rate(self) -> float:
        return self.histogram_sampling_rate or self.sampling_rate


def _gaussian(sigma: float, q: float, discretization: float = DISCRETIZATION) -> PrivacyLossDistribution:
    return _pld_lib().from_gaussian_mechanism(sigma, sampling_prob=q, value_discretization_interval=discretization)


def _laplace(scale: float, q: float, discretization: float = DISCRETIZATION) -> PrivacyLossDistribution:
    return _pld_lib().from_laplace_mechanism(scale, sampling_prob=q, value_discretization_interval=discretization)


@lru_cache(maxsize=64)
def step_pld(mech: StepMechanism, discretization: float = DISCRETIZATION) -> PrivacyLossDistribution:
    """PLD of one step, exact for the sampling the trainer does (on the loss grid ``discretization``: the suite's for a
    run; the store's ε takes a coarser one for a large store, :mod:`raco_bench.privacy.store`)."""
    if not mech.private:
        raise ValueError("a step without noise has no finite privacy loss distribution")
    g, lap, d = mech.noise_multiplier, mech.laplace_scale, discretization
    if lap is None:
        return _gaussian(g, mech.sampling_rate, d)
    if g is None:
        return _laplace(lap, mech.hist_rate, d)
    if mech.histogram_batch == "shared":
        return shared_batch_pld(mech.sampling_rate, (g,), lap, d)
    return _gaussian(g, mech.sampling_rate, d).compose(_laplace(lap, mech.hist_rate, d))


@lru_cache(maxsize=64)
def _separate_pld(mech: StepMechanism) -> PrivacyLossDistribution:
    return _gaussian(mech.noise_multiplier, mech.sampling_rate).compose(_laplace(mech.laplace_scale, mech.hist_rate))


def _epsilon(pld: PrivacyLossDistribution, steps: int, delta: float, selection: SelectionRelease | None = None) -> float:
    if steps <= 0 and selection is None:
        return 0.0
    total = pld.self_compose(int(steps)) if steps > 0 else None
    if selection is not None:
        total = selection_pld(selection) if total is None else total.compose(selection_pld(selection))
    return float(total.get_epsilon_for_delta(delta))


def _check_delta(delta: float) -> None:
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")


_carried: list[dict[str, float]] = []  # the answers carried from a machine with dp-accounting, while carried() holds them
_recordings: list[dict[str, float]] = []  # the recordings open (recording())


@contextmanager
def carried(values: dict[str, float]):
    """Inside the block, answer the calls of :func:`epsilon` and :func:`separate_composition_epsilon` that ``values``
    holds (as :func:`recording` recorded them where dp-accounting computed them) from ``values``: a benchmark kit's runs
    are prepared on a machine without dp-accounting (``raco-bench bench throughput --kit``). A call they do not hold is
    computed, which needs dp-accounting. Outside the block nothing is answered from them."""
    _carried.append(values)
    try:
        yield
    finally:
        _carried.remove(values)


@contextmanager
def recording():
    """Record every answer of :func:`epsilon` and :func:`separate_composition_epsilon` given inside the block, keyed by
    the call: what a kit carries to a machine without dp-accounting (:func:`carried`)."""
    values: dict[str, float] = {}
    _recordings.append(values)
    try:
        yield values
    finally:
        _recordings.remove(values)


def _carried_or_computed(fn):
    """``fn`` (a pure function of value objects, memoised) answered from the carried values where they hold the call,
    every answer recorded into the open recordings."""
    @functools.wraps(fn)
    def answer(*args):
        key = repr((fn.__name__, args))
        known = next((values[key] for values in _carried if key in values), None)
        value = known if known is not None else fn(*args)
        for values in _recordings:
            values[key] = value
        return value

    answer.cache_clear, answer.cache_info = fn.cache_clear, fn.cache_info
    return answer


@_carried_or_computed
@lru_cache(maxsize=4096)  # a pure function of value objects: packs of one mechanism plan it once
def epsilon(mech: StepMechanism, steps: int, delta: float, selection: SelectionRelease | None = None) -> float:
    """ε spent by ``steps`` steps of ``mech`` (and the private checkpoint selection, if any) at ``delta`` (∞ without noise)."""
    _check_delta(delta)
    if steps <= 0 and selection is None:
        return 0.0
    if not mech.private:
        return math.inf
    return _epsilon(step_pld(mech), steps, delta, selection)


@_carried_or_computed
@lru_cache(maxsize=4096)  # a pure function of value objects: packs of one mechanism plan it once
def separate_composition_epsilon(mech: StepMechanism, steps: int, delta: float) -> float | None:
    """The ε that composing the two subsampled mechanisms separately claims (what the reference
    implementation reports). For a shared batch this UNDERSTATES the real ε; None when the step
    does not release both a Gaussian and a Laplace."""
    _check_delta(delta)
    if mech.noise_multiplier is None or mech.laplace_scale is None or not mech.private:
        return None
    return _epsilon(_separate_pld(mech), steps, delta)


def max_steps(mech: StepMechanism, target_epsilon: float, delta: float, cap: int = 100_000, selection: SelectionRelease | None = None) -> int:
    """Largest T ≤ ``cap`` with ε(T) ≤ ``target_epsilon`` (0 if even one step is too many), the private
    checkpoint selection (if any) included.

    A search on the monotone ε(T) (:func:`largest_within`); each evaluation composes the one-step PLD. Results
    are cached by :mod:`raco_bench.privacy.calibration`.
    """
    if not target_epsilon > 0:
        raise ValueError(f"target epsilon must be > 0, got {target_epsilon}")
    _check_delta(delta)
    if not mech.private:
        raise ValueError("cannot calibrate the number of steps of a mechanism without noise (epsilon is infinite)")
    # through the memoised epsilon(): the check of the answer against the budget (calibration.solve_checked) then costs nothing
    return largest_within(lambda t: epsilon(mech, t, delta, selection), target_epsilon, cap)


def largest_within(eps: Callable[[int], float], target: float, cap: int) -> int:
    """The largest integer T ≤ ``cap`` with eps(T) ≤ ``target`` for a non-decreasing ``eps`` (0 if even T = 1 exceeds it).

    Every answer rests on evaluated values: the search keeps a bracket lo < hi with eps(lo) ≤ target < eps(hi) and
    returns lo once hi = lo + 1 (or ``cap`` once eps(cap) ≤ target). What it chooses is only where to evaluate next, and
    each evaluation (a PLD composition) costs about the same at any T. ε(T) of subsampled mechanisms is close to a
    straight line in (log T, log ε), so every probe is a line's crossing of the target:

    - bracketing, from T = 1: the second probe assumes ε grows like T (at most 64), later ones extend the line through
      the last two points below the target (at least one step up, at most a factor of 64, ``cap`` itself when the line
      crosses beyond it; factors of 8 after five probes in a row below the target, or where ε(T) is 0);
    - inside the bracket, the integer nearest the crossing of the line through its ends (then its neighbour closes the
      bracket), bisecting whenever two proposals in a row left more than half of the bracket, or where ε is 0 or
      infinite and the line is undefined.

    Against plain doubling and bisection, the same T in about two fifths of the evaluations (docs/packs.md: 313 against
    649 on 42 problems with brackets by factors of 8, then 22–26 % fewer with the line's brackets; tests/test_accounting.py)."""
    lo, e_lo = 1, eps(1)
    if e_lo > target:
        return 0
    if cap <= lo:  # nothing above T = 1 to probe
        return cap
    below: tuple[int, float] | None = None  # the point below the target before lo
    climbs = 0
    while True:  # bracket
        guess = _crossing(below[0], below[1], lo, e_lo, target) if below is not None and climbs < 5 else None
        if guess is not None:
            t = cap if guess >= cap else min(max(math.ceil(guess), lo + 1), 64 * lo)
        elif below is None and 0 < e_lo < math.inf:  # the first probe
            t = int(min(max(target / e_lo, 2.0), 64.0))
        else:
            t = 8 * lo
        t = min(t, cap)
        e = eps(t)
        if e > target:
            hi, e_hi = t, e
            break
        if t == cap:
            return cap
        below, lo, e_lo = (lo, e_lo), t, e
        climbs += 1
    slow = 0
    while hi - lo > 1:  # invariant: eps(lo) <= target < eps(hi)
        width = hi - lo
        guess = _crossing(lo, e_lo, hi, e_hi, target) if slow < 2 else None
        line = guess is not None
        mid = min(max(int(guess + 0.5), lo + 1), hi - 1) if line else (lo + hi) // 2  # the integer nearest the crossing
        e = eps(mid)
        if e <= target:
            lo, e_lo = mid, e
        else:
            hi, e_hi = mid, e
        slow = slow + 1 if line and 2 * (hi - lo) > width else 0
    return lo


def _crossing(t0: int, e0: float, t1: int, e1: float, target: float) -> float | None:
    """Where the straight line through (log t0, log e0) and (log t1, log e1) reaches log ``target`` (as a T); None where
    that line is undefined or flat: an ε or the target 0 or infinite, or log e0 = log e1 (e0 = e1, or adjacent floats)."""
    if not (0 < e0 < math.inf and 0 < e1 < math.inf and 0 < target < math.inf):
        return None
    rise = math.log(e1) - math.log(e0)
    if rise <= 0:
        return None
    x = math.log(t0) + (math.log(target) - math.log(e0)) * (math.log(t1) - math.log(t0)) / rise
    return math.exp(min(x, 700.0))


NOISE_FLOOR = 1e-3  # the smallest noise multiplier a search goes down to
MAX_NOISE_EVALUATIONS = 500  # far above what any search needs (under 100 at rel_tol 1e-5)


def smallest_noise_within(eps: Callable[[float], float], target: float, limit: float, failure: str, rel_tol: float = 1e-3) -> float:
    """The smallest noise multiplier σ on the grid σ_k = (1 + ``rel_tol``)^k (k an integer, σ_0 = 1) with eps(σ) ≤
    ``target``, for a non-increasing ``eps``; σ_k is returned only once σ_{k-1} was evaluated above the target (or σ_k is
    the first point at or above ``NOISE_FLOOR``), so the budget holds for it and a smaller σ is less than ``rel_tol``
    (relative) away. Raises with ``failure`` when no σ up to ``limit`` (finite, ≥ 1) meets the target. An ε that is NaN
    counts as over the target.

    The answer is a property of ``eps`` and the grid alone, not of where the search evaluated: a value solved in one
    order, task or session is the value solved in any other. Where to evaluate follows :func:`largest_within`: ε(σ) of
    Gaussian mechanisms is close to a straight line in (log σ, log ε), so every probe is a line's crossing of the target:

    - bracketing, from σ = 1: the first probe assumes ε ∝ 1/σ, later ones extend the line through the last two points;
      at most a factor of 64 up and of 2 down a probe (the compositions at small σ, where ε is large, cost the most),
      factors of 2 where the line is undefined (ε 0 or infinite);
    - inside the bracket, the line through the two points evaluated last (a secant: they close in from one side of a
      curved ε), then its neighbour closes the bracket; bisection of k whenever three proposals in a row left more
      than half of the bracket, or where the line is undefined.

    Against doubling from 1 and bisection to the same tolerance (12-14 evaluations each), 4-7 on the problems of an
    uncapped sweep (tests/test_accounting.py; ``raco-bench bench calibration`` measures both side by side)."""
    if not 0 < rel_tol < math.inf:
        raise ValueError(f"the relative tolerance must be a finite number > 0, got {rel_tol}")
    if not 1.0 <= limit < math.inf:
        raise ValueError(f"the largest noise multiplier tried must be a finite number >= 1, got {limit}")
    step = math.log1p(rel_tol)
    octave = max(1, round(math.log(2.0) / step))
    sigma = lambda k: math.exp(k * step)  # noqa: E731  (σ_0 = exp(0) = 1 exactly)
    top, bottom = math.floor(math.log(limit) / step), math.ceil(math.log(NOISE_FLOOR) / step)
    top += 1 if sigma(top + 1) <= limit else -1 if sigma(top) > limit else 0  # the last grid point <= limit (log rounds)
    bottom += -1 if sigma(bottom - 1) >= NOISE_FLOOR else 1 if sigma(bottom) < NOISE_FLOOR else 0  # the first >= the floor
    evaluated = [0]

    def at(k: int) -> float:
        evaluated[0] += 1
        if evaluated[0] > MAX_NOISE_EVALUATIONS:  # the search is logarithmic: a loop this long is a bug, never an answer
            raise RuntimeError(f"the noise multiplier's search did not converge in {MAX_NOISE_EVALUATIONS} evaluations (a bug)")
        return eps(sigma(k))

    def crossing(a: tuple[int, float], b: tuple[int, float]) -> float | None:
        """The σ where the line through points a and b, (k, ε) each, reaches the target (None where undefined)."""
        (k_small, e_large), (k_large, e_small) = sorted((a, b))
        return _crossing(sigma(k_large), e_small, sigma(k_small), e_large, target) if e_large >= e_small else None

    def probe(k0: int, e0: float, k1: int | None, e1: float | None) -> int:
        """The next k while bracketing from (k0, e0), k1 the point before it (None at the first probe)."""
        if k1 is None:
            guess = sigma(k0) * e0 / target if 0 < e0 < math.inf and 0 < target < math.inf else None
        else:
            guess = crossing((k0, e0), (k1, e1))
        up = not e0 <= target  # NaN counts as over the target
        if guess is None:
            return k0 + octave if up else k0 - octave
        k = round(math.log(guess) / step) if 0 < guess < math.inf else (k0 - 6 * octave if guess <= 0 else k0 + 6 * octave)
        return min(max(k, k0 + 1), k0 + 6 * octave) if up else max(min(k, k0 - 1), k0 - octave)  # small σ: costly compositions

    k, e = 0, at(0)
    before: tuple[int | None, float | None] = (None, None)
    if not e <= target:  # bracket upwards: [last above the target (or NaN), first within]
        while not e <= target:
            if k >= top:
                raise ValueError(f"no noise multiplier up to {limit:g} meets epsilon={target}: {failure}")
            nxt = min(probe(k, e, *before), top)
            before, (k, e) = (k, e), (nxt, at(nxt))
        lo, hi = before[0], k
    else:  # bracket downwards
        while e <= target:
            if k <= bottom:
                return sigma(k)  # the floor fits
            nxt = max(probe(k, e, *before), bottom)
            before, (k, e) = (k, e), (nxt, at(nxt))
        lo, hi = k, before[0]
    last, slow = before, 0  # the line runs through the two points evaluated last (a secant), which close in from one side
    while hi - lo > 1:  # invariant: eps(σ_lo) > target >= eps(σ_hi)
        width = hi - lo
        guess = crossing((k, e), last) if slow < 3 else None
        line = guess is not None and 0 < guess < math.inf
        mid = min(max(round(math.log(guess) / step), lo + 1), hi - 1) if line else (lo + hi) // 2
        last, (k, e) = (k, e), (mid, at(mid))
        if e <= target:
            hi = mid
        else:
            lo = mid
        slow = slow + 1 if line and 2 * (hi - lo) > width else 0
    return sigma(hi)


def gaussian_epsilon(noise_multiplier: float, sampling_rate: float, steps: int, delta: float) -> float:
    """ε of ``steps`` Poisson-subsampled Gaussian releases (noise multiplier per unit L2 sensitivity)."""
    return epsilon(StepMechanism(sampling_rate, noise_multiplier, None), steps, delta)


# ------------------------------------------------------------------ Gaussian plans (DP-SGD-like methods)
NEIGHBOUR_RELATIONS = ("add-remove", "replace")


@dataclass(frozen=True)
class GaussianPlan:
    """Everything a DP-SGD-like method releases, as a value object the trainer and the sweep's
    calibration both read (docs/privacy.md, "Gaussian plans"):

    * optionally, once before training, a Gaussian release of a count vector (std ``count_noise``,
      L2 sensitivity ``count_sensitivity``), e.g. DP-FERMI's group counts for P̂_S;
    * then ``steps`` Poisson-subsampled (rate ``sampling_rate``) releases of ``blocks`` clipped sums,
      each block clipped to its own norm C_b and noised with N(0, σ²C_b²). Scaled by its clip norm
      each block has per-sample norm ≤ 1, so one step is one Gaussian with noise σ/√blocks per unit
      of sensitivity.

    ``relation``: "add-remove" (one record added or removed) or "replace" (one record's value
    replaced, e.g. one sensitive attribute flipped: the sampled record's contribution moves from one
    point of the clip ball to another, dp-accounting's REPLACE_ONE relation).
    """

    sampling_rate: float
    steps: int
    blocks: int = 1
    count_noise: float | None = None
    count_sensitivity: float = 1.0
    relation: str = "add-remove"
    selection: SelectionRelease | None = None  # private checkpoint selection, composed in

    def __post_init__(self) -> None:
        if not 0 < self.sampling_rate <= 1:
            raise ValueError(f"sampling rate must be in (0, 1], got {self.sampling_rate}")
        if self.steps < 1 or self.blocks < 1:
            raise ValueError("steps and blocks must be >= 1")
        if self.count_noise is not None and not self.count_noise > 0:
            raise ValueError(f"count_noise must be > 0 (or None for no count release), got {self.count_noise}")
        if self.relation not in NEIGHBOUR_RELATIONS:
            raise ValueError(f"relation must be one of {NEIGHBOUR_RELATIONS}, got {self.relation!r}")


@lru_cache(maxsize=256)
def plan_pld(plan: GaussianPlan, noise_multiplier: float) -> PrivacyLossDistribution:
    """PLD of the whole plan with per-block noise multiplier σ."""
    from dp_accounting import NeighboringRelation

    if not noise_multiplier > 0:
        raise ValueError(f"noise multiplier must be > 0, got {noise_multiplier}")
    relation = NeighboringRelation.REPLACE_ONE if plan.relation == "replace" else NeighboringRelation.ADD_OR_REMOVE_ONE
    step = _pld_lib().from_gaussian_mechanism(
        noise_multiplier / math.sqrt(plan.blocks), sampling_prob=plan.sampling_rate,
        value_discretization_interval=DISCRETIZATION, neighboring_relation=relation,
    )
    pld = step.self_compose(plan.steps)
    if plan.count_noise is not None:
        # one unsubsampled Gaussian release, built with its true L2 shift (count_sensitivity) between neighbours;
        # without subsampling the PLD is symmetric, so it composes with the plan's relation as it is
        counts = _pld_lib().from_gaussian_mechanism(plan.count_noise, sensitivity=plan.count_sensitivity,
                                                 value_discretization_interval=DISCRETIZATION)
        pld = pld.compose(counts)
    if plan.selection is not None:
        pld = pld.compose(selection_pld(selection_for(plan.selection, plan.relation)))
    return pld


def selection_for(selection: SelectionRelease, relation: str) -> SelectionRelease:
    """The selection's releases as unit-sensitivity Laplace mechanisms under ``relation``: replacing a record
    (or flipping its group) moves one validation count from one cell to another, an L1 shift of 2 across
    two cells with independent noise, i.e. two unit releases; add/remove moves one cell by 1."""
    return SelectionRelease(selection.laplace_scale, 2 * selection.count) if relation == "replace" else selection


def plan_epsilon(plan: GaussianPlan, noise_multiplier: float, delta: float) -> float:
    """ε of ``plan`` at per-block noise multiplier σ and ``delta``."""
    _check_delta(delta)
    return float(plan_pld(plan, float(noise_multiplier)).get_epsilon_for_delta(delta))


def plan_min_noise(plan: GaussianPlan, target_epsilon: float, delta: float, rel_tol: float = 1e-3) -> float:
    """Smallest per-block noise multiplier σ (to ``rel_tol``) with ε(plan, σ) ≤ ``target_epsilon``.

    The first point of :func:`smallest_noise_within`'s grid whose ε fits, so the budget holds for the value returned.
    Raises if the count release alone exceeds the budget.
    """
    if not target_epsilon > 0:
        raise ValueError(f"target epsilon must be > 0, got {target_epsilon}")
    why = (f"the count release (count_noise={plan.count_noise}) alone spends too much; raise count_noise or epsilon"
           if plan.count_noise is not None else "raise epsilon, or lower the sampling rate or the number of steps")
    return smallest_noise_within(lambda s: plan_epsilon(plan, s, delta), target_epsilon, 1e5, why, rel_tol)
