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

from dbt.adapters.streamsql.execution.commit import tables
from dbt.adapters.streamsql.execution.commit.record import (
    StepRecord,
    legacy_fingerprint,
    sql_fingerprint,
)
from dbt.adapters.streamsql.execution.pipeline import small_step
from dbt.adapters.streamsql.execution.pipeline.step import (
    ModelSettings,
    StepError,
    flush_step,
    run_step,
)
from dbt.adapters.streamsql.execution.shared.errors import FAULT_INJECTION_ENV, InjectedFault
from tests.unit.fake_sql_session import FakeSqlSession

SRC = [("id", "bigint"), ("k", "bigint"), ("v", "bigint")]
EVENTS = [("id", "bigint"), ("k", "bigint"), ("ts", "timestamp")]
LINEAR = "select id, k, v * 10 as v10 from demo.src where k is not null"
AGGREGATE = "select k, count(*) as n, sum(v) as total, max(v) as hi from demo.src group by k"
STAGED = (
    "select s.id, a.n from demo.src s join "
    "(select k, count(*) as n from demo.src group by k) a on s.k = a.k"
)
LATE_WINDOW = (
    "select k, window(ts, '1 hour').start as ws, count(*) as n from demo.events "
    "group by k, window(ts, '1 hour')"
)
FAULT_POINTS = [
    "start",
    "before_state",
    "after_state",
    "before_hold",
    "before_quarantine",
    "before_commit",
    "after_commit",
]

VIEW = re.compile(r"^CREATE OR REPLACE TEMPORARY VIEW _streamsql_\w+?_[0-9a-f]{8}_(\w+) AS")
CHECKPOINT = re.compile(r"^CHECKPOINT _streamsql_\w+?_[0-9a-f]{8}_(\w+) AS")
RELEASE = re.compile(r"^DROP VIEW IF EXISTS _streamsql_\w+?_[0-9a-f]{8}_(\w+)$")
TABLE_STATEMENTS = [
    (re.compile(r"^DESCRIBE HISTORY (\S+)"), "history"),
    (re.compile(r"^DESCRIBE DETAIL (\S+)"), "detail"),
    (re.compile(r"^DESCRIBE TABLE (\S+)"), "columns"),
    (re.compile(r"^SHOW TABLES IN (\S+)"), "exists?"),
    (re.compile(r"^CREATE OR REPLACE TABLE (\S+)"), "create"),
    (re.compile(r"^CREATE TABLE IF NOT EXISTS (\S+)"), "create if missing"),
    (re.compile(r"^CREATE TABLE (\S+)"), "create, not replacing"),
    (re.compile(r"^INSERT INTO (\S+)"), "insert"),
    (re.compile(r"^INSERT OVERWRITE (\S+)"), "overwrite"),
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
    match = re.match(
        r"^(SET|RESET) spark\.databricks\.delta\.(?:commitInfo|write)\.(\w+)", statement
    )
    if match:
        return f"{match.group(1).lower()} {match.group(2)}"
    match = re.match(r"^(SET|RESET) (\S+?)(=|$)", statement)
    if match:
        return f"{match.group(1).lower()} {match.group(2)}"
    if statement.startswith("DESCRIBE QUERY"):
        return "describe query"
    return "query"


def roles(session: FakeSqlSession, since: int = 0) -> List[str]:
    """The role of each statement sent; one sent for several (settings, views freed: one
    call in the embedded session) gives one role for each of its parts."""
    return [role(part) for s in session.statements[since:] for part in s.split(";\n")]


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
# The fake answers catalog questions through SQL (SqlDeltaLog), as a Thrift connection does; the
# embedded session asks the same of Delta's log in the JVM, without statements.

INPUT_AND_MODEL = ["history demo.src", "detail demo.src", "columns demo.src", "exists? demo"]
COMMIT = ["set userMetadata", "set txnAppId", "set txnVersion"]
COMMITTED = [
    "reset userMetadata",
    "reset txnAppId",
    "reset txnVersion",
    "history demo.m",
]  # the commit is this run's (and counts its rows)


def test_a_linear_first_step_creates_the_model_and_appends_the_whole_input():
    session = new_session()
    result = run_step(session, model("m"), LINEAR)
    assert (result.step, result.plan, result.inserted) == (1, "linear", 3)
    assert (
        roles(session)
        == INPUT_AND_MODEL
        + [
            "describe query",  # 2. the model's columns, for the plan
            "describe query",  # the planner's reading of the query, checked (once per query)
            "set userMetadata",
            "create, not replacing demo.m",
            "reset userMetadata",  # step 0's record
            "query",  # 3. the input's rows, counted: a first step's change is the whole input
        ]
        + COMMIT
        + ["insert demo.m"]
        + COMMITTED
    )
    insert = next(s for s in session.statements if s.startswith("INSERT INTO `demo`.`m`"))
    assert "FROM `demo`.`src` VERSION AS OF 0" in insert  # read by the INSERT itself


def test_a_later_linear_step_over_appends_is_one_insert_of_the_change_feed():
    session = new_session()
    run_step(session, model("m"), LINEAR)
    session.append_to("demo.src", rows=5)
    session.answers.inserts = 4
    start = len(session.statements)
    result = run_step(session, model("m"), LINEAR)
    assert (result.step, result.changes_read, result.inserted, result.deleted) == (2, 5, 4, 0)
    assert (
        roles(session, start)
        == INPUT_AND_MODEL
        + [
            "history demo.m",  # the model's last step record
            "describe query",
            "history demo.src",
            "history demo.src",  # the input's commits since: appends of 5 rows
        ]
        + COMMIT
        + ["insert demo.m"]
        + COMMITTED
    )
    insert = next(s for s in session.statements[start:] if s.startswith("INSERT"))
    assert "FROM table_changes('demo.src', 1, 1)" in insert and "GROUP BY" not in insert
    assert "raise_error(" in insert  # a row that is not an insert fails the step
    assert steps_recorded(session, "demo.m") == [0, 1, 2]


def test_a_linear_step_with_deletions_nets_the_change_and_merges_it():
    session = new_session()
    run_step(session, model("m"), LINEAR)
    session.delete_from("demo.src", rows=2)
    session.answers.inserts, session.answers.deletes = 0, 2
    start = len(session.statements)
    result = run_step(session, model("m"), LINEAR)
    assert (result.changes_read, result.deleted) == (2, 2)
    steps = roles(session, start)
    assert steps[-len(COMMITTED) - 1 :] == ["merge demo.m"] + COMMITTED[:-1] + [
        "history demo.m"
    ] or steps[-2:] == ["history demo.m", "release net"]
    assert "merge demo.m" in steps and "insert demo.m" not in steps
    netted = [
        s for s in session.statements[start:] if s.startswith("CHECKPOINT") and "_net AS" in s
    ]
    assert len(netted) == 1 and "HAVING SUM(_streamsql_weight) <> 0" in netted[0]
    # the model's rows a whole-row MERGE may delete lie in the deleted rows' range of every
    # column: literal bounds on the target, measured with the change's counts in the pass that
    # computes the change (no query of their own)
    (counts,) = [s for s in session.statements[start:] if " AS inserts" in s]
    assert counts == netted[0]
    assert "MIN(CASE WHEN t._streamsql_weight < 0 THEN t.`id` END)" in counts
    merge = next(s for s in session.statements[start:] if s.startswith("MERGE INTO `demo`.`m`"))
    assert "((t.`id` >= CAST('1' AS bigint)) AND (t.`id` <= CAST('1' AS bigint)))" in merge
    # its source joins the change with the model: Delta copies it rather than join twice
    assert not any("materializeSource" in s for s in session.statements[start:])


def test_a_run_whose_inputs_did_not_change_is_not_a_step_and_plans_nothing():
    session = new_session()
    run_step(session, model("m"), LINEAR)
    start = len(session.statements)
    result = run_step(session, model("m"), LINEAR)
    assert result.skipped and result.step == 1 and result.plan == "linear"
    assert roles(session, start) == INPUT_AND_MODEL + ["history demo.m"]
    assert steps_recorded(session, "demo.m") == [0, 1]


def test_a_comment_or_new_layout_is_not_a_changed_query():
    session = new_session()
    run_step(session, model("m"), AGGREGATE)
    session.append_to("demo.src")
    edited = (
        "-- counts per key\nselect k,\n       count(*) as n, /* the total */ sum(v) as total,"
        "\n       max(v) as hi\nfrom demo.src\ngroup by k"
    )
    assert run_step(session, model("m"), edited).step == 2


def test_a_changed_query_names_the_clause_that_changed():
    session = new_session()
    run_step(session, model("m"), LINEAR)
    session.append_to("demo.src")
    with pytest.raises(StepError) as refused:
        run_step(session, model("m"), LINEAR.replace("k is not null", "k > 0"))
    message = str(refused.value)
    assert "Model m: its SQL changed since step 1 (its WHERE clause)" in message
    assert "--full-refresh --select m" in message


def test_a_record_with_the_fingerprint_of_earlier_versions_continues_and_is_upgraded():
    """Records made before the canonical fingerprint hash the text, whitespace collapsed: such
    a model takes its next step without a full refresh, and records the new fingerprint."""
    session = new_session()
    run_step(session, model("m"), LINEAR)
    last = session.commits("demo.m")[-1]
    record = StepRecord.from_json(last["userMetadata"])
    record.sql_fingerprint, record.sql_clauses = legacy_fingerprint(LINEAR), {}
    last["userMetadata"] = record.to_json()
    session.append_to("demo.src")
    assert run_step(session, model("m"), LINEAR).step == 2
    upgraded = StepRecord.from_json(session.commits("demo.m")[-1]["userMetadata"])
    assert upgraded.sql_fingerprint == sql_fingerprint(LINEAR) != legacy_fingerprint(LINEAR)
    assert set(upgraded.sql_clauses) == {"SELECT list", "FROM clause", "WHERE clause"}


def test_a_query_whose_canonical_form_changed_with_the_parser_still_matches_by_its_text():
    """An upgrade of the SQL parser may print the same query differently: the record also keeps
    the text's fingerprint, so an unchanged model continues."""
    session = new_session()
    run_step(session, model("m"), LINEAR)
    last = session.commits("demo.m")[-1]
    record = StepRecord.from_json(last["userMetadata"])
    assert record.sql_text_fingerprint == legacy_fingerprint(LINEAR)
    record.sql_fingerprint = "printed-otherwise"
    last["userMetadata"] = record.to_json()
    session.append_to("demo.src")
    assert run_step(session, model("m"), LINEAR).step == 2
    with pytest.raises(StepError, match="its SQL changed since step 2"):
        session.append_to("demo.src")
        run_step(session, model("m"), LINEAR.replace("v * 10", "v * 20"))


def test_an_aggregate_step_commits_the_model_then_appends_its_state():
    session = new_session()
    run_step(session, model("agg"), AGGREGATE)
    session.append_to("demo.src")
    session.answers.deletes = 1  # an updated group: its old row out, its new row in
    start = len(session.statements)
    result = run_step(session, model("agg"), AGGREGATE)
    assert result.plan == "aggregate"
    steps = roles(session, start)
    state, target = "demo.agg__streamsql_state", "demo.agg"
    # (MIN/MAX: may a deleted value have been one? measured as the group delta is computed)
    (delta,) = [
        s
        for s in session.statements[start:]
        if CHECKPOINT.match(s) and CHECKPOINT.match(s).group(1) == "group_delta"
    ]
    assert " AS recompute FROM " in delta
    assert not any(s.startswith("SELECT COUNT(*) AS n FROM") for s in session.statements[start:])
    order = [steps.index(r) for r in ("materialize group_delta", "materialize groups_old")] + [
        steps.index(r)
        for r in (
            "materialize groups_new",
            "materialize net",
            f"merge {target}",
            f"insert {state}",
        )
    ]
    assert order == sorted(order)
    assert "materialize delta_0" not in steps  # the change feed is read once: inline
    # the MERGE by key reads only the checkpointed change: Delta need not copy it first
    sent = session.statements[start:]
    setting = next(i for i, s in enumerate(sent) if "merge.materializeSource=none" in s)
    assert role(sent[setting + 1]) == f"merge {target}", sent[setting:]
    # the state is read by step number (no version to pin), and the record names the state
    # append as the step's side write, which carries the record and an id of its own
    checkpoints = {
        CHECKPOINT.match(s).group(1): s for s in session.statements[start:] if CHECKPOINT.match(s)
    }
    assert "WHERE _streamsql_step <= 1" in checkpoints["groups_old"]
    # read once: the new state and the output change start from the changed groups' old state
    assert "agg__streamsql_state" in checkpoints["groups_old"]
    assert all("agg__streamsql_state" not in checkpoints[name] for name in ("groups_new", "net"))
    record = StepRecord.from_json(session.commits(target)[-1]["userMetadata"])
    assert record.side_writes == ["__streamsql_state"]
    appended = session.commits(state)[-1]
    assert StepRecord.from_json(appended["userMetadata"]).step == 2
    assert session.tables[state].txns == {
        f"streamsql:demo.agg:{record.incarnation}:__streamsql_state": 2
    }


def state_writes(session: FakeSqlSession, steps: int, state: str) -> List[str]:
    """The writes to `state` (insert, overwrite, merge) of `steps` steps of the model `agg`, each
    after one more append to its input."""
    writes = []
    for _ in range(steps):
        start = len(session.statements)
        run_step(session, model("agg"), AGGREGATE)
        writes += [
            r
            for r in roles(session, start)
            if r.endswith(state) and r.split()[0] in ("insert", "overwrite", "merge")
        ]
        session.append_to("demo.src")
    return writes


def test_state_tables_are_logs_appended_each_step_and_compacted_when_they_outgrow_the_groups(
    monkeypatch,
):
    monkeypatch.setattr(tables, "COMPACT_MIN_ROWS", 0)  # as for a state of 100K groups or more
    session = new_session()
    state = "demo.agg__streamsql_state"
    writes = state_writes(session, 4, state)
    # 3 live groups: after two appends of 3 changed groups each, the log has outgrown them,
    # and the fourth step compacts it (before it reads it) and then appends its own rows
    assert writes == [
        f"insert {state}",
        f"insert {state}",
        f"insert {state}",
        f"overwrite {state}",
        f"insert {state}",
    ]
    record = StepRecord.from_json(session.commits("demo.agg")[-1]["userMetadata"])
    assert record.state_log == {"state": [3, 3, 1]} and record.state_layout == "log"
    compaction = [s for s in session.statements if s.startswith("INSERT OVERWRITE")][0]
    assert "WHERE _streamsql_step <= 3" in compaction and " ORDER BY " in compaction


def test_a_small_state_table_is_compacted_by_its_appends_not_its_rows(monkeypatch):
    # Below COMPACT_MIN_ROWS appended rows, the log outgrowing its groups is not worth a rewrite
    # of the table; the number of appends (and with it of files) still bounds it.
    monkeypatch.setattr(tables, "COMPACT_AFTER_STEPS", 3)
    session = new_session()
    state = "demo.agg__streamsql_state"
    writes = state_writes(session, 6, state)
    assert writes == [f"insert {state}"] * 4 + [f"overwrite {state}"] + [f"insert {state}"] * 2
    record = StepRecord.from_json(session.commits("demo.agg")[-1]["userMetadata"])
    assert record.state_log == {"state": [3, 6, 2]}


@pytest.mark.parametrize("input_bytes, small", [(1000, True), (small_step.SMALL_STEP_BYTES, False)])
def test_a_step_over_small_tables_runs_without_adaptive_planning_and_code_generation(
    input_bytes, small
):
    session = new_session()
    session.free_snapshots = True  # table sizes, as the embedded session reads them
    session.tables["demo.src"].size_bytes = input_bytes
    run_step(session, model("agg"), AGGREGATE)
    session.append_to("demo.src")
    start = len(session.statements)
    run_step(session, model("agg"), AGGREGATE)
    keys = [key for key, _ in small_step.SMALL_STEP_SETTINGS]
    sent = roles(session, start)
    if small:  # set before the step's first statement that runs a job, put back at its end
        first = next(i for i, r in enumerate(sent) if r.startswith("set spark.sql."))
        assert sent[first : first + len(keys)] == [f"set {key}" for key in keys]
        # in its last call, with the views it frees
        last = roles(session, len(session.statements) - 1)
        assert [f"reset {key}" for key in keys] == [r for r in last if r.startswith("reset s")]
        assert last[-1].startswith("release")
        assert "set spark.sql.adaptive.enabled" not in sent[first + len(keys) :]
    else:
        assert "set spark.sql.codegen.wholeStage" not in sent
    assert session.conf == {}  # nothing left set after the step


def test_a_step_that_reads_its_inputs_in_full_keeps_spark_planning_over_a_few_mib():
    """Inputs small for a step of changes but above SMALL_FULL_READ_BYTES: the first step, which
    reads them in full, computes with Spark's own planning; the next, a step of changes, not."""
    session = new_session()
    session.free_snapshots = True
    session.tables["demo.src"].size_bytes = 4 * small_step.SMALL_FULL_READ_BYTES
    keys = [key for key, _ in small_step.SMALL_STEP_SETTINGS]
    run_step(session, model("agg"), AGGREGATE)
    first = roles(session, 0)
    computed = first.index("materialize group_delta")
    assert all(f"reset {key}" in first[:computed] for key in keys), first
    assert not any(r.startswith("set spark.sql.codegen") for r in first[computed:]), first
    session.append_to("demo.src")
    start = len(session.statements)
    run_step(session, model("agg"), AGGREGATE)
    later = roles(session, start)
    computed = later.index("materialize group_delta")
    assert all(f"set {key}" in later[:computed] for key in keys), later
    assert not any(r.startswith("reset spark.sql.codegen") for r in later[:computed]), later


def test_when_a_state_table_is_due_for_compaction():
    assert not tables.due_for_compaction(100, 99_999, 19)
    assert not tables.due_for_compaction(100, 100_000, 19)
    assert tables.due_for_compaction(100, 100_001, 1)
    assert tables.due_for_compaction(100, 40, 20)
    assert not tables.due_for_compaction(500_000, 500_000, 3)
    assert tables.due_for_compaction(500_000, 500_001, 3)


def test_a_state_table_of_an_older_layout_asks_for_a_full_refresh():
    session = new_session()
    run_step(session, model("agg"), AGGREGATE)
    history = session.tables["demo.agg"].history
    older = StepRecord.from_json(history[-1]["userMetadata"])
    older.state_layout = ""
    history[-1]["userMetadata"] = older.to_json()
    session.append_to("demo.src")
    with pytest.raises(StepError, match="--full-refresh --select agg"):
        run_step(session, model("agg"), AGGREGATE)


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
    order = [
        steps.index(r)
        for r in (
            "materialize stage0_group_delta",
            "materialize stage0_net",
            "insert demo.st",
            f"insert {stage}",
        )
    ]  # the stage only inserted: the model's change is appended
    assert order == sorted(order)
    insert = next(s for s in session.statements[start:] if s.startswith("INSERT INTO `demo`.`st`"))
    assert "_streamsql_demo_st_" in insert and "_stage0_net" in insert
    record = StepRecord.from_json(session.commits("demo.st")[-1]["userMetadata"])
    assert record.state_tables == ["stage0"] and record.side_writes == ["__streamsql_stage0"]


def test_every_table_of_a_model_with_location_root_is_created_under_it():
    session = new_session(("demo.events", EVENTS))
    session.column_types["ws"] = "timestamp"
    settings = model(
        "lw",
        lateness={"ws": "INTERVAL 1 HOUR"},
        watermark={"ws": "INTERVAL 1 HOUR"},
        location="s3a://lake/views/lw",
    )
    run_step(session, settings, LATE_WINDOW)
    created = {
        re.match(r"CREATE (?:OR REPLACE TABLE|TABLE IF NOT EXISTS) `demo`\.`(\w+)`", s).group(1): s
        for s in session.statements
        if s.startswith("CREATE OR REPLACE TABLE") or s.startswith("CREATE TABLE IF NOT")
    }
    suffixes = ["", "__streamsql_state", "__late", "__waterline", "__pending"]
    assert sorted(created) == sorted(f"lw{suffix}" for suffix in suffixes)
    for suffix in suffixes:
        assert f" LOCATION 's3a://lake/views/lw{suffix}' " in created[f"lw{suffix}"], suffix


def test_a_lateness_step_commits_the_model_then_its_waterline_quarantine_and_state():
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
    order = [
        steps.index(r)
        for r in (
            "describe query",
            "create if missing demo.lw__late",
            "create if missing demo.lw__waterline",
            "materialize group_delta",
            "materialize classified",
            "merge demo.lw",
            "insert demo.lw__waterline",
            "insert demo.lw__late",
            "insert demo.lw__streamsql_state",
        )
    ]
    assert order == sorted(order)
    record = StepRecord.from_json(session.commits("demo.lw")[-1]["userMetadata"])
    assert record.side_writes == ["__waterline", "__late", "__streamsql_state"]
    # the state read skips final windows, except the one a late change touches
    groups_old = next(
        s
        for s in session.statements[start:]
        if CHECKPOINT.match(s) and CHECKPOINT.match(s).group(1) == "groups_old"
    )
    assert "IN (CAST('2024-01-01 08:00:00' AS timestamp))" in groups_old


def test_watermark_holds_and_releases_in_one_merge_then_flush_releases_everything():
    session = new_session(("demo.events", EVENTS))
    settings = model("wm", watermark={"ts": "INTERVAL 10 MINUTES"})
    run_step(session, settings, "select id, k, ts from demo.events")
    session.answers.held = 2
    session.append_to("demo.events")
    start = len(session.statements)
    result = run_step(session, settings, "select id, k, ts from demo.events")
    assert result.held == 2
    (merge,) = [
        s for s in session.statements[start:] if s.startswith("MERGE INTO `demo`.`wm__pending`")
    ]
    assert (
        "WHEN MATCHED AND s._streamsql_release THEN UPDATE SET _streamsql_released_step = 2"
        in merge
        and "WHEN NOT MATCHED AND NOT s._streamsql_release THEN INSERT" in merge
    )
    session.answers.held = 0
    start = len(session.statements)
    flushed = flush_step(session, settings)
    assert (flushed.plan, flushed.computed, flushed.step, flushed.held) == ("flush", "flush", 3, 0)
    candidates = next(
        s
        for s in session.statements[start:]
        if CHECKPOINT.match(s) and CHECKPOINT.match(s).group(1) == "candidates"
    )
    assert "SELECT *, true AS _streamsql_release FROM" in candidates  # everything released
    assert StepRecord.from_json(session.commits("demo.wm")[-1]["userMetadata"]).flush


def test_flush_of_a_model_without_watermark_says_so():
    session = new_session()
    run_step(session, model("m"), LINEAR)
    with pytest.raises(StepError, match="declares no watermark"):
        flush_step(session, model("m"))


# -- crash recovery: a retry after a fault at each point -----------------------------------

BEFORE_COMMIT = {"start", "before_commit"}


@pytest.mark.parametrize("point", FAULT_POINTS)
@pytest.mark.parametrize("kind", ["aggregate", "late_window", "watermark"])
def test_a_retry_after_a_fault_completes_the_step_exactly_once(monkeypatch, kind, point):
    if kind == "aggregate":
        session, settings, query, source = new_session(), model("f"), AGGREGATE, "demo.src"
    elif kind == "late_window":
        session = new_session(("demo.events", EVENTS))
        settings, query = model("f", lateness={"ws": "INTERVAL 1 HOUR"}), LATE_WINDOW
        source = "demo.events"
    else:
        session = new_session(("demo.events", EVENTS))
        settings = model(
            "f", watermark={"ts": "INTERVAL 10 MINUTES"}, lateness={"ts": "INTERVAL 1 HOUR"}
        )
        query, source = "select id, k, ts from demo.events", "demo.events"
    run_step(session, settings, query)
    session.append_to(source)
    session.answers.late = 1
    monkeypatch.setenv(FAULT_INJECTION_ENV, point)
    try:
        run_step(session, settings, query)
        reached = False  # the step has no such point: it completed
    except InjectedFault:
        reached = True
    committed = not (reached and point in BEFORE_COMMIT)
    assert steps_recorded(session, "demo.f") == ([0, 1, 2] if committed else [0, 1])
    record = StepRecord.from_json(session.commits("demo.f")[-1]["userMetadata"])
    if not committed:
        # nothing of step 2 anywhere: no side table has a commit of it
        for suffix in ("__late", "__waterline", "__pending", "__streamsql_state"):
            if f"demo.f{suffix}" in session.tables:
                assert 2 not in steps_recorded(session, f"demo.f{suffix}"), suffix
    monkeypatch.delenv(FAULT_INJECTION_ENV)
    missing = (
        [
            suffix
            for suffix in record.side_writes
            if 2 not in steps_recorded(session, f"demo.f{suffix}")
        ]
        if committed
        else []
    )

    start = len(session.statements)
    result = run_step(session, settings, query)
    assert steps_recorded(session, "demo.f") == [0, 1, 2]  # step 2 committed exactly once
    if not committed:
        assert result.step == 2 and not result.skipped
        record = StepRecord.from_json(session.commits("demo.f")[-1]["userMetadata"])
    else:
        # the model had step 2: the run finishes its side writes, then has nothing to do
        assert result.skipped and result.step == 2
    # every side table the record names has step 2 exactly once, under its own id
    for suffix in record.side_writes:
        assert steps_recorded(session, f"demo.f{suffix}").count(2) == 1, suffix
    # a step is computed again only when something was left to write (or it never committed)
    computed = any(s.startswith("CHECKPOINT") for s in session.statements[start:])
    assert computed == (not committed or bool(missing)), (missing, computed)


@pytest.mark.parametrize(
    "delta_error",
    [
        "[DELTA_CONCURRENT_APPEND.WITHOUT_HINT] Transaction conflict detected.",
        "[DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION] Cannot create table ('`demo`.`m`').",
    ],
)
def test_another_run_writing_the_same_tables_is_a_clean_error(delta_error):
    """Two first steps at once over a Thrift Server: the slower one's write is refused."""
    session = new_session()
    session.fail_on = ("CREATE TABLE", delta_error)
    with pytest.raises(StepError) as error:
        run_step(session, model("m"), LINEAR)
    message = str(error.value)
    assert message.startswith("Model m: another run wrote to its tables at the same time")
    assert delta_error.split("]")[0] + "]" in message and "run again to continue" in message


@pytest.mark.parametrize(
    "size, files, rewritten",
    [
        (40_000, 1, True),  # a small model: its MERGE rewrites the file it touches
        (17 * 2**20, 5, True),  # 3.4 MiB a file
        (17 * 2**20, 2, False),  # 8.5 MiB a file: deletion vectors
        (80 * 2**20, 40, False),  # a large model
        (None, None, False),  # size unknown
        (0, 0, True),  # empty
    ],
)
def test_a_merge_rewrites_small_files_and_marks_rows_in_large_ones(size, files, rewritten):
    from types import SimpleNamespace

    from dbt.adapters.streamsql.execution.commit.protocol import small_table

    snapshot = SimpleNamespace(size_bytes=size, num_files=files)
    log = SimpleNamespace(free_snapshots=True, snapshot=lambda name: snapshot)
    assert small_table(SimpleNamespace(delta_log=log), "s.m") is rewritten


@pytest.mark.parametrize(
    "size, names, config, free, whole",
    [
        (40_000, ("room", "n"), True, True, True),  # a small model: written whole
        (2**20, ("room", "n"), True, True, False),  # 1 MiB: a MERGE
        (None, ("room", "n"), True, True, False),  # size unknown
        (40_000, ("room", "n"), False, True, False),  # rewrite_when_small: false
        (40_000, ("room", "n"), True, False, False),  # not for free (Thrift, method: connect)
        (40_000, ("room", "n", "extra"), True, True, False),  # a column the step does not write
        (40_000, ("ROOM", "N"), True, True, True),  # names match without regard to case
    ],
)
def test_which_steps_write_a_small_model_whole(size, names, config, free, whole):
    from types import SimpleNamespace

    from dbt.adapters.streamsql.execution.commit.protocol import rewrite_whole
    from dbt.adapters.streamsql.planning.plan import Column

    columns = [Column("room", "string"), Column("n", "bigint")]
    snapshot = SimpleNamespace(size_bytes=size, columns=[Column(n, "string") for n in names])
    log = SimpleNamespace(free_snapshots=free, snapshot=lambda name: snapshot)
    model = SimpleNamespace(rewrite_when_small=config, target_name="s.m")
    ctx = SimpleNamespace(delta_log=log, model=model)
    assert rewrite_whole(ctx, columns) is whole
    # a MAP column cannot be matched by EXCEPT ALL: never written whole
    mapped = columns + [Column("tags", "map<string,int>")]
    snapshot.columns = [Column(c.name, c.data_type) for c in mapped]
    assert rewrite_whole(ctx, mapped) is False


def test_an_overwrite_commit_is_netted_by_readers_of_the_feed():
    from dbt.adapters.streamsql.execution.engine.delta_log import Commit
    from dbt.adapters.streamsql.execution.pipeline.inputs import overwrites

    assert overwrites(Commit(5, "WRITE", {"mode": "Overwrite"}))
    assert not overwrites(Commit(5, "WRITE", {"mode": "Append"}))
    assert not overwrites(Commit(5, "MERGE", {}))


def test_a_record_travels_in_a_set_statement_whatever_its_text_holds():
    """A record's text goes into `SET ...userMetadata=<json>` over Thrift: no semicolon (it
    would end the statement) and no `${` (Spark would substitute a variable), and it reads
    back the same. A global top-K's rows below its cut are user data."""
    record = StepRecord(step=3, run_id="r", sql_fingerprint="f")
    record.top_k_buffer = {"columns": [["s", "string"]], "rows": [["a;b ${x}"]], "complete": True}
    text = record.to_json()
    assert ";" not in text and "$" not in text
    assert StepRecord.from_json(text) == record
