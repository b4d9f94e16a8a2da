#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite on real Spark + Delta. Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -p no:cacheprovider "$@"
