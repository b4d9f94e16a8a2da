"""The statement log of a step (execution/trace.py): every statement sent, in order, with its role,
and the target/run/ file made of it; without Spark."""

from __future__ import annotations

import contextlib
import threading
import time
from types import SimpleNamespace
from typing import Any, Dict, List, Optional

import pytest

from dbt.adapters.streamsql import impl
from dbt.adapters.streamsql.execution.engine.sql_session import AdapterSqlSession, wait_for
from dbt.adapters.streamsql.execution.engine.trace import StatementTrace, read_script
from dbt.adapters.streamsql.execution.shared.errors import StepError
from tests.unit.test_step import (
    AGGREGATE,
    EVENTS,
    LATE_WINDOW,
    LINEAR,
    flush_step,
    model,
    new_session,
    run_step,
)


def traced_steps(kind: str):
    """Two steps (and a flush, with WATERMARK) of one model; the session that ran them."""
    if kind == "linear":
        session, settings, query, source = new_session(), model("m"), LINEAR, "demo.src"
    elif kind == "aggregate":
        session, settings, query, source = new_session(), model("agg"), AGGREGATE, "demo.src"
    else:
        session = new_session(("demo.events", EVENTS))
        session.column_types["ws"] = "timestamp"
        settings = model(
            "lw", lateness={"ws": "INTERVAL 1 HOUR"}, watermark={"ws": "INTERVAL 1 HOUR"}
        )
        query, source = LATE_WINDOW, "demo.events"
    run_step(session, settings, query)
    session.append_to(source)
    session.answers.late, session.answers.deletes, session.answers.held = 1, 1, 1
    run_step(session, settings, query)
    if kind == "event_time":
        flush_step(session, settings)
    return session


@pytest.mark.parametrize("kind", ["linear", "aggregate", "event_time"])
def test_every_statement_is_traced_in_the_order_sent_with_a_one_line_role(kind):
    session = traced_steps(kind)
    assert [statement for _, statement in session.trace.entries] == session.statements
    for role, statement in session.trace.entries:
        assert role and "\n" not in role, statement


def test_the_roles_say_what_each_write_and_read_of_a_step_is():
    session = traced_steps("event_time")
    roles = [role for role, _ in session.trace.entries]
    for expected in [
        "create the LATENESS quarantine `demo`.`lw__late`, empty",
        "create the WATERMARK held changes `demo`.`lw__pending`, empty",
        "the columns of the model's query",
        "the aggregate: the change of each group, from the changes of demo.events versions 1..1; "
        "how many groups, and their key ranges",
        "net change of the model",
        "LATENESS: the change, each row on time, late, null or future",
        "MERGE the change into the model `demo`.`lw`, by key (step 2)",
        "is the model's new commit this run's?: the last commit of `demo`.`lw`",
        "append the step's waterlines to `demo`.`lw__waterline`",
        "append the step's late changes to `demo`.`lw__late`",
        "MERGE into `demo`.`lw__pending`: the changes the step releases and those it holds",
        "append the changed groups' new state to `demo`.`lw__streamsql_state`",
    ]:
        assert expected in roles, expected
    # what serves a write is named after it: the step record and Delta's idempotent-write id
    record = next(
        i
        for i, (_, s) in enumerate(session.trace.entries)
        if s.startswith("INSERT INTO `demo`.`lw__late`")
    )
    # (sent as one statement: the embedded session sets them in one call, with the resets of
    # the write before, sql_session.LaterResets)
    assert session.trace.entries[record - 1][0] == (
        "append the step's late changes to `demo`.`lw__late`: the settings unset: the step "
        "record, Delta's idempotent-write id, its version (the step); the settings of the next "
        "commit: the step record, Delta's idempotent-write id, its version (the step)"
    )
    assert session.trace.entries[record + 1][0] == (
        "MERGE into `demo`.`lw__pending`: the changes the step releases and those it holds: "
        "the settings unset: the step record, Delta's idempotent-write id, its version (the "
        "step); the settings of the next commit: the step record, Delta's idempotent-write id, "
        "its version (the step)"
    )


def test_an_appended_change_names_the_inputs_its_insert_reads():
    session = traced_steps("linear")
    (insert,) = [
        role
        for role, s in session.trace.entries
        if s.startswith("INSERT INTO `demo`.`m`") and "table_changes" in s
    ]
    assert insert == (
        "append the change to the model `demo`.`m` (step 2), from the changes of "
        "demo.src versions 1..1"
    )


@pytest.mark.parametrize(
    "statement, role",
    [
        ("DESCRIBE HISTORY `demo`.`src` LIMIT 1", "the last commit of `demo`.`src`"),
        ("DESCRIBE HISTORY `demo`.`src` LIMIT 50", "the last 50 commits of `demo`.`src`"),
        ("SHOW TABLES IN `demo` LIKE 'm'", "whether `demo` has a table m"),
        (
            "SET spark.sql.files.maxRecordsPerFile=250000",
            "the setting spark.sql.files.maxRecordsPerFile",
        ),
        (
            "RESET spark.sql.files.maxRecordsPerFile",
            "the setting spark.sql.files.maxRecordsPerFile unset",
        ),
        (
            "SET spark.sql.files.maxRecordsPerFile=250000;\n"
            "SET spark.databricks.delta.commitInfo.userMetadata={}",
            "the settings of the next commit: spark.sql.files.maxRecordsPerFile, the step record",
        ),
        (
            "RESET spark.sql.files.maxRecordsPerFile;\nRESET spark.databricks.delta.write.txnAppId",
            "the settings unset: spark.sql.files.maxRecordsPerFile, Delta's idempotent-write id",
        ),
        ("DROP VIEW IF EXISTS _v_a;\nDROP VIEW IF EXISTS _v_b", "free the views _v_a, _v_b"),
        ("CHECKPOINT _v_net AS SELECT 1", "_v_net, computed now"),
        ("CACHE TABLE _v_net AS SELECT 1", "_v_net, computed now"),
        ("MERGE INTO `demo`.`m` AS t USING x", "MERGE into `demo`.`m`"),
        ("SELECT 1", "a query"),
    ],
)
def test_a_statement_without_a_role_is_named_by_its_text(statement, role):
    trace = StatementTrace()
    trace.record(statement)
    assert trace.entries == [(role, statement)]


def test_the_innermost_role_counts_and_serving_statements_get_both():
    trace = StatementTrace()
    with trace.role("outer"):
        trace.record("SELECT 1")
        with trace.role("inner"):
            trace.record("SET a=b")
            trace.record("INSERT INTO t SELECT 1")
        with trace.role(None):
            trace.record("SELECT 2")
    trace.record("SELECT 3")
    assert [role for role, _ in trace.entries] == [
        "outer",
        "inner: the setting a",
        "inner",
        "outer",
        "a query",
    ]


def test_a_script_reads_back_as_the_statements_it_holds():
    trace = StatementTrace()
    statements = [
        "SELECT 1",
        "SELECT a,\n  b -- a comment\nFROM t WHERE x = ';'",
        "-- 2. looks like a role line\nSELECT 2",
        "INSERT INTO t VALUES (1);",
    ]
    with trace.role("a role\nover two lines"):
        for statement in statements:
            trace.record(statement)
    text = trace.script(["first line", "second line"])
    assert text.startswith("-- first line\n-- second line\n\n-- 1. a role over two lines\n")
    assert read_script(text) == [("a role over two lines", s) for s in statements]


class Relation:
    identifier, schema = "m", "demo"

    def __str__(self) -> str:
        return "demo.m"


class RecordingConnections:
    """dbt's connection manager as AdapterSqlSession uses it over Thrift (no embedded Spark)."""

    def __init__(self, fail_on: str = "") -> None:
        self.sent: List[str] = []
        self.fail_on = fail_on

    def add_query(self, statement: str, auto_begin: bool = True) -> Any:
        self.sent.append(statement)
        if self.fail_on and statement.startswith(self.fail_on):
            raise RuntimeError("boom")
        return None, SimpleNamespace(fetchall=lambda: [(1,)], description=[("n",)])

    def get_thread_connection(self) -> Any:
        return SimpleNamespace(handle=SimpleNamespace(), name="model.test.m")


def test_the_adapters_session_records_what_it_sends_as_it_sends_it():
    connections = RecordingConnections(fail_on="MERGE")
    session = AdapterSqlSession(SimpleNamespace(connections=connections))
    with session.trace.role("count"):
        assert session.query("SELECT COUNT(*) AS n FROM t") == [{"n": 1}]
    session.materialize("_v_net", "SELECT 1")
    session.release(["_v_net"])
    with pytest.raises(RuntimeError):
        session.run("MERGE INTO t USING s")
    assert [statement for _, statement in session.trace.entries] == connections.sent
    assert [role for role, _ in session.trace.entries] == [
        "count",
        "free the view _v_net",  # one a failed step left behind
        "_v_net, computed now",  # CACHE TABLE
        "free the view _v_net",
        "MERGE into t",
    ]


class EmbeddedSpark:
    """What AdapterSqlSession calls on the embedded SparkSession for settings and views."""

    def __init__(self, settings: Optional[Dict[str, str]] = None) -> None:
        self.calls: List[str] = []
        self.conf = SimpleNamespace(
            set=lambda key, value: self.calls.append(f"set {key}={value}"),
            unset=lambda key: self.calls.append(f"unset {key}"),
            getAll=dict(settings or {}),  # a property: the session's own settings
        )
        # one key of them (in this process, the step reads only the keys it sets)
        self.conf.get = lambda key, default: self.conf.getAll.get(key, default)
        self.catalog = SimpleNamespace(dropTempView=lambda name: self.calls.append(f"drop {name}"))


def test_the_embedded_session_sends_a_writes_settings_and_the_views_it_frees_as_one_statement():
    spark, connections = EmbeddedSpark(), RecordingConnections()
    embedded = SimpleNamespace(handle=SimpleNamespace(spark=spark))  # the cursor's handle
    connection = SimpleNamespace(handle=embedded, name="model.test.m")
    connections.get_thread_connection = lambda: connection
    connections.exception_handler = lambda sql: contextlib.nullcontext()
    session = AdapterSqlSession(SimpleNamespace(connections=connections))
    session.set_confs([("a.b", "1"), ("spark.databricks.delta.write.txnVersion", "2")])
    session.unset_confs(["a.b", "spark.databricks.delta.write.txnVersion"])
    session.release(["_v_net", "_v_old"])
    session.release([])
    assert connections.sent == []  # no SQL statement: Spark's own calls
    assert spark.calls == [
        "set a.b=1",
        "set spark.databricks.delta.write.txnVersion=2",
        "unset a.b",
        "unset spark.databricks.delta.write.txnVersion",
        "drop _v_net",
        "drop _v_old",
    ]
    assert [statement for _, statement in session.trace.entries] == [
        "SET a.b=1;\nSET spark.databricks.delta.write.txnVersion=2",
        "RESET a.b;\nRESET spark.databricks.delta.write.txnVersion",
        "DROP VIEW IF EXISTS _v_net;\nDROP VIEW IF EXISTS _v_old",
    ]
    # A setting the session had of its own (a profile's server_side_parameters) is set back to
    # its value, not unset (which would give it Spark's default for the rest of the session).
    spark.calls.clear()
    spark.conf.getAll = {"spark.sql.adaptive.enabled": "false"}
    session = AdapterSqlSession(SimpleNamespace(connections=connections))
    session.set_confs([("spark.sql.adaptive.enabled", "true"), ("a.b", "1")])
    session.unset_confs(["spark.sql.adaptive.enabled", "a.b"])
    assert spark.calls == [
        "set spark.sql.adaptive.enabled=true",
        "set a.b=1",
        "set spark.sql.adaptive.enabled=false",
        "unset a.b",
    ]
    # over Thrift, only SQL reaches Spark: one statement each
    thrift = RecordingConnections()
    session = AdapterSqlSession(SimpleNamespace(connections=thrift))
    session.set_confs([("a.b", "1"), ("c.d", "2")])
    session.unset_confs(["a.b", "c.d"])
    session.release(["_v_net", "_v_old"])
    assert thrift.sent == [
        "SET a.b=1",
        "SET c.d=2",
        "RESET a.b",
        "RESET c.d",
        "DROP VIEW IF EXISTS _v_net",
        "DROP VIEW IF EXISTS _v_old",
    ]


def test_inside_a_step_resets_go_with_the_next_call_and_never_outlive_the_step():
    spark, connections = EmbeddedSpark({"c.d": "own"}), RecordingConnections()
    connections.add_query = lambda statement, auto_begin=True: (
        spark.calls.append(f"sql {statement}"),
        SimpleNamespace(fetchall=lambda: [], description=[]),
    )
    embedded = SimpleNamespace(handle=SimpleNamespace(spark=spark))
    connection = SimpleNamespace(handle=embedded, name="model.test.m")
    connections.get_thread_connection = lambda: connection
    connections.exception_handler = lambda sql: contextlib.nullcontext()
    session = AdapterSqlSession(SimpleNamespace(connections=connections))
    with session.resets_later():
        with session.trace.role("first write"):
            session.set_confs([("a.b", "1"), ("c.d", "2")])
            session.unset_confs(["a.b", "c.d"])
        assert spark.calls == ["set a.b=1", "set c.d=2"]  # the resets wait
        with session.trace.role("second write"):
            session.set_confs([("a.b", "3")])  # one call: c.d back to its own value, a.b set
            assert spark.calls[2:] == ["set c.d=own", "set a.b=3"]
            session.unset_confs(["a.b"])
        session.run("SELECT 1")  # a statement never runs under a reset that waits
        assert spark.calls[4:] == ["unset a.b", "sql SELECT 1"]
        session.set_confs([("e.f", "1")])
        session.unset_confs(["e.f"])
        session.release(["_v_net"])  # one call: the reset and the view freed
        assert spark.calls[6:] == ["set e.f=1", "unset e.f", "drop _v_net"]
        session.set_confs([("g.h", "1")])
        session.unset_confs(["g.h"])
    assert spark.calls[9:] == ["set g.h=1", "unset g.h"]  # sent as the step ends
    assert session.trace.entries == [
        ("first write: the settings of the next commit: a.b, c.d", "SET a.b=1;\nSET c.d=2"),
        (
            "second write: the settings unset: a.b, c.d; the settings of the next commit: a.b",
            "RESET a.b;\nRESET c.d;\nSET a.b=3",
        ),
        ("second write: the setting a.b unset", "RESET a.b"),  # as the write it served
        ("a query", "SELECT 1"),
        ("the setting e.f", "SET e.f=1"),
        ("the settings unset: e.f; free the view _v_net", "RESET e.f;\nDROP VIEW IF EXISTS _v_net"),
        ("the setting g.h", "SET g.h=1"),
        ("the setting g.h unset", "RESET g.h"),
    ]
    # a step that fails still leaves no setting behind
    spark.calls.clear()
    with pytest.raises(RuntimeError), session.resets_later():
        session.set_confs([("a.b", "1")])
        session.unset_confs(["a.b"])
        raise RuntimeError("the write failed")
    assert spark.calls == ["set a.b=1", "unset a.b"]


def test_a_failed_step_still_writes_the_statements_it_sent(monkeypatch):
    def failing_step(session, settings, compiled_sql, log, side_sql):
        session.run("INSERT INTO `demo`.`m` SELECT 1")
        raise StepError("Model m: something failed\nmore detail")

    monkeypatch.setattr(impl, "run_step", failing_step)
    adapter = SimpleNamespace(
        connections=RecordingConnections(), _side_table_sql=lambda macros: None
    )
    relation = Relation()
    written: List[str] = []
    with pytest.raises(Exception, match="something failed"):
        impl.StreamSQLAdapter.streamsql_step(
            adapter, relation, "select 1", {}, False, None, written.append
        )
    (text,) = written
    assert text.splitlines()[0].endswith(": the step failed: Model m: something failed")
    assert read_script(text) == [("insert into `demo`.`m`", "INSERT INTO `demo`.`m` SELECT 1")]


def test_a_file_that_cannot_be_written_is_a_warning_not_a_failure():
    def cannot_write(text: str) -> None:
        raise OSError("disk full")

    session = SimpleNamespace(trace=StatementTrace())
    impl.write_statements(cannot_write, session, "demo.m", "m: step 1: ...")  # no exception


def test_measures_that_do_not_arrive_are_waited_for_a_bounded_time():
    assert wait_for(lambda: {"n": 1}, 5) == {"n": 1}
    gate = threading.Event()
    started = time.monotonic()
    assert wait_for(lambda: gate.wait(30), 0.2) is None  # then the session queries them
    assert time.monotonic() - started < 5
    gate.set()


def test_measures_are_queried_after_the_cached_view_over_thrift():
    thrift = RecordingConnections()
    session = AdapterSqlSession(SimpleNamespace(connections=thrift))
    values = session.materialize("_v_d", "SELECT 1 AS k", {"n": "COUNT(*)"}, "g")
    assert values == {"n": 1}
    assert thrift.sent[-1] == "SELECT COUNT(*) AS n FROM _v_d AS g"
