"""Aggregates below the top of a query: lifted into stages, each an aggregate plan of its own.

Pure Python. Whether stages compute the right rows is checked on Spark by the differential test
(tests/functional/test_differential.py, the `stage_*` models).
"""

from __future__ import annotations

import re

import pytest
import sqlglot
from sqlglot import exp

from dbt.adapters.streamsql.planning.plan import Column, InputTable
from dbt.adapters.streamsql.planning.planner import plan_step

BIDS = InputTable(
    "demo.bids", (Column("auction", "bigint"), Column("price", "bigint"), Column("ts", "timestamp"))
)
AUCTIONS = InputTable(
    "demo.auctions",
    (Column("id", "bigint"), Column("category", "bigint"), Column("ts", "timestamp")),
)
INPUTS = (BIDS, AUCTIONS)
PLACEHOLDER = re.compile(r"__streamsql_(new|old|delta)_(\d+)__")

HIGHEST_BID = """
select b.auction, b.price from demo.bids b
join (select window(ts, '10 seconds').end as window_end, max(price) as top
      from demo.bids group by window(ts, '10 seconds')) w
  on b.price = w.top and b.ts between w.window_end - interval 10 seconds and w.window_end"""
AVERAGE_OF_MAXIMA = """
select q.category, avg(q.final) as avg_final
from (select a.id, a.category, max(b.price) as final
      from demo.auctions a join demo.bids b on a.id = b.auction group by a.id, a.category) q
group by q.category"""
HOT_ITEMS = """
with counts as (select auction, window(ts, '10 seconds').start as ws, count(*) as n
                from demo.bids group by auction, window(ts, '10 seconds')),
     tops as (select ws, max(n) as top from counts group by ws)
select c.auction, c.n, c.ws from counts c join tops t on c.ws = t.ws and c.n >= t.top"""


def plan(sql, *columns, describe=None):
    return plan_step(sql, INPUTS, [Column(*c.split(" ", 1)) for c in columns], describe=describe)


def placeholders(statement):
    return {int(index) for _, index in PLACEHOLDER.findall(statement)}


def stage_sql(stage):
    aggregate = stage.aggregate
    return [aggregate.delta_sql, aggregate.combine_sql, aggregate.output_sql]


@pytest.mark.parametrize(
    "sql, columns, strategy, count",
    [
        (HIGHEST_BID, ("auction bigint", "price bigint"), "linear", 1),
        (AVERAGE_OF_MAXIMA, ("category bigint", "avg_final double"), "aggregate", 1),
        (HOT_ITEMS, ("auction bigint", "n bigint", "ws timestamp"), "linear", 2),
        (
            "select k, n from (select auction as k, count(*) as n from demo.bids "
            "group by auction) c join demo.auctions a on c.k = a.id",
            ("k bigint", "n bigint"),
            "linear",
            1,
        ),
        (
            "select auction from demo.bids union all "
            "select id from demo.auctions group by id having count(*) > 1",
            ("auction bigint",),
            "linear",
            1,
        ),
        (
            "select n, count(*) as groups from (select auction, count(*) as n from demo.bids "
            "group by auction) c group by n",
            ("n bigint", "groups bigint"),
            "aggregate",
            1,
        ),
    ],
)
def test_aggregates_below_the_top_become_stages(sql, columns, strategy, count):
    step = plan(sql, *columns)
    assert step.kind == strategy, step.reason
    assert len(step.stages) == count
    assert step.reason.startswith("fast path: ")
    assert f"over {count} stage" in step.reason


def test_stages_read_only_inputs_and_earlier_stages_and_the_top_reads_them_all():
    step = plan(HOT_ITEMS, "auction bigint", "n bigint", "ws timestamp")
    counts, tops = step.stages
    assert (counts.position, tops.position) == (2, 3)
    assert {i for s in stage_sql(counts) for i in placeholders(s)} == {0}
    assert {i for s in stage_sql(tops) for i in placeholders(s)} == {2}
    assert placeholders(step.change_sql) == {2, 3}
    assert [c.name for c in counts.columns] == ["auction", "ws", "n"]
    assert [c.name for c in tops.columns] == ["ws", "top"]


def test_a_cte_read_twice_is_one_stage():
    step = plan(HOT_ITEMS, "auction bigint", "n bigint", "ws timestamp")
    assert [s.name for s in step.stages] == ["stage0", "stage1"]


def test_stage_columns_take_the_names_of_a_derived_tables_column_list():
    step = plan(
        "select c.key, c.cnt from (select auction, count(*) from demo.bids group by auction) "
        "c(key, cnt) join demo.auctions a on c.key = a.id",
        "key bigint",
        "cnt bigint",
    )
    assert [c.name for c in step.stages[0].columns] == ["key", "cnt"]


def test_the_top_aggregate_and_projections_over_it_are_not_stages():
    step = plan(
        "select room_n from (select auction, count(*) as room_n from demo.bids "
        "group by auction) c where room_n > 1",
        "room_n bigint",
    )
    assert step.kind == "aggregate"
    assert step.stages == ()


def test_describe_gets_a_select_over_new_inputs_and_its_types_reach_the_plan():
    seen = []

    def describe(select):
        seen.append(select)
        tree = sqlglot.parse_one(select, read="spark")
        assert {t.name for t in tree.find_all(exp.Table)} == {
            "__streamsql_new_0__",
            "__streamsql_new_1__",
        }
        return [
            Column("id", "bigint"),
            Column("category", "bigint"),
            Column("final", "decimal(20,0)"),
        ]

    step = plan(AVERAGE_OF_MAXIMA, "category bigint", "avg_final decimal(24,4)", describe=describe)
    assert len(seen) == 1
    assert [c.data_type for c in step.stages[0].columns] == ["bigint", "bigint", "decimal(20,0)"]
    # with the stage's types known, AVG is maintained by adding, not recomputed per group
    assert step.reason.startswith("fast path: group by (avg)")


def test_without_types_an_avg_over_a_stage_is_recomputed_per_group():
    step = plan(AVERAGE_OF_MAXIMA, "category bigint", "avg_final double")
    assert "avg recomputed for changed groups only" in step.reason


def test_a_nested_stage_is_described_with_the_stage_it_reads_put_back():
    seen = []

    def describe(select):
        seen.append(select)
        return (
            [Column("ws", "timestamp"), Column("top", "bigint")]
            if "max" in select.lower()
            else [Column("auction", "bigint"), Column("ws", "timestamp"), Column("n", "bigint")]
        )

    plan(HOT_ITEMS, "auction bigint", "n bigint", "ws timestamp", describe=describe)
    assert len(seen) == 2
    assert all(placeholders(s) == {0} for s in seen)
    assert "count(*)" in seen[1].lower()  # the tops stage, with the counts block inlined


def test_a_stage_that_cannot_be_planned_makes_the_whole_model_recompute():
    step = plan(
        "select c.auction, c.n from (select distinct auction, count(*) as n "
        "from demo.bids group by auction) c join demo.auctions a on c.auction = a.id",
        "auction bigint",
        "n bigint",
    )
    assert step.kind == "recompute"
    assert step.stages == ()
    assert step.reason == "recompute: DISTINCT over an aggregate is not maintained incrementally"


# -- which model columns carry a stage's group columns (stage_lateness.py) ------------------------

COUNTS = (
    "(select auction, window(ts, '10 seconds').start as ws, count(*) as n "
    "from demo.bids group by auction, window(ts, '10 seconds'))"
)


@pytest.mark.parametrize(
    "sql, columns, through",
    [
        (  # an aggregate over the stage, grouped by the column
            f"select ws, count(*) as keys, max(n) as busiest from {COUNTS} c group by ws",
            ["ws timestamp", "keys bigint", "busiest bigint"],
            [(("ws", "ws"),)],
        ),
        (  # renamed on the way, a filter between
            f"select c.ws as window_start, sum(c.n) as total from {COUNTS} c where c.n > 1 "
            "group by c.ws",
            ["window_start timestamp", "total bigint"],
            [(("window_start", "ws"),)],
        ),
        (  # UNION ALL branches, each its own stage
            "select window(ts, '1 hour').start as ws, count(*) as n from demo.bids "
            "group by window(ts, '1 hour') union all select window(ts, '2 hours').start as ws, "
            "count(*) as n from demo.bids group by window(ts, '2 hours')",
            ["ws timestamp", "n bigint"],
            [(("ws", "ws"), ("n", "n")), (("ws", "ws"), ("n", "n"))],
        ),
        (  # the column computed from the stage's: not carried as it is
            f"select ws + interval 1 hour as later, count(*) as keys from {COUNTS} c "
            "group by ws + interval 1 hour",
            ["later timestamp", "keys bigint"],
            [()],
        ),
        (  # a join: the other side's change meets the stage's rows, final ones included
            HIGHEST_BID,
            ["auction bigint", "price bigint"],
            [()],
        ),
        (  # a window over the stage reads its rows before and after the step
            f"select ws, auction, n, sum(n) over (partition by auction order by ws) as run "
            f"from {COUNTS} c",
            ["ws timestamp", "auction bigint", "n bigint", "run bigint"],
            [()],
        ),
        (  # a global top-K over the aggregate reads its rows after the step
            "select auction, count(*) as n from demo.bids group by auction order by n desc limit 3",
            ["auction bigint", "n bigint"],
            [()],
        ),
        (  # the counts stage is read by the tops stage and the top's join
            HOT_ITEMS,
            ["auction bigint", "n bigint", "ws timestamp"],
            [(), ()],
        ),
    ],
)
def test_a_stage_keeps_the_model_columns_that_carry_its_columns(sql, columns, through):
    step = plan(sql, *columns)
    assert [stage.lateness_through for stage in step.stages] == through
