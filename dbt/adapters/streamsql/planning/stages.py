"""Aggregates below the top of a query, maintained as stages of one step.

The delta rules of the fast paths maintain one aggregate, at the top of a query. An aggregate
block anywhere else (in a derived table joined with other sources, below another aggregate, in a
UNION ALL branch) is maintained on its own instead, as an aggregate plan with a state table of its
own: a *stage*. The planner lifts each such block out of the query and puts, in its place, a
reference to one more input: the stage's result. The rest of the query then reads the stage
through the same placeholders as a real input (its result as of the previous step, as of this
step, and the change between the two), and the executor computes each stage's change before
anything that reads it, innermost stages first.

Identical blocks (a CTE used twice is inlined twice) become one stage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

from sqlglot import exp

from dbt.adapters.streamsql.planning.aggregates.analysis import is_aggregate_select
from dbt.adapters.streamsql.planning.binding import INPUT_DB, bound_input, input_table_name
from dbt.adapters.streamsql.planning.plan import DIALECT
from dbt.adapters.streamsql.planning.windows import windows_of

STAGE_ALIAS = "_streamsql_stage"


@dataclass
class LiftedStage:
    """An aggregate block lifted out of the query; the query reads it as input `position`."""

    position: int
    query: exp.Query  # the block over inputs and earlier stages (positions below `position`)
    names: List[str]  # its result columns, as the query refers to them

    def standalone(self, stages: Sequence["LiftedStage"]) -> exp.Query:
        """The block over real inputs only: every stage it reads put back as a derived table."""
        return inline_stages(self.query, stages)


def is_aggregate_block(query: exp.Expression) -> bool:
    """A block only an aggregate plan maintains: GROUP BY / DISTINCT / aggregates, or UNION."""
    if isinstance(query, exp.Union):
        return bool(query.args.get("distinct"))
    return is_aggregate_select(query)


def top_chain(tree: exp.Expression) -> List[exp.Expression]:
    """The blocks the top-level aggregate plan maintains itself (empty for a linear query).

    That is the aggregate block at the top, or reached from the top through projections and
    filters over one derived table each (what `AggregatePlanner` accepts), plus those projections.
    """
    if isinstance(tree, exp.Union):
        return [tree] if tree.args.get("distinct") else []
    chain: List[exp.Expression] = []
    node: exp.Expression = tree
    while isinstance(node, exp.Select):
        chain.append(node)
        if is_aggregate_select(node):
            return chain
        from_ = node.args.get("from_")
        if from_ is None or node.args.get("joins") or node.args.get("laterals"):
            return []
        if not isinstance(from_.this, exp.Subquery) or windows_of(node):
            return []  # a window over the groups reads them all: the aggregate is a stage
        node = from_.this.this
    return []


def lift_stages(tree: exp.Query, first_position: int, keep_top: bool = True) -> List[LiftedStage]:
    """Lifts every aggregate block below the top out of `tree` (in place), innermost first;
    with `keep_top` false, the top's aggregate too (a LIMIT above it, global_top_k.py).

    Stage k is read as input `first_position + k`. Returns the stages in the order they must be
    maintained (a stage only reads inputs and stages before it).
    """
    kept = {id(node) for node in top_chain(tree)} if keep_top else set()
    stages: List[LiftedStage] = []
    by_text: Dict[str, LiftedStage] = {}
    for block in sorted(_liftable_blocks(tree, kept), key=_depth, reverse=True):
        text = block.sql(DIALECT)
        stage = by_text.get(text)
        if stage is None:
            stage = LiftedStage(first_position + len(stages), block.copy(), _result_names(block))
            stages.append(stage)
            by_text[text] = stage
        _replace_with_stage(block, stage)
    return stages


def _liftable_blocks(tree: exp.Expression, kept: set) -> List[exp.Expression]:
    blocks = []
    for node in tree.walk():
        if id(node) in kept or not is_aggregate_block(node):
            continue
        parent = node.parent
        in_from = isinstance(parent, exp.Subquery) and isinstance(
            parent.parent, (exp.From, exp.Join)
        )
        in_union_all = isinstance(parent, exp.Union) and not parent.args.get("distinct")
        in_union_distinct = isinstance(parent, exp.Union) and parent.args.get("distinct")
        if isinstance(node, exp.Select) and (in_union_all or in_union_distinct):
            blocks.append(node)
        elif in_from:
            blocks.append(node)
    return blocks


def _result_names(block: exp.Expression) -> List[str]:
    parent = block.parent
    alias = parent.args.get("alias") if isinstance(parent, exp.Subquery) else None
    if alias is not None and alias.columns:
        return [column.name for column in alias.columns]
    first = block
    while isinstance(first, exp.SetOperation):
        first = first.this
    return [projection.alias_or_name for projection in first.expressions]


def _stage_table(stage: LiftedStage, alias: str) -> exp.Table:
    return exp.Table(
        this=exp.to_identifier(input_table_name(stage.position)),
        db=exp.to_identifier(INPUT_DB),
        alias=exp.TableAlias(this=exp.to_identifier(alias)),
    )


def _replace_with_stage(block: exp.Expression, stage: LiftedStage) -> None:
    parent = block.parent
    if isinstance(parent, exp.Subquery):  # a derived table: the stage under the same alias
        parent.replace(_stage_table(stage, parent.alias_or_name))
        return
    # a UNION branch: a block that passes the stage's rows through
    alias = f"{STAGE_ALIAS}{stage.position}"
    block.replace(
        exp.Select(
            expressions=[exp.column(name, table=alias) for name in stage.names],
            from_=exp.From(this=_stage_table(stage, alias)),
        )
    )


def inline_stages(node: exp.Expression, stages: Sequence[LiftedStage]) -> exp.Expression:
    """A copy of `node` reading real inputs only: each stage reference becomes its block again."""
    by_position = {stage.position: stage for stage in stages}
    copy = node.copy()
    for table in list(copy.find_all(exp.Table)):
        position = bound_input(table)
        stage: Optional[LiftedStage] = by_position.get(position) if position is not None else None
        if stage is None:
            continue
        alias = exp.TableAlias(
            this=exp.to_identifier(table.alias_or_name),
            columns=[exp.to_identifier(n) for n in stage.names],
        )
        table.replace(exp.Subquery(this=inline_stages(stage.query, stages), alias=alias))
    return copy


def _depth(node: exp.Expression) -> int:
    depth = 0
    while node.parent is not None:
        node, depth = node.parent, depth + 1
    return depth
