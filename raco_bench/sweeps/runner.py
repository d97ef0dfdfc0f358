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
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import quote

from raco_bench import preflight, tracking
from raco_bench.constraints.families import Task
from raco_bench.records.artifacts import RELEASED_ARTIFACT, SELECTIONS_ARTIFACT
from raco_bench.records.results import read_results
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
from raco_bench.sweeps.spec import SweepSpec
from raco_bench.sweeps.store_privacy import state_store_epsilon
from raco_bench.sweeps.trial import dataset_record, log_dataset_input
from raco_bench.sweeps.tune_storage import drop_pack_folders, experiment_name, experiment_prefix, trial_name
from raco_bench.training.health import OK, Evidence, Health, judge
from raco_bench.training.pack_memory import DataShape

ENV_FORWARD = ("RACO_BENCH_DATA", "RACO_BENCH_CACHE", "RACO_BENCH_OFFLINE", "XDG_CACHE_HOME", "RACO_BENCH_GPUS_PER_TRIAL")


def validate(spec: SweepSpec, tracking_uri: str | None, storage_path: str | None = None):
    """Everything that can be checked before anything is written."""
    from raco_bench.constraints.families import check_names
    from raco_bench.data import load_dataset
    from raco_bench.data.catalog import dataset_schema
    from raco_bench.methods import get_method

    fam = spec.family  # an unknown constraint is refused here
    check_names(fam, Task.of_schema(dataset_schema(spec.dataset, spec.schema or None)))  # a group or class the schema lacks: refused now
    for m in spec.methods:
        reason = get_method(m).supports(fam)
        if reason:
            raise ValueError(f"method {m} cannot run with {spec.constraint!r}: {reason}; drop it with --methods")
    uri = tracking.resolve_tracking_uri(tracking_uri)
    # before the dataset is read and Ray starts: a store that cannot be reached or written fails in seconds
    preflight.check_store(uri, tracking.tracking_uri_source(tracking_uri)[1], spec.experiment)
    storage = tune_storage(storage_path)
    if "://" not in storage.value:
        preflight.check_folder(storage, "Tune's storage", "pass --storage-path a writable folder (or set $RACO_BENCH_STORAGE)")
    ds = load_dataset(spec.dataset, preprocessing=spec.preprocessing, schema=spec.schema or None, data=spec.data or None,
                      validation_split=spec.repeat)
    return ds, uri


def tune_storage(flag: str | None) -> preflight.Setting:
    """Where Tune keeps its state: ``--storage-path``, else ``$RACO_BENCH_STORAGE``, else ./ray_results."""
    return preflight.setting(flag, "--storage-path", "ray_results", env="RACO_BENCH_STORAGE", default_note="./ray_results in the working directory")


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
              shape: DataShape | None = None, planned: int | None = None) -> int:
    """Train a phase's trials as packs (one Tune trial per pack) until every one is recorded in MLflow, and return
    how many this call trained (what a rate counts); trials already recorded are never rerun. A pack that fails is
    retried by Tune from its last checkpoint (``--max-failures``); packs that still fail because a worker ran out of
    memory are trained again in packs of half the size. An interrupted or failed phase marks its parent run KILLED
    or FAILED and raises :class:`PhaseIncomplete`."""
    if not trials:
        return 0
    parent = tracking.get_or_create_parent(uri, experiment_id, spec.sweep_id, phase, asdict(spec))
    tracking.set_status(uri, parent, "RUNNING")
    tracking.set_tags(uri, parent, {PLANNED: str(planned or len(trials))})  # what `raco-bench sweeps` counts against (a TPE phase: all rounds)
    try:
        return _train_phase(spec, phase, trials, args, uri, experiment_id, parent, storage, key, shape)
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
                 key: bytes | None, shape: DataShape | None = None) -> int:
    import ray

    resources, _ = _resources(args)
    stale = tracking.drop_other_key_runs(uri, experiment_id, spec.sweep_id, phase, tracking.key_id(key))  # a resume under a new key
    if stale:
        folders = drop_pack_folders(storage, experiment_prefix(spec.experiment, spec.sweep_id, phase), stale)
        print(f"[sweep] phase {phase}: {len(stale)} packs an attempt under another key left incomplete were deleted with all they "
              f"recorded, in MLflow and in Tune's storage ({len(folders)} trial folders); they train anew under this key", flush=True)
    todo = not_recorded(trials, uri, experiment_id, spec, phase)
    trained = len(todo)
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
    return trained


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
    name = experiment_name(spec.experiment, spec.sweep_id, phase, os.getpid(), attempt)
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
    return trial_name(trial.config["pack"])


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
    """Every configuration a complete pack of this phase recorded (:func:`~raco_bench.records.results.read_results`), as
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
                    **{k: value(k) for k in HEALTH_EVIDENCE},
                    "labels": {k: str(row[k]) for k in LABEL_TAGS if row[k] == row[k] and row[k] not in ("", None)}})
    return out


HEALTH_EVIDENCE = ("steps", "passes", "test_constant_accuracy", "test_rows", "test_top_class_share")  # what a verdict reads besides accuracy


def selection_health(runs: list[dict], epsilon, max_steps: int) -> Health:
    """The verdict on a selected configuration (raco_bench.training.health): its phase-2 runs' means."""
    def avg(key: str) -> float:
        values = [r[key] for r in runs if r.get(key) is not None and math.isfinite(r[key])]
        return mean(values)

    return judge(Evidence(steps=avg("steps"), passes=avg("passes"), accuracy=avg("test_accuracy"), constant_accuracy=avg("test_constant_accuracy"),
                          rows=avg("test_rows"), top_class_share=avg("test_top_class_share"),
                          epsilon=math.inf if epsilon is None else float(epsilon), epsilon_spent=avg("epsilon_spent"), max_steps=max_steps))


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan


def sd(xs: list[float]) -> float:
    """The sample standard deviation (nan below two values)."""
    return (sum((x - mean(xs)) ** 2 for x in xs) / (len(xs) - 1)) ** 0.5 if len(xs) > 1 else math.nan


@dataclass(frozen=True)
class Column:
    """A column of the summary table: its header, its cell for a selection's row (a dict of :func:`summarize`'s rows),
    its alignment. A column is as wide as its widest cell. One more column is one more entry of :data:`SUMMARY_COLUMNS`."""

    header: str
    cell: Callable[[dict], str]
    left: bool = False


SUMMARY_COLUMNS = (
    Column("method", lambda r: r["method"], left=True),
    Column("eps", lambda r: str(r["epsilon"])),
    Column("gamma", lambda r: f"{r['gamma']:g}"),
    Column("config", lambda r: str(r["config_id"])),
    Column("feasible", lambda r: r["feasible_configs"]),
    Column("test acc (mean ± sd)", lambda r: f"{r['test_accuracy_mean']:.4f} ± {r['test_accuracy_sd']:.4f}"),
    Column("test constraint", lambda r: f"{r['test_constraint_mean']:.4f}"),
    Column("meets gamma", lambda r: f"{r['share_meeting_gamma']:.2f}"),
    Column("health", lambda r: r["health"], left=True),  # raco_bench.training.health: ok, or the rules it breaks
)
UNSELECTED = 5  # columns an unselected row fills (method to feasible) before its reason


def summary_lines(rows: list[dict], columns: tuple[Column, ...] = SUMMARY_COLUMNS) -> list[str]:
    """The header and a line per row, each column as wide as its widest cell; a row without a configuration says why
    after its first :data:`UNSELECTED` cells."""
    cells = [[c.cell({**r, "config_id": "-"}) if r["config_id"] is None and i < UNSELECTED else ("" if r["config_id"] is None else c.cell(r))
              for i, c in enumerate(columns)] for r in rows]
    widths = [max([len(c.header)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    line = lambda texts: " ".join(f"{t:{'<' if c.left else '>'}{w}s}" for c, w, t in zip(columns, widths, texts)).rstrip()  # noqa: E731
    lines = [line([c.header for c in columns])]
    for r, row in zip(rows, cells):
        if r["config_id"] is None:
            lines.append(line(row[:UNSELECTED]) + "   no configuration met gamma on validation"
                         + (f" ({r['failed_configs']} excluded: a phase-1 seed failed)" if r["failed_configs"] else ""))
        else:
            lines.append(line(row))
    return lines


def summarize(spec: SweepSpec, selections: list[Selection], phase2: list[dict]) -> tuple[str, list[dict]]:
    """The selected configurations' phase-2 results, a row each with its health verdict, as a table (with a line per
    flagged verdict and per γ whose winner is less accurate than a tighter γ's) and as rows."""
    rows = []
    for sel in selections:
        runs = [r for r in phase2 if r["method"] == sel.method and r["epsilon"] == sel.epsilon and r["config_id"] == sel.config_id
                and (r["gamma"] is None or r["gamma"] == sel.gamma)]
        acc = [r["test_accuracy"] for r in runs if math.isfinite(r["test_accuracy"])]
        con = [r["test_max_constraint"] for r in runs if math.isfinite(r["test_max_constraint"])]
        health = selection_health(runs, sel.epsilon, spec.max_steps) if runs else None
        rows.append({"method": sel.method, "epsilon": sel.epsilon, "gamma": sel.gamma, "config_id": sel.config_id,
                     "feasible_configs": f"{sel.n_feasible}/{sel.n_configs}", "failed_configs": sel.n_failed, "phase2_runs": len(runs),
                     "test_accuracy_mean": mean(acc), "test_accuracy_sd": sd(acc), "test_constraint_mean": mean(con),
                     "share_meeting_gamma": mean([1.0 if c <= sel.gamma else 0.0 for c in con]) if con else math.nan, "params": sel.params,
                     "val_accuracy": sel.val_accuracy, "health": health.label if health else "", "health_note": health.text if health else ""})
    lines = [f"Selected configurations ({spec.experiment}, sweep {spec.sweep_id}, delta {spec.delta:g}):", *summary_lines(rows)]
    flagged = [r for r in rows if r["health"] not in ("", OK)]
    if flagged:
        lines.append("Health (docs/results.md, \"Health of a result\"): selection may pick a model the rules flag, and it did here "
                     "(a constant or one-class predictor, or too few steps, is not worth reading; a capped one could have trained longer):")
        lines += [f"  {r['method']} eps {r['epsilon']} gamma {r['gamma']:g}: {r['health_note']}" for r in flagged]
    lines += looser_gamma_notes(rows)
    return "\n".join(lines), rows


def looser_gamma_notes(rows: list[dict]) -> list[str]:
    """A line for each selection less accurate on test than the selection of the same method and ε at a tighter γ:
    nothing in the constraint explains it (a model meeting the tighter γ meets the looser one too); selection on
    validation accuracy does (docs/sweeps.md, "Selection")."""
    notes = []
    chosen = sorted((r for r in rows if r["config_id"] is not None and math.isfinite(r["test_accuracy_mean"])),
                    key=lambda r: (r["method"], str(r["epsilon"]), r["gamma"]))
    for tight, loose in zip(chosen, chosen[1:]):
        if (tight["method"], tight["epsilon"]) != (loose["method"], loose["epsilon"]) or loose["test_accuracy_mean"] >= tight["test_accuracy_mean"]:
            continue
        spread = max(x for x in (tight["test_accuracy_sd"], loose["test_accuracy_sd"], 0.0) if math.isfinite(x))
        notes.append(f"note: {loose['method']} eps {loose['epsilon']}: test accuracy at gamma {loose['gamma']:g} ({loose['test_accuracy_mean']:.4f}) "
                     f"is below the tighter gamma {tight['gamma']:g}'s ({tight['test_accuracy_mean']:.4f}). Each gamma's winner is the best "
                     f"on validation (config {loose['config_id']}: {_acc(loose['val_accuracy'])}; config {tight['config_id']}: "
                     f"{_acc(tight['val_accuracy'])}), so a looser gamma can win on validation and lose on test; the gap "
                     f"({tight['test_accuracy_mean'] - loose['test_accuracy_mean']:.4f}) is "
                     f"{'within' if tight['test_accuracy_mean'] - loose['test_accuracy_mean'] <= 2 * spread else 'beyond'} two phase-2 sd "
                     f"({spread:.4f})")
    return notes


def _acc(value) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"val {value:.4f}"


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

    ds, uri = validate(spec, args.tracking_uri, args.storage_path)
    check_resumable(spec, uri, args.resume)
    done = completed_summary(spec, uri)
    if done is not None:  # before Ray starts: a rerun of a finished sweep trains nothing and says so
        print(f"[sweep] nothing to train: sweep {spec.sweep_id} is complete (use a new --tracking-uri or --experiment for a fresh sweep)\n"
              f"{done}", flush=True)
        print("\n".join(ui_links(uri, tracking.experiment_id(uri, spec.experiment), spec)), flush=True)
        return {"trials": 0, "seconds": 0.0, "rows": [], "tracking_uri": uri}
    if args.resume:
        print(f"[sweep] resuming sweep {spec.sweep_id}: what MLflow holds is kept, the rest is trained", flush=True)
    key = sweep_key(spec, args)
    raw = tune_storage(args.storage_path).value
    storage = raw if "://" in raw else str(Path(raw).resolve())  # local path, NFS mount or s3://…
    t0 = time.perf_counter()
    env = {k: os.environ[k] for k in ENV_FORWARD if k in os.environ}
    if not args.verbose:
        quiet_libraries()
    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS"), runtime_env={"env_vars": env} if env else None, log_to_driver=False,
                 logging_level=logging.INFO if args.verbose else logging.WARNING)
    experiment_id = tracking.get_or_create_experiment(uri, spec.experiment, sweep_description(spec))
    print(f"[sweep] {spec.experiment} (sweep {spec.sweep_id}): tracking {uri}, Tune storage {storage}, cluster {ray.cluster_resources()}", flush=True)
    parent1 = tracking.get_or_create_parent(uri, experiment_id, spec.sweep_id, 1, asdict(spec))
    record_provenance(uri, parent1, ray.cluster_resources())
    log_dataset_input(uri, parent1, ds)

    if spec.tuning == "accounted":
        return run_accounted(spec, args, len(ds.train), uri, experiment_id, storage, t0, key, DataShape.of(ds))
    baseline = failure_baseline(spec.family, Task.of(ds), ds.val.y)
    trials1, trained = train_phase1(spec, args, len(ds.train), uri, experiment_id, storage, key, DataShape.of(ds), baseline)
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
    trained += run_phase(spec, 2, trials2, args, uri, experiment_id, storage, key, DataShape.of(ds))
    results2 = phase_results(uri, experiment_id, spec, 2)
    text, rows = summarize(spec, selections, results2)
    elapsed = time.perf_counter() - t0
    n_trials = len(trials1) + len(trials2)
    text += "\n" + rate_line(trained, n_trials, elapsed)
    print(text, flush=True)
    parent2 = tracking.get_or_create_parent(uri, experiment_id, spec.sweep_id, 2, asdict(spec))
    tracking.log_text(uri, parent2, json.dumps(rows, indent=2, default=str), SELECTIONS_ARTIFACT)
    tracking.log_text(uri, parent2, text, "summary.txt")
    log_dataset_input(uri, parent2, ds)
    versions = register_selected(uri, experiment_id, spec, selections)
    print(f"[sweep] model registry: {versions} versions of {sum(s.config_id is not None for s in selections)} selected models "
          f"(named <method>.eps=<eps>.gamma=<gamma>.{spec.experiment})", flush=True)
    store, store_values = state_store_epsilon(uri, experiment_id, spec.sweep_id, parent2)  # every run of both phases, once all is logged
    print(store, flush=True)
    tracking.log_text(uri, parent2, f"{text}\n{store}", "summary.txt")
    print("\n".join(ui_links(uri, experiment_id, spec)), flush=True)
    finish_phase(uri, experiment_id, spec, 2, {"trials": len(trials2), "completed": len(results2), "seconds": elapsed, "trained": trained,
                                                "trials_per_minute": 60 * trained / elapsed, "registered_versions": versions,
                                                **store_values})
    return {"trials": n_trials, "seconds": elapsed, "rows": rows, "experiment_id": experiment_id, "tracking_uri": uri}


def train_phase1(spec: SweepSpec, args, n_train: int, uri: str, experiment_id: str, storage: str, key: bytes | None, shape: DataShape,
                 baseline) -> tuple[list[Trial], int]:
    """Phase 1 of the two-phase protocol: every configuration of a random search planned at once, or a TPE search asked in
    rounds (:func:`raco_bench.sweeps.plan.tpe_phase1`); calibrated, then trained until every one is recorded. Returns
    the trials and how many of them this call trained."""
    import ray

    planned = planned_phase1(spec)
    confirm(spec, planned, args, ray.cluster_resources().get("CPU", 1.0))
    asked, trained = [0], [0]

    def train(trials: list[Trial]) -> None:  # every trial of a random search; a TPE round's trials
        cal = calibrate(spec, trials, n_train)
        asked[0] += len(trials)
        print(f"[sweep] phase 1: {asked[0]}/{planned} trials planned; privacy calibrations: {cal['distinct']} distinct, "
              f"{cal['computed']} computed in {cal['seconds']:.1f}s", flush=True)
        trained[0] += run_phase(spec, 1, trials, args, uri, experiment_id, storage, key, shape, planned=planned)

    if spec.search == "tpe":
        return tpe_phase1(spec, n_train, lambda: phase_results(uri, experiment_id, spec, 1), train, baseline), trained[0]
    trials = phase1_trials(spec, n_train)
    train(trials)
    return trials, trained[0]


def sweep_description(spec: SweepSpec) -> str:
    """The experiment's description in the MLflow UI: what it holds and where to look first."""
    return (f"Sweeps of {spec.dataset} under {spec.constraint} (raco-bench, docs/sweeps.md). The runs to compare are the top-level runs "
            "named like 'raco-dp eps=1 gamma=0.05 config=3 seed=1000' (method, ε, γ, configuration, seed): each selected configuration "
            "on fresh phase-2 seeds, with its test metrics, its health verdict (tag health) and its model; search tags.gamma = '0.05' "
            "to line every method up at one γ. Phase 1 (one run per configuration, the packs) is under the parent run 'phase 1: "
            f"search'; the selected models are in the Model Registry, named like raco-dp.eps=1.gamma=0.05.{spec.experiment}. A sweep "
            "prints ready links to these pages when it ends (Training runs, in the Model training mode).")


def ui_links(uri: str, experiment_id: str, spec: SweepSpec) -> list[str]:
    """Ready links into the MLflow UI (docs/sweeps.md, "MLflow"): per γ, the phase-2 runs of every method (the runs table,
    filtered) and their compare view (every metric and param side by side); per selected model, its registry entry."""
    from raco_bench.sweeps.registry import registered_name

    phase2 = (f"tags.`{tracking.SWEEP_ID}` = '{spec.sweep_id}' and tags.`{tracking.PHASE}` = '2' and tags.`{tracking.KIND}` = 'trial'")
    runs = tracking.search_all(uri, [experiment_id], phase2)
    how = "open" if uri.startswith(("http://", "https://")) else f"start `mlflow ui --backend-store-uri {uri}`, then open"
    lines = [f"[sweep] MLflow UI ({how}):"]
    for gamma in sorted({r.data.tags.get("gamma", "") for r in runs} - {"", "none"}, key=float):
        at = [r for r in runs if r.data.tags.get("gamma") == gamma]
        query = f"{phase2} and tags.gamma = '{gamma}'"
        lines.append(f"  phase 2 at gamma {gamma} ({len(at)} runs): {tracking.ui_url(uri, f'experiments/{experiment_id}/runs', searchFilter=query)}")
        compare = tracking.ui_url(uri, "compare-runs", runs=json.dumps([r.info.run_id for r in at]), experiments=json.dumps([experiment_id]))
        lines.append(f"    compared: {compare}")
    epsilon = lambda tags: None if tags.get("epsilon") in (None, "None") else float(tags["epsilon"])  # noqa: E731
    models = sorted({registered_name(spec.experiment, r.data.tags["method"], epsilon(r.data.tags), float(r.data.tags["gamma"]))
                     for r in runs if r.data.tags.get("gamma", "none") != "none"})
    lines += [f"  registry: {name}: {tracking.ui_url(uri, 'models/' + quote(name, safe=''))}" for name in models]
    return lines


def rate_line(trained: int, planned: int, seconds: float) -> str:
    """The sweep's last count: what this command trained, its rate, and what it found recorded (a resume), uncounted."""
    rate = f" ({60 * trained / seconds:.1f} configurations/minute)" if trained and seconds > 0 else ""
    before = f"; {planned - trained} were recorded before this command and are not counted" if planned > trained else ""
    return f"{trained} configurations trained in {seconds:.0f}s{rate}{before}"


def completed_summary(spec: SweepSpec, uri: str) -> str | None:
    """The summary a finished sweep logged (its last phase parent FINISHED), else None: reading the store only."""
    exp = tracking.experiment_id(uri, spec.experiment)
    if exp is None:
        return None
    last = 1 if spec.tuning == "accounted" else 2
    found = tracking.find_run(uri, exp, {tracking.SWEEP_ID: spec.sweep_id, tracking.PHASE: str(last), tracking.KIND: "phase"})
    if found is None or found.info.status != "FINISHED":
        return None
    local = tracking.read_artifact(uri, found.info.run_id, "summary.txt")
    return local.read_text().strip() if local is not None else "(no summary logged)"


PROVENANCE_TAGS = ("raco_bench.command", "raco_bench.hardware", "raco_bench.version")


def command_line(argv: list[str], root: Path) -> str:
    """The command as a reader of the results can run it: ``python sweeps/adult.py ...`` with the script relative to the
    repository ``root`` when it lies inside it (not the absolute path of the machine it ran on)."""
    if not argv or not argv[0].endswith(".py"):
        return " ".join(argv)
    script = Path(argv[0]).resolve()
    shown = str(script.relative_to(root)) if script.is_relative_to(root) else argv[0]
    return " ".join(["python", shown, *argv[1:]])


def provenance(resources: dict) -> dict[str, str]:
    """How this sweep was started and where: the command line, the driver's hardware and the cluster's CPUs and GPUs,
    the suite's version and git commit. A results page (``raco-bench report --results``) states them."""
    import platform
    import subprocess

    import raco_bench

    command = command_line(sys.argv, Path(raco_bench.__file__).resolve().parents[1])
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

    from raco_bench.privacy.counter_rng import Keystream
    from raco_bench.sweeps.accounted import accounted_trials, select_released
    from raco_bench.sweeps.plan import make_trial

    # K and the configurations are drawn from the key: the runs of an earlier attempt under another key are another search
    dropped = tracking.drop_other_keys(uri, experiment_id, spec.sweep_id, 1, tracking.key_id(key))
    if dropped:
        print(f"[sweep] accounted tuning draws its searches from the key: {dropped} runs of an earlier attempt under another key deleted, "
              "the searches restart under this key (keep --key-file to resume a search)", flush=True)
    trials, refs = accounted_trials(spec, n_train, lambda m, e, g, cid, params, seed: make_trial(spec, 1, m, e, g, cid, params, seed),
                                    Keystream(key))
    for (method, eps), ref in refs.items():
        if ref is not None:
            print(f"[sweep] accounted tuning, {method} at end-to-end epsilon {eps:g}: {spec.rounds.describe()}; "
                  f"the reference run (defaults) takes {ref.knob or 'its fixed run'}{'=%g' % ref.value if ref.value is not None else ''}; "
                  f"the released model spends epsilon={ref.epsilon_end_to_end:.4f} by privacy profiles "
                  f"(delta {spec.delta:g}), tuning included; the RDP theorem would state {ref.epsilon_rdp:.4f}", flush=True)
    confirm(spec, len(trials), args, ray.cluster_resources().get("CPU", 1.0))
    trained = run_phase(spec, 1, trials, args, uri, experiment_id, storage, key, shape)
    planned = {t["trial_key"] for t in trials}
    results = [r for r in phase_results(uri, experiment_id, spec, 1) if r["trial_key"] in planned]  # this key's searches only
    releases = select_released(spec, results, refs)
    text, rows = summarize_released(spec, releases, results)
    elapsed = time.perf_counter() - t0
    text += "\n" + rate_line(trained, len(trials), elapsed)
    print(text, flush=True)
    parent = tracking.get_or_create_parent(uri, experiment_id, spec.sweep_id, 1, asdict(spec))
    released = [asdict(r) for r in releases]
    tracking.log_text(uri, parent, json.dumps(released, indent=2, default=str), RELEASED_ARTIFACT)
    tracking.log_text(uri, parent, text, "summary.txt")
    store, store_values = state_store_epsilon(uri, experiment_id, spec.sweep_id, parent)  # every candidate the store holds
    store = f"{STORE_LINES}\n{store}"
    print(store, flush=True)
    tracking.log_text(uri, parent, f"{text}\n{store}", "summary.txt")
    ends = [r.epsilon_end_to_end for r in releases if r.epsilon_end_to_end is not None]
    finish_phase(uri, experiment_id, spec, 1, {"trials": len(trials), "completed": len(results), "released": sum(r.trial_key is not None for r in releases),
                                                "seconds": elapsed, **({"epsilon_end_to_end_max": max(ends)} if ends else {}),
                                                **store_values})
    return {"trials": len(trials), "seconds": elapsed, "rows": rows, "experiment_id": experiment_id, "tracking_uri": uri, "releases": released}


STORE_LINES = ("The lines below describe the whole store, every candidate of every search and so each search's K: they are outside the "
               "released models' claim, and not to be published with a released model.")


def summarize_released(spec: SweepSpec, releases, results: list[dict]) -> tuple[str, list[dict]]:
    """Per (method, ε, γ): the released models of the R repetitions, their test metrics and the end-to-end ε; never K, which the
    claim needs secret. A private method trained without γ releases, per repetition, a model for each γ from the same runs:
    a line says that together they are one joint release that no printed ε covers."""
    by_key = {r["trial_key"]: r for r in results}
    groups: dict[tuple, list] = {}
    for rel in releases:
        groups.setdefault((rel.method, rel.epsilon, rel.gamma), []).append(rel)
    rows = []
    for (method, eps, gamma), rels in groups.items():
        chosen = [by_key[r.trial_key] for r in rels if r.trial_key is not None]
        acc = [c["test_accuracy"] for c in chosen]
        con = [c["test_max_constraint"] for c in chosen]
        rows.append({"method": method, "epsilon_end_to_end": rels[0].epsilon_end_to_end, "epsilon_end_to_end_rdp": rels[0].epsilon_end_to_end_rdp,
                     "epsilon": eps, "gamma": gamma, "repeats": len(rels),
                     "released": len(chosen), "same_search_as": list(rels[0].same_search_as), "test_accuracy_mean": mean(acc), "test_accuracy_sd": sd(acc),
                     "test_constraint_mean": mean(con), "share_meeting_gamma": mean([1.0 if c <= gamma else 0.0 for c in con]) if con else math.nan})
    lines = [f"Released models of accounted tuning ({spec.experiment}, sweep {spec.sweep_id}, delta {spec.delta:g}; "
             f"{spec.rounds.describe()}, {spec.tuning_repeats} repetitions; e2e eps by privacy profiles, RDP figure beside it):",
             f"{'method':9s} {'e2e eps':>8s} {'RDP':>6s} {'gamma':>6s} {'released':>9s} {'test acc (mean ± sd)':>22s} "
             f"{'test constraint':>15s} {'meets gamma':>11s}"]
    for r in rows:
        e2e = "-" if r["epsilon_end_to_end"] is None else f"{r['epsilon_end_to_end']:.3f}"
        rdp = "-" if r["epsilon_end_to_end_rdp"] is None else f"{r['epsilon_end_to_end_rdp']:.3f}"
        lines.append(f"{r['method']:9s} {e2e:>8s} {rdp:>6s} {r['gamma']:>6g} {r['released']:>4d}/{r['repeats']:<4d} "
                     f"{r['test_accuracy_mean']:>12.4f} ± {r['test_accuracy_sd']:.4f} {r['test_constraint_mean']:>15.4f} {r['share_meeting_gamma']:>11.2f}")
    from raco_bench.sweeps.accounted import JOINT_NOTE

    for method, eps in dict.fromkeys((r["method"], r["epsilon"]) for r in rows if r["same_search_as"]):
        gammas = ", ".join(f"{r['gamma']:g}" for r in rows if (r["method"], r["epsilon"]) == (method, eps))
        lines.append(f"{method} at epsilon {eps:g} (gamma {gammas}): {JOINT_NOTE}")
    return "\n".join(lines), rows


EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED = 2, 1, 130


def main(base: SweepSpec, argv: list[str] | None = None, command: bool = False) -> int:
    """Exit 0 when every phase is recorded in full; 130 when interrupted, 1 when a phase failed, 2 on bad input. ``command``:
    ``raco-bench sweep``, which also takes the dataset and the constraint (:func:`~raco_bench.sweeps.arguments.parse_args`)."""
    try:
        spec, args = parse_args(base, argv, command)
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
