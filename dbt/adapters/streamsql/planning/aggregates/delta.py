"""The group delta of a step: each changed group's count and partials, from the changed rows.

The block's FROM and WHERE are rendered once per delta term (linear.py), each branch giving per
changed row its group values, the arguments of the aggregates and a weight; the group delta sums
the weights per group and asks each call's rule for its partials over those rows.
"""

from __future__ import annotations

from typing import List

from sqlglot import exp

from dbt.adapters.streamsql.planning.aggregates.block import (
    CHANGES,
    AggregateQuery,
    group_column,
    recompute_column,
)
from dbt.adapters.streamsql.planning.errors import RecomputeRequired
from dbt.adapters.streamsql.planning.linear import DeltaBuilder, render_block
from dbt.adapters.streamsql.planning.plan import COUNT, WEIGHT
from dbt.adapters.streamsql.planning.terms import union_all


def changes_row(query: AggregateQuery) -> List[exp.Expression]:
    """Per-row columns the delta and the recompute aggregate over (before GROUP BY)."""
    row = [exp.alias_(g.copy(), group_column(k)) for k, g in enumerate(query.groups)]
    for call in query.calls:
        if call.argument is not None:
            row.append(exp.alias_(call.argument.copy(), call.input))
    for m, column in enumerate(query.recompute_columns):
        row.append(exp.alias_(column.copy(), recompute_column(m)))
    return row


def delta_sql(builder: DeltaBuilder, query: AggregateQuery) -> exp.Select:
    """The group delta (`__streamsql_group_delta__`): one row per group the step changes."""
    terms = builder.block_terms(query.sources)
    row = changes_row(query)
    branches = [render_block(builder, query.select, query.sources, t, row) for t in terms]
    for branch in branches:
        for key in ("group", "having", "distinct"):
            branch.set(key, None)
    if not branches:
        raise RecomputeRequired("the aggregate reads no input")
    weight = exp.column(WEIGHT, table=CHANGES)
    projections = [exp.alias_(exp.column(g, table=CHANGES), g) for g in query.group_names]
    projections.append(exp.alias_(exp.Sum(this=weight), COUNT))
    for call in query.calls:
        projections += call.rule.delta(call, query)
    changes = exp.Subquery(
        this=union_all(branches), alias=exp.TableAlias(this=exp.to_identifier(CHANGES))
    )
    delta = exp.Select(expressions=projections, from_=exp.From(this=changes))
    if query.groups:
        delta.set(
            "group",
            exp.Group(expressions=[exp.column(g, table=CHANGES) for g in query.group_names]),
        )
    else:
        delta.set(
            "having",
            exp.Having(
                this=exp.GT(this=exp.Count(this=exp.Star()), expression=exp.Literal.number(0))
            ),
        )
    return delta
