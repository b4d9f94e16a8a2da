"""SQL generation of the executor, checked without Spark: it parses, and says what it must."""

import pytest
import sqlglot

from dbt.adapters.streamsql.execution.engine import model_writes
from dbt.adapters.streamsql.execution.engine import statements as sql
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
    text = (
        "select * from __streamsql_new_1__ a join `__streamsql_group_delta__` d "
        "on x.__streamsql_new_10__ = 1"
    )
    bound = sql.bind_placeholders(
        text,
        {
            "__streamsql_new_1__": "v1",
            "__streamsql_group_delta__": "gd",
            "__streamsql_new_10__": "v10",
        },
    )
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


# a map, and a struct holding one: Spark compares neither with <=>, nor in DISTINCT or EXCEPT
MAPS = [
    Column("id", "int"),
    Column("tags", "map<string,int>"),
    Column("s", "struct<p:int,q:map<string,int>>"),
]
TAGS = "array_sort(map_entries({0}.`tags`))"
S = (
    "if({0}.`s` IS NULL, NULL, "
    "named_struct('f0', {0}.`s`.`p`, 'f1', array_sort(map_entries({0}.`s`.`q`))))"
)


def test_maps_are_matched_by_their_sorted_entries():
    assert sql.null_safe_match(MAPS, "t", "n") == (
        f"t.`id` <=> n.`id` AND {TAGS.format('t')} <=> {TAGS.format('n')} "
        f"AND {S.format('t')} <=> {S.format('n')}"
    )
    assert not sql.groupable(MAPS) and sql.matchable(MAPS)
    assert not sql.matchable([Column("shape", "geometry(0)")])


def test_a_change_with_maps_is_netted_by_their_comparable_form_keeping_the_values():
    statement = sql.consolidate("chg", MAPS)
    parses(statement)
    assert statement.startswith("SELECT `id`, any_value(`tags`) AS `tags`, any_value(`s`) AS `s`, ")
    assert (
        "GROUP BY `id`, array_sort(map_entries(`tags`)), if(`s` IS NULL, NULL, "
        "named_struct('f0', `s`.`p`, 'f1', array_sort(map_entries(`s`.`q`)))) HAVING"
    ) in statement


def test_merge_change_counts_and_matches_rows_with_maps_by_their_comparable_form():
    statement = model_writes.merge_change("m", "net", MAPS)
    parses(statement)
    assert "SELECT n.`id`, any_value(n.`tags`) AS `tags`, any_value(n.`s`) AS `s`, " in statement
    assert f"GROUP BY n.`id`, {TAGS.format('n')}, {S.format('n')}, n._streamsql_weight" in (
        statement
    )
    assert f"{TAGS.format('t')} <=> {TAGS.format('s')}" in statement
    # the rows written are the change's own values
    assert "VALUES (s.`id`, s.`tags`, s.`s`)" in statement


def test_a_map_key_is_grouped_and_matched_by_its_comparable_form():
    statement = model_writes.merge_by_key("m", "net", MAPS, ["tags"])
    parses(statement)
    assert f"ON {TAGS.format('t')} <=> {TAGS.format('s')}" in statement
    assert "SELECT any_value(`tags`) AS `tags`, max_by(struct(`id`, `s`)" in statement
    assert "GROUP BY array_sort(map_entries(`tags`))" in statement
    state = sql.latest_state("st", MAPS[1:2], MAPS + [Column("_streamsql_count", "bigint")])
    parses(state)
    assert "SELECT any_value(`tags`) AS `tags`, max_by(" in state
    assert "GROUP BY array_sort(map_entries(`tags`))" in state


def test_merge_change_deletes_then_reinserts_survivors_atomically():
    statement = model_writes.merge_change("`s`.`m`", "net", COLS)
    parses(statement)
    assert statement.startswith("MERGE INTO `s`.`m` AS t USING")
    assert "ON s._streamsql_action = 'delete' AND t.`room` <=> s.`room`" in statement
    assert (
        "explode(sequence(CASE WHEN _streamsql_weight < 0 THEN 0 ELSE 1 END, "
        "CASE WHEN _streamsql_weight < 0 THEN greatest(_streamsql_existing + "
        "_streamsql_weight, 0) ELSE _streamsql_weight END))"
    ) in statement
    assert "WHEN NOT MATCHED AND s._streamsql_action = 'insert' THEN INSERT" in statement


def test_merge_change_reads_the_change_once():
    # Spark can miss its cache on a second reference of a cached view within one statement
    # (a cached query with a self-join, Nexmark q5) and evaluate the whole query again.
    statement = model_writes.merge_change("`s`.`m`", "net", COLS)
    assert statement.count("net") == 1
    assert statement.count("`s`.`m`") == 2  # the MERGE target, and the copies it holds


def test_insert_copies_repeats_rows_by_weight():
    statement = sql.insert_copies("`s`.`m`", "net", COLS)
    parses(statement)
    assert "explode(sequence(1, _streamsql_weight))" in statement


GROUP = [Column("_streamsql_g0", "bigint")]
STATE = GROUP + [Column("_streamsql_count", "bigint"), Column("_streamsql_a1", "bigint")]


def test_the_state_of_a_group_is_the_latest_row_a_step_wrote_for_it():
    statement = sql.latest_state("SELECT * FROM st VERSION AS OF 3", GROUP, STATE)
    parses(statement)
    assert statement == (
        "SELECT `_streamsql_g0`, _streamsql_latest.`_streamsql_count` AS `_streamsql_count`, "
        "_streamsql_latest.`_streamsql_a1` AS `_streamsql_a1` FROM (SELECT `_streamsql_g0`, "
        "max_by(struct(`_streamsql_count`, `_streamsql_a1`), _streamsql_step) AS "
        "_streamsql_latest FROM (SELECT * FROM st VERSION AS OF 3) GROUP BY `_streamsql_g0`) "
        "WHERE _streamsql_latest._streamsql_count > 0"
    )  # a gone group hides its older rows


def test_a_global_aggregates_state_is_one_row_or_none():
    statement = sql.latest_state("SELECT * FROM st", [], STATE[1:])
    parses(statement)
    assert "GROUP BY" not in statement


def test_appending_state_keeps_gone_groups_as_markers_except_on_a_first_write():
    appended = sql.insert_state("st", "new_groups", STATE, step=7, order=())
    parses(appended)
    assert appended == (
        "INSERT INTO st (`_streamsql_g0`, `_streamsql_count`, `_streamsql_a1`, "
        "_streamsql_step) SELECT `_streamsql_g0`, `_streamsql_count`, "
        "`_streamsql_a1`, CAST(7 AS BIGINT) FROM new_groups"
    )
    first = sql.insert_state("st", "new_groups", STATE, step=1, order=GROUP, everything=False)
    assert first.endswith("FROM new_groups WHERE _streamsql_count > 0 ORDER BY `_streamsql_g0`")


def test_compacting_state_keeps_the_state_it_holds_as_of_a_step():
    statement = sql.compact_state("st", 12, GROUP, STATE, order=GROUP)
    parses(statement)
    assert statement.startswith("INSERT OVERWRITE st (")
    assert "FROM (SELECT * FROM st WHERE _streamsql_step <= 12) GROUP BY" in statement
    assert (
        "SELECT `_streamsql_g0`, `_streamsql_count`, `_streamsql_a1`, CAST(12 AS BIGINT)"
        in statement
    )
    assert statement.endswith(
        "WHERE _streamsql_latest._streamsql_count > 0) ORDER BY `_streamsql_g0`"
    )


def test_range_aggregates_and_their_predicates_skip_what_has_no_literal():
    columns = [
        Column("k", "bigint"),
        Column("tags", "array<string>"),
        Column("w", "struct<start:timestamp,end:timestamp>"),
    ]
    assert sql.range_aggregates(columns, "g") == {
        "lo0": "CAST(MIN(g.`k`) AS STRING)",
        "hi0": "CAST(MAX(g.`k`) AS STRING)",
        "lo1": "CAST(unix_micros(MIN(g.`w`.start)) AS STRING)",
        "hi1": "CAST(unix_micros(MAX(g.`w`.start)) AS STRING)",
    }
    assert sql.range_aggregates(columns[:1], "t", where="t.w < 0", name="d") == {
        "dlo0": "CAST(MIN(CASE WHEN t.w < 0 THEN t.`k` END) AS STRING)",
        "dhi0": "CAST(MAX(CASE WHEN t.w < 0 THEN t.`k` END) AS STRING)",
    }
    row = {"lo0": "1", "hi0": "9", "lo1": None, "hi1": None}  # no window in the change
    assert sql.range_predicates(columns, "g", row) == [
        "(((g.`k` >= CAST('1' AS bigint)) AND (g.`k` <= CAST('9' AS bigint))) OR g.`k` IS NULL)",
        "((false AND false) OR g.`w`.start IS NULL)",
    ]


def test_create_table_turns_on_the_change_feed_and_options():
    statement = sql.create_table(
        "`s`.`m`", COLS, {"delta.appendOnly": "false"}, partition_by=["room"], location="/data/m"
    )
    parses(statement)
    assert "'delta.enableChangeDataFeed' = 'true'" in statement
    assert "PARTITIONED BY (`room`)" in statement and "LOCATION '/data/m'" in statement


def test_merge_change_bounds_the_target_by_the_waterline():
    from dbt.adapters.streamsql.execution.event_time import lateness as late

    rules = late.lateness_rules("m", [Column("ts", "timestamp")], {"ts": "INTERVAL 1 HOUR"}, {})
    bounds = late.target_bounds(rules, {"ts": "2024-01-01 10:00:00"})
    assert bounds == ["t.`ts` >= CAST('2024-01-01 10:00:00' AS timestamp)"]
    assert late.target_bounds(rules, {}) == []  # first step: no waterline yet
    statement = model_writes.merge_change("`s`.`m`", "net", [Column("ts", "timestamp")], bounds)
    parses(statement)
    # on the join that counts the copies to keep, and on the MERGE's match
    assert statement.count("AND t.`ts` >= CAST('2024-01-01 10:00:00' AS timestamp)") == 2


def test_merge_by_key_updates_deletes_and_inserts_by_key_without_counting_copies():
    statement = model_writes.merge_by_key(
        "m.t", "net", COLS + [Column("total", "bigint")], ["room"], ["t.`room` >= 'a'"]
    )
    parses(statement)
    assert statement.count("net") == 1 and "LEFT JOIN" not in statement
    assert "ON t.`room` <=> s.`room` AND t.`room` >= 'a'" in statement
    assert "max_by(struct(`n`, `total`), _streamsql_weight)" in statement
    assert "GROUP BY `room`" in statement
    assert "WHEN MATCHED AND NOT s._streamsql_keep THEN DELETE" in statement
    assert "UPDATE SET `n` = s._streamsql_row.`n`, `total` = s._streamsql_row.`total`" in statement
    assert "VALUES (s.`room`, s._streamsql_row.`n`, s._streamsql_row.`total`)" in statement


def test_merge_by_key_of_a_global_aggregate_matches_its_one_row():
    statement = model_writes.merge_by_key("m.t", "net", COLS, [])
    parses(statement)
    assert "ON true" in statement and "GROUP BY" not in statement


def test_merge_by_key_when_every_column_is_key_only_deletes_and_inserts():
    statement = model_writes.merge_by_key("m.t", "net", COLS, ["room", "n"])
    parses(statement)
    assert "UPDATE" not in statement and "max_by" not in statement


def test_rewrite_by_key_keeps_untouched_keys_and_adds_the_kept_new_rows_in_one_file():
    statement = model_writes.rewrite_by_key(
        "m.t", "net", COLS + [Column("total", "bigint")], ["room"]
    )
    parses(statement)
    assert statement.startswith(
        "INSERT OVERWRITE m.t (`room`, `n`, `total`) SELECT /*+ COALESCE(1) */"
    )
    # the table's rows of keys the change does not touch (NULL keys matched as equal)
    assert "FROM m.t t LEFT ANTI JOIN net n ON t.`room` <=> n.`room`" in statement
    # each touched key's new row, from the same per-key source as the MERGE by key
    assert "max_by(struct(`n`, `total`), _streamsql_weight)" in statement
    assert "SELECT s.`room`, s._streamsql_row.`n`, s._streamsql_row.`total`" in statement
    assert statement.endswith("WHERE s._streamsql_keep)")


def test_rewrite_by_key_of_a_global_aggregate_replaces_its_one_row():
    statement = model_writes.rewrite_by_key("m.t", "net", COLS, [])
    parses(statement)
    assert "LEFT ANTI JOIN net n ON true" in statement and "GROUP BY" not in statement


def test_rewrite_change_removes_copies_with_except_all_and_adds_copies():
    statement = model_writes.rewrite_change("m.t", "net", COLS)
    parses(statement)
    assert (
        "(SELECT `room`, `n` FROM m.t EXCEPT ALL SELECT `room`, `n` FROM net "
        "LATERAL VIEW explode(sequence(1, -_streamsql_weight))" in statement
    )
    assert "WHERE _streamsql_weight < 0) UNION ALL" in statement
    assert statement.endswith(
        "explode(sequence(1, _streamsql_weight)) copies AS _streamsql_copies "
        "WHERE _streamsql_weight > 0)"
    )


def test_bound_predicates_are_literals_or_nothing():
    from dbt.adapters.streamsql.planning.plan import KeyBound

    bound = KeyBound("__streamsql_bound_0__", "p.id", ">=", "(SELECT MIN(a.seller) FROM d AS a)")
    assert sql.bound_predicate(bound, "42", "bigint") == "(p.id >= CAST('42' AS bigint))"
    # timestamps travel as epoch microseconds: no session time zone in between
    assert (
        sql.bound_predicate(bound, "1704067200000000", "timestamp")
        == "(p.id >= timestamp_micros(1704067200000000))"
    )
    assert sql.bound_predicate(bound, None, "bigint") == "false"  # an empty change
    assert sql.bound_predicate(bound, "x'y", "string") == "true"  # no literal risked
    texts = sql.bound_texts(
        "SELECT 1 AS v0, 2 AS v1, 3 AS v2", ["timestamp", "decimal(10,2)", "string"]
    )
    assert "CAST(unix_micros(v0) AS STRING) AS v0" in texts
    assert "CAST(v1 AS STRING) AS v1" in texts and "CAST(NULL AS STRING) AS v2" in texts


def test_netted_rows_are_one_row_per_copy_with_a_unit_weight():
    statement = sql.netted_rows("(feed)", COLS)
    parses(statement)
    # netted first (rows that cancel out disappear), then each copy a row of weight +1 or -1
    assert "GROUP BY `room`, `n` HAVING SUM(_streamsql_weight) <> 0" in statement
    assert statement.startswith(
        "SELECT `room`, `n`, CAST(sign(_streamsql_weight) AS BIGINT) AS _streamsql_weight FROM ("
    )
    assert statement.endswith(
        "explode(sequence(1, abs(_streamsql_weight))) copies AS _streamsql_copies"
    )
