"""IN / EXISTS / NOT IN / NOT EXISTS subqueries as semi and anti joins.

A WHERE conjunct testing a subquery is a join that keeps or drops rows of the block without
adding columns or multiplying rows, whatever duplicates the subquery holds. `rewrite` turns each
such conjunct into a LEFT SEMI or LEFT ANTI JOIN with a derived table, appended after the block's
joins (a WHERE conjunct applies after them), so that the delta rules of linear.py maintain it:

    x IN (SELECT y FROM s ...)            LEFT SEMI JOIN (SELECT y ...) q(k0) ON x = q.k0
    (x1, x2) IN (SELECT y1, y2 ...)       ... ON x1 = q.k0 AND x2 = q.k1
    EXISTS (SELECT ... FROM s WHERE s.y = o.x AND <s only> AND <other correlation>)
                                          LEFT SEMI JOIN (SELECT s.y ... WHERE <s only>) q(k0, ...)
                                          ON o.x = q.k0 AND <other correlation, over q>
    NOT EXISTS (...)                      the same as a LEFT ANTI JOIN
    x NOT IN (SELECT y ...)               LEFT ANTI JOIN (...) q(k0)
                                          ON x = q.k0 OR (x = q.k0) IS NULL

A WHERE conjunct that is NULL drops the row like FALSE, so IN is exactly the semi join on `=`
(a NULL on either side matches nothing). NOT IN is the null-aware anti join: a row is dropped when
some subquery value equals x or the comparison is NULL, i.e. every row goes when the subquery
holds a NULL, and a NULL x stays only when the subquery is empty. Spark plans that very condition
as its null-aware anti join. Its delta rule (linear.py) re-evaluates only the changed keys while
the subquery's "holds a NULL" and "is empty" stay as they were (and it holds no NULL), and the
whole result otherwise.

What stays on the recompute path, with the reason the plan shows: NOT IN over several columns (a
NULL in one column leaves the match to the others, so no key decides it), a correlated NOT IN,
EXISTS without an equality correlating it with the outer block (its result depends on the whole
subquery at once), a correlated subquery with an aggregate or referencing the outer block outside
its WHERE conjuncts or from further out, and subqueries anywhere but a top-level WHERE conjunct
(under OR, CASE, a projection): nonlinear_construct reports those.
"""

from __future__ import annotations

import itertools
import re
from typing import List, Optional, Set, Tuple

from sqlglot import exp

from dbt.adapters.streamsql.planning.bounds import aliases_of, conjuncts
from dbt.adapters.streamsql.planning.calls import contains_aggregate
from dbt.adapters.streamsql.planning.errors import RecomputeRequired

IN, EXISTS, NOT_IN, NOT_EXISTS = "in (subquery)", "exists", "not in (subquery)", "not exists"
# The alias of the derived table says which predicate a join came from (for the plan's reason).
_PREFIXES = {
    IN: "_streamsql_in",
    EXISTS: "_streamsql_exists",
    NOT_IN: "_streamsql_notin",
    NOT_EXISTS: "_streamsql_notexists",
}
_ORIGIN = re.compile(r"^_streamsql_(in|exists|notin|notexists)\d+$")
_ORIGIN_NAMES = {"in": IN, "exists": EXISTS, "notin": NOT_IN, "notexists": NOT_EXISTS}


# The alias prefix of the one-row derived tables scalar_subqueries.py joins in their place.
SCALAR_PREFIX = "_streamsql_scalar"


def is_scalar_join(join: exp.Join) -> bool:
    """A join scalar_subqueries.py made of a scalar subquery."""
    return (join.this.alias_or_name or "").startswith(SCALAR_PREFIX)


def key_column(j: int) -> str:
    return f"_streamsql_k{j}"


def origin(join: exp.Join) -> Optional[str]:
    """IN, EXISTS, NOT_IN or NOT_EXISTS for a join this module made; None for the user's joins."""
    match = _ORIGIN.match(join.this.alias_or_name or "")
    return _ORIGIN_NAMES[match.group(1)] if match else None


def null_aware_pair(join: exp.Join) -> Optional[Tuple[exp.Expression, exp.Expression]]:
    """(x, y) of an anti join `ON x = y OR (x = y) IS NULL` (NOT IN); None for any other join."""
    if join.kind.upper() != "ANTI":
        return None
    condition = join.args.get("on")
    while isinstance(condition, exp.Paren):
        condition = condition.this
    if not isinstance(condition, exp.Or):
        return None
    equal, is_null = condition.this, condition.expression
    if not isinstance(equal, exp.EQ) or not isinstance(is_null, exp.Is):
        return None
    if not isinstance(is_null.expression, exp.Null):
        return None
    tested = is_null.this.this if isinstance(is_null.this, exp.Paren) else is_null.this
    if tested != equal:
        return None
    return equal.this, equal.expression


def rewrite(tree: exp.Expression) -> None:
    """Replaces every IN/EXISTS/NOT IN/NOT EXISTS conjunct of a WHERE by a join (in place).

    Raises:
        RecomputeRequired: a subquery conjunct no delta rule maintains (see the module docstring).
    """
    numbers = itertools.count()
    # innermost blocks first: a subquery's own subqueries are joins before it moves
    for select in reversed(list(tree.find_all(exp.Select))):
        where = select.args.get("where")
        if where is None:
            continue
        kept: List[exp.Expression] = []
        joins: List[exp.Join] = []
        for part in conjuncts(where.this):
            kind, node = _predicate(part)
            if kind is None:
                kept.append(part)
                continue
            if select.args.get("laterals"):
                raise RecomputeRequired(
                    f"{kind.upper()} in a block with LATERAL VIEW is not maintained incrementally"
                )
            if select.args.get("from_") is None:
                raise RecomputeRequired(
                    f"{kind.upper()} in a SELECT without FROM is not maintained incrementally"
                )
            joins.append(_as_join(select, kind, node, f"{_PREFIXES[kind]}{next(numbers)}"))
        if not joins:
            continue
        for join in joins:
            select.append("joins", join)
        select.set("where", exp.Where(this=exp.and_(*(k.copy() for k in kept))) if kept else None)


def _predicate(part: exp.Expression) -> Tuple[Optional[str], Optional[exp.Expression]]:
    node = _unparen(part)
    negated = isinstance(node, exp.Not)
    if negated:
        node = _unparen(node.this)
    if isinstance(node, exp.In) and node.args.get("query") is not None:
        return (NOT_IN if negated else IN), node
    if isinstance(node, exp.Exists):
        return (NOT_EXISTS if negated else EXISTS), node
    return None, None


def _unparen(node: exp.Expression) -> exp.Expression:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def sources_of(select: exp.Select) -> List[exp.Expression]:
    from_ = select.args.get("from_")
    joined = [join.this for join in select.args.get("joins") or []]
    return ([from_.this] if from_ is not None else []) + joined


def defined_aliases(query: exp.Expression) -> Set[str]:
    """Every relation alias defined anywhere inside `query`."""
    names = {node.alias_or_name for node in query.find_all(exp.Table, exp.Subquery)}
    names |= {alias.name for alias in query.find_all(exp.TableAlias) if alias.name}
    return names


def _as_join(select: exp.Select, kind: str, node: exp.Expression, alias: str) -> exp.Join:
    if kind in (IN, NOT_IN):
        values = list(node.this.expressions) if isinstance(node.this, exp.Tuple) else [node.this]
        query = node.args["query"]
        query = query.this if isinstance(query, exp.Subquery) else query
    else:
        values, query = [], node.this
    outer = {source.alias_or_name for source in sources_of(select)}
    inner = defined_aliases(query)
    references = [c for c in query.find_all(exp.Column) if c.table and c.table not in inner]
    if any(c.table not in outer for c in references):
        raise RecomputeRequired(
            f"{kind.upper()} correlated with a query more than one level out "
            "is not maintained incrementally"
        )
    if kind == NOT_IN and len(values) != 1:
        raise RecomputeRequired(
            "NOT IN (subquery) over several columns is not maintained "
            "incrementally (a NULL in one column leaves the match to the "
            "others)"
        )
    if kind == NOT_IN and references:
        raise RecomputeRequired("correlated NOT IN (subquery) is not maintained incrementally")
    if values and _width(query) != len(values):
        raise RecomputeRequired(
            f"{kind.upper()} compares {len(values)} value(s) with a subquery "
            f"of {_width(query)} column(s)"
        )
    if references:
        derived, pairs, others, width = _decorrelate(
            kind, query, values, outer, inner, references, alias
        )
    elif kind in (EXISTS, NOT_EXISTS):
        raise RecomputeRequired(
            f"{kind.upper()} without an equality correlating it with the outer "
            "query is not maintained incrementally"
        )
    else:
        derived, others, width = query.copy(), [], len(values)
        pairs = [(value, j, False) for j, value in enumerate(values)]
    names = [exp.to_identifier(key_column(j)) for j in range(width)]
    table = exp.Subquery(
        this=derived, alias=exp.TableAlias(this=exp.to_identifier(alias), columns=names)
    )
    equalities = [
        (exp.NullSafeEQ if null_safe else exp.EQ)(
            this=value.copy(), expression=exp.column(key_column(j), table=alias)
        )
        for value, j, null_safe in pairs
    ]
    if kind == NOT_IN:
        unknown = exp.Is(this=exp.Paren(this=equalities[0].copy()), expression=exp.Null())
        condition: exp.Expression = exp.Or(this=equalities[0], expression=unknown)
    else:
        condition = exp.and_(*equalities, *others)
    anti = kind in (NOT_IN, NOT_EXISTS)
    return exp.Join(this=table, side="LEFT", kind="ANTI" if anti else "SEMI", on=condition)


def _width(query: exp.Expression) -> int:
    while isinstance(query, exp.SetOperation):
        query = query.this
    return len(query.expressions) if isinstance(query, exp.Select) else -1


def _decorrelate(
    kind: str,
    query: exp.Expression,
    values: List[exp.Expression],
    outer: Set[str],
    inner: Set[str],
    references: List[exp.Column],
    alias: str,
):
    """The derived table of a correlated subquery and the parts of its join condition.

    Returns (derived SELECT, [(outer expression, key column index, null-safe)], other conditions
    over the derived table `alias`, number of key columns). The derived table's key columns are
    the IN's compared columns, then the subquery's side of each correlation equality, then the
    subquery columns the other correlation conditions read.
    """
    if not isinstance(query, exp.Select):
        raise RecomputeRequired(
            f"correlated {kind.upper()} over a {query.key.upper()} is not maintained incrementally"
        )
    distinct = query.args.get("distinct")
    if (
        query.args.get("group")
        or query.args.get("having")
        or (distinct is not None and distinct.args.get("on"))
        or any(contains_aggregate(p) for p in query.expressions)
    ):
        raise RecomputeRequired(
            f"correlated {kind.upper()} with an aggregate is not maintained incrementally"
        )
    where = query.args.get("where")
    parts = conjuncts(where.this) if where is not None else []

    def is_outer(column: exp.Column) -> bool:
        return bool(column.table) and column.table not in inner

    correlated = [p for p in parts if any(is_outer(c) for c in p.find_all(exp.Column))]
    if sum(1 for p in correlated for c in p.find_all(exp.Column) if is_outer(c)) != len(references):
        raise RecomputeRequired(
            f"correlated {kind.upper()} referencing the outer query outside "
            "its WHERE conditions is not maintained incrementally"
        )
    if any(p.find(exp.Query, exp.Exists) for p in correlated):
        raise RecomputeRequired(
            f"correlated {kind.upper()} with a nested subquery in its "
            "correlation is not maintained incrementally"
        )
    exposed: List[exp.Expression] = []
    if values:
        exposed = [projection.unalias().copy() for projection in query.expressions]
    pairs: List[Tuple[exp.Expression, int, bool]] = [(v, j, False) for j, v in enumerate(values)]

    def expose(expression: exp.Expression) -> int:
        for j, known in enumerate(exposed):
            if known == expression:
                return j
        exposed.append(expression.copy())
        return len(exposed) - 1

    pending: List[exp.Expression] = []
    for part in correlated:
        pair = correlation_pair(part, outer, inner)
        if pair is None:
            pending.append(part)
        else:
            pairs.append((pair[0], expose(pair[1]), pair[2]))
    if not pairs:
        raise RecomputeRequired(
            f"{kind.upper()} without an equality correlating it with the outer "
            "query is not maintained incrementally"
        )
    others = [
        part.copy().transform(
            lambda n: (
                exp.column(key_column(expose(n)), table=alias)
                if isinstance(n, exp.Column) and not is_outer(n)
                else n
            )
        )
        for part in pending
    ]
    derived = query.copy()
    remaining = [p.copy() for p in parts if not any(p is c for c in correlated)]
    derived.set("where", exp.Where(this=exp.and_(*remaining)) if remaining else None)
    derived.set("distinct", None)
    derived.set("expressions", [exp.alias_(e.copy(), key_column(j)) for j, e in enumerate(exposed)])
    return derived, pairs, others, len(exposed)


def correlation_pair(
    part: exp.Expression, outer: Set[str], inner: Set[str]
) -> Optional[Tuple[exp.Expression, exp.Expression, bool]]:
    """(outer expression, inner expression, null-safe) of an `=` / `<=>` relating the two sides."""
    if not isinstance(part, (exp.EQ, exp.NullSafeEQ)):
        return None
    for first, second in ((part.this, part.expression), (part.expression, part.this)):
        first_aliases, second_aliases = aliases_of(first), aliases_of(second)
        if not first_aliases or not second_aliases:
            continue
        if first_aliases <= outer - inner and second_aliases <= inner:
            return first, second, isinstance(part, exp.NullSafeEQ)
    return None
