"""The sweep driver's orchestration: `python sweeps/adult.py` (embedded local Ray) or `ray submit cluster.yaml sweeps/adult.py`
(the head node of a running cluster, which ``ray.init()`` joins; ``RAY_ADDRESS`` selects any other).

1. validate the arguments, the dataset and the tracking URI (nothing is written before that);
2. phase 1: build the trial list, calibrate privacy once per distinct tuple (in parallel Ray tasks,
   cached), run the trials with Ray Tune (failed trials retried), log each to MLflow once;
3. select per (method, ε, γ) from what MLflow holds; phase 2: fresh seeds of each winner;
4. print and log a summary of the selected configurations.

What a sweep has done is what MLflow holds: a phase ends only when every one of its configurations is
recorded by a complete pack. An interrupted phase (Ctrl-C) ends the sweep with exit code 130 and its
parent run KILLED, a phase whose packs failed after every retry with exit code 1 and FAILED; no later
phase runs, and one line says how to continue. ``--resume`` continues: it trains what phase 1 lacks,
selects again from every recorded result, and trains every winner that has no phase-2 record. It never
restores an earlier Tune experiment (whose packs may be an old plan's), so a second ``--resume`` is a
no-op and the end state is that of an uninterrupted sweep. Arguments are parsed in
:mod:`raco_bench.sweeps.arguments`, privacy is calibrated in :mod:`raco_bench.sweeps.calibration`. Each
phase's parent run ends FINISHED with the sweep spec as its params and the phase's counts as metrics.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

from raco_bench import tracking
from raco_bench.packs.memory import DataShape
from raco_bench.sweeps.arguments import parse_args
from raco_bench.sweeps.calibration import calibrate
from raco_bench.sweeps.configurations import LABEL_TAGS, log_configuration_runs
from raco_bench.sweeps.listing import PLANNED
from raco_bench.sweeps.plan import (
    Selection,
    Trial,
    auto_pack_size,
    failure_baseline,
    make_packs,
    pack_memory_fit,
    phase1_trials,
    phase2_trials,
    planned_phase1,
    select,
    tpe_phase1,
)
from raco_bench.sweeps.registry import register_selected
from raco_bench.sweeps.results import read_results
from raco_bench.sweeps.spec import SweepSpec
from raco_bench.sweeps.trial import dataset_record, log_dataset_input

ENV_FORWARD = ("RACO_BENCH_DATA", "RACO_BENCH_CACHE", "RACO_BENCH_OFFLINE", "XDG_CACHE_HOME", "RACO_BENCH_GPUS_PER_TRIAL")


def validate(spec: SweepSpec, tracking_uri: str | None):
    """Everything that can be checked before anything is written."""
    from raco_bench.constraints import BUILDERS
    from raco_bench.data import load_dataset
    from raco_bench.methods import get_method

    if spec.constraint not in BUILDERS:
        raise ValueError(f"unknown constraint {spec.constraint!r}; choose one of: {', '.join(BUILDERS)}")
    for m in spec.methods:
        reason = get_method(m).supports(spec.constraint)
        if reason:
            raise ValueError(f"method {m} cannot run with {spec.constraint!r}: {reason}; drop it with --methods")
    uri = tracking.resolve_tracking_uri(tracking_uri)
    tracking.check_reachable(uri)  # before the dataset is read and Ray starts: an unreachable store fails in seconds
    ds = load_dataset(spec.dataset, preprocessing=spec.preprocessing)
    return ds, uri


def sweep_key(spec: SweepSpec, args) -> bytes | None:
    """The sweep's secret key (``randomness=secret``): from ``--key-file`` (created there if absent), else fresh from the
    OS for this invocation only, so a ``--resume`` without the file trains what is left under a new key."""
    from raco_bench.privacy.counter_rng import Keystream

    source = Keystream.for_mode(spec.randomness, args.key_file)
    if source.secret is not None and args.key_file is None and args.resume:
        print("[sweep] secret randomness without --key-file: what is left trains under a new key (docs/privacy.md, \"Threat model\")",
              flush=True)
    if spec.randomness == "reproducible":
        print("[sweep] randomness=reproducible: every draw can be regenerated from the logged seeds, so the epsilon holds only if "
              "they are secret; every run says so (OUTSIDE THE BUDGET)", flush=True)
    return source.secret


# ------------------------------------------------------------------------------------------ Tune
class PhaseIncomplete(RuntimeError):
    """A phase that ended with configurations not recorded: interrupted (its parent run KILLED) or failed after every
    retry (FAILED). Nothing after it runs; the same command with ``--resume`` continues it."""

    def __init__(self, phase: int, recorded: int, planned: int, status: str, reason: str) -> None:
        self.phase, self.recorded, self.planned, self.status = phase, recorded, planned, status
        what = "was interrupted" if status == "KILLED" else "failed"
        super().__init__(f"phase {phase} {what}: {recorded}/{planned} configurations recorded ({reason}); nothing after it ran. "
                         "Continue with the same command and --resume")


MEMORY_ERRORS = ("OutOfMemoryError", "running low on memory")  # how Ray reports a worker its memory monitor killed


def memory_error(exc: BaseException) -> bool:
    return any(m in f"{type(exc).__name__}: {exc!r} {exc}" for m in MEMORY_ERRORS)


def recorded_keys(uri: str, experiment_id: str, spec: SweepSpec, phase: int) -> set[str]:
    """The trials of a phase that a complete pack recorded: the only count the sweep reports."""
    return {r["trial_key"] for r in phase_results(uri, experiment_id, spec, phase)}


def not_recorded(trials: list[Trial], uri: str, experiment_id: str, spec: SweepSpec, phase: int) -> list[Trial]:
    """The trials no complete pack has recorded yet: the store is read once (not once per trial)."""
    done = recorded_keys(uri, experiment_id, spec, phase)
    return [t for t in trials if t["trial_key"] not in done]


def run_phase(spec: SweepSpec, phase: int, trials: list[Trial], args, uri: str, experiment_id: str, storage: str, key: bytes | None = None,
              shape: DataShape | None = None, planned: int | None = None) -> None:
    """Train a phase's trials as packs (one Tune trial per pack) until every one is recorded in MLflow; trials already
    recorded are never rerun. A pack that fails is retried by Tune from its last checkpoint (``--max-failures``); packs
    that still fail because a worker ran out of memory are trained again in packs of half the size. An interrupted or
    failed phase marks its parent run KILLED or FAILED and raises :class:`PhaseIncomplete`."""
    if not trials:
        return
    parent = tracking.get_or_create_parent(uri, experiment_id, spec.sweep_id, phase, asdict(spec))
    tracking.set_status(uri, parent, "RUNNING")
    tracking.set_tags(uri, parent, {PLANNED: str(planned or len(trials))})  # what `raco-bench sweeps` counts against (a TPE phase: all rounds)
    try:
        _train_phase(spec, phase, trials, args, uri, experiment_id, parent, storage, key, shape)
    except PhaseIncomplete as exc:
        tracking.set_status(uri, parent, exc.status)
        raise
    except KeyboardInterrupt:
        tracking.set_status(uri, parent, "KILLED")
        done = len(recorded_keys(uri, experiment_id, spec, phase))
        raise PhaseIncomplete(phase, done, len(trials), "KILLED", "interrupted") from None
    except BaseException:
        tracking.set_status(uri, parent, "FAILED")
        raise


def _train_phase(spec: SweepSpec, phase: int, trials: list[Trial], args, uri: str, experiment_id: str, parent: str, storage: str,
                 key: bytes | None, shape: DataShape | None = None) -> None:
    import ray

    resources, _ = _resources(args)
    todo = not_recorded(trials, uri, experiment_id, spec, phase)
    slots = ray.cluster_resources().get("CPU", 1.0) if not resources.get("gpu") else gpu_slots(ray.cluster_resources().get("GPU", 0.0), resources["gpu"])
    # the size is planned for the whole phase: packs are contiguous chunks of one order, so the packs left after a
    # resume are the first attempt's packs, and their incomplete runs (and checkpoints' curves) are continued
    unlimited = args.pack_size or auto_pack_size(len(trials), slots, bool(resources.get("gpu")))
    fits = pack_memory_fit(todo, spec, shape, slots) if shape is not None and not args.pack_size else None
    size = auto_pack_size(len(trials), slots, bool(resources.get("gpu")), fits) if fits is not None else unlimited
    packs = make_packs(todo, size)
    limited = " (the memory model fits no more in this node's share per slot: docs/packs.md, \"Memory\")" if size < unlimited else ""
    print(f"[sweep] phase {phase}: {len(todo)} configurations to train ({len(trials) - len(todo)} already recorded) "
          f"in {len(packs)} packs of up to {size}{limited}", flush=True)
    attempt = 0
    while todo:
        tracking.drop_abandoned_packs(uri, experiment_id, spec.sweep_id, phase, {p["pack_key"] for p in packs})
        errors = _fit(spec, phase, packs, len(todo), args, uri, experiment_id, parent, storage, key, attempt)
        todo = not_recorded(trials, uri, experiment_id, spec, phase)
        if not todo:
            break
        recorded = len(trials) - len(todo)
        if not errors:  # Tune stopped before every pack finished, with no trial in error: an interrupt
            raise PhaseIncomplete(phase, recorded, len(trials), "KILLED", "interrupted")
        if size > 1 and all(memory_error(e) for e in errors):
            size, attempt = max(1, size // 2), attempt + 1
            print(f"[sweep] phase {phase}: {len(errors)} pack(s) ran out of memory; training the {len(todo)} configurations not recorded "
                  f"again in packs of up to {size}", flush=True)
            packs = make_packs(todo, size)
            continue
        raise PhaseIncomplete(phase, recorded, len(trials), "FAILED", f"{len(errors)} pack(s) failed after {args.max_failures} retries; "
                              f"first: {errors[0]!r}; fix the cause")
    print(f"[sweep] phase {phase}: {len(trials)}/{len(trials)} configurations recorded", flush=True)


def _fit(spec: SweepSpec, phase: int, packs: list[dict], configurations: int, args, uri: str, experiment_id: str, parent: str, storage: str,
         key: bytes | None, attempt: int) -> list[BaseException]:
    """One Ray Tune run over ``packs``; the errors of the packs that failed after their retries. Each call is a new Tune
    experiment: what is done is read from MLflow, never from an earlier Tune state (which may plan other packs)."""
    from ray import tune

    from raco_bench.sweeps.console import PhaseProgress
    from raco_bench.sweeps.trial import tune_trainable

    resources, device = _resources(args)
    env = {k: os.environ[k] for k in ENV_FORWARD if k in os.environ}
    trainable = tune.with_resources(
        tune.with_parameters(tune_trainable, tracking_uri=uri, experiment_id=experiment_id, parent_run_id=parent, device=device, env=env,
                             key=key, checkpoint_every_s=args.pack_checkpoint_s),  # the secret key travels in Ray's object store
        resources,
    )
    name = f"{spec.experiment}-{spec.sweep_id}-phase{phase}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{attempt}"
    tuner = tune.Tuner(
        trainable,
        param_space={"pack": tune.grid_search(packs)},
        tune_config=tune.TuneConfig(max_concurrent_trials=args.max_concurrent or None, reuse_actors=True,
                                    trial_name_creator=_trial_name, trial_dirname_creator=_trial_name),
        run_config=tune.RunConfig(name=name, storage_path=storage, failure_config=tune.FailureConfig(max_failures=args.max_failures),
                                  checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
                                  verbose=1 if args.verbose else 0,
                                  callbacks=[] if args.verbose else [PhaseProgress(phase, configurations, spec.gammas)]),
    )
    try:
        grid = tuner.fit()
    except RuntimeError as exc:  # Ray Tune aborts the whole run when its memory monitor kills a worker ("Caught unexpected exception")
        if memory_error(exc):
            return [exc]
        raise
    return list(grid.errors)


def _trial_name(trial) -> str:
    p = trial.config["pack"]
    return f"p{p['phase']}-{p['method']}-{len(p['members'])}-{p['pack_key'][:8]}"


GPUS_PER_TRIAL_ENV = "RACO_BENCH_GPUS_PER_TRIAL"  # set by cluster.yaml on every node
CLUSTER_GPUS_ENV = "RACO_BENCH_CLUSTER_GPUS"  # the GPUs the cluster can scale up to (cluster.yaml, the KubeRay manifest)


def gpu_slots(gpus_up: float, fraction: float) -> float:
    """How many GPU trials a phase plans for: the GPUs the cluster can scale up to (``RACO_BENCH_CLUSTER_GPUS``, which
    the cluster's configuration sets) or, where more are up, those, divided by each trial's share. On an autoscaling
    cluster the GPU workers join after the sweep starts: planning for the GPUs up at that moment (none) would put a
    phase in one pack for one GPU."""
    raw = os.environ.get(CLUSTER_GPUS_ENV, "0")
    try:
        declared = float(raw)
    except ValueError:
        raise ValueError(f"invalid {CLUSTER_GPUS_ENV}={raw!r}: the number of GPUs the cluster can scale up to, such as 8") from None
    return max(gpus_up, declared, 1.0) / fraction


def _resources(args) -> tuple[dict, str]:
    """Each trial's request, decided from the flags or the cluster's configuration, never from the nodes that
    happen to be up: on an autoscaling cluster the GPU workers join after the sweep starts. The trial
    picks its device from the GPUs Ray assigns it ("auto")."""
    raw = args.gpu_fraction if args.gpu_fraction is not None else os.environ.get(GPUS_PER_TRIAL_ENV, "0")
    try:
        frac = float(raw)
    except ValueError:
        raise ValueError(f"invalid {GPUS_PER_TRIAL_ENV}={raw!r}: a GPU share per trial such as 1") from None
    if not 0 <= frac <= 8:
        raise ValueError(f"invalid GPU share per trial {frac}: use a number in [0, 8] (1 = one trial per GPU, 0.25 = four)")
    return ({"cpu": 1, "gpu": frac} if frac else {"cpu": 1}), "auto"


# --------------------------------------------------------------------------------------- results
def phase_results(uri: str, experiment_id: str, spec: SweepSpec, phase: int) -> list[dict]:
    """Every configuration a complete pack of this phase recorded (:func:`~raco_bench.sweeps.results.read_results`), as
    trial-like dicts with its reported metrics; a missing validation constraint is inf (never feasible)."""
    out = []
    for row in read_results(uri, experiment_id, spec.sweep_id, phase).to_dict("records"):
        value = lambda k, default=math.nan: default if row[k] is None or row[k] != row[k] else row[k]  # noqa: E731 - NaN: absent
        out.append({"trial_key": row["trial_key"], "method": row["method"], "phase": row["phase"], "epsilon": row["epsilon"], "gamma": row["gamma"],
                    "config_id": row["config_id"], "seed": row["seed"], "params": json.loads(row["params"]), "run_id": row["run_id"],
                    "val_accuracy": value("val_accuracy"), "val_max_constraint": value("val_max_constraint", math.inf),
                    "test_accuracy": value("test_accuracy"), "test_max_constraint": value("test_max_constraint"),
                    "epsilon_spent": value("epsilon_spent"), "noisy_val_accuracy": value("noisy_val_accuracy"),
                    "noisy_val_max_constraint": value("noisy_val_max_constraint", math.inf), "repeat": row["repeat"],
                    "epsilon_end_to_end": row["epsilon_end_to_end"],
                    "labels": {k: str(row[k]) for k in LABEL_TAGS if row[k] == row[k] and row[k] not in ("", None)}})
    return out


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan


def sd(xs: list[float]) -> float:
    """The sample standard deviation (nan below two values)."""
    return (sum((x - mean(xs)) ** 2 for x in xs) / (len(xs) - 1)) ** 0.5 if len(xs) > 1 else math.nan


def summarize(spec: SweepSpec, selections: list[Selection], phase2: list[dict]) -> tuple[str, list[dict]]:
    rows = []
    for sel in selections:
        runs = [r for r in phase2 if r["method"] == sel.method and r["epsilon"] == sel.epsilon and r["config_id"] == sel.config_id
                and (r["gamma"] is None or r["gamma"] == sel.gamma)]
        acc = [r["test_accuracy"] for r in runs if math.isfinite(r["test_accuracy"])]
        con = [r["test_max_constraint"] for r in runs if math.isfinite(r["test_max_constraint"])]
        rows.append({"method": sel.method, "epsilon": sel.epsilon, "gamma": sel.gamma, "config_id": sel.config_id,
                     "feasible_configs": f"{sel.n_feasible}/{sel.n_configs}", "failed_configs": sel.n_failed, "phase2_runs": len(runs),
                     "test_accuracy_mean": mean(acc), "test_accuracy_sd": sd(acc), "test_constraint_mean": mean(con),
                     "share_meeting_gamma": mean([1.0 if c <= sel.gamma else 0.0 for c in con]) if con else math.nan, "params": sel.params})
    lines = [f"Selected configurations ({spec.experiment}, sweep {spec.sweep_id}, delta {spec.delta:g}):",
             f"{'method':9s} {'eps':>5s} {'gamma':>6s} {'config':>6s} {'feasible':>9s} {'test acc (mean ± sd)':>22s} "
             f"{'test constraint':>15s} {'meets gamma':>11s}"]
    for r in rows:
        if r["config_id"] is None:
            lines.append(f"{r['method']:9s} {str(r['epsilon']):>5s} {r['gamma']:>6g} {'-':>6s} {r['feasible_configs']:>9s}   "
                         "no configuration met gamma on validation"
                         + (f" ({r['failed_configs']} excluded: a phase-1 seed failed)" if r["failed_configs"] else ""))
            continue
        lines.append(f"{r['method']:9s} {str(r['epsilon']):>5s} {r['gamma']:>6g} {r['config_id']:>6d} {r['feasible_configs']:>9s} "
                     f"{r['test_accuracy_mean']:>12.4f} ± {r['test_accuracy_sd']:.4f} {r['test_constraint_mean']:>15.4f} {r['share_meeting_gamma']:>11.2f}")
    return "\n".join(lines), rows


LARGE_SWEEP = 500  # phase-1 trials above which a terminal user is asked to confirm
CONFIGS_PER_CPU_MINUTE = 60.0  # a rough planning rate with packs on a CPU (`raco-bench bench throughput`: 3,657 Adult configurations/hour)


def confirm(spec: SweepSpec, n_trials: int, args, cpus: float) -> None:
    """State the size of phase 1 and a rough time; ask before a large sweep when a person is at a terminal."""
    minutes = n_trials / (CONFIGS_PER_CPU_MINUTE * max(cpus, 1.0))
    after = "then each search's release (no phase 2)" if spec.tuning == "accounted" else "then phase 2"
    search = f" asked by TPE in rounds of {spec.search_batch} per (method, epsilon, gamma)" if spec.search == "tpe" else ""
    print(f"[sweep] phase 1 has {n_trials} configurations{search} ({len(spec.methods)} methods); at a rough {CONFIGS_PER_CPU_MINUTE:g} per CPU-minute "
          f"on {cpus:g} CPUs that is about {minutes:.0f} min, {after}", flush=True)
    if n_trials > LARGE_SWEEP and not args.yes and sys.stdin.isatty():
        if input("[sweep] start it? [y/N] ").strip().lower() not in ("y", "yes"):
            raise ValueError("sweep not started; shrink it with --n-configs / --epsilons / --gammas, or pass --yes")


def quiet_libraries() -> None:
    """The compact console: Tune's legacy output engine (silent at verbose=0, no boxes or TensorBoard hints)
    and only warnings from Ray, Tune and MLflow."""
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # a bar per pack table read (every TPE round reads them all)
    for name in ("ray", "ray.tune", "ray.train", "mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)
    logging.getLogger("ray.tune.tune").setLevel(logging.ERROR)  # its "Resume experiment with: Tuner.restore(...)": the sweep says how


def finish_phase(uri: str, experiment_id: str, spec: SweepSpec, phase: int, metrics: dict[str, float]) -> None:
    """End a phase's parent run FINISHED, with the sweep spec as params and the phase's counts as metrics."""
    parent = tracking.get_or_create_parent(uri, experiment_id, spec.sweep_id, phase, asdict(spec))
    params = {f"sweep.{k}": (",".join(map(str, v)) if isinstance(v, tuple) else v) for k, v in asdict(spec).items()}
    tracking.finish_run(uri, parent, metrics, params)


def check_resumable(spec: SweepSpec, uri: str, resume: bool) -> None:
    """Refuse, before anything is written, to start over a sweep that an earlier command left unfinished: say how to
    continue it instead (reading the store only)."""
    exp = tracking.experiment_id(uri, spec.experiment)
    if exp is None or resume:
        return
    for phase in (1, 2):
        found = tracking.find_run(uri, exp, {tracking.SWEEP_ID: spec.sweep_id, tracking.PHASE: str(phase), tracking.KIND: "phase"})
        if found is not None and found.info.status != "FINISHED":
            raise ValueError(f"sweep {spec.sweep_id} of experiment {spec.experiment!r} did not finish (phase {phase} is {found.info.status}); "
                             "continue it with the same command and --resume, or start another with --experiment NAME")


def run_sweep(spec: SweepSpec, args) -> dict:
    import ray

    ds, uri = validate(spec, args.tracking_uri)
    check_resumable(spec, uri, args.resume)
    if args.resume:
        print(f"[sweep] resuming sweep {spec.sweep_id}: what MLflow holds is kept, the rest is trained", flush=True)
    key = sweep_key(spec, args)
    raw = args.storage_path or os.environ.get("RACO_BENCH_STORAGE") or "ray_results"
    storage = raw if "://" in raw else str(Path(raw).resolve())  # local path, NFS mount or s3://…
    t0 = time.perf_counter()
    env = {k: os.environ[k] for k in ENV_FORWARD if k in os.environ}
    if not args.verbose:
        quiet_libraries()
    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS"), runtime_env={"env_vars": env} if env else None, log_to_driver=False,
                 logging_level=logging.INFO if args.verbose else logging.WARNING)
    experiment_id = tracking.get_or_create_experiment(uri, spec.experiment)
    print(f"[sweep] {spec.experiment} (sweep {spec.sweep_id}): tracking {uri}, Tune storage {storage}, cluster {ray.cluster_resources()}", flush=True)
    parent1 = tracking.get_or_create_parent(uri, experiment_id, spec.sweep_id, 1, asdict(spec))
    record_provenance(uri, parent1, ray.cluster_resources())
    log_dataset_input(uri, parent1, ds)

    if spec.tuning == "accounted":
        return run_accounted(spec, args, len(ds.train), uri, experiment_id, storage, t0, key, DataShape.of(ds))
    baseline = failure_baseline(spec.constraint, ds.val.y)
    trials1 = train_phase1(spec, args, len(ds.train), uri, experiment_id, storage, key, DataShape.of(ds), baseline)
    results1 = phase_results(uri, experiment_id, spec, 1)
    selections = select(spec, results1, baseline)
    started = time.perf_counter()
    created = log_configuration_runs(uri, experiment_id, spec, parent1, results1, selections, args.config_runs_limit, dataset_record(ds))
    print(f"[sweep] phase 1: {created} configuration runs created in MLflow in {time.perf_counter() - started:.1f}s", flush=True)
    finish_phase(uri, experiment_id, spec, 1, {"trials": len(trials1), "completed": len(results1),
                                                "selected": sum(s.config_id is not None for s in selections)})

    trials2 = phase2_trials(spec, selections)
    calibrate(spec, trials2, len(ds.train))
    print(f"[sweep] phase 2: {len(trials2)} trials (winners x {spec.phase2_seeds} fresh seeds)", flush=True)
    run_phase(spec, 2, trials2, args, uri, experiment_id, storage, key, DataShape.of(ds))
    results2 = phase_results(uri, experiment_id, spec, 2)
    text, rows = summarize(spec, selections, results2)
    elapsed = time.perf_counter() - t0
    n_trials = len(trials1) + len(trials2)
    text += f"\n{n_trials} configurations in {elapsed:.0f}s ({60 * n_trials / elapsed:.1f} configurations/minute)"
    print(text, flush=True)
    parent2 = tracking.get_or_create_parent(uri, experiment_id, spec.sweep_id, 2, asdict(spec))
    tracking.log_text(uri, parent2, json.dumps(rows, indent=2, default=str), "selected_configurations.json")
    tracking.log_text(uri, parent2, text, "summary.txt")
    log_dataset_input(uri, parent2, ds)
    versions = register_selected(uri, experiment_id, spec, selections)
    print(f"[sweep] model registry: {versions} versions of {sum(s.config_id is not None for s in selections)} selected models "
          f"(named <method>.eps=<eps>.gamma=<gamma>.{spec.experiment})", flush=True)
    finish_phase(uri, experiment_id, spec, 2, {"trials": len(trials2), "completed": len(results2), "seconds": elapsed,
                                                "trials_per_minute": 60 * n_trials / elapsed, "registered_versions": versions})
    return {"trials": n_trials, "seconds": elapsed, "rows": rows, "experiment_id": experiment_id, "tracking_uri": uri}


def train_phase1(spec: SweepSpec, args, n_train: int, uri: str, experiment_id: str, storage: str, key: bytes | None, shape: DataShape,
                 baseline) -> list[Trial]:
    """Phase 1 of the two-phase protocol: every configuration of a random search planned at once, or a TPE search asked in
    rounds (:func:`raco_bench.sweeps.plan.tpe_phase1`); calibrated, then trained until every one is recorded."""
    import ray

    planned = planned_phase1(spec)
    confirm(spec, planned, args, ray.cluster_resources().get("CPU", 1.0))
    asked = [0]

    def train(trials: list[Trial]) -> None:  # every trial of a random search; a TPE round's trials
        cal = calibrate(spec, trials, n_train)
        asked[0] += len(trials)
        print(f"[sweep] phase 1: {asked[0]}/{planned} trials planned; privacy calibrations: {cal['distinct']} distinct, "
              f"{cal['computed']} computed in {cal['seconds']:.1f}s", flush=True)
        run_phase(spec, 1, trials, args, uri, experiment_id, storage, key, shape, planned=planned)

    if spec.search == "tpe":
        return tpe_phase1(spec, n_train, lambda: phase_results(uri, experiment_id, spec, 1), train, baseline)
    trials = phase1_trials(spec, n_train)
    train(trials)
    return trials


PROVENANCE_TAGS = ("raco_bench.command", "raco_bench.hardware", "raco_bench.version")


def provenance(resources: dict) -> dict[str, str]:
    """How this sweep was started and where: the command line, the driver's hardware and the cluster's CPUs and GPUs,
    the suite's version and git commit. A results page (``raco-bench report --results``) states them."""
    import platform
    import subprocess

    import raco_bench

    command = " ".join(["python", *sys.argv]) if sys.argv and sys.argv[0].endswith(".py") else " ".join(sys.argv)
    gpus = ""
    try:
        import torch

        if torch.cuda.is_available():
            gpus = ", GPU " + ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
    except Exception:  # noqa: BLE001 - no torch CUDA on the driver
        pass
    hardware = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores on the driver{gpus}; "
                f"cluster: {resources.get('CPU', 0):g} CPUs, {resources.get('GPU', 0):g} GPUs")
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(raco_bench.__file__).parent, capture_output=True,
                                text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    version = f"raco-bench {raco_bench.__version__}" + (f" (git {commit})" if commit else "")
    return dict(zip(PROVENANCE_TAGS, (command, hardware, version)))


def record_provenance(uri: str, parent: str, resources: dict) -> None:
    if PROVENANCE_TAGS[0] in tracking.get_run(uri, parent).data.tags:
        return  # a resumed sweep keeps the command that started it
    tags = provenance(resources)
    tracking.set_tags(uri, parent, {k: v[:4900] for k, v in tags.items()})


def run_accounted(spec: SweepSpec, args, n_train: int, uri: str, experiment_id: str, storage: str, t0: float, key: bytes | None,
                  shape: DataShape | None = None) -> dict:
    """``--tuning accounted``: every repetition's private random search in one phase, then the releases
    (:mod:`raco_bench.sweeps.accounted`); there is no phase 2, the released runs are the result."""
    import ray

    from raco_bench.sweeps.accounted import accounted_trials, select_released
    from raco_bench.sweeps.plan import make_trial

    trials, refs = accounted_trials(spec, n_train, lambda m, e, g, cid, params, seed: make_trial(spec, 1, m, e, g, cid, params, seed))
    for (method, eps), ref in refs.items():
        if ref is not None:
            print(f"[sweep] accounted tuning, {method} at end-to-end epsilon {eps:g}: K ~ TNB(eta={spec.tuning_shape:g}, E[K]={spec.tuning_mean:g}); "
                  f"the reference run (defaults) takes {ref.knob or 'its fixed run'}{'=%g' % ref.value if ref.value is not None else ''}; "
                  f"the released model spends epsilon={ref.epsilon_end_to_end:.4f} "
                  f"(delta {spec.delta:g}), tuning included", flush=True)
    confirm(spec, len(trials), args, ray.cluster_resources().get("CPU", 1.0))
    run_phase(spec, 1, trials, args, uri, experiment_id, storage, key, shape)
    results = phase_results(uri, experiment_id, spec, 1)
    releases = select_released(spec, results)
    text, rows = summarize_released(spec, releases, results)
    elapsed = time.perf_counter() - t0
    text += f"\n{len(trials)} configurations in {elapsed:.0f}s"
    print(text, flush=True)
    parent = tracking.get_or_create_parent(uri, experiment_id, spec.sweep_id, 1, asdict(spec))
    released = [asdict(r) for r in releases]
    tracking.log_text(uri, parent, json.dumps(released, indent=2, default=str), RELEASED_ARTIFACT)
    tracking.log_text(uri, parent, text, "summary.txt")
    ends = [r.epsilon_end_to_end for r in releases if r.epsilon_end_to_end is not None]
    finish_phase(uri, experiment_id, spec, 1, {"trials": len(trials), "completed": len(results), "released": sum(r.trial_key is not None for r in releases),
                                                "seconds": elapsed, **({"epsilon_end_to_end_max": max(ends)} if ends else {})})
    return {"trials": len(trials), "seconds": elapsed, "rows": rows, "experiment_id": experiment_id, "tracking_uri": uri, "releases": released}


RELEASED_ARTIFACT = "released_models.json"  # accounted tuning: what each repetition released, on the phase-1 parent


def summarize_released(spec: SweepSpec, releases, results: list[dict]) -> tuple[str, list[dict]]:
    """Per (method, ε, γ): the released models of the R repetitions, their test metrics and the end-to-end ε."""
    by_key = {r["trial_key"]: r for r in results}
    groups: dict[tuple, list] = {}
    for rel in releases:
        groups.setdefault((rel.method, rel.epsilon, rel.gamma), []).append(rel)
    rows = []
    for (method, eps, gamma), rels in groups.items():
        chosen = [by_key[r.trial_key] for r in rels if r.trial_key is not None]
        acc = [c["test_accuracy"] for c in chosen]
        con = [c["test_max_constraint"] for c in chosen]
        rows.append({"method": method, "epsilon_end_to_end": rels[0].epsilon_end_to_end, "epsilon": eps, "gamma": gamma, "repeats": len(rels),
                     "released": len(chosen), "mean_K": mean([r.runs for r in rels]), "test_accuracy_mean": mean(acc), "test_accuracy_sd": sd(acc),
                     "test_constraint_mean": mean(con), "share_meeting_gamma": mean([1.0 if c <= gamma else 0.0 for c in con]) if con else math.nan})
    lines = [f"Released models of accounted tuning ({spec.experiment}, sweep {spec.sweep_id}, delta {spec.delta:g}; "
             f"K ~ TNB(eta={spec.tuning_shape:g}, E[K]={spec.tuning_mean:g}), {spec.tuning_repeats} repetitions):",
             f"{'method':9s} {'e2e eps':>8s} {'gamma':>6s} {'released':>9s} {'mean K':>7s} {'test acc (mean ± sd)':>22s} "
             f"{'test constraint':>15s} {'meets gamma':>11s}"]
    for r in rows:
        e2e = "-" if r["epsilon_end_to_end"] is None else f"{r['epsilon_end_to_end']:.3f}"
        lines.append(f"{r['method']:9s} {e2e:>8s} {r['gamma']:>6g} {r['released']:>4d}/{r['repeats']:<4d} {r['mean_K']:>7.1f} "
                     f"{r['test_accuracy_mean']:>12.4f} ± {r['test_accuracy_sd']:.4f} {r['test_constraint_mean']:>15.4f} {r['share_meeting_gamma']:>11.2f}")
    return "\n".join(lines), rows


EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED = 2, 1, 130


def main(base: SweepSpec, argv: list[str] | None = None) -> int:
    """Exit 0 when every phase is recorded in full; 130 when interrupted, 1 when a phase failed, 2 on bad input."""
    try:
        spec, args = parse_args(base, argv)
        run_sweep(spec, args)
    except PhaseIncomplete as exc:
        print(f"sweep: {exc}", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED if exc.status == "KILLED" else EXIT_FAILED
    except KeyboardInterrupt:
        print("sweep: interrupted; nothing after the interrupted step ran. Continue with the same command and --resume", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    except ValueError as exc:
        print(f"sweep: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except RuntimeError as exc:
        print(f"sweep: error: {exc}; continue with the same command and --resume once the cause is fixed", file=sys.stderr)
        return EXIT_FAILED
    return 0
