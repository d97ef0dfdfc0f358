"""The papers' search (``--search tpe``): Ray Tune domains as Optuna distributions, studies rebuilt from recorded results,
rounds that a resumed sweep replays exactly, the constraint told against γ, and accounted tuning refusing it."""

from __future__ import annotations

import math

import pytest
from ray import tune

from raco_bench.methods import get_method
from raco_bench.methods.space import ZeroOr
from raco_bench.sweeps import SweepSpec
from raco_bench.sweeps.plan import cells, planned_phase1, tpe_phase1
from raco_bench.sweeps.tpe import CellSearch, Outcome, distributions, told_params

SPACE = {"lr": tune.loguniform(1e-3, 1.0), "width": tune.uniform(0.0, 1.0), "batch_size": tune.choice([64, 128, 256]),
         "fairness": ZeroOr(tune.loguniform(0.05, 10.0), 0.1), "steps": tune.lograndint(10, 1000), "fixed": 3}


def test_every_domain_becomes_an_optuna_distribution_and_a_zero_or_two():
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    d = distributions(SPACE)
    assert set(d) == {"lr", "width", "batch_size", "fairness", "fairness:zero", "steps"}  # a constant is not searched
    assert d["lr"] == FloatDistribution(1e-3, 1.0, log=True) and d["width"] == FloatDistribution(0.0, 1.0)
    assert d["batch_size"] == CategoricalDistribution([64, 128, 256]) and d["fairness:zero"] == CategoricalDistribution([False, True])
    assert d["steps"] == IntDistribution(10, 999, log=True)  # Tune's upper bound is exclusive
    values, used = told_params({"lr": 0.5, "width": 0.25, "batch_size": 128, "fairness": 0.0, "steps": 50, "fixed": 3}, SPACE)
    assert values == {"lr": 0.5, "width": 0.25, "batch_size": 128, "fairness:zero": True, "steps": 50} and set(used) == set(values)
    with pytest.raises(ValueError, match="cannot translate"):
        distributions({"q": tune.quniform(0, 1, 0.1)})


def _objective(params: dict) -> tuple[float, float]:
    """A toy cell: accuracy peaks at lr = 0.1, the constraint value grows with width."""
    return 0.9 - abs(math.log10(params["lr"]) + 1.0) * 0.1, params["width"] * 0.2


def _outcomes(proposals: list[dict]) -> list[Outcome]:
    return [Outcome(p, *_objective(p), failed=False) for p in proposals]


def test_proposals_are_deterministic_given_the_seed_and_the_told_results():
    search = CellSearch(SPACE, gamma=0.05, seed=7)
    first = search.propose([], 12)
    assert first == search.propose([], 12)  # same seed, nothing told: the same startup draws
    assert first != CellSearch(SPACE, gamma=0.05, seed=8).propose([], 12)
    told = _outcomes(first)
    again = search.propose(told, 6)
    assert again == search.propose(told, 6)  # a resumed sweep replays exactly
    assert all(isinstance(p["lr"], float) and p["lr"] == float(f"{p['lr']:.2g}") for p in again)  # rounded as random search rounds
    assert len({tuple(sorted(p.items())) for p in again}) == 6  # the constant liar spreads a batch


def test_tpe_learns_the_feasible_optimum_and_infeasible_results_steer_it():
    """After telling the toy cell's results, TPE's proposals sit nearer the best feasible region than its startup draws:
    a check that the constraint (width · 0.2 ≤ γ) and the objective reach the sampler."""
    search = CellSearch(SPACE, gamma=0.05, seed=3)
    told: list[Outcome] = []
    for _ in range(6):
        told += _outcomes(search.propose(told, 10))
    startup, late = told[:10], told[-10:]
    feasible = lambda os: sum(o.constraint <= 0.05 for o in os)  # noqa: E731
    assert feasible(late) > feasible(startup)
    assert sum(o.accuracy for o in late) / 10 > sum(o.accuracy for o in startup) / 10
    # the same history told as all-failed seeds gives other proposals: failure is told
    failed = [Outcome(o.params, o.accuracy, o.constraint, failed=True) for o in told]
    assert search.propose(failed, 5) != search.propose(told, 5)


def test_a_gamma_free_cell_is_searched_on_two_objectives():
    study = CellSearch(SPACE, gamma=None, seed=1).study(_outcomes(CellSearch(SPACE, None, 1).propose([], 4)))
    assert len(study.directions) == 2 and len(study.trials) == 4
    assert all(len(t.values) == 2 for t in study.trials)


SPEC = SweepSpec(dataset="adult", epsilons=(1.0,), gammas=(0.05, 0.1), methods=("raco-dp", "dp-fermi", "sgda"), n_configs=7,
                 phase1_seeds=2, search="tpe", search_batch=3)


class Recorder:
    """Stands in for the packs: "trains" every trial not recorded yet with a deterministic toy result, keeps the order
    of the rounds, and can stop (an interrupt) after a number of rounds."""

    def __init__(self, stop_after: int | None = None, rows: list[dict] | None = None):
        self.rows = rows if rows is not None else []
        self.rounds: list[int] = []
        self.stop_after = stop_after

    def recorded(self) -> list[dict]:
        return list(self.rows)

    def train(self, trials: list[dict]) -> None:
        if self.stop_after is not None and len(self.rounds) == self.stop_after:
            raise KeyboardInterrupt
        done = {r["trial_key"] for r in self.rows}
        new = [t for t in trials if t["trial_key"] not in done]
        for t in new:
            acc = 0.8 + 0.01 * t["seed"] + 0.001 * len(str(t["params"]))
            self.rows.append({**t, "val_accuracy": acc, "val_max_constraint": 0.04 + 0.001 * t["config_id"]})
        self.rounds.append(len(new))


def test_rounds_ask_every_cell_and_a_resumed_search_proposes_the_same_configurations():
    n_train = 28829
    whole = Recorder()
    trials = tpe_phase1(SPEC, n_train, whole.recorded, whole.train)
    assert len(trials) == planned_phase1(SPEC) == len(cells(SPEC)) * 7 * 2
    # rounds of 3 configurations per cell (config 0, the defaults, in the first), the last round the rest
    assert whole.rounds == [3 * 2 * len(cells(SPEC))] * 2 + [1 * 2 * len(cells(SPEC))]
    by_cell = {}
    for t in trials:
        by_cell.setdefault((t["method"], t["epsilon"], t["gamma"]), set()).add(t["config_id"])
    assert all(ids == set(range(7)) for ids in by_cell.values())
    assert {(m, g) for m, _, g in by_cell} == {("raco-dp", 0.05), ("raco-dp", 0.1), ("dp-fermi", None), ("sgda", 0.05), ("sgda", 0.1)}
    defaults = {t["method"]: t["params"] for t in trials if t["config_id"] == 0}
    assert set(defaults["raco-dp"]) == {"batch_size"}  # configuration 0 is the defaults, as in random search
    # interrupted after the first round, then resumed from what was recorded: the same configurations, trained once
    part = Recorder(stop_after=1)
    with pytest.raises(KeyboardInterrupt):
        tpe_phase1(SPEC, n_train, part.recorded, part.train)
    resumed = Recorder(rows=part.rows)
    again = tpe_phase1(SPEC, n_train, resumed.recorded, resumed.train)
    assert [(t["trial_key"], t["params"]) for t in again] == [(t["trial_key"], t["params"]) for t in trials]
    assert sorted(r["trial_key"] for r in resumed.rows) == sorted(t["trial_key"] for t in trials)  # nothing trained twice
    # another sample seed: other proposals
    other = Recorder()
    from dataclasses import replace

    assert [t["params"] for t in tpe_phase1(replace(SPEC, sample_seed=1), n_train, other.recorded, other.train)] != [t["params"] for t in trials]


def test_accounted_tuning_refuses_tpe_and_the_new_fields_keep_old_sweep_ids():
    with pytest.raises(ValueError, match="independent runs of one fixed random search"):
        SweepSpec(dataset="adult", tuning="accounted", checkpoint="private", search="tpe")
    with pytest.raises(ValueError, match="invalid search"):
        SweepSpec(dataset="adult", search="grid")
    base = SweepSpec(dataset="adult")
    from dataclasses import replace

    assert base.sweep_id == replace(base, search_batch=25).sweep_id  # the defaults leave the id as it was
    assert base.sweep_id != replace(base, search="tpe").sweep_id != replace(base, search="tpe", search_batch=10).sweep_id
    assert get_method("raco-dp").search_space(1000)  # the spaces TPE translates
    for method in ("raco-dp", "dp-fermi", "sgda", "dp-sgd", "pf-ld"):
        distributions(get_method(method).search_space(28829))
