#!/usr/bin/env bash
# Set up a virtual environment (CPU torch first) and run the main job.
# Until the sweep and report issues land, the main job is one RaCO-DP training on Adult at epsilon = 1.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${RACO_BENCH_VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then python3 -m venv "$VENV"; fi
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q "torch==2.13.0" || "$VENV/bin/python" -m pip install -q "torch>=2.4,<2.15" --index-url https://download.pytorch.org/whl/cpu
"$VENV/bin/python" -m pip install -q -e .
if [ -z "${RACO_BENCH_DATA:-}" ] && [ -d ../shared/data ]; then export RACO_BENCH_DATA="$(cd ../shared/data && pwd)"; fi
mkdir -p runs
"$VENV/bin/raco-bench" datasets
exec "$VENV/bin/raco-bench" train --dataset adult --method raco-dp --constraint demographic-parity \
  --gamma 0.05 --epsilon 1 --delta 1e-5 --seed 0 --json runs/adult-raco-dp-eps1.json
