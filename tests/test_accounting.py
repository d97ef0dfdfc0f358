"""Accounting: the joint shared-batch PLD against dp-accounting's limits, calibration and its cache."""

from __future__ import annotations

import math

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.pld import privacy_loss_distribution as P
from scipy import integrate, stats

from raco_bench.privacy import CalibrationCache, StepMechanism, epsilon, max_steps, separate_composition_epsilon
from raco_bench.privacy.accounting import NOISE_FLOOR, largest_within, smallest_noise_within
from raco_bench.privacy.joint_pld import GaussianLaplaceLoss, shared_batch_pld

DELTA = 1e-5


def _eps(pld, T):
    return pld.self_compose(T).get_epsilon_for_delta(DELTA)


@pytest.mark.parametrize("q,sigma,T", [(0.0341, 4.0, 200), (0.01, 1.0, 300), (0.138, 2.0, 50)])
def test_laplace_scale_to_infinity_matches_subsampled_gaussian(q, sigma, T):
    ref = _eps(P.from_gaussian_mechanism(sigma, sampling_prob=q), T)
    assert _eps(shared_batch_pld(q, (sigma,), 1e7), T) == pytest.approx(ref, rel=0.02)
    assert _eps(shared_batch_pld(q, (sigma,), None), T) == pytest.approx(ref, rel=0.02)


@pytest.mark.parametrize("q,scale,T", [(0.0341, 2.0, 200), (0.01, 5.0, 500), (0.138, 10.0, 100)])
def test_noise_multiplier_to_infinity_matches_subsampled_laplace(q, scale, T):
    ref = _eps(P.from_laplace_mechanism(scale, sampling_prob=q), T)
    assert _eps(shared_batch_pld(q, (1e5,), scale), T) == pytest.approx(ref, rel=0.02)


@pytest.mark.parametrize("q,s1,s2,T", [(0.0341, 3.0, 4.0, 200), (0.01, 1.0, 1.0, 1000), (0.1, 1.0, 3.0, 100)])
def test_gaussian_pair_matches_combined_sigma(q, s1, s2, T):
    combined = (s1**-2 + s2**-2) ** -0.5
    ref = _eps(P.from_gaussian_mechanism(combined, sampling_prob=q), T)
    assert _eps(shared_batch_pld(q, (s1, s2), None), T) == pytest.approx(ref, rel=0.02)


def test_shared_batch_gaussian_pair_is_worse_than_separate():
    """anchors.md §2.3: one batch for two Gaussians (σ=1, 1, q=0.01, T=1000) gives ε ≈ 4.48, separate ≈ 2.58."""
    joint = _eps(shared_batch_pld(0.01, (1.0, 1.0), None), 1000)
    sep = _eps(P.from_gaussian_mechanism(1.0, sampling_prob=0.01).compose(P.from_gaussian_mechanism(1.0, sampling_prob=0.01)), 1000)
    assert joint == pytest.approx(4.48, rel=0.01) and sep == pytest.approx(2.58, rel=0.01)


@pytest.mark.parametrize("which", [0, 1])
def test_base_loss_distribution_matches_numerical_convolution(which):
    sigma, scale = 2.0, 1.5
    loss = GaussianLaplaceLoss(sigma**-2, scale)
    mean = (0.5 if which else -0.5) / sigma**2
    s_l = lambda y: (abs(y) - abs(y - 1)) / scale  # noqa: E731
    for s in (-0.8, -0.1, 0.3, 1.2):
        f = lambda y: math.exp(-abs(y - which) / scale) / (2 * scale) * stats.norm.sf((s - s_l(y) - mean) * sigma)  # noqa: E731
        numeric = sum(integrate.quad(f, a, b, limit=200)[0] for a, b in [(-80, 0), (0, 1), (1, 80)])
        assert loss.distribution(np.array([s]), which, upper=True)[0] == pytest.approx(numeric, rel=1e-7, abs=1e-12)
        total = loss.distribution(np.array([s]), which, True) + loss.distribution(np.array([s]), which, False)
        assert total[0] == pytest.approx(1.0, abs=1e-12)


def test_joint_exceeds_separate_composition_for_shared_batch():
    for q, sigma, scale, T in [(0.0171, 2, 10, 787), (0.0341, 4, 2, 209), (0.138, 4, 2, 100), (0.01, 1, 2, 200)]:
        mech = StepMechanism(q, sigma, scale, "shared")
        joint, sep = epsilon(mech, T, DELTA), separate_composition_epsilon(mech, T, DELTA)
        assert joint > sep
        # the reference implementation's separate-composition epsilons for these settings: 1.002, 0.997, 3.13, 0.94
    assert separate_composition_epsilon(StepMechanism(0.0171, 2, 10), 787, DELTA) == pytest.approx(1.002, abs=0.002)


def test_independent_mode_is_dp_accounting_composition():
    q, sigma, scale, T = 0.0171, 1.0, 5.0, 500
    step = dpa.ComposedDpEvent([
        dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(sigma)),
        dpa.PoissonSampledDpEvent(q, dpa.LaplaceDpEvent(scale)),
    ])
    acc = pld_privacy_accountant.PLDAccountant()
    acc.compose(dpa.SelfComposedDpEvent(step, T))
    ref = acc.get_epsilon(DELTA)
    # the reference implementation reports 2.3593 for this setting; the accountant's own discretisation gives ~2.364
    assert ref == pytest.approx(2.3593, rel=0.005)
    assert epsilon(StepMechanism(q, sigma, scale, "independent"), T, DELTA) == pytest.approx(ref, rel=1e-3)


def test_max_steps_is_the_largest_within_budget():
    mech = StepMechanism(1024 / 28829, 4.0, 2.0, "shared")
    T = max_steps(mech, 1.0, DELTA)
    assert T > 0
    assert epsilon(mech, T, DELTA) <= 1.0 < epsilon(mech, T + 1, DELTA)
    assert max_steps(StepMechanism(0.5, 0.3, 0.5), 0.01, DELTA) == 0


def _largest_by_scan(eps, target: float, cap: int) -> int:
    """The definition, evaluated everywhere: the largest T ≤ cap with eps(T) ≤ target (0 if none)."""
    return max((t for t in range(1, cap + 1) if eps(t) <= target), default=0)


@pytest.mark.parametrize("shape", ["sqrt", "linear", "steps", "zero then one", "infinite above", "flat then steep", "square", "log",
                                   "almost flat"])
@pytest.mark.parametrize("cap", [1, 7, 8, 9, 64, 700, 5000])
def test_largest_within_finds_the_definition_on_every_shape(shape, cap):
    """The search (bracket, then the line in log-log with bisection as a safeguard) returns exactly the largest T within
    the target, whatever the shape of a non-decreasing ε: the shapes where the line is a poor guess or undefined included."""
    f = {"sqrt": lambda t: 0.03 * t ** 0.5, "linear": lambda t: 1e-3 * t, "steps": lambda t: 0.1 * (t // 37),
         "zero then one": lambda t: 0.0 if t < 311 else 1.0, "infinite above": lambda t: 1e-4 * t if t < 900 else math.inf,
         "flat then steep": lambda t: 0.01 if t < 2000 else 0.01 + (t - 2000) ** 2 * 1e-6,
         "square": lambda t: 1e-7 * t * t, "log": lambda t: 0.1 * math.log(t + 1), "almost flat": lambda t: 0.2 + 1e-9 * t}[shape]
    for target in (0.005, 0.05, 0.5, 2.0, f(8), f(64), f(512), f(cap), f(cap - 1) if cap > 1 else 0.0, 0.2 + 3e-6):  # ε equal to
        # the target at a probed point is within it
        assert largest_within(f, target, cap) == _largest_by_scan(f, target, cap), (target, cap)


@pytest.mark.parametrize("cap", [0, 1])
def test_largest_within_evaluates_only_t_1_where_the_cap_allows_no_more(cap):
    """Where the cap is 1 or less, ε is evaluated once, at T = 1: never again, and never at a T below 1."""
    calls: list[int] = []

    def eps(t: int) -> float:
        calls.append(t)
        return 1e-3 * t

    assert largest_within(eps, 1.0, cap) == cap
    assert calls == [1]
    assert cap == _largest_by_scan(eps, 1.0, cap)


def test_largest_within_needs_fewer_compositions_than_bisection():
    """On real PLDs the same T as doubling and bisection, in well under two thirds of the compositions."""
    mech, calls = StepMechanism(700 / 28829, 1.2, 3.0, "shared"), [0]

    def eps(t: int) -> float:
        calls[0] += 1
        return epsilon(mech, t, DELTA)

    T = largest_within(eps, 1.0, 5000)
    assert epsilon(mech, T, DELTA) <= 1.0 < epsilon(mech, T + 1, DELTA)
    assert calls[0] <= 11  # doubling from 1 to the bracket, then bisection of it, takes 2·log₂ T ≈ 20 here
    # where T is in the thousands: T = 1, the line's guesses, then T and T + 1 (brackets by factors of 8 took 8)
    mech, calls = StepMechanism(256 / 28829, 2.0, 8.0, "shared"), [0]
    T = largest_within(eps, 1.0, 5000)
    assert T > 1000 and epsilon(mech, T, DELTA) <= 1.0 < epsilon(mech, T + 1, DELTA) and calls[0] <= 6
    mech, calls = StepMechanism(128 / 28829, 1.5, 10.0, "shared"), [0]  # the line crosses beyond the cap: the cap is probed
    assert largest_within(eps, 1.0, 5000) == 5000 and calls[0] == 3


GRID = math.log1p(1e-3)  # smallest_noise_within's grid: σ_k = (1 + 1e-3)^k


def _smallest_by_scan(eps, target: float, limit: float, grid: float = GRID) -> float | None:
    """The definition, evaluated at every grid point σ_k = exp(k·grid) from the first at or above the floor to the last at
    or below the limit: the smallest σ_k with eps(σ_k) ≤ target (None if none)."""
    k = math.floor(math.log(NOISE_FLOOR) / grid) - 2
    while math.exp(k * grid) < NOISE_FLOOR:
        k += 1
    while math.exp(k * grid) <= limit:
        if eps(math.exp(k * grid)) <= target:
            return math.exp(k * grid)
        k += 1
    return None


NOISE_SHAPES = {"inverse": lambda s: 2.0 / s, "inverse square": lambda s: 0.5 / (s * s), "steps": lambda s: 0.1 * (40 - min(40, int(s * 3))),
                "one then zero": lambda s: 1.0 if s < 3.7 else 0.0, "infinite below": lambda s: math.inf if s < 0.8 else 1.0 / s,
                "a floor (a Laplace part)": lambda s: 0.7 + 3.0 / s, "flat then steep": lambda s: 0.01 if s > 50 else 0.01 + (50 - s) ** 2,
                "almost flat": lambda s: 0.2 + 1e-9 / s, "exponential": lambda s: math.exp(-s)}


@pytest.mark.parametrize("shape", list(NOISE_SHAPES))
def test_smallest_noise_within_finds_the_grid_definition_on_every_shape(shape):
    """Whatever the shape of a non-increasing ε(σ) (those where the line is a poor guess or undefined included), the
    search returns exactly the first grid point that fits, raises where none up to the limit does, and returns the
    floor where it fits: the answer does not depend on where the search evaluated."""
    f = NOISE_SHAPES[shape]
    for target in (1e-4, 0.003, 0.05, 0.5, 0.71, 2.0, 50.0, f(1.0), f(0.25), f(9.3), 0.2 + 2e-9):
        for limit in (4.0, 1e3):
            want = _smallest_by_scan(f, target, limit)
            if want is None:
                with pytest.raises(ValueError, match="no noise multiplier up to"):
                    smallest_noise_within(f, target, limit, "none fits")
            else:
                assert smallest_noise_within(f, target, limit, "none fits") == want, (shape, target, limit)


@pytest.mark.parametrize("rel_tol", [1e-2, 0.5, 3.0])
def test_smallest_noise_within_on_other_grids_and_limits_on_the_grid(rel_tol):
    """Coarser grids (plan_min_noise passes its tolerance through) and limits that are grid points themselves: the
    definition still, a limit that fits is reached, and no search loops (it would raise after its evaluation bound)."""
    grid = math.log1p(rel_tol)
    for f in (NOISE_SHAPES["inverse"], NOISE_SHAPES["a floor (a Laplace part)"], NOISE_SHAPES["one then zero"]):
        for limit in (1.0, math.exp(3 * grid), math.exp(40 * grid), 1e3):
            for target in (0.01, 0.8, 1.5, f(math.exp(3 * grid)), f(limit)):
                want = _smallest_by_scan(f, target, limit, grid)
                if want is None:
                    with pytest.raises(ValueError, match="no noise multiplier up to"):
                        smallest_noise_within(f, target, limit, "none fits", rel_tol)
                else:
                    assert smallest_noise_within(f, target, limit, "none fits", rel_tol) == want, (rel_tol, limit, target)
    assert smallest_noise_within(lambda s: 1 / s, 1 / 1.001, 1.001, "none fits") == 1.001  # the limit itself, on the grid


def test_smallest_noise_within_counts_nan_as_over_and_refuses_bad_arguments():
    """An ε that is NaN never passes for one within the budget; a tolerance or limit that makes no grid is refused."""
    nan_above = lambda s: math.nan if s > 3 else 100.0  # noqa: E731
    with pytest.raises(ValueError, match="no noise multiplier up to"):
        smallest_noise_within(nan_above, 1.0, 1e3, "none fits")
    assert smallest_noise_within(lambda s: math.nan if s < 2 else 1 / s, 1.0, 1e3, "none fits") == _smallest_by_scan(
        lambda s: math.inf if s < 2 else 1 / s, 1.0, 1e3)
    for bad in ({"rel_tol": 0.0}, {"rel_tol": math.nan}, {"limit": math.inf}, {"limit": 0.5}, {"limit": 0.0}):
        args = {"eps": NOISE_SHAPES["inverse"], "target": 1.0, "limit": 1e3, "failure": "x", **bad}
        with pytest.raises(ValueError, match="relative tolerance|largest noise multiplier"):
            smallest_noise_within(**args)


def test_smallest_noise_within_needs_fewer_compositions_than_bisection():
    """On real PLDs of uncapped RaCO-DP steps (σ calibrated for a searched T), the grid's first σ that fits in at most 7
    compositions each and 33 in all on six problems where doubling from 1 and bisection to the same tolerance took 12-14
    each (77 in all)."""
    from raco_bench.privacy.calibration import StepNoiseProblem

    total = 0
    for q, b, steps, eps_ in ((0.008, 4.0, 1500, 9.0), (0.008, 4.0, 5000, 9.0), (0.02, 2.0, 13000, 9.0), (0.01, 8.0, 3000, 3.0),
                              (0.03, 6.0, 800, 1.0), (0.005, 20.0, 20000, 3.0)):
        problem, calls = StepNoiseProblem(StepMechanism(q, 1.0, b), steps, eps_, DELTA), [0]

        def spent(sigma: float) -> float:
            calls[0] += 1
            return problem.spent(sigma)

        sigma = smallest_noise_within(spent, eps_, 1e4, "none fits")
        k = round(math.log(sigma) / GRID)
        assert sigma == math.exp(k * GRID) and problem.spent(sigma) <= eps_ < problem.spent(math.exp((k - 1) * GRID))
        assert calls[0] <= 7, (q, b, steps, eps_, calls[0])
        total += calls[0]
    assert total <= 33


def test_calibration_cache_memory_and_disk(tmp_path):
    mech = StepMechanism(512 / 20000, 2.0, 5.0, "shared")
    cache = CalibrationCache(path=tmp_path / "cal.json")
    T = cache.max_steps(mech, 1.0, DELTA)
    assert cache.max_steps(mech, 1.0, DELTA) == T
    assert cache.misses == 1 and cache.hits == 1
    fresh = CalibrationCache(path=tmp_path / "cal.json")  # another process would see the same file
    assert fresh.max_steps(mech, 1.0, DELTA) == T and fresh.misses == 0
    assert fresh.max_steps(mech, 2.0, DELTA) > T and fresh.misses == 1


@pytest.mark.parametrize("bad", [dict(sampling_rate=0.0, noise_multiplier=1.0), dict(sampling_rate=1.5, noise_multiplier=1.0),
                                 dict(sampling_rate=0.1, noise_multiplier=-1.0), dict(sampling_rate=0.1, noise_multiplier=1.0, histogram_batch="x")])
def test_invalid_mechanisms_raise(bad):
    with pytest.raises(ValueError):
        StepMechanism(**bad)


def test_no_noise_means_infinite_epsilon():
    assert math.isinf(epsilon(StepMechanism(0.1, 0.0, None), 10, DELTA))
    with pytest.raises(ValueError, match="without noise"):
        max_steps(StepMechanism(0.1, 1.0, 0.0), 1.0, DELTA)


# ------------------------------------------------------ one mixed step, pinned to numerical integration
def _one_step_delta(eps: float, q: float, sigma: float, b: float, direction: str) -> float:
    """δ(ε) of one shared-batch step by direct integration, independent of the PLD code.

    μ0 = N(0, σ²) ⊗ Lap(0, b) (the record absent), μ1 = N(1, σ²) ⊗ Lap(1, b) (present: unit Gaussian
    sensitivity after scaling by C, unit L1 histogram sensitivity); remove: P = (1−q)μ0 + qμ1 vs Q = μ0,
    add: P = μ0 vs Q = (1−q)μ0 + qμ1. The Gaussian coordinate is integrated in closed form (the
    likelihood ratio is monotone in it), the Laplace coordinate by quadrature on (0, 1) plus its two
    flat tails, where the Laplace likelihood ratio is constant.
    """
    e = math.exp(eps)

    def gauss_part(r: float) -> float:  # E_x[max(0, ·)] for a fixed Laplace likelihood ratio r
        if direction == "remove":  # max(0, (1−q) + q r g(x) − e^ε), g(x) = exp((2x − 1)/(2σ²))
            need = e - (1 - q)
            if need <= 0:
                return (1 - q) + q * r - e
            x_star = sigma**2 * math.log(need / (q * r)) + 0.5
            return (1 - q - e) * stats.norm.sf(x_star / sigma) + q * r * stats.norm.sf((x_star - 1) / sigma)
        need = (1 - e * (1 - q))  # add: max(0, 1 − e^ε(1−q) − e^ε q r g(x))
        if need <= 0:
            return 0.0
        x_star = sigma**2 * math.log(need / (e * q * r)) + 0.5
        return need * stats.norm.cdf(x_star / sigma) - e * q * r * stats.norm.cdf((x_star - 1) / sigma)

    tails = 0.5 * gauss_part(math.exp(-1 / b)) + 0.5 * math.exp(-1 / b) * gauss_part(math.exp(1 / b))
    middle = integrate.quad(lambda y: math.exp(-y / b) / (2 * b) * gauss_part(math.exp((2 * y - 1) / b)), 0, 1, epsabs=1e-13, epsrel=1e-10)[0]
    return tails + middle


@pytest.mark.parametrize("q,sigma,b,delta", [(0.2, 1.0, 2.0, 1e-5), (0.05, 0.7, 1.0, 1e-6), (0.5, 2.0, 4.0, 1e-5)])
def test_mixed_gaussian_laplace_step_epsilon_matches_numerical_integration(q, sigma, b, delta):
    from scipy import optimize

    def excess(eps):
        return max(_one_step_delta(eps, q, sigma, b, "remove"), _one_step_delta(eps, q, sigma, b, "add")) - delta

    truth = optimize.brentq(excess, 1e-6, 50, xtol=1e-10)
    ours = epsilon(StepMechanism(q, sigma, b, "shared"), 1, delta)
    assert ours == pytest.approx(truth, rel=2e-3)
    assert ours >= truth * (1 - 1e-4)  # never optimistic beyond discretisation


@pytest.mark.parametrize("kind", ["steps", "plan"])
def test_a_cached_calibration_that_overspends_is_recomputed(tmp_path, kind):
    """A stale or tampered cache entry is re-verified against the budget before use, never trusted."""
    import json

    from raco_bench.privacy.accounting import GaussianPlan, plan_epsilon

    path = tmp_path / "cal.json"
    cache = CalibrationCache(path=path)
    if kind == "steps":
        mech = StepMechanism(512 / 20000, 2.0, 5.0, "shared")
        good = cache.max_steps(mech, 1.0, DELTA)
        key, bad = CalibrationCache.key(mech, 1.0, DELTA, 100_000), good * 3
        ask = lambda c: c.max_steps(mech, 1.0, DELTA)  # noqa: E731
        spend = lambda v: epsilon(mech, int(v), DELTA)  # noqa: E731
    else:
        plan = GaussianPlan(0.05, 300, blocks=2, count_noise=50.0)
        good = cache.plan_noise(plan, 1.0, DELTA)
        key, bad = CalibrationCache.plan_key(plan, 1.0, DELTA), good / 3
        ask = lambda c: c.plan_noise(plan, 1.0, DELTA)  # noqa: E731
        spend = lambda v: plan_epsilon(plan, v, DELTA)  # noqa: E731
    entries = json.loads(path.read_text())
    entries[key] = bad
    path.write_text(json.dumps(entries))
    fresh = CalibrationCache(path=path)
    with pytest.warns(UserWarning, match="overspends"):
        value = ask(fresh)
    assert value == pytest.approx(good) and spend(value) <= 1.0 < spend(bad)
    assert fresh.stale == 1 and json.loads(path.read_text())[key] == pytest.approx(good)


def test_a_sweep_task_checks_its_calibration_and_the_check_reads_the_searched_value():
    """A sweep's calibration tasks (solve_checked) refuse a solver that overspends, as the cache does; for T the check
    re-reads the ε the search evaluated (memoised), so verifying in the task costs no composition."""
    from raco_bench.privacy.calibration import StepsProblem, solve_checked

    mech = StepMechanism(256 / 20000, 1.7, 6.0, "shared")
    problem = StepsProblem(mech, 1.0, DELTA, 100_000)
    epsilon.cache_clear()
    T = problem.solve()
    searched = epsilon.cache_info().misses
    assert problem.within_budget(T) and epsilon.cache_info().misses == searched  # the check composed nothing new
    assert solve_checked(problem) == T == max_steps(mech, 1.0, DELTA)
    assert epsilon(mech, int(T), DELTA) <= 1.0 < epsilon(mech, int(T) + 1, DELTA)
    broken = type("OneStepTooMany", (StepsProblem,), {"solve": lambda self: StepsProblem.solve(self) + 1})
    with pytest.raises(RuntimeError, match="does not meet its own budget"):
        solve_checked(broken(mech, 1.0, DELTA, 100_000))


def test_largest_within_where_the_line_is_flat_or_infinite():
    """Two ε values whose logs round equal (adjacent floats) and an infinite target leave the line undefined: the search
    falls back to factors of 8 and bisection, and still finds the definition."""
    a = 0.2
    while math.log(a) != math.log(math.nextafter(a, 1)):
        a = math.nextafter(a, 1)
    b = math.nextafter(a, 1)
    climbing = lambda t: a if t == 1 else (b if t < 10 else 0.3 + t)  # noqa: E731  (flat while it brackets)
    flat_bracket = lambda t: a if t <= 700 else b  # noqa: E731  (flat inside the bracket)
    for f, target, cap in ((climbing, 0.25, 1000), (flat_bracket, a, 1000), (lambda t: 1e-3 * t if t < 50 else math.inf, math.inf, 300)):
        assert largest_within(f, target, cap) == _largest_by_scan(f, target, cap)


def test_a_sweep_re_verifies_what_it_reads_from_the_cache(tmp_path, monkeypatch):
    """calibrate() uses a cached T only after checking it against the budget: an entry one step too many is discarded
    with a warning, recomputed and rewritten, and the trial gets the largest T that fits (no Ray is needed when every
    value is cached); a T above its problem's cap is refused too."""
    import json

    from raco_bench.methods import get_method
    from raco_bench.methods.base import Budget
    from raco_bench.privacy.calibration import StepsProblem
    from raco_bench.sweeps import SweepSpec
    from raco_bench.sweeps.calibration import calibrate
    from raco_bench.sweeps.plan import phase1_trials

    monkeypatch.setenv("RACO_BENCH_CACHE", str(tmp_path))
    spec = SweepSpec(dataset="adult", epsilons=(1.0,), gammas=(0.05,), methods=("raco-dp",), n_configs=3, phase1_seeds=1, max_steps=3000)
    n = 28829
    trials = [t for t in phase1_trials(spec, n) if t["epsilon"] is not None]
    method = get_method("raco-dp")
    problems = [method.calibration(method.hyperparameters(t["params"]), n, Budget(t["epsilon"], spec.delta, spec.max_steps, None, spec.selection))
                for t in trials]
    good = {p.key(): CalibrationCache().solve(p) for p in problems}
    below_cap = [p for p in problems if isinstance(p, StepsProblem) and good[p.key()] < p.cap]
    assert below_cap, "the sampled configurations should include one whose T is below the cap"
    path = CalibrationCache().path
    entries = json.loads(path.read_text())
    entries[below_cap[0].key()] = good[below_cap[0].key()] + 1
    path.write_text(json.dumps(entries))
    with pytest.warns(UserWarning, match="overspends"):
        calibrate(spec, trials, n)
    for t, p in zip(trials, problems):
        assert t["steps"] == good[p.key()] and epsilon(p.mechanism, t["steps"], p.delta, p.selection) <= 1.0
    assert json.loads(path.read_text())[below_cap[0].key()] == good[below_cap[0].key()]
    # a T above the cap is refused even where its ε would fit
    capped = StepsProblem(StepMechanism(0.01, 5.0, 50.0, "shared"), 1.0, DELTA, 100)
    assert capped.solve() == 100 and epsilon(capped.mechanism, 101, DELTA) <= 1.0
    assert capped.within_budget(100) and not capped.within_budget(101)
