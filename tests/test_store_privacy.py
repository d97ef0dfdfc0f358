"""The store's ε (raco_bench/privacy/store.py, raco_bench/privacy/group_step.py, raco_bench/sweeps/store_privacy.py;
docs/privacy.md, "The store's ε").

Runs that draw the same batches are one Poisson-subsampled mechanism releasing all of their noisy quantities at each
step. The checks: issue 45's figures (K DP-SGD runs of ε = 1 on Adult's batches), a group's segments against the
composition written out, a group's step with two histograms against a direct integration of its hockey-stick divergence
and with ten against a fine convolution of their privacy losses (both independent of the PLD code), a store of one run
against that run's own ε for every shape of event (the run's printed ε, from its own accounting), the figure over the
private runs beside the whole store's, and a store's rows: their recorded batch stream and key decide the groups. Each bug
of tests/planted_bugs.py (``STORE_BUGS``) must turn a check red.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from dp_accounting import dp_event as ev
from scipy.signal import fftconvolve
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


# ---------------------------------------------------------------- independent computations of one shared step


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
    return max(_remove_delta(q, sigma**-2, loss, weight, eps), _add_delta(q, sigma**-2, loss, weight, eps))


def _remove_delta(q, v, loss, weight, eps) -> float:
    """E_P0[(q e^S − g)+], S = S_G + L, S_G ~ N(−v/2, v), L the histograms' loss under P0 (atoms ``loss``, ``weight``)."""
    tau, g = math.sqrt(v), math.expm1(eps) + q
    s0 = math.log(g / q) - loss
    return float(np.dot(weight, q * np.exp(loss) * ndtr((v / 2 - s0) / tau) - g * ndtr((-v / 2 - s0) / tau)))


def _add_delta(q, v, loss, weight, eps) -> float:
    """E_P0[(a − e^ε q e^S)+], a = 1 − e^ε (1 − q)."""
    tau, a = math.sqrt(v), 1 - math.exp(eps) * (1 - q)
    if a <= 0:
        return 0.0
    s1 = math.log(a / (q * math.exp(eps))) - loss
    return float(np.dot(weight, a * ndtr((s1 + v / 2) / tau) - math.exp(eps) * q * np.exp(loss) * ndtr((s1 - v / 2) / tau)))


def convolved_histograms(scale: float, k: int, h: float = 2e-5) -> tuple[np.ndarray, np.ndarray]:
    """The privacy loss under P0 of ``k`` Laplace histograms of one ``scale``: each one's atoms at ±1/s and its linear part's
    mass by bins of width ``h`` at their midpoints, convolved (FFT): nearly exact, and independent of the PLD code."""
    a = 1 / scale
    n = int(round(2 * a / h))
    y = np.linspace(0, a, n + 1)  # the linear part is 2y − a for y in (0, a), density e^(−y)/2 (scale 1 after normalising)
    one = np.zeros(2 * n + 1)  # on the half-grid −a + i h/2
    one[0], one[-1] = 0.5, 0.5 * math.exp(-a)
    one[1:-1:2] = 0.5 * (np.exp(-y[:-1]) - np.exp(-y[1:]))
    out = one
    for _ in range(k - 1):
        out = np.clip(fftconvolve(out, one), 0.0, None)
    return -k * a + np.arange(len(out)) * h / 2, out / out.sum()


def check_histograms_kept_apart(store) -> None:
    """Two RaCO-DP runs (σ, s_L) on the same batches, one step: the store's ε holds against the exact δ of the shared
    step (both Laplace histograms released), and is within 0.1 % of the smallest ε that holds (the histograms are kept
    apart: one Laplace of summed 1/s, the earlier bound, is 14 % above here)."""
    q, sigma, scales = 0.2, 2.0, (1.0, 1.5)
    runs = [store.StoreRelease(events.SharedBatchStepEvent(q, sigma * math.sqrt(2), s), "seed 0", f"run {s}") for s in scales]
    eps = store.store_epsilon(runs, DELTA).composed
    assert exact_shared_delta(q, sigma, scales, eps) <= DELTA * 1.001, "the store's epsilon is below what the shared step spends"
    assert exact_shared_delta(q, sigma, scales, 0.999 * eps) > DELTA, "the store's epsilon is more than 0.1 % above the tight one"


def check_issue_figures(store) -> None:
    """Issue 45: DP-SGD, σ = 4, T = 858, each run ε = 1: K runs on the same batches against K independent ones."""
    run = dp_sgd_event(4.0, 858)
    assert events.epsilon(run, DELTA) == pytest.approx(0.9998, abs=1e-4)
    for K, shared, independent in ((10, 4.487, 3.576), (30, 13.736, 6.772)):  # the issue: 4.49, 3.58; 13.7, 6.8
        s = store.store_epsilon([store.StoreRelease(run, "seed 0", f"run {k}") for k in range(K)], DELTA)
        assert (s.epsilon, s.independent) == (pytest.approx(shared, abs=2e-3), pytest.approx(independent, abs=2e-3)), (K, s)
        assert s.shared_groups == 1 and s.largest_group == K and s.largest_run == pytest.approx(0.9998, abs=1e-4)
        own = store.store_epsilon([store.StoreRelease(run, None, f"run {k}") for k in range(K)], DELTA)
        assert own.epsilon == pytest.approx(independent, abs=2e-3) and own.shared_groups == 0  # --batch-draws own


def check_segments(store) -> None:
    """Two DP-SGD runs of different T and σ on the same batches, with one more of another rate on the same stream (its
    own batches: independent): the group is one Gaussian of the summed precision while both run, then the longer alone."""
    short, long_ = dp_sgd_event(3.0, 300), dp_sgd_event(5.0, 800)
    method = get_method("dp-sgd")
    other = method.privacy_event(method.hyperparameters({"batch_size": 512, "noise_multiplier": 4.0}), ADULT_N,
                                 Budget(1.0, DELTA, 500, 500))
    written = events.compose(ev.SelfComposedDpEvent(ev.PoissonSampledDpEvent(Q, ev.GaussianDpEvent((3.0**-2 + 5.0**-2) ** -0.5)), 300),
                             ev.SelfComposedDpEvent(ev.PoissonSampledDpEvent(Q, ev.GaussianDpEvent(5.0)), 500), other)
    got = store.store_epsilon([store.StoreRelease(e, "seed 0", k) for k, e in (("short", short), ("long", long_), ("other", other))], DELTA)
    assert got.composed == pytest.approx(events.epsilon(written, DELTA), rel=1e-6)


def one_run_events() -> dict[str, tuple]:
    """A run of every shape of event, with private checkpoint selection among 5 checkpoints (Adult, ε near 1): RaCO-DP with
    its histogram on the gradient batch and on its own batch, DP-SGD, DP-FERMI (its group counts), DP post-processing (its
    histogram) and budget tailoring (full-batch Gaussians): (event, printed ε), the printed ε a zCDP conversion for budget
    tailoring and the event's own PLD ε otherwise (tests/test_privacy_events.py checks both against each run's accounting)."""
    from raco_bench.privacy.accounting import SelectionRelease

    selection = SelectionRelease(50.0, 5)
    out = {}
    for label, name, steps, params in (("raco-dp", "raco-dp", 100, {}), ("raco-dp own histogram batch", "raco-dp", 100, {"histogram_batch": "independent"}),
                                       ("dp-sgd", "dp-sgd", 100, {}), ("dp-fermi", "dp-fermi", 100, {"noise_multiplier": 4.0, "privacy": "full"}),
                                       ("dp-postprocess", "dp-postprocess", 100, {"privacy": "full"})):
        m = get_method(name)
        event = m.privacy_event(m.hyperparameters(params), ADULT_N, Budget(1.0, DELTA, steps, steps, selection))
        out[label] = (event, events.epsilon(event, DELTA))
    m = get_method("budget-tailoring")
    out["budget-tailoring"] = (m.privacy_event(m.hyperparameters({}), ADULT_N, Budget(1.0, DELTA, 20, 20, selection)), 1.0)
    return out


def check_a_store_of_one_run_is_that_run(store) -> None:
    """A store that holds one run: its composition is the run's events' PLD ε, for every shape of event, and its figure is
    the run's printed ε (budget tailoring prints its zCDP conversion, above its events' PLD: the store's ε is at least it)."""
    for label, (event, printed) in one_run_events().items():
        s = store.store_epsilon([store.StoreRelease(event, "one stream", label, epsilon=printed)], DELTA)
        assert s.composed == pytest.approx(events.epsilon(event, DELTA), rel=1e-6), f"{label}: the store's composition of one run"
        assert s.epsilon == pytest.approx(printed, rel=1e-6) and s.private_only == s.epsilon, f"{label}: a store of one run prints its epsilon"
        assert s.epsilon >= printed * (1 - 1e-12), f"{label}: the store's epsilon below the run's printed one"


def check_private_runs_beside_the_whole_store(store) -> None:
    """A store with a non-private run: the whole store's ε is ∞, and the figure over its private runs is the composition of
    those alone, with the run left out named; a store whose runs list something outside their budget is not end to end."""
    runs = [store.StoreRelease(dp_sgd_event(4.0, 300), "seed 0", f"dp-sgd {k}") for k in range(3)]
    alone = store.store_epsilon(runs, DELTA)
    mixed = store.store_epsilon([*runs, store.StoreRelease(None, None, "sgda config 0 seed 0", "a non-private method")], DELTA)
    assert math.isinf(mixed.epsilon) and mixed.private_only == pytest.approx(alone.epsilon, rel=1e-12) and not mixed.end_to_end
    line = mixed.describe()
    assert "(1 sgda: a non-private method" in line and f"store epsilon = {alone.epsilon:.4g}" in line and "NOT END TO END" in line
    assert alone.end_to_end and "end to end: every run" in alone.describe()


CHECKS = [check_issue_figures, check_segments, check_histograms_kept_apart, check_a_store_of_one_run_is_that_run,
          check_private_runs_beside_the_whole_store]


@pytest.mark.parametrize("check", CHECKS, ids=[c.__name__ for c in CHECKS])
def test_the_store_epsilon(check):
    check(importlib.import_module("raco_bench.privacy.store"))


# ---------------------------------------------------------------- a group's step with many histograms


def check_ten_histograms_against_their_convolved_losses(group_step) -> None:
    """Ten RaCO-DP runs (σ = 4, s = 5) on one batch of rate 1024/30162: the step's hockey-stick divergence, both directions,
    is at least a fine convolution of the ten histograms' privacy losses gives (with the Gaussian in closed form) and within
    0.1 % of it where δ matters."""
    q, k, sigma, scale = 1024 / 30162, 10, 4.0, 5.0
    loss, weight = convolved_histograms(scale, k)
    v = k / sigma**2
    pld = group_step.group_step_pld(q, v, (scale,) * k, 1e-4)
    for eps in (0.005, 0.02, 0.5, 1.0, 2.0):
        for name, ours, direct in (("remove", pld._pmf_remove, _remove_delta), ("add", pld._pmf_add, _add_delta)):
            want, got = direct(q, v, loss, weight, eps), float(ours.get_delta_for_epsilon(eps))
            assert got >= want * (1 - 1e-6) - 1e-15, f"{name} delta at {eps} below the direct computation: {got} < {want}"
            assert got <= want * 1.001 + 1e-12, f"{name} delta at {eps} more than 0.1 % above the direct computation: {got} > {want}"


def check_one_histogram_as_the_closed_form(group_step) -> None:
    """The construction of many histograms, given one, agrees with the closed-form joint step over 300 steps."""
    from raco_bench.privacy.joint_pld import shared_batch_pld

    q, sigma, scale = 1024 / 30162, 1.5, 2.0
    h = group_step.base_grid(sigma**-2, (scale,))
    base = group_step.base_pair(sigma**-2, group_step.laplace_pair((scale,), h), h)
    ours = group_step.subsampled_pld(base, q, 1e-4).self_compose(300).get_epsilon_for_delta(DELTA)
    closed = shared_batch_pld(q, (sigma,), scale, 1e-4).self_compose(300).get_epsilon_for_delta(DELTA)
    assert closed <= ours <= closed * 1.0002, (ours, closed)


GROUP_STEP_CHECKS = [check_ten_histograms_against_their_convolved_losses, check_one_histogram_as_the_closed_form]


@pytest.mark.parametrize("check", GROUP_STEP_CHECKS, ids=[c.__name__ for c in GROUP_STEP_CHECKS])
def test_a_group_step(check):
    check(importlib.import_module("raco_bench.privacy.group_step"))


# ---------------------------------------------------------------- a store's rows


def row(method: str, params: dict, steps: int, key: str, stream: str, seed: int = 0, **extra) -> dict:
    """A configuration's row as a pack table records it (read back by raco_bench.records.results.read_results)."""
    m = get_method(method)
    event = m.privacy_event(m.hyperparameters(params), ADULT_N, Budget(1.0, DELTA, steps, steps))
    return {"method": method, "config_id": 0, "seed": seed, "epsilon": 1.0, "delta": DELTA, "dataset": "adult", "params": json.dumps(params),
            "calibrated": "{}", "checkpoint": "last", "steps": steps, "batch_draws": "shared", "batch_stream": stream, "key_id": key,
            "epsilon_spent": events.epsilon(event, DELTA), "skipped": "", "outside_budget": "none", **extra}


def check_rows_group_by_stream_and_key(store_privacy) -> None:
    """Rows of one recorded stream under one key are one group; the same stream under another key (a resume without the key
    file) and another stream are independent; a shared row whose stream was not recorded has no figure."""
    params = {"batch_size": 1024, "noise_multiplier": 4.0}
    rows = [row("dp-sgd", params, 300, "key-one", "batches-a"), row("dp-sgd", params, 400, "key-one", "batches-a"),
            row("dp-sgd", params, 300, "key-two", "batches-a"), row("dp-sgd", params, 300, "key-one", "batches-b")]
    releases = [store_privacy.release_of(r) for r in rows]
    assert [r.batches for r in releases] == [("key-one", "batches-a"), ("key-one", "batches-a"), ("key-two", "batches-a"), ("key-one", "batches-b")]
    import pandas as pd

    figure = store_privacy.sweep_store_epsilon(pd.DataFrame(rows))["adult"]
    assert figure.shared_groups == 1 and figure.largest_group == 2
    unrecorded = store_privacy.release_of({**rows[0], "batch_stream": float("nan")})
    assert unrecorded.event is None and "not recorded" in unrecorded.reason


def check_rows_state_what_each_run_printed(store_privacy, runs) -> None:
    """Each prepared run (private checkpoint selection) as its row records it: the release read from the row spends the
    run's printed ε (its selection included)."""
    for label, (ctx, printed) in runs.items():
        hyper = dataclasses.asdict(ctx.hyper)
        r = {"method": ctx.config.method, "config_id": 0, "seed": 0, "epsilon": ctx.config.epsilon, "delta": ctx.config.delta,
             "dataset": "adult", "params": json.dumps(hyper), "calibrated": "{}", "checkpoint": "private", "steps": ctx.steps,
             "selection_noise": ctx.config.selection_noise, "selection_checkpoints": ctx.config.selection_checkpoints,
             "batch_draws": "shared", "batch_stream": "batches-a", "key_id": "key-one", "epsilon_spent": printed}
        release = store_privacy.release_of(r)
        event_eps = events.epsilon(release.event, ctx.config.delta)
        if ctx.config.method == "budget-tailoring":  # prints its zCDP conversion; its events' RDP is that
            assert events.epsilon(release.event, ctx.config.delta, "rdp") <= printed * (1 + 1e-9) and event_eps < printed
            continue
        assert event_eps == pytest.approx(printed, rel=2e-3), f"{label}: the row's release spends {event_eps}, the run printed {printed}"


@pytest.fixture(scope="module")
def prepared_runs(adult):
    """Real prepared runs of every shape at ε = 1 with private checkpoint selection: (context, printed ε)."""
    from raco_bench.training.config import RunConfig
    from raco_bench.training.loop import prepare_run

    out = {}
    for label, name, steps, params in (("raco-dp", "raco-dp", 100, {}), ("raco-dp own histogram batch", "raco-dp", 100, {"histogram_batch": "independent"}),
                                       ("dp-sgd", "dp-sgd", 100, {}), ("dp-fermi", "dp-fermi", 100, {"noise_multiplier": 4.0, "privacy": "full"}),
                                       ("dp-postprocess", "dp-postprocess", 100, {"privacy": "full"}), ("budget-tailoring", "budget-tailoring", 20, {})):
        ctx = prepare_run(RunConfig(dataset="adult", method=name, epsilon=1.0, steps=steps, checkpoint="private", params=params), adult).ctx
        out[label] = (ctx, float(ctx.privacy["epsilon_spent"]))
    return out


def test_a_store_of_one_prepared_run_prints_that_run_epsilon(prepared_runs):
    """The identity on real prepared runs: a store holding one of them states that run's printed ε."""
    from raco_bench.privacy.store import StoreRelease, store_epsilon

    for label, (ctx, printed) in prepared_runs.items():
        budget = Budget(ctx.config.epsilon, ctx.config.delta, ctx.config.max_steps, ctx.steps, ctx.config.selection)
        event = get_method(ctx.config.method).privacy_event(ctx.hyper, ctx.n_train, budget)
        s = store_epsilon([StoreRelease(event, "one stream", label, epsilon=printed)], ctx.config.delta)
        assert s.epsilon == pytest.approx(printed, rel=2e-3), f"{label}: a store of one run states {s.epsilon}, the run printed {printed}"


def test_rows(prepared_runs):
    module = importlib.import_module("raco_bench.sweeps.store_privacy")
    check_rows_group_by_stream_and_key(module)
    check_rows_state_what_each_run_printed(module, prepared_runs)


CHECKS_OF = {"raco_bench.privacy.store": lambda runs: CHECKS, "raco_bench.privacy.group_step": lambda runs: GROUP_STEP_CHECKS,
             "raco_bench.sweeps.store_privacy": lambda runs: [check_rows_group_by_stream_and_key,
                                                              lambda m: check_rows_state_what_each_run_printed(m, runs)]}


@pytest.mark.parametrize("name", list(STORE_BUGS))
def test_each_planted_store_bug_turns_a_check_red(name, prepared_runs):
    bug = STORE_BUGS[name]
    real = importlib.import_module(bug.module)
    module = load_mutant(Path(real.__file__).read_text(), list(bug.edits), name, "store_mutant_", bug.module)
    caught = first_catch(module, CHECKS_OF[bug.module](prepared_runs))
    print(f"{name}: caught by {caught}")
    assert caught, f"no check caught the planted bug {name!r} ({bug.effect})"


@pytest.mark.slow
def test_a_sweep_states_its_store_epsilon_on_its_summary_parent_and_report(adult_store):  # noqa: F811
    """The Adult smoke sweep (shared batches, every default method): its phase-2 parent holds the store's ε (tag, metrics,
    record), its console summary printed it, and the report's line is the same. It holds non-private runs and PF-LD's
    sensitive-attribute runs, so the whole store has no record-level ε; its record-level private runs have one (the
    private-only figure, recorded beside it), above each of their own and with groups of runs that drew the same batches
    (same seed, batch size and key). Every row's release spends the ε the row printed."""
    from raco_bench import tracking
    from raco_bench.records.artifacts import STORE_ARTIFACT
    from raco_bench.records.results import read_results
    from raco_bench.report.store_epsilon import store_line
    from raco_bench.sweeps.store_privacy import STORE_TAG, release_of, sweep_store_epsilon

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
    assert "Private runs only" in tag and "NOT END TO END" in tag
    metrics = parent.data.metrics
    assert metrics["store_epsilon"] == -1.0 and metrics["store_epsilon_end_to_end"] == 0.0 and metrics["store_epsilon_private_only"] > 0
    record = json.loads(Path(tracking.read_artifact(uri, parent.info.run_id, STORE_ARTIFACT)).read_text())
    assert record["adult"]["epsilon"] == math.inf and record["adult"]["runs"] == int((table["skipped"] == "").sum())
    assert {label.split(" ", 1)[0] for label in record["adult"]["not_record_level"]} == unclaimed and record["adult"]["end_to_end"] is False
    log = (adult_store.parent / "adult_store.log").read_text()
    assert tag in log  # the console summary
    summary = Path(tracking.read_artifact(uri, parent.info.run_id, "summary.txt")).read_text()
    assert summary.rstrip().endswith(tag.rstrip()) and "Selected configurations" in summary  # logged again once the figure is in
    assert store_line(uri, "adult-demographic-parity-smoke", sweep).startswith(tag)

    private = table[table["method"].isin(["raco-dp", "dp-sgd", "dp-fermi", "dp-postprocess", "budget-tailoring"]) & (table["skipped"] == "")]
    s = sweep_store_epsilon(private)["adult"]
    assert metrics["store_epsilon_private_only"] == pytest.approx(s.epsilon, rel=1e-9)
    for r in private.to_dict("records"):  # every row's release spends what the run printed (budget tailoring: its zCDP conversion)
        e = events.epsilon(release_of(r).event, DELTA)
        assert e <= r["epsilon_spent"] * (1 + 3e-3) and (r["method"] == "budget-tailoring" or e == pytest.approx(r["epsilon_spent"], rel=3e-3))
    assert s.runs == len(private) and math.isfinite(s.epsilon) and s.epsilon > private["epsilon_spent"].max()
    assert s.largest_run == pytest.approx(private["epsilon_spent"].max(), rel=1e-12)
    keys = {}
    for r in private.to_dict("records"):
        batch = json.loads(r["params"]).get("batch_size", get_method(r["method"]).Hyper().__dict__.get("batch_size"))
        if r["method"] != "budget-tailoring":
            keys.setdefault((r["seed"], batch, r["key_id"]), []).append(r["trial_key"])
    assert set(private["batch_draws"]) == {"shared"} and s.shared_groups == sum(len(v) > 1 for v in keys.values())
    assert s.epsilon >= s.independent  # sharing batches never helps the store


def test_a_user_dataset_row_names_its_schema_so_the_store_epsilon_reads_its_public_training_size():
    """A sweep on a user's table records its schema in the pack table (a RunConfig column), so the store's ε finds the
    schema's public train_rows (before, the row lacked it and every such run was 'declares no public training size')."""
    from raco_bench.data.catalog import public_train_rows
    from raco_bench.sweeps.plan import phase1_trials
    from raco_bench.sweeps.spec import SweepSpec
    from raco_bench.sweeps.store_privacy import _published_train_rows
    from raco_bench.sweeps.trial import table_row

    schema = Path(__file__).resolve().parents[1] / "examples" / "synthetic" / "synthetic.yaml"
    spec = SweepSpec("adult", methods=("raco-dp",), epsilons=(1.0,), gammas=(0.05,), n_configs=1, phase1_seeds=1).with_user_data(str(schema))
    row = table_row(phase1_trials(spec, n_train=1000)[0], "run")
    assert row["schema"] == str(schema) and row["dataset"] == spec.dataset
    assert _published_train_rows(row) == public_train_rows(spec.dataset, schema) is not None
