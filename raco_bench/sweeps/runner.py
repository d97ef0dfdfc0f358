"""The sweep driver: `python sweeps/adult.py` (embedded local Ray) or `ray submit cluster.yaml sweeps/adult.py`
(the head node of a running cluster, which ``ray.init()`` joins; ``RAY_ADDRESS`` selects any other).

1. validate the arguments, the dataset and the tracking URI (nothing is written before that);
2. phase 1: build the trial list, calibrate privacy once per distinct tuple (in parallel Ray tasks,
   cached), run the trials with Ray Tune (failed trials retried), log each to MLflow once;
3. select per (method, ε, γ) from what MLflow holds; phase 2: fresh seeds of each winner;
4. print and log a summary of the selected configurations.

``--resume`` restores interrupted Tune experiments with ``Tuner.restore``; trials already complete in
MLflow are never rerun or relogged, so a resumed sweep ends with exactly one run per trial.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

from raco_bench.sweeps import tracking
from raco_bench.sweeps.plan import Selection, phase1_trials, phase2_trials, select
from raco_bench.sweeps.spec import SweepSpec

ENV_FORWARD = ("RACO_BENCH_DATA", "RACO_BENCH_CACHE", "RACO_BENCH_OFFLINE", "XDG_CACHE_HOME")


def parse_args(base: SweepSpec, argv: list[str] | None) -> tuple[SweepSpec, argparse.Namespace]:
    p = argparse.ArgumentParser(description=f"Two-phase sweep on {base.dataset} ({base.constraint}).")
    p.add_argument("--smoke", action="store_true", help="a small sweep that finishes in a few minutes on 2 CPU cores")
    p.add_argument("--epsilons", type=float, nargs="+")
    p.add_argument("--gammas", type=float, nargs="+")
    p.add_argument("--methods", nargs="+")
    p.add_argument("--n-configs", type=int, help="phase-1 configurations per (method, epsilon, gamma); 200 for a full run")
    p.add_argument("--phase1-seeds", type=int)
    p.add_argument("--phase2-seeds", type=int)
    p.add_argument("--max-steps", type=int)
    p.add_argument("--delta", type=float)
    p.add_argument("--sample-seed", type=int)
    p.add_argument("--experiment", help="MLflow experiment name (default: <dataset>-<constraint>)")
    p.add_argument("--preprocessing", choices=["public", "paper"],
                   help="public (default): feature domains from the catalog; paper: z-scoring from the rows, OUTSIDE the budget")
    p.add_argument("--checkpoint", choices=["last", "private", "paper"],
                   help="the reported model of every method: last (default, the private last iterate), private (noisy validation "
                        "selection, charged to the budget) or paper (selection OUTSIDE the budget)")
    p.add_argument("--tracking-uri", help="default: $MLFLOW_TRACKING_URI, else sqlite:///./mlflow.db")
    p.add_argument("--storage-path", help="Tune storage (default: $RACO_BENCH_STORAGE, else ./ray_results); shared storage on a cluster")
    p.add_argument("--resume", action="store_true", help="restore interrupted Tune experiments and finish the sweep")
    p.add_argument("--max-failures", type=int, default=3, help="retries of a failed trial")
    p.add_argument("--max-concurrent", type=int, default=0, help="0: as many as the cluster's resources allow")
    p.add_argument("--gpu-fraction", type=float, default=None, help="GPU share per trial (default 0.25 where the cluster has GPUs)")
    args = p.parse_args(argv)
    spec = base.smoke() if args.smoke else base
    overrides = {
        "epsilons": tuple(args.epsilons) if args.epsilons else None, "gammas": tuple(args.gammas) if args.gammas else None,
        "methods": tuple(args.methods) if args.methods else None, "n_configs": args.n_configs, "phase1_seeds": args.phase1_seeds,
        "phase2_seeds": args.phase2_seeds, "max_steps": args.max_steps, "delta": args.delta, "sample_seed": args.sample_seed,
        "experiment": args.experiment, "preprocessing": args.preprocessing, "checkpoint": args.checkpoint,
    }
    return replace(spec, **{k: v for k, v in overrides.items() if v is not None}), args


def validate(spec: SweepSpec, tracking_uri: str | None):
    """Everything that can be checked before anything is written."""
    from raco_bench.constraints import BUILDERS
    from raco_bench.data import load_dataset
    from raco_bench.methods import get_method

    for m in spec.methods:
        get_method(m)
    if spec.constraint not in BUILDERS:
        raise ValueError(f"unknown constraint {spec.constraint!r}; choose one of: {', '.join(BUILDERS)}")
    if "dp-fermi" in spec.methods and spec.constraint not in ("demographic-parity", "equalized-odds"):
        raise ValueError(f"dp-fermi cannot run with {spec.constraint!r}; drop it with --methods")
    ds = load_dataset(spec.dataset, preprocessing=spec.preprocessing)
    return ds, tracking.resolve_tracking_uri(tracking_uri)


# ----------------------------------------------------------------------------------- calibration
def _calibration_jobs(spec: SweepSpec, trials: list[dict], n_train: int) -> dict[str, tuple]:
    """Distinct calibration problems keyed by their cache key: ("steps", mechanism, ε, δ, cap) or ("noise", q, T, ε, δ)."""
    from baselines.dp_fermi import DPFermi
    from raco_bench.methods import get_method
    from raco_bench.privacy.calibration import CalibrationCache

    jobs = {}
    for t in trials:
        if t["epsilon"] is None:
            continue
        method = get_method(t["method"])
        h = method.hyperparameters(t["params"])
        if isinstance(method, DPFermi):
            t["steps"] = method.planned_steps(h, None, spec.max_steps)
            plan = method.privacy_plan(h, n_train, t["steps"], spec.selection)
            if plan is None or h.noise_multiplier is not None:
                continue
            job = ("noise", plan, t["epsilon"], spec.delta)
            key = CalibrationCache.plan_key(*job[1:])
        else:
            job = ("steps", method.step_mechanism(h, n_train), t["epsilon"], spec.delta, spec.max_steps, spec.selection)
            key = CalibrationCache.key(*job[1:])
        t["_calibration"] = key
        jobs[key] = job
    return jobs


def _solve(job: tuple) -> float:
    from raco_bench.privacy.accounting import max_steps, plan_min_noise

    return float(max_steps(*job[1:]) if job[0] == "steps" else plan_min_noise(*job[1:]))


def calibrate(spec: SweepSpec, trials: list[dict], n_train: int) -> dict:
    """T (RaCO-DP, DP-SGD) or σ (DP-FERMI full) for every private trial: each distinct tuple is solved
    once, in parallel Ray tasks, and kept in the calibration cache for later trials and sweeps.
    Results go to ``trial["steps"]`` and ``trial["calibrated"]``, never into the searched ``params``."""
    import ray

    from raco_bench.privacy.calibration import CalibrationCache

    cache = CalibrationCache()
    jobs = _calibration_jobs(spec, trials, n_train)
    missing = [k for k in jobs if cache.lookup(k) is None]
    t0 = time.perf_counter()
    if missing:
        solve = ray.remote(num_cpus=1)(_solve)
        for key, value in zip(missing, ray.get([solve.remote(jobs[k]) for k in missing])):
            cache.put(key, value)
    for t in trials:
        key = t.pop("_calibration", None)
        if key is None:
            continue
        value = cache.lookup(key)
        if jobs[key][0] == "steps":
            t["steps"] = int(value)
            if t["steps"] == 0:
                t["skip"] = "the privacy budget does not allow a single step with this configuration"
        else:
            t["calibrated"] = {"noise_multiplier": value}  # per-block σ of the method's GaussianPlan (re-checked by the trial)
    return {"distinct": len(jobs), "computed": len(missing), "seconds": time.perf_counter() - t0}


# ------------------------------------------------------------------------------------------ Tune
def run_phase(spec: SweepSpec, phase: int, trials: list[dict], args, uri: str, experiment_id: str, storage: str) -> None:
    from ray import tune

    from raco_bench.sweeps.trial import tune_trainable

    if not trials:
        return
    parent = tracking.get_or_create_parent(uri, experiment_id, spec.sweep_id, phase, asdict(spec))
    resources, device = _resources(args)
    env = {k: os.environ[k] for k in ENV_FORWARD if k in os.environ}
    trainable = tune.with_resources(
        tune.with_parameters(tune_trainable, tracking_uri=uri, experiment_id=experiment_id, parent_run_id=parent, device=device, env=env),
        resources,
    )
    name = f"{spec.experiment}-{spec.sweep_id}-phase{phase}"
    path = f"{storage}/{name}"
    if args.resume and tune.Tuner.can_restore(path):
        print(f"[sweep] resuming {path}", flush=True)
        tuner = tune.Tuner.restore(path, trainable, resume_unfinished=True, resume_errored=True, restart_errored=False)
    else:
        tuner = tune.Tuner(
            trainable,
            param_space={"trial": tune.grid_search(trials)},
            tune_config=tune.TuneConfig(max_concurrent_trials=args.max_concurrent or None, reuse_actors=True,
                                        trial_name_creator=_trial_name, trial_dirname_creator=_trial_name),
            run_config=tune.RunConfig(name=name, storage_path=storage, failure_config=tune.FailureConfig(max_failures=args.max_failures),
                                      verbose=1),
        )
    grid = tuner.fit()
    if grid.errors:
        raise RuntimeError(f"{len(grid.errors)} trial(s) of phase {phase} failed after {args.max_failures} retries "
                           f"(first: {grid.errors[0]!r}); fix the cause and rerun with --resume")


def _trial_name(trial) -> str:
    t = trial.config["trial"]
    return f"p{t['phase']}-{t['method']}-e{t['epsilon']}-g{t['gamma']}-c{t['config_id']}-s{t['seed']}"


def _resources(args) -> tuple[dict, str]:
    import ray

    gpus = ray.cluster_resources().get("GPU", 0)
    frac = args.gpu_fraction if args.gpu_fraction is not None else (0.25 if gpus else 0.0)
    return ({"cpu": 1, "gpu": frac} if frac else {"cpu": 1}), ("cuda" if frac else "cpu")


# --------------------------------------------------------------------------------------- results
def phase_results(uri: str, experiment_id: str, spec: SweepSpec, phase: int) -> list[dict]:
    out = []
    for run in tracking.completed_trials(uri, experiment_id, spec.sweep_id, phase):
        trial = json.loads(run.data.tags["raco_bench.trial"])
        m = run.data.metrics
        out.append({**trial, "run_id": run.info.run_id, "val_accuracy": m.get("val_accuracy", math.nan),
                    "val_max_constraint": m.get("val_max_constraint", math.inf), "test_accuracy": m.get("test_accuracy", math.nan),
                    "test_max_constraint": m.get("test_max_constraint", math.nan), "epsilon_spent": m.get("epsilon_spent", math.nan)})
    return out


def summarize(spec: SweepSpec, selections: list[Selection], phase2: list[dict]) -> tuple[str, list[dict]]:
    rows = []
    for sel in selections:
        runs = [r for r in phase2 if r["method"] == sel.method and r["epsilon"] == sel.epsilon and r["config_id"] == sel.config_id
                and (r["gamma"] is None or r["gamma"] == sel.gamma)]
        acc = [r["test_accuracy"] for r in runs if math.isfinite(r["test_accuracy"])]
        con = [r["test_max_constraint"] for r in runs if math.isfinite(r["test_max_constraint"])]
        mean = lambda xs: sum(xs) / len(xs) if xs else math.nan  # noqa: E731
        sd = lambda xs: (sum((x - mean(xs)) ** 2 for x in xs) / (len(xs) - 1)) ** 0.5 if len(xs) > 1 else math.nan  # noqa: E731
        rows.append({"method": sel.method, "epsilon": sel.epsilon, "gamma": sel.gamma, "config_id": sel.config_id,
                     "feasible_configs": f"{sel.n_feasible}/{sel.n_configs}", "phase2_runs": len(runs),
                     "test_accuracy_mean": mean(acc), "test_accuracy_sd": sd(acc), "test_constraint_mean": mean(con),
                     "share_meeting_gamma": mean([1.0 if c <= sel.gamma else 0.0 for c in con]) if con else math.nan, "params": sel.params})
    lines = [f"Selected configurations ({spec.experiment}, sweep {spec.sweep_id}, delta {spec.delta:g}):",
             f"{'method':9s} {'eps':>5s} {'gamma':>6s} {'config':>6s} {'feasible':>9s} {'test acc (mean ± sd)':>22s} {'test constraint':>15s} {'meets gamma':>11s}"]
    for r in rows:
        if r["config_id"] is None:
            lines.append(f"{r['method']:9s} {str(r['epsilon']):>5s} {r['gamma']:>6g} {'-':>6s} {r['feasible_configs']:>9s}   no configuration met gamma on validation")
            continue
        lines.append(f"{r['method']:9s} {str(r['epsilon']):>5s} {r['gamma']:>6g} {r['config_id']:>6d} {r['feasible_configs']:>9s} "
                     f"{r['test_accuracy_mean']:>12.4f} ± {r['test_accuracy_sd']:.4f} {r['test_constraint_mean']:>15.4f} {r['share_meeting_gamma']:>11.2f}")
    return "\n".join(lines), rows


def run_sweep(spec: SweepSpec, args) -> dict:
    import ray

    ds, uri = validate(spec, args.tracking_uri)
    raw = args.storage_path or os.environ.get("RACO_BENCH_STORAGE") or "ray_results"
    storage = raw if "://" in raw else str(Path(raw).resolve())  # local path, NFS mount or s3://…
    t0 = time.perf_counter()
    env = {k: os.environ[k] for k in ENV_FORWARD if k in os.environ}
    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS"), runtime_env={"env_vars": env} if env else None, log_to_driver=False)
    experiment_id = tracking.get_or_create_experiment(uri, spec.experiment)
    print(f"[sweep] {spec.experiment} (sweep {spec.sweep_id}): tracking {uri}, Tune storage {storage}, cluster {ray.cluster_resources()}", flush=True)

    trials1 = phase1_trials(spec, len(ds.train))
    cal = calibrate(spec, trials1, len(ds.train))
    print(f"[sweep] phase 1: {len(trials1)} trials; privacy calibrations: {cal['distinct']} distinct, {cal['computed']} computed in {cal['seconds']:.1f}s", flush=True)
    run_phase(spec, 1, trials1, args, uri, experiment_id, storage)
    results1 = phase_results(uri, experiment_id, spec, 1)
    selections = select(spec, results1)

    trials2 = phase2_trials(spec, selections)
    calibrate(spec, trials2, len(ds.train))
    print(f"[sweep] phase 2: {len(trials2)} trials (winners x {spec.phase2_seeds} fresh seeds)", flush=True)
    run_phase(spec, 2, trials2, args, uri, experiment_id, storage)
    results2 = phase_results(uri, experiment_id, spec, 2)
    text, rows = summarize(spec, selections, results2)
    elapsed = time.perf_counter() - t0
    n_trials = len(trials1) + len(trials2)
    text += f"\n{n_trials} trials in {elapsed:.0f}s ({60 * n_trials / elapsed:.1f} trials/minute)"
    print(text, flush=True)
    parent2 = tracking.get_or_create_parent(uri, experiment_id, spec.sweep_id, 2, asdict(spec))
    tracking.retry(lambda: tracking.client(uri).log_text(parent2, json.dumps(rows, indent=2, default=str), "selected_configurations.json"))
    tracking.retry(lambda: tracking.client(uri).log_text(parent2, text, "summary.txt"))
    return {"trials": n_trials, "seconds": elapsed, "rows": rows, "experiment_id": experiment_id, "tracking_uri": uri}


def main(base: SweepSpec, argv: list[str] | None = None) -> int:
    try:
        spec, args = parse_args(base, argv)
        run_sweep(spec, args)
    except (ValueError, RuntimeError) as exc:
        print(f"sweep: error: {exc}", file=sys.stderr)
        return 2
    return 0
