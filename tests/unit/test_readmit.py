"""streamsql_readmit's pure parts: which `where` it takes, the rows it selects, its change."""

from __future__ import annotations

import pytest

from dbt.adapters.streamsql.execution.event_time import readmit
from dbt.adapters.streamsql.execution.shared.errors import StepError
from dbt.adapters.streamsql.execution.shared.result import StepResult
from dbt.adapters.streamsql.planning.plan import Column
from tests.unit.test_test_macros import Column as MacroColumn
from tests.unit.test_test_macros import render_test

LATE = "`demo`.`m__late`"
LATE_COLUMNS = [
    "ts",
    "location",
    "_streamsql_step",
    "_streamsql_change",
    "_streamsql_column",
    "_streamsql_waterline",
    "_streamsql_reason",
    "_streamsql_at",
]


def checked(where: str) -> str:
    return readmit.checked_where("m", where, LATE, LATE_COLUMNS)


@pytest.mark.parametrize(
    "where",
    [
        "_streamsql_step between 3 and 5",
        "_streamsql_reason = 'late' and location in ('home', 'it''s')",
        "_streamsql_at < timestamp'2026-12-01 00:00:00'",
        "LOCATION like 'h%' or ts is null",
        "exists(array(ts), x -> x > timestamp'2020-01-01 00:00:00')",
        "true",
    ],
)
def test_a_condition_over_the_quarantines_own_columns_is_taken_as_written(where):
    assert checked(f"  {where} ") == where


@pytest.mark.parametrize(
    "where, said",
    [
        ("", "no `where` given"),
        ("   ", "no `where` given"),
        ("ts >", "is not a SQL condition"),
        ("true; drop table demo.m", "is a statement, not a condition"),
        ("select 1", "is a statement, not a condition"),
        ("location in (select location from demo.m)", "reads another table"),
        ("_streamsql_at > current_timestamp() - interval 1 day", "calls CURRENT_TIMESTAMP()"),
        ("_streamsql_at > now()", "whose value changes between"),
        ("rand() < 0.5", "calls RAND()"),
        ("ts > current_date", "whose value changes between"),
        ("l.location = 'home'", "qualifies l.location with a table"),
        ("where_else = 1", "names where_else, which `demo`.`m__late` does not have"),
    ],
)
def test_a_where_it_cannot_mark_again_the_same_way_is_refused_naming_the_model(where, said):
    with pytest.raises(StepError) as refused:
        checked(where)
    message = str(refused.value)
    assert message.startswith("streamsql_readmit on model m:"), message
    assert said in message, message


def test_the_rows_taken_are_unmarked_of_completed_steps_and_meet_where():
    assert readmit.condition("location = 'home'", 7) == (
        "_streamsql_readmitted_step IS NULL AND _streamsql_step <= 7 AND (\nlocation = 'home'\n)"
    )
    # a quarantine made before readmit has no mark column, and no row readmitted
    assert readmit.condition("true", 7, marked=False) == "_streamsql_step <= 7 AND (\ntrue\n)"
    # a line comment at the end of `where` ends with its line, not with the condition
    assert readmit.condition("true -- all", 7).endswith("(\ntrue -- all\n)")
    assert readmit.not_readmitted_by(4) == (
        "(_streamsql_readmitted_step IS NULL OR _streamsql_readmitted_step > 4)"
    )


def test_the_change_is_the_rows_signed_and_netted_with_missing_columns_null():
    columns = [Column("ts", "timestamp"), Column("location", "string"), Column("n", "bigint")]
    change = readmit.readmitted_change(f"{LATE} VERSION AS OF 3", columns, LATE_COLUMNS, "true")
    assert "SELECT `ts`, `location`, CAST(NULL AS bigint) AS `n`, " in change
    assert "CASE WHEN _streamsql_change = 'insert' THEN 1 ELSE -1 END" in change
    assert f"FROM {LATE} VERSION AS OF 3 WHERE true" in change
    assert change.endswith("HAVING SUM(_streamsql_weight) <> 0")


def test_the_delete_check_counts_copies_the_model_lacks():
    columns = [Column("k", "string"), Column("m", "map<string,int>")]
    check = readmit.missing_deletes("_v", "`demo`.`m`", columns)
    assert "WHERE _streamsql_weight < 0" in check
    assert "LEFT JOIN (SELECT `k`, any_value(`m`) AS `m`, COUNT(*) AS _held" in check
    assert "WHERE d._streamsql_weight + COALESCE(m._held, 0) < 0" in check


def test_the_status_and_line_say_what_a_readmit_did():
    done = StepResult("m", 7, "readmit", "1 change(s)", inserted=1, computed="readmit")
    assert done.status() == "+1 -0, readmitted"
    nothing = StepResult("m", 6, "readmit", "", skipped=True)
    nothing.notes.append("nothing to readmit: no row of `demo`.`m__late` left where true")
    assert nothing.status() == "nothing readmitted"
    assert nothing.log_line() == (
        "m: step 6: nothing to readmit: no row of `demo`.`m__late` left where true (0.0 s)"
    )


def test_matches_recompute_counts_readmitted_rows_as_applied():
    columns = [
        MacroColumn("id", "int"),
        MacroColumn("ts", "timestamp"),
        MacroColumn("_streamsql_readmitted_step", "bigint"),
    ]
    step = {"step": 3, "model_version": 7, "input_versions": {"demo.events": 12, "demo.users": 4}}
    sql = render_test([step], columns)
    assert (
        "from `demo`.`m__late` where _streamsql_step <= 3 and (_streamsql_readmitted_step is "
        "null or _streamsql_readmitted_step > 3) union all"
    ) in sql
    sql = render_test([], columns)
    assert "from `demo`.`m__late` where _streamsql_readmitted_step is null union all" in sql
