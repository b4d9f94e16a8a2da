"""SUM(x) and AVG(x): a running sum and a count of non-null values, kept by adding.

a<j> is the sum of x over the group and a<j>_n the number of rows where x is not null; SUM reads
the sum (NULL when no value is left), AVG divides the two. The partial negates a deleted value
instead of multiplying it by the weight, so that a decimal sum keeps Spark's result type (the
CASE raises an error on a weight other than +1/-1). Only a numeric x of known kind is kept this
way, and AVG of a decimal only when its exact type is known (Spark's result type depends on it):
any other SUM/AVG, and SUM/AVG(DISTINCT x), is recomputed.
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
    typed,
    zero,
)
from dbt.adapters.streamsql.planning.plan import WEIGHT, Column
from dbt.adapters.streamsql.planning.types import (
    DECIMAL,
    FRACTIONAL,
    INTEGRAL,
    TypeOracle,
    decimal_average,
    numeric_kind_of_type,
    sum_type,
)


class SumRule(AggregateRule):
    """SUM(x): the sum, or NULL while the group has no non-null x."""

    label = "sum"

    def state_columns(self, call: AggregateCall) -> List[Column]:
        return [Column(call.value, call.result_type), Column(call.non_null, "bigint")]

    def delta(self, call: AggregateCall, query: AggregateQuery) -> List[exp.Expression]:
        value = exp.column(call.input, table=CHANGES)
        weight = exp.column(WEIGHT, table=CHANGES)
        signed = exp.Case(
            ifs=[
                exp.If(
                    this=exp.EQ(this=weight.copy(), expression=exp.Literal.number(1)),
                    true=value.copy(),
                ),
                exp.If(
                    this=exp.EQ(this=weight.copy(), expression=exp.Literal.number(-1)),
                    true=exp.Neg(this=value.copy()),
                ),
            ],
            default=exp.Anonymous(
                this="raise_error",
                expressions=[exp.Literal.string("streamsql: weight is not +1 or -1")],
            ),
        )
        counted = if_(is_not_null(value.copy()), weight, zero())
        return [
            exp.alias_(exp.Sum(this=signed), call.value),
            exp.alias_(exp.Sum(this=counted), call.non_null),
        ]

    def combine(self, call: AggregateCall, recompute: bool) -> List[exp.Expression]:
        old = exp.column(call.value, table=STATE_ALIAS)
        change = exp.column(call.value, table=DELTA_ALIAS)
        value = exp.Coalesce(this=plus(old, change), expressions=[old.copy(), change.copy()])
        non_null = bigint(
            plus(
                or_zero(exp.column(call.non_null, table=STATE_ALIAS)),
                exp.column(call.non_null, table=DELTA_ALIAS),
            )
        )
        return [
            exp.alias_(typed(value, call.result_type), call.value),
            exp.alias_(non_null, call.non_null),
        ]

    def final_value(self, call: AggregateCall, query: AggregateQuery) -> exp.Expression:
        return exp.Case(ifs=[exp.If(this=_some(call), true=_total(call))])


class AvgRule(SumRule):
    """AVG(x): the sum divided by the count, in Spark's result type for AVG of x's type."""

    label = "avg"

    def final_value(self, call: AggregateCall, query: AggregateQuery) -> exp.Expression:
        kind = numeric_kind_of_type(call.argument_type) or _kind_of_sum(call)
        if kind == DECIMAL:
            mean = decimal_average(_total(call), exp.column(call.non_null), call.argument_type)
            return exp.Case(ifs=[exp.If(this=_some(call), true=mean)])
        quotient = exp.Div(
            this=exp.cast(_total(call), exp.DataType.build("double")),
            expression=exp.column(call.non_null),
        )
        return exp.Case(ifs=[exp.If(this=_some(call), true=quotient)])


SUM_RULE, AVG_RULE = SumRule(), AvgRule()


def claim(
    index: int, call: exp.Expression, oracle: TypeOracle, output_type: str
) -> Optional[AggregateCall]:
    """The call kept as a sum, or None when it is not a SUM/AVG this module maintains."""
    if type(call) not in (exp.Sum, exp.Avg) or isinstance(call.this, exp.Distinct):
        return None
    argument = call.this
    argument_type = oracle.type_of(argument)
    kind = numeric_kind_of_type(argument_type) or oracle.numeric_kind(argument)
    if kind is None:
        return None
    rule = SUM_RULE if isinstance(call, exp.Sum) else AVG_RULE
    if rule is AVG_RULE and kind == DECIMAL and numeric_kind_of_type(argument_type) != DECIMAL:
        return None  # Spark's AVG result type needs the exact decimal type
    return AggregateCall(index, call, rule, argument, argument_type, sum_type(argument_type, kind))


def _some(call: AggregateCall) -> exp.Expression:
    """The group has at least one non-null x."""
    return exp.GT(this=exp.column(call.non_null), expression=zero())


def _total(call: AggregateCall) -> exp.Expression:
    return typed(exp.column(call.value), call.result_type)


def _kind_of_sum(call: AggregateCall) -> Optional[str]:
    """The kind of x, from the type its sum was given when x's own type is unknown."""
    return {"bigint": INTEGRAL, "double": FRACTIONAL}.get(call.result_type)
