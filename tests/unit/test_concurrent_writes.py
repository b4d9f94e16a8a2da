"""Two runs of one model at once over a server: Delta's (or the metastore's) refusal of the
slower run's write is the clear 'another run wrote to its tables' error, worded as the run
sees it (a dbt error's title first, a Thrift Server's wrapper around Delta's words)."""

from __future__ import annotations

import pytest

from dbt.adapters.streamsql.execution.pipeline.step import (
    ModelSettings,
    StepError,
    concurrent_write,
    run_step,
)
from tests.unit.fake_sql_session import FakeSqlSession

LINEAR = "select id, k, v * 10 as v10 from demo.src where k is not null"

THRIFT = "org.apache.hive.service.cli.HiveSQLException: Error running query: "
PROTOCOL_CHANGED = (
    "[DELTA_PROTOCOL_CHANGED] ProtocolChangedException: The protocol version of the Delta table "
    "has been changed by a concurrent update. This happens when multiple writers are writing to "
    "an empty directory."
)
# What each says, as the first line of Delta's or the metastore's message.
REFUSALS = [
    # two first steps' CREATE OR REPLACE of one table (seen over a Thrift Server)
    "[DELTA_PROTOCOL_CHANGED] io.delta.exceptions.ProtocolChangedException: " + PROTOCOL_CHANGED,
    "[DELTA_METADATA_CHANGED] MetadataChangedException: The metadata of the Delta table "
    "`demo`.`m` has been changed by a concurrent update. Please try the operation again.",
    "[DELTA_CONCURRENT_WRITE] ConcurrentWriteException: A concurrent transaction has written "
    "new data since the current transaction read the table.",
    "[DELTA_CONCURRENT_APPEND.WITHOUT_HINT] Transaction conflict detected.",
    "[DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION] Cannot create table ('`demo`.`m`').",
    "[TABLE_OR_VIEW_ALREADY_EXISTS] Cannot create table or view `demo`.`m` because it already "
    "exists.",
    # both runs passed Spark's check before the Hive metastore's (Derby's) create
    "org.apache.hadoop.hive.ql.metadata.HiveException: "
    "AlreadyExistsException(message:Table hive.demo.m already exists)",
]


def as_run_sees_it(refusal: str) -> str:
    """A Thrift Server's error as dbt-spark raises it: dbt's titles, the server's wrapper, then
    the stack trace."""
    return (
        "Runtime Error\n  Database Error\n"
        f"    {THRIFT}{refusal}\n"
        "    \tat org.apache.spark.sql.hive.thriftserver.HiveThriftServerErrors$.runningQueryError"
        "(HiveThriftServerErrors.scala:43)\n"
    )


@pytest.mark.parametrize("refusal", REFUSALS)
def test_a_refused_write_is_found_on_its_own_line(refusal):
    quoted = PROTOCOL_CHANGED if "ProtocolChanged" in refusal else refusal  # the class once
    assert concurrent_write(RuntimeError(refusal)) == quoted
    assert concurrent_write(RuntimeError(as_run_sees_it(refusal))) == quoted


@pytest.mark.parametrize(
    "other",
    [
        "[TABLE_OR_VIEW_NOT_FOUND] The table or view `demo`.`src` cannot be found.",
        "Runtime Error\n  Database Error\n    " + THRIFT + "[DIVIDE_BY_ZERO] Division by zero.",
        "[DELTA_FILE_NOT_FOUND_DETAILED] File referenced in the transaction log cannot be found.",
    ],
)
def test_other_errors_are_not_another_runs(other):
    assert concurrent_write(RuntimeError(other)) is None


@pytest.mark.parametrize("refusal", REFUSALS)
def test_another_run_creating_the_same_tables_is_a_clean_error(refusal):
    """Two first steps at once: the slower one's CREATE of the model's table is refused, and the
    message quotes Delta's words, not dbt's title or the server's wrapper."""
    session = FakeSqlSession()
    session.create_source("demo.src", [("id", "bigint"), ("k", "bigint"), ("v", "bigint")])
    session.fail_on = ("CREATE TABLE", as_run_sees_it(refusal))
    with pytest.raises(StepError) as error:
        run_step(session, ModelSettings(name="m", schema="demo", identifier="m"), LINEAR)
    message = str(error.value)
    assert message.startswith("Model m: another run wrote to its tables at the same time")
    assert f"refused this run's write: {concurrent_write(RuntimeError(refusal))[:60]}" in message
    assert "run again to continue" in message
    assert "HiveSQLException" not in message and "Runtime Error" not in message


def test_a_first_step_does_not_replace_a_model_table_another_run_just_created(monkeypatch):
    """Two first steps at once, both having found no table: the one whose CREATE comes second
    must not replace the table the other one is stepping (both would then apply step 1: the
    rows twice). Its model CREATE is a plain one, refused with the clear error; the other
    run's table and history are untouched."""
    from dbt.adapters.streamsql.execution.commit import history

    session = FakeSqlSession()
    session.create_source("demo.src", [("id", "bigint"), ("k", "bigint"), ("v", "bigint")])
    model = ModelSettings(name="m", schema="demo", identifier="m")
    run_step(session, model, LINEAR)  # the other run: step 1 done
    before = list(session.tables["demo.m"].history)
    monkeypatch.setattr(history, "target_exists", lambda ctx: False)  # this run checked earlier
    with pytest.raises(StepError) as error:
        run_step(session, model, LINEAR)
    assert str(error.value).startswith("Model m: another run wrote to its tables at the same time")
    assert "TABLE_OR_VIEW_ALREADY_EXISTS" in str(error.value)
    assert session.tables["demo.m"].history == before
    # a full refresh still replaces it
    run_step(
        session, ModelSettings(name="m", schema="demo", identifier="m", full_refresh=True), LINEAR
    )
