"""One pack of the throughput benchmark's mix against the same configurations trained as four packs of a quarter each
(consecutive by batch size, so each narrower): whether the padded width or the longest T decides a pack's time on a
GPU (docs/packs.md, "The GPU path"). Run on the device after `scripts/gpu_check.sh --prepare` here:

    PYTHONPATH=$PWD RACO_BENCH_DATA=$PWD/gpu/data python3 scripts/gpu_pack_split.py cuda gpu/kit.json.gz m1024 s1024

A case: m<K> one pack of the kit's K configurations, s<K> the same K in four packs."""

import sys
import time

sys.modules["dp_accounting"] = None  # the kit answers the accountant: a run the kit does not answer fails here, not slowly


def main(device: str, kit_path: str, cases: list[str]) -> None:
    import torch

    from raco_bench.benchmarks import throughput as tp
    from raco_bench.data import load_dataset
    from raco_bench.privacy.calibration import CalibrationCache
    from raco_bench.training.pack import train_runs

    kit = tp.Kit.load(kit_path)
    with kit.answers():
        torch.set_num_threads(1)
        ds, cache = load_dataset("adult"), CalibrationCache()
        tp.warm_up(ds, "raco-dp", device, cache, kit)
        sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
        for case in cases:
            k, split = int(case[1:]), case[0] == "s"
            t0 = time.time()
            runs = tp._runs(ds, "raco-dp", k, device, 100, cache, draws="shared", kit=kit)
            prepare = time.time() - t0
            sizes, steps = [float(r.ctx.hyper.batch_size) for r in runs], [r.ctx.steps for r in runs]
            q = k // 4 if split else k
            packs = [(min(sizes[i:i + q]), max(sizes[i:i + q]), max(steps[i:i + q])) for i in range(0, k, q)]
            if device == "cuda":
                torch.cuda.reset_peak_memory_stats()
            sync()
            t0 = time.time()
            train_runs(runs, max_pack=q)
            sync()
            wall = time.time() - t0
            peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else 0.0
            print(f"DIAG {'split in 4' if split else 'one pack'} K={k}: {wall:.1f} s train ({prepare:.1f} s prepare), "
                  f"{3600 * k / wall:,.0f} configurations/hour, sum T {sum(steps):,}, peak {peak:.2f} GiB; packs (B min, B max, T max): "
                  f"{packs}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
