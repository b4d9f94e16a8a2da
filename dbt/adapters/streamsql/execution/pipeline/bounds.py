"""Key bounds with literal values, so that Delta skips the files a change cannot touch.

The planner leaves a placeholder where a join term may bound another source by the change's key
range (planning/bounds.py, `KeyBound`); state reads and MERGEs are bounded by the changed
groups' key ranges (`key_ranges`). Here the change's MIN and MAX are computed (one query) and
written into the predicate as literals: Delta skips files by comparing literals with its file
statistics, never by a subquery. A first step reads every input in full, so it is not bounded.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from dbt.adapters.streamsql.execution.context import StepContext
from dbt.adapters.streamsql.execution.engine import statements as sql
from dbt.adapters.streamsql.execution.engine.sql_session import measured
from dbt.adapters.streamsql.execution.pipeline.inputs import describe_rows
from dbt.adapters.streamsql.planning.plan import Column, KeyBound


def bind_bounds(
    ctx: StepContext, bounds: Sequence[KeyBound], used_by: str, first_step: bool
) -> None:
    """Bind each key bound `used_by` holds to its predicate, with the change's MIN/MAX as
    literals (one query for all of them); on a first step, to `true`."""
    bounds = [bound for bound in bounds if bound.name in used_by]
    if not bounds:
        return
    if first_step:
        predicates = ["true"] * len(bounds)
    else:
        predicates = bound_predicates(ctx, bounds)
    for bound, predicate in zip(bounds, predicates):
        ctx.bindings.set(bound.name, predicate)


def bound_predicates(ctx: StepContext, bounds: Sequence[KeyBound]) -> List[str]:
    """Each bound's predicate with its value computed now, as a literal (one query)."""
    values = ctx.bindings.bind(sql.bound_values(bounds))
    with ctx.role("key bounds: the types of the change's MIN and MAX"):
        types = [row["data_type"] for row in describe_rows(ctx.session, f"DESCRIBE QUERY {values}")]
    with ctx.role("key bounds: the change's MIN and MAX, as literals"):
        texts = ctx.session.query(sql.bound_texts(values, types))[0]
    return [sql.bound_predicate(bound, texts[f"v{i}"], types[i]) for i, bound in enumerate(bounds)]


def key_ranges(
    ctx: StepContext,
    columns: Sequence[Column],
    change: str,
    alias: str,
    also: Optional[Dict[str, str]] = None,
    first_step: bool = False,
) -> Tuple[List[str], Dict[str, Any]]:
    """Predicates over rows aliased `alias` holding every key a change holds (NULLs too).

    For each key column with an orderable part (`statements.orderable_part`): its range over
    `change`, as literals, so that Delta skips the files of keys the change does not touch.
    One query, which also computes `also` (name -> aggregate expression over the change,
    aliased `alias`) and returns their values. A first step's change is every row: no range.
    Where the change is computed by the step, `range_measures` and `ranges_from` measure it in
    the pass that computes it instead (`StepViews.materialize`'s measures).
    """
    measures = range_measures(columns, alias, also, first_step)
    if not measures:
        return [], {}
    row = ctx.session.query(measured(change, measures, alias))[0]
    return ranges_from(columns, alias, row, first_step), {name: row[name] for name in also or {}}


def range_measures(
    columns: Sequence[Column],
    alias: str,
    also: Optional[Dict[str, str]] = None,
    first_step: bool = False,
) -> Dict[str, str]:
    """The aggregates `key_ranges` computes (name -> expression over rows aliased `alias`)."""
    measures = {} if first_step else sql.range_aggregates(columns, alias)
    measures.update(also or {})
    return measures


def ranges_from(
    columns: Sequence[Column], alias: str, row: Dict[str, Any], first_step: bool = False
) -> List[str]:
    """`key_ranges`' predicates from the values of its `range_measures`."""
    return [] if first_step else sql.range_predicates(columns, alias, row)
