"""Aggregates no partial state can maintain, recomputed from the inputs for every changed group.

COUNT(DISTINCT x), SUM(DISTINCT x), collect_list, percentile, any FILTER (WHERE ...) and every
other aggregate the other rules do not claim. a<j> holds the group's value; a step recomputes it
over the new inputs, for the groups the step changes only. The group delta carries a NULL of the
value's type in its place (or, when the type is unknown, the aggregate over the changed rows, so
that Spark gives the column its type). A global aggregate of this kind is not maintained at all:
its one group would be recomputed on every step.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

from sqlglot import exp

from dbt.adapters.streamsql.planning.aggregates.block import (
    CHANGES,
    RECOMPUTED,
    AggregateCall,
    AggregateQuery,
    AggregateRule,
    recompute_column,
)
from dbt.adapters.streamsql.planning.aggregates.expressions import data_type, typed
from dbt.adapters.streamsql.planning.plan import DIALECT


class RecomputedRule(AggregateRule):
    """Any aggregate: its value, recomputed for each changed group."""

    maintained = False

    def delta(self, call: AggregateCall, query: AggregateQuery) -> List[exp.Expression]:
        # Only the type matters here: the combine recomputes the value.
        placeholder = (
            exp.cast(exp.Null(), data_type(call.result_type))
            if call.result_type
            else self.over_rows(call, query, CHANGES)
        )
        return [exp.alias_(placeholder, call.value)]

    def combine(self, call: AggregateCall, recompute: bool) -> List[exp.Expression]:
        value = exp.column(call.value, table=RECOMPUTED)
        return [exp.alias_(typed(value, call.result_type), call.value)]

    def reads_recomputed(self, recompute: bool) -> bool:
        return True

    def over_rows(self, call: AggregateCall, query: AggregateQuery, table: str) -> exp.Expression:
        rewritten = call.call.copy()
        for column in list(rewritten.find_all(exp.Column)):
            if column.table and column in query.recompute_columns:
                m = query.recompute_columns.index(column)
                column.replace(exp.column(recompute_column(m), table=table))
        return rewritten

    def note(self, calls: Sequence[AggregateCall]) -> Optional[str]:
        names = sorted({call_name(c.call) for c in calls})
        return f"{', '.join(names)} recomputed for changed groups only" if names else None


RECOMPUTED_RULE = RecomputedRule()


def claim(index: int, call: exp.Expression, output_type: str) -> AggregateCall:
    """Any aggregate call, kept as its recomputed value (of the output's type, when known)."""
    return AggregateCall(index, call, RECOMPUTED_RULE, result_type=output_type)


def call_name(call: exp.Expression) -> str:
    """The aggregate's name as the plan's reason gives it: `count(distinct)`, `sum filter`."""
    if isinstance(call, exp.Filter):
        return call_name(call.this) + " filter"
    if isinstance(call, exp.Count) and isinstance(call.this, exp.Distinct):
        return "count(distinct)"
    inner = call.this if isinstance(call.this, exp.Distinct) else None
    name = call.sql(DIALECT).split("(", 1)[0].lower()
    return f"{name}(distinct)" if inner is not None else name
