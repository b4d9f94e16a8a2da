"""The sample project on a standalone cluster, and two runs at once through a Thrift Server on it.

Starts a standalone master and worker on loopback from the pyspark installation
(`scripts/spark_servers.py`) and runs the sample project's first steps with `method: session`
pointed at the cluster (the dbt process is the driver, the cluster's executors run the jobs and
hold the step's local checkpoints), then `dbt test`: every view equals its recompute
(`matches_recompute`, LATENESS applied) and the quarantine and waterline tests hold. Then it
starts a Spark Thrift Server with Delta on the same cluster and makes two `dbt run`s through
`method: thrift` step the same models at once, twice (first steps, then steps over state): each
run succeeds or fails with a clear message, and every table shows whole steps applied once.
Each run is a separate process with its own warehouse and metastore. The step times of the
session run are written to `logs/cluster_step_times.json` (and printed, see `-s`).

The embedded Spark as the sample project's default profile runs it (the warm server) is
test_demo.py's; steps over Spark Connect are compared with the in-process session model by
model in test_differential.py, test_lateness.py and test_crash_recovery.py (the `connect_server`
fixture), and two runs at once through the warm server are test_concurrency.py's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

import pytest

from scripts.spark_servers import StandaloneCluster, ThriftServer
from tests.functional.test_concurrency import ROUNDS, assert_consistent, two_runs_at_once

ROOT = Path(__file__).resolve().parents[2]

STEPS = int(os.environ.get("STREAMSQL_CLUSTER_STEPS", "2"))
RATE = int(os.environ.get("STREAMSQL_CLUSTER_RATE", "50"))
RUN_TIMEOUT = 1500
RESULTS_FILE = ROOT / "logs" / "cluster_step_times.json"
# As in the sample project's local target: tiny data, so no code generation or adaptive plans.
SMALL_DATA = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.sql.shuffle.partitions": "1",
    "spark.sql.adaptive.enabled": "false",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    servers = StandaloneCluster(
        tmp_path_factory.mktemp("spark_cluster"), worker_cores=2, worker_memory="2g"
    )
    try:
        servers.start()  # a failure carries the server's log tail
        yield servers
    finally:
        servers.stop()


def run_steps(work_dir: Path, target: Dict[str, Any]) -> Dict[str, Any]:
    """The sample project's steps in a process of its own, then `dbt test`; its report."""
    work_dir.mkdir(parents=True, exist_ok=True)
    out = work_dir / "result.json"
    env = dict(os.environ, DBT_SEND_ANONYMOUS_USAGE_STATS="false", SPARK_LOCAL_IP="127.0.0.1")
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.sample_steps",
            "--work-dir",
            str(work_dir),
            "--target",
            json.dumps(target),
            "--steps",
            str(STEPS),
            "--rate",
            str(RATE),
            "--out",
            str(out),
            "--test",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )
    dbt_log = work_dir / "project" / "logs" / "dbt.log"
    assert completed.returncode == 0, (
        f"{target['method']} run failed:\n{completed.stderr[-6000:]}\n(dbt's log: {dbt_log})"
    )
    report = json.loads(out.read_text())
    for step in report["steps"]:
        assert len(step["models"]) == 7, step
        assert {m["status"] for m in step["models"].values()} == {"success"}, step
    return report


def step_times(report: Dict[str, Any]) -> Dict[str, Any]:
    return {
        "total_seconds": report["total_seconds"],
        "steps": [
            {
                "step": s["step"],
                "run_seconds": s["run_seconds"],
                "models": {name: m["step_seconds"] for name, m in s["models"].items()},
            }
            for s in report["steps"]
        ],
    }


# The plan each sample model steps with (a recompute would also equal its query).
SAMPLE_PLANS = {
    "stg_purchases": "linear",
    "stg_sensors": "linear",
    "hourly_spend": "aggregate",
    "hourly_temperature": "aggregate",
    "orders_enriched": "linear",
    "orders_shipped_within_hour": "linear",
    "hourly_order_totals": "aggregate",
}


@pytest.mark.functional
@pytest.mark.timeout(2 * RUN_TIMEOUT + 600)
def test_sample_project_on_a_cluster_and_two_runs_at_once_over_thrift(cluster, tmp_path):
    report = run_steps(
        tmp_path / "cluster",
        {
            "type": "streamsql",
            "method": "session",
            "keep_warm": False,  # Spark in the run's process, its executors on the cluster
            "schema": "demo",
            "threads": 4,
            "master": cluster.url,
            "warehouse_dir": str(tmp_path / "cluster" / "warehouse"),
            "server_side_parameters": {
                "spark.driver.memory": "2g",
                "spark.executor.memory": "1g",
                **SMALL_DATA,
            },
        },
    )
    times = step_times(report)
    RESULTS_FILE.parent.mkdir(exist_ok=True)
    RESULTS_FILE.write_text(json.dumps({"steps": STEPS, "rate": RATE, "cluster": times}, indent=1))
    print(json.dumps(times, indent=1))

    # every view equals its recompute, and the quarantine and waterline tests pass
    failed = {name: status for name, status in report["tests"].items() if status != "pass"}
    assert not failed, failed
    assert sum(name.startswith("matches_recompute_") for name in report["tests"]) == len(
        SAMPLE_PLANS
    ), sorted(report["tests"])
    for name in ("stg_purchases", "stg_sensors", "orders_enriched"):  # rows reached them
        assert sum(s["models"][name]["applied"] or 0 for s in report["steps"]) > 0, name
    for step in report["steps"]:
        plans = {name: model["plan"] for name, model in step["models"].items()}
        assert plans == SAMPLE_PLANS, (step["step"], plans)
    second = report["steps"][-1]["models"]
    assert all(model["changes_read"] for model in second.values()), second

    # The session run's application has ended, so the worker's cores are free for the server's.
    thrift = ThriftServer(tmp_path / "thrift_server", master=cluster.url)
    try:
        thrift.start()
        # Two runs of the same models at once: through the server nothing serializes them.
        concurrent = {
            "type": "streamsql",
            "method": "thrift",
            "host": "127.0.0.1",
            "port": thrift.port,
            "user": "dbt",
            "schema": "conc_thrift",
            "connect_retries": 3,
            "server_side_parameters": SMALL_DATA,
        }
        # at least twice, the second over state: STREAMSQL_CONCURRENCY_ROUNDS=5 takes 5 in a row
        for attempt in range(max(2, ROUNDS)):
            outputs = two_runs_at_once(tmp_path / f"concurrent_{attempt}", concurrent)
            assert_consistent(tmp_path / f"concurrent_{attempt}", concurrent, outputs)
    finally:
        thrift.stop()
