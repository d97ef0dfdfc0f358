#!/usr/bin/env bash
# Set up the virtual environment (CPU torch first), lint with ruff, and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh test
"$VENV/bin/ruff" check .   # lint: pyproject.toml [tool.ruff]
exec "$VENV/bin/python" -m pytest tests "$@"
