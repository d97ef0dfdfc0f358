"""Privacy calibration of a sweep's trials, before any trial runs.

Every private configuration has a calibration problem that its method plugin builds
(:meth:`~raco_bench.methods.base.Method.calibration`: T for RaCO-DP and DP-SGD, σ for DP-FERMI, …).
Each distinct problem is solved once, in parallel Ray tasks that also check each value against its budget
(:func:`~raco_bench.privacy.calibration.solve_checked`; a value read from the cache is re-verified in the driver
instead), and kept in the calibration cache; the
method's :meth:`~raco_bench.methods.base.Method.calibrated` says what the value fixes in the trial
(``steps``, calibrated ``params``, or a ``skip`` reason). Calibrated values are stored apart from the
searched ``params`` (in ``trial["calibrated"]``), so MLflow shows them as calibrated, and the trial
re-checks them against the budget before training.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from raco_bench.methods import get_method
from raco_bench.methods.base import Budget
from raco_bench.progress import Progress
from raco_bench.sweeps.spec import SweepSpec

if TYPE_CHECKING:
    from raco_bench.privacy.calibration import CalibrationCache, CalibrationProblem
    from raco_bench.sweeps.plan import Trial


def calibrate(spec: SweepSpec, trials: list[Trial], n_train: int) -> dict:
    """Solve every private trial's calibration; results go into the trials (see the module docstring)."""
    from raco_bench.privacy.calibration import CalibrationCache

    cache = CalibrationCache()
    problems, owners = {}, []
    for t in trials:
        if t["epsilon"] is None:
            continue
        method = get_method(t["method"])
        problem = method.calibration(method.hyperparameters(t["params"]), n_train,
                                     Budget(t["epsilon"], spec.delta, spec.max_steps, None, spec.selection))
        if problem is None:
            continue
        problems[problem.key()] = problem
        owners.append((t, method, problem))
    t0 = time.perf_counter()
    values, computed = solve_all(problems, cache)
    for t, method, problem in owners:
        apply_calibrated(t, method.calibrated(problem, values[problem.key()]))
    return {"distinct": len(problems), "computed": computed, "seconds": time.perf_counter() - t0}


def solve_all(problems: dict[str, CalibrationProblem], cache: CalibrationCache) -> tuple[dict[str, float], int]:
    """Every problem's value (key → value) and how many were computed: those the cache lacks are solved in parallel
    Ray tasks, each checked against its budget in its task (:func:`~raco_bench.privacy.calibration.solve_checked`), and
    stored; those read from the cache are re-verified against the budget here (:meth:`CalibrationCache.solve`)."""
    import ray

    from raco_bench.privacy.calibration import solve_checked

    missing = [k for k in problems if cache.lookup(k) is None]
    values: dict[str, float] = {}
    if missing:
        solve = ray.remote(num_cpus=1)(solve_checked)
        pending = {solve.remote(problems[k]): k for k in missing}
        progress = Progress("calibration", len(missing))
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                key = pending.pop(ready[0])
                values[key] = ray.get(ready[0])
                progress.advance()
        finally:  # what was solved is kept, in one write, even when a task fails
            cache.put_many(values)
    for key, problem in problems.items():
        if key not in values:
            values[key] = cache.solve(problem)
    return values, len(missing)


def apply_calibrated(trial: Trial, fixed: dict) -> None:
    """Put what a solved calibration fixes (``Method.calibrated``) into ``trial``: its ``skip`` reason, its ``steps``, its
    calibrated parameters (kept apart from the searched ones, in ``trial["calibrated"]``)."""
    if "skip" in fixed:
        trial["skip"] = fixed["skip"]
    if "steps" in fixed:
        trial["steps"] = fixed["steps"]
    if fixed.get("params"):
        trial["calibrated"] = dict(fixed["params"])
