"""docs/steps.md's guarantee on random histories: after every step, every incremental view
equals its SELECT.

A seeded generator changes three source Delta tables step after step (inserts, deletes, updates,
exact duplicate rows, NULL keys and values, rows inserted and deleted within one step, updates of
join and group keys). Each step is one `dbt run` of one project holding a model for every
fast-path construct of docs/sql-support.md (top-K per partition, IN / EXISTS / NOT IN / NOT EXISTS
subqueries, FULL and RIGHT joins, INTERSECT and EXCEPT, scalar subqueries, ROLLUP, CUBE and
GROUPING SETS included), aggregates below joins and other aggregates (stages), plus a few that
must fall back to recompute. After each step every model's table is compared, as a multiset,
with its compiled SELECT evaluated from scratch, and the plan each model reports in its adapter
response is checked, so a silent fallback to recompute fails the test too.

    STREAMSQL_DIFF_SEED=7 STREAMSQL_DIFF_STEPS=50 pytest tests/functional/test_differential.py
"""

from __future__ import annotations

import datetime
import os
import random
import time
from decimal import Decimal
from typing import Dict, List, Optional, Sequence

import pytest
from dbt.tests.util import run_dbt

from tests.differential import (
    as_bag,
    bag_diff,
    differing,
    model_columns,
    sql_literal,
    values_clause,
)

SEED = int(os.environ.get("STREAMSQL_DIFF_SEED", "20240101"))
# CI runs 5 steps (a step of every model costs about a minute here, most of it per statement,
# not per row, so a step's batch is a few more changes instead); run longer histories locally.
STEPS = int(os.environ.get("STREAMSQL_DIFF_STEPS", "5"))

SOURCES_YML = """
version: 2
sources:
  - name: raw
    schema: "{{ target.schema }}"
    tables:
      - name: facts
      - name: dims
      - name: extra
"""

IV = "{{ config(materialized='incremental_view') }}\n"
# Every other model MERGEs at every size, the rest are written whole when a step removes rows
# (all are small): both ways of writing a model checked on every kind of plan.
MERGED_IV = "{{ config(materialized='incremental_view', rewrite_when_small=false) }}\n"
FACTS = "{{ source('raw', 'facts') }}"
DIMS = "{{ source('raw', 'dims') }}"
EXTRA = "{{ source('raw', 'extra') }}"

# model name -> (SQL, the plan it must use)
MODELS: Dict[str, tuple] = {
    # -- linear ------------------------------------------------------------------------------------
    "lin_project_filter": (
        f"select rid, k, g, v * 2 as v2, n + 1 as n1 from {FACTS} where n > 3 or n is null",
        "linear",
    ),
    "lin_union_all": (
        f"select rid, k, v from {FACTS} where k is not null "
        f"union all select rid, k, v from {EXTRA}",
        "linear",
    ),
    "lin_inner_join": (
        f"select f.rid, f.k, f.v, d.w, d.label from {FACTS} f join {DIMS} d on f.k = d.k",
        "linear",
    ),
    "lin_left_join": (
        f"select f.rid, f.k, f.g, d.w, d.label from {FACTS} f left join {DIMS} d on f.k = d.k",
        "linear",
    ),
    "lin_chain": (
        "select rid, k, v2 from {{ ref('lin_project_filter') }} where k >= 1 or g = 'b'",
        "linear",
    ),
    # -- aggregates --------------------------------------------------------------------------------
    "agg_basic": (
        f"select k, count(*) as n_rows, count(v) as n_v, sum(v) as sum_v, min(v) as min_v, "
        f"max(v) as max_v, min(g) as min_g, max(ts) as max_ts from {FACTS} group by k",
        "aggregate",
    ),
    "agg_avg": (
        f"select g, avg(v) as avg_v, avg(n) as avg_n, sum(n) as sum_n, count(n) as count_n "
        f"from {FACTS} group by g",
        "aggregate",
    ),
    "agg_count_distinct": (
        f"select k, count(distinct g) as distinct_g, count(distinct n) as distinct_n, "
        f"count(*) as c from {FACTS} group by k",
        "aggregate",
    ),
    "agg_having": (
        f"select g, k, sum(v) as sum_v, count(*) as c from {FACTS} group by g, k "
        f"having count(*) > 1 and sum(n) > 0",
        "aggregate",
    ),
    "agg_distinct": (f"select distinct k, g from {FACTS}", "aggregate"),
    "agg_union_distinct": (f"select k from {FACTS} union select k from {DIMS}", "aggregate"),
    "agg_tumbling": (
        f"select window(ts, '1 hour').start as window_start, count(*) as c, sum(v) as sum_v, "
        f"max(n) as max_n from {FACTS} group by window(ts, '1 hour')",
        "aggregate",
    ),
    "agg_hopping": (
        f"select g, window(ts, '1 hour', '30 minutes').start as window_start, "
        f"window(ts, '1 hour', '30 minutes').end as window_end, count(*) as c, min(v) as min_v "
        f"from {FACTS} group by g, window(ts, '1 hour', '30 minutes')",
        "aggregate",
    ),
    "agg_date_trunc": (
        f"select date_trunc('hour', ts) as hour, g, count(*) as c, min(n) as min_n "
        f"from {FACTS} group by date_trunc('hour', ts), g",
        "aggregate",
    ),
    "agg_floor_bucket": (
        f"select floor(n / 10) as bucket, count(*) as c, sum(v) as sum_v from {FACTS} "
        f"group by floor(n / 10)",
        "aggregate",
    ),
    "agg_global": (
        f"select count(*) as c, count(n) as count_n, sum(v) as sum_v, min(ts) as first_ts, "
        f"max(v) as max_v, avg(v) as avg_v from {FACTS}",
        "aggregate",
    ),
    "agg_over_join": (
        f"select d.label, count(*) as c, sum(f.v) as sum_v, max(f.n) as max_n "
        f"from {FACTS} f join {DIMS} d on f.k = d.k group by d.label",
        "aggregate",
    ),
    "agg_over_left_join": (
        f"select f.g, count(d.w) as matched, count(*) as c, max(d.w) as max_w, "
        f"sum(d.w) as sum_w from {FACTS} f left join {DIMS} d on f.k = d.k group by f.g",
        "aggregate",
    ),
    "agg_chain_of_linear": (
        "select k, count(*) as c, sum(v) as sum_v from {{ ref('lin_union_all') }} group by k",
        "aggregate",
    ),
    "agg_chain_of_aggregate": (
        "select n_rows, count(*) as groups, sum(sum_v) as sum_v "
        "from {{ ref('agg_basic') }} group by n_rows",
        "aggregate",
    ),
    "lin_chain_of_aggregate": (
        "select k, n_rows, max_v from {{ ref('agg_basic') }} where n_rows > 1",
        "linear",
    ),
    # -- top-K per partition, IN / EXISTS / NOT IN / NOT EXISTS, FULL and RIGHT joins ------------
    # (ROW_NUMBER's ORDER BY leaves only exact duplicates tied: ties are Spark's own choice)
    "lin_latest_per_key": (
        f"select rid, k, g, v, ts from (select *, row_number() over (partition by k "
        f"order by ts desc, rid desc, v, n, g) as rn from {FACTS}) latest where rn = 1",
        "linear",
    ),
    "lin_top2_rank_join": (
        f"select f.rid, f.k, d.w, rank() over (partition by f.k order by d.w desc) as r "
        f"from {FACTS} f join {DIMS} d on f.k = d.k qualify r <= 2",
        "linear",
    ),
    "agg_over_top_k": (
        f"select g, count(*) as c, sum(v) as sum_v from (select g, v, row_number() over "
        f"(partition by rid order by ts desc, k, g, v, n) as rn from {FACTS}) x where rn = 1 "
        f"group by g",
        "aggregate",
    ),
    "lin_in_subquery": (
        f"select rid, k from {FACTS} where k in (select k from {DIMS} where w > 2)",
        "linear",
    ),
    "lin_exists": (
        f"select f.rid, f.k, f.n from {FACTS} f "
        f"where exists (select 1 from {DIMS} d where d.k = f.k and d.w >= 2)",
        "linear",
    ),
    "lin_not_exists": (
        f"select f.rid, f.k, f.g from {FACTS} f "
        f"where not exists (select 1 from {EXTRA} e where e.k = f.k and e.v > f.v)",
        "linear",
    ),
    "lin_not_in": (
        f"select rid, k from {FACTS} where k not in (select k from {DIMS} where w > 1)",
        "linear",
    ),
    "lin_full_join": (
        f"select f.rid, f.k, d.rid as drid, d.k as dk, d.w from {FACTS} f "
        f"full outer join {DIMS} d on f.k = d.k",
        "linear",
    ),
    "lin_right_join": (
        f"select f.rid, f.g, e.rid as erid, e.k from {FACTS} f "
        f"right join {EXTRA} e on f.k = e.k and f.n > 0",
        "linear",
    ),
    # -- aggregates below the top (stages) ------------------------------------------------------
    "stage_join_of_aggregate": (
        f"select f.rid, f.k, a.n_rows, a.max_v from {FACTS} f "
        f"join (select k, count(*) as n_rows, max(v) as max_v from {FACTS} group by k) a "
        f"on f.k = a.k",
        "linear",
    ),
    "stage_aggregate_of_aggregate": (
        f"select n_rows, count(*) as groups, max(max_v) as top, min(min_n) as low "
        f"from (select k, count(*) as n_rows, max(v) as max_v, min(n) as min_n from {FACTS} "
        f"group by k) a group by n_rows",
        "aggregate",
    ),
    "stage_top_per_window": (
        f"select f.rid, f.k, f.v, f.ts from {FACTS} f join (select window(ts, '1 hour').end "
        f"as window_end, max(v) as top from {FACTS} group by window(ts, '1 hour')) m "
        f"on f.v = m.top and f.ts between m.window_end - interval 1 hour and m.window_end",
        "linear",
    ),
    "stage_union_branch": (
        f"select k, w as n from {DIMS} union all select k, count(*) as n from {EXTRA} group by k",
        "linear",
    ),
    "stage_cte_read_twice": (
        f"with c as (select k, g, count(*) as n from {FACTS} group by k, g), "
        f"t as (select k, max(n) as top from c group by k) "
        f"select c.k, c.g, c.n from c join t on c.k <=> t.k and c.n >= t.top",
        "linear",
    ),
    # -- INTERSECT / EXCEPT: counts of each side's rows (NULLs equal, types widened) -------------
    "agg_except_of_intersect": (  # the nested INTERSECT a stage
        f"select k, n from {FACTS} except "
        f"(select k, w from {DIMS} intersect select k, cast(v as int) from {EXTRA})",
        "aggregate",
    ),
    "lin_intersect_except_all": (
        f"select k, v from (select k, v from {FACTS} intersect all select k, v from {EXTRA}) a "
        f"union all select k, cast(null as decimal(10,2)) as v from "
        f"(select k from {FACTS} except all select k from {DIMS}) b",
        "linear",
    ),
    # -- scalar subqueries: a one-row stage CROSS JOINed, or a grouped one LEFT JOINed -----------
    "lin_scalar": (
        f"select rid, k, v - (select max(v) from {FACTS}) as below_top from {FACTS} "
        f"where v > (select avg(v) from {EXTRA})",
        "linear",
    ),
    "lin_scalar_correlated": (  # COUNT over no rows is 0, not NULL
        f"select d.rid, d.k, (select count(*) from {FACTS} f where f.k <=> d.k and f.n > 0) "
        f"as n_facts from {DIMS} d where d.w > (select avg(e.v) from {EXTRA} e where e.k = d.k)",
        "linear",
    ),
    "agg_scalar_where": (
        f"select g, count(*) as c, sum(v) as sum_v from {FACTS} "
        f"where n >= (select min(w) from {DIMS}) group by g",
        "aggregate",
    ),
    # -- ROLLUP / CUBE / GROUPING SETS: a stage per grouping set, stacked ------------------------
    "lin_rollup": (
        f"select k, g, n, count(*) as c, sum(v) as sum_v, grouping_id() as gid "
        f"from {FACTS} group by k, rollup(g, n)",
        "linear",
    ),
    "lin_cube": (
        f"select g, date_trunc('hour', ts) as h, max(n) as max_n, grouping(g) as gg "
        f"from {FACTS} group by cube(g, date_trunc('hour', ts)) having count(*) > 1",
        "linear",
    ),
    # -- windows per partition without a rank filter (ORDER BYs that leave only rows tied whose
    # outputs are equal, so that the query itself is deterministic) ----------------------------
    "lin_windows": (
        f"select rid, g, n, sum(v) over (partition by g order by ts) as run, "
        f"avg(n) over (partition by g order by ts, rid, n rows between 2 preceding and "
        f"current row) as m, lag(n) over (partition by g order by ts, rid, n) as prev_n, "
        f"lead(ts) over (partition by g order by ts, rid, n) as next_ts, "
        f"row_number() over (partition by g order by rid, v, n, ts, k) as rn from {FACTS}",
        "linear",
    ),
    "lin_range_frames": (  # bounded RANGE frames: partitions read from the change's reach on
        f"select rid, g, ts, avg(v) over (partition by g order by ts range between interval 2 "
        f"hours preceding and current row) as a, count(*) over (partition by g order by ts "
        f"range between interval 60 minutes preceding and interval 30 minutes following) as c "
        f"from {FACTS}",
        "linear",
    ),
    "lin_rows_frames": (  # ROWS frames, LAG, LEAD: read from the Nth ts below the change
        f"select rid, g, ts, n, avg(v) over (partition by g order by ts, rid, n, v rows between "
        f"2 preceding and 1 following) as a, lag(n, 2) over (partition by g order by ts, rid, n, "
        f"v) as lag2, lead(v, 1, -1) over (partition by g order by ts, rid, n, v) as next_v, "
        f"count(*) over (partition by g order by ts, rid, n, v rows between current row and 3 "
        f"following) as c from {FACTS}",
        "linear",
    ),
    "lin_running": (  # running COUNT/SUM/AVG/MIN/MAX, ranks: the rows before the change summed
        f"select rid, g, ts, sum(n) over (partition by g order by ts) as run_n, sum(v) over "
        f"(partition by g order by ts) as run_v, count(*) over (partition by g order by ts, rid, "
        f"n, v rows between unbounded preceding and current row) as c, max(v) over (partition by "
        f"g order by ts) as mx, min(k) over (partition by g order by ts) as mn, rank() over "
        f"(partition by g order by ts) as r, dense_rank() over (partition by g order by ts, n) "
        f"as dr, avg(v) over (partition by g order by ts) as av from {FACTS}",
        "linear",
    ),
    "lin_running_desc": (  # descending: the rows after the change's highest n aggregated
        f"select rid, g, n, rank() over (partition by g order by n desc) as r, row_number() "
        f"over (partition by g order by n desc, rid, ts, v, k) as rn, sum(v) over (partition by "
        f"g order by n desc) as s, min(ts) over (partition by g order by n desc) as first_ts "
        f"from {FACTS}",
        "linear",
    ),
    "lin_window_over_aggregate": (  # the aggregate a stage, not the top (as Nexmark q6)
        f"select q.g, q.k, avg(q.n) over (partition by q.g order by q.mx, q.k rows between 2 "
        f"preceding and current row) as a from (select g, k, count(*) as n, max(rid) as mx "
        f"from {FACTS} group by g, k) q",
        "linear",
    ),
    # -- ORDER BY ... LIMIT at the top (a global top-K, kept from the model's rows) --------------
    "lin_global_top_k": (
        f"select rid, v from {FACTS} where v is not null order by v desc, rid limit 5",
        "linear",
    ),
    "lin_global_top_k_of_aggregate": (  # the aggregate a stage; updates move groups
        f"select g, count(*) as n, sum(v) as s from {FACTS} group by g order by n desc, g limit 2",
        "linear",
    ),
    "lin_global_top_k_union": (  # by position, over a UNION ALL of two inputs
        f"select rid, k from {FACTS} where k is not null union all "
        f"select rid, k from {EXTRA} order by 2 desc, 1 limit 4",
        "linear",
    ),
    "lin_global_top_k_of_join": (  # the gate computed over a change with key bounds
        f"select f.rid, f.k, d.w from {FACTS} f join {DIMS} d on f.k = d.k "
        f"order by d.w desc, f.rid, f.k limit 3",
        "linear",
    ),
    # -- recompute ---------------------------------------------------------------------------------
    "re_limit_offset": (
        f"select rid, v from {FACTS} where v is not null order by v desc, rid limit 5 offset 2",
        "recompute",
    ),
}

MERGED = set(list(MODELS)[::2])

BASE_TIME = datetime.datetime(2024, 1, 1, 0, 0)


# -- the random history ---------------------------------------------------------------------------


class History:
    """Random DML on the three sources; row ids are reused on purpose (duplicates)."""

    def __init__(self, seed: int, schema: str) -> None:
        self.rng = random.Random(seed)
        self.schema = schema
        self.next_rid = 1
        self.rids: Dict[str, List[int]] = {"facts": [], "dims": [], "extra": []}

    # values: few distinct keys, so joins and groups collide; NULL everywhere a value may be NULL
    def key(self) -> Optional[int]:
        return self.rng.choice([0, 1, 2, 3, 4, None])

    def facts_row(self, rid: int) -> tuple:
        rng = self.rng
        return (
            rid,
            self.key(),
            rng.choice(["a", "b", "c", None]),
            rng.choice([Decimal(rng.randint(-999, 999)) / 100, Decimal("1.25"), None]),
            rng.choice([rng.randint(-20, 40), None]),
            rng.choice([BASE_TIME + datetime.timedelta(minutes=rng.randint(0, 300)), None]),
        )

    def dims_row(self, rid: int) -> tuple:
        rng = self.rng
        return (rid, self.key(), rng.choice([1, 2, 3, 4, None]), rng.choice(["x", "y", None]))

    def extra_row(self, rid: int) -> tuple:
        rng = self.rng
        return (rid, self.key(), rng.choice([Decimal(rng.randint(0, 500)) / 100, None]))

    def new_rid(self) -> int:
        self.next_rid += 1
        return self.next_rid

    def table(self, name: str) -> str:
        return f"{self.schema}.{name}"

    def insert(self, name: str, count: int) -> List[str]:
        make = getattr(self, f"{name}_row")
        rows = []
        for _ in range(count):
            rid = self.new_rid()
            row = make(rid)
            rows.append(row)
            self.rids[name].append(rid)
            if self.rng.random() < 0.2:
                rows.append(row)  # an exact duplicate row in the same insert
        return [f"insert into {self.table(name)} values {values_clause(rows)}"]

    def some_rids(self, name: str, most: int) -> List[int]:
        known = self.rids[name]
        return self.rng.sample(known, min(len(known), self.rng.randint(1, most))) if known else []

    def rid_list(self, rids: Sequence[int]) -> str:
        return ", ".join(str(r) for r in rids)

    def mutation(self, name: str) -> List[str]:
        """One random statement (or a pair) on one table."""
        rng, table = self.rng, self.table(name)
        kind = rng.choice(
            [
                "insert",
                "insert",
                "delete",
                "update_key",
                "update_value",
                "duplicate",
                "insert_then_delete",
                "delete_where",
            ]
        )
        rids = self.some_rids(name, 3)
        if kind == "insert" or not rids:
            return self.insert(name, rng.randint(1, 5))
        where = f"rid in ({self.rid_list(rids)})"
        if kind == "delete":
            return [f"delete from {table} where {where}"]
        if kind == "delete_where":
            return [
                f"delete from {table} where k <=> {sql_literal(self.key())} "
                f"and rid % 3 = {rng.randint(0, 2)}"
            ]
        if kind == "duplicate":
            return [f"insert into {table} select * from {table} where {where}"]
        if kind == "insert_then_delete":
            rid = self.new_rid()
            make = getattr(self, f"{name}_row")
            return [
                f"insert into {table} values {values_clause([make(rid), make(rid)])}",
                f"delete from {table} where rid = {rid}",
            ]
        if kind == "update_key":  # join key of facts/dims/extra; group key of the aggregates
            return [f"update {table} set k = {sql_literal(self.key())} where {where}"]
        if name == "facts":
            column, value = rng.choice(
                [
                    ("g", sql_literal(rng.choice(["a", "b", "c", None]))),
                    ("v", sql_literal(rng.choice([Decimal(rng.randint(-999, 999)) / 100, None]))),
                    ("n", sql_literal(rng.choice([rng.randint(-20, 40), None]))),
                    ("ts", "ts + interval 47 minutes"),
                ]
            )
        elif name == "dims":
            column, value = rng.choice(
                [
                    ("w", sql_literal(rng.choice([1, 2, 3, 4, None]))),
                    ("label", sql_literal(rng.choice(["x", "y", None]))),
                ]
            )
        else:
            column, value = "v", sql_literal(rng.choice([Decimal(rng.randint(0, 500)) / 100, None]))
        return [f"update {table} set {column} = {value} where {where}"]

    def batch(self) -> List[str]:
        statements: List[str] = []
        for _ in range(self.rng.randint(3, 7)):
            name = self.rng.choice(["facts", "facts", "dims", "extra"])
            statements += self.mutation(name)
        return statements


# Over Spark Connect (TestDifferentialOverConnect): a model of each kind of plan, chains included.
CONNECT_MODELS = [
    "lin_project_filter",
    "lin_chain",
    "lin_left_join",
    "lin_latest_per_key",
    "agg_basic",
    "agg_count_distinct",
    "agg_chain_of_aggregate",
    "stage_join_of_aggregate",
    "lin_global_top_k_of_aggregate",
    "re_limit_offset",
]


class TestDifferential:
    names = list(MODELS)  # the models stepped, compared and checked
    steps = STEPS
    over_connect = False

    @pytest.fixture(scope="class")
    def dbt_profile_target(self, dbt_profile_target):
        # Models run on 4 dbt threads, as users would run them: a step is mostly short Spark
        # statements, so steps of independent models overlap well even on 2 cores.
        return {**dbt_profile_target, "threads": 4}

    @pytest.fixture(scope="class")
    def models(self):
        files = {
            f"{name}.sql": (MERGED_IV if name in MERGED else IV) + MODELS[name][0]
            for name in self.names
        }
        files["sources.yml"] = SOURCES_YML
        return files

    @pytest.fixture(scope="class")
    def sources(self, project):
        schema = project.test_schema
        project.run_sql(
            f"create table {schema}.facts (rid int, k int, g string, "
            "v decimal(10,2), n int, ts timestamp)"
        )
        project.run_sql(f"create table {schema}.dims (rid int, k int, w int, label string)")
        project.run_sql(f"create table {schema}.extra (rid int, k int, v decimal(10,2))")
        return schema

    def test_the_check_tells_equal_results_from_different_ones(self, project):
        """`differing`, which picks the models to compare row by row, on real Spark: order,
        NULLs, -0.0 and decimal scales do not make results differ; a missing duplicate, an
        extra row or a changed value (also a NULL for a value) does."""
        rows = (
            "(1, CAST(NULL AS STRING), 0.0D, 1.10BD), (1, NULL, 0.0D, 1.10BD), (2, 'a', 1.5D, 2BD)"
        )

        def relation(values: str) -> str:
            return f"(select * from values {values} as t(x, y, f, d)) r"

        def select(values: str) -> str:
            return f"select * from values {values} as t(x, y, f, d)"

        columns = ["x", "y", "f", "d"]
        checks = [
            ("same", columns, relation(rows), select(rows)),
            (
                "same_in_another_form",
                columns,
                relation(rows),
                "select * from values (2, 'a', 1.5D, 2.00BD), (1, NULL, -0.0D, 1.1BD), "
                "(1, NULL, 0.0D, 1.1BD) as t(x, y, f, d)",
            ),
            (
                "a_duplicate_missing",
                columns,
                relation(rows),
                select("(1, CAST(NULL AS STRING), 0.0D, 1.10BD), (2, 'a', 1.5D, 2BD)"),
            ),
            ("a_row_extra", columns, relation(rows + ", (3, 'b', 0D, 0BD)"), select(rows)),
            ("a_value_changed", columns, relation(rows), select(rows.replace("'a'", "'b'"))),
            ("a_value_now_null", columns, relation(rows), select(rows.replace("1.5D", "NULL"))),
        ]
        assert sorted(differing(project, checks)) == [
            "a_duplicate_missing",
            "a_row_extra",
            "a_value_changed",
            "a_value_now_null",
        ]

    @pytest.mark.timeout(3600)  # 5 steps of many models: minutes, more on a loaded machine
    def test_every_model_equals_its_query_after_every_step(self, project, sources):
        history = History(SEED, sources)
        # a first batch so that step 1 starts from non-empty inputs
        for name, count in (("facts", 12), ("dims", 5), ("extra", 4)):
            for statement in history.insert(name, count):
                project.run_sql(statement)

        compiled: Dict[str, str] = {}
        columns_of: Dict[str, List[str]] = {}
        previous_step: Dict[str, int] = {}
        for step in range(1, self.steps + 1):
            applied: List[str] = []
            if step > 1:
                applied = history.batch()
                for statement in applied:
                    project.run_sql(statement)
            started = time.monotonic()
            results = run_dbt(["run"])
            ran = time.monotonic() - started
            context = f"seed {SEED}, step {step}, this step's changes: {applied}"
            assert len(results) == len(self.names), context
            for result in results:
                name = result.node.name
                response = result.adapter_response
                _, intended = MODELS[name]
                assert response.get("plan") == intended, (
                    f"{name}: expected plan {intended!r}, got {response.get('plan')!r} "
                    f"({response.get('reason')}); {context}"
                )
                # and the step computed its change with that plan (not a recompute instead)
                assert response.get("computed") in (intended, ""), (name, response)
                if name.startswith("stage_"):
                    assert "stage" in response.get("reason", ""), (name, response)
                # exactly one step per run (or none when the inputs did not change)
                assert response["step"] in (
                    previous_step.get(name, 0),
                    previous_step.get(name, 0) + 1,
                ), (name, response)
                if step == 1:
                    assert response["step"] == 1, (name, response)
                previous_step[name] = response["step"]
                # a step that removes rows writes a small model whole, unless configured not to
                # (over Spark Connect the size is not known for free: always a MERGE)
                if response.get("deleted"):
                    rewrites = name not in MERGED and not self.over_connect
                    assert response.get("write") == ("rewrite" if rewrites else ""), (
                        name,
                        response,
                    )
                compiled.setdefault(name, result.node.compiled_code)

            checks = []
            for name in self.names:
                relation = f"{sources}.{name}"
                if name not in columns_of:  # a model's columns do not change between steps
                    columns_of[name] = [f"`{c}`" for c in model_columns(project, relation)]
                checks.append(
                    (name, columns_of[name], relation, compiled[name].strip().rstrip(";"))
                )
            # one query finds the models whose rows differ from their query's at all; those are
            # compared as before (floats rounded), and must be equal that way
            suspects = set(differing(project, checks))
            for name, names, relation, body in checks:
                if name not in suspects:
                    continue
                columns = ", ".join(names)
                actual = as_bag(project.run_sql(f"select {columns} from {relation}", fetch="all"))
                expected = as_bag(project.run_sql(f"select {columns} from ({body}) q", fetch="all"))
                assert actual == expected, (
                    f"model {name} differs from its query after step {step} "
                    f"(plan {MODELS[name][1]}):\n{bag_diff(name, expected, actual)}\n{context}\n"
                    f"SQL: {body}"
                )
            # visible with -s: where a step's time goes
            print(
                f"step {step}: dbt run {ran:.1f} s, checks {time.monotonic() - started - ran:.1f} s"
            )


class TestDifferentialOverConnect(TestDifferential):
    """A model of each kind of plan, stepped through a Spark Connect server (`method:
    connect`) over the same random history, fewer steps."""

    names = CONNECT_MODELS
    over_connect = True
    steps = min(STEPS, 2)  # a first step and one over a batch with every kind of change

    @pytest.fixture(scope="class")
    def dbt_profile_target(self, connect_server):
        return {**connect_server, "threads": 4}
