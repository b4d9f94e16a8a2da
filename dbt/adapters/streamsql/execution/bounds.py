"""Key bounds with literal values, so that Delta skips the files a change cannot touch.

The planner leaves a placeholder where a join term may bound another source by the change's key
range (planning/bounds.py, `KeyBound`); state reads and MERGEs are bounded by the changed
groups' key ranges (`key_ranges`). Here the change's MIN and MAX are computed (one query) and
written into the predicate as literals: Delta skips files by comparing literals with its file
statistics, never by a subquery. A first step reads every input in full, so it is not bounded.
"""

from __future__ import annotations

from typing import Dict, List, Mapping, Sequence

from dbt.adapters.streamsql.execution import statements as sql
from dbt.adapters.streamsql.execution.context import StepContext
from dbt.adapters.streamsql.execution.inputs import describe_rows
from dbt.adapters.streamsql.planning.plan import Column, KeyBound


def bind_bounds(ctx: StepContext, bounds: Sequence[KeyBound], used_by: str,
                views: Dict[str, str]) -> None:
    """Put the predicate of each key bound `used_by` holds into `views`, with the change's
    MIN/MAX as literals."""
    bounds = [bound for bound in bounds if bound.name in used_by]
    if not bounds:
        return
    if ctx.first_step:
        views.update({bound.name: "true" for bound in bounds})
        return
    views.update(zip((bound.name for bound in bounds), bound_predicates(ctx, bounds, views)))


def bound_predicates(ctx: StepContext, bounds: Sequence[KeyBound],
                     views: Mapping[str, str]) -> List[str]:
    """Each bound's predicate with its value computed now, as a literal (one query)."""
    values = sql.bind_placeholders(sql.bound_values(bounds), views)
    types = [row["data_type"] for row in describe_rows(ctx.session, f"DESCRIBE QUERY {values}")]
    texts = ctx.session.query(sql.bound_texts(values, types))[0]
    return [sql.bound_predicate(bound, texts[f"v{i}"], types[i])
            for i, bound in enumerate(bounds)]


def key_ranges(ctx: StepContext, columns: Sequence[Column], change: str, alias: str) -> List[str]:
    """Predicates over rows aliased `alias` holding every key a change holds (NULLs too).

    For each key column with an orderable part (`statements.orderable_part`): its range over
    `change`, as literals, so that Delta skips the files of keys the change does not touch.
    """
    parts = [(sql.orderable_part(c, alias), sql.orderable_part(c)) for c in columns]
    parts = [(outer, inner) for outer, inner in parts if outer is not None]
    if ctx.first_step or not parts:
        return []
    bounds = []
    for outer, inner in parts:
        bounds += [KeyBound("", outer, ">=", f"(SELECT MIN({inner}) FROM {change})"),
                   KeyBound("", outer, "<=", f"(SELECT MAX({inner}) FROM {change})")]
    predicates = bound_predicates(ctx, bounds, {})
    return [sql.key_range(outer, predicates[2 * i], predicates[2 * i + 1])
            for i, (outer, _) in enumerate(parts)]
