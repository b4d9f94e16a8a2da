"""Recognizing the SQL constructs that decide between a fast path and recompute."""

from __future__ import annotations

from typing import Optional

from sqlglot import exp

from dbt.adapters.streamsql.planning.calls import (
    contains_aggregate,
    function_name,
)
from dbt.adapters.streamsql.planning.errors import RecomputeRequired
from dbt.adapters.streamsql.planning.functions import (
    BUILTIN_FUNCTIONS,
    NON_PER_ROW_GROUPINGS,
    NONDETERMINISTIC_FUNCTIONS,
)
from dbt.adapters.streamsql.planning.windows import window_obstacle

# sqlglot classes for nondeterministic functions (their Spark spelling may differ from the class).
_NONDETERMINISTIC_CLASSES = tuple(
    getattr(exp, name)
    for name in (
        "Rand",
        "Randn",
        "Randstr",
        "Uniform",
        "Uuid",
        "Shuffle",
        "CurrentTimestamp",
        "CurrentDate",
        "CurrentTime",
        "Localtimestamp",
        "CurrentUser",
        "CurrentSchema",
        "CurrentCatalog",
        "CurrentTimezone",
        "SessionUser",
        "CurrentDatabase",
    )
    if hasattr(exp, name)
)


_SCALAR = (
    "scalar subquery other than an aggregate without GROUP BY (correlated by equalities only), "
    "read in a WHERE or in the projections of a block without aggregates or windows, is not "
    "maintained incrementally"
)


def nonlinear_construct(tree: exp.Expression) -> Optional[str]:
    """Why no fast path can maintain `tree`, whatever its shape; None when nothing stands in the
    way.

    Looks for: nondeterministic or user-defined functions, window functions other than top-K
    blocks (windows.py), subquery expressions left after subqueries.py made joins of the WHERE
    conjuncts it maintains (IN/EXISTS elsewhere, scalar subqueries), LIMIT/OFFSET, TABLESAMPLE,
    PIVOT, lateral subqueries, session windows and time travel.
    """
    for node in tree.walk():
        if isinstance(node, exp.Window):
            reason = window_obstacle(node)
            if reason:
                return reason
        if isinstance(node, (exp.Limit, exp.Offset, exp.Fetch)):
            return f"{node.key.upper()} is not maintained incrementally"
        if isinstance(node, exp.TableSample):
            return "TABLESAMPLE is not maintained incrementally"
        if isinstance(node, (exp.Pivot,)):
            return "PIVOT/UNPIVOT is not maintained incrementally"
        if isinstance(node, exp.Table) and (node.args.get("version") or node.args.get("when")):
            return "time travel (VERSION/TIMESTAMP AS OF) is not maintained incrementally"
        if isinstance(node, exp.Lateral) and not isinstance(node.this, exp.Func):
            return "lateral subquery is not maintained incrementally"
        in_subquery = isinstance(node, exp.In) and node.args.get("query") is not None
        if isinstance(node, exp.Exists) or in_subquery:
            what = "EXISTS" if isinstance(node, exp.Exists) else "IN (subquery)"
            return (
                f"{what} other than a condition ANDed into a WHERE clause (under OR, NOT, "
                "CASE, in a projection or join condition) is not maintained incrementally"
            )
        if isinstance(node, exp.Subquery) and not isinstance(node.parent, (exp.From, exp.Join)):
            return _SCALAR
        if (
            isinstance(node, exp.Query)
            and not isinstance(node, exp.Subquery)
            and node.parent is not None
            and not isinstance(node.parent, (exp.Subquery, exp.SetOperation, exp.CTE, exp.With))
        ):
            return _SCALAR
        if isinstance(node, exp.Func):
            reason = _function_obstacle(node)
            if reason:
                return reason
    return None


def _function_obstacle(node: exp.Func) -> Optional[str]:
    name = function_name(node)
    if isinstance(node, _NONDETERMINISTIC_CLASSES) or name in NONDETERMINISTIC_FUNCTIONS:
        return f"nondeterministic function {name}() is not maintained incrementally"
    if name in NON_PER_ROW_GROUPINGS:
        return f"{name}() merges rows across changes and is not maintained incrementally"
    if isinstance(node, exp.GroupConcat):
        # sqlglot does not render Spark's listagg/string_agg faithfully (default delimiter).
        return f"{name}() is not maintained incrementally"
    if isinstance(node, exp.Anonymous) and name not in BUILTIN_FUNCTIONS:
        return f"user-defined function {name}() may be nondeterministic or an aggregate"
    return None


def require_linear_select(select: exp.Select) -> None:
    """Raises RecomputeRequired when a SELECT block is not a plain projection/filter/join."""
    if select.args.get("group") or select.args.get("having"):
        raise RecomputeRequired(
            "GROUP BY below the top of the query is not maintained incrementally"
        )
    if select.args.get("distinct"):
        raise RecomputeRequired(
            "DISTINCT below the top of the query is not maintained incrementally"
        )
    for projection in select.expressions:
        if contains_aggregate(projection):
            raise RecomputeRequired(
                "an aggregate below the top of the query is not maintained incrementally"
            )
    for key in ("qualify", "connect", "prewhere", "match"):
        if select.args.get(key):
            raise RecomputeRequired(f"{key.upper()} is not maintained incrementally")


def drop_ordering(tree: exp.Expression) -> exp.Expression:
    """Removes ORDER BY / SORT BY / DISTRIBUTE BY / CLUSTER BY of query blocks.

    They do not change a query's result as a multiset (LIMIT/OFFSET, which would, are rejected
    separately before this runs).
    """
    for node in list(tree.find_all(exp.Select, exp.Union, exp.Subquery)):
        for key in ("order", "sort", "distribute", "cluster"):
            if node.args.get(key) is not None:
                node.set(key, None)
    return tree
