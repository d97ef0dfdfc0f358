"""Accounted hyperparameter tuning (``--tuning accounted``): random search whose privacy is part of the claim
(docs/sweeps.md, "Accounted tuning"; the accounting in docs/privacy.md, "Accounted tuning").

For each (method, ε, γ) and each of R independent repetitions, the sweep:

1. draws the number of configurations K from its distribution (a truncated negative binomial of shape η and
   mean E[K], or a Poisson of mean E[K] when η = inf; :class:`raco_bench.privacy.rounds.Rounds`);
2. draws K configurations independently from the method's search space (the defaults are not
   favoured: every run is an independent copy of the same randomised algorithm);
3. trains each once with private checkpoint selection: each run releases its model and the noisy
   validation counts of its checkpoints (a Laplace release per checkpoint), inside its own budget;
4. releases the run with the best noisy validation accuracy among those whose noisy validation
   constraints hold (post-processing of what the runs released); none, if no run's do (or K = 0).

The claim is the privacy-profile bound (1) of :mod:`raco_bench.privacy.tuning_profile` (after Koskela, Redberg &
Wang): it reads the base run's profile δ_Q at two points ε̃ and ε̂, and covers every search whose runs all have a
profile at most those two values there. A run's profile comes from the PLD of the mechanism events its method says
it releases (``Method.privacy_event``, :mod:`raco_bench.privacy.events`; RaCO-DP's is the joint PLD of its
shared-batch step), and what a configuration may spend is set by its tuning knob (``Method.tuning_knob``: T for
RaCO-DP, DP-SGD and DP post-processing, the noise multiplier for DP-FERMI, the zCDP budget ρ for budget tailoring).
The sweep fixes both points before any run: the reference run is the method's default configuration at the knob
value that spends the most while (1), at its best pair, is the target ε (:func:`reference`). Each drawn
configuration then trains at the knob value that spends the most while its own δ at ε̃ and at ε̂ is at most the
reference's (:func:`dominated`), so the released model's end-to-end ε is at most the target, and that ε is what
every run, the sweep and the figures state. Beside it the sweep states Papernot & Steinke's RDP theorem on the
reference run (Theorem 2, Theorem 6 for a Poisson K), the reference figure the profile bound is compared with.

K and the configurations are secret: the bound holds for a reader who sees the released run only, and a reader who
knows K (or the released run's position in the search, which bounds it) reads a release of a known number of runs,
which spends far more (issue 45's review: ε = 2.47 at a printed 1.00 with K known). So both are drawn from the sweep's
word source (:func:`draw_search`: the counter generator's purpose ``SEARCH`` in a stream of the search's own, AES-256-CTR
under the sweep's secret key), and a run is known by a keyed random ``config_id`` and ``seed``, never by its position;
no run, table row or release record states K. Under ``randomness=reproducible`` anyone who reads the logged search seed
regenerates K and the configurations, and every private run lists that outside the budget (:data:`REPRODUCIBLE_SEARCH_NOTE`).
A resume under another key (no ``--key-file``) draws another search: the runs of the earlier key are deleted first
(:func:`raco_bench.tracking.drop_other_keys`, called by the sweep's runner).

The methods: every private method whose claim is record-level (its events have a PLD); a method whose claim is of
another kind (PF-LD, the sensitive-attribute modes) is refused with the reason. The core code here names no method:
it asks each for its knob and its events.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from raco_bench.methods import get_method
from raco_bench.methods.base import Budget
from raco_bench.methods.space import sample_config, sample_configs
from raco_bench.privacy import counter_rng, events
from raco_bench.privacy.counter_rng import Keystream
from raco_bench.privacy.rdp import ORDERS, RdpCurve
from raco_bench.privacy.tuning import repeat_and_select
from raco_bench.privacy.tuning_profile import ProfilePoints, covered, search_epsilon
from raco_bench.sweeps.calibration import apply_calibrated

if TYPE_CHECKING:
    from raco_bench.sweeps.plan import Trial

SEARCH_IDS = 1 << 31  # a run's config_id and seed: keyed random numbers below this, never its position in the search
STORE_NOTE = ("accounted tuning: the end-to-end epsilon holds for a reader of the released model only; this store also holds "
              "K and every candidate run of the search")
REPRODUCIBLE_SEARCH_NOTE = ("K and the configurations can be regenerated from the logged seed (randomness=reproducible): the end-to-end "
                            "epsilon holds only if the seed is secret")


def _budget(spec, epsilon: float) -> Budget:
    return Budget(epsilon, spec.delta, spec.max_steps, None, spec.selection)


@dataclass(frozen=True)
class RunFamily:
    """One configuration's runs along its tuning knob (``Method.tuning_knob``: T, a noise multiplier, a zCDP budget...):
    for each knob value, what the trial fixes (``changes``) and what the run releases (its privacy event)."""

    method: Any
    params: dict
    n_train: int
    budget: Budget
    problem: Any  # CalibrationProblem | None: None when the run has no knob (its one event is fixed)

    @staticmethod
    def of(method, params: dict, n_train: int, budget: Budget) -> "RunFamily":
        return RunFamily(method, dict(params), n_train, budget, method.tuning_knob(method.hyperparameters(params), n_train, budget))

    def changes(self, value: float | None) -> dict:
        return {} if self.problem is None else self.method.calibrated(self.problem, value)

    def event(self, value: float | None):
        fixed = self.changes(value)
        hyper = self.method.hyperparameters({**self.params, **fixed.get("params", {})})
        return self.method.privacy_event(hyper, self.n_train, replace(self.budget, steps=fixed.get("steps", self.budget.steps)))

    def curve(self, value: float | None) -> RdpCurve:
        return RdpCurve(ORDERS, tuple(float(x) for x in events.rdp(self.event(value))))

    def passes(self, value: float, ok) -> bool:
        """``ok`` of the run's event at ``value``; False where the method refuses the value (e.g. a budget ρ that leaves
        nothing to train) or the run spends beyond what the bound can state."""
        try:
            return ok(self.event(value))
        except events.UnsupportedEvent:
            raise
        except ValueError:
            return False

    def most_within(self, ok) -> float | None:
        """The knob value that spends the most while ``ok(event)`` holds; None when there is no knob (then ``ok`` must hold
        for the one event) — raises ValueError when no value passes."""
        if self.problem is None:
            if not ok(self.event(None)):
                raise ValueError("no value passes")
            return None
        knob = self.problem.knob
        cap = self.budget.max_steps if knob.integer else 1e6
        value = knob.most_within(lambda v: self.passes(v, ok), cap)
        if knob.integer and value == 0:
            raise ValueError("no value passes")
        return value


def supports_accounting(method_name: str, spec=None, n_train: int | None = None) -> str | None:
    """None when accounted tuning can run ``method_name``, else why not: its runs must describe their releases as mechanism
    events with a privacy loss distribution (``Method.privacy_event``), which record-level claims do."""
    method = get_method(method_name)
    if not method.private:
        return None  # a non-private method spends nothing to tune (it has no ε to state)
    if spec is None or n_train is None:
        return None
    defaults = sample_configs(method, 1, n_train, spec.search_seed)[0]
    family = RunFamily.of(method, defaults, n_train, _budget(spec, spec.epsilons[0]))
    try:
        value = family.problem.solve() if family.problem is not None else None
        events.rdp(family.event(value))  # its PLD, which costs seconds, is asked for by the reference (with this message)
    except events.UnsupportedEvent as e:
        return _unsupported(method_name, e)
    return None


def _unsupported(method_name: str, e: Exception) -> str:
    return (f"accounted tuning needs the privacy loss distribution and RDP curve of {method_name}'s run: {e}; drop it with --methods, "
            "or sweep it with --tuning not-accounted")


@dataclass(frozen=True)
class Reference:
    """The two profile values every run of one (method, ε) must stay under, and what the release then spends."""

    knob: str  # what the reference run's calibration set ("steps", "noise_multiplier", "rho"; "" without a knob)
    value: float | None  # its value for the reference run (the method's defaults)
    points: ProfilePoints  # the reference run's δ at (ε̃, ε̂): the bound (1) covers every run at or below both
    epsilon_end_to_end: float  # of the released model, by (1) (≤ the target): the claim
    epsilon_rdp: float  # Papernot & Steinke's theorem on the reference run's RDP curve: the reference figure beside it


def reference(spec, method_name: str, epsilon: float, n_train: int) -> Reference:
    """The default configuration at the knob value that spends the most while the release of the best of K runs like it
    stays within ``epsilon`` end to end by (1), the pair of profile points that gives that bound, and the RDP figure."""
    method = get_method(method_name)
    defaults = sample_configs(method, 1, n_train, spec.search_seed)[0]
    family = RunFamily.of(method, defaults, n_train, _budget(spec, epsilon))
    rounds = spec.rounds
    try:
        value = family.most_within(lambda event: search_epsilon(event, rounds, spec.delta)[0] <= epsilon)
    except events.UnsupportedEvent as e:
        raise ValueError(_unsupported(method_name, e)) from None
    except ValueError:
        raise ValueError(f"accounted tuning of {method_name} at epsilon={epsilon}: the budget does not allow one run of the default "
                         f"configuration with {rounds.describe()}; raise epsilon or lower --tuning-mean") from None
    event = family.event(value)
    eps, points = search_epsilon(event, rounds, spec.delta)
    rdp = repeat_and_select(family.curve(value), spec.tuning_mean, spec.tuning_shape).epsilon(spec.delta)
    return Reference(family.problem.knob.name if family.problem is not None else "", value, points, eps, float(rdp))


def dominated(family: RunFamily, ref: Reference) -> float | None:
    """The knob value that spends the most while the run's δ at the reference's two points ε̃ and ε̂ is at most the
    reference's at both (so the release's bound is the reference's); raises ValueError when none is."""
    return family.most_within(lambda event: covered(event, ref.points))


@dataclass(frozen=True)
class Search:
    """One private random search's secret draws: its K runs, each as (config_id, seed, params), the id and seed keyed
    random numbers (below SEARCH_IDS) that say nothing of the run's position or of K."""

    runs: tuple[tuple[int, int, dict], ...]


def search_stream(spec, method_name: str, epsilon: float | None, gamma: float | None, repeat: int) -> int:
    """The stream id of one search (a signed 64-bit hash of the sweep's search seed, the cell and the repetition): public,
    like a run's; what keeps the draws secret is the word source."""
    digest = hashlib.sha256(repr(("accounted search", spec.search_seed, method_name, epsilon, gamma, repeat)).encode()).digest()
    return int.from_bytes(digest[:8], "little", signed=True)


def _words(source: Keystream, stream: int, index: int, count: int) -> list[int]:
    """Words 0 … count−1 of the stream (stream, step ``index``, purpose SEARCH), as unsigned 64-bit integers."""
    keys = counter_rng.stream_keys(torch.tensor([stream], dtype=torch.int64), index, counter_rng.SEARCH, source)
    return [w & 0xFFFFFFFFFFFFFFFF for w in counter_rng.words(keys, 0, count)[0].tolist()]


def draw_search(spec, method, n_train: int, stream: int, source: Keystream) -> Search:
    """K from step 0 of the search's stream (256 words' bits seed the sampler of :meth:`Rounds.sample`), and run i's
    configuration from step i + 1 (words 0–3 seed its draw from the method's space, words 4 and 5 are its config_id
    and seed): a pure function of (stream, purpose, index) in ``source``, so a resume under the same key draws the same
    search, and run i's draws do not depend on K."""
    K = spec.rounds.sample(np.random.default_rng(_words(source, stream, 0, 4)))
    space = method.sweep_space(n_train, spec.step_budget, spec.max_steps)
    runs = []
    for i in range(K):
        w = _words(source, stream, i + 1, 6)
        runs.append((w[4] % SEARCH_IDS, w[5] % SEARCH_IDS, sample_config(space, np.random.default_rng(w[:4]))))
    return Search(tuple(runs))


def _check_source(spec, source: Keystream) -> None:
    if source.mode != spec.randomness:
        raise ValueError(f"accounted tuning draws K and the configurations from the sweep's word source: randomness={spec.randomness} "
                         f"needs {'the sweep secret key' if spec.randomness == 'secret' else 'the reproducible generator'}, got a "
                         f"{source.mode} one")


def accounted_trials(spec, n_train: int, make_trial, source: Keystream) -> tuple[list[dict], dict]:
    """Every run of the accounted search, as trials (``make_trial(method, ε, γ, config_id, params, seed)``), and the references
    by (method, ε). K and the configurations are drawn from ``source``, the sweep's word source (:func:`draw_search`).
    Non-private methods are searched the same way (their tuning costs no privacy)."""
    _check_source(spec, source)
    trials, refs = [], {}
    rounds = spec.rounds
    note = (f"random search over {rounds.describe()} configurations, the best noisy validation score released; "
            f"{spec.tuning_repeats} independent repetitions")
    for method_name in spec.methods:
        why = supports_accounting(method_name, spec, n_train)
        if why:
            raise ValueError(why)
        method = get_method(method_name)
        epsilons = list(spec.epsilons) if method.private else [None]
        gammas = list(spec.gammas) if method.gamma_is_input else [None]
        outside = [STORE_NOTE] + ([REPRODUCIBLE_SEARCH_NOTE] if method.private and source.secret is None else [])
        for eps in epsilons:
            ref = reference(spec, method_name, eps, n_train) if eps is not None else None
            refs[(method_name, eps)] = ref
            for gamma in gammas:
                for r in range(spec.tuning_repeats):
                    search = draw_search(spec, method, n_train, search_stream(spec, method_name, eps, gamma, r), source)
                    for config_id, seed, params in search.runs:
                        t = make_trial(method_name, eps, gamma, config_id, params, seed)
                        t.update(repeat=r, tuning="accounted", tuning_note=note, tuning_outside_budget=list(outside))
                        if ref is not None:
                            _fix(t, RunFamily.of(method, params, n_train, _budget(spec, eps)), ref)
                        trials.append(t)
    return trials, refs


def _fix(trial: Trial, family: RunFamily, ref: Reference) -> None:
    """Set what the trial's knob value fixes (its T, calibrated parameters), or skip it when no value fits the reference."""
    trial["epsilon_end_to_end"] = ref.epsilon_end_to_end
    trial["epsilon_end_to_end_rdp"] = ref.epsilon_rdp
    try:
        fixed = family.changes(dominated(family, ref))
    except ValueError:
        fixed = {"skip": "its run cannot fit under the reference's privacy profile"}
    apply_calibrated(trial, fixed)


@dataclass(frozen=True)
class Release:
    """What one repetition of the accounted search releases for (method, ε, γ). It states neither K nor the released run's
    position in the search: the claim holds for a reader who knows neither (the module's docstring)."""

    method: str
    epsilon: float | None
    gamma: float
    repeat: int
    trial_key: str | None  # the released run; None when no run's noisy validation constraints held
    val_accuracy: float | None  # the selection score: noisy for a private method, exact for a non-private one
    epsilon_end_to_end: float | None  # the claim, by privacy profiles
    epsilon_end_to_end_rdp: float | None = None  # the RDP theorem's figure for the same reference
    # a private method trained without γ: the other γ whose models this repetition selects from the same K runs. Together
    # they are one joint release that no printed ε covers (each alone is covered): publish one of them
    same_search_as: tuple[float, ...] = ()


JOINT_NOTE = ("trained without gamma, so each repetition selects its models for every gamma from the same K runs: together they are one "
              "joint release that no printed epsilon covers (each alone is covered); publish one")


def select_released(spec, results: list[dict], refs: dict | None = None) -> list[Release]:
    """Per (method, ε, γ, repetition): the run with the best noisy validation accuracy among those noisily feasible at γ
    (a non-private method, which spends no budget, on its exact validation scores). The end-to-end ε is the reference's
    (``refs``, from :func:`accounted_trials`) or, without it, the one the runs state (none when K = 0)."""
    out = []
    for method_name in spec.methods:
        method = get_method(method_name)
        for eps in (list(spec.epsilons) if method.private else [None]):
            for gamma in spec.gammas:
                trained_gamma = gamma if method.gamma_is_input else None
                for r in range(spec.tuning_repeats):
                    runs = [x for x in results if x["method"] == method_name and x["epsilon"] == eps and x["gamma"] == trained_gamma
                            and x.get("repeat") == r]
                    acc, con = ("noisy_val_accuracy", "noisy_val_max_constraint") if method.private else ("val_accuracy", "val_max_constraint")
                    ok = [x for x in runs if math.isfinite(x.get(acc, math.nan)) and x.get(con, math.inf) <= gamma]
                    best = max(ok, key=lambda x: (x[acc], -x["config_id"])) if ok else None
                    e2e = next((x.get("epsilon_end_to_end") for x in runs if x.get("epsilon_end_to_end") is not None), None)
                    ref = (refs or {}).get((method_name, eps))
                    joint = tuple(g for g in spec.gammas if g != gamma) if method.private and not method.gamma_is_input else ()
                    out.append(Release(method_name, eps, gamma, r, best["trial_key"] if best else None, best[acc] if best else None,
                                       ref.epsilon_end_to_end if ref is not None else e2e, ref.epsilon_rdp if ref is not None else None,
                                       joint))
    return out
