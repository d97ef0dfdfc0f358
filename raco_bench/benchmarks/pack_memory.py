"""`raco-bench bench memory`: a pack's measured peak memory beside the memory model (raco_bench/training/pack_memory.py).

Each case runs in a fresh process: it loads the dataset, prepares K RaCO-DP runs (``--method``: another method with a
batched engine) as a sweep's phase 1 does (sampled configurations × 5 seeds, ε = 1, T calibrated, evaluation every
``--eval-every`` steps, shared batch draws), trains a small pack on the 3,000-row synthetic task first (its compiled
kernels, :mod:`raco_bench.jit`, are the worker's, as its imports are: a sweep's worker loads them in its first pack;
the synthetic task's small arrays leave next to nothing of torch's working set behind), hands the heap's freed memory
back to the system (otherwise the pack would reuse what the calibrations and the warm-up freed, and its growth would
understate it), reads its resident memory, then trains the pack while a thread samples the resident memory every 5 ms.
The pack's peak is the largest sample minus the memory before training (the process, the dataset, the kernels and the
prepared runs are not the pack's). Measurements are for the docs' table, never asserted in tests.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import threading
import time

from raco_bench.benchmarks import unpackable
from raco_bench.methods import DEFAULT_METHOD

PAGE = os.sysconf("SC_PAGE_SIZE")


def resident() -> int:
    """This process's resident memory in bytes (Linux /proc)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * PAGE


def model_for(runs: list):
    """The memory model's estimate for a pack of ``runs`` (their expected batch sizes and numbers of evaluations)."""
    from raco_bench.training.pack_memory import estimate, evaluations_of

    first = runs[0].ctx
    evals = [evaluations_of(r.ctx.steps, r.ctx.config.eval_every, r.ctx.config.selection_checkpoints if r.ctx.config.checkpoint == "private" else 0)
             for r in runs]
    return estimate([float(r.ctx.hyper.batch_size) for r in runs], evals, first.n_train, first.dataset.n_features, first.dataset.n_classes,
                    first.rates.n_parts, max(len(s.y) for s in runs[0].evals.values()), gpu=first.device.type == "cuda",
                    selection=any(r.ctx.config.checkpoint == "private" for r in runs),
                    batch_streams=len({(r.ctx.batch_seed, r.ctx.hyper.batch_size) for r in runs}))


def _case(dataset: str, k: int, eval_every: int, out, method: str) -> None:
    import torch

    from raco_bench.benchmarks.throughput import _runs, warm_up
    from raco_bench.data import load_dataset
    from raco_bench.packs.allocator import release_freed_memory
    from raco_bench.privacy.calibration import CalibrationCache
    from raco_bench.training.pack import train_runs

    torch.set_num_threads(1)
    ds = load_dataset(dataset)
    cache = CalibrationCache()
    warm_up(load_dataset("synthetic"), method, "cpu", cache)  # the compiled kernels are the worker's, as its imports are ("before"),
    # loaded through a pack on the 3,000-row synthetic task, whose few small arrays leave next to nothing in the heap
    runs = _runs(ds, method, k, "cpu", eval_every, cache)
    release_freed_memory()  # what the calibrations and the warm-up freed, kept by the allocator, would hide the pack's peak
    before, peak, done = resident(), [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], resident())
            time.sleep(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    train_runs(runs)
    seconds = time.perf_counter() - t0
    done.set()
    sampler.join()
    model = model_for(runs)
    out.put({"dataset": dataset, "configurations": k, "seconds": seconds, "before_mb": before / 2**20, "measured_mb": (peak[0] - before) / 2**20,
             "model_mb": model.total / 2**20, "parts_mb": {f: getattr(model, f) / 2**20 for f in ("tables", "state", "step", "evaluation", "history")}})


def _result(q, proc) -> dict:
    """The case's result, or an error if its process ended without one (it crashed: its traceback is above)."""
    import queue

    while True:
        try:
            return q.get(timeout=1.0)
        except queue.Empty:
            if not proc.is_alive():
                raise RuntimeError(f"the measuring process ended with exit code {proc.exitcode} and no result") from None


def measure(datasets: list[str], sizes: list[int], eval_every: int, method: str = DEFAULT_METHOD) -> list[dict]:
    ctx = mp.get_context("spawn")
    rows = []
    for dataset in datasets:
        for k in sizes:
            q = ctx.Queue()
            proc = ctx.Process(target=_case, args=(dataset, k, eval_every, q, method))
            proc.start()
            rows.append(_result(q, proc))
            proc.join()
            r = rows[-1]
            print(f"{method} on {dataset} K={k}: measured {r['measured_mb']:.0f} MB, model {r['model_mb']:.0f} MB "
                  f"({r['model_mb'] / max(r['measured_mb'], 1e-9):.2f}×), process before the pack {r['before_mb']:.0f} MB, {r['seconds']:.0f} s", flush=True)
    return rows


def format_report(rows: list[dict]) -> str:
    lines = ["| dataset | K | measured peak MB | model MB | model / measured | tables | state | step | evaluation | history |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        p = r["parts_mb"]
        lines.append(f"| {r['dataset']} | {r['configurations']} | {r['measured_mb']:.0f} | {r['model_mb']:.0f} | {r['model_mb'] / r['measured_mb']:.2f} | "
                     f"{p['tables']:.0f} | {p['state']:.0f} | {p['step']:.0f} | {p['evaluation']:.0f} | {p['history']:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="raco-bench bench memory", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", nargs="+", default=["adult", "heart"])
    p.add_argument("--sizes", type=int, nargs="+", default=[64, 256])
    p.add_argument("--eval-every", type=int, default=25, help="evaluation interval (default 25, the papers')")
    p.add_argument("--method", default=DEFAULT_METHOD, help=f"a method with a batched engine (default {DEFAULT_METHOD})")
    args = p.parse_args(argv)
    if (why := unpackable(args.method)) is not None:
        p.error(f"--method {args.method}: {why}")
    print(format_report(measure(args.datasets, args.sizes, args.eval_every, args.method)))
    return 0
