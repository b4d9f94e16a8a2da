"""Which model columns carry a stage's group value to every row the stage feeds.

A stage (an aggregate below the top of the query, stages.py) keeps the state of every group it
ever saw. LATENESS judges the model's rows, not a stage's; but where a model column L is, on
every model row that a stage's group g contributes to, the value of one of g's group columns G,
a group with G below the waterline of L only ever feeds rows that are final: every later change
to g is late. Its state then serves only to describe such a change in `__late`, as the top
aggregate's state of a final group does, and a compaction may drop it (commit/tables.py).

That holds when the stage is read only through its change, and every path from it to the model
keeps G as it is:

    select window_start, count(*) as keys, max(c) as busiest            -- a top aggregate
    from (select window(ts, '1 hour').start as window_start, k, count(*) as c
          from events group by window(ts, '1 hour'), k) group by window_start

    select window_start, k, n from (select ... group by window_start, k)   -- UNION ALL branches,
    union all select window_start, null, n from (select ... group by window_start)  -- grouping sets

Projections, filters, aggregates that group by the column, and UNION ALL branches keep it; a
join does not (the other side's change meets the stage's old rows, those of final groups
included, and its late rows must reach `__late`), nor does anything that reads the stage's rows
before or after the step rather than its change (a window over it, a global top-K, a join, a
stage above it): `lateness_through` returns nothing for such a stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

from sqlglot import exp

from dbt.adapters.streamsql.planning.binding import bound_input
from dbt.adapters.streamsql.planning.plan import new_input, old_input

# (model column, stage column) pairs of one stage
Through = Tuple[Tuple[str, str], ...]


@dataclass
class _Trace:
    """What a query passes on: per output column, the stage column (by stage position) whose
    value it has on every row derived from that stage; the stages it reads; those it does not
    read only along such paths."""

    columns: List[Dict[int, str]]
    reads: Set[int] = field(default_factory=set)
    spoiled: Set[int] = field(default_factory=set)


def lateness_through(
    tree: exp.Expression, output_names: Sequence[str], stage_positions: Iterable[int]
) -> Dict[int, Through]:
    """Per stage position read by the top of `tree` (a bound tree with its stages lifted), the
    model columns that carry one of its columns unchanged, as (model column, stage column)."""
    positions = set(stage_positions)
    traced = _trace(tree, positions)
    if traced is None or len(traced.columns) != len(output_names):
        return {}
    found: Dict[int, List[Tuple[str, str]]] = {}
    for name, sources in zip(output_names, traced.columns):
        for position, column in sources.items():
            if position not in traced.spoiled:
                found.setdefault(position, []).append((name, column))
    return {position: tuple(pairs) for position, pairs in found.items()}


def read_only_as_change(position: int, texts: Iterable[Optional[str]]) -> bool:
    """Whether none of `texts` (the SQL of the plan's other parts) reads the stage at
    `position` as of before or after the step: only its change."""
    placeholders = (old_input(position), new_input(position))
    return not any(text and any(p in text for p in placeholders) for text in texts)


def _stage_tables(node: exp.Expression, positions: Set[int]) -> Set[int]:
    found = set()
    for table in node.find_all(exp.Table):
        position = bound_input(table)
        if position in positions:
            found.add(position)
    return found


def _trace(node: exp.Expression, positions: Set[int]) -> Optional[_Trace]:
    if isinstance(node, exp.Subquery):
        return _trace(node.this, positions)
    if isinstance(node, exp.Union):  # ALL or DISTINCT: a row keeps its branch row's values
        left, right = _trace(node.this, positions), _trace(node.expression, positions)
        if left is None or right is None or len(left.columns) != len(right.columns):
            return None
        columns = []
        for one, other in zip(left.columns, right.columns):
            merged = {p: c for p, c in one.items() if p not in right.reads or other.get(p) == c}
            merged.update(
                {p: c for p, c in other.items() if p not in left.reads or one.get(p) == c}
            )
            columns.append(merged)
        return _Trace(columns, left.reads | right.reads, left.spoiled | right.spoiled)
    if isinstance(node, exp.Select):
        return _trace_select(node, positions)
    return None  # INTERSECT / EXCEPT are aggregates by now; anything else: nothing known


def _trace_select(select: exp.Select, positions: Set[int]) -> Optional[_Trace]:
    everything = _stage_tables(select, positions)
    from_ = select.args.get("from_")
    source = from_.this if from_ is not None else None
    if source is None or select.args.get("joins") or select.args.get("laterals"):
        # a join: no stage it reads keeps its values apart from the other side's
        return _Trace([{} for _ in select.expressions], everything, everything)
    if isinstance(source, exp.Table):
        position = bound_input(source)
        inner = None if position not in positions else position
        reads = {position} if inner is not None else set()
        available: "_TableColumns | _DerivedColumns" = _TableColumns(source.alias_or_name, inner)
    elif isinstance(source, exp.Subquery):
        traced = _trace(source.this, positions)
        if traced is None:
            return _Trace([{} for _ in select.expressions], everything, everything)
        reads = traced.reads
        available = _DerivedColumns(source, traced)
    else:
        return _Trace([{} for _ in select.expressions], everything, everything)
    # a stage read elsewhere in this block (a subquery in WHERE or in the SELECT list)
    spoiled = (everything - reads) | available.spoiled
    columns = [available.of(projection.unalias()) for projection in select.expressions]
    return _Trace(columns, everything, spoiled)


class _TableColumns:
    """The columns of one table in FROM: each a stage column as it is, for a stage."""

    def __init__(self, alias: str, position: Optional[int]) -> None:
        self.alias, self.position = alias, position
        self.spoiled: Set[int] = set()

    def of(self, expression: exp.Expression) -> Dict[int, str]:
        if self.position is None or not isinstance(expression, exp.Column):
            return {}
        if expression.table and expression.table != self.alias:
            return {}
        return {self.position: expression.name}


class _DerivedColumns:
    """The columns of a derived table in FROM, by its column names."""

    def __init__(self, source: exp.Subquery, traced: _Trace) -> None:
        self.alias = source.alias_or_name
        alias = source.args.get("alias")
        names = [c.name for c in alias.columns] if alias is not None and alias.columns else []
        if not names:
            names = [p.alias_or_name for p in _first_select(source.this).expressions]
        self.by_name = dict(zip([n.lower() for n in names], traced.columns))
        self.spoiled = traced.spoiled

    def of(self, expression: exp.Expression) -> Dict[int, str]:
        if not isinstance(expression, exp.Column):
            return {}
        if expression.table and expression.table != self.alias:
            return {}
        return dict(self.by_name.get(expression.name.lower(), {}))


def _first_select(query: exp.Expression) -> exp.Select:
    while isinstance(query, (exp.SetOperation, exp.Subquery)):
        query = query.this
    return query  # type: ignore[return-value]
