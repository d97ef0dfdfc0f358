#!/usr/bin/env bash
# Sourced by quickstart.sh and test.sh: create the virtual environment and install the project.
# Usage: source scripts/setup.sh [EXTRA]   (EXTRA: an optional-dependency group, e.g. test)
set -euo pipefail
VENV="${RACO_BENCH_VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then python3 -m venv "$VENV"; fi
"$VENV/bin/python" -m pip install -q --upgrade pip
# torch==2.13.0 is a CPU build on these machines; a bare "torch" requirement would pull a multi-GB CUDA build.
"$VENV/bin/python" -m pip install -q "torch==2.13.0" || "$VENV/bin/python" -m pip install -q "torch>=2.4,<2.15" --index-url https://download.pytorch.org/whl/cpu
"$VENV/bin/python" -m pip install -q -e ".${1:+[$1]}"
if [ -z "${RACO_BENCH_DATA:-}" ] && [ -d ../shared/data ]; then export RACO_BENCH_DATA="$(cd ../shared/data && pwd)"; fi
