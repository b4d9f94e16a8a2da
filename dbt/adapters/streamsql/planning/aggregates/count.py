"""COUNT(*) and COUNT(x, ...): counts kept by adding the weights of the changed rows.

COUNT(*) (and COUNT(1)) is the group's row count, which every aggregate state keeps anyway
(`_streamsql_count`): it needs no partial of its own. COUNT(x, ...) keeps the number of rows whose
arguments are all non-null. COUNT(DISTINCT ...) is not a count of rows: it is recomputed.
"""

from __future__ import annotations

from typing import List, Optional

from sqlglot import exp

from dbt.adapters.streamsql.planning.aggregates.block import (
    CHANGES,
    DELTA_ALIAS,
    STATE_ALIAS,
    AggregateCall,
    AggregateQuery,
    AggregateRule,
)
from dbt.adapters.streamsql.planning.aggregates.expressions import (
    bigint,
    if_,
    is_not_null,
    or_zero,
    plus,
    zero,
)
from dbt.adapters.streamsql.planning.plan import COUNT, WEIGHT, Column
from dbt.adapters.streamsql.planning.types import TypeOracle


class CountRowsRule(AggregateRule):
    """COUNT(*): the group's row count, read from `_streamsql_count`."""

    label = "count(*)"

    def state_columns(self, call: AggregateCall) -> List[Column]:
        return []

    def delta(self, call: AggregateCall, query: AggregateQuery) -> List[exp.Expression]:
        return []

    def combine(self, call: AggregateCall, recompute: bool) -> List[exp.Expression]:
        return []

    def final_value(self, call: AggregateCall, query: AggregateQuery) -> exp.Expression:
        return _global_zero(exp.column(COUNT), query)


class CountValuesRule(AggregateRule):
    """COUNT(x, ...): a<j> counts the rows whose arguments are all non-null."""

    label = "count"

    def delta(self, call: AggregateCall, query: AggregateQuery) -> List[exp.Expression]:
        counted = if_(
            exp.column(call.input, table=CHANGES), exp.column(WEIGHT, table=CHANGES), zero()
        )
        return [exp.alias_(exp.Sum(this=counted), call.value)]

    def combine(self, call: AggregateCall, recompute: bool) -> List[exp.Expression]:
        old = exp.column(call.value, table=STATE_ALIAS)
        change = exp.column(call.value, table=DELTA_ALIAS)
        return [exp.alias_(bigint(plus(or_zero(old), change)), call.value)]

    def final_value(self, call: AggregateCall, query: AggregateQuery) -> exp.Expression:
        return _global_zero(exp.column(call.value), query)


ROWS_RULE, VALUES_RULE = CountRowsRule(), CountValuesRule()


def claim(
    index: int, call: exp.Expression, oracle: TypeOracle, output_type: str
) -> Optional[AggregateCall]:
    """The call kept as a count, or None when it is not a COUNT this module maintains."""
    if not isinstance(call, exp.Count):
        return None
    argument = call.this
    if isinstance(argument, exp.Distinct):
        return None
    arguments = ([argument] if argument is not None else []) + list(call.expressions)
    if (
        not arguments
        or isinstance(argument, exp.Star)
        or (len(arguments) == 1 and isinstance(argument, exp.Literal))
    ):
        return AggregateCall(index, call, ROWS_RULE, result_type="bigint")
    non_null = exp.and_(*(is_not_null(a.copy()) for a in arguments))
    return AggregateCall(index, call, VALUES_RULE, argument=non_null, result_type="bigint")


def _global_zero(count: exp.Expression, query: AggregateQuery) -> exp.Expression:
    """A global aggregate over no rows still has one output row, whose counts are 0."""
    return or_zero(count) if query.is_global else count
