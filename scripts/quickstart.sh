#!/usr/bin/env bash
# Set up a virtual environment (CPU torch first) and run the main job: a small Adult sweep of RaCO-DP,
# DP-FERMI and non-private SGDA on an embedded local Ray with a SQLite MLflow store, then its report.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${RACO_BENCH_VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then python3 -m venv "$VENV"; fi
"$VENV/bin/python" -m pip install -q --upgrade pip
# torch==2.13.0 is a CPU build on these machines; a bare "torch" requirement would pull a multi-GB CUDA build.
"$VENV/bin/python" -m pip install -q "torch==2.13.0" || "$VENV/bin/python" -m pip install -q "torch>=2.4,<2.15" --index-url https://download.pytorch.org/whl/cpu
"$VENV/bin/python" -m pip install -q -e .
if [ -z "${RACO_BENCH_DATA:-}" ] && [ -d ../shared/data ]; then export RACO_BENCH_DATA="$(cd ../shared/data && pwd)"; fi
"$VENV/bin/raco-bench" datasets
"$VENV/bin/python" sweeps/adult.py --smoke
exec "$VENV/bin/raco-bench" report --experiment adult-demographic-parity-smoke --out reports/adult-demographic-parity-smoke/
