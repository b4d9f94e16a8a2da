"""The sample project gives the same views on a standalone cluster and over Thrift.

Starts a standalone master and worker on loopback from the pyspark installation
(`scripts/spark_servers.py`), runs the sample project's first steps with `method: session` pointed
at the cluster, then starts a Spark Thrift Server with Delta (on the same cluster) and runs the
same steps through `method: thrift`, and compares every incremental view (and LATENESS
quarantine) of the two as multisets, and what each step read and applied. Each run is a separate
process (`tests/sample_steps.py`) with its own warehouse and metastore. The step times of the
runs are written to `logs/cluster_step_times.json` (and printed, see `-s`).

The embedded Spark as the sample project's default profile runs it (the warm server) is
test_demo.py's; steps over Spark Connect are compared with the in-process session model by
model in test_differential.py, test_lateness.py and test_crash_recovery.py (the `connect_server`
fixture), and two runs at once through the warm server are test_concurrency.py's.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

import pytest

from scripts.spark_servers import StandaloneCluster, ThriftServer
from tests.functional.test_concurrency import assert_consistent, two_runs_at_once

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


def differences(expected: Dict[str, list], actual: Dict[str, list]) -> Dict[str, Any]:
    found = {}
    for name in sorted(set(expected) | set(actual)):
        want = collections.Counter(expected.get(name, []))
        got = collections.Counter(actual.get(name, []))
        if want != got:
            found[name] = {
                "missing": list((want - got).elements())[:5],
                "extra": list((got - want).elements())[:5],
            }
    return found


@pytest.mark.functional
@pytest.mark.timeout(2 * RUN_TIMEOUT + 600)
def test_sample_project_same_views_on_cluster_and_over_thrift(cluster, tmp_path):
    reports: Dict[str, Dict[str, Any]] = {}

    reports["cluster"] = run_steps(
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

    # The session run's application has ended, so the worker's cores are free for the server's.
    thrift = ThriftServer(tmp_path / "thrift_server", master=cluster.url)
    try:
        thrift.start()
        reports["thrift"] = run_steps(
            tmp_path / "thrift",
            {
                "type": "streamsql",
                "method": "thrift",
                "host": "127.0.0.1",
                "port": thrift.port,
                "user": "dbt",
                "schema": "demo",
                "threads": 4,
                "connect_retries": 3,
                "server_side_parameters": SMALL_DATA,
            },
        )
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
        for attempt in ("first", "second"):  # the second: steps 2 and 3, over state
            outputs = two_runs_at_once(tmp_path / f"concurrent_{attempt}", concurrent)
            assert_consistent(tmp_path / f"concurrent_{attempt}", concurrent, outputs)
    finally:
        thrift.stop()

    times = {mode: step_times(report) for mode, report in reports.items()}
    RESULTS_FILE.parent.mkdir(exist_ok=True)
    RESULTS_FILE.write_text(json.dumps({"steps": STEPS, "rate": RATE, "runs": times}, indent=1))
    print(json.dumps(times, indent=1))

    expected = reports["cluster"]["contents"]
    assert set(expected) >= {
        "stg_purchases",
        "stg_sensors",
        "hourly_spend",
        "hourly_temperature",
        "orders_enriched",
        "orders_shipped_within_hour",
        "hourly_order_totals",
        "stg_purchases__late",
    }
    assert all(expected[name] for name in ("stg_purchases", "stg_sensors", "orders_enriched"))
    assert differences(expected, reports["thrift"]["contents"]) == {}
    # The same changes were read and applied, step by step and model by model.
    for mine, theirs in zip(reports["thrift"]["steps"], reports["cluster"]["steps"]):
        for name, model in theirs["models"].items():
            for key in ("plan", "changes_read", "applied", "late", "held"):
                assert mine["models"][name][key] == model[key], (name, key)
