"""The store's ε (raco_bench/privacy/store.py, raco_bench/sweeps/store_privacy.py; docs/privacy.md, "The store's ε").

Runs that draw the same batches are one Poisson-subsampled mechanism releasing all of their noisy quantities at each
step. The checks: issue 45's figures (K DP-SGD runs of ε = 1 on Adult's batches), a group's segments against the
composition written out, the Laplace combination against a direct integration of the hockey-stick divergence of one
shared step with two Laplace histograms (independent of the PLD code), and a real sweep's store: its summary, its
parent run and the report state the figure. Each bug of tests/planted_bugs.py (``STORE_BUGS``) must turn a check red.
"""

from __future__ import annotations

import importlib
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from dp_accounting import dp_event as ev
from scipy.special import ndtr

from raco_bench.data.catalog import public_train_rows
from raco_bench.methods import get_method
from raco_bench.methods.base import Budget
from raco_bench.privacy import events

sys.path.insert(0, str(Path(__file__).parent))
from mutants import first_catch, load_mutant  # noqa: E402
from planted_bugs import STORE_BUGS  # noqa: E402
from test_report import adult_store  # noqa: E402, F401 - the Adult smoke store (tests/stores.py), made in the background

DELTA = 1e-5
ADULT_N = public_train_rows("adult")
Q = 1024 / ADULT_N


def dp_sgd_event(noise: float, steps: int):
    """A real DP-SGD run's event (its plugin's ``privacy_event``) on Adult at B = 1024."""
    method = get_method("dp-sgd")
    hyper = method.hyperparameters({"batch_size": 1024, "noise_multiplier": noise})
    return method.privacy_event(hyper, ADULT_N, Budget(1.0, DELTA, steps, steps))


def check_issue_figures(store) -> None:
    """Issue 45: DP-SGD, σ = 4, T = 858, each run ε = 1: K runs on the same batches against K independent ones."""
    run = dp_sgd_event(4.0, 858)
    assert events.epsilon(run, DELTA) == pytest.approx(0.9998, abs=1e-4)
    for K, shared, independent in ((10, 4.487, 3.576), (30, 13.736, 6.772)):  # the issue: 4.49, 3.58; 13.7, 6.8
        s = store.store_epsilon([store.StoreRelease(run, "seed 0", f"run {k}") for k in range(K)], DELTA)
        assert (s.epsilon, s.independent) == (pytest.approx(shared, abs=1e-3), pytest.approx(independent, abs=1e-3)), (K, s)
        assert s.shared_groups == 1 and s.largest_group == K and s.largest_run == pytest.approx(0.9998, abs=1e-4)
        own = store.store_epsilon([store.StoreRelease(run, None, f"run {k}") for k in range(K)], DELTA)
        assert own.epsilon == pytest.approx(independent, abs=1e-3) and own.shared_groups == 0  # --batch-draws own


def check_segments(store) -> None:
    """Two DP-SGD runs of different T and σ on the same batches, with one more of another rate on the same stream (its
    own batches: independent): the group is one Gaussian of the summed precision while both run, then the longer alone."""
    short, long_, other = dp_sgd_event(3.0, 300), dp_sgd_event(5.0, 800), dp_sgd_event(4.0, 500)
    method = get_method("dp-sgd")
    other = method.privacy_event(method.hyperparameters({"batch_size": 512, "noise_multiplier": 4.0}), ADULT_N,
                                 Budget(1.0, DELTA, 500, 500))
    written = events.compose(ev.SelfComposedDpEvent(ev.PoissonSampledDpEvent(Q, ev.GaussianDpEvent((3.0**-2 + 5.0**-2) ** -0.5)), 300),
                             ev.SelfComposedDpEvent(ev.PoissonSampledDpEvent(Q, ev.GaussianDpEvent(5.0)), 500), other)
    got = store.store_epsilon([store.StoreRelease(e, "seed 0", k) for k, e in (("short", short), ("long", long_), ("other", other))], DELTA)
    assert got.epsilon == pytest.approx(events.epsilon(written, DELTA), rel=1e-9)


def exact_shared_delta(q: float, sigma: float, scales: tuple[float, ...], eps: float, bins: int = 1500) -> float:
    """δ(ε) of one Poisson(q) batch feeding a Gaussian (multiplier σ) and Laplace histograms (scales), each of sensitivity 1,
    the larger of the remove and add directions: the Gaussian in closed form, each Laplace's privacy loss as atoms at
    ±1/s and the midpoints of ``bins`` bins of its linear part (x in (0, 1)), their sum by outer sums. Independent of the
    PLD code (tests/test_accounting.py integrates one Laplace the same way)."""
    loss, weight = np.zeros(1), np.ones(1)
    for s in scales:
        x = (np.arange(bins) + 0.5) / bins
        atoms = np.concatenate([[-1 / s, 1 / s], (2 * x - 1) / s])
        w = np.concatenate([[0.5, 0.5 * math.exp(-1 / s)], np.exp(-x / s) / (2 * s) / bins])
        loss, weight = (loss[:, None] + atoms[None]).ravel(), (weight[:, None] * w[None]).ravel()
    v = sigma**-2
    tau = math.sqrt(v)
    g = math.expm1(eps) + q  # remove: E_P0[(q e^S − g)+], S = S_G + c, S_G ~ N(−v/2, v)
    s0 = math.log(g / q) - loss
    remove = np.dot(weight, q * np.exp(loss) * ndtr((v / 2 - s0) / tau) - g * ndtr((-v / 2 - s0) / tau))
    a = 1 - math.exp(eps) * (1 - q)  # add: E_P0[(a − e^ε q e^S)+]
    add = 0.0
    if a > 0:
        s1 = math.log(a / (q * math.exp(eps))) - loss
        add = np.dot(weight, a * ndtr((s1 + v / 2) / tau) - math.exp(eps) * q * np.exp(loss) * ndtr((s1 - v / 2) / tau))
    return float(max(remove, add))


def check_laplace_combination(store) -> None:
    """Two RaCO-DP runs (σ, s_L) on the same batches, one step: the store's ε holds against the exact δ of the shared
    step (both Laplace histograms released), and is within 10 % of the smallest ε that holds."""
    q, sigma, scales = 0.2, 2.0, (1.0, 1.5)
    runs = [store.StoreRelease(events.SharedBatchStepEvent(q, sigma * math.sqrt(2), s), "seed 0", f"run {s}") for s in scales]
    eps = store.store_epsilon(runs, DELTA).epsilon
    assert exact_shared_delta(q, sigma, scales, eps) <= DELTA * 1.01, "the store's epsilon is below what the shared step spends"
    assert exact_shared_delta(q, sigma, scales, 0.9 * eps) > DELTA, "the Laplace combination is looser than 10 %"


CHECKS = [check_issue_figures, check_segments, check_laplace_combination]


@pytest.mark.parametrize("check", CHECKS, ids=[c.__name__ for c in CHECKS])
def test_the_store_epsilon(check):
    check(importlib.import_module("raco_bench.privacy.store"))


def test_the_laplace_combination_dominates_the_laplaces_it_combines():
    """Laplace(s₁) and Laplace(s₂) of one record are dominated by one Laplace of scale 1/(1/s₁ + 1/s₂): δ(ε) of the pair
    at most the single one's at every ε (dp-accounting's PLDs, both directions of add/remove)."""
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    for s1, s2 in ((1.0, 1.0), (2.0, 3.0), (0.5, 5.0), (0.3, 0.3)):
        pair = pld_lib.from_laplace_mechanism(s1, value_discretization_interval=1e-4).compose(
            pld_lib.from_laplace_mechanism(s2, value_discretization_interval=1e-4))
        one = pld_lib.from_laplace_mechanism(1 / (1 / s1 + 1 / s2), value_discretization_interval=1e-4)
        for eps in np.linspace(0.0, 1 / s1 + 1 / s2, 25):
            assert pair.get_delta_for_epsilon(eps) <= one.get_delta_for_epsilon(eps) + 1e-9


def test_a_store_with_a_run_without_a_record_level_claim_has_no_record_level_epsilon():
    from raco_bench.privacy.store import StoreRelease, store_epsilon

    s = store_epsilon([StoreRelease(dp_sgd_event(4.0, 100), "seed 0", "dp-sgd"), StoreRelease(None, None, "sgd", "a non-private method")],
                      DELTA)
    assert s.epsilon == math.inf and "(1 sgd: a non-private method" in s.describe() and "no record-level guarantee" in s.describe()


@pytest.mark.parametrize("name", list(STORE_BUGS))
def test_each_planted_store_bug_turns_a_check_red(name):
    bug = STORE_BUGS[name]
    real = importlib.import_module(bug.module)
    module = load_mutant(Path(real.__file__).read_text(), list(bug.edits), name, "store_mutant_", bug.module)
    caught = first_catch(module, CHECKS)
    print(f"{name}: caught by {caught}")
    assert caught, f"no check caught the planted bug {name!r} ({bug.effect})"


@pytest.mark.slow
def test_a_sweep_states_its_store_epsilon_on_its_summary_parent_and_report(adult_store):  # noqa: F811
    """The Adult smoke sweep (shared batches, every default method): its phase-2 parent holds the store's ε (tag, metric,
    record), its console summary printed it, and the report's line is the same. It holds non-private runs and PF-LD's
    sensitive-attribute runs, so the whole store has no record-level ε; its record-level private runs alone have one,
    above each of their own and with groups of runs that drew the same batches (same seed and batch size)."""
    from raco_bench import tracking
    from raco_bench.report.store_epsilon import store_line
    from raco_bench.sweeps.results import read_results
    from raco_bench.sweeps.store_privacy import STORE_ARTIFACT, STORE_TAG, release_of, sweep_store_epsilon

    uri = f"sqlite:///{adult_store}/mlflow.db"
    c = tracking.client(uri)
    exp = c.get_experiment_by_name("adult-demographic-parity-smoke").experiment_id
    parent = c.search_runs([exp], f"tags.`{tracking.KIND}` = 'phase' and tags.`{tracking.PHASE}` = '2'")[0]
    sweep = parent.data.tags[tracking.SWEEP_ID]
    table = read_results(uri, exp, sweep)
    unclaimed = {m for m in set(table["method"]) if not get_method(m).private or m == "pf-ld"}  # non-private, or group-level only
    assert "pf-ld" in unclaimed and len(unclaimed) > 1
    tag = parent.data.tags[STORE_TAG]
    assert tag.startswith("The store's epsilon on adult: store epsilon = inf") and all(f" {m}: " in tag for m in unclaimed)
    assert parent.data.metrics["store_epsilon"] == -1.0
    record = json.loads(Path(tracking.read_artifact(uri, parent.info.run_id, STORE_ARTIFACT)).read_text())
    assert record["adult"]["epsilon"] == math.inf and record["adult"]["runs"] == int((table["skipped"] == "").sum())
    assert {label.split(" ", 1)[0] for label in record["adult"]["not_record_level"]} == unclaimed
    assert tag in (adult_store.parent / "adult_store.log").read_text()  # the console summary
    assert store_line(uri, "adult-demographic-parity-smoke", sweep).startswith(tag)

    private = table[table["method"].isin(["raco-dp", "dp-sgd", "dp-fermi", "dp-postprocess", "budget-tailoring"]) & (table["skipped"] == "")]
    s = sweep_store_epsilon(private)["adult"]
    per_run = [events.epsilon(release_of(r).event, DELTA) for r in private.to_dict("records")]
    assert s.runs == len(private) and math.isfinite(s.epsilon) and s.epsilon > max(per_run)
    assert s.largest_run == pytest.approx(private["epsilon_spent"].max(), rel=1e-12) == pytest.approx(max(per_run), rel=3e-3)  # printed ε
    keys = {}
    for r in private.to_dict("records"):
        batch = json.loads(r["params"]).get("batch_size", get_method(r["method"]).Hyper().__dict__.get("batch_size"))
        if r["method"] != "budget-tailoring":
            keys.setdefault((r["seed"], batch), []).append(r["trial_key"])
    assert set(private["batch_draws"]) == {"shared"} and s.shared_groups == sum(len(v) > 1 for v in keys.values())
    assert s.epsilon >= s.independent  # sharing batches never helps the store
