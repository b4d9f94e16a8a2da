"""WATERMARK SQL and config checks (execution/watermark.py), without Spark."""

import pytest
import sqlglot

from dbt.adapters.streamsql.execution.engine.side_tables import default_side_table_sql
from dbt.adapters.streamsql.execution.event_time import watermark as wm
from dbt.adapters.streamsql.execution.event_time.lateness import LatenessConfigError
from dbt.adapters.streamsql.planning.plan import Column

COLS = [Column("ts", "timestamp"), Column("seq", "bigint"), Column("place", "string")]


def parses(statement: str) -> None:
    sqlglot.parse_one(statement, read="spark")


def rules(**watermark):
    return wm.watermark_rules("m", COLS, watermark)


def test_rules_name_the_model_column_case_insensitively():
    (rule,) = rules(TS="INTERVAL 10 MINUTES")
    assert (rule.column, rule.delay) == (COLS[0], "INTERVAL 10 MINUTES")


@pytest.mark.parametrize(
    "watermark, message",
    [
        ({"when": "10"}, "names column 'when', which the model does not have"),
        ({"seq": "seq + 1"}, "watermark[seq] = 'seq + 1' is not a constant expression"),
    ],
)
def test_bad_config_names_the_model_and_the_fix(watermark, message):
    with pytest.raises(LatenessConfigError, match="Model m: ") as error:
        wm.watermark_rules("m", COLS, watermark)
    assert message in str(error.value)


def test_addition_check_compares_the_column_with_itself_plus_the_delay():
    statement = wm.addition_check(rules(seq="100")[0])
    parses(statement)
    assert statement == "SELECT CAST(NULL AS bigint) + (100) >= CAST(NULL AS bigint) AS ok"


def test_seen_query_carries_the_largest_value_seen_so_far():
    both = rules(ts="INTERVAL 1 MINUTE", seq="5")
    statement = wm.seen_query("net", both, {"ts": "2024-01-01 00:00:00", "seq": None})
    parses(statement)
    assert (
        "CAST(greatest(CAST('2024-01-01 00:00:00' AS timestamp), MAX(`ts`)) AS STRING) AS s_0"
    ) in statement
    assert "CAST(MAX(`seq`) AS STRING) AS s_1" in statement


def test_release_needs_every_column_past_its_delay_and_lets_nulls_through():
    both = rules(ts="INTERVAL 1 MINUTE", seq="5")
    condition = wm.release_condition(both, {"ts": "2024-01-01 00:10:00", "seq": None})
    assert condition == (
        "(`ts` IS NULL OR `ts` + (INTERVAL 1 MINUTE) <= CAST('2024-01-01 00:10:00' AS timestamp))"
        " AND (`seq` IS NULL OR false)"
    )
    assert wm.release_condition(both, {}, release_all=True) == "true"


def test_candidates_are_this_steps_changes_and_what_is_still_held_with_ids():
    statement = wm.candidates("net", "pending", COLS, step=3, condition="`seq` IS NULL")
    parses(statement)
    assert statement.startswith("SELECT *, `seq` IS NULL AS _streamsql_release FROM (")
    assert (
        "CAST(3 AS BIGINT) AS _streamsql_held_step, uuid() AS _streamsql_held_id FROM net"
    ) in statement
    assert statement.endswith("FROM pending WHERE _streamsql_released_step IS NULL)")


def test_one_merge_marks_what_is_released_and_adds_what_this_step_holds():
    changes = wm.pending_changes("cand", COLS, step=4)
    statement = default_side_table_sql().merge_pending_rows("s", "m__pending", COLS, changes, 4)
    parses(statement)
    assert statement.startswith(f"MERGE INTO `s`.`m__pending` AS t USING ({changes}) AS s ")
    assert statement.endswith(
        "INSERT (`ts`, `seq`, `place`, _streamsql_weight, _streamsql_held_step, "
        "_streamsql_released_step, _streamsql_held_id) VALUES (s.`ts`, s.`seq`, s.`place`, "
        "s._streamsql_weight, s._streamsql_held_step, CAST(NULL AS BIGINT), s._streamsql_held_id)"
    )
    # only the rows that change the table: held before and released now, or new and held
    assert "WHERE _streamsql_release <> (_streamsql_held_step = 4)) AS s" in statement
    assert "ON t._streamsql_held_id = s._streamsql_held_id" in statement
    assert (
        "WHEN MATCHED AND s._streamsql_release THEN UPDATE SET _streamsql_released_step = 4"
        in statement
    )
    assert "WHEN NOT MATCHED AND NOT s._streamsql_release THEN INSERT" in statement


def test_counts_of_what_stays_held_and_what_the_step_writes():
    statement = wm.pending_counts("cand", step=4)
    parses(statement)
    assert "FILTER (WHERE NOT _streamsql_release), 0) AS held" in statement
    assert (
        "COUNT(*) FILTER (WHERE _streamsql_release <> (_streamsql_held_step = 4)) AS writes"
        in statement
    )


def test_rows_of_an_earlier_pending_table_get_ids():
    added, filled = wm.ids_missing("p")
    assert added == "ALTER TABLE p ADD COLUMNS (_streamsql_held_id string)"
    assert filled == "UPDATE p SET _streamsql_held_id = uuid() WHERE _streamsql_held_id IS NULL"
