"""The aggregate planner: one aggregate model (or stage) in, its `AggregatePlan` and reason out.

Finds the aggregate block (at the top, or under projections and filters over one derived table
each), has it taken apart (analysis.py) and asks for each SQL of the plan: the group delta
(delta.py), the combine with the state (combine.py) and the output (output.py). What is kept
for each aggregate call is its rule's business (kinds.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from sqlglot import exp

from dbt.adapters.streamsql.planning.aggregates.analysis import (
    analyze,
    distinct_over_union,
    is_aggregate_select,
)
from dbt.adapters.streamsql.planning.aggregates.block import AggregateQuery, group_column
from dbt.adapters.streamsql.planning.aggregates.combine import combine_sql, shortcut
from dbt.adapters.streamsql.planning.aggregates.delta import delta_sql
from dbt.adapters.streamsql.planning.aggregates.kinds import RULES
from dbt.adapters.streamsql.planning.aggregates.output import (
    group_outputs,
    key_columns,
    output_sql,
)
from dbt.adapters.streamsql.planning.errors import RecomputeRequired
from dbt.adapters.streamsql.planning.joins.kinds import KEYED_CONSTRUCTS, SCALAR
from dbt.adapters.streamsql.planning.linear import TOP_K, WINDOWS, DeltaBuilder
from dbt.adapters.streamsql.planning.plan import COUNT, DIALECT, FAST_PATH, AggregatePlan, Column
from dbt.adapters.streamsql.planning.stages import top_chain
from dbt.adapters.streamsql.planning.types import TypeOracle


@dataclass
class AggregateResult:
    plan: AggregatePlan
    reason: str


class AggregatePlanner:
    """Plans one aggregate model; see the package's docstring for the state it keeps."""

    def __init__(
        self, oracle: TypeOracle, bound_prefix: str = "", stages_from: Optional[int] = None
    ):
        self._oracle = oracle
        self._builder = DeltaBuilder(
            bound_prefix=bound_prefix, stages_from=stages_from, oracle=oracle
        )
        self.shapes: List[str] = []  # the block's shape, as the reason says it ("distinct", ...)

    def plan(self, tree: exp.Query, output_columns: Sequence[Column]) -> AggregateResult:
        names = [c.name for c in output_columns]
        if isinstance(tree, exp.Union) and tree.args.get("distinct"):
            tree = distinct_over_union(tree, names)
        if not isinstance(tree, exp.Select):
            raise RecomputeRequired(f"{tree.key.upper()} is not maintained incrementally")
        if len(tree.expressions) != len(output_columns):
            raise RecomputeRequired("the query's columns do not match the model's columns")
        query, output = self._plan_select(tree, names, [c.data_type for c in output_columns])
        top_level = is_aggregate_select(tree)
        delta = delta_sql(self._builder, query).sql(DIALECT)
        self._builder.newest = True
        later_delta = delta_sql(self._builder, query).sql(DIALECT)
        self._builder.newest = False
        plan = AggregatePlan(
            group_columns=tuple(query.group_names),
            state_columns=self._state_columns(query),
            delta_sql=delta,
            bounds=tuple(self._builder.bounds.values()),
            later_delta_sql=later_delta if later_delta != delta else None,
            combine_sql=combine_sql(self._builder, query).sql(DIALECT),
            output_sql=output.sql(DIALECT),
            group_outputs=group_outputs(query) if top_level else (),
            key_columns=key_columns(query) if top_level else None,
            **shortcut(self._builder, query),
        )
        return AggregateResult(plan=plan, reason=self._reason(query))

    def _plan_select(
        self, select: exp.Select, names: Sequence[str], types: Sequence[Optional[str]]
    ) -> Tuple[AggregateQuery, exp.Select]:
        """The aggregate block under `select` and the output SQL of `select` over the groups."""
        if is_aggregate_select(select):
            query = analyze(select, names, types, self._oracle, self._builder, self.shapes)
            return query, output_sql(query)
        inner = _single_derived_table(select)
        if inner is None:
            raise RecomputeRequired("an aggregate below a join is not maintained incrementally")
        subquery, inner_select = inner
        inner_names = [p.alias_or_name for p in inner_select.expressions]
        query, inner_output = self._plan_select(
            inner_select, inner_names, [None] * len(inner_names)
        )
        # projection/filter over the aggregate: the same SELECT over the inner output rows
        outer = select.copy()
        alias = subquery.args.get("alias").copy()
        if alias.columns:
            alias.set(
                "columns",
                [c.copy() for c in alias.columns]
                + [exp.to_identifier(g) for g in query.group_names],
            )
        outer.set("from_", exp.From(this=exp.Subquery(this=inner_output, alias=alias)))
        outer.set(
            "expressions",
            [exp.alias_(p.unalias().copy(), name) for p, name in zip(select.expressions, names)]
            + [exp.column(g, table=subquery.alias_or_name) for g in query.group_names],
        )
        return query, outer

    @staticmethod
    def _state_columns(query: AggregateQuery) -> Tuple[Column, ...]:
        columns = [Column(group_column(k), t) for k, t in enumerate(query.group_types)]
        columns.append(Column(COUNT, "bigint"))
        for call in query.calls:
            columns += call.rule.state_columns(call)
        return tuple(columns)

    def _reason(self, query: AggregateQuery) -> str:
        shape = ", ".join(self.shapes) if self.shapes else "group by"
        used = [rule for rule in RULES if any(c.rule is rule for c in query.calls)]
        kept = [rule.label for rule in used if rule.maintained]
        detail = f"{shape} ({', '.join(dict.fromkeys(kept))})" if kept else shape
        notes = [rule.note([c for c in query.calls if c.rule is rule]) for rule in used]
        notes = [note for note in dict.fromkeys(notes) if note]
        below = [c for c in KEYED_CONSTRUCTS + (SCALAR,) if c in self._builder.constructs]
        below += sorted(c for c in self._builder.constructs if c.startswith((TOP_K, WINDOWS)))
        if below:
            notes.append(f"over {', '.join(below)}")
        return FAST_PATH + "; ".join([detail] + notes)


def _single_derived_table(select: exp.Select) -> Optional[Tuple[exp.Subquery, exp.Select]]:
    """The one derived table `select` reads, when it is an aggregate block or leads to one
    through projections (`stages.top_chain`, the chain the top's aggregate plan keeps)."""
    chain = top_chain(select)
    if len(chain) < 2:
        return None
    return select.args["from_"].this, chain[1]
