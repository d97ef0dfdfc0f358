#!/usr/bin/env bash
# The GPU check of docs/packs.md, "The GPU path" and "Graphed steps": the CUDA tests, a profile of the pack step (kernel
# launches and host synchronisations per step, GPU busy time against wall time: the ahead step replayed as a CUDA graph
# in lanes of similar batch sizes, the same step launched op by op, and the host path, at 1,024 configurations of
# B = 1,024; the graphed step on the benchmark's mix at 4,096), then the benchmark's mix trained as one pack with and
# without the graph, side by side, at 1,024 and 4,096 configurations (configurations/hour, the device's peak and
# reserved memory beside the memory model's, and the configuration that differs most trained alone). 299 s and 286 s on
# one H200 before that run alone was added (8 minutes at most: the steps' time limits); everything it prints goes to
# $OUT (gpu_check.log, summary.md).
#
# 1. Here, where the suite is installed (CPU, Ray, dp-accounting), once:
#      scripts/gpu_check.sh --prepare
#    writes gpu/ (.gitignore leaves it out of commits; the device tool sends it when carried): kit.json.gz (the benchmark's
#    configurations, drawn and calibrated here, with the accountant's answers), kit-profile.json.gz (1,024 configurations
#    at B = 1,024 for the profile), data/adult (the dataset's files) and wheels/ (the dp-accounting wheel the CUDA tests
#    prepare runs with; the benchmark itself needs none). It takes long on 2 cores: every configuration is prepared twice.
# 2. On the device (the session's `run` tool): command "bash scripts/gpu_check.sh", carry ["gpu"], timeout_s 590.
#    The GPU image has torch, numpy, numba, pandas and scipy, and no Ray, MLflow or dp-accounting.
# --device cpu: the same steps on this CPU at packs of 4 and 8, from a kit of those sizes (the dry path: it checks
# the script, not the numbers; with --prepare it writes that small kit).
set -uo pipefail
cd "$(dirname "$0")/.."

DEVICE=cuda
PREPARE=0
for arg in "$@"; do
  case "$arg" in
    --prepare) PREPARE=1 ;;
    --device=*) DEVICE="${arg#--device=}" ;;
    cpu|cuda) DEVICE="$arg" ;;
    --device) ;;
    *) echo "gpu_check.sh: unknown argument $arg (use --prepare, --device cpu|cuda)" >&2; exit 2 ;;
  esac
done
if [ "$DEVICE" = cpu ]; then
  SIZES="4 8"; OWN="4 8"; ONE=8; FOUR=4; KIT=gpu/kit-cpu.json; PROFILE_KIT=gpu/kit-cpu.json; SINGLES=2
else  # sized by the H100 run of 2026-11-27 (docs/packs.md, "The GPU path"): a pack of 16,384 of the mix, or own batches at
  # 4,096, takes longer than the whole check may (about 5 and 2.5 minutes there), so neither is in the table
  SIZES="256 1024 4096"; OWN="256 1024"; ONE=4096; FOUR=1024; KIT=gpu/kit.json.gz; PROFILE_KIT=gpu/kit-profile.json.gz; SINGLES=4
fi
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}

if [ "$PREPARE" = 1 ]; then
  mkdir -p gpu/data gpu/wheels
  DATA=${RACO_BENCH_DATA:?set RACO_BENCH_DATA to the folder holding adult/}
  cp -r "$DATA/adult" gpu/data/
  "$PY" -m raco_bench.cli bench throughput --write-kit "$KIT" --sizes 1 $SIZES --singles "$SINGLES" || exit 1
  [ "$PROFILE_KIT" = "$KIT" ] || "$PY" -m raco_bench.cli bench throughput --write-kit "$PROFILE_KIT" --sizes "$FOUR" --singles 1 || exit 1
  if [ "$DEVICE" = cuda ]; then
    "$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 -d gpu/wheels dp-accounting==0.6.0 || exit 1
  fi
  du -sh gpu
  exit 0
fi

OUT=${OUT:-gpu/out}
mkdir -p "$OUT"
LOG="$OUT/gpu_check.log"
export RACO_BENCH_DATA="$PWD/gpu/data" RACO_BENCH_OFFLINE=1 RACO_BENCH_CACHE="$PWD/gpu/cache" PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD:/tmp/gpu_check_site${PYTHONPATH:+:$PYTHONPATH}"
[ -f "$KIT" ] || { echo "no $KIT: run scripts/gpu_check.sh --prepare ${DEVICE/cuda/} first, where the suite is installed" | tee "$LOG"; exit 1; }
step() { echo; echo "=== $1 ($(date +%T))"; }
summary() {  # the lines worth reading, from the log so far
  {
    echo "# GPU check $(date -u +%F) on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null || echo "$DEVICE")"
    echo; echo '```'; grep -E "passed|failed|error|Error|PROFILE|MIX|Terminated" "$LOG"; echo '```'
  } > "$OUT/summary.md"
}
trap summary TERM INT
{
step "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || echo "no nvidia-smi"
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else '')"
uptime

step "CUDA tests (tests/test_packs_cuda.py)"
if ls gpu/wheels/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --target /tmp/gpu_check_site gpu/wheels/*.whl
fi
if [ "$DEVICE" = cuda ]; then
  timeout 80 "$PY" -m pytest -q -x -p no:cacheprovider tests/test_packs_cuda.py 2>&1 | tail -15
else
  echo "(skipped on $DEVICE: the tests skip themselves without CUDA)"
fi

step "profile: the pack step a device runs ahead on, graphed and op by op, and the host path ($FOUR configurations, B = 1,024, T = 100); the graphed step on the benchmark's mix of $ONE"
timeout 110 "$PY" - "$DEVICE" "$PROFILE_KIT" "$KIT" "$ONE" <<'EOF'
import json, statistics, sys, time
sys.modules["dp_accounting"] = None  # the kits answer the accountant: a run the kit does not answer fails here, not slowly
import torch
from torch.profiler import ProfilerActivity, profile
from raco_bench.benchmarks import throughput as tp
from raco_bench.data import load_dataset
from raco_bench.methods.lagrangian.engine import LagrangianEngine
from raco_bench.privacy.calibration import CalibrationCache

device, kit, mix_kit, mix_k = sys.argv[1], tp.Kit.load(sys.argv[2]), tp.Kit.load(sys.argv[3]), int(sys.argv[4])
held = [kit.answers(), mix_kit.answers()]  # held: a context manager dropped at once would close and carry nothing
for answers in held:
    answers.__enter__()  # the accountant answers the kits' runs from the kits, for this whole process
K = max(json.loads(r)[1] for r in kit.runs if json.loads(r)[3] == {"batch_size": 1024})
torch.set_num_threads(1)
ds, cache = load_dataset("adult"), CalibrationCache()
sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "aten::_local_scalar_dense")


def measure(runs, ahead: bool, name: str, graph: bool = False) -> None:
    engine = LagrangianEngine(runs, ahead=ahead, graph=graph)
    for _ in range(4):  # the first block of draws, allocations
        engine.step()
    engine.settle(); sync()
    n, times = 24, []
    for _ in range(2):
        t0 = time.perf_counter()
        for _ in range(n):
            engine.step()
        engine.settle(); sync()
        times.append((time.perf_counter() - t0) / n)
    n = 32  # steps 53 to 84: one block of draws (at step 65) among them, as one in 32 steps is
    with profile(activities=activities) as prof:
        t0 = time.perf_counter()
        for _ in range(n):
            engine.step()
        engine.settle(); sync()
        wall = time.perf_counter() - t0
    ev = prof.key_averages()
    kernels = sum(e.count for e in ev if e.device_type.name == "CUDA")
    busy = sum(e.self_device_time_total for e in ev if e.device_type.name == "CUDA") / 1e6
    syncs = sum(e.count for e in ev if e.key in SYNCS)
    ops = sum(e.count for e in ev if e.key.startswith("aten::"))
    step = statistics.median(times)
    print(f"PROFILE {name}: {step * 1e3:.3f} ms per step (2 x 24 steps, no profiler), {3600 / (100 * step) * len(runs):,.0f} configurations "
          f"of 100 steps an hour; per step: {kernels / n:.0f} GPU kernels and copies, {syncs / n:.2f} host synchronisations, {ops / n:.0f} "
          f"aten operations (nested ones included); GPU busy {busy:.3f} s of {wall:.3f} s wall under the profiler "
          f"({100 * busy / max(wall, 1e-9):.0f} %)")
    print(ev.table(sort_by="self_cuda_time_total" if device == "cuda" else "self_cpu_time_total", row_limit=12, max_name_column_width=48))


runs = lambda: tp._runs(ds, "raco-dp", K, device, 10**6, cache, {"batch_size": 1024}, steps=100, kit=kit)  # noqa: E731 - all live to T = 100
measure(runs(), True, f"ahead, graphed: K={K}, B=1024", graph=True)
measure(runs(), True, f"ahead, op by op: K={K}, B=1024")
measure(runs(), False, f"host path: K={K}, B=1024")
mix = tp._runs(ds, "raco-dp", mix_k, device, 100, cache, draws="shared", kit=mix_kit)  # the table's sampled mix; those with T < 84 finish
# inside the window and are masked (at 4,096 about one in five): as in the benchmark, where they are left out only later
sizes = [float(r.ctx.hyper.batch_size) for r in mix]
measure(mix, True, graph=True, name=f"ahead, graphed, on the benchmark's mix: K={mix_k}, shared batches, B from {min(sizes):.0f} to {max(sizes):.0f} "
        f"(mean {statistics.mean(sizes):.0f}), T up to {max(r.ctx.steps for r in mix)}")
EOF

step "the benchmark's mix as one pack, graphed and op by op, side by side (shared batches; $FOUR, then $ONE)"
timeout 240 "$PY" - "$DEVICE" "$KIT" "$FOUR" "$ONE" <<'EOF'
import sys, time
sys.modules["dp_accounting"] = None  # the kit answers the accountant: a run the kit does not answer fails here, not slowly
import torch
from raco_bench.benchmarks import throughput as tp
from raco_bench.benchmarks.pack_memory import model_for
from raco_bench.data import load_dataset
from raco_bench.privacy.calibration import CalibrationCache
from raco_bench.training.loop import execute
from raco_bench.training.pack import train_pack

device, kit, sizes = sys.argv[1], tp.Kit.load(sys.argv[2]), [int(k) for k in sys.argv[3:]]
answers = kit.answers()  # held: a context manager dropped at once would close and carry nothing
answers.__enter__()  # the accountant answers the kit's runs from the kit, for this whole process
torch.set_num_threads(1)
ds, cache = load_dataset("adult"), CalibrationCache()
cuda = device == "cuda"
sync = torch.cuda.synchronize if cuda else (lambda: None)
tp.warm_up(ds, "raco-dp", device, cache, kit)
train_pack(tp._runs(ds, "raco-dp", sizes[0], device, 100, cache, draws="shared", kit=kit)[:8], ahead=True, graph=True)  # a first capture
for K in sizes:
    seen = {}
    runs = tp._runs(ds, "raco-dp", K, device, 100, cache, draws="shared", kit=kit)  # one word source (a secret key) for both packs
    for graph in (False, True) if K == sizes[0] else (True, False):  # at the larger size the op-by-op pack last: a time limit cuts it
        torch.cuda.empty_cache() if cuda else None
        torch.cuda.reset_peak_memory_stats() if cuda else None
        held = torch.cuda.memory_allocated() if cuda else 0
        sync()
        start = time.perf_counter()
        results = train_pack(runs, ahead=True, graph=graph)  # ahead: the default on a GPU (on the CPU the dry path's choice)
        sync()
        wall = time.perf_counter() - start
        seen[graph] = (wall, [r.final_params["weight"] for r in results])
        memory = ""
        if cuda:
            model, peak = model_for(runs), torch.cuda.max_memory_allocated()
            memory = (f"; device peak {peak / 2**30:.3f} GiB allocated ({(peak - held) / 2**30:.3f} beyond the dataset and prepared runs), "
                      f"{torch.cuda.max_memory_reserved() / 2**30:.3f} GiB reserved, the memory model's {model.on_device / 2**30:.3f} GiB")
        name = "graphed" if graph else "op by op"
        print(f"MIX K={K} {name}: {wall:.1f} s, {3600 * K / wall:,.0f} configurations/hour, mean T {sum(r.steps for r in results) / K:,.0f}{memory}",
              flush=True)
    if len(seen) == 2:
        (a, wa), (b, wb) = seen[False], seen[True]
        rel = lambda x, y: float(abs(x - y).max() / max(abs(y).max(), 1e-12))  # noqa: E731
        diffs = [rel(x, y) for x, y in zip(wb, wa)]
        worst = max(range(K), key=diffs.__getitem__)
        ranked = sorted(diffs)
        print(f"MIX K={K}: graphed / op by op throughput {a / b:.2f}x; final weights, graphed against op by op: median "
              f"{ranked[K // 2]:.1e}, 99 % {ranked[int(0.99 * (K - 1))]:.1e}, largest {diffs[worst]:.1e}", flush=True)
        alone = execute(runs[worst]).final_params["weight"]  # the configuration that differs most, trained alone on the device
        run = runs[worst]
        print(f"MIX K={K} WORST: configuration {worst} (B {run.ctx.hyper.batch_size}, T {run.ctx.steps}, lr {run.ctx.hyper.lr}, "
              f"dual lr {run.ctx.hyper.dual_lr}): graphed against alone {rel(wb[worst], alone):.1e}, op by op against alone "
              f"{rel(wa[worst], alone):.1e}", flush=True)
EOF
} 2>&1 | tee "$LOG"

summary  # also on the way out of a run stopped at its time limit (the trap above)
cat "$OUT/summary.md"
