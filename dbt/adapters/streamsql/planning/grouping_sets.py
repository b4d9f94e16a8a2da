"""ROLLUP, CUBE and GROUPING SETS as a UNION ALL of one GROUP BY per grouping set.

`GROUP BY ROLLUP(a, b)` is `GROUP BY a, b`, `GROUP BY a` and the grand total, stacked; in each
the grouping expressions it leaves out read as NULL (outside aggregate calls: `sum(b)` still sums
b), `grouping(b)` is 1 where b is left out, and `grouping_id()` is the bits of `grouping()` over
all grouping expressions, the first one highest. So a top-level block

    SELECT a, b, sum(x) AS s, grouping_id() AS g FROM t WHERE ... GROUP BY ROLLUP(a, b) HAVING ...

is rewritten as

    SELECT a, b, sum(x) AS s, 0 AS g FROM t WHERE ... GROUP BY a, b HAVING ...
    UNION ALL SELECT a, CAST(NULL AS <b's type>) AS b, sum(x) AS s, 1 AS g ... GROUP BY a ...
    UNION ALL SELECT CAST(NULL AS <a's type>) AS a, ..., 3 AS g ... (no GROUP BY: one row)

and each branch is an aggregate stage of its own (stages.py) over the same change: a step costs
one aggregate per grouping set. The sets are those Spark forms: each GROUP BY element gives its
sets (a plain expression one, ROLLUP(x1..xn) n+1, CUBE(x1..xn) 2^n, GROUPING SETS its list; a
parenthesized tuple counts as one element), and the block groups by their cross product, as
`GROUP BY c, ROLLUP(a, b)` does; `WITH ROLLUP` / `WITH CUBE` apply to the plain list. The grand
total's branch is a global aggregate with `HAVING count(*) > 0`: over no input rows Spark gives no
row for any set, the grand total included.

Only the top block of a query is rewritten (the NULLs take the model's column types); elsewhere,
and with DISTINCT or LIMIT, the block stays a recompute.
"""

from __future__ import annotations

import itertools
from typing import Dict, List, Optional, Sequence

from sqlglot import exp

from dbt.adapters.streamsql.planning.calls import is_aggregate_call
from dbt.adapters.streamsql.planning.plan import DIALECT, Column
from dbt.adapters.streamsql.planning.set_operations import SHAPE

Set = List[exp.Expression]


def rewrite(tree: exp.Query, output_columns: Sequence[Column]) -> exp.Query:
    """The UNION ALL of `tree`'s grouping sets if `tree` is a SELECT grouped by them; else
    `tree` as it is."""
    if not isinstance(tree, exp.Select):
        return tree
    group = tree.args.get("group")
    if group is None or not _has_sets(group):
        return tree
    if any(tree.args.get(key) for key in ("distinct", "limit", "offset", "qualify")):
        return tree
    if len(tree.expressions) != len(output_columns):
        return tree
    sets = _sets(group)
    every = _distinct([g for grouping in sets for g in grouping])
    types = _types(tree, every, output_columns)
    branches = [_branch(tree, grouping, every, types) for grouping in sets]
    union: exp.Query = branches[0]  # one set only: a plain GROUP BY
    for branch in branches[1:]:
        union = exp.union(union, branch, distinct=False)
        union.meta[SHAPE] = _shape(group)
    return union


def _has_sets(group: exp.Group) -> bool:
    if group.args.get("rollup") or group.args.get("cube") or group.args.get("grouping_sets"):
        return True
    return any(isinstance(g, (exp.Rollup, exp.Cube, exp.GroupingSets)) for g in group.expressions)


def _shape(group: exp.Group) -> str:
    kinds = [type(g).__name__ for g in group.expressions] + [
        key for key in ("rollup", "cube") if group.args.get(key)
    ]
    if "Cube" in kinds or "cube" in kinds:
        return "cube"
    if "Rollup" in kinds or "rollup" in kinds:
        return "rollup"
    return "grouping sets"


def _flat(element: exp.Expression) -> Set:
    """One grouping element's expressions: a tuple's, or itself."""
    if isinstance(element, exp.Tuple):
        return list(element.expressions)
    if isinstance(element, exp.Paren):
        return [element.this]
    return [element]


def _sets(group: exp.Group) -> List[Set]:
    """The grouping sets of a GROUP BY, in Spark's order."""
    plain: List[exp.Expression] = []
    factors: List[List[Set]] = []
    for element in group.expressions:
        if isinstance(element, exp.Rollup):
            parts = [_flat(e) for e in element.expressions]
            factors.append([_concat(parts[:n]) for n in range(len(parts), -1, -1)])
        elif isinstance(element, exp.Cube):
            parts = [_flat(e) for e in element.expressions]
            factors.append(_cube(parts))
        elif isinstance(element, exp.GroupingSets):
            factors.append([_flat(e) for e in element.expressions])
        else:
            plain.append(element)
    if group.args.get("rollup"):
        parts = [[p] for p in plain]
        factors.insert(0, [_concat(parts[:n]) for n in range(len(parts), -1, -1)])
        plain = []
    elif group.args.get("cube"):
        factors.insert(0, _cube([[p] for p in plain]))
        plain = []
    if plain:
        factors.insert(0, [plain])
    return [_concat(list(combination)) for combination in itertools.product(*factors)]


def _cube(parts: List[Set]) -> List[Set]:
    masks = itertools.product([True, False], repeat=len(parts))
    return [_concat([p for p, keep in zip(parts, mask) if keep]) for mask in masks]


def _concat(parts: Sequence[Set]) -> Set:
    return [e for part in parts for e in part]


def _distinct(expressions: Sequence[exp.Expression]) -> Set:
    found: Set = []
    for expression in expressions:
        if all(expression != known for known in found):
            found.append(expression)
    return found


def _types(
    select: exp.Select, every: Set, output_columns: Sequence[Column]
) -> Dict[int, Optional[exp.DataType]]:
    """The type of each grouping expression that is also a whole output column (its NULL takes
    that type, so that no branch selects a NULL of no type)."""
    types: Dict[int, Optional[exp.DataType]] = {}
    for position, grouping in enumerate(every):
        for projection, column in zip(select.expressions, output_columns):
            if projection.unalias() == grouping and column.data_type:
                try:
                    types[position] = exp.DataType.build(column.data_type, dialect=DIALECT)
                except Exception:  # a type sqlglot cannot parse: an untyped NULL
                    types[position] = None
                break
    return types


def _branch(
    select: exp.Select, grouping: Set, every: Set, types: Dict[int, Optional[exp.DataType]]
) -> exp.Select:
    """The block grouped by one set: the other grouping expressions NULL, grouping() constant."""
    left_out = [j for j, g in enumerate(every) if all(g != kept for kept in grouping)]

    def null_of(position: int) -> exp.Expression:
        data_type = types.get(position)
        return exp.cast(exp.null(), data_type) if data_type is not None else exp.null()

    def bit(expression: exp.Expression) -> int:
        return int(all(expression != kept for kept in grouping))

    def substitute(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Grouping):  # Spark's types: tinyint, and bigint below
            value = bit(node.expressions[0]) if node.expressions else 0
            return exp.cast(exp.Literal.number(value), "TINYINT")
        if isinstance(node, exp.GroupingId):
            over = list(node.expressions) or every
            value = int("".join(str(bit(e)) for e in over) or "0", 2)
            return exp.cast(exp.Literal.number(value), "BIGINT")
        if is_aggregate_call(node):
            return node
        for position in left_out:
            if node == every[position]:
                return null_of(position)
        for key, value in list(node.args.items()):
            if isinstance(value, exp.Expression):
                node.set(key, substitute(value))
            elif isinstance(value, list):
                node.set(
                    key, [substitute(v) if isinstance(v, exp.Expression) else v for v in value]
                )
        return node

    branch = select.copy()
    branch.set(
        "expressions",
        [exp.alias_(substitute(p.unalias().copy()), p.alias_or_name) for p in select.expressions],
    )
    having = select.args.get("having")
    condition = substitute(having.this.copy()) if having is not None else None
    if not grouping:  # the grand total: like every set, no row over no input rows
        nonempty = exp.GT(this=exp.Count(this=exp.Star()), expression=exp.Literal.number(0))
        condition = exp.and_(condition, nonempty) if condition is not None else nonempty
    branch.set("having", exp.Having(this=condition) if condition is not None else None)
    branch.set("group", exp.Group(expressions=[g.copy() for g in grouping]) if grouping else None)
    branch.set("order", None)
    return branch
