"""How closely a graphed pack (lanes of similar batch sizes) agrees with the same pack op by op, and with its runs
alone, on the benchmark kit's mix (docs/packs.md, "Graphed steps", "Agreement"): every ``stride``-th configuration of
the kit's pack of 1,024 (shared batches), trained on this CPU, with the graph's body run eagerly.

    python scripts/graph_agreement.py 64          # 16 configurations, with their runs alone
    python scripts/graph_agreement.py 8 --no-alone  # 128 configurations, packs only

Prints the relative difference of each configuration's final weights (largest absolute difference over the largest
absolute weight) and their median, 90th percentile and maximum. Needs gpu/kit.json.gz (scripts/gpu_check.sh --prepare).
"""

from __future__ import annotations

import sys
import time

import numpy as np
import torch

from raco_bench.benchmarks import throughput as tp
from raco_bench.data import load_dataset
from raco_bench.privacy.calibration import CalibrationCache
from raco_bench.training.loop import execute
from raco_bench.training.pack import train_pack


def relative(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-12))


def main(stride: int, alone: bool) -> None:
    kit = tp.Kit.load("gpu/kit.json.gz")
    answers = kit.answers()  # held for the whole process: the accountant answers the kit's runs from the kit
    answers.__enter__()
    torch.set_num_threads(1)
    ds, cache = load_dataset("adult"), CalibrationCache()
    runs = tp._runs(ds, "raco-dp", 1024, "cpu", 100, cache, draws="shared", kit=kit)[::stride]
    print(f"{len(runs)} configurations; B {sorted({r.ctx.hyper.batch_size for r in runs})}, T up to {max(r.ctx.steps for r in runs)}")
    trained = {}
    for name, train in [("op by op", lambda: train_pack(runs, ahead=True, graph=False)), ("graphed", lambda: train_pack(runs, ahead=True, graph=True)),
                        *([("alone", lambda: [execute(r) for r in runs])] if alone else [])]:
        start = time.perf_counter()
        trained[name] = [r.final_params["weight"] for r in train()]
        print(f"{name}: {time.perf_counter() - start:.1f} s")
    pairs = [("graphed", "op by op")] + ([("op by op", "alone"), ("graphed", "alone")] if alone else [])
    for a, b in pairs:
        d = np.array([relative(x, y) for x, y in zip(trained[a], trained[b])])
        print(f"{a} against {b}: median {np.median(d):.1e}, 90 % {np.quantile(d, 0.9):.1e}, largest {d.max():.1e}")
    for k, run in enumerate(runs):
        print(k, f"B {run.ctx.hyper.batch_size}", f"T {run.ctx.steps}", *(f"{a}/{b} {relative(trained[a][k], trained[b][k]):.1e}" for a, b in pairs))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 64, "--no-alone" not in sys.argv)
