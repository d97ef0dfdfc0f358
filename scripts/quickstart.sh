#!/usr/bin/env bash
# Set up the virtual environment (CPU torch first) and run the main job: a small Adult sweep of every default
# method (RaCO-DP, DP-FERMI, SGDA, PF-LD, DP post-processing, budget tailoring) on an embedded local Ray with a
# SQLite MLflow store, then its report.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
"$VENV/bin/raco-bench" datasets
"$VENV/bin/python" sweeps/adult.py --demo
exec "$VENV/bin/raco-bench" report --experiment adult-demographic-parity-demo --out reports/adult-demographic-parity-demo/
