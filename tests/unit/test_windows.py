"""Top-K per partition (planning/windows.py): which window blocks take the fast path, and the
shape of their change. Pure Python; the rows are checked on Spark in test_planner_semantics.py.
"""

from __future__ import annotations

import pytest
import sqlglot
from sqlglot import exp

from dbt.adapters.streamsql.planning.plan import WEIGHT, Column, InputTable
from dbt.adapters.streamsql.planning.planner import plan_step
from dbt.adapters.streamsql.planning.window_reach import rows_reach

EVENTS = InputTable(
    "demo.events",
    (
        Column("id", "bigint"),
        Column("status", "string"),
        Column("updated_at", "timestamp"),
        Column("attrs", "map<string,string>"),
    ),
)
BIDS = InputTable(
    "demo.bids",
    (
        Column("auction", "bigint"),
        Column("price", "bigint"),
        Column("bidder", "bigint"),
    ),
)
AUCTIONS = InputTable("demo.auctions", (Column("id", "bigint"), Column("seller", "bigint")))
PRICES = InputTable(
    "demo.prices",
    (
        Column("item", "bigint"),
        Column("ts", "timestamp"),
        Column("price", "decimal(12,2)"),
        Column("huge", "decimal(30,2)"),
    ),
)
INPUTS = (EVENTS, BIDS, AUCTIONS, PRICES)

LATEST = (
    "select id, status, updated_at from (select *, row_number() over (partition by id "
    "order by updated_at desc) as rn from demo.events) e where rn = 1"
)


def plan(sql, *columns):
    output = [Column(*c.split(" ", 1)) if " " in c else Column(c, "string") for c in columns]
    return plan_step(sql, INPUTS, output)


def parse(sql):
    return sqlglot.parse_one(sql, read="spark")


def windows(sql):
    return list(parse(sql).find_all(exp.Window))


@pytest.mark.parametrize(
    "sql, columns, ranks",
    [
        (LATEST, ("id bigint", "status", "updated_at timestamp"), "row_number"),
        (
            "select id, status from demo.events "
            "qualify row_number() over (partition by id order by updated_at desc) = 1",
            ("id bigint", "status"),
            "row_number",
        ),
        (
            "select auction, price, rank() over (partition by auction order by price desc) as r "
            "from demo.bids qualify r <= 2",
            ("auction bigint", "price bigint", "r int"),
            "rank",
        ),
        (
            "with ranked as (select auction, price, dense_rank() over (partition by auction "
            "order by price) as r from demo.bids) select auction, price from ranked where 3 > r",
            ("auction bigint", "price bigint"),
            "dense_rank",
        ),
        # Nexmark q9: the highest bid of each auction, over a join
        (
            "select * from (select a.id, a.seller, b.price, b.bidder, row_number() over "
            "(partition by a.id order by b.price desc, b.bidder) as rn "
            "from demo.auctions a join demo.bids b on a.id = b.auction) x where x.rn <= 1",
            ("id bigint", "seller bigint", "price bigint", "bidder bigint", "rn int"),
            "row_number",
        ),
        # other windows over the same partition ride along
        (
            "select auction, price, n from (select auction, price, "
            "count(*) over (partition by auction) as n, "
            "rank() over (partition by auction order by price desc) as r from demo.bids) b "
            "where r = 1 and n > 1",
            ("auction bigint", "price bigint", "n bigint"),
            "rank",
        ),
    ],
)
def test_top_k_blocks_take_the_fast_path(sql, columns, ranks):
    step = plan(sql, *columns)
    assert step.kind == "linear", step.reason
    assert step.reason.startswith("fast path: ")
    assert step.reason.endswith(f"top-k per partition ({ranks})")
    # a new top row pushes an old one out: never appended without netting
    assert step.monotonic is False and step.later_monotonic is False


def test_change_reevaluates_the_touched_partitions_new_and_old():
    step = plan(LATEST, "id bigint", "status", "updated_at timestamp")
    top = parse(step.change_sql)
    inner = top.args["from_"].this.this  # the window block's delta, under the rank filter
    assert top.args["where"].this.sql("spark") == "e.rn = 1"
    branches = [inner.this, inner.expression]
    assert [b.expressions[-1].sql("spark") for b in branches] == [
        f"CAST(1 AS BIGINT) AS {WEIGHT}",
        f"CAST(-1 AS BIGINT) AS {WEIGHT}",
    ]
    for branch, version in zip(branches, ("new", "old")):
        assert branch.args["from_"].this.name == f"__streamsql_{version}_0__"
        (restriction,) = branch.args["joins"]
        assert (restriction.side, restriction.kind) == ("LEFT", "SEMI")
        assert restriction.args["on"].sql("spark") == (
            "events.id IS NOT DISTINCT FROM _streamsql_keys_1.k0"
        )
        # the changed partition keys: the keys of the input's change
        keys = restriction.sql("spark")
        assert "SELECT events.id AS k0" in keys and "__streamsql_delta_0__" in keys


def test_partition_keys_bound_the_inputs_files():
    step = plan(LATEST, "id bigint", "status", "updated_at timestamp")
    assert [(b.column, b.operator, b.value) for b in step.bounds] == [
        ("events.id", ">=", "(SELECT MIN(events.id) FROM __streamsql_delta_0__ AS events)"),
        ("events.id", "<=", "(SELECT MAX(events.id) FROM __streamsql_delta_0__ AS events)"),
    ]
    # a NULL key is a partition: kept whatever the range
    assert "OR events.id IS NULL" in step.change_sql


def test_top_k_over_a_join_bounds_both_sides_by_either_change():
    step = plan(
        "select * from (select a.id, b.price, row_number() over (partition by a.id "
        "order by b.price desc) as rn from demo.auctions a join demo.bids b "
        "on a.id = b.auction) x where x.rn = 1",
        "id bigint",
        "price bigint",
        "rn int",
    )
    values = {(b.column, b.operator): b.value for b in step.bounds}
    assert values[("a.id", ">=")] == (
        "LEAST((SELECT MIN(a.id) FROM __streamsql_delta_2__ AS a), "
        "(SELECT MIN(b.auction) FROM __streamsql_delta_1__ AS b))"
    )
    assert ("b.auction", "<=") in values  # the join makes the bids' key the partition key


def test_row_number_ties_are_broken_by_the_other_output_columns():
    window = windows(plan(LATEST, "id bigint", "status", "updated_at timestamp").change_sql)[0]
    order = [o.sql("spark") for o in window.args["order"].expressions]
    assert order[0] == "events.updated_at DESC"
    assert order[1:4] == ["events.id", "events.status", "events.updated_at"]
    # a map cannot be ordered: compared through its JSON text
    assert order[4] == "TO_JSON(STRUCT(events.attrs AS c0))"


def test_rank_needs_no_tie_breaker():
    step = plan(
        "select auction, price from demo.bids "
        "qualify rank() over (partition by auction order by price) = 1",
        "auction bigint",
        "price bigint",
    )
    assert all(len(w.args["order"].expressions) == 1 for w in windows(step.change_sql))


def test_an_aggregate_over_a_top_k_block_reads_its_change():
    step = plan(
        "select status, count(*) as n from (select status, row_number() over "
        "(partition by id order by updated_at desc) as rn from demo.events) e "
        "where e.rn = 1 group by status",
        "status",
        "n bigint",
    )
    assert step.kind == "aggregate"
    assert step.reason == "fast path: group by (count(*)); over top-k per partition (row_number)"
    delta = step.aggregate.delta_sql
    assert "__streamsql_new_0__" in delta and "__streamsql_old_0__" in delta
    assert "LEFT SEMI JOIN" in delta


def plan_named(sql: str):
    """The plan of `sql`, its output columns named as its projections (`*`: an id)."""
    names = [p.alias_or_name for p in parse(sql).expressions]
    return plan(sql, *(n if n != "*" else "id bigint" for n in names))


@pytest.mark.parametrize(
    "sql, reason",
    [
        (
            "select * from (select id, rank() over (order by updated_at) as r from demo.events) e "
            "where r = 1",
            "window function rank() without PARTITION BY",
        ),
        (
            "select * from (select id, rank() over (partition by id order by updated_at) as r, "
            "rank() over (partition by status order by id) as r2 from demo.events) e where r = 1",
            "without a PARTITION BY key in common",
        ),
        (
            "select * from (select auction, count(*) as n, rank() over (partition by auction "
            "order by count(*)) as r from demo.bids group by auction) b where r = 1",
            "over an aggregate in the same SELECT",
        ),
        (
            "select * from (select id, row_number() over (partition by id order by updated_at) "
            "as a, row_number() over (partition by id order by status) as b from demo.events) e "
            "where a = 1",
            "several row_number()",
        ),
        (
            "select * from (select id, rank() over (partition by id order by updated_at) as r "
            "from demo.events) e where r = 1 order by id limit 3",
            "LIMIT",
        ),
        (
            "select id, first_value(status) over (partition by id order by updated_at) as f "
            "from demo.events",
            "window function first_value() over a RANGE frame",
        ),
        (
            "select id, collect_list(status) over (partition by id) as f from demo.events",
            "window function collect_list() is not maintained incrementally",
        ),
    ],
)
def test_other_windows_fall_back_to_recompute(sql, reason):
    step = plan_named(sql)
    assert step.kind == "recompute"
    assert reason in step.reason, step.reason


@pytest.mark.parametrize(
    "sql, reason",
    [
        (
            "select id, row_number() over (partition by id order by updated_at) as rn "
            "from demo.events",
            "fast path: window per partition (row_number) from the change's reach",
        ),
        (
            "select e.id, e.s from (select id, sum(id) over (partition by status "
            "order by updated_at rows between 2 preceding and current row) as s, "
            "rank() over (partition by status order by id) as r from demo.events) e where r = 1",
            "fast path: filter, projection, derived table, top-k per partition (rank)",
        ),
        (
            "select id, lag(id, 2, 0) over (partition by status order by id) as p, "
            "lead(status) over (partition by status order by id) as n, sum(id) over "
            "(partition by status order by updated_at range between interval 1 hour preceding "
            "and current row) as s from demo.events",
            "fast path: window per partition (lag, lead, sum)",
        ),
        (
            "select f.id from (select * from (select id, rank() over (partition by id "
            "order by updated_at) as r from demo.events) e) f where r = 1",
            "fast path: filter, projection, derived table, window per partition (rank) from the "
            "change's reach",
        ),
        (
            "select status, count(*) as n from (select status, ntile(4) over (partition by id "
            "order by updated_at) as q from demo.events) e where e.q = 1 group by status",
            "fast path: group by (count(*)); over window per partition (ntile)",
        ),
    ],
)
def test_windows_per_partition_reevaluate_the_touched_partitions(sql, reason):
    step = plan_named(sql)
    assert step.reason == reason
    change = step.change_sql or step.aggregate.delta_sql
    assert "LEFT SEMI JOIN" in change  # restricted to the partitions the change touches


def test_windows_that_depend_on_tied_rows_order_get_tie_breakers_others_keep_their_peers():
    step = plan(
        "select id, lag(attrs['a']) over (partition by status order by updated_at) as p, "
        "sum(id) over (partition by status order by updated_at) as running, "
        "avg(id) over (partition by status order by updated_at rows 2 preceding) as moving "
        "from demo.events",
        "id bigint",
        "p",
        "running bigint",
        "moving double",
    )
    lag, running, moving = windows(step.change_sql)[:3]
    orders = [[o.sql("spark") for o in w.args["order"].expressions] for w in (lag, running, moving)]
    # the selected id, and what LAG reads (a map: through its JSON text)
    assert orders[0] == [
        "events.updated_at",
        "events.id",
        "TO_JSON(STRUCT(events.attrs AS c0))",
    ]
    assert orders[1] == ["events.updated_at"]  # RANGE frame: peers stay peers
    assert orders[2] == orders[0]


def test_a_window_over_an_aggregate_makes_the_aggregate_a_stage():
    # A projection over an aggregate is the aggregate plan's own output, computed over the
    # changed groups alone; a window there would see only those groups (Nexmark q6 did).
    for sql, construct in (
        (
            "select g.status, g.n, avg(g.n) over (partition by g.status order by g.id) as a "
            "from (select status, id, count(*) as n from demo.events group by status, id) g",
            "window per partition (avg)",
        ),
        (
            "select x.status, x.n from (select status, n, row_number() over (partition by "
            "status order by n) as rn from (select status, id, count(*) as n from demo.events "
            "group by status, id) g) x where x.rn = 1",
            "top-k per partition (row_number)",
        ),
    ):
        step = plan_named(sql)
        assert step.kind == "linear", step.reason
        assert construct in step.reason and step.reason.endswith(
            "over 1 stage (group by (count(*)))"
        )


def test_bounded_range_frames_read_each_touched_partition_from_the_changes_reach_on():
    step = plan_named(
        "select id, sum(id) over (partition by status order by updated_at range between "
        "interval 1 hour preceding and current row) as s, count(*) over (partition by status "
        "order by updated_at range between interval 10 minutes preceding and interval 20 "
        "minutes following) as c from demo.events"
    )
    assert step.reason == "fast path: window per partition (sum, count) from the change's reach"
    change = step.change_sql
    # per touched partition, its lowest changed ORDER BY value (NULLs: each other's frame)
    assert "MIN(_streamsql_lo) AS _streamsql_lo" in change
    assert (
        "AND (events.updated_at >= LEAST(_streamsql_keys_1._streamsql_lo - INTERVAL '1' HOUR, "
        "_streamsql_keys_1._streamsql_lo - INTERVAL '10' MINUTES - INTERVAL '20' MINUTES) OR "
        "events.updated_at IS NULL)"
    ) in change
    # and the change's lowest value minus the frames, a literal Delta skips files by
    reach = [b for b in step.bounds if b.column == "events.updated_at"]
    assert len(reach) == 1 and reach[0].operator == ">=", step.bounds
    assert reach[0].value == (
        "LEAST(((SELECT MIN(events.updated_at) FROM __streamsql_delta_0__ AS events)) - "
        "INTERVAL '1' HOUR, ((SELECT MIN(events.updated_at) FROM __streamsql_delta_0__ AS "
        "events)) - INTERVAL '10' MINUTES - INTERVAL '20' MINUTES)"
    )
    assert f"({reach[0].name} OR events.updated_at IS NULL)" in change


@pytest.mark.parametrize(
    "frame",
    [
        "order by updated_at range between interval 1 hour preceding and unbounded following",
        "order by updated_at rows between unbounded preceding and 1 following",
        "order by updated_at nulls last",  # running, NULLs last
        "order by updated_at nulls last rows between 2 preceding and current row",
        "order by id + 1 rows between 2 preceding and current row",  # no literal bound
        "order by updated_at desc range between interval 1 hour preceding and current row",
    ],
)
def test_other_frames_read_each_touched_partition_whole(frame):
    step = plan_named(
        f"select id, sum(id) over (partition by status {frame}) as s from demo.events"
    )
    assert "LEFT SEMI JOIN" in step.change_sql and "_streamsql_lo" not in step.change_sql


def test_range_frames_short_form_end_at_the_current_row():
    step = plan_named(
        "select id, sum(id) over (partition by status order by updated_at range interval 1 hour "
        "preceding) as s from demo.events"
    )
    assert step.reason == "fast path: window per partition (sum) from the change's reach"
    assert "_streamsql_keys_1._streamsql_lo - INTERVAL '1' HOUR" in step.change_sql


@pytest.mark.parametrize(
    "windows_sql, back",
    [
        ("avg(id) over (partition by status order by updated_at rows 9 preceding)", 9),
        ("lag(id, 2, 0) over (partition by status order by updated_at)", 2),
        ("lead(id) over (partition by status order by updated_at)", 1),
        # the widest FOLLOWING plus the widest PRECEDING, not the widest frame
        (
            "lead(id, 3) over (partition by status order by updated_at), max(id) over "
            "(partition by status order by updated_at rows between 2 preceding and 1 preceding)",
            5,
        ),
        (
            "nth_value(id, 2) over (partition by status order by updated_at, id rows between "
            "current row and 4 following)",
            4,
        ),
        ("count(*) over (partition by status order by updated_at rows current row)", 1),
        (
            "lag(id) over (partition by status order by updated_at), avg(id) over (partition "
            "by status order by updated_at rows 2 preceding)",
            2,
        ),
    ],
)
def test_rows_frames_and_lag_read_from_the_nth_value_below_the_change(windows_sql, back):
    step = plan_named(f"select id, {windows_sql} from demo.events")
    assert step.reason.endswith("from the change's reach"), step.reason
    reach = [b for b in step.bounds if b.column == "events.updated_at"]
    assert len(reach) == 1 and reach[0].operator == ">=" and reach[0].open_when_null
    value = reach[0].value
    # per touched partition: its lowest changed value (NULL when any is NULL: read it whole)
    assert "CASE WHEN COUNT(*) = COUNT(_streamsql_lo) THEN MIN(_streamsql_lo) END" in value
    # the rows below it, at the new version, numbered from the highest down
    assert "FROM __streamsql_new_0__ AS events LEFT SEMI JOIN" in value
    assert "AND events.updated_at < _streamsql_keys_1._streamsql_lo" in value
    assert f"WHERE _streamsql_r <= {back} GROUP BY k0" in value
    assert f"CASE WHEN MAX(_streamsql_r) >= {back} THEN MIN(_streamsql_v) END" in value
    # a partition without N rows below its change, or without a cut, is read whole
    assert value.startswith(
        "(SELECT CASE WHEN COUNT(*) = COUNT(_streamsql_cuts._streamsql_cut) THEN"
    )
    # both evaluations read from the one literal; the semi join itself is on the keys alone
    change = step.change_sql
    assert change.count(f"AND {reach[0].name}") == 2
    assert "_streamsql_lo)" not in change.split("WHERE")[0].split("ON")[-1]


@pytest.mark.parametrize(
    "windows_sql",
    [
        "row_number() over (partition by status order by updated_at)",  # counts from the start
        "lag(id) over (partition by status order by updated_at desc)",
        "lag(id) over (partition by status order by updated_at), lead(id) over (partition by "
        "status, id order by updated_at)",  # not partitioned alike
        "lag(id) over (partition by status order by updated_at), lead(id) over (partition by "
        "status order by id)",  # not ordered alike
        "avg(id) over (partition by status order by updated_at rows between 2 preceding and "
        "unbounded following)",
    ],
)
def test_rows_reach_needs_one_order_one_partition_and_bounded_frames(windows_sql):
    select = parse(f"select id, {windows_sql} from demo.events")
    assert rows_reach(select) is None


def test_rows_reach_applies_to_input_and_cte_columns_not_to_a_stages():
    # a CTE over an input: the bound reaches the input's files through it
    step = plan_named(
        "with e as (select * from demo.events where id > 0) select e.id, lag(e.id) over "
        "(partition by e.status order by e.updated_at) as p from e"
    )
    assert step.reason.endswith("window per partition (lag) from the change's reach")
    assert any(b.open_when_null for b in step.bounds)
    # over an aggregate (a stage, a view over its state: no files to skip), as Nexmark q6
    step = plan_named(
        "select q.g, q.k, avg(q.n) over (partition by q.g order by q.mx, q.k rows between 2 "
        "preceding and current row) as a from (select status as g, id as k, count(*) as n, "
        "max(updated_at) as mx from demo.events group by status, id) q"
    )
    assert "window per partition (avg);" in step.reason, step.reason
    assert not any(b.open_when_null for b in step.bounds)


def test_running_windows_read_the_prefix_as_an_aggregate_and_the_rest_as_windows():
    step = plan_named(
        "select id, sum(id) over (partition by status order by updated_at) as run, count(*) "
        "over (partition by status order by updated_at rows between unbounded preceding and "
        "current row) as n, max(updated_at) over (partition by status order by updated_at) "
        "as mx from demo.events"
    )
    assert step.reason == (
        "fast path: window per partition (sum, count, max) from the change's reach"
    )
    change = step.change_sql
    # each window: its aggregate over the rows below the change, combined with the rest
    assert (
        "(COALESCE(_streamsql_keys_1._streamsql_p0 + SUM(events.id) OVER (PARTITION BY "
        "events.status ORDER BY events.updated_at), _streamsql_keys_1._streamsql_p0, "
        "SUM(events.id) OVER (PARTITION BY events.status ORDER BY events.updated_at))) AS run"
    ) in change
    assert "(COALESCE(_streamsql_keys_1._streamsql_p1, 0) + COUNT(*) OVER" in change
    assert "(GREATEST(_streamsql_keys_1._streamsql_p2, MAX(events.updated_at) OVER" in change
    # the prefix: the rows below each partition's lowest changed value, NULL-ordered ones too,
    # none where that value is NULL (the partition is read whole)
    assert (
        "SUM(_streamsql_x0) AS _streamsql_p0, COUNT(*) AS _streamsql_p1, MAX(_streamsql_x2) AS "
        "_streamsql_p2"
    ) in change
    assert (
        "(NOT _streamsql_keys_1._streamsql_lo IS NULL AND (events.updated_at < "
        "_streamsql_keys_1._streamsql_lo OR events.updated_at IS NULL))"
    ) in change
    # the rest: joined (one row per changed key), from the lowest changed value on
    assert (
        "AS _streamsql_keys_1 ON events.status IS NOT DISTINCT FROM _streamsql_keys_1.k0 AND "
        "(_streamsql_keys_1._streamsql_lo IS NULL OR events.updated_at >= "
        "_streamsql_keys_1._streamsql_lo) WHERE"
    ) in change
    bound = [b for b in step.bounds if b.column == "events.updated_at"]
    assert len(bound) == 1 and bound[0].open_when_null
    assert "__streamsql_new_0__" not in bound[0].value  # from the change alone


@pytest.mark.parametrize(
    "windows_sql, reach",
    [
        ("avg(id) over (partition by status order by updated_at)", False),  # a DOUBLE sum
        ("sum(id) filter (where id > 0) over (partition by status order by updated_at)", False),
        (
            "sum(id) over (partition by status order by updated_at), lag(id) over (partition "
            "by status order by updated_at)",
            False,  # mixed with a ROWS reach
        ),
        ("min(attrs['a']) over (partition by status order by updated_at)", True),
        ("sum(id * 2 + 1) over (partition by status order by updated_at)", True),
        ("sum(cast(id as double)) over (partition by status order by updated_at)", False),
        (  # ranks count the rows (DENSE_RANK: the ORDER BY values) below the change
            "row_number() over (partition by status order by updated_at, id), rank() over "
            "(partition by status order by updated_at), dense_rank() over (partition by status "
            "order by updated_at, id), count(*) over (partition by status order by updated_at)",
            True,
        ),
        (  # descending (NULLs last): the rows before the change have a higher value
            "rank() over (partition by status order by updated_at desc), sum(id) over "
            "(partition by status order by updated_at desc)",
            True,
        ),
        ("rank() over (partition by status order by updated_at desc nulls first)", False),
        (
            "rank() over (partition by status order by updated_at desc), sum(id) over "
            "(partition by status order by updated_at)",
            False,  # two directions
        ),
        ("percent_rank() over (partition by status order by updated_at)", False),  # the total
        ("ntile(4) over (partition by status order by updated_at)", False),
    ],
)
def test_running_reach_takes_count_sum_of_exact_numbers_min_and_max(windows_sql, reach):
    step = plan_named(f"select id, {windows_sql} as w from demo.events")
    assert step.reason.endswith("from the change's reach") == reach, step.reason


@pytest.mark.parametrize(
    "windows_sql, reach",
    [
        (
            "avg(price) over (partition by item order by ts), sum(price) over (partition by item "
            "order by ts)",
            True,
        ),
        ("avg(huge) over (partition by item order by ts)", False),  # sum over 38 digits
        ("avg(cast(price as double)) over (partition by item order by ts)", False),
    ],
)
def test_running_avg_of_a_decimal_reads_from_the_change_on(windows_sql, reach):
    step = plan_named(f"select item, {windows_sql} as w from demo.prices")
    assert step.reason.endswith("from the change's reach") == reach, step.reason


def test_running_windows_over_an_aggregate_read_whole_partitions():
    step = plan_named(
        "select q.g, q.k, sum(q.n) over (partition by q.g order by q.mx) as run from (select "
        "status as g, id as k, count(*) as n, max(updated_at) as mx from demo.events group by "
        "status, id) q"
    )
    assert "window per partition (sum);" in step.reason, step.reason
    assert "_streamsql_p0" not in step.change_sql


def test_ranks_from_the_change_on_add_the_rows_or_values_below_it():
    step = plan_named(
        "select id, rank() over (partition by status order by updated_at) as r, dense_rank() "
        "over (partition by status order by updated_at, id) as d from demo.events"
    )
    sql = step.change_sql
    assert "COUNT(*) AS _streamsql_p0" in sql and "COUNT(DISTINCT _streamsql_x1)" in sql, sql
    assert "NAMED_STRUCT('o0', events.updated_at, 'o1', events.id) AS _streamsql_x1" in sql, sql
    assert "CAST(COALESCE(_streamsql_keys_1._streamsql_p0, 0) + RANK() OVER" in sql, sql


def test_ranks_ordered_descending_read_from_the_highest_change_down_and_the_nulls():
    step = plan_named(
        "select id, rank() over (partition by status order by updated_at desc) as r "
        "from demo.events"
    )
    sql = step.change_sql
    assert "MAX(_streamsql_lo)" in sql and "MIN(_streamsql_lo)" not in sql, sql
    assert "events.updated_at > _streamsql_keys_1._streamsql_lo)" in sql, sql  # before it
    rest = (
        "(_streamsql_keys_1._streamsql_lo IS NULL OR (events.updated_at <= "
        "_streamsql_keys_1._streamsql_lo OR events.updated_at IS NULL))"
    )
    assert rest in sql, sql
    assert "(__streamsql_bound_2__ OR events.updated_at IS NULL)" in sql, sql
    (bound,) = [b for b in step.bounds if b.column == "events.updated_at"]
    assert (bound.operator, bound.open_when_null) == ("<=", True), bound
    assert "THEN MAX(_streamsql_lo) END" in bound.value, bound.value


def test_a_running_avg_of_a_decimal_divides_as_spark_does():
    step = plan_named(
        "select item, avg(price) over (partition by item order by ts) as a from demo.prices"
    )
    sql = step.change_sql
    assert "NAMED_STRUCT('s', SUM(_streamsql_x0), 'c', COUNT(_streamsql_x0))" in sql, sql
    # DECIMAL(12,2): the sum in AVG's sum type over the count as DECIMAL(20,0), in AVG's type
    assert "AS DECIMAL(22, 2))) / CAST((COALESCE(_streamsql_keys_1._streamsql_p0.c, 0)" in sql
    assert "AS DECIMAL(20, 0)) AS DECIMAL(16, 6)) END" in sql, sql


def test_a_top_k_block_ordered_ascending_keeps_its_plan():
    step = plan_named(
        "select id, status from (select id, status, row_number() over (partition by status "
        "order by updated_at, id) as rn from demo.events) q where rn = 1"
    )
    assert step.reason.endswith("top-k per partition (row_number)"), step.reason
    assert "_streamsql_p0" not in step.change_sql
