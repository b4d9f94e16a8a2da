#!/usr/bin/env bash
# Set up (if needed) and run the demo: the sample project on the embedded Spark.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cd sample_project
export DBT_SEND_ANONYMOUS_USAGE_STATS=false
../.venv/bin/dbt build --profiles-dir .
