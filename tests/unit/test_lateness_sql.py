"""LATENESS SQL and config checks, without Spark."""

import pytest
import sqlglot

from dbt.adapters.streamsql.execution.commit.record import StepRecord, last_record
from dbt.adapters.streamsql.execution.engine.side_tables import default_side_table_sql
from dbt.adapters.streamsql.execution.event_time import lateness as late
from dbt.adapters.streamsql.planning.plan import Column

COLS = [Column("ts", "timestamp"), Column("seq", "bigint"), Column("place", "string")]


def test_rules_follow_config_order_and_attach_max_future():
    rules = late.lateness_rules(
        "m", COLS, {"seq": "1000", "TS": "INTERVAL 1 HOUR"}, {"ts": "INTERVAL 1 DAY"}
    )
    assert [(r.column.name, r.lateness, r.max_future) for r in rules] == [
        ("seq", "1000", None),
        ("ts", "INTERVAL 1 HOUR", "INTERVAL 1 DAY"),
    ]


@pytest.mark.parametrize(
    "lateness, max_future, message",
    [
        ({"when": "INTERVAL 1 HOUR"}, {}, "names column 'when', which the model does not have"),
        ({"ts": "seq + 1"}, {}, "is not a constant expression"),
        ({"ts": "(select 1)"}, {}, "is not a constant expression"),
        ({"ts": "INTERVAL 1 HOUR"}, {"seq": "10"}, "max_future names 'seq', which has no lateness"),
    ],
)
def test_bad_config_names_the_model_and_the_fix(lateness, max_future, message):
    with pytest.raises(late.LatenessConfigError, match="Model m: ") as error:
        late.lateness_rules("m", COLS, lateness, max_future)
    assert message in str(error.value)


def test_classify_orders_null_before_future_before_late():
    rules = late.lateness_rules(
        "m", COLS, {"ts": "INTERVAL 1 HOUR", "seq": "10"}, {"ts": "INTERVAL 1 DAY"}
    )
    statement = late.classify("net", COLS, rules, {"ts": "2020-01-01 01:00:00", "seq": None})
    sqlglot.parse_one(statement, read="spark")
    null_at = statement.index("`ts` IS NULL")
    future_at = statement.index("current_timestamp() + (INTERVAL 1 DAY)")
    late_at = statement.index("`ts` < CAST('2020-01-01 01:00:00' AS timestamp)")
    assert null_at < future_at < late_at
    assert "`seq` <" not in statement  # no waterline yet for seq: nothing is late in it


def test_first_step_waterline_is_max_minus_lateness():
    rules = late.lateness_rules("m", COLS, {"ts": "INTERVAL 1 HOUR"}, {})
    statement = late.waterline_query("c", rules, {}, {})
    sqlglot.parse_one(statement, read="spark")
    assert "greatest" not in statement
    assert statement.startswith(
        "SELECT COALESCE(SUM(abs(_streamsql_weight)) FILTER (WHERE "
        "_streamsql_reason IS NOT NULL), 0) AS late, "
    )
    later = late.waterline_query(
        "c", rules, {"ts": "2020-01-01 00:00:00"}, {"ts": "2020-01-01 01:00:00"}
    )
    assert "greatest(CAST('2020-01-01 00:00:00' AS timestamp)" in later


def test_quarantine_keeps_one_row_per_copy_with_its_waterline():
    rows = late.quarantine_rows("c", COLS, 5, {"ts": "2020-01-01 01:00:00"})
    statement = default_side_table_sql().append_late_rows(
        "s", "m__late", late.late_table_columns(COLS), rows
    )
    sqlglot.parse_one(statement, read="spark")
    assert statement == (
        "INSERT INTO `s`.`m__late` (`ts`, `seq`, `place`, `_streamsql_step`, "
        "`_streamsql_change`, `_streamsql_column`, `_streamsql_waterline`, "
        "`_streamsql_reason`, `_streamsql_at`) " + rows
    )
    assert "explode(sequence(1, abs(_streamsql_weight)))" in statement
    assert "WHEN _streamsql_column = 'ts' THEN '2020-01-01 01:00:00'" in statement


def test_step_record_round_trips_and_history_stops_at_recreation():
    record = StepRecord(
        step=3,
        run_id="r",
        sql_fingerprint="f",
        incarnation="i",
        input_versions={"s.t": 7},
        waterline={"ts": "x"},
    )
    assert StepRecord.from_json(record.to_json()) == record
    history = [
        {"operation": "OPTIMIZE", "userMetadata": None},
        {"operation": "MERGE", "userMetadata": record.to_json()},
    ]
    assert last_record(history) == record
    rebuilt = [
        {"operation": "CREATE OR REPLACE TABLE", "userMetadata": None},
        {"operation": "MERGE", "userMetadata": record.to_json()},
    ]
    assert last_record(rebuilt) is None
    assert StepRecord.from_json('{"other": 1}') is None


@pytest.mark.parametrize(
    "column_type, difference_type, ok",
    [
        ("timestamp", "timestamp", True),
        ("date", "date", True),
        ("bigint", "bigint", True),
        ("decimal(10,2)", "decimal(11,2)", True),
        ("date", "timestamp", False),  # DATE - INTERVAL 1 HOUR: not comparable as a date
        ("string", "timestamp", False),  # Spark casts strings silently; LATENESS must not
        ("boolean", "boolean", False),
    ],
)
def test_subtraction_must_stay_in_the_column_type_family(column_type, difference_type, ok):
    rule = late.LatenessRule(Column("c", column_type), "1")
    assert (late.subtraction_error(rule, difference_type) is None) is ok


def test_final_groups_are_those_below_the_waterline_of_a_column_the_group_decides():
    rule = late.LatenessRule(Column("hour_start", "timestamp"), "INTERVAL 1 HOUR")
    outputs = (
        ("card", "_streamsql_grp._streamsql_g0"),
        ("hour_start", "_streamsql_grp._streamsql_g1.start"),
    )
    found = late.final_group_columns([rule], {"hour_start": "2024-01-01 10:00:00"}, outputs)
    assert found == [(rule, "_streamsql_grp._streamsql_g1.start", "2024-01-01 10:00:00")]
    # no waterline yet, or a lateness column that is not decided by the group: nothing to skip
    assert late.final_group_columns([rule], {"hour_start": None}, outputs) == []
    assert (
        late.final_group_columns([rule], {"hour_start": "2024-01-01 10:00:00"}, outputs[:1]) == []
    )
    start = "_streamsql_grp._streamsql_g1.start"
    assert late.open_groups(rule, start, "2024-01-01 10:00:00") == (
        f"(({start}) >= CAST('2024-01-01 10:00:00' AS timestamp) OR ({start}) IS NULL)"
    )
    assert late.open_groups(rule, start, "2024-01-01 10:00:00", ["2024-01-01 07:00:00"]).endswith(
        f" OR ({start}) IN (CAST('2024-01-01 07:00:00' AS timestamp)))"
    )


@pytest.mark.parametrize(
    "final_state, kept",
    [
        (None, {"ts": "INTERVAL 1 HOUR", "seq": "1000"}),  # by default: the lateness
        ({"ts": "INTERVAL 1 DAY"}, {"ts": "INTERVAL 1 DAY", "seq": "1000"}),
        ({"TS": "forever"}, {"ts": None, "seq": "1000"}),
        ({"*": "Forever"}, {"ts": None, "seq": None}),
        ({"*": "0", "ts": "INTERVAL 0 HOURS"}, {"ts": "INTERVAL 0 HOURS", "seq": "0"}),
    ],
)
def test_final_state_retention_per_column_defaults_to_the_lateness(final_state, kept):
    lateness = {"ts": "INTERVAL 1 HOUR", "seq": "1000"}
    rules = late.lateness_rules("m", COLS, lateness, {}, final_state)
    assert {r.column.name: r.state_kept for r in rules} == kept


@pytest.mark.parametrize(
    "final_state, message",
    [
        ({"seq": "10"}, "final_state_retention names 'seq', which has no lateness"),
        ({"ts": "seq - 1"}, "final_state_retention[ts] = 'seq - 1' is not a constant"),
        ({"*": "(select 1)"}, "final_state_retention = '(select 1)' is not a constant"),
        ({"when": "1"}, "names column 'when', which the model does not have"),
    ],
)
def test_a_bad_final_state_retention_names_the_model_and_the_fix(final_state, message):
    with pytest.raises(late.LatenessConfigError, match="Model m: ") as error:
        late.lateness_rules("m", COLS, {"ts": "INTERVAL 1 HOUR"}, {}, final_state)
    assert message in str(error.value)


def test_the_state_line_is_the_waterline_minus_the_retention_and_never_moves_down():
    (rule,) = late.lateness_rules(
        "m", COLS, {"ts": "INTERVAL 1 HOUR"}, {}, {"ts": "INTERVAL 2 HOURS"}
    )
    first = rule.state_line("2024-01-01 10:00:00", None)
    assert first == (
        "CAST(CAST(CAST('2024-01-01 10:00:00' AS timestamp) - (INTERVAL 2 HOURS) AS timestamp) "
        "AS STRING)"
    )
    later = rule.state_line("2024-01-01 11:00:00", "2024-01-01 08:00:00")
    assert later.startswith("CAST(greatest(CAST('2024-01-01 08:00:00' AS timestamp), CAST(")
    for statement in (first, later):
        sqlglot.parse_one(f"SELECT {statement}", read="spark")


def test_the_state_is_rewritten_once_the_line_would_rise_by_the_retention():
    (rule,) = late.lateness_rules(
        "m", COLS, {"ts": "INTERVAL 1 HOUR"}, {}, {"ts": "INTERVAL 2 HOURS"}
    )
    risen = rule.state_line_risen("2024-01-01 11:00:00", "2024-01-01 08:00:00")
    assert risen == (
        "CAST(CAST('2024-01-01 11:00:00' AS timestamp) - (INTERVAL 2 HOURS) AS timestamp) >= "
        "CAST(CAST('2024-01-01 08:00:00' AS timestamp) + (INTERVAL 2 HOURS) AS timestamp)"
    )  # 09:00 >= 10:00: not yet
    sqlglot.parse_one(f"SELECT {risen}", read="spark")


def test_a_compaction_that_drops_final_groups_keeps_the_boundary_and_null_groups():
    from dbt.adapters.streamsql.execution.engine import statements as sql

    (rule,) = late.lateness_rules("m", COLS, {"ts": "INTERVAL 1 HOUR"}, {})
    keys = [Column("_streamsql_g0", "struct<start:timestamp,end:timestamp>")]
    state = keys + [Column("_streamsql_count", "bigint")]
    keep = late.open_groups(rule, "_streamsql_grp._streamsql_g0.start", "2024-01-01 09:00:00")
    statement = sql.compact_state("s.m__streamsql_state", 7, keys, state, keys, keep)
    sqlglot.parse_one(statement, read="spark")
    # a group at the line itself is kept (a change to it is not late), as are NULL groups
    assert (
        "AS _streamsql_grp WHERE ((_streamsql_grp._streamsql_g0.start) >= "
        "CAST('2024-01-01 09:00:00' AS timestamp) OR (_streamsql_grp._streamsql_g0.start) IS NULL)"
    ) in statement
    assert (
        "WHERE"
        not in sql.compact_state("s.m__streamsql_state", 7, keys, state, keys).split(
            "_streamsql_latest._streamsql_count > 0"
        )[1]
    )


def test_a_lateness_column_named_with_quotes_and_backslashes_stays_one_literal():
    """The column's name becomes data (`_streamsql_column`, `column_name`): Spark must read
    each literal back as the name, not end it early or take a backslash as an escape."""
    from dbt.adapters.streamsql.planning.dialect import string_literal
    from dbt.adapters.streamsql.planning.plan import DIALECT

    name = "it's\\d"
    columns = [Column(name, "timestamp"), Column("v", "bigint")]
    rules = late.lateness_rules("m", columns, {name: "INTERVAL 1 HOUR"}, {})
    waterline = {name: "2020-01-01 00:00:00"}
    literal = string_literal(name)
    assert literal == "'it\\'s\\\\d'"
    assert sqlglot.parse_one(f"SELECT {literal}", read=DIALECT).selects[0].this == name
    for statement in (
        late.classify("n", columns, rules, waterline),
        late.quarantine_rows("c", columns, 2, waterline),
        late.waterline_rows(2, rules, waterline, {name: "2020-01-01 01:00:00"}),
    ):
        assert literal in statement
        sqlglot.parse_one(f"SELECT * FROM ({statement})", read=DIALECT)


def test_each_step_counts_how_far_behind_the_largest_value_seen_its_changes_arrived():
    rules = late.lateness_rules("m", COLS, {"ts": "INTERVAL 1 HOUR", "seq": "1000"}, {})
    first = late.waterline_query("c", rules, {}, {})
    assert "CAST(NULL AS STRING) AS b_0" in first and "CAST(NULL AS STRING) AS b_1" in first
    later = late.waterline_query("c", rules, {}, {"ts": "2020-01-01 01:00:00", "seq": "5000"})
    sqlglot.parse_one(later, read="spark")
    ts_rule = next(r for r in rules if r.column.name == "ts")
    seconds = late.behind(ts_rule, "2020-01-01 01:00:00")
    assert seconds == (
        "(unix_micros(CAST(CAST('2020-01-01 01:00:00' AS timestamp) AS TIMESTAMP)) - "
        "unix_micros(CAST(`ts` AS TIMESTAMP))) / 1000000.0"
    )
    ladder = late.BEHIND_LADDERS["seconds"]
    # one band per rung, then one beyond the last: every change counted exactly once
    assert later.count(f"{seconds} <= ") == len(ladder)
    assert f"{seconds} > {ladder[-1]})" in later
    assert f"`ts` IS NOT NULL AND {seconds} <= 0)" in later
    seq_rule = next(r for r in rules if r.column.name == "seq")
    assert late.behind(seq_rule, "5000") == "(CAST('5000' AS bigint) - `seq`)"
    assert late.behind_unit("date") == "days" and late.behind_unit("timestamp_ntz") == "seconds"


def test_the_counts_go_to_the_waterline_row_as_json_with_their_ladder():
    import json

    rules = late.lateness_rules("m", COLS, {"ts": "INTERVAL 1 HOUR"}, {})
    counts = [3] + [0] * len(late.BEHIND_LADDERS["seconds"])
    rows = late.waterline_rows(4, rules, {"ts": "w"}, {"ts": "m"}, {"ts": counts})
    behind = rows.rsplit("current_timestamp(), ", 1)[1][:-1]
    text = sqlglot.parse_one(f"SELECT {behind}", read="spark").selects[0].this
    assert json.loads(text) == {
        "unit": "seconds",
        "le": list(late.BEHIND_LADDERS["seconds"]),
        "counts": counts,
    }
