"""The key-restriction rule: LEFT/RIGHT/FULL equi-joins, semi and anti joins, NOT IN.

With K the join keys found in the change of the left side or of the right side,

    delta(L left join R) = (L_new left join R_new) semi-join K, weight +1
                         + (L_old left join R_old) semi-join K, weight -1.

The semi join (null-safe) sits right before the join, on the left side's keys: for keys outside
K both sides are unchanged, so the two evaluations would cancel. The same holds for every join
whose result rows each belong to one key and depend only on the rows of both sides with that
key: LEFT SEMI / LEFT ANTI joins (IN, EXISTS, NOT EXISTS subqueries become those, subqueries.py)
take the same rule; RIGHT and FULL joins restrict the right side to K as well (a NULL-padded
right row belongs to its own key), so that NULL-padded rows come and go with their keys' matches.

NOT IN (a null-aware anti join) takes the rule above while the subquery neither holds a NULL nor
changes between empty and not empty (a row's fate then depends on its key alone); otherwise
every row's fate may change: the whole old result out, the whole new result in. Each pair of
terms is gated by that condition, the whole-result pair also by a key bound the executor turns
into `false` when the condition is not met, so that Spark prunes it before reading.

Restricted evaluations carry key bounds too (key_ranges.py). `render_from` writes a term's FROM
clause with its restrictions, those of top-K windows (linear.py) included.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from sqlglot import exp

from dbt.adapters.streamsql.planning.bounds import AT_MOST
from dbt.adapters.streamsql.planning.errors import RecomputeRequired
from dbt.adapters.streamsql.planning.joins.kinds import (
    FULL,
    NOT_IN,
    RIGHT,
    equi_join_keys,
    join_rule,
    join_text,
)
from dbt.adapters.streamsql.planning.key_ranges import (
    bounds_on,
    equalities_of,
    key_ranges,
    range_predicate,
)
from dbt.adapters.streamsql.planning.plan import DIALECT, KeyBound
from dbt.adapters.streamsql.planning.subqueries import null_aware_pair
from dbt.adapters.streamsql.planning.terms import (
    DELTA,
    NEW,
    OLD,
    Builder,
    KeyRestriction,
    Source,
    Term,
    distinct_keys,
    is_constant,
    weight_literal,
)
from dbt.adapters.streamsql.planning.window_reach import LOWEST


def restricted_terms(
    builder: Builder, sources: Sequence[Source], position: int, terms: List[Term]
) -> List[Term]:
    """The prefix joined with `sources[position]` re-evaluated, new and old, for the keys whose
    rows change on either side (the rule of LEFT/RIGHT/FULL/SEMI/ANTI joins and NOT IN)."""
    source = sources[position]
    rule = join_rule(source.join)
    if rule == NOT_IN:
        pairs = [null_aware_pair(source.join)]
    else:
        prefix = {s.alias for s in sources[:position]}
        pairs = equi_join_keys(source.join.args.get("on"), prefix, source.alias)
    if not pairs:
        raise RecomputeRequired(
            f"{join_text(source.join)} without an equality between its "
            "two sides is not maintained incrementally"
        )
    if not terms and is_constant(source.node):
        return terms
    builder.retracting = True
    equalities = equalities_of(sources[:position])
    left_keys = [left for left, _ in pairs]
    ranges = key_ranges(
        sources[:position],
        terms,
        left_keys,
        equalities,
        right=source,
        right_keys=[right for _, right in pairs],
    )
    right_bounds: List[exp.Expression] = []
    if rule != NOT_IN:  # NOT IN reads the whole subquery: its NULLs, whether it is empty
        for (_, right), key_range in zip(pairs, ranges):
            if key_range is not None and isinstance(right, exp.Column):
                right_bounds.append(range_predicate(builder, right, key_range))
    restriction = KeyRestriction(
        position=position,
        changed_keys=_changed_keys(builder, sources, position, terms, pairs),
        left_keys=tuple(left_keys),
        bounds=tuple(bounds_on(builder, sources[:position], left_keys, ranges, equalities)),
        right_keys=tuple(right for _, right in pairs),
        right_bounds=tuple(right_bounds),
        restrict_right=rule in (RIGHT, FULL),
    )
    count = position + 1
    if rule != NOT_IN:
        return [
            Term((NEW,) * count, weight_literal(1), (restriction,)),
            Term((OLD,) * count, weight_literal(-1), (restriction,)),
        ]
    by_key = _not_in_by_key(builder, source, pairs[0][1])
    not_by_key = exp.Not(this=exp.Paren(this=by_key.copy()))
    needed = exp.Case(ifs=[exp.If(this=not_by_key.copy(), true=exp.Literal.number(1))])
    gate = builder.name_bound(KeyBound("", "1", AT_MOST, needed.sql(DIALECT)))
    whole = exp.and_(exp.column(gate), not_by_key)
    return [
        Term((NEW,) * count, weight_literal(1), (restriction,), by_key),
        Term((OLD,) * count, weight_literal(-1), (restriction,), by_key.copy()),
        Term((NEW,) * count, weight_literal(1), (), whole),
        Term((OLD,) * count, weight_literal(-1), (), whole.copy()),
    ]


def _not_in_by_key(builder: Builder, source: Source, key: exp.Expression) -> exp.Expression:
    """True when NOT IN over `source` decides each row by its key alone in both versions:
    the subquery holds no NULL, old or new, and is empty in both or in neither."""

    def holds_a_row(version: str, condition: Optional[exp.Expression]) -> exp.Expression:
        probe = exp.Select(
            expressions=[exp.Literal.number(1)],
            from_=exp.From(this=builder.source_at(source, version)),
        )
        if condition is not None:
            probe = probe.where(condition.copy())
        probe.set("limit", exp.Limit(expression=exp.Literal.number(1)))
        found = exp.Is(this=exp.Subquery(this=probe), expression=exp.Null())
        return exp.Paren(this=exp.Not(this=found))

    null_key = exp.Is(this=key.copy(), expression=exp.Null())
    return exp.Paren(
        this=exp.and_(
            exp.Not(this=holds_a_row(OLD, null_key)),
            exp.Not(this=holds_a_row(NEW, null_key)),
            exp.EQ(this=holds_a_row(OLD, None), expression=holds_a_row(NEW, None)),
        )
    )


def _changed_keys(
    builder: Builder,
    sources: Sequence[Source],
    position: int,
    prefix_terms: Sequence[Term],
    pairs: Sequence[Tuple[exp.Expression, exp.Expression]],
) -> exp.Query:
    """SELECT DISTINCT k0, k1, ... : the join keys present in delta(left side) or
    delta(right side)."""
    names = [f"k{j}" for j in range(len(pairs))]
    branches: List[exp.Select] = []
    for term in prefix_terms:
        from_, joins = render_from(builder, sources[:position], term)
        projections = [exp.alias_(left.copy(), name) for (left, _), name in zip(pairs, names)]
        branch = exp.Select(expressions=projections, from_=from_, joins=joins)
        branches.append(branch.where(term.gate.copy()) if term.gate is not None else branch)
    right = sources[position]
    if not is_constant(right.node):
        projections = [exp.alias_(r.copy(), name) for (_, r), name in zip(pairs, names)]
        branches.append(
            exp.Select(
                expressions=projections, from_=exp.From(this=builder.source_at(right, DELTA))
            )
        )
    return distinct_keys(branches, names)


def render_from(
    builder: Builder, sources: Sequence[Source], term: Term
) -> Tuple[exp.From, List[exp.Join]]:
    """FROM and JOIN clauses of `sources` at the term's versions, with its key restrictions."""
    from_ = exp.From(this=builder.source_at(sources[0], term.versions[0]))
    joins: List[exp.Join] = []
    for position in range(1, len(sources)):
        restriction = next((r for r in term.restrictions if r.position == position), None)
        if restriction is not None:
            joins.append(
                _semi_join(
                    restriction.left_keys,
                    restriction.changed_keys,
                    f"_streamsql_keys_{position}",
                    restriction.reach,
                )
            )
        join = sources[position].join.copy()
        node = builder.source_at(sources[position], term.versions[position])
        if restriction is not None and restriction.restrict_right:
            node = _restricted_source(node, restriction, position)
        elif restriction is not None and restriction.right_bounds:
            bounds = [bound.copy() for bound in restriction.right_bounds]
            join.set("on", exp.and_(join.args["on"].copy(), *bounds))
        join.set("this", node)
        joins.append(join)
    for restriction in term.restrictions:
        if restriction.position >= len(sources):
            joins.append(
                _semi_join(
                    restriction.left_keys,
                    restriction.changed_keys,
                    f"_streamsql_keys_{restriction.position}",
                    restriction.reach,
                    restriction.joined,
                )
            )
    return from_, joins


def _semi_join(
    left_keys: Sequence[exp.Expression],
    changed_keys: exp.Query,
    alias: str,
    reach: Optional[exp.Expression] = None,
    joined: bool = False,
) -> exp.Join:
    condition = exp.and_(
        *(
            exp.NullSafeEQ(this=left.copy(), expression=exp.column(f"k{j}", table=alias))
            for j, left in enumerate(left_keys)
        )
    )
    if reach is not None:  # e.g. from the partition's lowest changed ORDER BY value on
        reach = reach.copy()
        for column in list(reach.find_all(exp.Column)):
            if column.name == LOWEST:
                column.set("table", exp.to_identifier(alias))
        condition = exp.and_(condition, reach)
    keys = exp.Subquery(
        this=changed_keys.copy(), alias=exp.TableAlias(this=exp.to_identifier(alias))
    )
    if joined:
        return exp.Join(this=keys, on=condition)
    return exp.Join(this=keys, side="LEFT", kind="SEMI", on=condition)


def _restricted_source(
    node: exp.Expression, restriction: KeyRestriction, position: int
) -> exp.Expression:
    """The right side of a RIGHT/FULL join, its rows restricted to the changed keys."""
    keys = _semi_join(
        restriction.right_keys, restriction.changed_keys, f"_streamsql_right_keys_{position}"
    )
    inner = exp.Select(expressions=[exp.Star()], from_=exp.From(this=node), joins=[keys])
    if restriction.right_bounds:
        inner = inner.where(exp.and_(*(b.copy() for b in restriction.right_bounds)))
    alias = exp.TableAlias(this=exp.to_identifier(node.alias_or_name))
    return exp.Subquery(this=inner, alias=alias)
