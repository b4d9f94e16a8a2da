"""Reading the model's rows back out of the state: the output SQL over the groups.

Every SELECT and HAVING expression is rewritten over a group's state columns: a group expression
becomes its group column, an aggregate call its rule's `final_value`. Also here: the outputs that
depend on the group columns alone, and the outputs that name a group (the model's key).
"""

from __future__ import annotations

from typing import List, Optional, Tuple

from sqlglot import exp

from dbt.adapters.streamsql.planning.aggregates.block import AggregateQuery, group_column
from dbt.adapters.streamsql.planning.aggregates.expressions import typed
from dbt.adapters.streamsql.planning.calls import contains_aggregate, is_aggregate_call
from dbt.adapters.streamsql.planning.errors import RecomputeRequired
from dbt.adapters.streamsql.planning.plan import COUNT, DIALECT, GROUP_ALIAS, GROUPS


def output_sql(query: AggregateQuery) -> exp.Select:
    """The model's rows (and the group columns) over `__streamsql_groups__`."""
    projections = []
    for name, expression, output_type in query.outputs:
        value = on_state(expression, query)
        if contains_aggregate(expression):
            value = typed(value, output_type)
        projections.append(exp.alias_(value, exp.to_identifier(name)))
    projections += [exp.column(g) for g in query.group_names]
    groups = exp.Table(this=exp.to_identifier(GROUPS))
    if query.is_global:
        unit = exp.Subquery(
            this=exp.select(exp.alias_(exp.Literal.number(1), "_streamsql_unit")),
            alias=exp.TableAlias(this=exp.to_identifier("_streamsql_unit")),
        )
        output = exp.Select(
            expressions=projections,
            from_=exp.From(this=unit),
            joins=[exp.Join(this=groups, side="LEFT", on=exp.true())],
        )
        condition = None
    else:
        output = exp.Select(expressions=projections, from_=exp.From(this=groups))
        condition = exp.GT(this=exp.column(COUNT), expression=exp.Literal.number(0))
    if query.having is not None:
        having = on_state(query.having, query)
        condition = having if condition is None else exp.and_(condition, having)
    if condition is not None:
        output = output.where(condition)
    return output


def on_state(node: exp.Expression, query: AggregateQuery) -> exp.Expression:
    """`node` (a SELECT or HAVING expression) rewritten over the state columns."""
    for k, group in enumerate(query.groups):
        if node == group:
            return exp.column(group_column(k))
    if is_aggregate_call(node):
        call = next(c for c in query.calls if c.call == node)
        return call.rule.final_value(call, query)
    if isinstance(node, exp.Column) and node.table:
        raise RecomputeRequired(f"column {node.sql(DIALECT)} is neither grouped nor aggregated")
    copy = node.copy()
    for child in list(copy.iter_expressions()):
        child.replace(on_state(child, query))
    return copy


def group_outputs(query: AggregateQuery) -> Tuple[Tuple[str, str], ...]:
    """Output columns computed from the group columns alone, as SQL over the state."""
    found = []
    for name, expression, _ in query.outputs:
        if contains_aggregate(expression):
            continue
        try:
            value = on_state(expression, query)
        except RecomputeRequired:
            continue
        groups = set(query.group_names)
        for column in ([value] if isinstance(value, exp.Column) else []) + list(
            value.find_all(exp.Column)
        ):
            if not column.table and column.name in groups:
                column.set("table", exp.to_identifier(GROUP_ALIAS))
        found.append((name, value.sql(DIALECT)))
    return tuple(found)


def key_columns(query: AggregateQuery) -> Optional[Tuple[str, ...]]:
    """Output columns that name each group: its value, or a window group's start or end.

    A tumbling or hopping window has one duration, so its start (or end) names it.
    """
    names: List[str] = []
    for group in query.groups:
        is_window = isinstance(group, exp.Anonymous) and group.name.lower() == "window"
        for name, expression, _ in query.outputs:
            if expression == group or (
                is_window
                and isinstance(expression, exp.Dot)
                and expression.this == group
                and expression.name.lower() in ("start", "end")
            ):
                names.append(name)
                break
        else:
            return None
    return tuple(dict.fromkeys(names))
