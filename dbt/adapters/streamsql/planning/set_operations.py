"""INTERSECT and EXCEPT as aggregates over how many rows each side holds.

A row's multiplicity in `a INTERSECT b` or `a EXCEPT b` depends only on how many times it occurs
in `a` and in `b`: the set operation is an aggregate grouped by every column, over the UNION ALL
of both sides, each row marked with the side it comes from. The planner's aggregates maintain
those counts from the change alone (COUNT of a marker that is NULL on the other side), so

    a INTERSECT b   keeps a row while  count(left) > 0 and count(right) > 0
    a EXCEPT b      keeps a row while  count(left) > 0 and count(right) = 0

and the ALL forms repeat each row `least(count(left), count(right))` and
`count(left) - count(right)` times: the counts are a stage, and a LATERAL VIEW over it emits the
copies. Grouping treats NULLs as equal, as the set operations do, and the UNION ALL widens the
two sides' types as Spark's set operations do.

The rewrite runs on the bound tree, innermost first, so set operations nested in each other or
in derived tables become aggregates (or stages) like any other. A set operation with its own
LIMIT or OFFSET is left as it is (a recompute for its LIMIT); one whose sides repeat an output
name is a recompute too.
"""

from __future__ import annotations

from typing import List, Optional

from sqlglot import exp

from dbt.adapters.streamsql.planning.errors import RecomputeRequired

# the shape the plan's reason names, kept on the query a rewrite builds (a copy keeps it; also
# grouping_sets.py's)
SHAPE = "streamsql_shape"
LEFT, RIGHT, COPIES = "_streamsql_left", "_streamsql_right", "_streamsql_copies"


def rewrite(tree: exp.Query) -> exp.Query:
    """`tree` with each INTERSECT / EXCEPT replaced by its aggregate (the new root if the top
    is one)."""
    operations = [n for n in tree.find_all(exp.Intersect, exp.Except)]
    for number, node in reversed(list(enumerate(operations))):  # innermost first
        replacement = _aggregate_of(node, number)
        if replacement is None:
            continue
        if node is tree:
            tree = replacement
        else:
            node.replace(replacement)
    return tree


def _aggregate_of(node: exp.SetOperation, number: int) -> Optional[exp.Select]:
    if any(node.args.get(key) for key in ("limit", "offset", "fetch")):
        return None
    intersect = isinstance(node, exp.Intersect)
    every = not node.args.get("distinct")
    shape = ("intersect" if intersect else "except") + (" all" if every else "")
    left, right = _names(node.this), _names(node.expression)
    if left is None or right is None or len(left) != len(right):
        raise RecomputeRequired(
            f"{shape.upper()} whose sides repeat a column name is not maintained incrementally"
        )
    alias = f"_streamsql_setop{number}"
    columns = [f"_streamsql_c{j}" for j in range(len(left))]
    both = exp.union(
        _marked(node.this, left, columns, f"{alias}_l", LEFT),
        _marked(node.expression, right, columns, f"{alias}_r", RIGHT),
        distinct=False,
    )
    sides = exp.Subquery(this=both, alias=exp.TableAlias(this=exp.to_identifier(alias)))
    groups = [exp.column(c, table=alias) for c in columns]
    in_left = exp.Count(this=exp.column(LEFT, table=alias))
    in_right = exp.Count(this=exp.column(RIGHT, table=alias))
    if every:
        copies: exp.Expression = (
            exp.func("least", in_left, in_right)
            if intersect
            else exp.Sub(this=in_left, expression=in_right)
        )
        counted = exp.Select(
            expressions=[g.copy() for g in groups] + [exp.alias_(copies, COPIES)],
            from_=exp.From(this=sides),
            group=exp.Group(expressions=[g.copy() for g in groups]),
            having=exp.Having(this=exp.GT(this=copies.copy(), expression=exp.Literal.number(0))),
        )
        counted.meta[SHAPE] = f"{shape} counts"
        return _copies(counted, columns, left, alias, shape)
    kept = exp.and_(
        exp.GT(this=in_left, expression=exp.Literal.number(0)),
        (exp.GT if intersect else exp.EQ)(this=in_right.copy(), expression=exp.Literal.number(0)),
    )
    select = exp.Select(
        expressions=[exp.alias_(g, name) for g, name in zip(groups, left)],
        from_=exp.From(this=sides),
        group=exp.Group(expressions=[g.copy() for g in groups]),
        having=exp.Having(this=kept),
    )
    select.meta[SHAPE] = shape
    return select


def _names(query: exp.Expression) -> Optional[List[str]]:
    """The output names of one side, if each is a distinct plain name."""
    if isinstance(query, exp.Subquery):
        query = query.this
    if not isinstance(query, exp.Query):
        return None
    names = list(query.named_selects)
    if not names or "*" in names or "" in names or len(set(names)) != len(names):
        return None
    return names


def _marked(
    side: exp.Expression, names: List[str], columns: List[str], alias: str, marker: str
) -> exp.Select:
    """SELECT side's columns as `columns`, 1 as `marker` and NULL as the other side's marker."""
    query = side.this if isinstance(side, exp.Subquery) else side
    flags = [  # the left's marker first on both sides
        exp.alias_(exp.Literal.number(1) if m == marker else exp.cast(exp.null(), "INT"), m)
        for m in (LEFT, RIGHT)
    ]
    return exp.Select(
        expressions=[
            exp.alias_(exp.column(name, table=alias), column)
            for name, column in zip(names, columns)
        ]
        + flags,
        from_=exp.From(
            this=exp.Subquery(this=query, alias=exp.TableAlias(this=exp.to_identifier(alias)))
        ),
    )


def _copies(
    counted: exp.Select, columns: List[str], names: List[str], alias: str, shape: str
) -> exp.Select:
    """Each counted row repeated COPIES times: a LATERAL VIEW over the counts' stage."""
    groups = f"{alias}_n"
    sequence = exp.func(
        "sequence", exp.cast(exp.Literal.number(1), "BIGINT"), exp.column(COPIES, table=groups)
    )
    lateral = exp.Lateral(
        this=exp.Explode(this=sequence),
        view=True,
        alias=exp.TableAlias(
            this=exp.to_identifier(f"{alias}_x"), columns=[exp.to_identifier(f"{alias}_i")]
        ),
    )
    select = exp.Select(
        expressions=[
            exp.alias_(exp.column(c, table=groups), name) for c, name in zip(columns, names)
        ],
        from_=exp.From(
            this=exp.Subquery(this=counted, alias=exp.TableAlias(this=exp.to_identifier(groups)))
        ),
        laterals=[lateral],
    )
    select.meta[SHAPE] = shape
    return select
