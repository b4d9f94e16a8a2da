"""MIN(x) and MAX(x): the extreme kept with the inserted values, recomputed after a deletion.

a<j> is the group's extreme. Inserting rows only needs LEAST/GREATEST with the most extreme
inserted value; deleting one may remove the extreme itself, and the remaining values are not in
the state: such a group recomputes a<j> from the inputs. The group delta keeps the most extreme
inserted value (a<j>) and the most extreme deleted one (a<j>_deleted) to tell the two apart.
MIN/MAX(DISTINCT x) is MIN/MAX(x); any other form (more arguments, FILTER) is recomputed.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Type

from sqlglot import exp

from dbt.adapters.streamsql.planning.aggregates.block import (
    CHANGES,
    DELTA_ALIAS,
    RECOMPUTED,
    STATE_ALIAS,
    AggregateCall,
    AggregateQuery,
    AggregateRule,
)
from dbt.adapters.streamsql.planning.aggregates.expressions import is_not_null, typed, zero
from dbt.adapters.streamsql.planning.plan import WEIGHT
from dbt.adapters.streamsql.planning.types import TypeOracle


class ExtremumRule(AggregateRule):
    """MIN or MAX, told apart by the aggregate, its combine and which comparison is "beyond"."""

    def __init__(
        self,
        label: str,
        function: Type[exp.Func],
        combine: Type[exp.Func],
        beyond: Type[exp.Binary],
        short_of: Type[exp.Binary],
    ):
        self.label = label
        self._function = function  # exp.Min or exp.Max
        self._combine = combine  # exp.Least or exp.Greatest
        self._beyond = beyond  # a beyond b: a is more extreme than b
        self._short_of = short_of  # a short_of b: a is less extreme than b

    def delta(self, call: AggregateCall, query: AggregateQuery) -> List[exp.Expression]:
        value = exp.column(call.input, table=CHANGES)
        weight = exp.column(WEIGHT, table=CHANGES)
        inserted = exp.Filter(
            this=self._function(this=value.copy()),
            expression=exp.Where(this=exp.GT(this=weight.copy(), expression=zero())),
        )
        deleted = exp.Filter(
            this=self._function(this=value.copy()),
            expression=exp.Where(this=exp.LT(this=weight.copy(), expression=zero())),
        )
        return [exp.alias_(inserted, call.value), exp.alias_(deleted, call.deleted)]

    def combine(self, call: AggregateCall, recompute: bool) -> List[exp.Expression]:
        old = exp.column(call.value, table=STATE_ALIAS)
        change = exp.column(call.value, table=DELTA_ALIAS)
        value = self._combine(this=old, expressions=[change])
        if recompute:
            recomputed = exp.column(call.value, table=RECOMPUTED)
            value = exp.Case(
                ifs=[exp.If(this=self.recompute_condition(call), true=recomputed)],
                default=value,
            )
        return [exp.alias_(typed(value, call.result_type), call.value)]

    def reads_recomputed(self, recompute: bool) -> bool:
        return recompute

    def recompute_condition(self, call: AggregateCall) -> exp.Expression:
        """True when a deleted value may have been the group's extreme and nothing replaces it."""
        deleted = exp.column(call.deleted, table=DELTA_ALIAS)
        old = exp.column(call.value, table=STATE_ALIAS)
        still_beyond = self._short_of(this=deleted, expression=old)
        return exp.and_(
            self._may_lose_extreme(call, DELTA_ALIAS),
            exp.Not(this=exp.Coalesce(this=still_beyond, expressions=[exp.false()])),
        )

    def loss_check(self, call: AggregateCall) -> exp.Expression:
        return self._may_lose_extreme(call)

    def _may_lose_extreme(self, call: AggregateCall, table: Optional[str] = None) -> exp.Expression:
        """True when the group delta deletes a value and inserts nothing more extreme.

        If the most extreme inserted value is strictly more extreme than every deleted one, no
        copy of it was deleted, so it is in the group after the step and the new extreme is the
        old one combined with it, whatever was deleted (an update that raises a MAX, a count
        going up under a MAX of counts): no recompute is needed. Strictly: a step's delta is not
        netted, and a value inserted and deleted within the step is in both.
        """
        deleted = exp.column(call.deleted, table=table)
        inserted = exp.column(call.value, table=table)
        replaced = self._beyond(this=inserted, expression=deleted.copy())
        return exp.and_(
            is_not_null(deleted),
            exp.Not(this=exp.Coalesce(this=replaced, expressions=[exp.false()])),
        )

    def over_rows(self, call: AggregateCall, query: AggregateQuery, table: str) -> exp.Expression:
        return self._function(this=exp.column(call.input, table=table))

    def note(self, calls: Sequence[AggregateCall]) -> Optional[str]:
        return "min/max recompute a group after a deletion" if calls else None


MIN_RULE = ExtremumRule("min", exp.Min, exp.Least, beyond=exp.LT, short_of=exp.GT)
MAX_RULE = ExtremumRule("max", exp.Max, exp.Greatest, beyond=exp.GT, short_of=exp.LT)


def claim(
    index: int, call: exp.Expression, oracle: TypeOracle, output_type: str
) -> Optional[AggregateCall]:
    """The call kept as an extreme, or None when it is not a MIN/MAX this module maintains."""
    if not isinstance(call, (exp.Min, exp.Max)) or call.expressions:
        return None
    argument = call.this
    if isinstance(argument, exp.Distinct):
        if len(argument.expressions) != 1:
            return None
        argument = argument.expressions[0]
    argument_type = oracle.type_of(argument)
    rule = MIN_RULE if isinstance(call, exp.Min) else MAX_RULE
    return AggregateCall(index, call, rule, argument, argument_type, argument_type or output_type)
