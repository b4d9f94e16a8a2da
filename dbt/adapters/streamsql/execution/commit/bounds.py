"""Key bounds with literal values, so that Delta skips the files a change cannot touch.

The planner leaves a placeholder where a join term may bound another source by the change's key
range (planning/bounds.py, `KeyBound`); state reads and MERGEs are bounded by the changed
groups' and the model's change's key ranges (`range_measures`, `ranges_from`). Here the change's
MIN and MAX are computed (in the pass that computes the change where the step materializes it,
else one query) and written into the predicate as literals: Delta skips files by comparing
literals with its file statistics, never by a subquery. A first step reads every input in full,
so it is not bounded.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from dbt.adapters.streamsql.execution.context import StepContext
from dbt.adapters.streamsql.execution.engine import statements as sql
from dbt.adapters.streamsql.execution.engine.sql_session import describe_rows
from dbt.adapters.streamsql.planning.plan import WEIGHT, Column, KeyBound

# How the commit's measures name the rows of the model's change.
CHANGE_ALIAS = "t"


def bind_bounds(
    ctx: StepContext, bounds: Sequence[KeyBound], used_by: str, first_step: bool
) -> None:
    """Bind each key bound `used_by` holds to its predicate, with the change's MIN/MAX as
    literals (one query for all of them, one more for gates over them); on a first step, to
    `true`."""
    bounds = [bound for bound in bounds if bound.name in used_by]
    if first_step:
        for bound in bounds:
            ctx.bindings.set(bound.name, "true")
        return
    # A bound whose value reads another's placeholder (global_top_k.py's gate over a change
    # with key bounds) is computed once that one is bound.
    after = [b for b in bounds if any(o.name in b.value for o in bounds if o is not b)]
    for group in ([b for b in bounds if b not in after], after):
        if group:
            for bound, predicate in zip(group, bound_predicates(ctx, group)):
                ctx.bindings.set(bound.name, predicate)


def bound_predicates(ctx: StepContext, bounds: Sequence[KeyBound]) -> List[str]:
    """Each bound's predicate with its value computed now, as a literal (one query)."""
    values = ctx.bindings.bind(sql.bound_values(bounds))
    with ctx.role("key bounds: the types of the change's MIN and MAX"):
        types = [row["data_type"] for row in describe_rows(ctx.session, f"DESCRIBE QUERY {values}")]
    with ctx.role("key bounds: the change's MIN and MAX, as literals"):
        texts = ctx.session.query(sql.bound_texts(values, types))[0]
    return [sql.bound_predicate(bound, texts[f"v{i}"], types[i]) for i, bound in enumerate(bounds)]


def range_measures(
    columns: Sequence[Column],
    alias: str,
    also: Optional[Dict[str, str]] = None,
    first_step: bool = False,
) -> Dict[str, str]:
    """Measures (name -> aggregate expression over rows aliased `alias`) of the range of each
    key column with an orderable part (`statements.orderable_part`) over a change, so that
    Delta skips the files of keys it does not touch (`ranges_from`), and `also`. A first
    step's change is every row: no range. Computed with the pass that computes the change
    (`StepViews.measure`), or by one query over it."""
    measures = {} if first_step else sql.range_aggregates(columns, alias)
    measures.update(also or {})
    return measures


def ranges_from(
    columns: Sequence[Column], alias: str, row: Dict[str, Any], first_step: bool = False
) -> List[str]:
    """Predicates over rows aliased `alias` holding every key the change holds (NULLs too),
    with the values of its `range_measures` as literals."""
    return [] if first_step else sql.range_predicates(columns, alias, row)


def key_columns(columns: Sequence[Column], key: Optional[Sequence[str]]) -> List[Column]:
    """The columns of `key` (names, any case) among `columns`, in the columns' order."""
    if key is None:
        return []
    wanted = {name.lower() for name in key}
    return [c for c in columns if c.name.lower() in wanted]


def change_measures(
    columns: Sequence[Column], key: Optional[Sequence[str]], first_step: bool
) -> Dict[str, str]:
    """What the commit measures over the model's netted change (rows aliased `t`): its
    inserts, deletes and widest weight; for a MERGE by `key`, the range of each key column;
    for a MERGE of whole rows, the range of each column over the rows it deletes (a deleted
    row's copies in the model lie within it)."""
    deleted = sql.range_aggregates(
        columns, CHANGE_ALIAS, where=f"{CHANGE_ALIAS}.{WEIGHT} < 0", name="d"
    )
    also = {**sql.change_count_aggregates(), **deleted}
    return range_measures(key_columns(columns, key), CHANGE_ALIAS, also, first_step)
