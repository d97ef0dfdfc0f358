#!/usr/bin/env bash
# The GPU check of docs/packs.md, "The GPU path" (issue 47): the CUDA tests, a profile of the pack step (kernel launches
# and host synchronisations per step, GPU busy time against wall time: the step a device runs ahead on beside the host
# path at 1,024 configurations of B = 1,024, and on the benchmark's mix at 4,096), the throughput table at packs of 256,
# 1,024 and 4,096 (own batches at 256 and 1,024), and one pack of 4,096 against four trials of 1,024 sharing the GPU.
# About 7.5 minutes on one H100 (9.5 at most: the steps' time limits); everything it prints goes to $OUT (gpu_check.log,
# summary.md).
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
    echo; echo '```'; grep -E "passed|failed|error|Error|PROFILE|configurations/hour|TOGETHER|Terminated|GiB" "$LOG"; echo '```'
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

step "profile: the pack step a device runs ahead on, and the host path ($FOUR configurations, B = 1,024, T = 100); the ahead step on the benchmark's mix of $ONE"
timeout 80 "$PY" - "$DEVICE" "$PROFILE_KIT" "$KIT" "$ONE" <<'EOF'
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


def measure(runs, ahead: bool, name: str) -> None:
    engine = LagrangianEngine(runs, ahead=ahead)
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
measure(runs(), True, f"ahead: K={K}, B=1024")
measure(runs(), False, f"host path: K={K}, B=1024")
mix = tp._runs(ds, "raco-dp", mix_k, device, 100, cache, draws="shared", kit=mix_kit)  # the table's sampled mix; those with T < 84 finish
# inside the window and are masked (at 4,096 about one in five): as in the benchmark, where they are left out only later
sizes = [float(r.ctx.hyper.batch_size) for r in mix]
measure(mix, True, f"ahead on the benchmark's mix: K={mix_k}, shared batches, B from {min(sizes):.0f} to {max(sizes):.0f} "
        f"(mean {statistics.mean(sizes):.0f}), T up to {max(r.ctx.steps for r in mix)}")
EOF

step "throughput table, shared batches (sizes 1 $SIZES)"
timeout 150 "$PY" -m raco_bench.cli bench throughput --device "$DEVICE" --kit "$KIT" --sizes 1 $SIZES --singles "$SINGLES" --draws shared \
  --table-only --no-mlflow
step "throughput table, own batches (sizes $OWN)"
timeout 90 "$PY" -m raco_bench.cli bench throughput --device "$DEVICE" --kit "$KIT" --sizes $OWN --singles "$SINGLES" --draws own \
  --table-only --no-mlflow

step "one pack of $ONE against four trials of $FOUR sharing the device (shared batches)"
cat > /tmp/gpu_check_pack.py <<'EOF'
import sys, time
sys.modules["dp_accounting"] = None  # the kit answers the accountant: a run the kit does not answer fails here, not slowly
import torch
from raco_bench.benchmarks import throughput as tp
from raco_bench.data import load_dataset
from raco_bench.training.pack import train_runs
from raco_bench.privacy.calibration import CalibrationCache

device, K, kit = sys.argv[1], int(sys.argv[2]), tp.Kit.load(sys.argv[3])
answers = kit.answers()  # held: a context manager dropped at once would close and carry nothing
answers.__enter__()  # the accountant answers the kit's runs from the kit, for this whole process
torch.set_num_threads(1)
ds, cache = load_dataset("adult"), CalibrationCache()
tp.warm_up(ds, "raco-dp", device, cache, kit)
runs = tp._runs(ds, "raco-dp", K, device, 100, cache, draws="shared", kit=kit)
print("READY", flush=True)
sys.stdin.readline()  # the packs sharing the device start together
cuda = device == "cuda"
torch.cuda.reset_peak_memory_stats() if cuda else None
held = torch.cuda.memory_allocated() if cuda else 0  # the dataset and the prepared runs, before the pack trains
start = time.time()
train_runs(runs)
torch.cuda.synchronize() if cuda else None
end = time.time()
memory = ""
if cuda:  # the pack's measured peak on the device beside the memory model's on-device estimate (raco_bench/training/pack_memory.py)
    from raco_bench.benchmarks.pack_memory import model_for
    model = model_for(runs)
    peak = torch.cuda.max_memory_allocated()
    memory = (f", device peak {peak / 2**30:.3f} GiB allocated (the dataset and prepared runs included; {(peak - held) / 2**30:.3f} "
              f"beyond them) and {torch.cuda.max_memory_reserved() / 2**30:.3f} GiB reserved by the process, against the model's "
              f"{model.on_device / 2**30:.3f} GiB "
              f"(tables {model.tables / 2**30:.3f}, state {model.state / 2**30:.3f}, step {model.step / 2**30:.3f}, evaluation {model.evaluation / 2**30:.3f})")
print(f"PACK K={K}: {end - start:.1f} s, {3600 * K / (end - start):,.0f} configurations/hour{memory}; span {start:.3f} {end:.3f}", flush=True)
EOF
timeout 170 "$PY" - "$PY" "$DEVICE" "$ONE" "$FOUR" "$KIT" <<'EOF'
import subprocess, sys, time
py, device, one, four, kit = sys.argv[1:]

def together(sizes):
    """Start a process per pack size, wait until each has prepared its pack, then start them at once: the wall time."""
    procs = [subprocess.Popen([py, "/tmp/gpu_check_pack.py", device, str(k), kit], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for k in sizes]
    for proc in procs:
        assert proc.stdout.readline().strip() == "READY"
    for proc in procs:
        proc.stdin.write("go\n"); proc.stdin.flush()
    lines = [proc.stdout.read().strip() for proc in procs]
    spans = [[float(x) for x in line.split("span ")[1].split()] for line in lines]
    for line in lines:
        print("  ", line.split("; span")[0])
    return max(e for _, e in spans) - min(s for s, _ in spans)  # the first start to the last end, on the machine's clock

for sizes in ([int(one)], [int(four)] * 4):
    wall = together(sizes)
    print(f"TOGETHER {len(sizes)} x {sizes[0]}: {wall:.1f} s, {3600 * sum(sizes) / wall:,.0f} configurations/hour")
EOF
} 2>&1 | tee "$LOG"

summary  # also on the way out of a run stopped at its time limit (the trap above)
cat "$OUT/summary.md"
