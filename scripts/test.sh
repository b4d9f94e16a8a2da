#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite on real Spark + Delta. Extra args go to pytest.
# The suite runs in STREAMSQL_TEST_WORKERS pytest processes (default 2, one per core here; 0 runs
# it in this process), a test file to a process: each has its own Spark session and warehouse.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
WORKERS="${STREAMSQL_TEST_WORKERS:-2}"
.venv/bin/python scripts/warm_jars.py
if [ "$WORKERS" != "0" ]; then
  exec .venv/bin/python -m pytest -p no:cacheprovider -n "$WORKERS" --dist loadfile "$@"
fi
exec .venv/bin/python -m pytest -p no:cacheprovider "$@"
