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
from typing import Optional

from sqlglot import exp

from dbt.adapters.streamsql.planning.aggregates.analysis import is_aggregate_select
from dbt.adapters.streamsql.planning.bounds import aliases_of
from dbt.adapters.streamsql.planning.calls import contains_aggregate
from dbt.adapters.streamsql.planning.subqueries import SCALAR_PREFIX, defined_aliases
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
            query = _one_row_aggregate(node)
            if query is None:
                continue
            alias = f"{SCALAR_PREFIX}{next(numbers)}"
            value = query.copy()
            value.set("expressions", [exp.alias_(value.expressions[0].unalias(), VALUE)])
            derived = exp.Subquery(this=value, alias=exp.TableAlias(this=exp.to_identifier(alias)))
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


def _one_row_aggregate(node: exp.Subquery) -> Optional[exp.Select]:
    """The subquery's SELECT if it returns exactly one row and reads nothing of the outer query."""
    query = node.this
    if not isinstance(query, exp.Select) or len(query.expressions) != 1:
        return None
    if any(
        query.args.get(k) for k in ("group", "having", "distinct", "limit", "offset", "qualify")
    ):
        return None
    if not contains_aggregate(query.expressions[0]) or list(query.find_all(exp.Window)):
        return None
    if query.args.get("from_") is None or aliases_of(query) - {""} - defined_aliases(query):
        return None  # correlated (or reads no table)
    return query
