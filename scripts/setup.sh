#!/usr/bin/env bash
# Create .venv and install dbt-streamsql with its test and demo dependencies. Idempotent.
# Needs: Python 3.10+ and Java 17+. Delta Lake's jars are fetched from Maven Central on first use.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if ! command -v java >/dev/null 2>&1 && [ -z "${JAVA_HOME:-}" ]; then
  echo "dbt-streamsql needs Java 17+ for Spark: install a JDK (e.g. apt-get install openjdk-17-jdk-headless)." >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv"
  "$PYTHON" -m venv .venv
fi
echo "==> installing dbt-streamsql and its dependencies into .venv"
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[dev,thrift]"
.venv/bin/python -c "import dbt.adapters.streamsql, pyspark, delta; print('==> ready: pyspark', pyspark.__version__)"
