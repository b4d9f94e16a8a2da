"""Operational faults without Spark: the rules a step decides by (execution/recovery/,
schema.py, retention.py, configs.py, keys.py), and steps on the fake session that refuse or
recover.

What the recovered rows are is the functional tests' business
(tests/functional/test_operational_faults.py).
"""

from __future__ import annotations

import datetime

import pytest

from dbt.adapters.streamsql.execution.commit.record import StepRecord
from dbt.adapters.streamsql.execution.context import StepContext
from dbt.adapters.streamsql.execution.engine.delta_log import Commit
from dbt.adapters.streamsql.execution.explain import explain_model
from dbt.adapters.streamsql.execution.pipeline import keys
from dbt.adapters.streamsql.execution.pipeline.step import run_step
from dbt.adapters.streamsql.execution.recovery import faults, retention, schema
from dbt.adapters.streamsql.execution.recovery import lost_history as recovery
from dbt.adapters.streamsql.execution.shared import configs, intervals
from dbt.adapters.streamsql.execution.shared.errors import StepError
from dbt.adapters.streamsql.execution.shared.input_state import InputState
from dbt.adapters.streamsql.execution.shared.model import ModelSettings
from dbt.adapters.streamsql.planning.plan import Column, InputTable
from tests.unit.fake_sql_session import FakeSqlSession

SRC = [("id", "bigint"), ("k", "bigint"), ("v", "bigint")]


def write(version: int, rows: int = 1) -> Commit:
    return Commit(version, "WRITE", {"mode": "Append"}, {"numOutputRows": str(rows)})


def fault(commits, before=3, now=6, recorded="id-1", current="id-1"):
    return faults.history_fault("demo.src", before, now, recorded, current, commits)


# -- detection on commit lists ----------------------------------------------------------------


def test_appends_deletes_optimize_and_added_columns_are_read_as_a_change_feed():
    commits = [
        write(4),
        Commit(5, "OPTIMIZE"),
        Commit(6, "ADD COLUMNS", {"columns": '[{"column":{"name":"c"}}]'}),
    ]
    assert fault(commits) is None
    assert fault([], before=6, now=6) is None  # nothing new
    assert fault([], before=None, now=6, recorded=None) is None  # a first read


def test_another_table_id_or_an_older_version_is_an_input_created_again():
    found = fault([write(4), write(5), write(6)], current="id-2")
    assert "created again" in found.reason and "id-1" in found.reason and "id-2" in found.reason
    older = fault([], before=6, now=2)
    assert "created again" in older.reason
    # a record from before ids were kept cannot tell, and does not claim anything
    assert fault([write(4), write(5), write(6)], recorded=None, current="id-2") is None


def replace(version: int, cdf: str = "true") -> Commit:
    props = '{"delta.enableChangeDataFeed":"%s"}' % cdf
    return Commit(version, "CREATE OR REPLACE TABLE AS SELECT", {"properties": props})


def test_a_table_replaced_in_place_is_read_across_only_when_its_log_says_it_is_the_same_table():
    commits = [write(4), replace(5), write(6)]
    assert faults.in_place_replacements(3, 6, commits) == [commits[1]]
    assert faults.in_place_replacements(3, 6, commits[1:]) == []  # a gap in the log
    assert faults.in_place_replacements(3, 3, []) == []
    assert faults.in_place_replacements(None, 6, commits) == []
    then, now = ("id-1", "schema-a"), ("id-3", "schema-a")
    assert faults.replacement_readable([commits[1]], "id-1", then, now)
    # the log of a table dropped and created again reached the version the last step read:
    # its id at that version is another one
    assert not faults.replacement_readable([commits[1]], "id-1", ("id-9", "schema-a"), now)
    assert not faults.replacement_readable([commits[1]], "id-1", then, ("id-3", "schema-b"))
    assert not faults.replacement_readable([replace(5, "false")], "id-1", then, now)
    assert not faults.replacement_readable(
        [Commit(5, "CREATE OR REPLACE TABLE")], "id-1", then, now
    )
    assert not faults.replacement_readable([commits[1]], "id-1", None, now)  # no checksum file
    assert not faults.replacement_readable([commits[1]], None, then, now)  # an old record
    assert not faults.replacement_readable([], "id-1", then, now)
    # read across: neither the new id nor the replacing commit is a fault
    readable = faults.history_fault(
        "demo.src", 3, 6, "id-1", "id-3", commits, replaced_in_place=True
    )
    assert readable is None
    found = fault(commits, current="id-3")
    assert "dropped or replaced and created again" in found.reason
    restored = [write(4), Commit(5, "RESTORE"), write(6)]
    found = faults.history_fault("demo.src", 3, 6, "id-1", "id-1", restored, replaced_in_place=True)
    assert "replaced at version 5 (RESTORE)" in found.reason


def test_missing_commits_are_history_the_log_retention_removed():
    found = fault([write(6)])
    assert "versions 4 to 5" in found.reason and "logRetentionDuration" in found.reason
    assert (found.first, found.last) == (4, 6)
    assert "versions 4 to 6" in found.describe()


@pytest.mark.parametrize(
    "commit, words",
    [
        (Commit(5, "CREATE OR REPLACE TABLE"), "replaced at version 5"),
        (Commit(5, "RESTORE"), "replaced at version 5"),
        (
            Commit(
                5, "SET TBLPROPERTIES", {"properties": '{"delta.enableChangeDataFeed":"false"}'}
            ),
            "change data feed turned off at version 5",
        ),
        (
            Commit(5, "UNSET TBLPROPERTIES", {"properties": '["delta.enableChangeDataFeed"]'}),
            "change data feed turned off at version 5",
        ),
        (
            Commit(5, "SET TBLPROPERTIES", {"properties": '{"delta.columnMapping.mode":"name"}'}),
            "column mapping",
        ),
        (Commit(5, "DROP COLUMNS", {"columns": '["v"]'}), "dropped columns at version 5"),
        (Commit(5, "RENAME COLUMN"), "renamed a column at version 5"),
    ],
)
def test_commits_a_change_feed_cannot_be_read_across(commit, words):
    found = fault([write(4), commit, write(6)])
    assert words in found.reason and not found.vacuum


def test_a_change_feed_turned_off_and_on_again_is_still_a_gap():
    off = Commit(4, "SET TBLPROPERTIES", {"properties": '{"delta.enableChangeDataFeed":"false"}'})
    on = Commit(6, "SET TBLPROPERTIES", {"properties": '{"delta.enableChangeDataFeed":"true"}'})
    assert "turned off at version 4" in fault([off, write(5), on]).reason
    again = Commit(4, "SET TBLPROPERTIES", {"properties": '{"delta.enableChangeDataFeed":"true"}'})
    assert fault([again, write(5), write(6)]) is None  # set on (again): nothing lost


def test_a_vacuum_that_deleted_files_may_have_taken_the_change_feed():
    start = Commit(4, "VACUUM START", {"specifiedRetentionMillis": "0"}, {"numFilesToDelete": "2"})
    end = Commit(5, "VACUUM END", {"status": "COMPLETED"}, {"numDeletedFiles": "2"})
    found = fault([start, end, write(6)])
    assert found.vacuum and "vacuumed at version 4" in found.reason
    nothing = [
        Commit(4, "VACUUM START", {}, {"numFilesToDelete": "0"}),
        Commit(5, "VACUUM END", {}, {"numDeletedFiles": "0"}),
        write(6),
    ]
    assert fault(nothing) is None
    # a definite fault wins over a VACUUM's possible one
    replaced = fault([start, Commit(5, "CREATE OR REPLACE TABLE"), write(6)])
    assert not replaced.vacuum


def test_same_tables_compares_the_recorded_ids():
    item = InputState(InputTable("demo.src", ()), "`demo`.`src`", 3, "id-2")
    assert faults.same_tables(None, [item])
    assert faults.same_tables(StepRecord(1, "r", "f"), [item])  # no ids recorded
    assert faults.same_tables(StepRecord(1, "r", "f", input_ids={"demo.src": "id-2"}), [item])
    assert not faults.same_tables(StepRecord(1, "r", "f", input_ids={"demo.src": "id-1"}), [item])


@pytest.mark.parametrize(
    "query, found",
    [
        ("select id, k from demo.src", None),
        ("select id, current_timestamp() as at from demo.src", "current_timestamp()"),
        ("select id, now() as at from demo.src", "now()"),
        ("select id from demo.src where rand() < 0.5", "rand()"),
        ("select id, uuid() as u from demo.src", "uuid()"),
        ("select id, unix_timestamp() as t from demo.src", "unix_timestamp()"),
        ("select id, unix_timestamp(ts) as t from demo.src", None),
        (
            "select monotonically_increasing_id() as m from demo.src",
            "monotonically_increasing_id()",
        ),
    ],
)
def test_a_query_whose_value_depends_on_when_it_runs_is_named(query, found):
    assert recovery.nondeterministic(query) == found


def test_a_star_inside_an_expression_reads_every_column():
    assert recovery.star_in_expression("select id, hash(*) as h from demo.src")
    assert recovery.star_in_expression("select size(array(*)) as n from demo.src")
    assert not recovery.star_in_expression("select *, count(*) over () as n from demo.src")
    assert not recovery.star_in_expression("select s.* from demo.src s")


def test_lost_history_is_told_from_sparks_messages():
    assert faults.lost_history(
        RuntimeError("[FAILED_READ_FILE.FILE_NOT_EXIST] Encountered error while reading file x")
    )
    assert faults.lost_history(RuntimeError("[DELTA_MISSING_CHANGE_DATA] Error getting ..."))
    assert not faults.lost_history(RuntimeError("[UNRESOLVED_COLUMN] c"))


# -- the retention guard ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("interval 7 days", 7 * 86400),
        ("interval 1 week", 7 * 86400),
        ("1 hour", 3600),
        ("INTERVAL 30 DAYS", 30 * 86400),
        ("interval 2 hours 30 minutes", 9000),
        ("interval 0 seconds", 0),
        ("interval 3 months", None),
        ("soon", None),
        (None, None),
    ],
)
def test_delta_intervals_are_read_in_seconds(text, seconds):
    assert intervals.interval_seconds(text) == seconds


def test_a_short_retention_warns_with_the_date_the_next_step_must_run_by():
    now = datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.timezone.utc).timestamp()
    short = ("demo.src", {"delta.deletedFileRetentionDuration": "interval 1 hour"})
    notes = retention.retention_notes([short, ("demo.other", {})], now, now - 600)
    assert notes == [
        "retention: demo.src keeps 1 hour of history (delta.deletedFileRetentionDuration): run "
        "the next step before 2024-05-01 13:00 UTC, or it may have to recompute the model from "
        "its inputs"
    ]
    # Delta's defaults (30 and 7 days) only warn a model that runs less than every 3.5 days
    assert retention.retention_notes([("demo.other", {})], now, now - 86400) == []
    weekly = retention.retention_notes([("demo.other", {})], now, now - 5 * 86400)
    assert "keeps 7 days of history (delta.deletedFileRetentionDuration)" in weekly[0]
    log = ("demo.log", {"delta.logRetentionDuration": "interval 2 hours"})
    assert "(delta.logRetentionDuration)" in retention.retention_notes([log], now, None)[0]


# -- configs ----------------------------------------------------------------------------------

DBT_DEFAULTS = {
    "enabled": True,
    "alias": None,
    "schema": None,
    "database": None,
    "tags": [],
    "meta": {},
    "group": None,
    "materialized": "incremental_view",
    "incremental_strategy": None,
    "batch_size": None,
    "lookback": 1,
    "begin": None,
    "persist_docs": {},
    "post-hook": [],
    "pre-hook": [],
    "quoting": {},
    "column_types": {},
    "full_refresh": None,
    "unique_key": None,
    "on_schema_change": "ignore",
    "on_configuration_change": "apply",
    "grants": {},
    "packages": [],
    "docs": {"show": True, "node_color": None},
    "contract": {"enforced": False, "alias_types": True},
    "event_time": None,
    "concurrent_batches": None,
    "access": "protected",
    "file_format": "delta",
    "lateness": {"ts": "INTERVAL 1 HOUR"},
}


def test_dbt_and_adapter_configs_at_their_defaults_are_not_flagged():
    assert configs.config_warnings("m", DBT_DEFAULTS) == []


def test_an_unknown_config_key_is_named_with_the_nearest_known_one():
    (warning,) = configs.config_warnings("m", {**DBT_DEFAULTS, "latenes": {"ts": "1"}})
    assert "Model m: config 'latenes' is not a config of incremental_view or of dbt" in warning
    assert "Did you mean 'lateness'?" in warning and "meta" in warning
    (other,) = configs.config_warnings("m", {**DBT_DEFAULTS, "owner_team": "data"})
    assert "'owner_team'" in other and "Did you mean" not in other


@pytest.mark.parametrize(
    "key, value, instead",
    [
        ("incremental_strategy", "merge", "remove it"),
        ("clustered_by", ["k"], "liquid_clustered_by"),
        ("grants", {"select": ["bi"]}, "post-hook"),
        ("file_format", "parquet", "always Delta"),
    ],
)
def test_a_dbt_config_incremental_view_does_not_apply_is_named_when_set(key, value, instead):
    (warning,) = configs.config_warnings("m", {**DBT_DEFAULTS, key: value})
    assert f"config {key}" in warning and instead in warning


def test_an_enforced_contract_is_not_flagged():
    # the materialization checks it at every step (incremental_view.sql)
    contract = {"enforced": True, "alias_types": True}
    assert configs.config_warnings("m", {**DBT_DEFAULTS, "contract": contract}) == []


def test_on_schema_change_and_unique_key_are_read_and_checked():
    def read(config):
        model = configs.model_settings("m", "demo", config, full_refresh=False)
        return model.on_schema_change, tuple(model.unique_key)

    assert read({}) == ("ignore", ())
    assert read({"on_schema_change": "Append_New_Columns", "unique_key": "id"}) == (
        "append_new_columns",
        ("id",),
    )
    assert read({"unique_key": ["id", "day"]})[1] == ("id", "day")
    with pytest.raises(
        StepError,
        match="on_schema_change = 'add'.*ignore, fail, append_new_columns, sync_all_columns",
    ):
        read({"on_schema_change": "add"})
    with pytest.raises(StepError, match="unique_key = 3 is not a column name"):
        read({"unique_key": 3})


# -- schema changes ---------------------------------------------------------------------------


def context(**settings) -> StepContext:
    return StepContext(FakeSqlSession(), ModelSettings("m", "demo", "m", **settings))


def record_with(columns) -> StepRecord:
    return StepRecord(4, "r", "f", columns=[list(c) for c in columns])


TABLE = [("id", "bigint"), ("v", "bigint")]
WIDER = [Column("id", "bigint"), Column("v", "bigint"), Column("c", "int")]
READ = [
    InputState(
        InputTable("demo.src", (Column("id", "bigint"), Column("v", "bigint"), Column("c", "int"))),
        "`demo`.`src`",
        5,
    )
]


def test_the_same_columns_change_nothing():
    ctx = context()
    change = schema.check(ctx, record_with(TABLE), WIDER[:2], READ)
    assert change is not None and not change.changed


def test_a_changed_type_is_refused_naming_the_column_both_types_and_the_fix():
    with pytest.raises(StepError) as refused:
        schema.check(
            context(on_schema_change="sync_all_columns"),
            record_with(TABLE),
            [Column("id", "bigint"), Column("v", "string")],
            READ,
        )
    message = str(refused.value)
    assert "Model m: column v is string" in message and "but bigint in its table" in message
    assert "from demo.src" in message and "--full-refresh --select m" in message


def test_fail_refuses_a_new_column_and_ignore_refuses_a_lost_one():
    with pytest.raises(StepError, match="added: c int \\(from demo.src\\).*is 'fail'"):
        schema.check(context(on_schema_change="fail"), record_with(TABLE), WIDER, READ)
    with pytest.raises(StepError, match="cannot fill v"):
        schema.check(context(), record_with(TABLE), WIDER[:1], READ)
    ignored = schema.check(context(), record_with(TABLE), WIDER, READ)
    assert [c.name for c in ignored.added] == ["c"]


def test_ignore_writes_the_models_columns_and_the_others_the_querys():
    ctx = context()
    change = schema.check(ctx, record_with(TABLE), WIDER, READ)
    written = schema.written_columns(ctx, change, record_with(TABLE), WIDER)
    assert [c.name for c in written] == ["id", "v"]
    appending = context(on_schema_change="append_new_columns")
    change = schema.check(appending, record_with(TABLE), WIDER, READ)
    assert schema.written_columns(appending, change, record_with(TABLE), WIDER) == WIDER


def test_columns_added_by_an_input_are_read_from_its_commits():
    commits = [
        write(4),
        Commit(5, "ADD COLUMNS", {"columns": '[{"column":{"name":"C","type":"integer"}}]'}),
    ]
    assert schema.added_by_inputs(commits) == ["c"]


# -- unique_key -------------------------------------------------------------------------------


def test_unique_key_must_name_output_columns_and_cover_lateness_columns():
    columns = [Column("id", "bigint"), Column("ts", "timestamp")]
    assert keys.key_columns(context(unique_key=("ID",)), columns, []) == ["id"]
    assert keys.key_columns(context(), columns, ["ts"]) is None
    with pytest.raises(StepError, match="unique_key names nope, which the model does not have"):
        keys.key_columns(context(unique_key=("nope",)), columns, [])
    with pytest.raises(StepError, match="leaves out ts"):
        keys.key_columns(context(unique_key=("id",)), columns, ["ts"])


# -- steps on the fake session ----------------------------------------------------------------


def new_session(columns=SRC) -> FakeSqlSession:
    session = FakeSqlSession()
    session.create_source("demo.src", columns)
    return session


def model_commits(session: FakeSqlSession) -> int:
    return len(session.commits("demo.m"))


def test_a_refused_schema_change_writes_nothing():
    session = new_session()
    run_step(
        session, ModelSettings("m", "demo", "m", on_schema_change="fail"), "select * from demo.src"
    )
    before = model_commits(session)
    session.tables["demo.src"].columns.append(("c", "int"))
    session.tables["demo.src"].commit(
        "ADD COLUMNS", parameters={"columns": '[{"column":{"name":"c"}}]'}
    )
    session.column_types["c"] = "int"
    session.describe = lambda query: SRC + [("c", "int")] if "*" in query else None
    start = len(session.statements)
    with pytest.raises(StepError, match="Model m: its query's columns changed since step 1"):
        run_step(
            session,
            ModelSettings("m", "demo", "m", on_schema_change="fail"),
            "select * from demo.src",
        )
    assert model_commits(session) == before
    assert not any(
        s.startswith(("ALTER", "INSERT", "MERGE", "CREATE OR REPLACE TABLE"))
        for s in session.statements[start:]
    )


def test_a_nondeterministic_model_over_an_input_created_again_fails_and_writes_nothing():
    session = new_session()
    query = "select id, k, current_date() as d from demo.src"
    session.column_types["d"] = "date"
    run_step(session, ModelSettings("m", "demo", "m"), query)
    before = model_commits(session)
    session.create_source("demo.src", SRC)  # dropped and created again
    session.tables["demo.src"].table_id = "table-2"
    session.append_to("demo.src")
    with pytest.raises(StepError) as refused:
        run_step(session, ModelSettings("m", "demo", "m"), query)
    message = str(refused.value)
    assert "Model m: demo.src was dropped or replaced and created again" in message
    assert "current_date()" in message and "--full-refresh --select m" in message
    assert "the step needed the changes of version" in message
    assert model_commits(session) == before


def last_record(session: FakeSqlSession, table: str = "demo.m") -> StepRecord:
    records = [StepRecord.from_json(c["userMetadata"]) for c in session.commits(table)]
    return [r for r in records if r is not None][-1]


@pytest.mark.parametrize(
    "query",
    [
        "select id, k, v * 10 as v10 from demo.src where k is not null",  # linear
        "select k, count(*) as n, sum(v) as total from demo.src group by k",  # aggregate
    ],
)
def test_an_input_created_again_is_recovered_by_a_recompute_from_its_current_version(query):
    session = new_session()
    first = run_step(session, ModelSettings("m", "demo", "m"), query)
    assert first.computed == ("aggregate" if "group by" in query else "linear")
    assert last_record(session).input_ids == {"demo.src": "table-1"}
    session.create_source("demo.src", SRC)  # dropped and created again: version 0 ...
    session.tables["demo.src"].table_id = "table-2"
    session.append_to("demo.src")  # ... and 1, the version the last step read
    # explain tells the recovery the step will make, decided by the same function
    explained = " ".join(explain_model(session, ModelSettings("m", "demo", "m"), query).split())
    assert "no input changed" not in explained, explained
    assert "it recovers (demo.src was dropped or replaced and created again" in explained
    start = len(session.statements)
    result = run_step(session, ModelSettings("m", "demo", "m"), query)
    assert result.step == 2 and not result.skipped  # same version number, another table
    assert result.computed == "recompute"  # what the step did, beside the model's plan
    assert any(
        "recovered (demo.src was dropped or replaced and created again" in note
        for note in result.notes
    )
    statements = session.statements[start:]
    assert not any("table_changes" in s for s in statements)  # no change feed is read
    assert any("VERSION AS OF 1" in s and "`demo`.`src`" in s for s in statements)
    record = last_record(session)
    assert record.step == 2 and record.recovered and record.input_ids["demo.src"] == "table-2"
    if "group by" in query:  # the state table is rebuilt, as this step's rows
        assert any(
            s.startswith("INSERT INTO `demo`.`m__streamsql_state`") and "2 AS BIGINT" in s
            for s in statements
        )


def test_a_vacuum_over_sql_alone_is_taken_for_lost_files():
    session = new_session()
    run_step(session, ModelSettings("m", "demo", "m"), "select id, k from demo.src")
    session.append_to("demo.src")
    session.tables["demo.src"].commit("VACUUM START", metrics={"numFilesToDelete": "3"})
    session.tables["demo.src"].commit("VACUUM END", metrics={"numDeletedFiles": "3"})
    result = run_step(session, ModelSettings("m", "demo", "m"), "select id, k from demo.src")
    assert any("demo.src was vacuumed at version 2" in note for note in result.notes)
