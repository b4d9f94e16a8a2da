"""Thrift connections without a server: session settings and statement polling."""

from pathlib import Path

import pytest
from dbt_common.exceptions import DbtDatabaseError
from TCLIService.ttypes import TOperationState

from dbt.adapters.streamsql import connections
from dbt.adapters.streamsql.connections import (
    StreamSQLCredentials,
    ThriftConnectionWrapper,
    thrift_session_configuration,
)
from dbt.adapters.streamsql.spark.embedded_spark import SessionSettings


def test_server_side_parameters_become_hiveconf_session_settings():
    assert thrift_session_configuration(
        {
            "spark.sql.shuffle.partitions": 1,
            "set:hivevar:day": "2024-01-01",
            "use:database": "demo",
        }
    ) == {
        "set:hiveconf:spark.sql.shuffle.partitions": "1",
        "set:hivevar:day": "2024-01-01",
        "use:database": "demo",
    }


class Status:
    def __init__(self, state, error=None):
        self.operationState = state
        self.errorMessage = error


class FakeCursor:
    """Reports a statement as running `polls_running` times, then as `final`."""

    def __init__(self, polls_running, final=TOperationState.FINISHED_STATE, error=None):
        self.polls_running = polls_running
        self.final = Status(final, error)
        self.executed = []

    def execute(self, sql, bindings, async_):
        self.executed.append((sql, bindings, async_))

    def poll(self):
        if self.polls_running:
            self.polls_running -= 1
            return Status(TOperationState.RUNNING_STATE)
        return self.final


def wrapper_with(cursor, poll_interval=5):
    wrapper = ThriftConnectionWrapper(handle=None, poll_interval=poll_interval)
    wrapper._cursor = cursor
    return wrapper


class ClosingHandle:
    """pyhive's connection: its CloseSession answered with the server's error, or not."""

    def __init__(self, error=None):
        self.error = error
        self.closed = 0

    def close(self):
        self.closed += 1
        if self.error:
            raise self.error


def test_a_session_the_thrift_server_fails_to_close_does_not_end_the_run():
    from pyhive.exc import OperationalError

    refused = OperationalError(
        "TCloseSessionResp(status=TStatus(statusCode=3, infoMessages=['*java.lang."
        "RuntimeException:java.lang.NoClassDefFoundError: org/apache/hadoop/hive/llap/security/"
        "LlapSigner$Signable:21:20'"
    )
    for error in (refused, None):
        handle = ClosingHandle(error)
        ThriftConnectionWrapper(handle=handle).close()
        assert handle.closed == 1


def test_polls_soon_then_backs_off_up_to_poll_interval(monkeypatch):
    slept = []
    monkeypatch.setattr(connections.time, "sleep", slept.append)
    cursor = FakeCursor(polls_running=12)
    wrapper_with(cursor, poll_interval=1).execute("SELECT 1;")
    assert cursor.executed == [("SELECT 1", None, True)]
    assert slept[0] == connections.THRIFT_FIRST_POLL
    assert slept == sorted(slept) and max(slept) == 1 and len(slept) == 12


def test_a_statement_finished_at_once_does_not_sleep(monkeypatch):
    slept = []
    monkeypatch.setattr(connections.time, "sleep", slept.append)
    wrapper_with(FakeCursor(polls_running=0)).execute("SET a=b")
    assert slept == []


def test_server_errors_and_cancellations_raise(monkeypatch):
    monkeypatch.setattr(connections.time, "sleep", lambda _: None)
    with pytest.raises(DbtDatabaseError, match="TABLE_OR_VIEW_NOT_FOUND"):
        wrapper_with(
            FakeCursor(1, TOperationState.ERROR_STATE, "TABLE_OR_VIEW_NOT_FOUND x")
        ).execute("SELECT * FROM x")
    with pytest.raises(DbtDatabaseError, match="CANCELED_STATE"):
        wrapper_with(FakeCursor(0, TOperationState.CANCELED_STATE)).execute("SELECT 1")


def test_a_warehouse_dir_uri_is_refused_with_the_setting_to_use():
    """A URI of no object store (s3a:// and the others are taken: test_object_store.py)."""
    from dbt.adapters.spark.connections import SparkConnectionMethod
    from dbt_common.exceptions import DbtRuntimeError

    from dbt.adapters.streamsql.connections import StreamSQLCredentials

    credentials = StreamSQLCredentials(
        schema="s", method=SparkConnectionMethod.SESSION, warehouse_dir="hdfs://nn/warehouse"
    )
    with pytest.raises(DbtRuntimeError, match="spark.sql.warehouse.dir: hdfs://nn/warehouse"):
        credentials.resolved_warehouse_dir()


@pytest.mark.parametrize(
    "master, partitions",
    [
        ("local[2]", "2"),
        ("local[8]", "8"),
        ("local", "1"),
        ("spark://master:7077", "4"),
    ],
)
def test_embedded_session_has_a_shuffle_partition_per_local_core(master, partitions):
    conf = SessionSettings("/tmp/warehouse", master, {}, 600).spark_conf()
    assert conf["spark.sql.shuffle.partitions"] == partitions
    assert conf["spark.default.parallelism"] == partitions
    overridden = SessionSettings(
        "/tmp/warehouse", master, {"spark.sql.shuffle.partitions": "7"}, 600
    ).spark_conf()
    assert overridden["spark.sql.shuffle.partitions"] == "7"


def test_delta_jars_come_from_ivy_until_a_start_has_listed_the_files_it_resolved(
    tmp_path, monkeypatch
):
    from dbt.adapters.streamsql.spark import embedded_spark

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    coordinate = embedded_spark.delta_maven_coordinate()
    conf = SessionSettings("/tmp/warehouse", "local[2]", {}, 600).spark_conf()
    assert conf["spark.jars.packages"] == coordinate and "spark.jars" not in conf

    jars = [tmp_path / "delta-spark.jar", tmp_path / "delta-storage.jar"]
    for jar in jars:
        jar.write_bytes(b"jar")
    listed = ",".join(f"file://{jar}" for jar in jars)

    class Session:  # what remember_jars reads of a session Ivy resolved the jars for
        class sparkContext:
            @staticmethod
            def getConf():
                return {"spark.jars": listed}

    embedded_spark.remember_jars(coordinate, Session)
    conf = SessionSettings("/tmp/warehouse", "local[2]", {}, 600).spark_conf()
    assert conf["spark.jars"] == listed and "spark.jars.packages" not in conf

    # the profile's own jars or packages win, and a listed file gone sends the start to Ivy
    own = SessionSettings(
        "/tmp/warehouse", "local[2]", {"spark.jars.packages": "a:b:1"}, 600
    ).spark_conf()
    assert own["spark.jars.packages"] == "a:b:1" and "spark.jars" not in own
    jars[1].unlink()
    conf = SessionSettings("/tmp/warehouse", "local[2]", {}, 600).spark_conf()
    assert conf["spark.jars.packages"] == coordinate and "spark.jars" not in conf


@pytest.mark.parametrize(
    "answers, expected",
    [
        (
            [1, "warehouse", "analytics", 4],
            {"method": "session", "warehouse_dir": "warehouse", "schema": "analytics"},
        ),
        (
            [2, "spark.example.internal", 15002, "", True, "analytics", 2],
            {
                "method": "connect",
                "host": "spark.example.internal",
                "port": 15002,
                "token": "",
                "use_ssl": True,
            },
        ),
        (
            [3, "thrift.example.internal", 10000, "dbt", "analytics", 4],
            {"method": "thrift", "host": "thrift.example.internal", "port": 10000, "user": "dbt"},
        ),
    ],
)
def test_dbt_init_asks_for_each_way_of_reaching_spark_and_writes_a_valid_profile(
    monkeypatch, answers, expected
):
    """`dbt init` walks the adapter's profile_template.yml: what it writes for each choice is a
    target the adapter accepts."""
    import click
    import yaml
    from dbt.task.init import InitTask

    import dbt.include.streamsql as include

    template = yaml.safe_load((Path(include.__file__).parent / "profile_template.yml").read_text())
    pending = list(answers)
    monkeypatch.setattr(click, "prompt", lambda *args, **kwargs: pending.pop(0))
    task = InitTask.__new__(InitTask)
    target = task.generate_target_from_input(template["prompts"], dict(template["fixed"]))
    assert pending == []  # every answer was asked for
    assert target["type"] == "streamsql"
    assert {k: target[k] for k in expected} == expected
    credentials = StreamSQLCredentials.from_dict(
        {k: v for k, v in target.items() if k not in ("type", "threads")}
    )
    assert credentials.method == expected["method"]
