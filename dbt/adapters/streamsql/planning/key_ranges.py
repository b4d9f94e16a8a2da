"""The range of the keys a change touches, and the predicates that carry it to the rows it bounds.

The key-restriction rules (the outer, semi and anti joins of joins/keyed.py, top-K windows in
linear.py) re-evaluate a block only for the keys found in a change. A key equals, in each row of
the change, an expression over one input's change (through the block's equalities, or a derived
table's projection), so its non-NULL values lie between the MIN and MAX of that expression over
that change: scalar SQL over the delta placeholders (bounds.py), LEAST/GREATEST over several. The
columns equal to a bounded key get range predicates that keep NULLs (the restriction is
null-safe), named as key bounds, so that Delta skips the files of the keys the change misses.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from sqlglot import exp

from dbt.adapters.streamsql.planning.binding import bound_input
from dbt.adapters.streamsql.planning.bounds import (
    AT_LEAST,
    AT_MOST,
    aliases_of,
    conjuncts,
    extreme_of,
    key_range_predicate,
)
from dbt.adapters.streamsql.planning.calls import contains_aggregate
from dbt.adapters.streamsql.planning.joins.kinds import INNER, join_rule
from dbt.adapters.streamsql.planning.plan import DIALECT, KeyBound, delta_input
from dbt.adapters.streamsql.planning.terms import (
    DELTA,
    Builder,
    Equality,
    Source,
    Term,
    is_constant,
)
from dbt.adapters.streamsql.planning.windows import windows_of

# (MIN, MAX) scalar SQL of a key's values, or None where the change bounds nothing
KeyRange = Optional[Tuple[str, str]]


def key_ranges(
    sources: Sequence[Source],
    terms: Sequence[Term],
    keys: Sequence[exp.Expression],
    equalities: Sequence[Equality],
    right: Optional[Source] = None,
    right_keys: Sequence[exp.Expression] = (),
) -> List[KeyRange]:
    """Per key: (MIN, MAX) scalar SQL over delta placeholders bounding every non-NULL value the
    changed keys can hold, or None where no such bound follows from the change.

    A term's rows come from the change of each input it reads as a change, so a key is bounded
    by the range, over one of those changes, of an expression the key equals (bounds.py).
    """
    ranges: List[KeyRange] = []
    for j, key in enumerate(keys):
        found: List[Tuple[str, str, exp.Expression]] = []
        for term in terms:
            contribution = None
            if not term.restrictions and term.gate is None:
                for source, version in zip(sources, term.versions):
                    index = bound_input(source.node)
                    if version != DELTA or index is None:
                        continue
                    equal = equivalent_over(key, source.alias, equalities)
                    if equal is not None:
                        contribution = (delta_input(index), source.alias, equal)
                        break
            if contribution is None:
                found = []
                break
            found.append(contribution)
        else:
            if right is not None and not is_constant(right.node):
                contribution = _delta_expression(right, right_keys[j])
                found = found + [contribution] if contribution is not None else []
        unique = {(p, a, e.sql(DIALECT)): (p, a, e) for p, a, e in found}
        if not unique:
            ranges.append(None)
            continue
        ranges.append(
            tuple(
                _extreme(side, [extreme_of(e, side, p, a) for p, a, e in unique.values()])
                for side in (AT_LEAST, AT_MOST)
            )
        )
    return ranges


def bounds_on(
    builder: Builder,
    sources: Sequence[Source],
    keys: Sequence[exp.Expression],
    ranges: Sequence[KeyRange],
    equalities: Sequence[Equality],
) -> List[exp.Expression]:
    """Key-range predicates on the columns of `sources` that equal a bounded key."""
    predicates: List[exp.Expression] = []
    for key, key_range in zip(keys, ranges):
        if key_range is None:
            continue
        columns = [key] if isinstance(key, exp.Column) else []
        for source in sources:
            equal = equivalent_over(key, source.alias, equalities)
            if isinstance(equal, exp.Column) and equal not in columns:
                columns.append(equal)
        predicates += [range_predicate(builder, column, key_range) for column in columns]
    return predicates


def range_predicate(
    builder: Builder, column: exp.Column, key_range: Tuple[str, str]
) -> exp.Expression:
    """`column` within the range, or NULL, the range's ends as named key bounds."""
    low = builder.name_bound(KeyBound("", column.sql(DIALECT), AT_LEAST, key_range[0]))
    high = builder.name_bound(KeyBound("", column.sql(DIALECT), AT_MOST, key_range[1]))
    return key_range_predicate(column, low, high)


def equalities_of(
    sources: Sequence[Source], where: Optional[exp.Expression] = None
) -> List[Equality]:
    """(a, b) of the `=` / `<=>` conjuncts of the sources' inner joins (and of `where`): every
    row of their join satisfies them."""
    conditions: List[exp.Expression] = conjuncts(where.this) if where is not None else []
    for source in sources:
        if source.join is not None and join_rule(source.join) == INNER:
            conditions += conjuncts(source.join.args.get("on"))
    return [
        (c.this, c.expression)
        for c in conditions
        if isinstance(c, (exp.EQ, exp.NullSafeEQ)) and not c.find(exp.Query)
    ]


def equivalent_over(
    key: exp.Expression, alias: str, equalities: Sequence[Equality]
) -> Optional[exp.Expression]:
    """An expression over relation `alias` alone that equals `key` in every row (or None)."""
    if aliases_of(key) == {alias} and not key.find(exp.Query) and not contains_aggregate(key):
        return key
    for first, second in equalities:
        for this, other in ((first, second), (second, first)):
            if this == key and aliases_of(other) == {alias} and not other.find(exp.Query):
                return other
    return None


def _delta_expression(
    source: Source, key: exp.Expression
) -> Optional[Tuple[str, str, exp.Expression]]:
    """(delta placeholder, alias, expression) whose range over that input's change covers `key`
    (an expression over `source`) over the source's change; None when none is known.

    An input table, or a plain SELECT over one input table without joins (a subquery's
    `SELECT y FROM s WHERE ...`): its change's rows are rows of the table's change.
    """
    index = bound_input(source.node)
    if index is not None:
        return delta_input(index), source.alias, key
    if not isinstance(source.node, exp.Subquery) or not isinstance(key, exp.Column):
        return None
    inner = source.node.this
    if not isinstance(inner, exp.Select) or inner.args.get("joins") or inner.args.get("laterals"):
        return None
    if inner.args.get("group") or inner.args.get("distinct") or windows_of(inner):
        return None
    from_ = inner.args.get("from_")
    if from_ is None or bound_input(from_.this) is None:
        return None
    alias = source.node.args.get("alias")
    names = (
        [c.name for c in alias.columns]
        if alias is not None and alias.columns
        else [p.alias_or_name for p in inner.expressions]
    )
    if key.name not in names:
        return None
    expression = inner.expressions[names.index(key.name)].unalias()
    table_alias = from_.this.alias_or_name
    if aliases_of(expression) != {table_alias} or expression.find(exp.Query):
        return None
    if contains_aggregate(expression):
        return None
    return delta_input(bound_input(from_.this)), table_alias, expression


def _extreme(side: str, values: Sequence[str]) -> str:
    """The smallest (AT_LEAST) or largest of scalar SQL values, NULLs ignored."""
    if len(values) == 1:
        return values[0]
    return f"{'LEAST' if side == AT_LEAST else 'GREATEST'}({', '.join(values)})"
