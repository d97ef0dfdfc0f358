#!/usr/bin/env bash
# Set up the virtual environment (CPU torch first) and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh test
exec "$VENV/bin/python" -m pytest tests "$@"
