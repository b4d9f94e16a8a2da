"""Key bounds: what the planner derives from join conditions (planning/bounds.py), and how the
executor turns them into literal predicates (execution/commit/bounds.py), without Spark."""

import sqlglot
from sqlglot import exp

from dbt.adapters.streamsql.execution.commit.bounds import (
    bind_bounds,
    change_measures,
    range_measures,
    ranges_from,
)
from dbt.adapters.streamsql.execution.context import StepContext
from dbt.adapters.streamsql.execution.shared.model import ModelSettings
from dbt.adapters.streamsql.planning.bounds import (
    AT_LEAST,
    AT_MOST,
    conjuncts,
    extreme_of,
    range_facts,
)
from dbt.adapters.streamsql.planning.plan import Column, KeyBound
from tests.unit.fake_sql_session import FakeSqlSession


def condition(text: str) -> exp.Expression:
    query = sqlglot.parse_one(f"SELECT 1 FROM r JOIN c ON {text}", read="spark")
    return query.find(exp.Join).args["on"]


def facts(text: str):
    return [
        (column.sql(), side, expression.sql())
        for part in conjuncts(condition(text))
        for column, side, expression in range_facts(part, "r", "c")
    ]


def test_conjuncts_flatten_and_and_parentheses():
    parts = conjuncts(condition("(r.a = c.a AND r.b > 1) AND (c.x < 2)"))
    assert [p.sql() for p in parts] == ["r.a = c.a", "r.b > 1", "c.x < 2"]
    assert conjuncts(None) == []


def test_an_equality_bounds_both_ways_and_a_comparison_one_way():
    assert facts("r.id = c.seller") == [
        ("r.id", AT_LEAST, "c.seller"),
        ("r.id", AT_MOST, "c.seller"),
    ]
    assert facts("c.ts > r.ts") == [("r.ts", AT_MOST, "c.ts")]
    assert facts("r.ts >= c.start") == [("r.ts", AT_LEAST, "c.start")]


def test_between_gives_a_lower_and_an_upper_bound():
    assert facts("r.ts BETWEEN c.start AND c.start + INTERVAL 1 HOUR") == [
        ("r.ts", AT_LEAST, "c.start"),
        ("r.ts", AT_MOST, "c.start + INTERVAL '1' HOUR"),
    ]


def test_no_bound_from_expressions_over_both_sides_aggregates_or_other_relations():
    assert facts("r.id + c.id = 3") == []
    assert facts("r.id = c.a + r.b") == []
    assert facts("r.id = other.id") == []
    assert facts("r.id = (SELECT MAX(id) FROM c)") == []


def test_extreme_of_is_a_scalar_min_or_max_over_the_change():
    assert extreme_of(sqlglot.parse_one("c.seller"), AT_LEAST, "__streamsql_delta_1__", "c") == (
        "(SELECT MIN(c.seller) FROM __streamsql_delta_1__ AS c)"
    )
    assert extreme_of(sqlglot.parse_one("c.seller"), AT_MOST, "__streamsql_delta_1__", "c") == (
        "(SELECT MAX(c.seller) FROM __streamsql_delta_1__ AS c)"
    )


def context() -> StepContext:
    return StepContext(FakeSqlSession(), ModelSettings(name="m", schema="s", identifier="m"))


BOUNDS = [
    KeyBound("__streamsql_bound_0__", "p.id", ">=", "(SELECT MIN(a.seller) FROM d a)"),
    KeyBound("__streamsql_bound_1__", "p.id", "<=", "(SELECT MAX(a.seller) FROM d a)"),
]


def test_bound_placeholders_become_literal_predicates_in_one_query():
    ctx = context()
    ctx.session.answers.bound = "42"
    bind_bounds(ctx, BOUNDS, "... __streamsql_bound_0__ AND __streamsql_bound_1__", False)
    assert ctx.bindings.bind("__streamsql_bound_0__ AND __streamsql_bound_1__") == (
        "(p.id >= CAST('42' AS bigint)) AND (p.id <= CAST('42' AS bigint))"
    )
    assert [s.split(" ", 2)[:2] for s in ctx.session.statements] == [
        ["DESCRIBE", "QUERY"],
        ["SELECT", "CAST(v0"],
    ]


def test_a_first_step_and_unused_bounds_cost_no_query():
    ctx = context()
    bind_bounds(ctx, BOUNDS, "uses __streamsql_bound_1__ only", first_step=True)
    assert ctx.bindings.bind("__streamsql_bound_1__") == "true"
    assert "__streamsql_bound_0__" not in ctx.bindings
    later = context()
    bind_bounds(later, BOUNDS, "uses no bound", first_step=False)
    assert ctx.session.statements == later.session.statements == []


def test_key_ranges_cover_the_changes_keys_and_nulls_of_orderable_columns_only():
    columns = [Column("k", "bigint"), Column("tags", "array<string>")]
    measures = range_measures(columns, "g", {"inserts": "SUM(1)"})
    assert measures == {
        "lo0": "CAST(MIN(g.`k`) AS STRING)",
        "hi0": "CAST(MAX(g.`k`) AS STRING)",
        "inserts": "SUM(1)",
    }
    ctx = context()
    ctx.session.answers.bound = "7"
    name, found = ctx.views.measure("gd", "SELECT 1 AS k", measures, "g")
    assert ranges_from(columns, "g", found) == [
        "(((g.`k` >= CAST('7' AS bigint)) AND (g.`k` <= CAST('7' AS bigint))) OR g.`k` IS NULL)"
    ]
    assert found["inserts"] == 3
    assert ctx.session.statements == [  # measured in the pass that computes the view
        f"CHECKPOINT {name} AS SELECT 1 AS k\n-- measured in the same pass: SELECT "
        "CAST(MIN(g.`k`) AS STRING) AS lo0, CAST(MAX(g.`k`) AS STRING) AS hi0, "
        f"SUM(1) AS inserts FROM {name} AS g"
    ]
    assert range_measures(columns, "g", first_step=True) == {}
    assert ranges_from(columns, "g", {}, first_step=True) == []


def test_the_commit_uses_a_changes_measures_only_when_it_was_measured_with_the_same_ones():
    columns = [Column("k", "bigint"), Column("n", "bigint")]
    wanted = change_measures(columns, ["k"], first_step=False)
    assert set(wanted) == {
        "lo0",
        "hi0",
        "inserts",
        "deletes",
        "widest",
        "dlo0",
        "dhi0",
        "dlo1",
        "dhi1",
    }
    assert wanted["dlo1"] == "CAST(MIN(CASE WHEN t._streamsql_weight < 0 THEN t.`n` END) AS STRING)"
    ctx = context()
    net, _ = ctx.views.measure("net", "SELECT 1", wanted, "t")
    assert ctx.views.measured(net, wanted) is not None
    assert ctx.views.measured(net, change_measures(columns, ["k"], first_step=True)) is not None
    assert ctx.views.measured(net, change_measures(columns, ["n"], first_step=False)) is None
    assert ctx.views.measured("another_view", wanted) is None
    ctx.views.materialize("net", "SELECT 2")  # the same view computed again, unmeasured
    assert ctx.views.measured(net, wanted) is None
    ctx.views.measure("net", "SELECT 1", wanted, "t")
    ctx.views.drop_all()
    assert ctx.views.measured(net, wanted) is None  # freed with the step's views
