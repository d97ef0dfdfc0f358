"""``raco-bench bench calibration``: the noise multiplier's search (:func:`raco_bench.privacy.accounting.smallest_noise_within`)
against doubling from σ = 1 and bisection to the same tolerance, side by side on the calibration problems of a sweep.

It samples configurations of a method from its sweep space (as a sweep's phase 1 does), builds each one's calibration
problem the way a sweep does (:meth:`~raco_bench.methods.base.Method.calibration`) and solves those whose knob is a noise
multiplier twice: with plain bisection, then with the suite's search, each from a cold accountant (every memoised PLD
and ε cleared), counting ε evaluations (each a composition) and timing them. Both search up to 2 × NOISE_LIMIT, where
only configurations whose ε fits at NOISE_LIMIT are kept (the one evaluation that decides the others is not
counted). It prints both values (each checked against its budget), the evaluations and seconds, and the ratios. No data
is read: n_train is the catalog's published split size.
"""

from __future__ import annotations

import argparse
import platform
import time

from raco_bench.benchmarks import private_method_on
from raco_bench.methods import DEFAULT_METHOD
from raco_bench.methods.base import Budget
from raco_bench.methods.space import sample_configs


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="raco-bench bench calibration", description=__doc__.split("\n\n")[0])
    p.add_argument("--method", default=DEFAULT_METHOD, help="a private method (default: %(default)s)")
    p.add_argument("--dataset", default="adult", help="its published training-split size sets q = B/n (default: %(default)s)")
    p.add_argument("--epsilon", type=float, default=9.0, help="the budget (default: %(default)s)")
    p.add_argument("--delta", type=float, default=1e-5, help="delta (default: %(default)s)")
    p.add_argument("--step-budget", default="steps", choices=["steps", "noise", "either"],
                   help="the sweep's step budget; 'steps' searches T and calibrates σ (default: %(default)s)")
    p.add_argument("--max-steps", type=int, default=20000, help="the step cap (default: %(default)s)")
    p.add_argument("--configs", type=int, default=12, help="configurations sampled (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="the sampling seed (default: %(default)s)")
    return p.parse_args(argv)


def bisection(eps, target: float, limit: float, rel_tol: float = 1e-3) -> float:
    """The reference: σ doubled (or halved) from 1 to a bracket, then bisected until (hi - lo)/hi ≤ ``rel_tol``; hi returned."""
    hi = 1.0
    while eps(hi) > target:
        hi *= 2.0
        if hi > limit:
            raise ValueError(f"no noise multiplier up to {limit:g} meets epsilon={target}")
    lo = hi / 2.0
    while lo > 1e-3 and eps(lo) <= target:
        hi, lo = lo, lo / 2.0
    while (hi - lo) / hi > rel_tol:
        mid = 0.5 * (lo + hi)
        if eps(mid) <= target:
            hi = mid
        else:
            lo = mid
    return hi


def _cold() -> None:
    """Forget every memoised PLD and ε, so that each search pays for its own compositions."""
    from raco_bench.privacy import accounting

    for fn in (accounting.step_pld, accounting.selection_pld, accounting._separate_pld, accounting.epsilon,
               accounting.separate_composition_epsilon, accounting.plan_pld):
        fn.cache_clear()


def _timed(search, problem) -> tuple[float, int, float]:
    calls = [0]

    def spent(sigma: float) -> float:
        calls[0] += 1
        return problem.spent(sigma)

    _cold()
    t0 = time.perf_counter()
    value = search(spent)
    return value, calls[0], time.perf_counter() - t0


def _describe(problem) -> str:
    """The problem's sampling rate, Laplace scale (if any) and T, as far as it has them."""
    m = getattr(problem, "mechanism", None) or getattr(problem, "plan", None)
    parts = [f"q {m.sampling_rate:.4f}"] if hasattr(m, "sampling_rate") else []
    if getattr(m, "laplace_scale", None) is not None:
        parts.append(f"b {m.laplace_scale:.3g}")
    steps = getattr(problem, "steps", None) or getattr(m, "steps", None)
    if steps is not None:
        parts.append(f"T {steps}")
    return ", ".join(parts) or type(problem).__name__


def main(argv: list[str] | None = None) -> int:
    from raco_bench.privacy.accounting import smallest_noise_within
    from raco_bench.privacy.calibration import NOISE, NOISE_LIMIT

    args = parse(argv or [])
    method, n_train = private_method_on(args.method, args.dataset, "it calibrates nothing")
    budget = Budget(args.epsilon, args.delta, args.max_steps)
    problems = []
    for params in sample_configs(method, args.configs, n_train, args.seed, args.step_budget, args.max_steps):
        problem = method.calibration(method.hyperparameters(params), n_train, budget)
        if problem is not None and problem.knob is NOISE and problem.spent(NOISE_LIMIT) <= problem.target_epsilon:
            problems.append(problem)  # a noise multiplier exists (σ for a searched T; DP-FERMI's, PF-LD's σ)
    if not problems:
        raise ValueError(f"none of {args.configs} sampled configurations of {args.method} under --step-budget {args.step_budget} "
                         "calibrates a noise multiplier that exists; use --step-budget steps, or more --configs")
    print(f"noise calibration of {len(problems)} of {args.configs} sampled {args.method} configurations on {args.dataset} "
          f"(n = {n_train}) at epsilon {args.epsilon:g}, delta {args.delta:g}; {platform.processor() or platform.machine()}")
    print(f"{'problem':<28} {'sigma bisection':>16} {'sigma grid':>11} {'evals':>11} {'seconds':>15}")
    totals = [0, 0, 0.0, 0.0]
    for problem in problems:
        target = problem.target_epsilon
        ref, n_ref, s_ref = _timed(lambda f: bisection(f, target, 2 * NOISE_LIMIT), problem)
        new, n_new, s_new = _timed(lambda f: smallest_noise_within(f, target, 2 * NOISE_LIMIT, "none fits"), problem)
        if not (problem.within_budget(ref) and problem.within_budget(new)):
            raise RuntimeError(f"a solved σ overspends: bisection {ref}, grid {new} (a bug)")
        print(f"{_describe(problem):<28} {ref:>16.5f} {new:>11.5f} {f'{n_ref} / {n_new}':>11} {f'{s_ref:.2f} / {s_new:.2f}':>15}", flush=True)
        totals = [totals[0] + n_ref, totals[1] + n_new, totals[2] + s_ref, totals[3] + s_new]
    print(f"in all: {totals[0]} evaluations by bisection, {totals[1]} by the grid search ({totals[1] / totals[0]:.2f} of them); "
          f"{totals[2]:.1f} s against {totals[3]:.1f} s ({totals[3] / totals[2]:.2f} of the time)")
    return 0
