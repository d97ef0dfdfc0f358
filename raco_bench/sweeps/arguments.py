"""Command-line arguments of the sweep scripts (``sweeps/*.py``): a base :class:`SweepSpec` plus overrides."""

from __future__ import annotations

import argparse
from dataclasses import replace

from raco_bench import usage
from raco_bench.privacy.counter_rng import RANDOMNESS_MODES
from raco_bench.sweeps.configurations import CONFIG_RUNS_LIMIT
from raco_bench.sweeps.spec import SweepSpec


def parse_args(base: SweepSpec, argv: list[str] | None, command: bool = False) -> tuple[SweepSpec, argparse.Namespace]:
    """The sweep scripts' arguments over ``base``; ``command`` (``raco-bench sweep``) also takes the dataset and the constraint."""
    if command:
        p = argparse.ArgumentParser(prog="raco-bench sweep", description="Two-phase sweep on a catalog dataset (--dataset) or a table of your own "
                                                                         "(--schema, --data), under one constraint.")
        from raco_bench.constraints.families import names

        p.add_argument("--dataset", help="a catalog dataset (`raco-bench datasets` lists them), or give --schema for your own")
        p.add_argument("--constraint", help=f"one of {', '.join(names())}, or a constraint your schema declares (its `constraints` key); "
                                            f"with --constraint-spec, that spec's name (default: {base.constraint})")
        p.add_argument("--constraint-spec", metavar="SPEC",
                       help="a custom rate constraint: a linear combination of rates over (label, group) cells, at most gamma, e.g. "
                            "'FNR(group=a) - FNR(group=b)' (docs/constraints.md); named 'custom' unless --constraint names it")
    else:
        p = argparse.ArgumentParser(description=f"Two-phase sweep on {base.dataset} ({base.constraint}).")
    b = base
    p.add_argument("--smoke", action="store_true",
                   help="a small sweep that finishes in a few minutes on 2 CPU cores (epsilon 1, gamma 0.05, 2 configurations x 2 seeds, then 2)")
    p.add_argument("--demo", action="store_true",
                   help="the README's main job: epsilon 1, gamma 0.05 and 0.1, 12 configurations x 2 seeds, then 5 seeds (its measured time: README)")
    p.add_argument("--epsilons", type=float, nargs="+", help=f"privacy budgets (default: {' '.join(map(str, b.epsilons))})")
    p.add_argument("--gammas", type=float, nargs="+", help=f"constraint slacks (default: {' '.join(map(str, b.gammas))})")
    p.add_argument("--methods", nargs="+", help=f"registered methods (default: {' '.join(b.methods)})")
    p.add_argument("--n-configs", type=int, help=f"phase-1 configurations per (method, epsilon, gamma) (default: {b.n_configs})")
    p.add_argument("--phase1-seeds", type=int, help=f"seeds per phase-1 configuration (default: {b.phase1_seeds})")
    p.add_argument("--phase2-seeds", type=int, help=f"fresh seeds of each phase-1 winner (default: {b.phase2_seeds})")
    p.add_argument("--max-steps", type=int, help=f"cap on T for every method (default: {b.max_steps})")
    p.add_argument("--delta", type=float, help=f"privacy delta (default: {b.delta:g})")
    p.add_argument("--sample-seed", type=int, help=f"seed of the configuration sampler (default: {b.sample_seed})")
    p.add_argument("--repeat", type=int,
                   help="which repeat of the whole protocol (default 0: the protocol's train/validation split and search); r > 0 resamples "
                        "the train/validation split (the test split fixed) and the search, under a fresh key: a study's repeats are parts "
                        "with r = 0, 1, ... (docs/results.md, \"Repeats\")")
    p.add_argument("--yes", action="store_true", help="start a large sweep without asking (it asks only on a terminal)")
    p.add_argument("--schema", help="sweep a dataset of your own: its schema file, YAML or TOML (docs/datasets.md, \"Your own data\"); "
                                    "the dataset is the schema's name")
    p.add_argument("--data", help="with --schema: its table, CSV or Parquet (default: the file the schema names as `table`)")
    p.add_argument("--experiment", help="MLflow experiment name (default: <dataset>-<constraint>)")
    p.add_argument("--preprocessing", choices=["public", "paper"],
                   help="public (default): feature domains from the catalog; paper: z-scoring from the rows, OUTSIDE the budget")
    p.add_argument("--checkpoint", choices=["last", "private", "paper"],
                   help="the reported model of every method: last (default, the private last iterate), private (noisy validation "
                        "selection, charged to the budget) or paper (selection OUTSIDE the budget)")
    p.add_argument("--tuning", choices=["not-accounted", "accounted"],
                   help="not-accounted (default): the papers' two-phase protocol, tuning outside the budget (stated on every figure); "
                        "accounted: private random search with K ~ truncated negative binomial or Poisson, selection on noisy validation scores, "
                        "the released model's end-to-end epsilon is the budget (raco-dp, dp-sgd and non-private methods)")
    p.add_argument("--tuning-mean", type=float, help=f"accounted: mean number of configurations E[K] per search (default: {b.tuning_mean:g})")
    p.add_argument("--tuning-shape", type=float,
                   help=f"accounted: eta of K's distribution, 1 = geometric, 0 = logarithmic, inf = Poisson (default: {b.tuning_shape:g})")
    p.add_argument("--tuning-repeats", type=int,
                   help=f"accounted: independent repetitions of the search, the figure's error bars (default: {b.tuning_repeats})")
    p.add_argument("--randomness", choices=list(RANDOMNESS_MODES),
                   help="secret (default): every draw is keyed by a secret key from the OS, written nowhere, so the epsilon holds against "
                        "the logs; reproducible: draws regenerable from the logged seeds (research runs; labelled OUTSIDE THE BUDGET)")
    p.add_argument("--batch-draws", choices=["auto", "own", "shared"],
                   help="auto (default): shared under the two-phase protocol, own under accounted tuning; shared: configurations with "
                        "the same seed draw their Poisson batches from one stream (each run's epsilon is unchanged; a pack computes "
                        "them as dense products, docs/packs.md); own: every run its own batches (independent runs)")
    p.add_argument("--search", choices=["random", "tpe"],
                   help="phase 1's configurations: random (default) draws them independently; tpe asks Optuna's TPE sampler (the papers' "
                        "search: multivariate, seeded by --sample-seed) in rounds of --search-batch per (method, epsilon, gamma), told each "
                        "configuration's mean validation accuracy with its constraint value against gamma as the constraint")
    p.add_argument("--search-batch", type=int, help=f"tpe: configurations asked per (method, epsilon, gamma) and round (default: {b.search_batch})")
    p.add_argument("--step-budget", choices=["noise", "steps", "either"],
                   help="methods that take T from the accountant (raco-dp, dp-sgd): noise (default) searches the noise multiplier and "
                        "calibrates T; steps searches T (log-uniform) and calibrates the noise multiplier; either searches the choice too")
    p.add_argument("--key-file", help="secret randomness: keep the sweep's key in this file (created, mode 0600, if absent) so that "
                                      "--resume continues with the same key; keep it outside the tracking store and results")
    p.add_argument("--tracking-uri", help="default: $MLFLOW_TRACKING_URI, else sqlite:///./mlflow.db")
    p.add_argument("--storage-path", help="Tune storage (default: $RACO_BENCH_STORAGE, else ./ray_results); shared storage on a cluster")
    p.add_argument("--resume", action="store_true",
                   help="continue a sweep that did not finish: train what is not recorded, select again, train the winners without a phase-2 record")
    p.add_argument("--max-failures", type=int, default=3, help="retries of a failed pack, each from its last checkpoint (default: %(default)s)")
    p.add_argument("--pack-checkpoint-s", type=float, default=60.0,
                   help="seconds between a pack's checkpoints: a killed pack loses at most this much work (default: %(default)s)")
    p.add_argument("--config-runs-limit", type=int, default=CONFIG_RUNS_LIMIT,
                   help="phase-1 configurations above which none gets its own MLflow run (the packs' tables still hold them; "
                        "default: %(default)s, about 10 ms each on SQLite)")
    p.add_argument("--max-concurrent", type=int, default=0, help="0: as many as the cluster's resources allow")
    p.add_argument("-v", "--verbose", action="store_true", help="Ray Tune's own progress tables instead of the compact console")
    p.add_argument("--pack-size", type=int, default=None,
                   help="configurations trained together in one Ray trial (default: chosen from the sweep size and the device; 1 trains each alone)")
    p.add_argument("--gpu-fraction", type=float, default=None,
                   help="GPU share per trial (default: $RACO_BENCH_GPUS_PER_TRIAL, 1 on cluster.yaml's GPU nodes; 0 trains on CPUs)")
    args = usage.parse_args(p, argv)  # an unknown flag: the usage and the closest flag the sweep knows
    if args.pack_size is not None and args.pack_size < 1:
        p.error(f"--pack-size must be >= 1, got {args.pack_size}")
    if not args.pack_checkpoint_s > 0:
        p.error(f"--pack-checkpoint-s must be > 0 seconds, got {args.pack_checkpoint_s}")
    if args.config_runs_limit < 0:
        p.error(f"--config-runs-limit must be >= 0, got {args.config_runs_limit}")
    if args.max_failures < 0:
        p.error(f"--max-failures must be >= 0, got {args.max_failures}")
    if args.smoke and args.demo:
        p.error("--smoke and --demo are two presets: pick one")
    if args.data and not args.schema:
        p.error(f"--data needs its schema file (--schema SCHEMA); draft one with `raco-bench schema draft {args.data}`")
    if command:
        if bool(args.dataset) == bool(args.schema):
            p.error("name a catalog dataset (--dataset NAME) or a dataset of your own (--schema SCHEMA [--data TABLE]), one of them")
        from raco_bench.constraints.families import declared
        from raco_bench.data.catalog import dataset_schema

        schema = dataset_schema(None if args.schema else args.dataset, args.schema)  # an unknown dataset or a bad schema: refused here
        constraint, spec = declared(args.constraint or (None if args.constraint_spec else base.constraint), args.constraint_spec,
                                    schema.constraints)
        base = replace(base, dataset=args.dataset or base.dataset, constraint=constraint, constraint_spec=spec or "", experiment="",
                       methods=base.methods if (constraint, spec or "") == (base.constraint, base.constraint_spec) else ())
    base = base.with_user_data(args.schema, args.data) if args.schema else base
    spec = base.smoke() if args.smoke else base.demo() if args.demo else base
    overrides = {
        "epsilons": tuple(args.epsilons) if args.epsilons else None, "gammas": tuple(args.gammas) if args.gammas else None,
        "methods": tuple(args.methods) if args.methods else None, "n_configs": args.n_configs, "phase1_seeds": args.phase1_seeds,
        "phase2_seeds": args.phase2_seeds, "max_steps": args.max_steps, "delta": args.delta, "sample_seed": args.sample_seed,
        "experiment": args.experiment, "preprocessing": args.preprocessing, "checkpoint": args.checkpoint,
        "tuning": args.tuning, "tuning_mean": args.tuning_mean, "tuning_shape": args.tuning_shape, "tuning_repeats": args.tuning_repeats,
        "randomness": args.randomness, "batch_draws": args.batch_draws, "search": args.search, "search_batch": args.search_batch,
        "step_budget": args.step_budget, "repeat": args.repeat,
    }
    if args.tuning == "accounted" and args.checkpoint is None:
        overrides["checkpoint"] = "private"  # the search selects on the noisy validation scores each run releases
        if not args.experiment:
            overrides["experiment"] = spec.experiment + "-accounted"
    return replace(spec, **{k: v for k, v in overrides.items() if v is not None}), args
