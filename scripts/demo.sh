#!/usr/bin/env bash
# Set up (if needed) and run the demo: the sample project on the embedded Spark, step by step.
# Extra arguments go to scripts/demo.py (e.g. --steps 10 --rate 500; --help lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export DBT_SEND_ANONYMOUS_USAGE_STATS=false
exec .venv/bin/python scripts/demo.py "$@"
