"""The pieces a delta is made of: a block's sources, the versions it reads them at, its terms.

A SELECT block's delta is a UNION ALL of *terms* (linear.py): each term evaluates the block with
every source at a version, "new", "old" or "delta" (the change, with its `_streamsql_weight`),
gives its rows a weight and may restrict them to the keys a change touches (`KeyRestriction`, the
rule of the joins in joins/keyed.py and of top-K windows). This module holds those values, the
copies of a relation at a version, and `Builder`: what the join rules and key ranges use of the
builder that runs them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol, Sequence, Tuple

from sqlglot import exp

from dbt.adapters.streamsql.planning.binding import bound_input
from dbt.adapters.streamsql.planning.plan import (
    WEIGHT,
    KeyBound,
    delta_input,
    new_input,
    old_input,
)

NEW, OLD, DELTA = "new", "old", "delta"
# (a, b) of an `a = b` or `a <=> b` condition
Equality = Tuple[exp.Expression, exp.Expression]
_PLACEHOLDERS = {NEW: new_input, OLD: old_input, DELTA: delta_input}


@dataclass(frozen=True)
class Source:
    """A relation in a SELECT block's FROM clause: an input table, a derived table or a constant."""

    node: exp.Expression
    alias: str
    join: Optional[exp.Join]  # how it joins the sources before it; None for the FROM source


@dataclass(frozen=True)
class KeyRestriction:
    """A null-safe semi join on `left_keys` against `changed_keys`, placed before source `position`
    (after the last source when `position` is past it).

    `bounds`: predicates the restriction implies on the block's rows (key ranges, bounds.py),
    for its WHERE. A RIGHT/FULL join (`restrict_right`) restricts the joined source itself to
    `changed_keys` on `right_keys` too; `right_bounds` are predicates on that source's rows (in a
    derived table around it, or in the ON clause of the joins that keep the left side's rows).
    """

    position: int
    changed_keys: exp.Query  # columns k0, k1, ...
    left_keys: Tuple[exp.Expression, ...]
    bounds: Tuple[exp.Expression, ...] = ()
    right_keys: Tuple[exp.Expression, ...] = ()
    right_bounds: Tuple[exp.Expression, ...] = ()
    restrict_right: bool = False
    # a predicate over the block's rows and the changed keys' column `_streamsql_lo` (unqualified)
    # the semi join also holds: a window block's rows from the change's reach
    # (window_reach.range_reach), or those below it (window_reach.rows_reach)
    reach: Optional[exp.Expression] = None
    # an inner join instead of the semi join (the changed keys are distinct): the block reads
    # the changed keys' other columns (a running window's prefix, linear.py)
    joined: bool = False


@dataclass(frozen=True)
class Term:
    """One evaluation of a block: a version per source, its weight and key restrictions.

    `gate`: a condition on the whole evaluation (NOT IN), ANDed into its WHERE.
    """

    versions: Tuple[str, ...]
    weight: exp.Expression
    restrictions: Tuple[KeyRestriction, ...] = ()
    gate: Optional[exp.Expression] = None


class Builder(Protocol):
    """What the join rules and key ranges use of the builder that runs them (DeltaBuilder,
    linear.py): its switches, the flags they set, a source at a version, names for key bounds."""

    newest: bool  # inner joins over new versions only (linear.py's module docstring)
    signed: bool  # set when a term has a negative weight for inserted rows
    retracting: bool  # set when a rule re-evaluates old contents with weight -1

    def source_at(self, source: Source, version: str) -> exp.Expression:
        """The relation of a source at a version, under the source's alias."""
        ...

    def name_bound(self, bound: KeyBound) -> str:
        """The placeholder name of a key bound (the same name for the same bound)."""
        ...


def weight_literal(value: int) -> exp.Expression:
    return exp.cast(exp.Literal.number(value), exp.DataType.build("bigint"))


def delta_weight(source: Source) -> exp.Expression:
    """The weight column of a source read as its change."""
    return exp.column(WEIGHT, table=source.alias)


def is_constant(node: exp.Expression) -> bool:
    """True when the relation reads no input (VALUES, range(), a query without input tables)."""
    return not any(bound_input(table) is not None for table in node.find_all(exp.Table))


def at_version(node: exp.Expression, version: str) -> exp.Expression:
    """A copy of `node` with every input table replaced by its new or old placeholder."""
    copy = node.copy()
    for table in list(copy.find_all(exp.Table)):
        index = bound_input(table)
        if index is not None:
            table.replace(_placeholder_table(_PLACEHOLDERS[version](index), table))
    if bound_input(copy) is not None:  # the node itself was a table
        return _placeholder_table(_PLACEHOLDERS[version](bound_input(copy)), copy)
    return copy


def _placeholder_table(name: str, table: exp.Expression) -> exp.Table:
    alias = table.args.get("alias")
    return exp.Table(
        this=exp.to_identifier(name), alias=alias.copy() if alias is not None else None
    )


def union_all(queries) -> exp.Query:
    queries = list(queries)
    result = queries[0]
    for query in queries[1:]:
        result = exp.union(result, query, distinct=False)
    return result


def distinct_keys(
    branches: Sequence[exp.Query],
    names: Sequence[str],
    lowest: Optional[str] = None,
    null_wins: bool = False,
    highest: bool = False,
) -> exp.Select:
    """SELECT DISTINCT k0, k1, ... over the UNION ALL of `branches` (each projecting them first);
    with `lowest`, also the lowest non-NULL value of that column each key has (`highest`: the
    highest; `null_wins`: NULL when any of its values is NULL)."""
    alias = exp.TableAlias(this=exp.to_identifier("_streamsql_changed"))
    keys = exp.Subquery(this=union_all(branches), alias=alias)
    columns = [exp.column(name) for name in names]
    if lowest is None:
        return exp.Select(expressions=columns, from_=exp.From(this=keys), distinct=exp.Distinct())
    value: exp.Expression = (exp.Max if highest else exp.Min)(this=exp.column(lowest))
    if null_wins:
        every = exp.EQ(
            this=exp.Count(this=exp.Star()), expression=exp.Count(this=exp.column(lowest))
        )
        value = exp.Case(ifs=[exp.If(this=every, true=value)])
    return exp.Select(
        expressions=columns + [exp.alias_(value, lowest)],
        from_=exp.From(this=keys),
        group=exp.Group(expressions=[c.copy() for c in columns]),
    )
