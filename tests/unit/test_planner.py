"""Planner unit tests: strategy and reason per model shape, and the shape of the emitted SQL.

Pure Python; whether the SQL computes the right rows is checked on Spark in
test_planner_semantics.py.
"""

from __future__ import annotations

import re

import pytest
import sqlglot
from sqlglot import exp

from dbt.adapters.streamsql.planning import global_top_k
from dbt.adapters.streamsql.planning.plan import (
    COUNT,
    GROUP_DELTA,
    GROUPS,
    STATE,
    TARGET,
    WEIGHT,
    Column,
    InputTable,
    StepPlan,
)
from dbt.adapters.streamsql.planning.planner import PlanningError, plan_step

SENSORS = InputTable(
    "demo.sensors",
    (
        Column("room", "string"),
        Column("ts", "timestamp"),
        Column("temp", "decimal(10,2)"),
        Column("reading", "int"),
        Column("tags", "array<string>"),
    ),
)
ROOMS = InputTable("demo.rooms", (Column("room", "string"), Column("floor", "bigint")))
INPUTS = (SENSORS, ROOMS)
PLACEHOLDER = re.compile(r"__streamsql_(new|old|delta)_(\d+)__")


def plan(sql: str, *columns: str) -> StepPlan:
    """Plans `sql` with output columns given as "name type" (type defaults to string)."""
    output = [Column(*(c.split(" ", 1) if " " in c else (c, "string"))) for c in columns]
    return plan_step(sql, INPUTS, output)


def parse(sql: str) -> exp.Expression:
    return sqlglot.parse_one(sql, read="spark")


def aggregate_sql(aggregate):
    return [aggregate.delta_sql, aggregate.combine_sql, aggregate.output_sql]


def all_sql(step: StepPlan):
    stages = [sql for stage in step.stages for sql in aggregate_sql(stage.aggregate)]
    if step.aggregate is not None:
        return stages + aggregate_sql(step.aggregate)
    return stages + [step.change_sql]


def table_names(sql: str):
    return {t.name for t in parse(sql).find_all(exp.Table)}


def top_level_names(query: exp.Expression):
    while isinstance(query, exp.SetOperation):
        query = query.this
    return [p.alias_or_name for p in query.expressions]


# -- strategy and reason ------------------------------------------------------------------------

LINEAR_CASES = [
    (
        "select room, temp from demo.sensors where temp > 20",
        ("room", "temp"),
        "fast path: filter, projection",
        True,
    ),
    (
        "select * from demo.sensors",
        ("room", "ts", "temp", "reading", "tags"),
        "fast path: projection",
        True,
    ),
    (
        "select s.room, r.floor from demo.sensors s join demo.rooms r on s.room = r.room",
        ("room", "floor"),
        "fast path: projection, inner join",
        True,
    ),
    (
        "select s.room, r.floor from demo.sensors s left join demo.rooms r on s.room = r.room",
        ("room", "floor"),
        "fast path: projection, left join",
        False,
    ),
    (
        "select room from demo.sensors union all select room from demo.rooms",
        ("room",),
        "fast path: projection, union all",
        True,
    ),
    (
        "select room, tag from demo.sensors lateral view explode(tags) t as tag",
        ("room", "tag"),
        "fast path: projection, lateral view",
        True,
    ),
    (
        "with __dbt__cte__hot as (select * from demo.sensors where temp > 30) "
        "select room from __dbt__cte__hot",
        ("room",),
        "fast path: filter, projection, derived table",
        True,
    ),
    (
        "select s.room, r.floor from demo.sensors s, demo.rooms r",
        ("room", "floor"),
        "fast path: projection, inner join",
        True,
    ),
    ("select room from demo.sensors order by ts", ("room",), "fast path: projection", True),
    (
        "select s.room, r.floor from demo.sensors s right join demo.rooms r on s.room = r.room",
        ("room", "floor"),
        "fast path: projection, right join",
        False,
    ),
    (
        "select s.room, r.floor from demo.sensors s "
        "full outer join demo.rooms r on s.room = r.room",
        ("room", "floor"),
        "fast path: projection, full join",
        False,
    ),
    (
        "select s.room from demo.sensors s left semi join demo.rooms r on s.room = r.room",
        ("room",),
        "fast path: projection, semi join",
        False,
    ),
    (
        "select room, (select max(floor) from demo.rooms) as top from demo.sensors "
        "where reading > (select avg(floor) from demo.rooms)",
        ("room", "top bigint"),
        "fast path: filter, projection, scalar subquery; over 2 stages (global aggregate (max); "
        "min/max recompute a group after a deletion; global aggregate (avg))",
        True,
    ),
    (
        "select room, count(*) as n from demo.sensors group by room with rollup",
        ("room", "n bigint"),
        "fast path: projection, rollup; over 2 stages (group by (count(*)); "
        "global aggregate (count(*)))",
        True,
    ),
    (
        "select room, reading, count(*) as n from demo.sensors group by cube(room, reading)",
        ("room", "reading int", "n bigint"),
        "fast path: projection, cube; over 4 stages (group by (count(*)); "
        "global aggregate (count(*)))",
        True,
    ),
    (
        "select room, count(*) as n from demo.sensors group by grouping sets ((room), ())",
        ("room", "n bigint"),
        "fast path: projection, grouping sets; over 2 stages (group by (count(*)); "
        "global aggregate (count(*)))",
        True,
    ),
    (
        "select room from demo.sensors intersect all select room from demo.rooms",
        ("room",),
        "fast path: projection, intersect all; over 1 stage (intersect all counts (count))",
        True,  # over inserts only: a stage that removes a row makes the step net its change
    ),
    (
        "select room from demo.sensors except all select room from demo.rooms",
        ("room",),
        "fast path: projection, except all; over 1 stage (except all counts (count))",
        True,  # over inserts only: a stage that removes a row makes the step net its change
    ),
]


@pytest.mark.parametrize("sql, columns, reason, monotonic", LINEAR_CASES)
def test_linear_shapes(sql, columns, reason, monotonic):
    step = plan(sql, *columns)
    assert step.kind == "linear"
    assert step.reason == reason
    assert step.monotonic is monotonic
    assert step.aggregate is None


AGGREGATE_CASES = [
    (
        "select room, count(*) as n from demo.sensors group by room",
        ("room", "n bigint"),
        "fast path: group by (count(*))",
    ),
    (
        "select room, sum(temp) as s, avg(temp) as a from demo.sensors group by room",
        ("room", "s decimal(20,2)", "a decimal(14,6)"),
        "fast path: group by (sum, avg)",
    ),
    (
        "select room, min(temp) as lo from demo.sensors group by room",
        ("room", "lo decimal(10,2)"),
        "fast path: group by (min); min/max recompute a group after a deletion",
    ),
    (
        "select room, count(distinct reading) as n from demo.sensors group by room",
        ("room", "n bigint"),
        "fast path: group by; count(distinct) recomputed for changed groups only",
    ),
    ("select distinct room from demo.sensors", ("room",), "fast path: distinct"),
    (
        "select room from demo.sensors union select room from demo.rooms",
        ("room",),
        "fast path: distinct",
    ),
    (
        "select count(*) as n from demo.sensors",
        ("n bigint",),
        "fast path: global aggregate (count(*))",
    ),
    (
        "select room, n from (select room, count(*) as n from demo.sensors group by room) c "
        "where n > 2",
        ("room", "n bigint"),
        "fast path: group by (count(*))",
    ),
    (
        "select room from demo.sensors intersect select room from demo.rooms",
        ("room",),
        "fast path: intersect (count)",
    ),
    (
        "select room from demo.sensors except select room from demo.rooms",
        ("room",),
        "fast path: except (count)",
    ),
]


@pytest.mark.parametrize("sql, columns, reason", AGGREGATE_CASES)
def test_aggregate_shapes(sql, columns, reason):
    step = plan(sql, *columns)
    assert step.kind == "aggregate"
    assert step.reason == reason
    assert step.change_sql is None
    assert step.monotonic is False


RECOMPUTE_CASES = [
    (
        "select room, row_number() over (order by ts) as rn from demo.sensors",
        "window function row_number()",
    ),
    ("select room, rand() as r from demo.sensors", "nondeterministic function rand()"),
    ("select room, current_timestamp() as t from demo.sensors", "nondeterministic function"),
    ("select room, uuid() as u from demo.sensors", "nondeterministic function uuid()"),
    ("select room, unix_timestamp() as u from demo.sensors", "nondeterministic function"),
    (
        "select room, monotonically_increasing_id() as i from demo.sensors",
        "monotonically_increasing_id()",
    ),
    ("select room, my_udf(temp) as x from demo.sensors", "user-defined function my_udf()"),
    ("select room from demo.sensors limit 10", "LIMIT without ORDER BY"),
    ("select room from demo.sensors order by room limit 10 offset 5", "LIMIT with OFFSET"),
    ("select room from demo.sensors order by ts limit 10", "orders by something the query"),
    ("select room from demo.sensors order by room limit 0", "positive integer literal"),
    (
        "select room from (select room from demo.sensors order by ts limit 3) x",
        "LIMIT is not maintained",
    ),
    ("select room from demo.sensors tablesample (10 percent)", "TABLESAMPLE"),
    (
        "select s.room from demo.sensors s full join demo.rooms r on s.ts < r.floor",
        "FULL JOIN without an equality",
    ),
    (
        "select s.room from demo.sensors s left anti join demo.rooms r on s.reading > r.floor",
        "LEFT ANTI JOIN without an equality",
    ),
    (
        "select room from demo.sensors where room in (select room from demo.rooms) or reading > 1",
        "IN (subquery) other than",
    ),
    (
        "select s.room, (select max(r.floor) + 1 from demo.rooms r where r.room = s.room) as top "
        "from demo.sensors s",
        "scalar subquery other than",
    ),
    (
        "select s.room, (select max(r.floor) from demo.rooms r where r.floor > s.reading) as top "
        "from demo.sensors s",
        "scalar subquery other than",
    ),
    (
        "select room, count(*) as n from demo.sensors group by room "
        "having count(*) > (select count(*) from demo.rooms)",
        "scalar subquery other than",
    ),
    ("select room from demo.sensors where reading > (select floor from demo.rooms)", "scalar"),
    (
        "select room, row_number() over (partition by room order by ts) as x from demo.sensors "
        "where reading > (select avg(floor) from demo.rooms)",
        "scalar subquery other than",
    ),
    (
        "select s.room from demo.sensors s left join demo.rooms r on s.ts < r.floor",
        "LEFT JOIN without an equality",
    ),
    (
        "select x.room, x.n from (select room, count(*) as n from demo.sensors "
        "group by rollup(room)) x where x.n > 1",
        "GROUPING SETS/ROLLUP/CUBE",
    ),
    (
        "select session_window(ts, '5 minutes') as w, count(*) as n from demo.sensors "
        "group by session_window(ts, '5 minutes')",
        "session_window()",
    ),
    ("select collect_list(room) as rooms from demo.sensors", "without GROUP BY"),
    ("select room from demo.sensors where ((", "sqlglot cannot parse"),
]


def projection_names(sql: str):
    """Output column names of a query as DESCRIBE would give them (enough for these cases)."""
    try:
        query = parse(sql)
    except sqlglot.errors.ParseError:
        return ["room"]
    return top_level_names(query)


@pytest.mark.parametrize("sql, construct", RECOMPUTE_CASES)
def test_recompute_fallbacks(sql, construct):
    step = plan(sql, *projection_names(sql))
    assert step.kind == "recompute"
    assert step.reason.startswith("recompute: ")
    assert construct in step.reason
    assert "\n" not in step.reason


# -- emitted SQL --------------------------------------------------------------------------------

ALL_CASES = [(sql, columns) for sql, columns, *_ in LINEAR_CASES + AGGREGATE_CASES] + [
    (sql, tuple(projection_names(sql))) for sql, _ in RECOMPUTE_CASES if "((" not in sql
]


@pytest.mark.parametrize("sql, columns", ALL_CASES)
def test_emitted_sql_parses_and_reads_inputs_only_through_placeholders(sql, columns):
    step = plan(sql, *columns)
    for statement in all_sql(step):
        assert isinstance(parse(statement), exp.Query), statement
        assert "demo." not in statement
        for name in table_names(statement):
            assert (
                PLACEHOLDER.fullmatch(name)
                or name in (STATE, GROUP_DELTA, GROUPS, TARGET)
                or name.startswith("_streamsql")
            ), name
        for kind, index in PLACEHOLDER.findall(statement):
            assert int(index) < len(step.inputs) + len(step.stages)
    assert step.inputs == INPUTS


def test_plans_list_inputs_in_the_given_order():
    step = plan_step("select room from demo.rooms", INPUTS, [Column("room", "string")])
    assert step.inputs == INPUTS
    assert "__streamsql_delta_1__" in step.change_sql
    assert "__streamsql_delta_0__" not in step.change_sql


def test_table_reference_keeps_its_alias_or_its_name():
    aliased = plan("select a.room from demo.sensors as a where a.temp > 1", "room").change_sql
    assert "__streamsql_delta_0__ AS a" in aliased
    bare = plan("select sensors.room from demo.sensors", "room").change_sql
    assert "__streamsql_delta_0__ AS sensors" in bare


@pytest.mark.parametrize(
    "reference",
    [
        "`demo`.`sensors`",
        "spark_catalog.demo.sensors",
        "DEMO.Sensors",
        "`spark_catalog`.demo.`sensors`",
    ],
)
def test_table_references_match_on_their_last_two_parts(reference):
    step = plan(f"select room from {reference}", "room")
    assert step.kind == "linear"
    assert table_names(step.change_sql) == {"__streamsql_delta_0__"}


def test_linear_change_has_the_output_columns_then_the_weight():
    columns = [
        Column("r", "string"),
        Column("(temp * 2)", "decimal(21,2)"),
        Column("reading", "int"),
    ]
    step = plan_step("select room as r, temp * 2, reading from demo.sensors", INPUTS, columns)
    assert top_level_names(parse(step.change_sql)) == ["r", "(temp * 2)", "reading", WEIGHT]


def test_star_expansion_never_leaks_the_weight_column():
    step = plan(
        "select * from demo.sensors s join demo.rooms r on s.room = r.room",
        *"room ts temp reading tags room floor".split(),
    )
    for branch in parse(step.change_sql).find_all(exp.Select):
        names = [p.alias_or_name for p in branch.expressions]
        assert names.count(WEIGHT) <= 1
        assert not any(isinstance(p, exp.Star) for p in branch.expressions)
    assert top_level_names(parse(step.change_sql))[-1] == WEIGHT


def test_inner_join_delta_is_delta_left_with_new_right_plus_old_left_with_delta_right():
    step = plan(
        "select s.room, r.floor from demo.sensors s join demo.rooms r on s.room = r.room",
        "room",
        "floor",
    )
    union = parse(step.change_sql)
    branches = [union.this, union.expression]
    assert [sorted(table_names(b.sql("spark"))) for b in branches] == [
        ["__streamsql_delta_0__", "__streamsql_new_1__"],
        ["__streamsql_delta_1__", "__streamsql_old_0__"],
    ]
    assert [b.expressions[-1].this.sql("spark") for b in branches] == [f"s.{WEIGHT}", f"r.{WEIGHT}"]


def test_left_join_delta_recomputes_changed_keys_null_safely():
    step = plan(
        "select s.room, r.floor from demo.sensors s left join demo.rooms r on s.room = r.room",
        "room",
        "floor",
    )
    union = parse(step.change_sql)
    new_branch, old_branch = union.this, union.expression
    assert {"__streamsql_new_0__", "__streamsql_new_1__"} <= table_names(new_branch.sql("spark"))
    assert {"__streamsql_old_0__", "__streamsql_old_1__"} <= table_names(old_branch.sql("spark"))
    assert new_branch.expressions[-1].this.sql("spark") == "CAST(1 AS BIGINT)"
    assert old_branch.expressions[-1].this.sql("spark") == "CAST(-1 AS BIGINT)"
    semi_joins = [j for j in new_branch.args["joins"] if j.kind == "SEMI"]
    assert len(semi_joins) == 1 and isinstance(semi_joins[0].args["on"], exp.NullSafeEQ)
    # the changed keys come from both deltas
    keys = semi_joins[0].sql("spark")
    assert "__streamsql_delta_0__ AS s" in keys and "__streamsql_delta_1__ AS r" in keys


def test_unknown_table_is_a_planning_error():
    with pytest.raises(PlanningError, match="demo.nope"):
        plan("select room from demo.nope", "room")


def test_unknown_table_is_a_planning_error_even_when_recomputing():
    with pytest.raises(PlanningError, match="demo.nope"):
        plan("select room, rand() from demo.nope", "room", "r")


def test_several_statements_are_a_planning_error():
    with pytest.raises(PlanningError):
        plan("select room from demo.sensors; select room from demo.rooms", "room")


# -- recompute ----------------------------------------------------------------------------------


def test_recompute_keeps_the_users_text_and_diffs_with_the_target():
    sql = (
        "-- top\nselect room, row_number() over (order by ts) as rn from demo.sensors s -- tail\n;"
    )
    step = plan(sql, "room", "rn bigint")
    assert (
        "row_number() over (order by ts) as rn from __streamsql_new_0__ s -- tail\n"
        in step.change_sql
    )
    tree = parse(step.change_sql)
    assert top_level_names(tree) == ["room", "rn", WEIGHT]
    assert TARGET in table_names(step.change_sql)
    assert "_streamsql_model(room, rn)" in step.change_sql


def test_recompute_of_unparseable_sql_replaces_tables_by_tokens():
    step = plan("select room from demo.sensors where ((", "room")
    assert "from __streamsql_new_0__ AS sensors where ((" in step.change_sql


def test_recompute_does_not_touch_cte_names():
    sql = "with hot as (select * from demo.sensors) select room, rand() as r from hot"
    step = plan(sql, "room", "r double")
    assert (
        "from __streamsql_new_0__ AS sensors) select room, rand() as r from hot" in step.change_sql
    )


# -- aggregate ----------------------------------------------------------------------------------

WINDOWED = (
    "select room, window(ts, '1 hour').start as window_start, avg(temp) as avg_temp, count(*) as n "
    "from demo.sensors group by room, window(ts, '1 hour')"
)


def windowed_plan():
    return plan(
        WINDOWED, "room", "window_start timestamp", "avg_temp decimal(14,6)", "n bigint"
    ).aggregate


def test_state_columns_are_groups_count_then_partials():
    aggregate = windowed_plan()
    assert aggregate.group_columns == ("_streamsql_g0", "_streamsql_g1")
    assert [(c.name, c.data_type) for c in aggregate.state_columns] == [
        ("_streamsql_g0", "string"),
        ("_streamsql_g1", "struct<start:timestamp,end:timestamp>"),  # window() over a timestamp
        (COUNT, "bigint"),
        ("_streamsql_a0", "decimal(20,2)"),
        ("_streamsql_a0_n", "bigint"),
    ]


def test_delta_sql_produces_every_state_column():
    aggregate = windowed_plan()
    names = top_level_names(parse(aggregate.delta_sql))
    assert [c.name for c in aggregate.state_columns] == [
        n for n in names if not n.endswith("_deleted")
    ]


def test_combine_sql_produces_exactly_the_state_columns():
    aggregate = windowed_plan()
    assert top_level_names(parse(aggregate.combine_sql)) == [
        c.name for c in aggregate.state_columns
    ]
    assert {STATE, GROUP_DELTA} <= table_names(aggregate.combine_sql)


def test_output_sql_uses_group_columns_for_group_expressions():
    output = windowed_plan().output_sql
    assert top_level_names(parse(output)) == [
        "room",
        "window_start",
        "avg_temp",
        "n",
        "_streamsql_g0",
        "_streamsql_g1",
    ]
    assert "_streamsql_g1.start AS window_start" in output
    assert "CAST(_streamsql_count AS BIGINT) AS n" in output
    assert "WHERE _streamsql_count > 0" in output
    assert table_names(output) == {GROUPS}


def test_decimal_avg_follows_sparks_result_type():
    # AVG of a DECIMAL(10,2): through DOUBLE, as Spark's optimizer computes it
    output = windowed_plan().output_sql
    assert (
        "CAST((CAST(CAST((CAST(_streamsql_a0 AS DECIMAL(20, 2))) * 100 AS BIGINT) AS DOUBLE) / "
        "CAST(_streamsql_a0_n AS DOUBLE)) / CAST(100 AS DOUBLE) AS DECIMAL(14, 6))" in output
    )


def test_hopping_window_group_by_is_parsed():
    step = plan(
        "select window(ts, '1 hour', '15 minutes') as w, count(*) as n from demo.sensors "
        "group by window(ts, '1 hour', '15 minutes')",
        "w struct<start:timestamp,end:timestamp>",
        "n bigint",
    )
    assert step.kind == "aggregate"
    assert step.aggregate.state_columns[0].data_type == "struct<start:timestamp,end:timestamp>"


def test_group_by_alias_and_ordinal_resolve_to_the_expression():
    for group_by in ("1", "bucket"):
        step = plan(
            "select floor(reading / 10) as bucket, count(*) as n from demo.sensors "
            f"group by {group_by}",
            "bucket bigint",
            "n bigint",
        )
        assert step.kind == "aggregate"
        assert "_streamsql_g0 AS bucket" in step.aggregate.output_sql


def test_having_may_use_aggregates_not_selected():
    step = plan(
        "select room from demo.sensors group by room having max(temp) > 30 and count(*) > 1", "room"
    )
    assert step.kind == "aggregate"
    output = step.aggregate.output_sql
    assert "_streamsql_a0 > 30" in output and "_streamsql_count > 1" in output
    assert "_streamsql_a0" in [c.name for c in step.aggregate.state_columns]


def test_global_aggregate_always_has_one_row():
    step = plan(
        "select count(*) as n, sum(temp) as s from demo.sensors", "n bigint", "s decimal(20,2)"
    )
    output = step.aggregate.output_sql
    assert step.aggregate.group_columns == ()
    assert "LEFT JOIN __streamsql_groups__ ON TRUE" in output
    assert "COALESCE(_streamsql_count, 0)" in output
    assert "HAVING COUNT(*) > 0" in step.aggregate.delta_sql


def test_min_max_recompute_only_groups_whose_extreme_may_be_deleted():
    step = plan(
        "select room, max(temp) as hi from demo.sensors group by room", "room", "hi decimal(10,2)"
    )
    combine = step.aggregate.combine_sql
    assert "GREATEST(s._streamsql_a0, d._streamsql_a0)" in combine
    assert "d._streamsql_a0_deleted < s._streamsql_a0" in combine
    # a deletion is harmless when the group also gains a larger value (strictly: a value
    # inserted and deleted within one step is in both)
    assert "d._streamsql_a0 > d._streamsql_a0_deleted" in combine
    assert "__streamsql_new_0__" in combine
    delta = step.aggregate.delta_sql
    assert "FILTER(WHERE _streamsql_changes._streamsql_weight > 0)" in delta
    assert "FILTER(WHERE _streamsql_changes._streamsql_weight < 0)" in delta


def test_min_max_without_deletions_combine_from_the_state_alone():
    step = plan(
        "select room, min(temp) as lo, max(reading) as hi, count(*) as n from demo.sensors "
        "group by room",
        "room",
        "lo decimal(10,2)",
        "hi int",
        "n bigint",
    )
    shortcut = step.aggregate.combine_without_recompute_sql
    assert "LEAST(s._streamsql_a0, d._streamsql_a0)" in shortcut
    assert "GREATEST(s._streamsql_a1, d._streamsql_a1)" in shortcut
    assert "__streamsql_new_0__" not in shortcut and "_streamsql_recomputed" not in shortcut
    assert top_level_names(parse(shortcut)) == top_level_names(parse(step.aggregate.combine_sql))
    check = step.aggregate.recompute_check  # over the group delta's rows, as it is computed
    assert check.startswith("COALESCE(SUM(CASE WHEN ") and check.endswith(" THEN 1 ELSE 0 END), 0)")
    assert "_streamsql_a0_deleted IS NULL" in check and "_streamsql_a1_deleted IS NULL" in check
    assert "_streamsql_a0 < _streamsql_a0_deleted" in check  # MIN: a smaller insert outdoes
    assert "_streamsql_a1 > _streamsql_a1_deleted" in check  # MAX: a larger one


@pytest.mark.parametrize(
    "sql, columns",
    [
        (
            "select room, sum(temp) as s from demo.sensors group by room",
            ("room", "s decimal(20,2)"),
        ),
        (
            "select room, max(temp) as hi, count(distinct reading) as n from demo.sensors "
            "group by room",
            ("room", "hi decimal(10,2)", "n bigint"),
        ),
    ],
)
def test_no_shortcut_when_nothing_or_everything_is_recomputed(sql, columns):
    step = plan(sql, *columns)
    assert step.aggregate.combine_without_recompute_sql is None
    assert step.aggregate.recompute_check is None


def test_other_aggregates_recompute_changed_groups_from_new_inputs():
    step = plan(
        "select room, count(distinct reading) as n, sum(temp) filter (where reading > 0) as s "
        "from demo.sensors group by room",
        "room",
        "n bigint",
        "s decimal(20,2)",
    )
    combine = step.aggregate.combine_sql
    assert (
        "COUNT(DISTINCT" in combine
        and "LEFT SEMI JOIN" in combine
        and "__streamsql_new_0__" in combine
    )
    assert "count(distinct), sum filter recomputed for changed groups only" in step.reason


def test_aggregate_over_a_join_uses_the_join_delta():
    step = plan(
        "select r.floor, count(*) as n from demo.sensors s join demo.rooms r on s.room = r.room "
        "group by r.floor",
        "floor bigint",
        "n bigint",
    )
    assert step.kind == "aggregate"
    assert {
        "__streamsql_delta_0__",
        "__streamsql_new_1__",
        "__streamsql_old_0__",
        "__streamsql_delta_1__",
    } <= table_names(step.aggregate.delta_sql)
    assert step.aggregate.state_columns[0] == Column("_streamsql_g0", "bigint")


def test_sum_of_a_string_is_recomputed_per_group():
    step = plan("select room, sum(room) as s from demo.sensors group by room", "room", "s double")
    assert "sum recomputed for changed groups only" in step.reason


@pytest.mark.parametrize(
    "sql, columns, key",
    [
        (
            "select room, count(*) as n from demo.sensors group by room",
            ("room", "n bigint"),
            ("room",),
        ),
        (
            "select window(ts, '1 hour').start as hour, room, max(temp) as hi from demo.sensors "
            "group by room, window(ts, '1 hour')",
            ("hour timestamp", "room", "hi decimal(10,2)"),
            ("room", "hour"),
        ),
        ("select count(*) as n from demo.sensors", ("n bigint",), ()),
        (
            "select distinct room, reading from demo.sensors",
            ("room", "reading int"),
            ("room", "reading"),
        ),
        # the group is not named by the output: no key
        ("select count(*) as n from demo.sensors group by room", ("n bigint",), None),
        (
            "select room, n from (select room, count(*) as n from demo.sensors group by room) c "
            "where n > 2",
            ("room", "n bigint"),
            None,
        ),
    ],
)
def test_key_columns_name_each_group_in_the_output(sql, columns, key):
    assert plan(sql, *columns).aggregate.key_columns == key


# -- RIGHT and FULL joins -------------------------------------------------------------------------

FULL_JOIN = (
    "select s.room, s.ts, r.floor from demo.sensors s full join demo.rooms r on s.room = r.room"
)


def test_full_join_restricts_both_sides_to_the_changed_keys():
    step = plan(FULL_JOIN, "room", "ts timestamp", "floor bigint")
    union = parse(step.change_sql)
    new_branch, old_branch = union.this, union.expression
    assert [b.expressions[-1].this.sql("spark") for b in (new_branch, old_branch)] == [
        "CAST(1 AS BIGINT)",
        "CAST(-1 AS BIGINT)",
    ]
    for branch, version in ((new_branch, "new"), (old_branch, "old")):
        joins = branch.args["joins"]
        assert [(j.side, j.kind) for j in joins] == [("LEFT", "SEMI"), ("FULL", "")]
        assert isinstance(joins[0].args["on"], exp.NullSafeEQ)  # the left side: s.room <=> k0
        right = joins[1].this  # the right side: its rows of the changed keys only
        assert isinstance(right, exp.Subquery) and right.alias == "r"
        inner_joins = right.this.args["joins"]
        assert [(j.side, j.kind) for j in inner_joins] == [("LEFT", "SEMI")]
        assert inner_joins[0].args["on"].sql("spark").startswith("r.room IS NOT DISTINCT FROM")
        assert f"__streamsql_{version}_1__" in right.sql("spark")
    assert step.monotonic is False and step.later_monotonic is False


def test_right_join_is_the_full_join_rule():
    step = plan(
        "select s.room, r.floor from demo.sensors s right join demo.rooms r "
        "on s.room = r.room and s.reading > r.floor",
        "room",
        "floor bigint",
    )
    branch = parse(step.change_sql).this
    assert [(j.side, j.kind) for j in branch.args["joins"]] == [("LEFT", "SEMI"), ("RIGHT", "")]
    assert "s.reading > r.floor" in branch.args["joins"][1].args["on"].sql("spark")


def test_outer_join_terms_are_bounded_by_the_changed_keys_on_both_sides():
    step = plan(
        "select s.room, r.floor from demo.sensors s full join demo.rooms r on s.reading = r.floor",
        "room",
        "floor bigint",
    )
    by_column = {(b.column, b.operator): b.value for b in step.bounds}
    # both changes bring keys: the range is the widest of the two
    assert by_column[("s.reading", ">=")] == (
        "LEAST((SELECT MIN(s.reading) FROM __streamsql_delta_0__ AS s), "
        "(SELECT MIN(r.floor) FROM __streamsql_delta_1__ AS r))"
    )
    assert ("r.floor", "<=") in by_column
    # NULL keys are a key like any other (the restriction is null-safe)
    assert "OR s.reading IS NULL" in step.change_sql and "OR r.floor IS NULL" in step.change_sql


def test_left_join_right_side_bound_goes_into_its_on_clause():
    step = plan(
        "select s.room, r.floor from demo.sensors s left join demo.rooms r on s.reading = r.floor",
        "room",
        "floor bigint",
    )
    joins = parse(step.change_sql).this.args["joins"]
    join = [j for j in joins if j.side == "LEFT" and not j.kind][0]
    assert "OR r.floor IS NULL" in join.args["on"].sql("spark")


def test_an_aggregate_over_a_full_join_names_it():
    step = plan(
        "select r.floor, count(*) as n from demo.sensors s "
        "full join demo.rooms r on s.room = r.room group by r.floor",
        "floor bigint",
        "n bigint",
    )
    assert step.kind == "aggregate"
    assert step.reason == "fast path: group by (count(*)); over full join"
    assert "FULL JOIN" in step.aggregate.delta_sql


def test_intersect_and_except_are_aggregates_keyed_by_every_column():
    step = plan(
        "select room, floor from demo.rooms intersect select room, reading from demo.sensors",
        "room",
        "floor bigint",
    )
    assert step.aggregate.key_columns == ("room", "floor")  # a step MERGEs the rows by key
    counted = step.aggregate.delta_sql
    assert "_streamsql_left" in counted and "_streamsql_right" in counted


def test_a_set_operation_below_the_top_is_a_stage():
    step = plan(
        "select room from demo.rooms except "
        "(select room from demo.sensors intersect select room from demo.rooms where floor > 1)",
        "room",
    )
    assert step.kind == "aggregate"
    assert step.reason == "fast path: except (count); over 1 stage (intersect (count))"


def test_a_set_operation_whose_side_repeats_a_name_is_recomputed():
    step = plan(
        "select room, room from demo.rooms intersect all select room, room from demo.sensors",
        "a",
        "b",
    )
    assert step.reason == (
        "recompute: INTERSECT ALL whose sides repeat a column name is not maintained incrementally"
    )


def grouping_branches(sql: str, *columns: str):
    from dbt.adapters.streamsql.planning.grouping_sets import rewrite

    output = [Column(*(c.split(" ", 1) if " " in c else (c, "string"))) for c in columns]
    union = rewrite(parse(sql), output)
    return [b.sql("spark") for b in union.find_all(exp.Select)]


def test_grouping_sets_are_one_group_by_each_with_the_others_null_and_grouping_constant():
    branches = grouping_branches(
        "select k, g, n, sum(n) as s, grouping_id() as gid, grouping(n) as gn from t "
        "group by k, rollup(g, n) having sum(n) > 0",
        "k int",
        "g string",
        "n int",
        "s bigint",
        "gid bigint",
        "gn tinyint",
    )
    assert sorted(branches) == sorted(
        [
            "SELECT k AS k, g AS g, n AS n, SUM(n) AS s, CAST(0 AS BIGINT) AS gid, "
            "CAST(0 AS TINYINT) AS gn FROM t GROUP BY k, g, n HAVING SUM(n) > 0",
            # n left out: NULL of the model's type outside the aggregate, summed inside it
            "SELECT k AS k, g AS g, CAST(NULL AS INT) AS n, SUM(n) AS s, CAST(1 AS BIGINT) AS gid, "
            "CAST(1 AS TINYINT) AS gn FROM t GROUP BY k, g HAVING SUM(n) > 0",
            "SELECT k AS k, CAST(NULL AS STRING) AS g, CAST(NULL AS INT) AS n, SUM(n) AS s, "
            "CAST(3 AS BIGINT) AS gid, CAST(1 AS TINYINT) AS gn FROM t GROUP BY k "
            "HAVING SUM(n) > 0",
        ]
    )


def test_the_grand_total_gives_no_row_over_no_rows_and_cube_gives_every_subset():
    branches = grouping_branches(
        "select a, b, count(*) as c from t group by cube(a, b)", "a", "b", "c bigint"
    )
    assert len(branches) == 4
    assert (
        "SELECT CAST(NULL AS STRING) AS a, CAST(NULL AS STRING) AS b, COUNT(*) AS c FROM t "
        "HAVING COUNT(*) > 0" in branches
    )
    sets = grouping_branches(
        "select a, b from t group by grouping sets ((a, b), a, (), a)", "a", "b"
    )
    assert len(sets) == 4  # a set listed twice gives its rows twice, as in Spark


def test_a_correlated_aggregate_is_a_left_join_of_its_groups_and_count_reads_zero_unmatched():
    step = plan(
        "select r.room, (select count(*) from demo.sensors s where s.room = r.room "
        "and s.reading > 0) as n from demo.rooms r",
        "room",
        "n bigint",
    )
    assert step.reason == (
        "fast path: projection, scalar subquery; over 1 stage (group by (count(*)))"
    )
    assert "COALESCE(_streamsql_scalar0._streamsql_value, 0) AS n" in step.change_sql
    assert "LEFT JOIN __streamsql_new_2__ AS _streamsql_scalar0 ON r.room = " in step.change_sql
    (stage,) = step.stages
    assert "WHERE s.reading > 0" in stage.aggregate.delta_sql  # the subquery's own filter


# -- ORDER BY ... LIMIT at the top (global_top_k.py) ----------------------------------------------


def test_global_top_k_is_linear_with_a_gate_on_reading_the_whole_query():
    step = plan(
        "select room, temp from demo.sensors where reading > 0 order by temp desc limit 3",
        "room",
        "temp decimal(10,2)",
    )
    assert step.kind == "linear", step.reason
    assert step.reason == "fast path: filter, projection, global top-k (limit 3)"
    assert not step.monotonic  # the rows pushed below the cut leave the model
    gate = step.bounds[-1]
    assert (gate.name, gate.column, gate.operator) == ("__streamsql_bound_topk0__", "1", ">=")
    assert TARGET in gate.value and "__streamsql_delta_0__" in gate.value
    change = step.change_sql
    # the new first rows from the model and the change, or from the query over the new inputs
    assert f"WHERE NOT {gate.name}" in change and f"WHERE {gate.name}" in change
    assert global_top_k.NEW_TOP in change and TARGET in change
    # the query over the new inputs read once for the change and the rows below the cut
    assert "__streamsql_new_0__" in step.top_k.new_top_sql
    assert "__streamsql_new_0__" not in change + step.top_k.buffer_sql
    # ties broken by every output column after the ORDER BY
    assert "ORDER BY `temp` DESC NULLS LAST, `room` ASC NULLS FIRST, `temp` ASC NULLS FIRST" in (
        change
    )
    # P's first 3, the query's first 3; of the inserted rows, the first 3 + 10 + 1: the step
    # record keeps the 10 rows below the cut (B), and one more says B is not the end
    assert change.count("LIMIT 3") == 2 and "LIMIT 14" in change
    assert global_top_k.BUFFER in change and global_top_k.COMPLETE in change
    assert (step.top_k.count, step.top_k.buffer_rows) == (3, 10)
    assert global_top_k.BUFFER in step.top_k.buffer_sql and "LIMIT 14" in step.top_k.buffer_sql
    assert step.top_k.new_top_sql.endswith("LIMIT 14")


def test_global_top_k_keeps_rows_below_its_cut_only_of_types_text_gives_back_exactly():
    """Floating point (its text may round), CHAR (padded), binary and nested types: the step
    record keeps no rows below the cut, and the SQL is as it was without them."""
    for data_type in ("double", "float", "binary", "array<int>", "char(3)"):
        step = plan(
            "select room, temp from demo.sensors order by temp desc limit 3",
            "room",
            f"temp {data_type}",
        )
        assert step.kind == "linear" and step.top_k is None, data_type
        assert global_top_k.BUFFER not in step.change_sql
        assert step.change_sql.count("LIMIT 3") == 3, data_type
    wide = plan("select room from demo.sensors order by room limit 500", "room")
    assert wide.top_k.buffer_rows == global_top_k.MAX_BUFFER


@pytest.mark.parametrize(
    "data_type, text, expected",
    [
        ("string", "it's a \\ back", "CAST('it\\'s a \\\\ back' AS string)"),
        ("decimal(10,2)", "1.50", "CAST('1.50' AS decimal(10,2))"),
        ("timestamp", "1700000000000001", "timestamp_micros(CAST('1700000000000001' AS BIGINT))"),
        ("date", None, "CAST(NULL AS date)"),
    ],
)
def test_rows_below_the_cut_are_kept_as_text_and_read_back_as_literals(data_type, text, expected):
    column = Column("c", data_type)
    assert global_top_k.literal(column, text) == expected
    kind = "unix_micros" if data_type == "timestamp" else "CAST(`c` AS STRING)"
    assert kind in global_top_k.as_text(column)


def test_the_step_record_keeps_b_its_columns_and_whether_it_ends_the_result():
    columns = [Column("id", "bigint"), Column("v", "string")]

    def rows(*ranked, everything=True):
        found = [
            {"id": i, "v": v, "_streamsql_rank": 3 + n, "_streamsql_all": everything}
            for n, (i, v) in enumerate(ranked, 1)
        ]
        return found or [
            {"id": None, "v": None, "_streamsql_rank": None, "_streamsql_all": everything}
        ]

    kept = global_top_k.buffer_record(2, columns, rows(("1", "a"), ("2", None)))
    assert kept == {
        "columns": [["id", "bigint"], ["v", "string"]],
        "rows": [["1", "a"], ["2", None]],
        "complete": True,
    }
    assert global_top_k.buffer_kept(kept, columns) == ([["1", "a"], ["2", None]], True)
    # a row beyond the two kept: not the end of the result; nor where P was not all of it
    assert not global_top_k.buffer_record(2, columns, rows(("1", "a"), ("2", "b"), ("3", "c")))[
        "complete"
    ]
    assert not global_top_k.buffer_record(2, columns, rows(("1", "a"), everything=False))[
        "complete"
    ]
    # no row below the cut: the one row says only whether the result was all known
    assert global_top_k.buffer_record(2, columns, rows())["rows"] == []
    assert global_top_k.buffer_record(2, columns, rows())["complete"]
    # another model's columns, no record, or rows too large for a record: none
    assert global_top_k.buffer_kept(kept, [Column("id", "int"), Column("v", "string")]) == (
        [],
        False,
    )
    assert global_top_k.buffer_kept(None, columns) == ([], False)
    huge = rows(*[(str(i), "x" * 1000) for i in range(40)])
    assert global_top_k.buffer_record(40, columns, huge) is None
    relation = global_top_k.buffer_relation(columns, [["1", "a"], ["2", None]])
    assert relation == (
        "SELECT CAST('1' AS bigint) AS `id`, CAST('a' AS string) AS `v` UNION ALL "
        "SELECT CAST('2' AS bigint) AS `id`, CAST(NULL AS string) AS `v`"
    )
    assert global_top_k.buffer_relation(columns, []).endswith("WHERE false")


def test_global_top_k_over_an_aggregate_makes_the_aggregate_a_stage():
    step = plan(
        "select room, count(*) as n from demo.sensors group by room order by 2 desc, room limit 5",
        "room",
        "n bigint",
    )
    assert step.kind == "linear", step.reason
    assert [s.name for s in step.stages] == ["stage0"]
    assert "global top-k (limit 5)" in step.reason and "over 1 stage" in step.reason
    assert "ORDER BY `n` DESC NULLS LAST, `room` ASC NULLS FIRST" in step.change_sql


def test_global_top_k_over_a_set_operation_and_by_name_or_position():
    step = plan(
        "select room from demo.sensors except select room from demo.rooms order by room limit 3",
        "room",
    )
    assert step.kind == "linear", step.reason
    assert len(step.stages) == 1 and "except" in step.stages[0].reason
    by_name = plan("select room as r, ts from demo.sensors order by r limit 2", "r", "ts timestamp")
    by_expression = plan(
        "select s.room, ts from demo.sensors s order by s.room limit 2", "room", "ts timestamp"
    )
    for step in (by_name, by_expression):
        assert "global top-k (limit 2)" in step.reason, step.reason


def test_global_top_k_over_a_map_column_stays_a_recompute():
    step = plan_step(
        "select room, m from demo.t order by room limit 3",
        (InputTable("demo.t", (Column("room", "string"), Column("m", "map<string,int>"))),),
        [Column("room", "string"), Column("m", "map<string,int>")],
    )
    assert step.kind == "recompute"
    assert "LIMIT over a MAP<STRING,INT> column (m)" in step.reason
    # a map inside a struct cannot be ordered either
    nested = "struct<p:int,q:map<string,int>>"
    step = plan_step(
        "select room, s from demo.t order by room limit 3",
        (InputTable("demo.t", (Column("room", "string"), Column("s", nested))),),
        [Column("room", "string"), Column("s", nested)],
    )
    assert step.kind == "recompute"
    assert f"LIMIT over a {nested.upper()} column (s)" in step.reason


def test_a_map_group_meets_its_state_by_its_sorted_entries():
    step = plan_step(
        "select m, count(*) as n from demo.t group by m",
        (InputTable("demo.t", (Column("room", "string"), Column("m", "map<string,int>"))),),
        [Column("m", "map<string,int>"), Column("n", "bigint")],
    )
    assert step.kind == "aggregate", step.reason
    combine = parse(step.aggregate.combine_sql)
    (on,) = [join.args["on"] for join in combine.find_all(exp.Join)]
    assert on.sql("spark") == (
        "ARRAY_SORT(MAP_ENTRIES(d._streamsql_g0)) IS NOT DISTINCT FROM "
        "ARRAY_SORT(MAP_ENTRIES(s._streamsql_g0))"
    )
