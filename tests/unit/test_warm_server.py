"""The warm server's bookkeeping and the profile fields, without starting Spark.

Starting, reusing, replacing and stopping a real server: tests/functional/test_warm_server.py.
"""

import json
import os
import stat
import time

import pytest
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.streamsql.connections import StreamSQLCredentials
from dbt.adapters.streamsql.execution.engine.delta_files import catalog_type
from dbt.adapters.streamsql.spark import warm_server
from dbt.adapters.streamsql.spark.embedded_spark import SessionSettings


def settings(tmp_path, **parameters):
    return SessionSettings(str(tmp_path), "local[2]", dict(parameters), 10)


def test_the_token_is_made_once_and_only_the_owner_reads_it(tmp_path):
    paths = warm_server.ServerPaths(str(tmp_path))
    token = warm_server.read_token(paths)
    assert len(token) >= 32 and warm_server.read_token(paths) == token
    assert stat.S_IMODE(os.stat(paths.token).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(paths.root).st_mode) == 0o700


def test_the_fingerprint_follows_the_settings_a_server_is_started_with(tmp_path):
    base = warm_server.settings_fingerprint(settings(tmp_path, a="1"))
    assert warm_server.settings_fingerprint(settings(tmp_path, a="1")) == base
    assert warm_server.settings_fingerprint(settings(tmp_path, a="2")) != base
    other_master = SessionSettings(str(tmp_path), "local[1]", {"a": "1"}, 10)
    assert warm_server.settings_fingerprint(other_master) != base


def test_the_same_python_named_two_ways_has_one_fingerprint(tmp_path, monkeypatch):
    # `dbt` (its script names the venv's python by full path) and `../.venv/bin/python -m dbt`
    # must share a server, not replace each other's; another venv's python must not.
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    monkeypatch.setattr(warm_server.sys, "executable", str(venv / "python"))
    base = warm_server.settings_fingerprint(settings(tmp_path))
    monkeypatch.chdir(tmp_path / "venv")
    monkeypatch.setattr(warm_server.sys, "executable", "bin/../bin/python")
    assert warm_server.settings_fingerprint(settings(tmp_path)) == base
    monkeypatch.setattr(warm_server.sys, "executable", str(tmp_path / "other" / "bin" / "python"))
    assert warm_server.settings_fingerprint(settings(tmp_path)) != base


def state(tmp_path, pid, port, fingerprint="f", version=warm_server.ADAPTER_VERSION):
    return warm_server.ServerState(pid, port, str(tmp_path), version, fingerprint, time.time(), 60)


def test_why_a_recorded_server_is_replaced(tmp_path, monkeypatch):
    paths = warm_server.ServerPaths(str(tmp_path))
    os.makedirs(paths.root)
    monkeypatch.setattr(warm_server, "is_server_process", lambda pid: pid != 1)
    monkeypatch.setattr(warm_server, "port_open", lambda port, host="": port != 2)
    reason = warm_server._replace_reason
    assert reason(paths, state(tmp_path, 1, 3), "f").endswith("is gone")
    assert reason(paths, state(tmp_path, 5, 2), "f").endswith("does not answer on its port")
    assert reason(paths, state(tmp_path, 5, 3), "f") is None
    # Another version or other settings: replaced when unused for a while...
    old = time.time() - 10 * warm_server.HEARTBEAT_SECONDS
    unused = state(tmp_path, 5, 3, version="0.0.1")
    unused = warm_server.ServerState(**{**unused.__dict__, "started_at": old})
    warm_server.touch(paths)
    os.utime(paths.heartbeat, (old, old))
    assert "was started by dbt-streamsql 0.0.1" in reason(paths, unused, "f")
    # ...and refused while a dbt process uses it.
    warm_server.touch(paths)
    with pytest.raises(DbtRuntimeError, match="another dbt process is using it"):
        reason(paths, state(tmp_path, 5, 3, fingerprint="g"), "f")


def test_server_state_round_trips_and_a_broken_file_is_no_server(tmp_path):
    paths = warm_server.ServerPaths(str(tmp_path))
    os.makedirs(paths.root)
    recorded = state(tmp_path, 7, 8)
    with open(paths.state, "w") as handle:
        json.dump(recorded.__dict__, handle)
    assert warm_server.ServerState.read(paths) == recorded
    with open(paths.state, "w") as handle:
        handle.write("{not json")
    assert warm_server.ServerState.read(paths) is None


def test_the_settings_a_server_was_started_with_are_read_back_at_the_warehouse_path(tmp_path):
    # `streamsql server start --warehouse DIR` starts DIR's server with them: they must give the
    # fingerprint the profile's gave, so that the next dbt command reuses that server.
    started = settings(tmp_path / "was_here", **{"spark.sql.shuffle.partitions": 4})
    moved = warm_server.ServerPaths(str(tmp_path / "now_here"))
    assert warm_server.last_started_with(moved) is None
    os.makedirs(moved.root)
    with open(moved.config, "w") as handle:  # as warm_server._start writes it
        json.dump(
            {
                "warehouse_dir": started.warehouse_dir,
                "master": started.master,
                "server_side_parameters": started.server_side_parameters,
                "lock_timeout": started.lock_timeout,
                "idle_timeout": 90,
                "port": None,
                "fingerprint": warm_server.settings_fingerprint(started),
            },
            handle,
        )
    read, idle_timeout, port = warm_server.last_started_with(moved)
    assert read == SessionSettings(
        moved.warehouse_dir, "local[2]", started.server_side_parameters, 10
    )
    assert warm_server.settings_fingerprint(read) == warm_server.settings_fingerprint(started)
    assert (idle_timeout, port) == (90, None)
    with open(moved.config, "w") as handle:
        handle.write("{not json")
    assert warm_server.last_started_with(moved) is None


def test_the_server_listens_on_loopback_with_its_token_and_port():
    config = {"server_side_parameters": {"spark.driver.memory": "2g"}, "master": "local[2]"}
    params = warm_server.server_parameters(config, 15123, "secret")
    assert params["spark.connect.grpc.binding.address"] == "127.0.0.1"
    assert params["spark.connect.grpc.binding.port"] == "15123"
    assert params["spark.connect.authenticate.token"] == "secret"
    assert params["spark.driver.bindAddress"] == "127.0.0.1"
    assert params["spark.driver.memory"] == "2g"
    on_cluster = warm_server.server_parameters({**config, "master": "spark://h:7077"}, 1, "t")
    assert "spark.driver.bindAddress" not in on_cluster  # executors must reach the driver


def test_connect_urls():
    assert warm_server.connect_url("localhost", 15002, "t", False).endswith(";token=t")
    assert ";use_ssl=true" in warm_server.connect_url("h", 1, None, True)
    assert "token" not in warm_server.connect_url("h", 1, None, False)


def credentials(**fields):
    return StreamSQLCredentials.from_dict({"schema": "s", **fields})


def test_profile_defaults_per_method():
    session = credentials()
    assert session.keep_warm and session.idle_timeout == 1800 and session.port is None
    connect = credentials(method="connect", host="spark.internal", token="t")
    assert connect.port == 15002 and connect.method == "connect"
    assert credentials(method="thrift", host="h").port == 443
    assert credentials(method="thrift", host="h", port=10000).port == 10000


@pytest.mark.parametrize(
    "delta, spark",
    [
        ("integer", "int"),
        ("long", "bigint"),
        ("decimal(10,2)", "decimal(10,2)"),
        ({"type": "array", "elementType": "string", "containsNull": True}, "array<string>"),
        (
            {"type": "map", "keyType": "string", "valueType": "short", "valueContainsNull": True},
            "map<string,smallint>",
        ),
        (
            {
                "type": "struct",
                "fields": [{"name": "a", "type": "byte"}, {"name": "b", "type": "date"}],
            },
            "struct<a:tinyint,b:date>",
        ),
    ],
)
def test_delta_schema_types_as_spark_names_them(delta, spark):
    assert catalog_type(delta) == spark


class Connection:
    def __init__(self, credentials):
        self.credentials = credentials


def test_a_lost_server_is_named_with_what_to_do(tmp_path):
    from dbt.adapters.streamsql.connections import server_lost

    warm = Connection(credentials(warehouse_dir=str(tmp_path)))
    said = server_lost(warm, "<_MultiThreadedRendezvous of RPC ... status = StatusCode.UNAVAILABLE")
    assert f"The warm Spark server of {tmp_path} stopped during this command" in said
    assert "spark-connect-server.log" in said
    remote = Connection(credentials(method="connect", host="spark.internal"))
    assert "spark.internal:15002 cannot be reached" in server_lost(remote, "Connection refused")
    assert server_lost(warm, "[TABLE_OR_VIEW_NOT_FOUND] ...") is None
    # stopped under a statement: its Spark stopped first
    stopping = "(java.lang.IllegalStateException) Cannot call methods on a stopped SparkContext."
    assert "stopped during this command" in server_lost(warm, stopping)
    cancelled = "Job 12 cancelled because SparkContext was shut down"
    assert "stopped during this command" in server_lost(warm, cancelled)


def test_a_stopped_child_that_is_not_yet_reaped_is_not_alive():
    """A server the stopping process started itself is its child: once it exits it is a zombie
    until waited for, and stop_server must not wait out its grace period for it."""
    import signal
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert warm_server.pid_alive(child.pid)
        os.kill(child.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while warm_server.pid_alive(child.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not warm_server.pid_alive(child.pid)
    finally:
        child.kill()


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads a process's command line in /proc")
def test_a_server_started_under_the_modules_former_name_is_still_a_server():
    """warm_server.py moved into spark/: a server an earlier install started runs as
    `python -m dbt.adapters.streamsql.warm_server` and must still be stopped or replaced as one."""
    import subprocess
    import sys

    sleep = "import time; time.sleep(60)"
    former = subprocess.Popen([sys.executable, "-c", sleep, "dbt.adapters.streamsql.warm_server"])
    current = subprocess.Popen([sys.executable, "-c", sleep, warm_server.SERVER_MODULE])
    stranger = subprocess.Popen([sys.executable, "-c", sleep])
    try:
        assert warm_server.is_server_process(former.pid)
        assert warm_server.is_server_process(current.pid)
        assert not warm_server.is_server_process(stranger.pid)
    finally:
        for process in (former, current, stranger):
            process.kill()
            process.wait()
