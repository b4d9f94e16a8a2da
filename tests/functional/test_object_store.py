"""The warehouse on an S3-compatible object store: the sample project and kill -9, tables on S3.

One S3 server for every case of this file: moto's, on loopback (`scripts/s3_server.py`), reached
by Spark through Hadoop's S3A connector (hadoop-aws and the AWS SDK modules it loads, resolved
from Maven Central: object_store.py). Nothing stands in for Hadoop's FileSystem. The profile
puts the warehouse at `s3a://lake/wh` (its tables under `s3a://lake/wh/tables/`) and the
embedded Derby metastore and the warm server's files in a local directory. Every case goes
through one warm Spark server (keep_warm, the default), started by the first dbt command and
stopped at the end, so the file starts one Spark.

- The sample project's steps, then `dbt test`: its schema tests, the quarantine and waterline
  alarms, and `matches_recompute` on every model (each view equals its recompute, LATENESS
  applied). Its tables are on S3 and none on local disk; the server's log says which log store
  commits to S3 (the adapter's, whose listings start at a version) and why the table watcher is
  off.
- kill -9 of the dbt client at random moments of a step (test_kill.py's two models: an aggregate
  with LATENESS and a linear model over it), then one complete run: every table shows whole
  steps, none applied twice or skipped (the model's step records read from its log on S3).
- kill -9 of the warm server under a step, between the model's commit and its side tables and
  at a random moment: the same, with a new server started by the next run.
- the writer claim: a driver of another `local_dir` is refused while the server holds it, the
  server stops when another driver's claim replaces its own, a stale claim is taken over, and a
  clean stop deletes it.
- test_differential.py's random history (a model of each kind of plan, two steps) and
  test_lateness.py's seed 000 (a late row quarantined), in dbt in this process through the
  same server: every view equals its query after every step.

    pytest -k object_store tests/functional     # STREAMSQL_OBJECT_STORE_STEPS, _KILLS, _SEED
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from dbt.adapters.streamsql.spark import warm_server, writer_claim
from scripts.s3_server import S3Server, s3a_settings
from tests.dbt_process import DbtProject
from tests.functional import test_differential as differential
from tests.functional import test_lateness as lateness
from tests.functional.test_kill import (
    HOOKS,
    MODELS,
    assert_whole_steps,
    show,
    steps_of_commits,
    whole_steps_query,
)

ROOT = Path(__file__).resolve().parents[2]
STEPS = int(os.environ.get("STREAMSQL_OBJECT_STORE_STEPS", "2"))
RATE = int(os.environ.get("STREAMSQL_OBJECT_STORE_RATE", "50"))
KILLS = int(os.environ.get("STREAMSQL_OBJECT_STORE_KILLS", "3"))
SEED = int(os.environ.get("STREAMSQL_OBJECT_STORE_SEED", "20261202"))
RUN_TIMEOUT = 1500
BUCKET = "lake"
# As the sample project's local target: tiny data, no code generation or adaptive plans.
SMALL_DATA = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.sql.shuffle.partitions": "1",
    "spark.sql.adaptive.enabled": "false",
}
SAMPLE_MODELS = 7


@pytest.fixture(scope="module")
def object_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("object_store")
    server = S3Server(root / "s3").start()
    server.create_bucket(BUCKET)
    local = root / "local"  # the metastore and the warm server's files
    target = {
        "type": "streamsql",
        "method": "session",
        "schema": "demo",
        "threads": 4,
        "keep_warm": True,  # one Spark for every case (DbtProject's default is in-process)
        "warehouse_dir": f"s3a://{BUCKET}/wh",
        "local_dir": str(local),
        "idle_timeout": 3600,
        "server_side_parameters": {
            **s3a_settings(server.endpoint),
            **SMALL_DATA,
            "spark.driver.memory": "2g",
        },
    }
    try:
        yield SimpleNamespace(server=server, target=target, local=local)
    finally:
        warm_server.stop_server(warm_server.ServerPaths(str(local)))
        server.stop()


def s3_keys(server: S3Server, prefix: str) -> list:
    """Every key of the bucket under `prefix`, listed through the S3 API."""
    keys = []
    for page in (
        server.client().get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    ):
        keys += [item["Key"] for item in page.get("Contents", [])]
    return sorted(keys)


def s3_text(server: S3Server, key: str) -> str:
    return server.client().get_object(Bucket=BUCKET, Key=key)["Body"].read().decode()


@pytest.mark.timeout(RUN_TIMEOUT + 600)
def test_object_store_sample_project_steps_pass_its_tests(object_store, tmp_path):
    work = tmp_path / "sample"
    work.mkdir()
    out = work / "result.json"
    completed = subprocess.run(
        [
            sys.executable,
            *("-m", "tests.sample_steps", "--work-dir", str(work)),
            *("--target", json.dumps(object_store.target)),
            *("--steps", str(STEPS), "--rate", str(RATE), "--out", str(out), "--test"),
        ],
        cwd=ROOT,
        env=dict(os.environ, DBT_SEND_ANONYMOUS_USAGE_STATS="false"),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )
    server_log = warm_server.ServerPaths(str(object_store.local)).log
    assert completed.returncode == 0, (
        f"{completed.stderr[-6000:]}\n(dbt's log: {work / 'project' / 'logs' / 'dbt.log'}; "
        f"the server's: {server_log})"
    )
    report = json.loads(out.read_text())
    for step in report["steps"]:
        assert len(step["models"]) == SAMPLE_MODELS, step
        assert {m["status"] for m in step["models"].values()} == {"success"}, step
    # every view equals its recompute, and the quarantine and waterline alarms hold
    failed = {name: status for name, status in report["tests"].items() if status != "pass"}
    assert not failed, failed
    recompute_tests = [name for name in report["tests"] if name.startswith("matches_recompute_")]
    assert len(recompute_tests) == SAMPLE_MODELS, sorted(report["tests"])
    for name in ("stg_purchases", "stg_sensors", "orders_enriched"):  # rows reached them
        assert sum(s["models"][name]["applied"] or 0 for s in report["steps"]) > 0, name
    assert all(m["changes_read"] for m in report["steps"][-1]["models"].values())

    # the tables are on S3, each with its log, and none on local disk
    keys = s3_keys(object_store.server, "wh/tables/demo.db/")
    for model in report["steps"][0]["models"]:
        assert f"wh/tables/demo.db/{model}/_delta_log/00000000000000000000.json" in keys, model
    assert any(key.endswith(".parquet") for key in keys)
    assert not (object_store.local / "tables").exists()
    assert (object_store.local / "metastore_db").is_dir()
    # the fast paths that read local files stepped aside, saying so
    said = Path(server_log).read_text()
    assert "use the adapter's ListFromS3SingleDriverLogStore" in said, said[-3000:]
    # whose listings of a log start at the version Delta asks for (S3's start-after)
    requests = object_store.server.log.read_text(errors="replace")
    assert "start-after=wh/tables/demo.db/" in requests, requests[-3000:]
    assert f"the warehouse (s3a://{BUCKET}/wh/tables) is not on this machine" in said
    dbt_log = (work / "project" / "logs" / "dbt.log").read_text()
    assert "Tables on s3a:// (first: " in dbt_log


@pytest.mark.timeout(RUN_TIMEOUT + 600)
def test_object_store_clients_killed_mid_step_lose_or_double_nothing(object_store, tmp_path):
    target = dict(object_store.target, schema="kill", threads=1)
    project = DbtProject.create(
        tmp_path / "p", MODELS, target=target, project_extra={"on-run-start": HOOKS}
    )
    first = project.dbt("run", timeout=RUN_TIMEOUT)
    assert first.returncode == 0, first.stdout[-3000:]
    rng = random.Random(SEED)
    killed = 0
    for _ in range(KILLS):
        process = project.dbt_popen("run")
        try:  # killed at that moment if still running
            process.wait(timeout=rng.uniform(4, 25))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            killed += 1
        process.communicate(timeout=600)
    final = project.dbt("run", timeout=RUN_TIMEOUT)
    assert final.returncode == 0, final.stdout[-3000:]
    assert killed, "no run was killed: lengthen the runs or shorten the waits"

    checker = DbtProject.create(tmp_path / "check", {}, target=target)
    row = show(checker, whole_steps_query())[0]
    log = "wh/tables/kill.db/windows/_delta_log/"
    commits = [k for k in s3_keys(object_store.server, log) if k.endswith(".json")]
    numbers = steps_of_commits(s3_text(object_store.server, key) for key in commits)
    assert_whole_steps(row, numbers)


CLAIM_KEY = "wh/tables/" + writer_claim.CLAIM_FILE


def s3_put(server: S3Server, key: str, text: str) -> None:
    server.client().put_object(Bucket=BUCKET, Key=key, Body=text.encode())


def foreign_claim(renewed_at: float) -> str:
    return json.dumps(
        {
            "host": "etl-elsewhere",
            "local_dir": "/srv/elsewhere",
            "pid": 4242,
            "token": "elsewhere",
            "claimed_at": renewed_at,
            "renewed_at": renewed_at,
        }
    )


@pytest.mark.timeout(RUN_TIMEOUT + 600)
def test_object_store_a_second_driver_is_refused_and_a_stale_claim_taken_over(
    object_store, tmp_path
):
    """The writer claim (spark/writer_claim.py) on S3: this machine's server holds it; a
    driver of another local_dir is refused, naming the holder; a server that finds another's
    fresh claim at its renewal stops; a stale claim is taken over, saying whose it was; a clean
    stop deletes the claim."""
    models = {"m.sql": "{{ config(materialized='table') }} select 1 as x"}
    target = dict(object_store.target, schema="claim")
    project = DbtProject.create(tmp_path / "p", models, target=target)
    paths = warm_server.ServerPaths(str(object_store.local))
    first = project.dbt("run", timeout=RUN_TIMEOUT)
    assert first.returncode == 0, first.stdout[-3000:]
    held = json.loads(s3_text(object_store.server, CLAIM_KEY))
    assert held["local_dir"] == str(object_store.local.resolve())
    assert held["pid"] == warm_server.ServerState.read(paths).pid

    # another local_dir (another machine, as far as the claim can tell), Spark in its process
    other = DbtProject.create(
        tmp_path / "other",
        models,
        target=dict(target, local_dir=str(tmp_path / "other_local"), keep_warm=False),
    )
    refused = other.dbt("run", timeout=RUN_TIMEOUT)
    assert refused.returncode != 0, refused.stdout[-3000:]
    said = " ".join(refused.stdout.split())
    assert "s3a://lake/wh/tables is being written by another Spark driver" in said, said[-3000:]
    assert f"local_dir {object_store.local.resolve()}" in said
    assert json.loads(s3_text(object_store.server, CLAIM_KEY))["token"] == held["token"]

    # another driver's fresh claim: the server finds it at its next renewal and stops
    s3_put(object_store.server, CLAIM_KEY, foreign_claim(time.time()))
    deadline = time.monotonic() + writer_claim.RENEW_SECONDS + 90
    while warm_server.ServerState.read(paths) is not None and time.monotonic() < deadline:
        time.sleep(1)
    server_log = Path(paths.log).read_text()
    assert warm_server.ServerState.read(paths) is None, server_log[-3000:]
    assert "is now held by the driver of host 'etl-elsewhere'" in server_log, server_log[-3000:]
    assert json.loads(s3_text(object_store.server, CLAIM_KEY))["token"] == "elsewhere"

    # a stale one (its holder gone): the next server takes it over and the run steps
    stale = time.time() - 2 * writer_claim.STALE_SECONDS
    s3_put(object_store.server, CLAIM_KEY, foreign_claim(stale))
    again = project.dbt("run", timeout=RUN_TIMEOUT)
    assert again.returncode == 0, again.stdout[-3000:]
    server_log = Path(paths.log).read_text()
    assert "Took over the warehouse's writer claim" in server_log, server_log[-3000:]
    assert "from the driver of host 'etl-elsewhere'" in server_log
    assert json.loads(s3_text(object_store.server, CLAIM_KEY))["local_dir"] == held["local_dir"]

    # a clean stop releases it (the next case's first run starts another server)
    warm_server.stop_server(paths)
    assert CLAIM_KEY not in s3_keys(object_store.server, "wh/tables/")


def server_pids(paths: warm_server.ServerPaths) -> list:
    """The warm server's process and its JVM (the process's one child)."""
    state = warm_server.ServerState.read(paths)
    assert state is not None, "no warm server runs"
    with open(f"/proc/{state.pid}/task/{state.pid}/children") as children:
        return [int(pid) for pid in children.read().split()] + [state.pid]


def kill_server(paths: warm_server.ServerPaths) -> None:
    for pid in server_pids(paths):  # the JVM first, as the out-of-memory killer would
        os.kill(pid, signal.SIGKILL)


@pytest.mark.timeout(RUN_TIMEOUT + 900)
def test_object_store_server_killed_mid_step_loses_or_doubles_nothing(object_store, tmp_path):
    """kill -9 of the warm server (its JVM and its process) under a step on S3: once between
    the model's commit and its side tables (the client held there), once at a random moment of
    a step, inside whatever statement runs. The next run starts another server and finishes or
    takes the steps; every table shows whole steps."""
    target = dict(object_store.target, schema="serverkill", threads=1)
    project = DbtProject.create(
        tmp_path / "p", MODELS, target=target, project_extra={"on-run-start": HOOKS}
    )
    paths = warm_server.ServerPaths(str(object_store.local))
    first = project.dbt("run", timeout=RUN_TIMEOUT)
    assert first.returncode == 0, first.stdout[-3000:]

    held = project.dbt_held_at("after_commit", tmp_path / "paused", "run")
    kill_server(paths)  # the model committed step 2, its side tables not written
    os.killpg(held.pid, signal.SIGKILL)
    held.communicate(timeout=120)

    restarted = project.dbt("run", timeout=RUN_TIMEOUT)  # a new server; finishes step 2
    assert restarted.returncode == 0, restarted.stdout[-3000:]
    assert "finishing step 2, which a crash interrupted" in restarted.stdout, restarted.stdout[
        -3000:
    ]
    running = project.dbt_popen("run")
    try:  # killed inside a statement of the step, if the step is still running
        running.wait(timeout=random.Random(SEED).uniform(8, 25))
    except subprocess.TimeoutExpired:
        kill_server(paths)
    running.communicate(timeout=600)

    final = project.dbt("run", timeout=RUN_TIMEOUT)
    assert final.returncode == 0, final.stdout[-3000:]
    row = show(project, whole_steps_query().replace("kill.", "serverkill."))[0]
    log = "wh/tables/serverkill.db/windows/_delta_log/"
    commits = [k for k in s3_keys(object_store.server, log) if k.endswith(".json")]
    numbers = steps_of_commits(s3_text(object_store.server, key) for key in commits)
    assert_whole_steps(row, numbers)


class TestObjectStoreDifferential(differential.TestDifferential):
    """test_differential.py's random history on S3: a model of each kind of plan (its models
    over Spark Connect, chains included), stepped through this file's warm server, each equal to
    its query after every step."""

    names = differential.CONNECT_MODELS
    steps = 2  # a first step and one over a batch with every kind of change

    @pytest.fixture(scope="class")
    def dbt_profile_target(self, object_store):
        return dict(object_store.target)

    def test_its_tables_are_on_s3(self, project, object_store):
        assert_on_s3(object_store, project.test_schema, self.names)


class TestObjectStoreLateness(lateness.TestSeed000Purchase):
    """test_lateness.py's seed 000 on S3: the late purchase is quarantined in `__late` on S3
    and never reaches the aggregate."""

    @pytest.fixture(scope="class")
    def dbt_profile_target(self, object_store):
        return dict(object_store.target, threads=1)

    def test_its_tables_are_on_s3(self, project, object_store):
        tables = ["decoded_purchase", "decoded_purchase__late", "hourly_spend"]
        assert_on_s3(object_store, project.test_schema, tables)


def assert_on_s3(object_store, schema: str, tables: list) -> None:
    """Each table's first commit is an object of the bucket, and no table is on local disk."""
    keys = s3_keys(object_store.server, f"wh/tables/{schema}.db/")
    for table in tables:
        assert f"wh/tables/{schema}.db/{table}/_delta_log/00000000000000000000.json" in keys, (
            table,
            keys[:20],
        )
    assert not (object_store.local / "tables").exists()
