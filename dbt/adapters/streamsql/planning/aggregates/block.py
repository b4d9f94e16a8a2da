"""The parts of an aggregate block the planner works on, and the interface of an aggregate rule.

`AggregateQuery` is one aggregate SELECT block taken apart (groups, aggregate calls, outputs);
`AggregateCall` is one distinct aggregate call in it, with the rule that keeps its partials.
`AggregateRule` is what each kind of aggregate (count.py, sums.py, extrema.py, recomputed.py)
answers for its calls: which state columns it keeps, how a step's changes fold into them and how
the value is read back. The names of the state columns and of the relations the generated SQL
uses are here too, so that every module spells them the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

from sqlglot import exp

from dbt.adapters.streamsql.planning.plan import Column
from dbt.adapters.streamsql.planning.terms import Source

# Relation aliases of the generated SQL: the changed rows of a step, the rows a recompute reads,
# the groups that need a recompute and their recomputed values; the group delta and the state.
CHANGES, ROWS, AFFECTED, RECOMPUTED = (
    "_streamsql_changes",
    "_streamsql_rows",
    "_streamsql_affected",
    "_streamsql_recomputed",
)
DELTA_ALIAS, STATE_ALIAS = "d", "s"


def group_column(k: int) -> str:
    return f"_streamsql_g{k}"


def recompute_column(m: int) -> str:
    """The per-row copy of the m-th input column a recomputed aggregate reads."""
    return f"_streamsql_c{m}"


class AggregateRule:
    """How one kind of aggregate is kept per group; every method answers for one call of it.

    A rule that is not `maintained` keeps no partials it could update: every changed group
    recomputes its value from the inputs. A maintained rule may still need a recompute now and
    then (MIN/MAX after a deletion): `recompute_condition` says when.
    """

    label = ""  # how the plan's reason names the kind ("" for none)
    maintained = True

    def state_columns(self, call: AggregateCall) -> List[Column]:
        """The call's partials in the state table."""
        return [Column(call.value, call.result_type)]

    def delta(self, call: AggregateCall, query: AggregateQuery) -> List[exp.Expression]:
        """The call's partials of a step's group delta, aggregated over the `CHANGES` rows."""
        raise NotImplementedError

    def combine(self, call: AggregateCall, recompute: bool) -> List[exp.Expression]:
        """The call's new partials from the old state `s` and the group delta `d`.

        With `recompute`, the combine also joins the recomputed values (`RECOMPUTED`) of the
        calls whose rule `reads_recomputed`.
        """
        raise NotImplementedError

    def reads_recomputed(self, recompute: bool) -> bool:
        """Whether `combine` reads the call's recomputed value."""
        return False

    def recompute_condition(self, call: AggregateCall) -> Optional[exp.Expression]:
        """Over `d` and `s`: when a changed group must recompute the call; None when never."""
        return None

    def loss_check(self, call: AggregateCall) -> Optional[exp.Expression]:
        """Over the group delta alone: when a step may need a recompute; None when never."""
        return None

    def over_rows(self, call: AggregateCall, query: AggregateQuery, table: str) -> exp.Expression:
        """The call recomputed as an aggregate over the per-row columns of relation `table`."""
        raise NotImplementedError(f"{type(self).__name__} is never recomputed")

    def final_value(self, call: AggregateCall, query: AggregateQuery) -> exp.Expression:
        """The call's value computed from a group's state columns."""
        return exp.column(call.value)

    def note(self, calls: Sequence[AggregateCall]) -> Optional[str]:
        """What the plan's reason says about the query's calls of this kind, if anything."""
        return None


@dataclass
class AggregateCall:
    """One distinct aggregate call of the query and the rule that keeps its partials."""

    index: int
    call: exp.Expression
    rule: AggregateRule
    argument: Optional[exp.Expression] = None  # x (COUNT(x, ...): "all arguments are non-null")
    argument_type: Optional[str] = None
    result_type: str = ""  # the state type of a<j> ("" = read it from delta_sql)

    @property
    def value(self) -> str:
        return f"_streamsql_a{self.index}"

    @property
    def non_null(self) -> str:
        return f"_streamsql_a{self.index}_n"

    @property
    def deleted(self) -> str:
        return f"_streamsql_a{self.index}_deleted"

    @property
    def input(self) -> str:
        return f"_streamsql_x{self.index}"


@dataclass
class AggregateQuery:
    """The parts of one aggregate SELECT block, before any SQL is generated."""

    select: exp.Select
    sources: List[Source]
    groups: List[exp.Expression]
    group_types: List[str]
    calls: List[AggregateCall]
    outputs: List[Tuple[str, exp.Expression, Optional[str]]]  # name, expression, output type
    having: Optional[exp.Expression]
    recompute_columns: List[exp.Column] = field(default_factory=list)

    @property
    def is_global(self) -> bool:
        return not self.groups

    @property
    def group_names(self) -> List[str]:
        return [group_column(k) for k in range(len(self.groups))]
