"""The planner's entry point: one model's compiled SELECT in, the `StepPlan` of a step out.

Strategy, by the shape of the query (section 3 of SPEC.md lists what the fast path covers):

- "linear": projection, filter, UNION ALL, inner/cross joins, left equi-joins, derived tables and
  CTEs, LATERAL VIEW generators (`linear.py`);
- "aggregate": a GROUP BY / DISTINCT / UNION / global aggregate at the top, possibly under a
  projection and filter, over any linear FROM clause (`aggregate.py`);
- "recompute": everything else (`recompute.py`), with the construct that forced it as reason.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from sqlglot import exp

from dbt.adapters.streamsql.planning.aggregate import AggregatePlanner, is_aggregate_select
from dbt.adapters.streamsql.planning.binding import DIALECT, bind_tree, bound_input, parse_query
from dbt.adapters.streamsql.planning.constructs import drop_ordering, nonlinear_construct
from dbt.adapters.streamsql.planning.errors import PlanningError, RecomputeRequired
from dbt.adapters.streamsql.planning.linear import DeltaBuilder
from dbt.adapters.streamsql.planning.plan import Column, InputTable, StepPlan
from dbt.adapters.streamsql.planning.recompute import recompute_change_sql
from dbt.adapters.streamsql.planning.types import TypeOracle

__all__ = ["plan_step", "PlanningError"]

_CONSTRUCT_ORDER = ("filter", "projection", "union all", "inner join", "left join", "lateral view", "derived table")


def plan_step(
    sql: str,
    inputs: Sequence[InputTable],
    output_columns: Sequence[Column],
    config: Optional[Mapping[str, Any]] = None,
) -> StepPlan:
    """Plans one step of an incremental view.

    Args:
        sql: the model's compiled SELECT (Spark SQL).
        inputs: every table the SQL reads, names normalized ("schema.table"); input i is reachable
            in the plan's SQL only through the placeholders of position i.
        output_columns: the model's result columns and types, in order (DESCRIBE QUERY).
        config: the model's config; not used by the planner yet.

    Raises:
        PlanningError: the SQL is not one query, or it reads a table that is not an input.
    """
    inputs, output_columns = tuple(inputs), tuple(output_columns)
    if not output_columns:
        raise PlanningError("the model has no output columns")
    try:
        query = parse_query(sql)
    except RecomputeRequired as why:
        return _recompute(sql, None, inputs, output_columns, str(why))
    try:
        tree = bind_tree(query, inputs)
        return _fast_plan(tree, inputs, output_columns)
    except RecomputeRequired as why:
        return _recompute(sql, query, inputs, output_columns, str(why))


def _fast_plan(tree: exp.Query, inputs, output_columns) -> StepPlan:
    obstacle = nonlinear_construct(tree)
    if obstacle:
        raise RecomputeRequired(obstacle)
    if not any(bound_input(t) is not None for t in tree.find_all(exp.Table)):
        raise RecomputeRequired("the query reads no input")
    drop_ordering(tree)
    if _is_aggregate(tree):
        result = AggregatePlanner(TypeOracle(inputs)).plan(tree, output_columns)
        return StepPlan(
            strategy="aggregate",
            reason=result.reason,
            inputs=inputs,
            output_columns=output_columns,
            aggregate=result.plan,
        )
    _name_outputs(tree, [c.name for c in output_columns])
    builder = DeltaBuilder()
    change = builder.query_delta(tree)
    constructs = [c for c in _CONSTRUCT_ORDER if c in builder.constructs]
    return StepPlan(
        strategy="linear",
        reason="fast path: " + ", ".join(constructs),
        inputs=inputs,
        output_columns=output_columns,
        change_sql=change.sql(DIALECT),
        monotonic=not builder.uses_left_join,
    )


def _is_aggregate(tree: exp.Expression) -> bool:
    """A GROUP BY / DISTINCT / aggregate at the top, possibly under projections over one derived table."""
    if isinstance(tree, exp.Union):
        return bool(tree.args.get("distinct"))
    if not isinstance(tree, exp.Select):
        return False
    if is_aggregate_select(tree):
        return True
    from_ = tree.args.get("from_")
    if from_ is None or tree.args.get("joins") or tree.args.get("laterals"):
        return False
    return isinstance(from_.this, exp.Subquery) and _is_aggregate(from_.this.this)


def _name_outputs(tree: exp.Expression, names: Sequence[str]) -> None:
    """Aliases the top-level projections (of every UNION branch) to the model's column names."""
    if isinstance(tree, exp.SetOperation):
        _name_outputs(tree.this, names)
        _name_outputs(tree.expression, names)
        return
    if isinstance(tree, exp.Subquery):
        _name_outputs(tree.this, names)
        return
    if len(tree.expressions) != len(names):
        raise RecomputeRequired("the query's columns do not match the model's columns")
    tree.set("expressions", [exp.alias_(p.unalias(), exp.to_identifier(n)) for p, n in zip(tree.expressions, names)])


def _recompute(sql, query, inputs, output_columns, why: str) -> StepPlan:
    return StepPlan(
        strategy="recompute",
        reason=f"recompute: {why}",
        inputs=inputs,
        output_columns=output_columns,
        change_sql=recompute_change_sql(sql, query, inputs, output_columns),
    )
