"""The terms of a block's chain of joins; inner and cross joins by telescoping.

For sources S0 ... Sn joined left to right, inner and cross joins telescope:

    delta(L join R) = delta(L) join R_new  +  L_old join delta(R)

and a term's weight is the weight of its only delta source. Reading an input as of an older
version makes Delta rebuild that version's list of files, for every statement that plans it, so
for steps after the first the builder can instead (`newest`) expand over new versions only:
delta(L join R) = delta(L) join R_new + L_new join delta(R) - delta(L) join delta(R), and for
more inputs every nonempty set of them taken as their change (inclusion-exclusion; a term's
weight is the product of its changes' weights, negated for an even number of them). On a first
step every change is a whole input and that would multiply the work, while the old versions are
empty: the telescoping form is used there.

A join of another kind takes the key-restriction rule (keyed.py) over the terms of the sources
before it. A term that joins one changed input with the others' whole contents gets key bounds
on those others (`term_bounds`, bounds.py).
"""

from __future__ import annotations

import itertools
from typing import List, Sequence

from sqlglot import exp

from dbt.adapters.streamsql.planning.binding import bound_input
from dbt.adapters.streamsql.planning.bounds import conjuncts, extreme_of, range_facts
from dbt.adapters.streamsql.planning.joins.keyed import restricted_terms
from dbt.adapters.streamsql.planning.joins.kinds import INNER, join_rule
from dbt.adapters.streamsql.planning.plan import KeyBound, delta_input
from dbt.adapters.streamsql.planning.terms import (
    DELTA,
    NEW,
    OLD,
    Builder,
    Source,
    Term,
    delta_weight,
    is_constant,
)

# Inclusion-exclusion has 2^k - 1 terms for k inputs: above this, telescoping.
MAX_NEWEST_SOURCES = 4


def join_terms(builder: Builder, sources: Sequence[Source]) -> List[Term]:
    """The terms whose union is the delta of the join of `sources` (see the module docstring)."""
    if not sources:
        return []
    changing = [i for i, source in enumerate(sources) if not is_constant(source.node)]
    inner_only = all(join_rule(s.join) == INNER for s in sources)
    if builder.newest and inner_only and 1 < len(changing) <= MAX_NEWEST_SOURCES:
        return _newest_terms(builder, sources, changing)
    terms: List[Term] = []
    if not is_constant(sources[0].node):
        terms.append(Term((DELTA,), delta_weight(sources[0])))
    for position in range(1, len(sources)):
        source = sources[position]
        if join_rule(source.join) != INNER:
            terms = restricted_terms(builder, sources, position, terms)
            continue
        terms = [Term(t.versions + (NEW,), t.weight, t.restrictions, t.gate) for t in terms]
        if not is_constant(source.node):
            terms.append(Term((OLD,) * position + (DELTA,), delta_weight(source)))
    return terms


def _newest_terms(
    builder: Builder, sources: Sequence[Source], changing: Sequence[int]
) -> List[Term]:
    """Every nonempty set of the changing sources as their change, the others as new."""
    terms = []
    for size in range(1, len(changing) + 1):
        for chosen in itertools.combinations(changing, size):
            versions = tuple(DELTA if i in chosen else NEW for i in range(len(sources)))
            weights = [delta_weight(sources[i]) for i in chosen]
            weight = weights[0]
            for factor in weights[1:]:
                weight = exp.Mul(this=weight, expression=factor)
            if size % 2 == 0:
                weight = exp.Neg(this=exp.Paren(this=weight))
                builder.signed = True
            terms.append(Term(versions, weight))
    return terms


def term_bounds(
    builder: Builder, select: exp.Select, sources: Sequence[Source], term: Term
) -> List[exp.Expression]:
    """Key-bound placeholders for the term's sources other than its one changed table.

    Only inner joins: a term of a block with a LEFT JOIN evaluates whole sides, not a change.
    """
    if term.restrictions or term.gate is not None or DELTA not in term.versions:
        return []
    if any(join_rule(s.join) != INNER for s in sources):
        return []
    changed = [
        s for s, v in zip(sources, term.versions) if v == DELTA and bound_input(s.node) is not None
    ]
    conditions = conjuncts(select.args.get("where") and select.args["where"].this)
    for source in sources:
        if source.join is not None:
            conditions += conjuncts(source.join.args.get("on"))
    placeholders: List[exp.Expression] = []
    for source, version in zip(sources, term.versions):
        if version == DELTA or is_constant(source.node):
            continue
        for change in changed:
            placeholder = delta_input(bound_input(change.node))
            for condition in conditions:
                for column, side, expression in range_facts(condition, source.alias, change.alias):
                    bound = KeyBound(
                        "",
                        column.sql(),
                        side,
                        extreme_of(expression, side, placeholder, change.alias),
                    )
                    placeholders.append(exp.column(builder.name_bound(bound)))
    return placeholders
