#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite on real Spark + Delta. Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Two workers (STREAMSQL_TEST_WORKERS; 0 runs in this process): each test class or module runs
# whole on one worker, so it sets up its dbt project once, in the order tests/conftest.py gives.
# Most of a test's time is waiting on a JVM or a dbt process, so two overlap well on 2 cores.
exec .venv/bin/python -m pytest -p no:cacheprovider -n "${STREAMSQL_TEST_WORKERS:-2}" \
  --dist loadscope --no-loadscope-reorder "$@"
