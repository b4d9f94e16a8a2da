"""Window functions per partition: top-K blocks, running and moving aggregates, LAG and LEAD.

    select * from (select *, row_number() over (partition by id order by updated_at desc) as rn
                   from raw.customers) where rn = 1
    select * from bids qualify rank() over (partition by auction order by price desc) <= 2
    select id, sum(amount) over (partition by customer order by ts) as running from orders

A window function partitioned by P computes each partition from the rows with that partition
key alone. So when the rows of the block below the window (its FROM, joins and WHERE) change
only in the partitions whose keys K appear in that block's change, the window's result changes
only in those partitions, and

    delta(window block) = (the block over the NEW inputs, its rows restricted to keys in K), +1
                        + (the block over the OLD inputs, restricted the same way),      -1

(`DeltaBuilder.window_delta` in linear.py). The restriction is a null-safe semi join on P
(a NULL key is a partition like any other), placed after the block's joins and before its
WHERE, so both evaluations see whole partitions. Everything above the window block (the rank
filter, projections, joins, aggregates) applies to that change like to any other.

That rule holds for any window block whose windows share a partition key: a touched partition
costs its own rows, twice. Where the query filters the rank by a constant (`= c`, `<= c`, `< c`)
right above the block (a top-K block), the change is a handful of rows; otherwise (a running
sum, LAG) it is the rows of the touched partitions whose values changed, once old and new
evaluations are netted. Most frames reach only part of a touched partition, from its first
change on; window_reach.py says how far back each reads. What stays on the recompute path, and
why, is in `window_obstacle`.

ROW_NUMBER among rows that tie on the ORDER BY is not deterministic in Spark, nor are NTILE, LAG,
LEAD and any ROWS frame (`by_position`): evaluating the old inputs again could order tied rows
differently than the step that wrote the model did, and the change would then delete a row the
model does not hold. So the planner breaks ties by the block's other output columns and the
columns those functions read (`add_tie_breakers`): rows that still tie give the same output,
whichever comes first. That is one of the answers Spark may give. A RANGE frame (the default
with an ORDER BY) needs none: rows tied on the ORDER BY are peers, in each other's frames;
FIRST_VALUE / LAST_VALUE / NTH_VALUE over one stay a recompute, since which peer comes first is
Spark's choice and breaking the ties would change the frame.
"""

from __future__ import annotations

from typing import Dict, List, Optional

from sqlglot import exp

from dbt.adapters.streamsql.planning.bounds import conjuncts
from dbt.adapters.streamsql.planning.calls import contains_aggregate, function_name
from dbt.adapters.streamsql.planning.plan import DIALECT
from dbt.adapters.streamsql.planning.types import (
    TypeOracle,
)

RANKS = ("row_number", "rank", "dense_rank")
# Window functions the partition restriction keeps exact: their value is a function of the
# partition's rows as a multiset (ROW_NUMBER once its ties are broken, see the module docstring).
_DETERMINISTIC = RANKS + ("percent_rank", "cume_dist")
WHOLE_PARTITION_AGGREGATES = ("count", "sum", "avg", "mean", "min", "max")
# Functions whose value depends on the order of rows that tie on the ORDER BY (each row's
# position, not its peers): exact once their ties are broken (`add_tie_breakers`).
_BY_POSITION = ("row_number", "ntile", "lag", "lead")
# ... and these, over a ROWS frame (over a RANGE frame their value depends on which of the tied
# rows comes first or last, and breaking the ties would change the frame's peers)
VALUES_OF_ROWS = ("first_value", "last_value", "nth_value", "first", "last")

RANK_ALIAS = "_streamsql_rank"


def windows_of(select: exp.Select) -> List[exp.Window]:
    """Window calls in a block's projections (not looking into subqueries)."""
    found: List[exp.Window] = []

    def visit(node: exp.Expression) -> None:
        if isinstance(node, exp.Window):
            found.append(node)
            return
        if isinstance(node, exp.Query):
            return
        for child in node.iter_expressions():
            visit(child)

    for projection in select.expressions:
        visit(projection)
    return found


def is_window_block(node: exp.Expression) -> bool:
    return isinstance(node, exp.Select) and bool(windows_of(node))


def window_name(window: exp.Window) -> str:
    call = window.this
    return function_name(call) if isinstance(call, exp.Func) else call.sql(DIALECT).lower()


def partition_keys(select: exp.Select) -> List[exp.Expression]:
    """The partition keys every window of the block shares (its restriction keys)."""
    shared: Optional[List[exp.Expression]] = None
    for window in windows_of(select):
        keys = list(window.args.get("partition_by") or [])
        shared = keys if shared is None else [k for k in shared if k in keys]
    return list(dict.fromkeys(shared or []))


def ranking_names(select: exp.Select) -> List[str]:
    names = (window_name(window) for window in windows_of(select))
    return list(dict.fromkeys(name for name in names if name in RANKS))


# -- what stays on the recompute path ----------------------------------------------------------


def window_obstacle(window: exp.Window) -> Optional[str]:
    """Why the block holding `window` is not maintained as a top-K block; None when it is."""
    name = window_name(window)
    select = window.find_ancestor(exp.Select)
    if select is None or not any(window is w for w in windows_of(select)):
        return f"window function {name}() outside a SELECT list is not maintained incrementally"
    return block_obstacle(select)


def block_obstacle(select: exp.Select) -> Optional[str]:
    windows = windows_of(select)
    first = window_name(windows[0])
    if (
        select.args.get("group")
        or select.args.get("having")
        or select.args.get("distinct")
        or any(contains_aggregate(p) for p in select.expressions)
    ):
        return (
            f"window function {first}() over an aggregate in the same SELECT is not maintained "
            "incrementally"
        )
    if select.args.get("laterals"):
        return f"window function {first}() over a LATERAL VIEW is not maintained incrementally"
    if select.args.get("windows"):
        return f"named WINDOW clause ({first}()) is not maintained incrementally"
    for window in windows:
        name = window_name(window)
        if window.args.get("alias") is not None or not isinstance(window.this, exp.Func):
            return f"named window ({name}()) is not maintained incrementally"
        if name in _DETERMINISTIC + _BY_POSITION:
            continue
        if name in WHOLE_PARTITION_AGGREGATES and not isinstance(window.this.this, exp.Distinct):
            continue
        if name in VALUES_OF_ROWS and rows_frame(window):
            continue
        if name in VALUES_OF_ROWS:
            return (
                f"window function {name}() over a RANGE frame (the default with ORDER BY) is not "
                "maintained incrementally"
            )
        return f"window function {name}() is not maintained incrementally"
    if sum(window_name(w) == "row_number" for w in windows) > 1:
        return "several row_number() windows in one SELECT are not maintained incrementally"
    if not partition_keys(select):
        if not any(w.args.get("partition_by") for w in windows):
            return f"window function {first}() without PARTITION BY is not maintained incrementally"
        return (
            f"window functions ({', '.join(dict.fromkeys(window_name(w) for w in windows))}) "
            "without a PARTITION BY key in common are not maintained incrementally"
        )
    return None


def rows_frame(window: exp.Window) -> bool:
    spec = window.args.get("spec")
    return spec is not None and str(spec.args.get("kind") or "").lower() == "rows"


def by_position(window: exp.Window) -> bool:
    """Whether the window's value for a row depends on how rows tied on its ORDER BY are
    ordered (so `add_tie_breakers` extends its ORDER BY)."""
    name = window_name(window)
    if name in _BY_POSITION:
        return True
    return name in WHOLE_PARTITION_AGGREGATES + VALUES_OF_ROWS and rows_frame(window)


def has_rank_filter(select: exp.Select) -> bool:
    """Whether the block's result is filtered by `rank <= c` (or `=`, `<`) right above it."""
    subquery = select.parent
    if not isinstance(subquery, exp.Subquery):
        return False
    if not isinstance(subquery.parent, (exp.From, exp.Join)):
        return False
    consumer = subquery.parent.parent
    if not isinstance(consumer, exp.Select) or consumer.args.get("where") is None:
        return False
    ranks = _rank_columns(select, subquery)
    for conjunct in conjuncts(consumer.args["where"].this):
        column = _bounded_rank(conjunct)
        if column is not None and column.table == subquery.alias_or_name and column.name in ranks:
            return True
    return False


def _rank_columns(select: exp.Select, subquery: exp.Subquery) -> List[str]:
    alias = subquery.args.get("alias")
    names = (
        [c.name for c in alias.columns]
        if alias is not None and alias.columns
        else [p.alias_or_name for p in select.expressions]
    )
    ranks = []
    for name, projection in zip(names, select.expressions):
        value = projection.unalias()
        if isinstance(value, exp.Window) and window_name(value) in RANKS:
            ranks.append(name)
    return ranks


def _bounded_rank(conjunct: exp.Expression) -> Optional[exp.Column]:
    """The column of `column = c`, `column <= c`, `column < c` (either way round), c an integer."""
    upper = {exp.EQ: exp.EQ, exp.LTE: exp.GTE, exp.LT: exp.GT}
    for kind, mirrored in upper.items():
        left, right = conjunct.args.get("this"), conjunct.args.get("expression")
        if isinstance(conjunct, kind) and is_integer(right) and isinstance(left, exp.Column):
            return left
        if isinstance(conjunct, mirrored) and is_integer(left) and isinstance(right, exp.Column):
            return right
    return None


def is_integer(node: exp.Expression) -> bool:
    return isinstance(node, exp.Literal) and not node.is_string and node.this.isdigit()


# -- rewrites before planning ------------------------------------------------------------------


def eliminate_qualify(tree: exp.Expression) -> exp.Expression:
    """Every `SELECT ... QUALIFY condition` becomes a filter over a derived table; returns the
    tree (a new root when the top block had the QUALIFY).

        SELECT a AS x, b AS y FROM s WHERE w QUALIFY rank() OVER (...) <= 2 AND s.c > 0
        ->
        SELECT q._streamsql_p0 AS x, q._streamsql_p1 AS y
        FROM (SELECT a AS _streamsql_p0, b AS _streamsql_p1, rank() OVER (...) AS _streamsql_rank0,
                     s.c AS _streamsql_q0 FROM s WHERE w) AS q
        WHERE q._streamsql_rank0 <= 2 AND q._streamsql_q0 > 0

    so that a top-K block always sits in a derived table with its rank filter right above it.
    Expects a qualified tree (every column names its relation).
    """
    # innermost first: a block's copy below must hold its rewritten subqueries
    for number, select in enumerate(reversed(list(tree.find_all(exp.Select)))):
        qualify = select.args.get("qualify")
        if qualify is None:
            continue
        alias = f"_streamsql_qualified{number}"
        names = [p.alias_or_name for p in select.expressions]
        inner = select.copy()
        inner.set("qualify", None)
        inner.set(
            "expressions",
            [
                exp.alias_(p.unalias().copy(), f"_streamsql_p{i}")
                for i, p in enumerate(select.expressions)
            ],
        )
        added: Dict[str, str] = {}

        def lift(node: exp.Expression) -> exp.Expression:
            if isinstance(node, exp.Window) or (isinstance(node, exp.Column) and node.table):
                key = node.sql(DIALECT)
                if key not in added:
                    prefix = "_streamsql_rank" if isinstance(node, exp.Window) else "_streamsql_q"
                    added[key] = f"{prefix}{len(added)}"
                    inner.append("expressions", exp.alias_(node.copy(), added[key]))
                return exp.column(added[key], table=alias)
            if isinstance(node, exp.Column) and node.name in names:  # a SELECT alias
                return exp.column(f"_streamsql_p{names.index(node.name)}", table=alias)
            return node

        condition = qualify.this.copy().transform(lift)
        outer = exp.Select(
            expressions=[
                exp.alias_(exp.column(f"_streamsql_p{i}", table=alias), name)
                for i, name in enumerate(names)
            ],
            from_=exp.From(
                this=exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier(alias)))
            ),
            where=exp.Where(this=condition),
        )
        for key in ("order", "sort", "distribute", "cluster", "limit", "offset"):
            if inner.args.get(key) is not None:
                outer.set(key, inner.args[key].transform(lift))
                inner.set(key, None)
        if select is tree:
            tree = outer
        else:
            select.replace(outer)
    return tree


def add_tie_breakers(tree: exp.Expression, oracle: TypeOracle) -> None:
    """ORDER BY of every window whose value depends on the order of tied rows (ROW_NUMBER, NTILE,
    LAG, LEAD, a ROWS frame: `by_position`) extended by the block's other output columns and the
    columns those windows' functions read (LAG(x) with x not selected).

    Columns whose type cannot be ordered (maps, variants) or is unknown are compared through
    their JSON text, all in one `to_json(named_struct(...))`.
    """
    for select in list(tree.find_all(exp.Select)):
        windows = [w for w in windows_of(select) if by_position(w)]
        if not windows:
            continue
        direct: List[exp.Expression] = []
        as_text: List[exp.Expression] = []
        read = [c for w in windows for c in w.this.find_all(exp.Column)]
        for projection in list(select.expressions) + read:
            value = projection.unalias()
            if isinstance(value, exp.Literal) or value.find(exp.Window):
                continue
            data_type = (oracle.type_of(value) or "").lower()
            orderable = data_type and "map<" not in data_type and "variant" not in data_type
            (direct if orderable else as_text).append(value)
        breakers = [exp.Ordered(this=v.copy(), nulls_first=True) for v in dict.fromkeys(direct)]
        if as_text:
            fields: List[exp.Expression] = []
            for i, value in enumerate(dict.fromkeys(as_text)):
                fields += [exp.Literal.string(f"c{i}"), value.copy()]
            struct = exp.Anonymous(this="named_struct", expressions=fields)
            text = exp.Anonymous(this="to_json", expressions=[struct])
            breakers.append(exp.Ordered(this=text, nulls_first=True))
        for window in windows:
            order = window.args.get("order")
            if order is None:
                window.set("order", exp.Order(expressions=[b.copy() for b in breakers]))
            else:
                for breaker in breakers:
                    order.append("expressions", breaker.copy())
