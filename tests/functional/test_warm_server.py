"""The warm server: the first `dbt` command starts it, later ones reuse it, only the owner gets in.

Every dbt command here is a process of its own, as a cron job's would be; the module shares one
warehouse and stops its server at the end. The steps themselves over Spark Connect are compared
with the in-process session's in test_differential.py, test_lateness.py and test_crash_recovery.py.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import List

import pytest

from dbt.adapters.streamsql.spark import warm_server
from tests.dbt_process import DbtProject

pytestmark = pytest.mark.functional

MODELS = {
    "numbers.sql": "{{ config(materialized='table') }} select id from range(6) as r(id)",
    "evens.sql": "{{ config(materialized='view') }} select id from {{ ref('numbers') }} "
    "where id % 2 = 0",
    "parity.sql": "{{ config(materialized='incremental_view') }} "
    "select id % 2 as k, count(*) as n from {{ ref('numbers') }} group by id % 2",
    "big.sql": "{{ config(materialized='incremental_view') }} "
    "select id from {{ ref('numbers') }} where id > 2",
    # a statement that stays on the server for a minute: a server killed while it runs
    "sleeper.sql": "{{ config(materialized='table') }} "
    "select reflect('java.lang.Thread', 'sleep', cast(60000 as bigint)) as slept",
    "schema.yml": "version: 2\nmodels:\n  - name: evens\n    columns:\n      - name: id\n"
    "        data_tests: [not_null]\n",
}
STARTING = "Starting a warm Spark server"


def wait_for(check, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"not within {seconds} s: {what}")


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("warm") / "p"
    created = DbtProject.create(
        root, MODELS, target={"type": "streamsql", "schema": "warm", "keep_warm": True}
    )
    paths = warm_server.ServerPaths(str(root / "warehouse"))
    try:
        yield created, paths
    finally:
        warm_server.stop_server(paths)


def streamsql(*args: str) -> subprocess.CompletedProcess:
    command = str(Path(sys.executable).with_name("streamsql"))
    return subprocess.run([command, *args], capture_output=True, text=True, timeout=300)


def test_the_first_command_starts_a_server_that_later_ones_reuse(project):
    dbt, paths = project
    first = dbt.dbt("run", "--select", "numbers")
    assert first.returncode == 0, first.stdout[-4000:]
    assert STARTING in first.stdout
    state = warm_server.ServerState.read(paths)
    assert state is not None and warm_server.pid_alive(state.pid)
    # The token and the server's files: the owner's only.
    assert stat.S_IMODE(os.stat(paths.token).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(paths.root).st_mode) == 0o700
    assert os.path.isfile(paths.log)
    # Delta's log is read through the adapter's store (dbt/adapters/streamsql/spark/log_store.py)
    with open(paths.log) as log:
        server_log = log.read()
    assert "Delta log store for file: tables: io.streamsql.ListFromLogStore" in server_log
    # and its statements, each on a thread of its own, share one metastore connection
    assert "one metastore connection for all statements (HMSHandler." in server_log

    second = dbt.dbt("run", "--select", "evens", "parity", "big")
    assert second.returncode == 0, second.stdout[-4000:]
    assert STARTING not in second.stdout
    assert warm_server.ServerState.read(paths).pid == state.pid
    shown = dbt.dbt(
        "show", "--inline", "select count(*) as n from {{ ref('evens') }}", "--output", "json"
    )
    assert shown.returncode == 0 and '"n": 3' in shown.stdout, shown.stdout[-3000:]
    # No settings in the profile: the warehouse is under the project, the metastore beside
    # the tables.
    assert (dbt.root / "warehouse" / "metastore_db").is_dir()
    assert (dbt.root / "warehouse" / "tables").is_dir()

    status = streamsql("server", "status", "--project-dir", str(dbt.root))
    assert status.returncode == 0, status.stderr
    assert f"pid {state.pid}, port {state.port}" in status.stdout
    as_json = json.loads(
        streamsql("server", "status", "--warehouse", paths.warehouse_dir, "--json").stdout
    )
    assert as_json["running"] and as_json["pid"] == state.pid and as_json["idle_s"] >= 0


CLIENT = """
import sys
from pyspark.sql.connect.session import SparkSession
url = sys.argv[1]
try:
    print(SparkSession.builder.remote(url).create().sql("select 41 + 1 as n").collect()[0].n)
except Exception as error:
    print("REFUSED", type(error).__name__, str(error).splitlines()[0][:300])
"""


def test_only_a_client_with_the_token_gets_in_and_only_on_loopback(project):
    _, paths = project
    state = warm_server.ServerState.read(paths)
    token = open(paths.token).read().strip()

    def client(url: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", CLIENT, url], capture_output=True, text=True, timeout=120
        )
        return done.stdout.strip()

    assert client(f"sc://localhost:{state.port}/;token={token}") == "42"
    refused = client(f"sc://localhost:{state.port}/;token=not-{token}")
    assert refused.startswith("REFUSED"), refused
    without = client(f"sc://localhost:{state.port}")
    assert without.startswith("REFUSED"), without
    # Not reachable on the machine's other addresses.
    others = {
        info[4][0]
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)
        if not info[4][0].startswith("127.")
    }
    for address in others:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.settimeout(2)
            assert probe.connect_ex((address, state.port)) != 0, address


def test_two_processes_at_once_share_the_server(project):
    dbt, paths = project
    pid = warm_server.ServerState.read(paths).pid
    # Two runs of different models and a test run beside them, each its own dbt process.
    running = [
        dbt.dbt_popen("run", "--select", "parity"),
        dbt.dbt_popen("run", "--select", "big"),
        dbt.dbt_popen("test", "--select", "evens"),
    ]
    for process in running:
        out, _ = process.communicate(timeout=600)
        assert process.returncode == 0, out[-4000:]
        assert STARTING not in out
    assert warm_server.ServerState.read(paths).pid == pid


WRITER = """
import sys, threading, time
from pyspark.sql.connect.session import SparkSession
spark = SparkSession.builder.remote(sys.argv[1]).create()
spark.sql("CREATE TABLE IF NOT EXISTS warm.between_runs (id BIGINT) USING delta")
print("created", flush=True)
sys.stdin.readline()
# A statement that stays on the server for 14 s, and a commit to the table 3 s into it.
sleeping = threading.Thread(target=lambda: spark.sql(
    "select reflect('java.lang.Thread', 'sleep', cast(14000 as bigint))").collect())
sleeping.start()
time.sleep(3)
spark.sql("INSERT INTO warm.between_runs VALUES (1)")
print("inserted", flush=True)
sleeping.join()
spark.stop()
"""


def test_between_runs_the_server_reads_changed_tables_never_beside_a_statement(project):
    _, paths = project
    state = warm_server.ServerState.read(paths)
    url = warm_server.connect_url("localhost", state.port, warm_server.read_token(paths), False)

    def reads_of_the_table(since: int) -> List[str]:
        with open(paths.log) as log:
            log.seek(since)
            return [
                line
                for line in log.read().splitlines()
                if " changed tables in " in line and "between_runs" in line
            ]

    assert "between runs, tables that changed are read again" in open(paths.log).read()
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        mark = os.path.getsize(paths.log)
        assert writer.stdout.readline().strip() == "created"
        # A new table, nothing on the server: read within seconds.
        wait_for(lambda: reads_of_the_table(mark), 60, "the server read the new table")
        mark = os.path.getsize(paths.log)
        writer.stdin.write("go\n")
        writer.stdin.flush()
        assert writer.stdout.readline().strip() == "inserted"
        # Committed to while another statement runs: not read beside it (an idle server
        # would have read it within 2-3 s, as above) ...
        time.sleep(5)
        assert reads_of_the_table(mark) == []
        # ... but once the statement has ended.
        assert writer.wait(timeout=120) == 0
        wait_for(lambda: reads_of_the_table(mark), 60, "the server read the table after")
    finally:
        writer.kill()


def test_a_killed_server_is_replaced_with_a_line_saying_so(project):
    dbt, paths = project
    killed = warm_server.ServerState.read(paths)
    # Its JVM killed (as by the out-of-memory killer) while a statement of a run is on it: the
    # run says what happened, in its words, and the server's process ends, saying why.
    log = dbt.root / "logs" / "dbt.log"
    log.unlink(missing_ok=True)
    running = dbt.dbt_popen("run", "--select", "sleeper")
    wait_for(
        lambda: log.exists() and "java.lang.Thread" in log.read_text(),
        300,
        "the run sent its statement",
    )
    with open(f"/proc/{killed.pid}/task/{killed.pid}/children") as children:
        (jvm,) = [int(pid) for pid in children.read().split()]
    os.kill(jvm, signal.SIGKILL)
    # And asked to stop at once, as a dbt process that finds its port closed does, before the
    # server's own look at its JVM: it must still say why it ended, not hang stopping a dead JVM.
    os.kill(killed.pid, signal.SIGTERM)
    out, _ = running.communicate(timeout=300)
    assert running.returncode == 1, out[-4000:]
    assert f"The warm Spark server of {paths.warehouse_dir} stopped during this command" in out
    assert "Unhandled error" not in out and "RETRIES_EXCEEDED" not in out, out[-4000:]
    wait_for(lambda: not warm_server.pid_alive(killed.pid), 30, "the server's process ended")
    assert "Spark's JVM ended (exit code -9" in open(paths.log).read()
    # What dbt ran after the model found the server gone and started another. Killed between
    # runs, that one is replaced by the next command, which says so.
    killed = warm_server.ServerState.read(paths)
    assert killed is not None and f"(pid {killed.pid}, port {killed.port})" not in out
    os.kill(killed.pid, signal.SIGKILL)
    wait_for(lambda: not warm_server.pid_alive(killed.pid), 30, "the server's process ended")
    rerun = dbt.dbt("run", "--select", "parity")
    assert rerun.returncode == 0, rerun.stdout[-4000:]
    assert f"(pid {killed.pid}, port {killed.port}) is gone: starting a new one" in rerun.stdout
    assert warm_server.ServerState.read(paths).pid != killed.pid


def test_a_server_in_use_is_not_replaced_then_stop_and_idle_stop(project):
    dbt, paths = project
    state = warm_server.ServerState.read(paths)
    other = dict(json.load(open(paths.state)), fingerprint="other-settings")
    Path(paths.state).write_text(json.dumps(other))
    # Used a moment ago (the heartbeat is fresh): not taken from under another run. (Unused, it
    # would be replaced like a killed one, above; the reasons: tests/unit/test_warm_server.py.)
    warm_server.touch(paths)
    refused = dbt.dbt("run", "--select", "big")
    assert refused.returncode != 0
    assert (
        "runs with other settings" in refused.stdout and "streamsql server stop" in refused.stdout
    )
    assert warm_server.pid_alive(state.pid)
    # What the message says to do.
    stopped = streamsql("server", "stop", "--project-dir", str(dbt.root))
    assert stopped.returncode == 0 and f"stopped pid {state.pid}" in stopped.stdout, stopped
    assert not warm_server.pid_alive(state.pid)
    assert streamsql("server", "status", "--warehouse", paths.warehouse_dir).returncode == 3
    # Nothing left to stop: said, with exit code 1 (as pg_ctl stop; docs/cli.md).
    again = streamsql("server", "stop", "--warehouse", paths.warehouse_dir)
    assert again.returncode == 1 and "no server was running" in again.stderr, again
    # `start --warehouse` starts it with the settings it last ran with, the profile's: the next
    # dbt command reuses it, and `start` from the project finds it running.
    started = streamsql("server", "start", "--warehouse", paths.warehouse_dir)
    assert started.returncode == 0, started
    restarted = warm_server.ServerState.read(paths)
    assert started.stdout.splitlines()[-1].startswith(f"started: pid {restarted.pid}, ")
    assert restarted.idle_timeout == warm_server.DEFAULT_IDLE_TIMEOUT
    reused = dbt.dbt("run", "--select", "big")
    assert reused.returncode == 0 and STARTING not in reused.stdout, reused.stdout[-4000:]
    assert warm_server.ServerState.read(paths).pid == restarted.pid
    again = streamsql("server", "start", "--project-dir", str(dbt.root))
    assert again.returncode == 0 and f"already running: pid {restarted.pid}," in again.stdout
    assert streamsql("server", "stop", "--warehouse", paths.warehouse_dir).returncode == 0
    # A server unused for idle_timeout seconds stops itself, never under a running command.
    dbt.target["idle_timeout"] = 3
    dbt.write_profile()
    try:
        run = dbt.dbt("run", "--select", "big", "parity")
        assert run.returncode == 0 and STARTING in run.stdout, run.stdout[-4000:]
        idle = warm_server.ServerState.read(paths)
        wait_for(lambda: not warm_server.pid_alive(idle.pid), 90, "the idle server stopped")
        assert warm_server.ServerState.read(paths) is None
        assert "unused for" in open(paths.log).read()
    finally:
        dbt.target.pop("idle_timeout")
        dbt.write_profile()


def test_a_pinned_port_in_use_is_named(tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        dbt = DbtProject.create(
            tmp_path / "p",
            MODELS,
            target={"type": "streamsql", "schema": "warm", "keep_warm": True, "port": port},
        )
        result = dbt.dbt("run", "--select", "numbers")
    assert result.returncode != 0
    assert f"server port {port} is in use by another program" in result.stdout
