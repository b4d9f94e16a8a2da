"""Uncorrelated scalar subqueries as a one-row stage joined to the block that uses them.

`where v > (select avg(v) from t)` reads one value, the same for every row of the block. When
the subquery is an aggregate without GROUP BY (and without HAVING), it returns exactly one row
whatever its input holds, so the block may as well CROSS JOIN it and read the value as a column:

    SELECT ... FROM a WHERE a.v > (SELECT avg(v) FROM t)
    SELECT ... FROM a CROSS JOIN (SELECT avg(v) AS _streamsql_value FROM t) AS _streamsql_scalar0
        WHERE a.v > _streamsql_scalar0._streamsql_value

The derived table is a global aggregate below a join, so it becomes a stage (stages.py) and the
join's delta rules do the rest: a step whose change leaves the value as it was joins only the
block's change with it; a step that changes the value re-evaluates every row of the block that
reads it (the old value's rows out, the new value's in), as a rebuild would. The plan's reason
names the construct ("scalar subquery").

Rewritten where the value is read: in the block's WHERE, or in its projections when the block is
not an aggregate (the joined column would have to be grouped), and never in a block with window
functions. Everything else stays a recompute (nonlinear_construct says "scalar subquery"):
a correlated subquery, one with GROUP BY, HAVING, DISTINCT, LIMIT or a window (zero or several
rows are possible, or Spark's error for them), one that is not an aggregate, and one read in
HAVING, GROUP BY, ORDER BY or a join's ON.
"""

from __future__ import annotations

import itertools
from typing import List, Optional, Tuple

from sqlglot import exp

from dbt.adapters.streamsql.planning.aggregates.analysis import is_aggregate_select
from dbt.adapters.streamsql.planning.bounds import aliases_of, conjuncts
from dbt.adapters.streamsql.planning.calls import (
    contains_aggregate,
    function_name,
    is_aggregate_call,
)
from dbt.adapters.streamsql.planning.subqueries import (
    SCALAR_PREFIX,
    correlation_pair,
    defined_aliases,
    key_column,
    sources_of,
)
from dbt.adapters.streamsql.planning.windows import windows_of

VALUE = "_streamsql_value"


def rewrite(tree: exp.Expression) -> None:
    """Replaces each scalar subquery it can by a column of a CROSS JOINed one-row derived table
    (in place; innermost blocks first)."""
    numbers = itertools.count()
    for select in reversed(list(tree.find_all(exp.Select))):
        if select.args.get("from_") is None:
            continue
        for node in list(select.find_all(exp.Subquery)):
            if node.parent_select is not select or _place(node, select) is None:
                continue
            query = _aggregate_of(node)
            if query is None:
                continue
            alias = f"{SCALAR_PREFIX}{next(numbers)}"
            if _is_correlated(query):
                joined = _grouped_by_correlation(query, select, alias)
                if joined is None:
                    continue
                join, empty = joined
                select.append("joins", join)
                value: exp.Expression = exp.column(VALUE, table=alias)
                node.replace(exp.func("coalesce", value, empty) if empty is not None else value)
                continue
            one_row = query.copy()
            one_row.set("expressions", [exp.alias_(one_row.expressions[0].unalias(), VALUE)])
            derived = exp.Subquery(
                this=one_row, alias=exp.TableAlias(this=exp.to_identifier(alias))
            )
            select.append("joins", exp.Join(this=derived, kind="CROSS"))
            node.replace(exp.column(VALUE, table=alias))


def _place(node: exp.Subquery, select: exp.Select) -> Optional[str]:
    """Where in `select` the subquery `node` is read, if `rewrite` may join it there."""
    if isinstance(node.parent, (exp.From, exp.Join, exp.In, exp.Exists, exp.Lateral)):
        return None  # a derived table, or IN / EXISTS (subqueries.py)
    if windows_of(select):
        return None  # a window block: the value would reach every partition through the join
    child: exp.Expression = node
    while child.parent is not select:
        child = child.parent
    if child.arg_key == "where":
        return "where"
    if child.arg_key == "expressions" and not is_aggregate_select(select):
        return "expressions"
    return None


def _aggregate_of(node: exp.Subquery) -> Optional[exp.Select]:
    """The subquery's SELECT if it is one aggregate value over a table, without GROUP BY: one row
    (uncorrelated), or one row per outer row (correlated)."""
    query = node.this
    if not isinstance(query, exp.Select) or len(query.expressions) != 1:
        return None
    if any(
        query.args.get(k) for k in ("group", "having", "distinct", "limit", "offset", "qualify")
    ):
        return None
    if not contains_aggregate(query.expressions[0]) or list(query.find_all(exp.Window)):
        return None
    if query.args.get("from_") is None:
        return None
    return query


def _is_correlated(query: exp.Select) -> bool:
    return bool(aliases_of(query) - {""} - defined_aliases(query))


# what a correlated subquery's aggregate gives over no rows, where it is not NULL
_OVER_NO_ROWS = {"count": 0}
_NULL_OVER_NO_ROWS = ("sum", "avg", "mean", "min", "max")


def _grouped_by_correlation(
    query: exp.Select, select: exp.Select, alias: str
) -> Optional[Tuple[exp.Join, Optional[exp.Expression]]]:
    """A correlated aggregate `(select agg(...) from s where s.k = o.k and <s only>)` as a LEFT
    JOIN of `select k, agg(...) from s where <s only> group by k` on the correlation equalities,
    and the value to read where no row matches (COUNT's 0); None where that is not exact: other
    aggregates than COUNT/SUM/AVG/MIN/MAX as the whole value, a correlation other than equalities
    in its WHERE, or one reaching further out than `select`."""
    value = query.expressions[0].unalias()
    if not is_aggregate_call(value) or isinstance(value, exp.Filter):
        return None
    name = function_name(value)
    if name not in _OVER_NO_ROWS and name not in _NULL_OVER_NO_ROWS:
        return None
    inner = defined_aliases(query)
    outer = {source.alias_or_name for source in sources_of(select)}
    if not aliases_of(query) - {""} - inner <= outer:
        return None
    where = query.args.get("where")
    keys: List[exp.Expression] = []
    conditions: List[exp.Expression] = []
    remaining: List[exp.Expression] = []
    for part in conjuncts(where.this) if where is not None else []:
        if not aliases_of(part) - {""} - inner:
            remaining.append(part.copy())
            continue
        pair = correlation_pair(part, outer, inner)
        if pair is None:
            return None
        outer_side, inner_side, null_safe = pair
        if any(inner_side == known for known in keys):
            j = next(i for i, known in enumerate(keys) if inner_side == known)
        else:
            keys.append(inner_side.copy())
            j = len(keys) - 1
        equal = exp.NullSafeEQ if null_safe else exp.EQ
        conditions.append(
            equal(this=outer_side.copy(), expression=exp.column(key_column(j), table=alias))
        )
    if not conditions:
        return None
    grouped = query.copy()
    grouped.set("where", exp.Where(this=exp.and_(*remaining)) if remaining else None)
    grouped.set(
        "expressions",
        [exp.alias_(k.copy(), key_column(j)) for j, k in enumerate(keys)]
        + [exp.alias_(value.copy(), VALUE)],
    )
    grouped.set("group", exp.Group(expressions=[k.copy() for k in keys]))
    derived = exp.Subquery(this=grouped, alias=exp.TableAlias(this=exp.to_identifier(alias)))
    join = exp.Join(this=derived, side="LEFT", on=exp.and_(*conditions))
    empty = _OVER_NO_ROWS.get(name)
    return join, (exp.Literal.number(empty) if empty is not None else None)
