"""`raco-bench bench throughput`: configurations per hour by pack size, measured side by side in one run.

A configuration here is a full trial as a sweep trains it: RaCO-DP on Adult at ε = 1, δ = 1e-5,
hyperparameters drawn from the method's search space, T calibrated from the budget (cached), the
usual evaluations on train / validation / test every ``eval_every`` steps and at T, and the last
iterate reported. As in a sweep's phase 1, each sampled configuration runs with ``--seeds`` seeds and a
pack holds them sorted by batch size. Each pack size trains its own configurations (the same draws for
every size), through the same call a sweep trial uses (:func:`raco_bench.training.pack.train_runs`), once with
every run drawing its own batches and once with shared batch draws (the sweep default, docs/packs.md,
"Shared batches"); pack size 1 is each configuration trained alone. It prints, and logs to MLflow
(experiment ``raco-bench-throughput``, shown by ``raco-bench report``):

* configurations per hour for each pack size and batch draws, the step-only cost per configuration and the share of
  the time spent in evaluations;
* the ratio of a configuration's step cost in the largest pack to a single configuration's step;
* the ratio of RaCO-DP to DP-SGD step cost per configuration inside the largest pack (same B, σ): the median of
  ratios of alternating pairs of runs, so that the machine's drift in speed hits both sides of each ratio;
* the cost of secret randomness: RaCO-DP's step cost per configuration inside the largest pack with the
  secret word source (ChaCha20, the default) over the reproducible one (SplitMix64);
* with ``--also METHOD …``, the same step costs (alone and per configuration inside the largest pack) for other
  methods with a batched engine, e.g. ``--also dp-fermi``, and their ratio to DP-SGD's.

Every configuration draws from the secret word source (one key per pack, as a sweep's trials do) unless
stated otherwise.

The ratios use fixed settings (each method's defaults with B = 1024, T = 100, shared batch draws); each
step cost is the median of several runs after a warm-up run.

Timings are wall-clock on this machine with one torch thread per process (CUDA where ``--device
cuda``); they are for the table in the report, never asserted in tests.

A GPU machine may have torch and no Ray, MLflow or dp-accounting (docs/packs.md, "The GPU path"). ``--write-kit FILE``,
run where the suite is installed, draws and calibrates every configuration this benchmark trains for the given sizes
and writes them, with the accountant's answers for them, to FILE (JSON); ``--kit FILE --no-mlflow`` then trains exactly
those configurations, their T as calibrated there, on a machine without those packages (nothing is drawn from Ray's
search space, calibrated or composed there: the ε of each run is the one computed where the kit was written).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gzip
import json
import math
import platform
import statistics
import time
from pathlib import Path

import torch

from raco_bench import tracking
from raco_bench.benchmarks import unpackable
from raco_bench.methods import DEFAULT_METHOD, get_method, timing_reference
from raco_bench.privacy.calibration import CalibrationCache
from raco_bench.progress import Progress
from raco_bench.records.throughput import THROUGHPUT_EXPERIMENT

EXPERIMENT = THROUGHPUT_EXPERIMENT  # its rows are read back by raco_bench.records.throughput
REPEATS_ALONE, REPEATS_PACKED = 7, 3  # step-cost measurements: the median of this many 100-step runs
PAIRS = 7  # alternating RaCO-DP / DP-SGD pack runs whose ratios give the median ratio
SEEDS = 5  # seeds per sampled configuration, as the papers' phase 1 has
DRAWS = ("own", "shared")


KIT_FORMAT = "raco-bench throughput kit 1"


@dataclasses.dataclass
class Kit:
    """The configurations this benchmark trains, drawn and calibrated where the suite is installed, with the accountant's
    answers for them (``epsilon``: :func:`raco_bench.privacy.accounting.recording`): ``runs`` maps each request
    (:func:`_request`) to its runs' configurations, each with its calibrated T. ``writing``: being filled."""

    runs: dict[str, list[dict]] = dataclasses.field(default_factory=dict)
    epsilon: dict[str, float] = dataclasses.field(default_factory=dict)
    writing: bool = False
    reference: str = ""  # the timing reference method (methods.timing_reference() where the kit was written)

    def save(self, path: str | Path) -> None:
        from raco_bench import __version__

        text = json.dumps({"format": KIT_FORMAT, "raco_bench": __version__, "reference": self.reference, "runs": self.runs, "epsilon": self.epsilon})
        Path(path).write_bytes(gzip.compress(text.encode()) if str(path).endswith(".gz") else text.encode())  # .gz: 16,384 runs in a few MB

    @staticmethod
    def load(path: str | Path) -> "Kit":
        try:
            raw = Path(path).read_bytes()
            data = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
        except (OSError, ValueError) as exc:
            raise ValueError(f"--kit {path}: not a kit this benchmark wrote ({exc}); write one with --write-kit where the suite is installed") from None
        if data.get("format") != KIT_FORMAT:
            raise ValueError(f"--kit {path}: format {data.get('format')!r}, this benchmark reads {KIT_FORMAT!r}; write it again with --write-kit")
        return Kit(data["runs"], data["epsilon"], reference=data["reference"])

    def answers(self):
        """The block in which the accountant answers this kit's runs with the values computed where it was written
        (:func:`raco_bench.privacy.accounting.carried`): their ε, which nothing here composes."""
        from raco_bench.privacy import accounting

        return accounting.carried(self.epsilon)


def _request(method: str, k: int, eval_every: int, fixed: dict | None, steps: int | None, randomness: str, draws: str, seeds: int) -> str:
    return json.dumps([method, k, eval_every, fixed, steps, randomness, draws, seeds], sort_keys=True)


def _runs(ds, method: str, k: int, device: str, eval_every: int, cache: CalibrationCache, fixed: dict | None = None, steps: int | None = None,
          randomness: str = "secret", draws: str = "shared", seeds: int = SEEDS, kit: Kit | None = None):
    """k runs: sampled configurations (or ``fixed``), each with ``seeds`` seeds, sorted by batch size as a sweep's packs are.
    With a ``kit``: the kit's runs for this request (reading), or these runs recorded into it (writing)."""
    from raco_bench.privacy.counter_rng import Keystream
    from raco_bench.training.config import RunConfig
    from raco_bench.training.loop import prepare_run

    source = Keystream.for_mode(randomness)  # one word source for the pack, as a sweep trial has
    request = _request(method, k, eval_every, fixed, steps, randomness, draws, seeds)
    if kit is not None and not kit.writing:
        if request not in kit.runs:
            raise ValueError(f"the kit holds no runs for {request}: write it with --write-kit and the same --sizes, --singles and --also")
        runs = [prepare_run(RunConfig(**{**cfg, "device": device}), ds, cache, source=source) for cfg in kit.runs[request]]
        return sorted(runs, key=lambda r: (r.ctx.hyper.batch_size, -r.ctx.steps))
    from raco_bench.methods.space import sample_configs

    configs = [fixed] * k if fixed is not None else sample_configs(get_method(method), 4 * k + 8, len(ds.train), seed=0)
    runs = []
    for params in configs:
        for seed in range(seeds):
            try:
                runs.append(prepare_run(RunConfig(dataset=ds.name, method=method, epsilon=1.0, gamma=0.05, seed=seed, device=device,
                                                  eval_every=eval_every, steps=steps, params=dict(params), randomness=randomness,
                                                  batch_draws=draws), ds, cache, source=source))
            except ValueError:  # the budget allows no step with this draw: a sweep skips it too
                break
            if len(runs) == k:
                runs = sorted(runs, key=lambda r: (r.ctx.hyper.batch_size, -r.ctx.steps))
                if kit is not None:
                    kit.runs[request] = [_kit_config(r, ds, cache, source, kit) for r in runs]
                return runs
    raise RuntimeError(f"only {len(runs)} runs of {len(configs)} sampled configurations fit the budget")


def _kit_config(run, ds, cache: CalibrationCache, source, kit: Kit) -> dict:
    """A prepared run's configuration with its calibrated T and resolved hyperparameters (σ where the step budget
    calibrated it), prepared once more while the accountant's answers are recorded: what a kit's reader asks."""
    from raco_bench.privacy import accounting
    from raco_bench.training.config import RunConfig
    from raco_bench.training.loop import prepare_run

    params = dataclasses.asdict(run.ctx.hyper)
    if params.get("step_budget") == "steps":
        params["step_budget"] = "noise"  # σ as calibrated, T as given: the same run
    cfg = {**run.ctx.config.to_dict(), "steps": run.ctx.steps, "params": params}
    with accounting.recording() as answers:
        again = prepare_run(RunConfig(**cfg), ds, cache, source=source)
    assert again.ctx.steps == run.ctx.steps and again.ctx.privacy["epsilon_spent"] == run.ctx.privacy["epsilon_spent"]
    kit.epsilon.update(answers)
    return cfg


def warm_up(ds, method: str, device: str, cache: CalibrationCache, kit: Kit | None = None) -> None:
    """Train a small pack first, so that the process has compiled (or loaded from disk) the pack step's kernels
    (:mod:`raco_bench.jit`) before anything is measured: a sweep's worker does that in its first pack, once."""
    from raco_bench.training.pack import train_runs

    runs = _runs(ds, method, 4, device, 10**6, cache, {"batch_size": 256}, steps=5, kit=kit)
    if kit is None or not kit.writing:
        train_runs(runs)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def measure(sizes: list[int], device: str, eval_every: int, singles: int, also: tuple[str, ...] = (), kit: Kit | None = None,
            draws_of: tuple[str, ...] = DRAWS, table_only: bool = False) -> dict:
    """The benchmark's table and ratios (``table_only``: the table alone, for the batch draws in ``draws_of``). With a
    ``kit`` being written, every configuration it would train is drawn, calibrated and recorded, and nothing is trained
    (the result is then empty)."""
    from raco_bench.data import load_dataset
    from raco_bench.training.pack import train_runs

    torch.set_num_threads(1)
    ds = load_dataset("adult")
    cache = CalibrationCache()
    writing = kit is not None and kit.writing
    if kit is not None and writing:
        kit.reference = timing_reference()
    reference = kit.reference if kit is not None else timing_reference()  # a kit's reader imports no other plugin
    rows = []
    progress = Progress("bench throughput" + (" (writing the kit)" if writing else ""), 2 * len(sizes) + 4 + len(also), every=0.0)
    for method in (DEFAULT_METHOD, reference, *also):
        warm_up(ds, method, device, cache, kit)
    for size in sizes:
        k = singles if size == 1 else size
        for draws in draws_of if size > 1 else ("own",):  # alone, a run's batches cost the same from either stream
            seeds = SEEDS if size > 1 else 1  # alone: distinct configurations
            runs = _runs(ds, DEFAULT_METHOD, k, device, eval_every, cache, draws=draws, seeds=seeds, kit=kit)
            if writing:
                progress.advance(f"pack size {size}, {draws} batches: {k} configurations recorded")
                continue
            _sync(device)
            t0 = time.perf_counter()
            results = train_runs(runs) if size > 1 else [r for run in runs for r in train_runs([run])]
            _sync(device)
            wall = time.perf_counter() - t0
            steps = sum(r.steps for r in results)
            step_ms = statistics.fmean(r.timing["ms_per_step"] for r in results)
            evals, trains = sum(r.timing["eval_s"] for r in results), sum(r.timing["train_s"] for r in results)
            rows.append({"pack_size": size, "batch_draws": draws, "configurations": k, "seconds": wall, "configs_per_hour": 3600 * k / wall,
                         "mean_T": steps / k, "step_ms_per_config": step_ms, "eval_share": evals / (evals + trains)})
            progress.advance(f"pack size {size}, {draws} batches: {3600 * k / wall:,.0f} configurations/hour")
    # step-only ratios at fixed settings (the method's defaults with B = 1024, T = 100): one configuration alone vs in the
    # largest pack, and RaCO-DP vs DP-SGD inside that pack; after a warm-up, the median of repeats (a 100-step run is short)
    big = max(sizes)
    fixed = {"batch_size": 1024}
    step_cost = {}

    def alone_ms(method: str) -> float:
        return train_runs(_runs(ds, method, 1, device, 10**6, cache, fixed, steps=100, kit=kit))[0].timing["ms_per_step"]

    def packed_ms(method: str, randomness: str = "secret") -> float:
        """A configuration's mean step time in a pack of ``big`` (100 steps)."""
        runs = _runs(ds, method, big, device, 10**6, cache, fixed, steps=100, randomness=randomness, kit=kit)
        return statistics.fmean(r.timing["ms_per_step"] for r in train_runs(runs))

    if table_only:
        return {"rows": rows, "step_cost": {}, "largest": big, "pair_ratios": [], "also": [], "reference": reference}
    if writing:  # the requests of the ratios below, recorded once each
        for method in (DEFAULT_METHOD, reference, *also):
            _runs(ds, method, 1, device, 10**6, cache, fixed, steps=100, kit=kit)
            _runs(ds, method, big, device, 10**6, cache, fixed, steps=100, kit=kit)
        _runs(ds, DEFAULT_METHOD, big, device, 10**6, cache, fixed, steps=100, randomness="reproducible", kit=kit)
        return {"rows": [], "step_cost": {}, "largest": big, "pair_ratios": [], "also": list(also), "reference": reference}

    for method in (DEFAULT_METHOD, reference, *also):
        alone_ms(method), packed_ms(method)  # warm-up runs, not counted
        alone = statistics.median(alone_ms(method) for _ in range(REPEATS_ALONE))
        packed = statistics.median(packed_ms(method) for _ in range(REPEATS_PACKED))
        step_cost[method] = (alone, packed)
        progress.advance(f"{method}: {alone:.3f} ms alone, {packed:.4f} ms per configuration in a pack of {big}")

    pairs = [packed_ms(DEFAULT_METHOD) / packed_ms(reference) for _ in range(PAIRS)]
    progress.advance(f"{DEFAULT_METHOD} / {reference} in a pack of {big}, {PAIRS} alternating pairs: median {statistics.median(pairs):.3f}")

    packed_ms(DEFAULT_METHOD, "reproducible")
    step_cost["reproducible"] = (math.nan, statistics.median(packed_ms(DEFAULT_METHOD, "reproducible") for _ in range(REPEATS_PACKED)))
    return {"rows": rows, "step_cost": step_cost, "largest": big, "pair_ratios": pairs, "also": list(also), "reference": reference}


def hardware(device: str) -> str:
    if device.startswith("cuda"):
        return f"{torch.cuda.get_device_name()} (CUDA), torch {torch.__version__}"
    return f"{platform.processor() or platform.machine()}, 1 torch thread, torch {torch.__version__}"


def format_report(out: dict, hw: str) -> str:
    lines = [f"hardware: {hw}", "", "| pack size | batch draws | configurations | seconds | configurations / hour | mean T | step ms per configuration "
             "| evaluation share |", "|---|---|---|---|---|---|---|---|"]
    for r in out["rows"]:
        lines.append(f"| {r['pack_size']} | {r['batch_draws']} | {r['configurations']} | {r['seconds']:.1f} | {r['configs_per_hour']:,.0f} | "
                     f"{r['mean_T']:.0f} | {r['step_ms_per_config']:.4f} | {r['eval_share']:.2f} |")
    rate = {(r["pack_size"], r["batch_draws"]): r["configs_per_hour"] for r in out["rows"]}
    if not out["step_cost"]:  # --table-only
        return "\n".join(lines)
    lines.append("")
    lines += [f"shared / own batch draws, configurations per hour at pack size {s}: {rate[s, 'shared'] / rate[s, 'own']:.2f}"
              for s in sorted({s for s, _ in rate}) if (s, "shared") in rate]
    ours, base = DEFAULT_METHOD, out.get("reference") or timing_reference()
    (ra, rp), (da, dp) = out["step_cost"][ours], out["step_cost"][base]
    lines += ["", f"step cost per configuration in a pack of {out['largest']} / a single configuration's step: "
              f"{ours} {rp / ra:.3f} ({rp:.4f} / {ra:.3f} ms), {base} {dp / da:.3f} ({dp:.4f} / {da:.3f} ms)",
              f"{ours} / {base} step cost per configuration inside the pack: {statistics.median(out['pair_ratios']):.3f} (median of "
              f"{len(out['pair_ratios'])} alternating pairs, {min(out['pair_ratios']):.3f} to {max(out['pair_ratios']):.3f}; "
              f"separate medians {rp / dp:.3f}; alone: {ra / da:.3f})"]
    _, rr = out["step_cost"]["reproducible"]
    lines.append(f"secret / reproducible randomness, {ours} step cost per configuration inside the pack: {rp / rr:.3f} ({rp:.4f} / {rr:.4f} ms)")
    for method in out.get("also", []):
        alone, packed = out["step_cost"][method]
        lines.append(f"{method}: {packed:.4f} ms per configuration in a pack of {out['largest']}, {alone:.3f} ms alone; "
                     f"/ {base} in the pack {packed / dp:.3f} (separate medians)")
    return "\n".join(lines)


def log(uri: str, out: dict, hw: str) -> str:
    reference = out.get("reference") or timing_reference()
    (ra, rp), (da, dp) = out["step_cost"][DEFAULT_METHOD], out["step_cost"][reference]
    _, rr = out["step_cost"]["reproducible"]
    metrics = {"pack_step_ratio_raco_dp": rp / ra, "pack_step_ratio_dp_sgd": dp / da, "raco_dp_over_dp_sgd_in_pack": statistics.median(out["pair_ratios"]),
               "secret_over_reproducible_in_pack": rp / rr}
    for method in out.get("also", []):
        alone, packed = out["step_cost"][method]
        key = method.replace("-", "_")
        metrics |= {f"pack_step_ms_{key}": packed, f"alone_step_ms_{key}": alone, f"{key}_over_{reference.replace('-', '_')}_in_pack": packed / dp}
    parent = tracking.RunRecord(f"throughput {hw}", {tracking.KIND: "throughput", "hardware": hw}, {"largest_pack": out["largest"]}, metrics)
    rows = [tracking.RunRecord(f"pack size {r['pack_size']} ({r['batch_draws']} batches)", {tracking.KIND: "throughput-row"},
                               {"pack_size": r["pack_size"], "batch_draws": r["batch_draws"], "hardware": hw},
                               {k: float(v) for k, v in r.items() if k not in ("pack_size", "batch_draws")}) for r in out["rows"]]
    return tracking.log_records(uri, EXPERIMENT, parent, rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="raco-bench bench throughput", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=None, help="pack sizes (default: 1 16 64 256 on CPU, 1 64 256 1024 4096 on CUDA)")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--eval-every", type=int, default=100, help="evaluation interval of every configuration (default 100)")
    p.add_argument("--singles", type=int, default=8, help="configurations timed alone for pack size 1 (default 8)")
    p.add_argument("--tracking-uri", default=None, help="default: $MLFLOW_TRACKING_URI, else sqlite:///./mlflow.db")
    p.add_argument("--also", nargs="+", default=[], metavar="METHOD",
                   help="other methods with a batched engine whose step cost in the largest pack is measured too (e.g. dp-fermi)")
    p.add_argument("--no-mlflow", action="store_true")
    p.add_argument("--write-kit", metavar="FILE", help="draw and calibrate every configuration the benchmark trains at these sizes (here, "
                   "where Ray and dp-accounting are), write them to FILE and train nothing")
    p.add_argument("--table-only", action="store_true", help="the table alone (no step-cost ratios); with --kit, not logged to MLflow")
    p.add_argument("--draws", nargs="+", choices=DRAWS, default=list(DRAWS), help="batch draws of the table's packs (default: both)")
    p.add_argument("--kit", metavar="FILE", help="train the configurations of a kit written with --write-kit (no Ray, dp-accounting or "
                   "calibration needed here; with --no-mlflow, no MLflow)")
    args = p.parse_args(argv)
    for method in args.also:
        if (why := unpackable(method)) is not None:
            p.error(f"--also {method}: {why}")
    if args.kit and args.write_kit:
        p.error("--kit reads a kit and --write-kit writes one: give one of them")
    try:
        kit = Kit.load(args.kit) if args.kit else Kit(writing=True) if args.write_kit else None
    except ValueError as exc:
        p.error(str(exc))
    reference = kit.reference if kit is not None and kit.reference else timing_reference()
    also = tuple(m for m in dict.fromkeys(args.also) if m not in (DEFAULT_METHOD, reference))
    if args.device.startswith("cuda") and not torch.cuda.is_available() and not args.write_kit:
        p.error("--device cuda: torch sees no CUDA device here")
    sizes = args.sizes or ([1, 64, 256, 1024, 4096] if args.device.startswith("cuda") else [1, 16, 64, 256])
    if any(s < 1 for s in sizes):
        p.error("pack sizes must be >= 1")
    if args.write_kit:
        measure(sorted(set(sizes)), "cpu", args.eval_every, args.singles, also, kit)
        kit.save(args.write_kit)
        print(f"wrote {args.write_kit}: {sum(len(v) for v in kit.runs.values())} runs in {len(kit.runs)} requests, "
              f"{len(kit.epsilon)} accountant answers; train them with --kit {args.write_kit} --sizes {' '.join(map(str, sizes))}")
        return 0
    with kit.answers() if kit is not None else contextlib.nullcontext():
        out = measure(sorted(set(sizes)), args.device, args.eval_every, args.singles, also, kit, tuple(args.draws), args.table_only)
    hw = hardware(args.device)
    print(format_report(out, hw))
    if not args.no_mlflow and not args.table_only:
        uri = tracking.resolve_tracking_uri(args.tracking_uri)
        print(f"logged to {uri}, experiment {EXPERIMENT!r}, run {log(uri, out, hw)}")
    return 0
