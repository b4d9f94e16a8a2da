"""The demo (scripts/demo.py on sample_project/) in short: a few steps, every dbt test passing.

Runs the driver in a subprocess with a temporary warehouse and target directory, on the sample
project's default profile: the embedded Spark in a warm server (a Spark Connect server of its
own, so it does not touch the session the other functional tests share), stopped at the end.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dbt.adapters.streamsql.spark import warm_server

ROOT = Path(__file__).resolve().parents[2]
STEPS = 2  # the second step is the first incremental one


@pytest.mark.functional
@pytest.mark.timeout(900)
def test_demo_runs_steps_with_every_dbt_test_passing(tmp_path):
    summary = tmp_path / "summary.json"
    chart = tmp_path / "demo.png"
    env = dict(os.environ, DBT_SEND_ANONYMOUS_USAGE_STATS="false")
    env.pop("STREAMSQL_WAREHOUSE_DIR", None)
    server = warm_server.ServerPaths(str(tmp_path / "warehouse"))
    try:
        completed = run_demo(tmp_path, summary, chart, env)
        assert warm_server.ServerState.read(server) is not None, "the demo ran no warm server"
    finally:
        warm_server.stop_server(server)
    output = completed.stdout + completed.stderr[-5000:]
    assert completed.returncode == 0, output

    result = json.loads(summary.read_text())
    assert [row["step"] for row in result["steps"]] == list(range(1, STEPS + 1))
    assert result["failures"] == [], output
    # Every test of the project ran at every step and passed (matches_recompute on each model).
    assert result["tests_total"] > 0 and result["tests_passed"] == result["tests_total"]
    per_step = {row["tests_total"] for row in result["steps"]}
    assert len(per_step) == 1 and per_step.pop() >= 7

    # Each step reports every incremental view; the generator's too-late rows are quarantined.
    for row in result["steps"]:
        assert len(row["models"]) == 7 and row["changes_read"] > 0
    assert sum(row["late"] for row in result["steps"]) > 0
    assert result["steps"][-1]["waterline"] is not None

    assert chart.exists() and chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "stg_purchases__late" in completed.stdout
    assert "stg_purchases__waterline" in completed.stdout
    # after its last step, how late stg_purchases's changes arrived, per rung of LATENESS
    assert "date_time (LATENESS INTERVAL 1 HOUR): " in completed.stdout, output
    assert re.search(r"\n\s*1 hour\s+\d+\.\d\d%\s+\(", completed.stdout), output
    # the shipments source keeps an hour of removed files: the retention guard says so
    assert (
        "shipments keeps 1 hour of history (delta.deletedFileRetentionDuration)" in completed.stdout
    )


def run_demo(tmp_path: Path, summary: Path, chart: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "demo.py"),
            "--steps",
            str(STEPS),
            "--rate",
            "100",
            "--warehouse-dir",
            str(tmp_path / "warehouse"),
            "--target-path",
            str(tmp_path / "target"),
            "--chart",
            str(chart),
            "--summary",
            str(summary),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
