"""SQL generation of the executor, checked without Spark: it parses, and says what it must."""

import pytest
import sqlglot

from dbt.adapters.streamsql.execution import statements as sql
from dbt.adapters.streamsql.planning.plan import Column

COLS = [Column("room", "string"), Column("n", "bigint")]


def parses(statement: str) -> None:
    sqlglot.parse_one(statement, read="spark")


def test_quote_escapes_backquotes():
    assert sql.quote("we`ird") == "`we``ird`"


def test_null_safe_match_of_no_columns_is_true():
    assert sql.null_safe_match([], "a", "b") == "true"
    assert sql.null_safe_match(COLS, "a", "b") == "a.`room` <=> b.`room` AND a.`n` <=> b.`n`"


def test_bind_placeholders_replaces_whole_identifiers_only():
    text = ("select * from __streamsql_new_1__ a join `__streamsql_group_delta__` d "
            "on x.__streamsql_new_10__ = 1")
    bound = sql.bind_placeholders(text, {"__streamsql_new_1__": "v1",
                                         "__streamsql_group_delta__": "gd",
                                         "__streamsql_new_10__": "v10"})
    assert bound == "select * from v1 a join gd d on x.v10 = 1"


def test_bind_placeholders_refuses_unbound_names():
    with pytest.raises(KeyError, match="__streamsql_old_0__"):
        sql.bind_placeholders("select * from __streamsql_old_0__", {})


def test_input_changes_weights_updates_as_retract_and_insert():
    statement = sql.input_changes("demo.t", COLS, after=4, upto=7)
    parses(statement)
    assert "table_changes('demo.t', 5, 7)" in statement
    assert "IN ('insert', 'update_postimage') THEN 1 ELSE -1" in statement


def test_consolidate_drops_rows_that_cancel():
    statement = sql.consolidate("chg", COLS)
    parses(statement)
    assert "GROUP BY `room`, `n` HAVING SUM(_streamsql_weight) <> 0" in statement


def test_merge_change_deletes_then_reinserts_survivors_atomically():
    statement = sql.merge_change("`s`.`m`", "net", COLS)
    parses(statement)
    assert statement.startswith("MERGE INTO `s`.`m` AS t USING")
    assert "ON s._streamsql_action = 'delete' AND t.`room` <=> s.`room`" in statement
    assert ("explode(sequence(CASE WHEN _streamsql_weight < 0 THEN 0 ELSE 1 END, "
            "CASE WHEN _streamsql_weight < 0 THEN greatest(_streamsql_existing + "
            "_streamsql_weight, 0) ELSE _streamsql_weight END))") in statement
    assert "WHEN NOT MATCHED AND s._streamsql_action = 'insert' THEN INSERT" in statement


def test_merge_change_reads_the_change_once():
    # Spark can miss its cache on a second reference of a cached view within one statement
    # (a cached query with a self-join, Nexmark q5) and evaluate the whole query again.
    statement = sql.merge_change("`s`.`m`", "net", COLS)
    assert statement.count("net") == 1
    assert statement.count("`s`.`m`") == 2  # the MERGE target, and the copies it holds


def test_insert_copies_repeats_rows_by_weight():
    statement = sql.insert_copies("`s`.`m`", "net", COLS)
    parses(statement)
    assert "explode(sequence(1, _streamsql_weight))" in statement


def test_merge_state_deletes_emptied_groups():
    group = [Column("_streamsql_g0", "string")]
    state = group + [Column("_streamsql_count", "bigint"), Column("_streamsql_a1", "bigint")]
    statement = sql.merge_state("st_table", "new_groups", group, state)
    parses(statement)
    assert "WHEN MATCHED AND n._streamsql_count <= 0 THEN DELETE" in statement
    assert "UPDATE SET `_streamsql_count` = n.`_streamsql_count`" in statement
    assert "WHEN NOT MATCHED AND n._streamsql_count > 0 THEN INSERT" in statement


def test_create_table_turns_on_the_change_feed_and_options():
    statement = sql.create_table("`s`.`m`", COLS, {"delta.appendOnly": "false"},
                                 partition_by=["room"], location="/data/m")
    parses(statement)
    assert "'delta.enableChangeDataFeed' = 'true'" in statement
    assert "PARTITIONED BY (`room`)" in statement and "LOCATION '/data/m'" in statement


def test_merge_change_bounds_the_target_by_the_waterline():
    from dbt.adapters.streamsql.execution import lateness as late

    rules = late.lateness_rules("m", [Column("ts", "timestamp")], {"ts": "INTERVAL 1 HOUR"}, {})
    bounds = late.target_bounds(rules, {"ts": "2024-01-01 10:00:00"})
    assert bounds == ["t.`ts` >= CAST('2024-01-01 10:00:00' AS timestamp)"]
    assert late.target_bounds(rules, {}) == []  # first step: no waterline yet
    statement = sql.merge_change("`s`.`m`", "net", [Column("ts", "timestamp")], bounds)
    parses(statement)
    # on the join that counts the copies to keep, and on the MERGE's match
    assert statement.count("AND t.`ts` >= CAST('2024-01-01 10:00:00' AS timestamp)") == 2


def test_merge_by_key_updates_deletes_and_inserts_by_key_without_counting_copies():
    statement = sql.merge_by_key("m.t", "net", COLS + [Column("total", "bigint")], ["room"],
                                 ["t.`room` >= 'a'"])
    parses(statement)
    assert statement.count("net") == 1 and "LEFT JOIN" not in statement
    assert "ON t.`room` <=> s.`room` AND t.`room` >= 'a'" in statement
    assert "max_by(struct(`n`, `total`), _streamsql_weight)" in statement
    assert "GROUP BY `room`" in statement
    assert "WHEN MATCHED AND NOT s._streamsql_keep THEN DELETE" in statement
    assert "UPDATE SET `n` = s._streamsql_row.`n`, `total` = s._streamsql_row.`total`" in statement
    assert "VALUES (s.`room`, s._streamsql_row.`n`, s._streamsql_row.`total`)" in statement


def test_merge_by_key_of_a_global_aggregate_matches_its_one_row():
    statement = sql.merge_by_key("m.t", "net", COLS, [])
    parses(statement)
    assert "ON true" in statement and "GROUP BY" not in statement


def test_merge_by_key_when_every_column_is_key_only_deletes_and_inserts():
    statement = sql.merge_by_key("m.t", "net", COLS, ["room", "n"])
    parses(statement)
    assert "UPDATE" not in statement and "max_by" not in statement


def test_bound_predicates_are_literals_or_nothing():
    from dbt.adapters.streamsql.planning.plan import KeyBound
    bound = KeyBound("__streamsql_bound_0__", "p.id", ">=", "(SELECT MIN(a.seller) FROM d AS a)")
    assert sql.bound_predicate(bound, "42", "bigint") == "(p.id >= CAST('42' AS bigint))"
    # timestamps travel as epoch microseconds: no session time zone in between
    assert sql.bound_predicate(bound, "1704067200000000", "timestamp") == \
        "(p.id >= timestamp_micros(1704067200000000))"
    assert sql.bound_predicate(bound, None, "bigint") == "false"  # an empty change
    assert sql.bound_predicate(bound, "x'y", "string") == "true"  # no literal risked
    texts = sql.bound_texts("SELECT 1 AS v0, 2 AS v1, 3 AS v2",
                            ["timestamp", "decimal(10,2)", "string"])
    assert "CAST(unix_micros(v0) AS STRING) AS v0" in texts
    assert "CAST(v1 AS STRING) AS v1" in texts and "CAST(NULL AS STRING) AS v2" in texts
