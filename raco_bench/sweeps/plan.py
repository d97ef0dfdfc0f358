"""The two-phase protocol as plain data: trial lists, privacy calibration needs, and selection.

A trial is a JSON-able dict typed by :class:`Trial` (it is what a pack carries to its Ray worker and what MLflow
records), identified by a deterministic ``trial_key``. Its record after training is a row of
:func:`raco_bench.records.results.columns`; what it leaves unset takes :class:`~raco_bench.training.config.RunConfig`'s
defaults (the defaults are written there only). Non-private methods do not depend on ε, so
they run once (ε = None); methods trained without the slack γ (``gamma_is_input = False`` on the
plugin) run once per ε and are selected for each γ from the same trials.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TypedDict

from raco_bench.methods import get_method
from raco_bench.methods.space import sample_configs
from raco_bench.sweeps.spec import SweepSpec
from raco_bench.training.config import run_fields


class PlannedTrial(TypedDict):
    """The sweep identity every trial has (:func:`make_trial`); the trial also carries its run's settings, every
    :class:`~raco_bench.training.config.RunConfig` field a plan sets (``run_fields("planned")``: dataset, method,
    constraint, ε — None for a non-private method —, γ — None for a method trained without γ —, seed, the sampled
    hyperparameters as ``params``, ...), typed and documented there, not restated here."""

    sweep_id: str
    experiment: str
    phase: int
    config_id: int
    trial_key: str


class Trial(PlannedTrial, total=False):
    """One configuration of one sweep, from the plan to its pack: the planned keys, then those the steps after the
    plan add (a run setting among them, like ``steps``, is a RunConfig field)."""

    # set by calibration (raco_bench.sweeps.calibration): the calibrated noise, or why the method cannot train it
    calibrated: dict[str, Any]
    skip: str
    # set by selection: the γ values a γ-free winner's phase-2 run stands for
    selected_gammas: list[float]
    # set by accounted tuning (raco_bench.sweeps.accounted)
    repeat: int
    tuning: str
    tuning_note: str
    tuning_outside_budget: list[str]  # what the search adds to the run's outside_budget (raco_bench.sweeps.accounted)
    epsilon_end_to_end: float
    epsilon_end_to_end_rdp: float
    # set by the plan on a user's dataset (docs/datasets.md, "Your own data"): the digest of its files, checked by the trial
    files_digest: str


PHASE2_SEED_OFFSET = 1000  # phase-2 seeds are fresh: never used in phase 1


def trial_key(trial: Trial) -> str:
    fields = {k: trial[k] for k in ("sweep_id", "phase", "method", "epsilon", "gamma", "config_id", "seed")}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def make_trial(spec: SweepSpec, phase: int, method: str, epsilon: float | None, gamma: float | None, config_id: int, params: dict, seed: int) -> Trial:
    """A trial: the sweep's identity and its run, the sweep's template (:attr:`SweepSpec.run`) with this method, ε, γ,
    seed and hyperparameters, as the JSON-able record a pack carries to its worker and MLflow keeps."""
    run = replace(spec.run, method=method, epsilon=epsilon, gamma=gamma, seed=seed, params=dict(params))
    t: Trial = {"sweep_id": spec.sweep_id, "experiment": spec.experiment, "phase": phase, "config_id": config_id}  # type: ignore[typeddict-item]
    t.update({k: getattr(run, k) for k in run_fields("planned")})  # type: ignore[typeddict-item]
    if spec.schema:  # a user's dataset: the digest of its files, checked by the trial
        t["files_digest"] = spec.files_digest
    t["trial_key"] = trial_key(t)
    return t


Baseline = Callable[[float], "float | None"]  # γ -> the failure bar's accuracy (None: only divergence counts as failure)


def _grid(spec: SweepSpec, method: str) -> list[tuple[float | None, float | None]]:
    plugin = get_method(method)
    eps = list(spec.epsilons) if plugin.private else [None]
    gam = list(spec.gammas) if plugin.gamma_is_input else [None]
    return [(e, g) for e in eps for g in gam]


def phase1_trials(spec: SweepSpec, n_train: int) -> list[Trial]:
    trials = []
    for method in spec.methods:
        configs = sample_configs(get_method(method), spec.n_configs, n_train, spec.search_seed, spec.step_budget, spec.max_steps)
        for epsilon, gamma in _grid(spec, method):
            for config_id, params in enumerate(configs):
                for seed in range(spec.phase1_seeds):
                    trials.append(make_trial(spec, 1, method, epsilon, gamma, config_id, params, seed))
    return trials


def cells(spec: SweepSpec) -> list[tuple[str, float | None, float | None]]:
    """Every (method, ε, trained γ) that phase 1 searches on its own (γ None: a γ-free method, selected for every γ)."""
    return [(method, e, g) for method in spec.methods for e, g in _grid(spec, method)]


def tpe_phase1(spec: SweepSpec, n_train: int, recorded: Callable[[], list[dict]], train: Callable[[list[Trial]], None],
               baseline: Baseline | None = None) -> list[Trial]:
    """Phase 1 under ``--search tpe`` (:mod:`raco_bench.sweeps.tpe`): round r asks configurations r·b … (r+1)·b − 1 of every
    cell (b = ``search_batch``; configuration 0, the defaults, is trained but not told), then calls ``train`` with the round's
    trials (it trains those not recorded yet, in packs sized for the round) before the next round reads ``recorded()``. Returns every phase-1 trial.
    A round's proposals depend only on the recorded results of the earlier rounds, so ``--resume`` replays them."""
    from raco_bench.sweeps.tpe import CellSearch, Outcome, cell_seed

    searches = {}
    for method, epsilon, gamma in cells(spec):
        space = get_method(method).sweep_space(n_train, spec.step_budget, spec.max_steps)
        searches[(method, epsilon, gamma)] = CellSearch(space, gamma, cell_seed(spec.search_seed, method, epsilon, gamma))
    defaults = {m: sample_configs(get_method(m), 1, n_train, spec.search_seed)[0] for m in spec.methods}
    lenient = min(spec.gammas)  # a γ-free method's failure bar: the lowest over the γ it serves
    trials: list[Trial] = []
    for lo in range(0, spec.n_configs, spec.search_batch):
        first = len(trials)
        hi = min(lo + spec.search_batch, spec.n_configs)
        told: dict[tuple, dict[int, list[dict]]] = {}  # cell -> configuration -> its seeds, from the earlier rounds
        for r in recorded() if lo else []:
            if 0 < r["config_id"] < lo:
                told.setdefault((r["method"], r["epsilon"], r["gamma"]), {}).setdefault(r["config_id"], []).append(r)
        for (method, epsilon, gamma), search in searches.items():
            by_config = told.get((method, epsilon, gamma), {})
            bar = baseline(gamma if gamma is not None else lenient) if baseline is not None else None
            outcomes = [Outcome(rs[0]["params"], _mean([r["val_accuracy"] for r in rs]), _mean([r["val_max_constraint"] for r in rs]),
                                any(failed_seed(r, bar) for r in rs)) for _, rs in sorted(by_config.items())]
            proposals = search.propose(outcomes, hi - max(lo, 1))
            configs = ([defaults[method]] if lo == 0 else []) + proposals
            for config_id, params in enumerate(configs, start=lo):
                trials += [make_trial(spec, 1, method, epsilon, gamma, config_id, params, seed) for seed in range(spec.phase1_seeds)]
        train(trials[first:])
    return trials


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def planned_phase1(spec: SweepSpec) -> int:
    """Phase 1's trial count, known before a TPE search has asked for its configurations."""
    return len(cells(spec)) * spec.n_configs * spec.phase1_seeds


@dataclass(frozen=True)
class Selection:
    """The phase-1 winner for one (method, ε, γ), or None when no configuration met γ."""

    method: str
    epsilon: float | None
    gamma: float
    config_id: int | None
    params: dict | None
    val_accuracy: float | None
    val_constraint: float | None
    n_feasible: int
    n_configs: int
    n_failed: int = 0  # configurations excluded because a phase-1 seed failed (see :func:`select`)


FAILURE_MARGIN = 0.01  # a seed fails when its validation accuracy is below the constant predictor's by more than this


def failure_baseline(family, task, val_labels) -> Baseline:
    """γ -> the failure bar on these validation labels: what the best constant predictor that meets the constraint scores
    there, as the constraint's ``family`` declares it (:attr:`raco_bench.constraints.families.Family.constant`)."""
    return lambda gamma: family.constant_accuracy(task, val_labels, gamma)


def failed_seed(result: dict, baseline_accuracy: float | None) -> bool:
    """A phase-1 seed that failed: no finite validation metrics (the run diverged), or validation accuracy more than
    FAILURE_MARGIN below ``baseline_accuracy`` (the best constant predictor's that meets the constraint,
    :func:`failure_baseline`): the run collapsed, whatever its constraint value (a collapsed model often
    meets every rate constraint)."""
    acc, con = result.get("val_accuracy", math.nan), result.get("val_max_constraint", math.nan)
    if not (math.isfinite(acc) and math.isfinite(con)):
        return True
    return baseline_accuracy is not None and acc < baseline_accuracy - FAILURE_MARGIN


def select(spec: SweepSpec, results: list[dict], baseline: Baseline | None = None) -> list[Selection]:
    """Best mean validation accuracy among configurations whose mean validation constraint value meets γ and none of
    whose phase-1 seeds failed (:func:`failed_seed`, against ``baseline(γ)``): a configuration that collapses on some
    seeds cannot win on the others, since a user of it gets a random seed.

    ``results`` are completed phase-1 trials, each the trial dict plus ``val_accuracy`` and
    ``val_max_constraint`` (the reported checkpoint's values).
    """
    out = []
    for method in spec.methods:
        for epsilon, trained_gamma in _grid(spec, method):
            gammas = [trained_gamma] if trained_gamma is not None else list(spec.gammas)
            rows = [r for r in results if r["method"] == method and r["epsilon"] == epsilon and r["gamma"] == trained_gamma]
            by_config: dict[int, list[dict]] = {}
            for r in rows:
                by_config.setdefault(r["config_id"], []).append(r)
            stats = {
                cid: (
                    sum(r["val_accuracy"] for r in rs) / len(rs),
                    sum(r["val_max_constraint"] for r in rs) / len(rs),
                    rs[0]["params"],
                )
                for cid, rs in by_config.items()
            }
            for gamma in gammas:
                bar = baseline(gamma) if baseline is not None else None
                failed = {cid for cid, rs in by_config.items() if any(failed_seed(r, bar) for r in rs)}
                feasible = {cid: s for cid, s in stats.items() if math.isfinite(s[1]) and s[1] <= gamma and cid not in failed}
                if feasible:
                    cid = max(feasible, key=lambda c: (feasible[c][0], -c))
                    acc, con, params = feasible[cid]
                    out.append(Selection(method, epsilon, gamma, cid, params, acc, con, len(feasible), len(stats), len(failed)))
                else:
                    out.append(Selection(method, epsilon, gamma, None, None, None, None, 0, len(stats), len(failed)))
    return out


def phase2_trials(spec: SweepSpec, selections: list[Selection]) -> list[Trial]:
    """Fresh seeds of every winner; a winner shared by several γ (γ-free methods) is trained once, and its trials list
    every γ it won (``selected_gammas``: one MLflow run per γ, docs/sweeps.md, "MLflow")."""
    trials, index = [], {}
    for sel in selections:
        if sel.config_id is None:
            continue
        trained_gamma = sel.gamma if get_method(sel.method).gamma_is_input else None
        key = (sel.method, sel.epsilon, trained_gamma, sel.config_id)
        if key in index:
            for t in index[key]:
                t["selected_gammas"].append(sel.gamma)
            continue
        index[key] = [make_trial(spec, 2, sel.method, sel.epsilon, trained_gamma, sel.config_id, sel.params, PHASE2_SEED_OFFSET + k)
                      for k in range(spec.phase2_seeds)]
        for t in index[key]:
            t["selected_gammas"] = [sel.gamma]
        trials += index[key]
    return trials


def pack_key(members: list[dict]) -> str:
    return hashlib.sha256(json.dumps(sorted(t["trial_key"] for t in members)).encode()).hexdigest()[:16]


def make_packs(trials: list[Trial], pack_size: int) -> list[dict]:
    """Group a phase's trials into packs of at most ``pack_size``: one method per pack, configurations with
    similar batch sizes and T together (a pack pads each chunk's batches to its widest one, and a
    configuration past its T idles while its pack finishes). Phase-2 packs ask for a run per
    configuration (``child_runs``); phase-1 configurations are rows of their pack's table."""
    by_method: dict[str, list[Trial]] = {}
    for t in trials:
        by_method.setdefault(t["method"], []).append(t)
    packs = []
    for method, group in by_method.items():
        group = sorted(group, key=lambda t: (t["params"].get("batch_size", 0), -(t.get("steps") or t["max_steps"]), t["trial_key"]))
        for i in range(0, len(group), pack_size):
            members = group[i:i + pack_size]
            packs.append({"pack_key": pack_key(members), "sweep_id": members[0]["sweep_id"], "phase": members[0]["phase"], "method": method,
                          "child_runs": members[0]["phase"] == 2, "members": members})
    return packs


GPU_PACK_LIMIT = 65_536  # configurations per GPU trial at most; a trial trains them in packs that fit its device's free memory


def auto_pack_size(n_trials: int, slots: float, gpu: bool, fits: Callable[[int], int] | None = None) -> int:
    """On a CPU: at least two packs per concurrent slot (so the slots stay busy to the end), at most 256 configurations
    per pack, and at most what ``fits(limit)`` says fits the node's memory (:func:`raco_bench.training.pack_memory.largest_pack`).
    On GPUs: one trial per slot (a larger pack trains more configurations per second on a device), at most
    :data:`GPU_PACK_LIMIT`; the trial sizes its packs from the free memory of the device it lands on
    (:func:`raco_bench.training.pack_memory.largest_pack_on_device`), so the host's memory does not limit it here."""
    if gpu:
        return max(1, min(GPU_PACK_LIMIT, math.ceil(n_trials / max(slots, 1.0))))
    size = max(1, min(256, math.ceil(n_trials / max(2.0 * slots, 1.0))))
    return min(size, fits(size)) if fits is not None else size


def pack_memory_fit(trials: list[Trial], spec: SweepSpec, shape, slots: float, free: int | None = None) -> Callable[[int], int] | None:
    """``fits(limit)`` for :func:`auto_pack_size`: the largest pack of these trials (their widest expected batch, their
    most evaluations) that the memory model (docs/packs.md, "Memory") fits in this node's share per slot."""
    from raco_bench.training.pack_memory import evaluations_of, largest_pack, pack_budget

    budget = pack_budget(slots, shape, free)
    if budget is None or not trials:
        return None
    batch = max(float(t["params"].get("batch_size", 0) or 0) for t in trials) or float(shape.n_train)
    selection = spec.selection_checkpoints if spec.checkpoint == "private" else 0
    evaluations = max(evaluations_of(t.get("steps") or spec.max_steps, spec.eval_every, selection) for t in trials)
    return lambda limit: largest_pack(limit, shape, batch, evaluations, budget)
