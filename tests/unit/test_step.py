"""The step's orchestration without Spark: which statements, in which order, and crash recovery.

`FakeSqlSession` keeps tables, versions, commit metadata and Delta's idempotent-write ids, so
these tests follow a step through its phases (execution/step.py) exactly as it runs on Spark:
each statement is reduced to its role (`role`), e.g. "history demo.src" or "merge demo.m", and the
roles are compared in order. Whether the SQL computes the right rows is the functional tests'
business (tests/functional/test_differential*.py).
"""

from __future__ import annotations

import re
from typing import List

import pytest

from dbt.adapters.streamsql.execution.context import FAULT_INJECTION_ENV, InjectedFault
from dbt.adapters.streamsql.execution.progress import StepRecord
from dbt.adapters.streamsql.execution.step import ModelSettings, StepError, flush_step, run_step
from tests.unit.fake_sql_session import FakeSqlSession

SRC = [("id", "bigint"), ("k", "bigint"), ("v", "bigint")]
EVENTS = [("id", "bigint"), ("k", "bigint"), ("ts", "timestamp")]
LINEAR = "select id, k, v * 10 as v10 from demo.src where k is not null"
AGGREGATE = "select k, count(*) as n, sum(v) as total, max(v) as hi from demo.src group by k"
STAGED = ("select s.id, a.n from demo.src s join "
          "(select k, count(*) as n from demo.src group by k) a on s.k = a.k")
LATE_WINDOW = ("select k, window(ts, '1 hour').start as ws, count(*) as n from demo.events "
               "group by k, window(ts, '1 hour')")
FAULT_POINTS = ["start", "before_state", "after_state", "before_hold", "before_quarantine",
                "before_commit", "after_commit"]

VIEW = re.compile(r"^CREATE OR REPLACE TEMPORARY VIEW _streamsql_\w+?_[0-9a-f]{8}_(\w+) AS")
CHECKPOINT = re.compile(r"^CHECKPOINT _streamsql_\w+?_[0-9a-f]{8}_(\w+) AS")
RELEASE = re.compile(r"^RELEASE _streamsql_\w+?_[0-9a-f]{8}_(\w+)$")
TABLE_STATEMENTS = [
    (re.compile(r"^DESCRIBE HISTORY (\S+)"), "history"),
    (re.compile(r"^SHOW TBLPROPERTIES (\S+)"), "properties"),
    (re.compile(r"^DESCRIBE TABLE (\S+)"), "columns"),
    (re.compile(r"^SHOW TABLES IN (\S+)"), "exists?"),
    (re.compile(r"^CREATE OR REPLACE TABLE (\S+)"), "create"),
    (re.compile(r"^CREATE TABLE IF NOT EXISTS (\S+)"), "create if missing"),
    (re.compile(r"^INSERT INTO (\S+)"), "insert"),
    (re.compile(r"^MERGE INTO (\S+)"), "merge"),
    (re.compile(r"^UPDATE (\S+)"), "update"),
    (re.compile(r"^DELETE FROM (\S+)"), "delete"),
    (re.compile(r"^RESTORE TABLE (\S+)"), "restore"),
    (re.compile(r"^ALTER TABLE (\S+) SET TBLPROPERTIES"), "mark"),
]


def role(statement: str) -> str:
    """What a statement does, in a few words: its kind and the table or view it concerns."""
    for pattern, kind in ((VIEW, "view"), (CHECKPOINT, "materialize"), (RELEASE, "release")):
        match = pattern.match(statement)
        if match:
            return f"{kind} {match.group(1)}"
    for pattern, kind in TABLE_STATEMENTS:
        match = pattern.match(statement)
        if match:
            return f"{kind} {match.group(1).replace('`', '')}"
    match = re.match(r"^(SET|RESET) spark\.databricks\.delta\.(?:commitInfo|write)\.(\w+)",
                     statement)
    if match:
        return f"{match.group(1).lower()} {match.group(2)}"
    match = re.match(r"^(SET|RESET) (\S+?)(=|$)", statement)
    if match:
        return f"{match.group(1).lower()} {match.group(2)}"
    if statement.startswith("DESCRIBE QUERY"):
        return "describe query"
    return "query"


def roles(session: FakeSqlSession, since: int = 0) -> List[str]:
    return [role(s) for s in session.statements[since:]]


def model(name: str, **configs) -> ModelSettings:
    return ModelSettings(name=name, schema="demo", identifier=name, **configs)


def new_session(*sources) -> FakeSqlSession:
    session = FakeSqlSession()
    for name, columns in sources or [("demo.src", SRC)]:
        session.create_source(name, columns)
    return session


def steps_recorded(session: FakeSqlSession, table: str) -> List[int]:
    """The step numbers of the records in a table's history, oldest first."""
    records = [StepRecord.from_json(c["userMetadata"]) for c in session.commits(table)]
    return [r.step for r in records if r is not None]


# -- which statements, in which order ------------------------------------------------------


def test_a_linear_first_step_creates_the_model_and_appends_the_whole_input():
    session = new_session()
    result = run_step(session, model("m"), LINEAR)
    assert (result.step, result.plan, result.inserted) == (1, "linear", 3)
    assert roles(session) == [
        "history demo.src", "properties demo.src", "columns demo.src",  # 1. inputs
        "describe query",  # the model's columns
        "exists? demo",  # 2. bookkeeping: a first run creates the model, its creation
        "set userMetadata", "create demo.m", "reset userMetadata",  # carrying step 0's record
        "view new_0", "view old_0", "view delta_0", "query",  # 3. the change: a snapshot
        "history demo.m", "view target", "view change",
        "query",  # 5. commit: the change's counts
        "set userMetadata", "reset userMetadata",  # no side tables to write
        "set userMetadata", "set txnAppId", "set txnVersion",
        "insert demo.m",  # the model's one idempotent commit
        "reset userMetadata", "reset txnAppId", "reset txnVersion",
        "history demo.m",  # the commit is this run's
    ]


def test_a_later_linear_step_over_inserts_appends_the_change_feed_without_netting():
    session = new_session()
    run_step(session, model("m"), LINEAR)
    session.append_to("demo.src")
    start = len(session.statements)
    result = run_step(session, model("m"), LINEAR)
    assert (result.step, result.inserted, result.deleted) == (2, 3, 0)
    assert roles(session, start) == [
        "history demo.src", "properties demo.src", "columns demo.src", "describe query",
        "exists? demo", "history demo.m",  # the model's last step record
        "view new_0", "view old_0", "materialize delta_0", "query",  # the change feed, counted
        "view target", "view change", "materialize net",  # no netting: SELECT * of the change
        "query", "set userMetadata", "reset userMetadata",
        "set userMetadata", "set txnAppId", "set txnVersion", "insert demo.m",
        "reset userMetadata", "reset txnAppId", "reset txnVersion", "history demo.m",
        "release net", "release delta_0",
    ]
    net = next(s for s in session.statements[start:] if CHECKPOINT.match(s)
               and CHECKPOINT.match(s).group(1) == "net")
    assert "GROUP BY" not in net
    assert steps_recorded(session, "demo.m") == [0, 1, 2]


def test_a_linear_step_with_deletions_nets_the_change_and_merges_it():
    session = new_session()
    run_step(session, model("m"), LINEAR)
    session.append_to("demo.src")
    session.answers.removals, session.answers.deletes = 1, 1
    start = len(session.statements)
    result = run_step(session, model("m"), LINEAR)
    assert result.deleted == 1
    steps = roles(session, start)
    assert "merge demo.m" in steps and "insert demo.m" not in steps
    netted = [s for s in session.statements[start:]
              if s.startswith("CHECKPOINT") and "_net AS" in s]
    assert len(netted) == 1 and "HAVING SUM(_streamsql_weight) <> 0" in netted[0]


def test_a_run_whose_inputs_did_not_change_is_not_a_step():
    session = new_session()
    run_step(session, model("m"), LINEAR)
    start = len(session.statements)
    result = run_step(session, model("m"), LINEAR)
    assert result.skipped and result.step == 1
    assert roles(session, start) == ["history demo.src", "properties demo.src",
                                     "columns demo.src", "describe query", "exists? demo",
                                     "history demo.m"]
    assert steps_recorded(session, "demo.m") == [0, 1]


def test_an_aggregate_step_writes_its_state_before_the_model():
    session = new_session()
    run_step(session, model("agg"), AGGREGATE)
    session.append_to("demo.src")
    session.answers.deletes = 1  # an updated group: its old row out, its new row in
    start = len(session.statements)
    result = run_step(session, model("agg"), AGGREGATE)
    assert result.plan == "aggregate"
    steps = roles(session, start)
    state, target = "demo.agg__streamsql_state", "demo.agg"
    assert f"history {state}" in steps[:8]  # bookkeeping: is the state as the record says?
    order = [steps.index(r) for r in (
        "materialize group_delta", "view state", "materialize groups_new", "view groups_old",
        "view change", "materialize net", f"merge {state}", f"merge {target}")]
    assert order == sorted(order)
    # the state's new version travels in the model's commit
    record = StepRecord.from_json(session.commits(target)[-1]["userMetadata"])
    assert record.state_version == session.tables[state].version


def test_a_first_aggregate_step_creates_the_state_and_inserts_it_sorted():
    session = new_session()
    run_step(session, model("agg"), AGGREGATE)
    state_writes = [s for s in session.statements if s.startswith("INSERT INTO `demo`.`agg__")]
    assert len(state_writes) == 1 and " ORDER BY " in state_writes[0]
    assert "set spark.sql.files.maxRecordsPerFile" in roles(session)


def test_a_staged_step_maintains_the_stage_first_and_binds_it_as_an_input():
    session = new_session()
    run_step(session, model("st"), STAGED)
    session.append_to("demo.src")
    start = len(session.statements)
    result = run_step(session, model("st"), STAGED)
    assert result.plan == "linear" and "1 stage" in result.reason
    steps = roles(session, start)
    stage = "demo.st__streamsql_stage0"
    order = [steps.index(r) for r in (
        "materialize stage0_group_delta", "materialize stage0_net", "view stage0_whole_state",
        "view stage0_state_after", "view stage0_old", "view stage0_new", "view change",
        f"merge {stage}", "insert demo.st")]
    assert order == sorted(order)
    record = StepRecord.from_json(session.commits("demo.st")[-1]["userMetadata"])
    assert record.stage_versions == {"stage0": session.tables[stage].version}


def test_a_lateness_step_quarantines_and_logs_the_waterline_before_the_model():
    session = new_session(("demo.events", EVENTS))
    session.column_types["ws"] = "timestamp"
    settings = model("lw", lateness={"ws": "INTERVAL 1 HOUR"})
    run_step(session, settings, LATE_WINDOW)
    session.append_to("demo.events")
    session.answers.late, session.answers.deletes = 2, 1
    session.answers.touched_final_groups = ["2024-01-01 08:00:00"]
    start = len(session.statements)
    result = run_step(session, settings, LATE_WINDOW)
    assert (result.late, result.waterline) == (2, {"ws": "2024-01-01 10:00:00"})
    steps = roles(session, start)
    order = [steps.index(r) for r in (
        "describe query", "create if missing demo.lw__late",
        "create if missing demo.lw__waterline", "materialize group_delta",
        "materialize classified", "view on_time", "merge demo.lw__streamsql_state",
        "insert demo.lw__late", "insert demo.lw__waterline", "merge demo.lw")]
    assert order == sorted(order)
    # the state read skips final windows, except the one a late change touches
    state_view = next(s for s in session.statements[start:] if VIEW.match(s)
                      and VIEW.match(s).group(1) == "state")
    assert "IN (CAST('2024-01-01 08:00:00' AS timestamp))" in state_view


def test_watermark_holds_then_flush_releases_everything():
    session = new_session(("demo.events", EVENTS))
    settings = model("wm", watermark={"ts": "INTERVAL 10 MINUTES"})
    run_step(session, settings, "select id, k, ts from demo.events")
    session.answers.held = 2
    session.append_to("demo.events")
    result = run_step(session, settings, "select id, k, ts from demo.events")
    assert result.held == 2
    held = [s for s in session.statements if s.startswith("INSERT INTO `demo`.`wm__pending`")]
    assert held and "WHERE _streamsql_held_step = 2 AND NOT (" in held[-1]
    session.answers.held = 0
    start = len(session.statements)
    flushed = flush_step(session, settings)
    assert (flushed.plan, flushed.step, flushed.held) == ("flush", 3, 0)
    assert any(s.startswith("UPDATE `demo`.`wm__pending` SET _streamsql_released_step = 3 "
                            "WHERE _streamsql_released_step IS NULL AND (true)")
               for s in session.statements[start:])


def test_flush_of_a_model_without_watermark_says_so():
    session = new_session()
    run_step(session, model("m"), LINEAR)
    with pytest.raises(StepError, match="declares no watermark"):
        flush_step(session, model("m"))


# -- crash recovery: a retry after a fault at each point -----------------------------------


@pytest.mark.parametrize("point", FAULT_POINTS)
@pytest.mark.parametrize("kind", ["aggregate", "late_window"])
def test_a_retry_after_a_fault_completes_the_step_exactly_once(monkeypatch, kind, point):
    if kind == "aggregate":
        session, settings, query, source = new_session(), model("f"), AGGREGATE, "demo.src"
    else:
        session = new_session(("demo.events", EVENTS))
        settings, query = model("f", lateness={"ws": "INTERVAL 1 HOUR"}), LATE_WINDOW
        source = "demo.events"
    run_step(session, settings, query)
    session.append_to(source)
    session.answers.removals, session.answers.deletes, session.answers.late = 1, 1, 1
    state_before = session.tables["demo.f__streamsql_state"].version
    monkeypatch.setenv(FAULT_INJECTION_ENV, point)
    reached = point not in ("before_hold",) and not (point == "before_quarantine"
                                                      and kind == "aggregate")
    if reached:
        with pytest.raises(InjectedFault):
            run_step(session, settings, query)
    else:  # the step has no such point: it completes
        run_step(session, settings, query)
    committed = point == "after_commit" or not reached
    assert steps_recorded(session, "demo.f") == ([0, 1, 2] if committed else [0, 1])
    monkeypatch.delenv(FAULT_INJECTION_ENV)

    start = len(session.statements)
    result = run_step(session, settings, query)
    retried = roles(session, start)
    assert steps_recorded(session, "demo.f") == [0, 1, 2]  # step 2 committed exactly once
    if committed:
        assert result.skipped
        return
    assert result.step == 2 and not result.skipped
    state_written = point in ("after_state", "before_quarantine", "before_commit")
    # state written by the failed attempt is restored to the recorded version first
    assert ("restore demo.f__streamsql_state" in retried) == state_written
    if state_written:
        assert f"RESTORE TABLE `demo`.`f__streamsql_state` TO VERSION AS OF {state_before}" in \
            session.statements[start:]
    # quarantine rows of the failed attempt are forgotten before the retry writes its own
    wrote_quarantine = kind == "late_window" and point == "before_commit"
    forgot = [s for s in session.statements[start:]
              if s.startswith("DELETE FROM `demo`.`f__late` WHERE `_streamsql_step` >= 2")]
    assert bool(forgot) == wrote_quarantine
