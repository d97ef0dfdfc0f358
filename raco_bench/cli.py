"""The ``raco-bench`` command line: ``datasets``, ``schema``, ``train``, ``sweep``, ``audit``, ``report`` and ``bench``.

Nothing heavy is imported at start-up: ``raco-bench --help`` lists the commands at once, and each
command's own options (``raco-bench train --help`` lists every method's ``--set`` keys) are built
only when that command is named.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from raco_bench.methods import METHOD_NAMES
from raco_bench.privacy.counter_rng import RANDOMNESS_MODES
from raco_bench.training.config import CHECKPOINT_RULES, RunConfig

COMMANDS = {
    "datasets": "where each dataset is looked for, whether it verifies, its size after preprocessing",
    "schema": "draft a schema file for a table of your own (schema draft TABLE): a proposal to edit, its values read from the rows",
    "train": "train one configuration and print its summary",
    "sweep": "a two-phase sweep (the sweep scripts' protocol) on a catalog dataset or a table of your own (--schema, --data)",
    "audit": "empirical privacy audits (a lower bound on epsilon beside the accounted one)",
    "report": "figures and tables of a sweep from MLflow",
    "sweeps": "the sweeps in a tracking store: id, experiment, state, configurations recorded / planned per phase, command",
    "results": "rebuild the results pages in DIR from their study data (no MLflow), then RaCO-DP against every other method, study by study "
               "and per epsilon (comparison.md/.csv)",
    "bench": "benchmarks: steptime, walltime and throughput (logged to MLflow for reports), memory (packs against the memory model), "
             "report-scale, preprocessing (accuracy cost of public domains), audit (white-box tightness), tuning (T left by accounted tuning, "
             "privacy profiles against RDP), one-run (the one-run audit's bounds side by side), data (loading a large table under its schema), "
             "preflight (seconds a bad environment takes to fail), store (the store's epsilon of a paper-size sweep), calibration (the noise "
             "multiplier's search against bisection)",
}


def _cmd_datasets(args: argparse.Namespace) -> int:
    from raco_bench.data import DATASETS, DataError, load_dataset
    from raco_bench.data import files as data_files
    from raco_bench.data.catalog import raw_files

    print(f"data roots searched: {', '.join(str(r) for r in data_files.search_roots())}")
    failures = 0
    for name in DATASETS:
        statuses = [data_files.status(raw) for raw in raw_files(name)]
        state = "generated" if not statuses else worst_state(s.state for s in statuses)
        where = "; ".join(str(s.path) if s.path else f"{s.raw.relpath} (missing)" for s in statuses) or "(no file)"
        shape = ""
        if all(s.state in ("verified", "unverified") for s in statuses):
            try:
                ds = load_dataset(name, download=False)
                shape = f"rows {ds.n_rows} (train {len(ds.train)}/val {len(ds.val)}/test {len(ds.test)}), features {ds.n_features}, groups {ds.n_groups}"
            except DataError as exc:  # pragma: no cover - status said it was readable
                shape, state = str(exc), "error"
        else:
            failures += 1
        print(f"{name:15s} {state:10s} {shape}\n{'':15s} {where}")
        for s in statuses:
            if s.state != "verified" or len(statuses) > 1:
                print(f"{'':15s} {s.raw.relpath}: {s.state}" + (f" ({s.detail})" if s.detail else ""))
    return 1 if failures else 0


STATE_ORDER = ("checksum mismatch", "missing", "unverified", "verified")  # a dataset is as good as its worst file


def worst_state(states) -> str:
    """One status per dataset: the worst of its files' (each file's own status is printed below it)."""
    return min(states, key=STATE_ORDER.index)


def _parse_sets(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"--set expects key=value, got {item!r}")
        key, value = item.split("=", 1)
        out[key.strip()] = value
    return out


def _fmt(x) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float):
        return "inf" if math.isinf(x) else f"{x:.4f}"
    return str(x)


def _summary(result) -> str:
    from raco_bench.constraints.gaps import gap_keys

    p, last, sel, rep = result.privacy, result.last, result.selected, result.reported
    lines = [
        f"dataset {result.dataset['name']} (n_train {result.dataset['n_train']}, {result.dataset['n_constraints']} constraints), "
        f"method {result.config['method']}, T = {result.steps} steps, {result.timing['ms_per_step']:.3f} ms/step",
        "hyperparameters: " + ", ".join(f"{k}={v}" for k, v in result.hyperparameters.items()),
    ]
    if p["private"]:
        lines.append(f"privacy: epsilon spent {_fmt(p['epsilon_spent'])} at delta {p['delta']:g} "
                     f"(target {p['target_epsilon']}; {p['notion']}; {p['accounting']})")
        if p.get("epsilon_separate_composition_reference") is not None:
            lines.append(f"         [reference only] separate-composition epsilon {_fmt(p['epsilon_separate_composition_reference'])} "
                         "(what the reference code would claim)")
    else:
        lines.append("privacy: none (non-private method, epsilon = inf)")
    lines.append(f"preprocessing: {p['preprocessing']}; reported checkpoint: {rep['rule']} ({rep['rule_note']})")
    for note in p.get("outside_budget", []):
        lines.append(f"OUTSIDE THE BUDGET: {note}")
    for note in result.dataset.get("notes", []):
        lines.append(f"data: {note}")
    if p["private"] and p.get("end_to_end"):
        lines.append("the printed epsilon covers the whole pipeline except hyperparameter tuning and the train/validation/test split")
    blocks = [("reported", rep), ("last iterate", last)]
    if "train" in last:  # the paper rule's checkpoint needs the exact training-set metrics (released only where asked, labelled)
        blocks.append(("paper-rule checkpoint [not privacy-accounted]", sel))
    for label, block in blocks:
        if not block:
            lines.append(f"{label}: none met the constraint on the training set")
            continue
        t = block["test"]
        viol = f", max violation {t['max_violation']:.4f}, constraints satisfied {t['satisfied']}"
        step = f" (step {block['step']})" if "step" in block else ""
        gaps = "".join(f", {k} {t[k]:.4f}" for k in gap_keys() if k in t)
        lines.append(f"{label}{step}: test accuracy {t['accuracy']:.4f}, constraint value {t['max_constraint']:.4f}{gaps}{viol}")
    health = result.health
    if health["flags"]:
        lines.append(f"HEALTH: {health['verdict']}: the reported model is not worth reading: {health['text']} (docs/results.md, "
                     "\"Health of a result\")")
    else:
        lines.append(f"health: {health['text']}")
    return "\n".join(lines)


def _cmd_train(args: argparse.Namespace) -> int:
    from raco_bench.constraints.families import Task, check_names, declared, family
    from raco_bench.data import DATASETS, load_dataset
    from raco_bench.data.catalog import dataset_schema, public_train_rows
    from raco_bench.methods import get_method
    from raco_bench.training.loop import execute, prepare_run

    dataset = _train_dataset(args)
    if args.schema is None and dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; choose one of: {', '.join(DATASETS)}, or give your own with --data TABLE "
                         "--schema SCHEMA (docs/datasets.md, \"Your own data\")")
    schema = dataset_schema(dataset, args.schema)
    constraint, spec = declared(args.constraint or (None if args.constraint_spec else RunConfig().constraint), args.constraint_spec,
                                schema.constraints)
    cfg = RunConfig(dataset=dataset, method=args.method, constraint=constraint, constraint_spec=spec, gamma=args.gamma,
                    epsilon=args.epsilon, delta=args.delta, seed=args.seed, steps=args.steps, device=args.device,
                    preprocessing=args.preprocessing, checkpoint=args.checkpoint, randomness=args.randomness,
                    train_metrics=args.train_metrics, schema=_absolute(args.schema), data=_absolute(args.data))
    sets = _parse_sets(args.set)
    cfg = cfg.with_overrides(sets)
    method = get_method(cfg.method)
    fam = family(cfg.constraint, cfg.constraint_spec)
    check_names(fam, Task.of_schema(schema))  # a group, class or cell the schema does not declare: refused before anything is read
    if (why := method.supports(fam)) is not None:
        raise ValueError(f"{cfg.method} cannot train under {cfg.constraint!r}: {why}; choose another --method or --constraint")
    cfg.validate()
    cfg, batch_note = _default_batch(cfg, method, sets)
    from raco_bench import preflight, tracking
    from raco_bench.privacy.counter_rng import Keystream

    if args.json:
        out = Path(args.json).absolute()
        if not out.parent.is_dir():
            raise ValueError(f"the folder of --json {args.json} does not exist; create {out.parent} first")
        preflight.check_folder(preflight.Setting(str(out.parent), "--json"), "the folder of the JSON report", "pass --json a writable path")
    uri = None
    if not args.no_mlflow:  # before anything is trained: a store that cannot be written fails now, not after the run
        uri = tracking.resolve_tracking_uri(args.tracking_uri)
        preflight.check_store(uri, tracking.tracking_uri_source(args.tracking_uri)[1], args.experiment)
    source = Keystream.for_mode(cfg.randomness, args.key_file)
    if (published := public_train_rows(cfg.dataset, cfg.schema)) is not None:
        method.check_train_size(method.hyperparameters(cfg.params), published)  # the schema's public size, before the (slow) load
    dataset = load_dataset(cfg.dataset, seed=cfg.split_seed, preprocessing=cfg.preprocessing, schema=cfg.schema, data=cfg.data)
    if not args.allow_unhealthy:
        _refuse_below_noise_floor(dataset, cfg)
    run = prepare_run(cfg, dataset, source=source)  # validates and plans privacy before training
    if not args.allow_unhealthy and args.steps is None:
        _refuse_few_steps(run, cfg)
    if source.secret is None:
        randomness = "reproducible from the seed (labelled OUTSIDE THE BUDGET)"
    elif args.key_file:
        randomness = f"secret, key kept in {args.key_file} (fingerprint {tracking.key_id(source.secret)})"
    else:
        randomness = "secret, a fresh key from the OS that is written nowhere"
    shown = cfg.constraint + (f": {fam.summary}" if cfg.constraint_spec else "")
    print(f"training {cfg.method} on {cfg.dataset} ({shown}, gamma={cfg.gamma}, epsilon={cfg.epsilon}, delta={cfg.delta:g}), "
          f"T = {run.ctx.steps}{batch_note}; randomness: {randomness}", file=sys.stderr)
    result = execute(run, progress=not args.quiet)
    print(_summary(result))
    if not args.no_mlflow:
        from raco_bench.sweeps.trial import log_single_run

        run_id = log_single_run(uri, args.experiment, result, run.ctx.dataset, tracking.key_id(source.secret))
        print(f"logged to {uri}, experiment {args.experiment!r}, run {run_id}")
    if args.json:
        Path(args.json).write_text(json.dumps(result.to_dict(), indent=2, default=float))
        print(f"wrote {args.json}")
    return 0


def _absolute(path: str | None) -> str | None:
    """A user's file as the run records it: its absolute path."""
    return None if path is None else str(Path(path).expanduser().resolve())


def _train_dataset(args: argparse.Namespace) -> str:
    """The run's dataset: ``--dataset`` (a catalog name), or the name in ``--schema`` (a dataset of the user's own)."""
    if args.data is not None and args.schema is None:
        raise ValueError(f"--data needs its schema file (--schema SCHEMA); draft one with `raco-bench schema draft {args.data}`")
    if args.schema is None:
        return args.dataset or RunConfig().dataset
    from raco_bench.data.catalog import dataset_schema

    name = dataset_schema(None, args.schema).name
    if args.dataset is not None and args.dataset != name:
        raise ValueError(f"--dataset {args.dataset} and --schema {args.schema} (named {name!r}) disagree; a dataset of your own is named by its schema")
    return name


def _cmd_schema(args: argparse.Namespace) -> int:
    from raco_bench.data.draft import write_draft

    out = write_draft(Path(args.table), Path(args.out) if args.out else None, args.label, args.groups, args.force)
    print(f"wrote {out}: a proposal to edit. Every value it read from the rows is marked READ FROM THE DATA and is outside the privacy "
          "budget until you replace it with a public one (documentation, a code book, an a priori bound) and change its source; a run on "
          "the schema as it is lists those columns OUTSIDE THE BUDGET")
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from raco_bench.sweeps import SweepSpec
    from raco_bench.sweeps.runner import main as sweep_main

    return sweep_main(SweepSpec(dataset="synthetic"), args.rest, command=True)


def _default_batch(cfg: RunConfig, method, sets: dict) -> tuple[RunConfig, str]:
    """``train``'s expected batch size where ``--set batch_size`` is not given, for a method that has one: the power of two
    nearest n/32, at most the method's default (:func:`raco_bench.methods.common.default_batch_size`), and a note that
    says so; the configuration is unchanged otherwise."""
    import dataclasses

    from raco_bench.data.catalog import public_train_rows
    from raco_bench.methods.common import default_batch_size

    published = public_train_rows(cfg.dataset, cfg.schema)
    if "batch_size" in sets or "batch_size" not in {f.name for f in dataclasses.fields(method.Hyper)} or published is None:
        return cfg, ""
    largest = method.Hyper().batch_size
    chosen = default_batch_size(published, largest)
    if chosen == largest:
        return cfg, ""
    return (cfg.with_overrides({"batch_size": chosen}),
            f", batch_size {chosen} (the default for {published:,} training rows: the power of two nearest n/32, "
            f"at most {largest}; --set batch_size=B to change)")


def _refuse_few_steps(run, cfg: RunConfig) -> None:
    """Refuse, before training, a run whose budget leaves it too few steps for its data (the health rule of
    raco_bench.training.health), naming the flags to change; T chosen with ``--steps`` is the user's."""
    from raco_bench.training.health import MIN_PASSES, passes

    ctx = run.ctx
    batch = getattr(ctx.hyper, "batch_size", None)
    done = passes(ctx.steps, batch, ctx.n_train)
    if done < MIN_PASSES:
        at = f"with batch_size={batch} " if batch is not None else ""
        raise ValueError(f"{at}the budget epsilon={cfg.epsilon:g} allows T = {ctx.steps} steps, {done:.2g} expected passes over the "
                         f"{ctx.n_train:,} training rows of {cfg.dataset}: too few for a model worth reading (the health rule: at least "
                         f"{MIN_PASSES:g}); lower --set batch_size, raise --epsilon, or pass --allow-unhealthy to train it anyway")


def _refuse_below_noise_floor(dataset, cfg: RunConfig) -> None:
    """Refuse a gap constraint's γ below the test split's noise floor (docs/results.md, "Noise floor"): there only a model
    that predicts one class meets it, whatever it learns. Names the flag to change."""
    from raco_bench.constraints.families import Task, family, met_by_every_constant

    if not met_by_every_constant(family(cfg.constraint, cfg.constraint_spec).problem(Task.of(dataset), cfg.gamma)):
        return  # only a gap constraint (differences of rates) is met by a constant predictor at every γ, whatever the split's noise
    from raco_bench.report.noise_floor import split_floor_row

    test = split_floor_row(dataset, "test", cfg.constraint, draws=FLOOR_DRAWS, spec=cfg.constraint_spec)
    if cfg.gamma < test["floor_median"]:
        raise ValueError(f"gamma={cfg.gamma:g} is below the noise floor of {cfg.dataset}'s test split under {cfg.constraint} "
                         f"({test['floor_median']:.3f}: a rate measured on its smallest group, {test['smallest_group_rows']} test rows, moves "
                         "that much by chance; docs/results.md, \"Noise floor\"), so a model meets it only by predicting one class; pass "
                         f"--gamma {math.ceil(100 * test['floor_median']) / 100:g} or more, or --allow-unhealthy to train it anyway")


FLOOR_DRAWS = 200  # coin draws of train's noise-floor check (the pages measure 1,000)


BENCHMARKS = {"data": "data_load", "steptime": "step_time", "report-scale": "report_scale", "throughput": "throughput",
              "memory": "pack_memory", "preprocessing": "preprocessing_cost", "audit": "audit_tightness", "store": "store_scale",
              "tuning": "tuning_steps", "one-run": "one_run_bounds", "preflight": "preflight",
              "calibration": "calibration_search"}  # name -> raco_bench.benchmarks module


def _cmd_bench(args: argparse.Namespace) -> int:
    import importlib

    if args.what == "walltime":
        from raco_bench.benchmarks import step_time

        return step_time.main_walltime(args.rest)
    return importlib.import_module(f"raco_bench.benchmarks.{BENCHMARKS[args.what]}").main(args.rest)


def _cmd_report(args: argparse.Namespace) -> int:
    from raco_bench import preflight, tracking

    out = preflight.setting(args.out, "--out", f"reports/{args.experiment}", default_note="reports/<experiment> in the working directory")
    preflight.check_folder(out, "the report's folder", "pass --out a writable folder")
    if args.results:
        preflight.check_folder(preflight.Setting(args.results, "--results"), "the results page's folder", "pass --results a writable folder")
    uri = tracking.resolve_tracking_uri(args.tracking_uri)  # the store, before the report's modules are imported (seconds)
    preflight.check_store(uri, tracking.tracking_uri_source(args.tracking_uri)[1], args.experiment, write=not args.no_mlflow, existing=True)
    from raco_bench.report.build import build_report
    from raco_bench.report.load import ReportError

    try:
        report = build_report(args.experiment, args.tracking_uri, Path(out.value),
                              Path(args.references) if args.references else None, args.walltime_experiment,
                              log_to_mlflow=not args.no_mlflow, sweep_id=args.sweep_id, audit_experiment=args.audit_experiment,
                              results=Path(args.results) if args.results else None)
    except ReportError as exc:
        raise ValueError(str(exc)) from None
    for path in report.files:
        print(path)
    for note in report.notes:
        print(f"note: {note}")
    return 0


def _cmd_sweeps(args: argparse.Namespace) -> int:
    from raco_bench import preflight, tracking
    from raco_bench.sweeps.listing import format_sweeps, list_sweeps

    uri = tracking.resolve_tracking_uri(args.tracking_uri)
    preflight.check_store(uri, tracking.tracking_uri_source(args.tracking_uri)[1], write=False, existing=True)
    print(format_sweeps(list_sweeps(uri, args.experiment)))
    return 0


def _add_sweeps(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tracking-uri", default=None, help="default: $MLFLOW_TRACKING_URI, else sqlite:///./mlflow.db")
    p.add_argument("--experiment", default=None, help="only this experiment's sweeps (default: every experiment)")


def _cmd_results(args: argparse.Namespace) -> int:
    from raco_bench.report.load import ReportError
    from raco_bench.report.rebuild import rebuild_results

    try:
        done = rebuild_results(Path(args.dir), Path(args.references) if args.references else None)
    except ReportError as exc:
        raise ValueError(str(exc)) from None
    for path in done.files:
        print(path)
    print(f"rebuilt from their data (parts/): {', '.join(p.name for p in done.pages) or 'none'}")
    if done.kept:
        print(f"not rebuilt, no data (parts/) to rebuild them from; compared from their satisfaction.csv as they are: "
              f"{', '.join(p.name for p in done.kept)}")
    return 0


def _cmd_audit(args: argparse.Namespace) -> int:
    from raco_bench import tracking

    uri = None if args.no_mlflow else tracking.resolve_tracking_uri(args.tracking_uri)
    handler = {"preprocessing": _audit_preprocessing, "whitebox": _audit_whitebox, "one-run": _audit_one_run, "replay": _audit_replay}[args.audit]
    results = handler(args, uri)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=float))
        print(f"wrote {args.json}")
    return 0


def _audit_preprocessing(args: argparse.Namespace, uri: str | None) -> list[dict]:
    from raco_bench.audit.preprocessing import PreprocessingAttack, run_attack
    from raco_bench.audit.records import log_audit

    if args.runs < 4:
        raise ValueError(f"invalid --runs {args.runs}: at least 4 runs per world (half choose the threshold, half are counted)")
    results = []
    for mode in args.preprocessing:
        attack = PreprocessingAttack(dataset=args.dataset, column=args.column, value=args.value, preprocessing=mode,
                                     epsilon=args.epsilon, delta=args.delta, runs=args.runs)
        result = run_attack(attack)
        print(result.summary(), flush=True)
        row = {"preprocessing": mode, "epsilon_lower": result.bound.epsilon_lower, "confidence": result.bound.confidence,
               "claimed_epsilon": result.claimed_epsilon, "runs_per_world": args.runs,
               "tpr": result.bound.true_positive_rate, "fpr": result.bound.false_positive_rate,
               "stat_d_mean": float(result.statistic_d.mean()), "stat_d_prime_mean": float(result.statistic_d_prime.mean())}
        results.append(row)
        if uri is not None:
            params = {"method": attack.method, "dataset": attack.dataset, "epsilon": attack.epsilon, "delta": attack.delta, "runs": attack.runs,
                      "variant": f"preprocessing={mode}", "column": attack.column, "value": attack.value, "confidence": result.bound.confidence,
                      "steps": "full run", "sampling_rate": "the configuration's"}
            note = (f"one record with {attack.column}={attack.value:g} added; statistic: the released model's weight on it; "
                    f"preprocessing={mode}" + (" (OUTSIDE the budget)" if mode == "paper" else " (public domains, no budget)"))
            log_audit(uri, "preprocessing", params, {"epsilon_claimed": result.claimed_epsilon, "epsilon_audited": result.bound.epsilon_lower,
                                                     "epsilon_audited_upper": result.bound.epsilon_upper,
                                                     "true_positive_rate": row["tpr"], "false_positive_rate": row["fpr"]}, note)
    return results


def _audit_whitebox(args: argparse.Namespace, uri: str | None) -> list[dict]:
    import torch

    from raco_bench.audit.records import log_audit
    from raco_bench.audit.whitebox import WhiteBoxAudit, run_whitebox

    params = tuple(_parse_sets(args.set).items())
    audit = WhiteBoxAudit(method=args.method, dataset=args.dataset, epsilon=args.epsilon, delta=args.delta, steps=args.steps, runs=args.runs,
                          rows=None if args.rows == 0 else args.rows, sampling_rate=args.sampling_rate, confidence=args.confidence,
                          params=params, seed=args.seed, device=args.device)
    audit.validate()
    torch.set_num_threads(args.threads)
    result = run_whitebox(audit, progress=lambda world, done: print(f"  world {world}: {done}/{audit.runs} runs", file=sys.stderr, flush=True))
    print(result.summary(), flush=True)
    row = {"method": audit.method, "dataset": audit.dataset, "statistic": result.statistic, **result.metrics(), **result.settings}
    if uri is not None:
        row["mlflow_run_id"] = log_audit(uri, "whitebox", result.params(), result.metrics(), result.note())
    return [row]


def _audit_one_run(args: argparse.Namespace, uri: str | None) -> list[dict]:
    import torch

    from raco_bench.audit.one_run import OneRunAudit, run_one_run
    from raco_bench.audit.records import log_audit

    audit = OneRunAudit(method=args.method, dataset=args.dataset, epsilon=args.epsilon, delta=args.delta, canaries=args.canaries,
                        steps=args.steps, confidence=args.confidence, params=tuple(_parse_sets(args.set).items()), seed=args.seed,
                        bounds=tuple(args.bounds))
    audit.validate()
    torch.set_num_threads(args.threads)
    result = run_one_run(audit)
    print(result.summary(), flush=True)
    if args.save_scores:
        Path(args.save_scores).write_text(json.dumps(result.score_record()))
        print(f"wrote {args.save_scores}")
    row = {"method": audit.method, "dataset": audit.dataset, **result.metrics()}
    if uri is not None:
        row["mlflow_run_id"] = log_audit(uri, "one-run", result.params(), result.metrics(), result.note())
    return [row]


def _audit_replay(args: argparse.Namespace, uri: str | None) -> list[dict]:
    import torch

    from raco_bench.audit.records import log_audit
    from raco_bench.audit.replay import ReplayAttack, run_replay

    rows = []
    torch.set_num_threads(args.threads)
    for mode in args.randomness:
        attack = ReplayAttack(dataset=args.dataset, method=args.method, epsilon=args.epsilon, delta=args.delta, randomness=mode, runs=args.runs,
                              train_rows=None if args.train_rows == 0 else args.train_rows, steps=args.steps, confidence=args.confidence,
                              params=tuple({**dict(ReplayAttack.params), **_parse_sets(args.set)}.items()))
        attack.validate()
        result = run_replay(attack, progress=lambda text: print(f"  {text}", file=sys.stderr, flush=True))
        print(result.summary(), flush=True)
        row = {"method": attack.method, "dataset": attack.dataset, "randomness": mode, **result.metrics()}
        if uri is not None:
            row["mlflow_run_id"] = log_audit(uri, "replay", result.params(), result.metrics(), result.note())
        rows.append(row)
    return rows


def _set_keys_epilog() -> str:
    """Every method's ``--set`` keys with their defaults (imports the method plugins)."""
    import dataclasses

    from raco_bench.methods import registry

    lines = ["--set keys of each method (KEY=VALUE, default in parentheses):"]
    for name, cls in registry().items():
        keys = cls().applicable(cls.Hyper())
        lines.append(f"  {name}: " + ", ".join(f"{k} ({v})" for k, v in keys.items()))
    run = ", ".join(f"{f.name} ({getattr(RunConfig(), f.name)})" for f in dataclasses.fields(RunConfig) if f.name != "params")
    lines.append(f"  every run: {run}")
    return "\n".join(lines)


def _add_train(p: argparse.ArgumentParser) -> None:
    from raco_bench.constraints.families import names
    from raco_bench.data import DATASETS

    d = RunConfig()
    p.add_argument("--dataset", default=None, help=f"one of {', '.join(DATASETS)} (default: {d.dataset}), or give your own with --schema")
    p.add_argument("--schema", default=None, help="a dataset of your own: its schema file, YAML or TOML (docs/datasets.md, \"Your own data\"; "
                                                  "`raco-bench schema draft TABLE` proposes one); the dataset is the schema's name")
    p.add_argument("--data", default=None, help="with --schema: its table, CSV or Parquet (default: the file the schema names as `table`)")
    p.add_argument("--method", default=d.method, help=f"one of {', '.join(METHOD_NAMES)} (default: %(default)s)")
    p.add_argument("--constraint", default=None, help=f"one of {', '.join(names())}, or a constraint your schema declares (its `constraints` "
                                                      f"key); with --constraint-spec, that spec's name (default: {d.constraint})")
    p.add_argument("--constraint-spec", default=None, metavar="SPEC",
                   help="a custom rate constraint: a linear combination of rates over (label, group) cells, at most gamma, e.g. "
                        "'FNR(group=a) - FNR(group=b)' or '|PR(group=a) - PR(group=b)|' (docs/constraints.md); named 'custom' unless "
                        "--constraint names it")
    p.add_argument("--gamma", type=float, default=d.gamma, help="constraint slack, the target γ (default: %(default)s)")
    p.add_argument("--epsilon", type=float, default=d.epsilon, help="privacy budget ε (default: %(default)s)")
    p.add_argument("--delta", type=float, default=d.delta, help="privacy δ (default: %(default)s)")
    p.add_argument("--seed", type=int, default=d.seed, help="training seed: with the configuration, it names the run's random streams; "
                                                             "under --randomness secret it does not determine them (default: %(default)s)")
    p.add_argument("--steps", type=int, default=None, help="number of steps T (default: the most the budget allows, capped at max_steps)")
    p.add_argument("--device", default=d.device, help="torch device, e.g. cpu or cuda (default: %(default)s)")
    p.add_argument("--preprocessing", default=d.preprocessing, choices=["public", "paper"],
                   help="public: feature domains from the catalog, no budget spent; paper: z-scoring from the rows, OUTSIDE the budget "
                        "(default: %(default)s)")
    p.add_argument("--checkpoint", default=d.checkpoint, choices=list(CHECKPOINT_RULES),
                   help="the reported model: last = the private last iterate; private = noisy validation selection charged to the "
                        "budget (--set selection_noise=50 --set selection_checkpoints=5); paper = selection OUTSIDE the budget (default: %(default)s)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a hyperparameter or run setting, repeatable, e.g. --set noise_multiplier=3 (keys below)")
    p.add_argument("--randomness", default=d.randomness, choices=list(RANDOMNESS_MODES),
                   help="secret: every draw keyed by a secret key from the OS, written nowhere, so the epsilon holds against whoever reads "
                        "the output (seed included); reproducible: draws regenerable from the seed, labelled OUTSIDE THE BUDGET (default: %(default)s)")
    p.add_argument("--key-file", default=None, help="secret randomness: keep the key in this file (created, mode 0600, if absent) to repeat a "
                                                    "run exactly; keep it outside the tracking store and results (default: a fresh key, kept nowhere)")
    p.add_argument("--train-metrics", action="store_true",
                   help="also evaluate and release exact training-set metrics; they are statistics of the private rows, so the run "
                        "lists them OUTSIDE THE BUDGET (default: off; checkpoint=paper reads them anyway)")
    p.add_argument("--json", default=None, help="write the resolved config, privacy plan and metrics to this file (default: none)")
    from raco_bench.tracking import TRAIN_EXPERIMENT

    p.add_argument("--experiment", default=TRAIN_EXPERIMENT, help="MLflow experiment of the run (default: %(default)s)")
    p.add_argument("--tracking-uri", default=None, help="default: $MLFLOW_TRACKING_URI, else sqlite:///./mlflow.db")
    p.add_argument("--no-mlflow", action="store_true", help="do not log the run to MLflow (default: logged, as a sweep logs a configuration)")
    p.add_argument("--quiet", action="store_true", help="no progress lines (default: progress on stderr)")
    p.add_argument("--allow-unhealthy", action="store_true",
                   help="train even where the health rules already condemn the model before training (too few steps for the data, "
                        "or gamma below the test split's noise floor); the summary still gives the verdict (default: refused)")
    p.epilog = _set_keys_epilog()
    p.formatter_class = argparse.RawDescriptionHelpFormatter


def _add_audit(p: argparse.ArgumentParser) -> None:
    audit = p.add_subparsers(dest="audit", required=True)
    a = audit.add_parser("preprocessing", help="one extreme record against data-dependent feature scaling (RaCO-DP, README defaults)")
    a.add_argument("--dataset", default="adult", help="dataset (default: %(default)s)")
    a.add_argument("--column", default="capital-gain", help="numeric column of the extreme record (default: %(default)s)")
    a.add_argument("--value", type=float, default=1e9, help="its value (default: %(default)s)")
    a.add_argument("--preprocessing", nargs="+", default=["paper", "public"], choices=["paper", "public"],
                   help="preprocessing modes to audit (default: both)")
    a.add_argument("--runs", type=int, default=300, help="training runs per world (default: %(default)s)")
    a.add_argument("--epsilon", type=float, default=1.0, help="claimed epsilon of each run (default: %(default)s)")
    a.add_argument("--delta", type=float, default=1e-5, help="delta (default: %(default)s)")
    _audit_common(a)

    from raco_bench.audit.one_run import OneRunAudit
    from raco_bench.audit.whitebox import WhiteBoxAudit
    from raco_bench.methods import METHOD_NAMES

    w = audit.add_parser("whitebox", help="many one-step (or few-step) runs with and without a canary, observing every release (docs/audit.md)")
    d = _audit_run_args(w, WhiteBoxAudit(), list(METHOD_NAMES), "claimed epsilon of each audited run; its noise is calibrated to it")
    w.add_argument("--steps", type=int, default=d.steps, help="steps T of each audited run (default: %(default)s)")
    w.add_argument("--runs", type=int, default=d.runs, help="runs per world (default: %(default)s)")
    w.add_argument("--rows", type=int, default=d.rows, help="training rows of D, 0 = all; q is kept (default: %(default)s)")
    w.add_argument("--sampling-rate", type=float, default=None, help="q of the audited runs (default: the configuration's batch_size / n_train)")
    w.add_argument("--device", default="cpu", help="torch device of the audited runs, e.g. cuda (default: %(default)s)")

    from raco_bench.audit.replay import ReplayAttack

    r = audit.add_parser("replay", help="seed-replay membership attack: regenerate each run's noise from its logs (docs/audit.md)")
    dr = ReplayAttack()
    r.add_argument("--method", default=dr.method, choices=list(METHOD_NAMES), help="a private method with a record-level claim (default: %(default)s)")
    r.add_argument("--dataset", default=dr.dataset, help="dataset (default: %(default)s)")
    r.add_argument("--epsilon", type=float, default=dr.epsilon, help="claimed epsilon of each run (default: %(default)s)")
    r.add_argument("--delta", type=float, default=dr.delta, help="delta (default: %(default)s)")
    r.add_argument("--randomness", nargs="+", default=["reproducible", "secret"], choices=list(RANDOMNESS_MODES),
                   help="the victims' randomness modes to attack (default: both)")
    r.add_argument("--runs", type=int, default=dr.runs, help="released models per world (default: %(default)s)")
    r.add_argument("--train-rows", type=int, default=dr.train_rows, help="training rows of D, 0 = all (default: %(default)s)")
    r.add_argument("--steps", type=int, default=None, help="steps T of each run (default: the most the budget allows)")
    r.add_argument("--confidence", type=float, default=dr.confidence, help="confidence of the lower bound (default: %(default)s)")
    r.add_argument("--threads", type=int, default=2, help="torch threads (default: %(default)s)")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="method hyperparameter override, repeatable (default: batch_size=256)")
    _audit_common(r)

    o = audit.add_parser("one-run", help="one training run with canaries in or out at random (Steinke, Nasr & Jagielski 2023; the f-DP "
                                         "bound of Mahloujifar, Melis & Chaudhuri 2025 beside it)")
    d1 = _audit_run_args(o, OneRunAudit(), list(METHOD_NAMES), "claimed epsilon of the run")
    o.add_argument("--canaries", type=int, default=d1.canaries, help="canaries m: one new feature column each (default: %(default)s)")
    o.add_argument("--steps", type=int, default=None, help="steps T of the run (default: the most the budget allows, as in training)")
    o.add_argument("--bounds", nargs="+", default=list(d1.bounds), metavar="BOUND",
                   help="the bounds to state, all from the same canaries and guesses; the first is the headline epsilon_audited: "
                        "snj = Steinke, Nasr & Jagielski; fdp-dp = f-DP (Mahloujifar, Melis & Chaudhuri) under the (epsilon, delta) "
                        "curve, a lower bound for every mechanism; fdp-gaussian = f-DP under the HYPOTHESIS that the run's trade-off "
                        "curve is Gaussian (as jax-privacy computes it), not a lower bound on the run's epsilon and never the headline (default: %(default)s)")
    o.add_argument("--save-scores", default=None, metavar="PATH",
                   help="write every canary's score and inclusion (JSON) so that any implementation can re-audit them (default: none)")


def _audit_run_args(a: argparse.ArgumentParser, d, methods: list[str], epsilon_help: str):
    """The options the white-box and one-run audits share; returns the defaults ``d``."""
    a.add_argument("--method", default=d.method, choices=methods, help="a private method with a record-level claim (default: %(default)s)")
    a.add_argument("--dataset", default=d.dataset, help="dataset (default: %(default)s)")
    a.add_argument("--epsilon", type=float, default=d.epsilon, help=f"{epsilon_help} (default: %(default)s)")
    a.add_argument("--delta", type=float, default=d.delta, help="delta (default: %(default)s)")
    a.add_argument("--confidence", type=float, default=d.confidence, help="confidence of the lower bound (default: %(default)s)")
    a.add_argument("--seed", type=int, default=d.seed, help="seed of the audit's runs (default: %(default)s)")
    a.add_argument("--threads", type=int, default=2, help="torch threads (default: %(default)s)")
    a.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="method hyperparameter override, repeatable (see `raco-bench train --help`)")
    _audit_common(a)
    return d


def _audit_common(a: argparse.ArgumentParser) -> None:
    a.add_argument("--tracking-uri", default=None, help="MLflow store of the audit run (default: $MLFLOW_TRACKING_URI, else sqlite:///./mlflow.db)")
    a.add_argument("--no-mlflow", action="store_true", help="do not log the audit to MLflow (experiment raco-bench-audit)")
    a.add_argument("--json", default=None, help="write the results to this file (default: none)")


def _add_report(p: argparse.ArgumentParser) -> None:
    p.add_argument("--experiment", required=True, help="the sweep's MLflow experiment, e.g. adult-demographic-parity")
    p.add_argument("--tracking-uri", default=None, help="default: $MLFLOW_TRACKING_URI, else sqlite:///./mlflow.db")
    p.add_argument("--out", default=None, help="output folder (default: reports/<experiment>/)")
    p.add_argument("--references", default=None, help="CSV of published points: method,dataset,epsilon,error,constraint_value,source (default: none)")
    p.add_argument("--walltime-experiment", default="raco-bench-walltime", help="benchmark experiment for the wall-time table (default: %(default)s)")
    p.add_argument("--sweep-id", default=None, help="which sweep of the experiment (default: the one that trained last; a resumed one counts from its resume)")
    p.add_argument("--results", default=None, metavar="DIR",
                   help="also export the sweep as a part of the study in DIR (DIR/parts/<sweep_id>.csv.gz and .json, replacing an earlier "
                        "export of it) and rebuild the page there from all its parts, e.g. results/adult-dp")
    p.add_argument("--audit-experiment", default="raco-bench-audit", help="experiment of `raco-bench audit` runs for the audit table (default: %(default)s)")
    p.add_argument("--no-mlflow", action="store_true", help="do not log the report as artifacts of the sweep's parent run")


def _add_results(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", metavar="DIR", help="folder of results pages (`raco-bench report --results DIR/STUDY`), e.g. results: every page "
                                              "with study data (STUDY/parts/) is rebuilt from it, with no MLflow store, then the comparison")
    p.add_argument("--references", default=None, help="published points to overlay (default: DIR/references.csv when it exists)")


def _add_schema(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", required=True)
    d = sub.add_parser("draft", help="propose a schema file for TABLE (CSV or Parquet) to edit: its domains, vocabularies, classes and "
                                     "groups are read from the rows, each marked so, OUTSIDE the privacy budget until replaced")
    d.add_argument("table", metavar="TABLE", help="the table, CSV (.csv, .csv.gz, .tsv) or Parquet (.parquet, .pq)")
    d.add_argument("--out", default=None, help="the schema file to write, .yaml or .toml (default: TABLE's name with .yaml)")
    d.add_argument("--label", default=None, help="the label column (default: a column named label, target, class, outcome or y, else the last)")
    d.add_argument("--groups", nargs="+", default=None, help="the sensitive column(s) (default: a column named sex, gender, race, group or g)")
    d.add_argument("--force", action="store_true", help="overwrite the schema file if it exists")


def _add_bench(p: argparse.ArgumentParser) -> None:
    p.add_argument("what", choices=["walltime", *BENCHMARKS],
                   help="which benchmark (each has its own --help)")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="the benchmark's own options")


HANDLERS = {"datasets": (None, "_cmd_datasets"), "train": (_add_train, "_cmd_train"), "audit": (_add_audit, "_cmd_audit"),
            "report": (_add_report, "_cmd_report"), "results": (_add_results, "_cmd_results"), "bench": (_add_bench, "_cmd_bench"),
            "sweeps": (_add_sweeps, "_cmd_sweeps"), "schema": (_add_schema, "_cmd_schema"), "sweep": (None, "_cmd_sweep")}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; only ``command``'s options are built (all of them when ``command`` is None and details are asked for)."""
    parser = argparse.ArgumentParser(prog="raco-bench", description="Private learning under rate constraints: RaCO-DP and baselines.")
    from raco_bench import __version__

    parser.add_argument("--version", action="version", version=f"raco-bench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        add, handler = HANDLERS[name]
        if add is not None and name == command:
            add(p)
        p.set_defaults(func=globals()[handler])
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = argv[0] if argv and argv[0] in COMMANDS else None
    if command == "sweep":  # every option is the sweep's own (raco_bench.sweeps.arguments), --help included
        return _cmd_sweep(argparse.Namespace(rest=argv[1:]))
    from raco_bench.usage import parse_args

    args = parse_args(build_parser(command), argv)  # an unknown flag: its sub-command's usage and the closest flag
    from raco_bench.data.files import DataError

    try:
        return args.func(args)
    except (ValueError, DataError) as exc:
        print(f"raco-bench: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
