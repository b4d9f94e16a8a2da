"""Recognizing function calls: the name Spark knows a call by, and which calls are aggregates.

The lowest layer of the checks on a query's constructs: windows.py and constructs.py (and the
aggregate rules) build on it, and it imports neither.
"""

from __future__ import annotations

from typing import Iterator

from sqlglot import exp

from dbt.adapters.streamsql.planning.functions import AGGREGATE_FUNCTIONS
from dbt.adapters.streamsql.planning.plan import DIALECT


def function_name(node: exp.Func) -> str:
    """The name Spark knows a function call by, lower case (e.g. "collect_list", "window")."""
    if isinstance(node, exp.Anonymous):
        return node.name.lower()
    rendered = node.sql(DIALECT)
    return rendered.split("(", 1)[0].strip().lower()


def is_aggregate_call(node: exp.Expression) -> bool:
    """An aggregate function call, possibly wrapped in FILTER (WHERE ...); not a window call."""
    if isinstance(node, exp.Filter):
        return is_aggregate_call(node.this)
    if isinstance(node.parent, exp.Window) and node.arg_key == "this":
        return False
    if isinstance(node, exp.AggFunc):
        return True
    return isinstance(node, exp.Anonymous) and node.name.lower() in AGGREGATE_FUNCTIONS


def aggregate_calls(node: exp.Expression) -> Iterator[exp.Expression]:
    """Outermost aggregate calls in `node`, not looking into subqueries."""
    if is_aggregate_call(node):
        yield node
        return
    if isinstance(node, exp.Query):
        return
    for child in node.iter_expressions():
        yield from aggregate_calls(child)


def contains_aggregate(node: exp.Expression) -> bool:
    return next(aggregate_calls(node), None) is not None
