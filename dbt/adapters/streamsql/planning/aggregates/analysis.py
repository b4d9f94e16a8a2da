"""Taking one aggregate SELECT block apart: its groups, its aggregate calls and its outputs.

Decides which blocks are aggregates at all (GROUP BY, HAVING, DISTINCT or an aggregate call),
rewrites UNION (distinct) as a SELECT DISTINCT, and refuses the shapes no aggregate plan keeps
(GROUPING SETS, ROLLUP, CUBE, DISTINCT ON, an aggregate in GROUP BY, a recomputed aggregate
without GROUP BY). The rule that keeps each call is chosen here, once (kinds.py).
"""

from __future__ import annotations

from typing import List, Optional, Sequence

from sqlglot import exp

from dbt.adapters.streamsql.planning.aggregates.block import AggregateCall, AggregateQuery
from dbt.adapters.streamsql.planning.aggregates.kinds import classify
from dbt.adapters.streamsql.planning.calls import aggregate_calls, contains_aggregate
from dbt.adapters.streamsql.planning.errors import RecomputeRequired
from dbt.adapters.streamsql.planning.linear import DeltaBuilder
from dbt.adapters.streamsql.planning.plan import DIALECT
from dbt.adapters.streamsql.planning.set_operations import SHAPE
from dbt.adapters.streamsql.planning.types import TypeOracle


def is_aggregate_select(select: exp.Expression) -> bool:
    return isinstance(select, exp.Select) and bool(
        select.args.get("group")
        or select.args.get("having")
        or select.args.get("distinct")
        or any(contains_aggregate(p) for p in select.expressions)
    )


def distinct_over_union(union: exp.Union, names: Sequence[str]) -> exp.Select:
    """UNION (distinct) as SELECT DISTINCT over the UNION ALL of the same branches."""
    union_all = union.copy()
    union_all.set("distinct", False)
    alias = exp.TableAlias(
        this=exp.to_identifier("_streamsql_union"), columns=[exp.to_identifier(n) for n in names]
    )
    return exp.Select(
        expressions=[exp.column(name, table="_streamsql_union") for name in names],
        from_=exp.From(this=exp.Subquery(this=union_all, alias=alias)),
        distinct=exp.Distinct(),
    )


def analyze(
    select: exp.Select,
    names: Sequence[str],
    types: Sequence[Optional[str]],
    oracle: TypeOracle,
    builder: DeltaBuilder,
    shapes: List[str],
) -> AggregateQuery:
    """The aggregate block `select`, whose outputs are named `names` (of `types`, when known).

    Appends to `shapes` what the plan's reason says of the block's shape beyond GROUP BY.
    """
    if len(select.expressions) != len(names):
        raise RecomputeRequired("the query's columns do not match the model's columns")
    projections = [p.unalias() for p in select.expressions]
    groups: List[exp.Expression] = []
    for expression in _group_expressions(select, projections, shapes):
        if contains_aggregate(expression):
            raise RecomputeRequired("an aggregate inside GROUP BY is not maintained incrementally")
        if expression not in groups:
            groups.append(expression)

    sources = builder.block_sources(select)
    outputs = list(zip(names, projections, types))
    having = select.args.get("having")
    calls: List[AggregateCall] = []
    for node in projections + ([having.this] if having is not None else []):
        for call in aggregate_calls(node):
            if all(call != known.call for known in calls):
                output_type = next((t for _, e, t in outputs if e == call and t), "")
                calls.append(classify(len(calls), call, oracle, output_type))
    query = AggregateQuery(
        select=select,
        sources=sources,
        groups=groups,
        group_types=[_group_type(g, outputs, oracle) for g in groups],
        calls=calls,
        outputs=outputs,
        having=having.this if having is not None else None,
    )
    recomputed = [c for c in calls if not c.rule.maintained]
    if query.is_global and recomputed:
        name = recomputed[0].call.sql(DIALECT)
        raise RecomputeRequired(f"{name} without GROUP BY is not maintained incrementally")
    if query.is_global and select.args.get("distinct") is None:
        shapes.append("global aggregate")
    for call in recomputed:
        for column in call.call.find_all(exp.Column):
            if column.table and column not in query.recompute_columns:
                query.recompute_columns.append(column)
    return query


def _group_expressions(
    select: exp.Select, projections: List[exp.Expression], shapes: List[str]
) -> List[exp.Expression]:
    """What the block groups by: its GROUP BY, or every projection of a SELECT DISTINCT."""
    group = select.args.get("group")
    if select.args.get("distinct"):
        if group is not None or any(contains_aggregate(p) for p in projections):
            raise RecomputeRequired("DISTINCT over an aggregate is not maintained incrementally")
        if select.args["distinct"].args.get("on"):
            raise RecomputeRequired("DISTINCT ON is not maintained incrementally")
        shapes.append("distinct")
        return projections
    if group is None:
        return []
    if select.meta.get(SHAPE):  # an INTERSECT / EXCEPT (set_operations.py)
        shapes.append(select.meta[SHAPE])
    for key in ("all", "rollup", "cube", "totals", "grouping_sets"):
        if group.args.get(key):
            raise RecomputeRequired(
                f"GROUP BY {key.upper().replace('_', ' ')} is not maintained incrementally"
            )
    if any(isinstance(g, (exp.GroupingSets, exp.Rollup, exp.Cube)) for g in group.expressions):
        raise RecomputeRequired("GROUPING SETS/ROLLUP/CUBE are not maintained incrementally")
    return list(group.expressions)


def _group_type(group: exp.Expression, outputs, oracle: TypeOracle) -> str:
    known = oracle.type_of(group)
    if known:
        return known
    for _, expression, output_type in outputs:
        if expression == group and output_type:
            return output_type
    return ""
