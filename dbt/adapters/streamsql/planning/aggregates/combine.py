"""The new state of the changed groups: the old state combined with the group delta.

Each call's rule combines its partials (`AggregateRule.combine`). The calls whose rule reads a
recomputed value get it from a recompute: the block over the new inputs, for the changed groups
that need it only. When the only such calls are MIN/MAX, a step with no deletion that could lose
an extreme may use the combine without the recompute (`shortcut`).
"""

from __future__ import annotations

from typing import List, Sequence

import sqlglot
from sqlglot import exp

from dbt.adapters.streamsql.planning.aggregates.block import (
    AFFECTED,
    DELTA_ALIAS,
    RECOMPUTED,
    ROWS,
    STATE_ALIAS,
    AggregateCall,
    AggregateQuery,
)
from dbt.adapters.streamsql.planning.aggregates.delta import changes_row
from dbt.adapters.streamsql.planning.aggregates.expressions import bigint, or_zero, plus
from dbt.adapters.streamsql.planning.errors import RecomputeRequired
from dbt.adapters.streamsql.planning.linear import DeltaBuilder, render_block
from dbt.adapters.streamsql.planning.plan import COUNT, DIALECT, GROUP_DELTA, STATE
from dbt.adapters.streamsql.planning.terms import Term
from dbt.adapters.streamsql.planning.types import UncomparableType, comparable, compared_as_is


def combine_sql(builder: DeltaBuilder, query: AggregateQuery, recompute: bool = True) -> exp.Select:
    """The changed groups' new state rows: the group delta `d` left-joined with the state `s`."""
    d, s = DELTA_ALIAS, STATE_ALIAS
    projections: List[exp.Expression] = [
        exp.alias_(exp.column(g, table=d), g) for g in query.group_names
    ]
    count = bigint(plus(or_zero(exp.column(COUNT, table=s)), exp.column(COUNT, table=d)))
    projections.append(exp.alias_(count, COUNT))
    recomputed: List[AggregateCall] = []
    for call in query.calls:
        projections += call.rule.combine(call, recompute)
        if call.rule.reads_recomputed(recompute):
            recomputed.append(call)
    combine = exp.Select(
        expressions=projections,
        from_=exp.From(this=_table(GROUP_DELTA, d)),
        joins=[exp.Join(this=_table(STATE, s), side="LEFT", on=group_match(query, d, s))],
    )
    if recomputed:
        values = exp.Subquery(
            this=recompute_sql(builder, query, recomputed),
            alias=exp.TableAlias(this=exp.to_identifier(RECOMPUTED)),
        )
        combine.append(
            "joins", exp.Join(this=values, side="LEFT", on=group_match(query, d, RECOMPUTED))
        )
    return combine


def recompute_sql(
    builder: DeltaBuilder, query: AggregateQuery, calls: Sequence[AggregateCall]
) -> exp.Select:
    """The values of `calls` for the changed groups that need them, from the NEW inputs."""
    everything_new = Term(("new",) * len(query.sources), exp.Literal.number(1))
    rows = render_block(builder, query.select, query.sources, everything_new, changes_row(query))
    for key in ("group", "having", "distinct"):
        rows.set(key, None)
    # groups that need a recomputed value: all changed groups when any aggregate is always
    # recomputed, else those where a rule's condition holds (a deletion may have removed a MIN)
    d, s = DELTA_ALIAS, STATE_ALIAS
    affected = exp.Select(
        expressions=[exp.column(g, table=d) for g in query.group_names] or [exp.Literal.number(1)],
        from_=exp.From(this=_table(GROUP_DELTA, d)),
        joins=[exp.Join(this=_table(STATE, s), side="LEFT", on=group_match(query, d, s))],
    )
    if all(c.rule.maintained for c in calls):
        affected = affected.where(exp.or_(*(c.rule.recompute_condition(c) for c in calls)))
    projections = [exp.alias_(exp.column(g, table=ROWS), g) for g in query.group_names]
    projections += [exp.alias_(c.rule.over_rows(c, query, ROWS), c.value) for c in calls]
    recompute = exp.Select(
        expressions=projections,
        from_=exp.From(
            this=exp.Subquery(this=rows, alias=exp.TableAlias(this=exp.to_identifier(ROWS)))
        ),
        joins=[
            exp.Join(
                this=exp.Subquery(
                    this=affected, alias=exp.TableAlias(this=exp.to_identifier(AFFECTED))
                ),
                side="LEFT",
                kind="SEMI",
                on=group_match(query, ROWS, AFFECTED),
            )
        ],
    )
    if query.groups:
        recompute.set(
            "group",
            exp.Group(expressions=[exp.column(g, table=ROWS) for g in query.group_names]),
        )
    return recompute


def shortcut(builder: DeltaBuilder, query: AggregateQuery) -> dict:
    """The combine without the recompute join, and when it may be used.

    Only MIN/MAX need the recompute, and only after a deletion nothing inserted outdoes (their
    rule's `loss_check`); a step without one (every append-only step, and steps whose updates
    only push extremes further out) combines from the state alone instead of scanning the
    inputs' history. A query with an always-recomputed aggregate has no shortcut.
    """
    checks = [c.rule.loss_check(c) for c in query.calls]
    checks = [check for check in checks if check is not None]
    if not checks or not all(c.rule.maintained for c in query.calls):
        return {}
    # How many of the group delta's rows may have lost an extreme: an aggregate over its rows,
    # measured in the pass that computes it (execution/commit/aggregate_state.py).
    lost = exp.Case(ifs=[exp.If(this=exp.or_(*checks), true=exp.Literal.number(1))])
    check = exp.func("COALESCE", exp.Sum(this=lost.else_(exp.Literal.number(0))), 0)
    return {
        "combine_without_recompute_sql": combine_sql(builder, query, recompute=False).sql(DIALECT),
        "recompute_check": check.sql(DIALECT),
    }


def group_match(query: AggregateQuery, left: str, right: str) -> exp.Expression:
    """Relations `left` and `right` hold the same group (NULL-safe on every group column; a
    map, or a type holding one, by its comparable form)."""
    if not query.groups:
        return exp.true()
    return exp.and_(
        *(
            exp.NullSafeEQ(this=_compared(g, t, left), expression=_compared(g, t, right))
            for g, t in zip(query.group_names, query.group_types)
        )
    )


def _compared(group: str, data_type: str, table: str) -> exp.Expression:
    column = exp.column(group, table=table)
    if compared_as_is(data_type):
        return column
    try:
        return sqlglot.parse_one(comparable(column.sql(DIALECT), data_type), read=DIALECT)
    except UncomparableType as error:
        raise RecomputeRequired(
            f"GROUP BY a value of type {error.part} is not maintained incrementally"
        ) from error


def _table(name: str, alias: str) -> exp.Table:
    return exp.Table(
        this=exp.to_identifier(name), alias=exp.TableAlias(this=exp.to_identifier(alias))
    )
