"""IN / EXISTS / NOT IN / NOT EXISTS (planning/subqueries.py): the joins they become, the shape
of their change and what stays on the recompute path. Pure Python; the rows are checked on Spark
in test_planner_semantics.py.
"""

from __future__ import annotations

import pytest
import sqlglot
from sqlglot import exp

from dbt.adapters.streamsql.planning.plan import Column, InputTable
from dbt.adapters.streamsql.planning.planner import plan_step

ORDERS = InputTable(
    "demo.orders",
    (
        Column("id", "bigint"),
        Column("customer", "bigint"),
        Column("amount", "bigint"),
    ),
)
CUSTOMERS = InputTable(
    "demo.customers",
    (
        Column("id", "bigint"),
        Column("region", "string"),
        Column("since", "bigint"),
    ),
)
INPUTS = (ORDERS, CUSTOMERS)

IN_EU = (
    "select id from demo.orders "
    "where customer in (select id from demo.customers where region = 'eu')"
)
NOT_IN = "select id from demo.orders where customer not in (select id from demo.customers)"


def plan(sql, *columns):
    output = [Column(*c.split(" ", 1)) if " " in c else Column(c, "bigint") for c in columns]
    return plan_step(sql, INPUTS, output)


def parse(sql):
    return sqlglot.parse_one(sql, read="spark")


def branches(sql):
    node = parse(sql)
    found = []
    while isinstance(node, exp.Union):
        found.append(node.expression)
        node = node.this
    return [node] + found[::-1]


@pytest.mark.parametrize(
    "sql, construct, kind",
    [
        (IN_EU, "in (subquery)", "SEMI"),
        (
            "select id from demo.orders "
            "where (customer, amount) in (select id, since from demo.customers)",
            "in (subquery)",
            "SEMI",
        ),
        (
            "select id from demo.orders o "
            "where exists (select 1 from demo.customers c where c.id = o.customer)",
            "exists",
            "SEMI",
        ),
        (
            "select id from demo.orders o where not exists (select * from demo.customers c "
            "where c.id = o.customer and c.since > o.amount)",
            "not exists",
            "ANTI",
        ),
        (
            "select id from demo.orders o "
            "where amount in (select since from demo.customers c where c.id = o.customer)",
            "in (subquery)",
            "SEMI",
        ),
        (NOT_IN, "not in (subquery)", "ANTI"),
    ],
)
def test_subquery_conditions_become_semi_and_anti_joins(sql, construct, kind):
    step = plan(sql, "id")
    assert step.kind == "linear", step.reason
    assert construct in step.reason.split(": ", 1)[1].split(", ")
    assert "derived table" not in step.reason  # the planner's own derived table
    assert step.monotonic is False
    for branch in branches(step.change_sql):
        joins = [
            j
            for j in branch.args["joins"]
            if j.this.alias_or_name.startswith("_streamsql_")
            and not j.this.alias_or_name.startswith("_streamsql_keys")
        ]
        assert [(j.side, j.kind) for j in joins] == [("LEFT", kind)]


def test_in_keys_come_from_both_changes_and_bound_both_sides():
    step = plan(IN_EU, "id")
    new, old = branches(step.change_sql)
    keys, semi = new.args["joins"]
    assert keys.args["on"].sql("spark") == (
        "orders.customer IS NOT DISTINCT FROM _streamsql_keys_1.k0"
    )
    assert "__streamsql_delta_0__" in keys.sql("spark")
    assert "__streamsql_delta_1__" in keys.sql("spark")
    # the subquery's rows outside the changed keys' range cannot match: bounded in the ON clause
    assert (
        semi.args["on"]
        .sql("spark")
        .startswith("orders.customer = _streamsql_in0._streamsql_k0 AND ((__streamsql_bound_")
    )
    values = {(b.column, b.operator): b.value for b in step.bounds}
    assert values[("orders.customer", ">=")] == (
        "LEAST((SELECT MIN(orders.customer) FROM __streamsql_delta_0__ AS orders), "
        "(SELECT MIN(customers.id) FROM __streamsql_delta_1__ AS customers))"
    )
    assert ("_streamsql_in0._streamsql_k0", "<=") in values
    assert "__streamsql_old_0__" in old.sql("spark") and "__streamsql_old_1__" in old.sql("spark")


def test_correlation_other_than_equalities_joins_on_the_subquerys_columns():
    step = plan(
        "select id from demo.orders o where not exists (select * from demo.customers c "
        "where c.id = o.customer and c.since > o.amount and c.region = 'eu')",
        "id",
    )
    anti = [j for j in branches(step.change_sql)[0].args["joins"] if j.kind == "ANTI"][0]
    on = anti.args["on"].sql("spark")
    assert "o.customer = _streamsql_notexists0._streamsql_k0" in on
    assert "_streamsql_notexists0._streamsql_k1 > o.amount" in on
    inner = anti.this.this.sql("spark")
    # the subquery's own filter stays inside, the correlation moves out
    assert "c.region = 'eu'" in inner and "o." not in inner


def test_not_in_is_a_null_aware_anti_join_gated_by_the_subquerys_nulls_and_emptiness():
    step = plan(NOT_IN, "id")
    terms = branches(step.change_sql)
    assert len(terms) == 4
    anti = [j for j in terms[0].args["joins"] if j.kind == "ANTI"][0]
    assert anti.args["on"].sql("spark") == (
        "orders.customer = _streamsql_notin0._streamsql_k0 OR "
        "(orders.customer = _streamsql_notin0._streamsql_k0) IS NULL"
    )
    # the changed keys alone while the subquery neither holds a NULL nor empties or fills ...
    by_key = terms[0].args["where"].sql("spark")
    assert "_streamsql_notin0._streamsql_k0 IS NULL LIMIT 1" in by_key
    assert "__streamsql_old_1__" in by_key and "__streamsql_new_1__" in by_key
    assert [t.expressions[-1].this.sql("spark") for t in terms] == [
        "CAST(1 AS BIGINT)",
        "CAST(-1 AS BIGINT)",
        "CAST(1 AS BIGINT)",
        "CAST(-1 AS BIGINT)",
    ]
    assert all(any(j.kind == "SEMI" for j in t.args["joins"]) for t in terms[:2])
    # ... else the whole result, behind a bound that is `false` whenever it is not needed
    (gate,) = [b for b in step.bounds if b.column == "1"]
    assert gate.operator == "<=" and gate.value.startswith("CASE WHEN NOT (")
    for whole in terms[2:]:
        assert not any(j.kind == "SEMI" for j in whole.args["joins"])
        assert gate.name in whole.args["where"].sql("spark")
    # NOT IN reads all of the subquery: no bound on it
    assert not any(b.column.startswith("_streamsql_notin0") for b in step.bounds)


def test_aggregate_subquery_becomes_a_stage():
    step = plan(
        "select id from demo.orders where customer in "
        "(select customer from demo.orders group by customer having count(*) > 2)",
        "id",
    )
    assert step.kind == "linear"
    assert step.reason == (
        "fast path: projection, in (subquery); over 1 stage (group by (count(*)))"
    )


def test_an_aggregate_with_a_subquery_condition_names_it():
    step = plan(
        "select customer, sum(amount) as total from demo.orders o where exists "
        "(select 1 from demo.customers c where c.id = o.customer) group by customer",
        "customer",
        "total",
    )
    assert step.kind == "aggregate"
    assert step.reason == "fast path: group by (sum); over exists"


@pytest.mark.parametrize(
    "sql, reason",
    [
        (
            "select id from demo.orders "
            "where (customer, amount) not in (select id, since from demo.customers)",
            "NOT IN (subquery) over several columns",
        ),
        (
            "select id from demo.orders o "
            "where amount not in (select since from demo.customers c where c.id = o.customer)",
            "correlated NOT IN",
        ),
        (
            "select id from demo.orders where exists (select 1 from demo.customers "
            "where region = 'eu')",
            "EXISTS without an equality correlating it",
        ),
        (
            "select id from demo.orders o "
            "where exists (select 1 from demo.customers c where c.since > o.amount)",
            "EXISTS without an equality correlating it",
        ),
        (
            "select id from demo.orders o where exists (select count(*) from demo.customers c "
            "where c.id = o.customer group by c.region)",
            "correlated EXISTS with an aggregate",
        ),
        (
            "select id from demo.orders o where exists (select o.amount from demo.customers c "
            "join demo.orders p on p.amount = o.amount where c.id = o.customer)",
            "outside its WHERE conditions",
        ),
        (
            "select id from demo.orders "
            "where customer in (select id from demo.customers) or amount > 1",
            "IN (subquery) other than a condition ANDed into a WHERE clause",
        ),
        (
            "select id, exists (select 1 from demo.customers c where c.id = o.customer) as known "
            "from demo.orders o",
            "EXISTS other than a condition ANDed into a WHERE clause",
        ),
        (
            "select id from demo.orders "
            "where not (customer in (select id from demo.customers) and amount > 1)",
            "IN (subquery) other than",
        ),
    ],
)
def test_other_subqueries_fall_back_to_recompute(sql, reason):
    names = [p.alias_or_name for p in parse(sql).expressions]
    step = plan(sql, *names)
    assert step.kind == "recompute"
    assert reason in step.reason, step.reason
