"""The delta rules for linear queries: projection, filter, UNION ALL, joins, derived tables.

A query's *delta* is a query returning its columns plus `_streamsql_weight`: the rows the query
gains (+1) and loses (-1) when its inputs change from their old to their new contents. For a SELECT
block over sources S0 ... Sn (joined left to right) the delta is a UNION ALL of *terms*; each term
evaluates the same block with every source at a *version*: "new", "old" or "delta".

- table: the delta placeholder.
- inner/cross join, telescoping:  delta(L join R) = delta(L) join R_new  +  L_old join delta(R);
  a term's weight is the weight of its only delta source. Reading an input as of an older version
  makes Delta rebuild that version's list of files, for every statement that plans it, so for
  steps after the first the builder can instead (`newest`) expand over new versions only:
  delta(L join R) = delta(L) join R_new + L_new join delta(R) - delta(L) join delta(R), and for
  more inputs every nonempty set of them taken as their change (inclusion-exclusion; a term's
  weight is the product of its changes' weights, negated for an even number of them). On a first
  step every change is a whole input and that would multiply the work, while the old versions
  are empty: the telescoping form is used there.
- left equi-join: with K the join keys found in delta(L) or delta(R),
  delta(L left join R) = (L_new left join R_new) semi-join K, weight +1
                       + (L_old left join R_old) semi-join K, weight -1.
  The semi join (null-safe) sits right before the left join, on the left side's keys: for keys
  outside K both sides are unchanged, so the two evaluations would cancel.
- WHERE, projection and per-row generators (LATERAL VIEW) apply to every term unchanged.
- UNION ALL: the union of the branches' deltas.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set, Tuple

from sqlglot import exp

from dbt.adapters.streamsql.planning.binding import bound_input
from dbt.adapters.streamsql.planning.bounds import aliases_of, conjuncts, extreme_of, range_facts
from dbt.adapters.streamsql.planning.constructs import require_linear_select
from dbt.adapters.streamsql.planning.errors import RecomputeRequired
from dbt.adapters.streamsql.planning.plan import (
    WEIGHT,
    KeyBound,
    bound_placeholder,
    delta_input,
    new_input,
    old_input,
)

NEW, OLD, DELTA = "new", "old", "delta"
_PLACEHOLDERS = {NEW: new_input, OLD: old_input, DELTA: delta_input}


@dataclass(frozen=True)
class Source:
    """A relation in a SELECT block's FROM clause: an input table, a derived table or a constant."""

    node: exp.Expression
    alias: str
    join: Optional[exp.Join]  # how it joins the sources before it; None for the FROM source


@dataclass(frozen=True)
class KeyRestriction:
    """A null-safe semi join on `left_keys` against `changed_keys`, placed before source `position`."""

    position: int
    changed_keys: exp.Query  # columns k0, k1, ...
    left_keys: Tuple[exp.Expression, ...]


@dataclass(frozen=True)
class Term:
    """One evaluation of a block: a version per source, its weight and key restrictions."""

    versions: Tuple[str, ...]
    weight: exp.Expression
    restrictions: Tuple[KeyRestriction, ...] = ()


def weight_literal(value: int) -> exp.Expression:
    return exp.cast(exp.Literal.number(value), exp.DataType.build("bigint"))


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
    return exp.Table(this=exp.to_identifier(name), alias=alias.copy() if alias is not None else None)


@dataclass
class DeltaBuilder:
    """Builds deltas and records which constructs it met (for the plan's reason).

    `bounds` collects the key bounds of the terms it renders (bounds.py), named with
    `bound_prefix` so that the plans of one step (stages, top) never share a name.
    """

    constructs: Set[str] = field(default_factory=set)
    bound_prefix: str = ""
    bounds: Dict[str, KeyBound] = field(default_factory=dict)
    newest: bool = False  # inner joins over new versions only (see the module docstring)
    signed: bool = False  # set when a term has a negative weight for inserted rows

    # Inclusion-exclusion has 2^k - 1 terms for k inputs: above this, telescoping.
    MAX_NEWEST_SOURCES = 4

    @property
    def uses_left_join(self) -> bool:
        return "left join" in self.constructs

    def query_delta(self, query: exp.Expression) -> exp.Query:
        """The delta of a query: its columns plus `_streamsql_weight`."""
        if isinstance(query, exp.Subquery):
            return self.query_delta(query.this)
        if isinstance(query, exp.Union):
            if query.args.get("distinct"):
                raise RecomputeRequired("UNION (distinct) below the top of the query is not maintained incrementally")
            self.constructs.add("union all")
            return exp.union(self.query_delta(query.this), self.query_delta(query.expression), distinct=False)
        if isinstance(query, exp.Select):
            return self.select_delta(query)
        raise RecomputeRequired(f"{query.key.upper()} is not maintained incrementally")

    def select_delta(self, select: exp.Select) -> exp.Query:
        require_linear_select(select)
        sources = self.block_sources(select)
        terms = self.block_terms(sources)
        if select.args.get("where"):
            self.constructs.add("filter")
        self.constructs.add("projection")
        if not terms:
            empty = render_block(self, select, sources, Term((NEW,) * len(sources), weight_literal(0)))
            return empty.where(exp.false())
        return union_all(render_block(self, select, sources, term) for term in terms)

    def block_sources(self, select: exp.Select) -> List[Source]:
        """The FROM clause of a block as sources; rejects joins without a delta rule."""
        from_ = select.args.get("from_")
        if from_ is None:
            return []
        sources = [self._source(from_.this, None)]
        for join in select.args.get("joins") or []:
            side, kind = join.side.upper(), join.kind.upper()
            if kind in ("SEMI", "ANTI"):
                raise RecomputeRequired(f"{side} {kind} JOIN is not maintained incrementally".strip())
            if side in ("RIGHT", "FULL"):
                raise RecomputeRequired(f"{side} OUTER JOIN is not maintained incrementally")
            if join.method or join.args.get("using"):
                raise RecomputeRequired(f"{join.method or 'USING'} join is not maintained incrementally")
            if kind not in ("", "INNER", "CROSS", "OUTER"):
                raise RecomputeRequired(f"{kind} JOIN is not maintained incrementally")
            self.constructs.add("left join" if side == "LEFT" else "inner join")
            sources.append(self._source(join.this, join))
        if select.args.get("laterals"):
            self.constructs.add("lateral view")
        return sources

    def _source(self, node: exp.Expression, join: Optional[exp.Join]) -> Source:
        if isinstance(node, exp.Subquery) and not isinstance(node.this, exp.Query):
            raise RecomputeRequired("a parenthesized join is not maintained incrementally")
        if isinstance(node, exp.Subquery):
            self.constructs.add("derived table")
        elif bound_input(node) is None and not is_constant(node):
            raise RecomputeRequired(f"{node.key.upper()} in FROM is not maintained incrementally")
        return Source(node=node, alias=node.alias_or_name, join=join)

    def block_terms(self, sources: Sequence[Source]) -> List[Term]:
        """The terms whose union is the delta of the join of `sources` (see the module docstring)."""
        if not sources:
            return []
        changing = [i for i, source in enumerate(sources) if not is_constant(source.node)]
        inner_only = all(s.join is None or s.join.side.upper() != "LEFT" for s in sources)
        if self.newest and inner_only and 1 < len(changing) <= self.MAX_NEWEST_SOURCES:
            return self._newest_terms(sources, changing)
        terms: List[Term] = []
        if not is_constant(sources[0].node):
            terms.append(Term((DELTA,), self._delta_weight(sources[0])))
        for position in range(1, len(sources)):
            source = sources[position]
            if source.join.side.upper() == "LEFT":
                pairs = equi_join_keys(source.join.args.get("on"), {s.alias for s in sources[:position]}, source.alias)
                if not pairs:
                    raise RecomputeRequired("LEFT JOIN without an equality between its two sides is not maintained incrementally")
                if not terms and is_constant(source.node):
                    continue
                restriction = KeyRestriction(
                    position=position,
                    changed_keys=self._changed_keys(sources, position, terms, pairs),
                    left_keys=tuple(left for left, _ in pairs),
                )
                count = position + 1
                terms = [
                    Term((NEW,) * count, weight_literal(1), (restriction,)),
                    Term((OLD,) * count, weight_literal(-1), (restriction,)),
                ]
            else:
                terms = [Term(t.versions + (NEW,), t.weight, t.restrictions) for t in terms]
                if not is_constant(source.node):
                    terms.append(Term((OLD,) * position + (DELTA,), self._delta_weight(source)))
        return terms

    def _newest_terms(self, sources: Sequence[Source], changing: Sequence[int]) -> List[Term]:
        """Every nonempty set of the changing sources as their change, the others as new."""
        terms = []
        for size in range(1, len(changing) + 1):
            for chosen in itertools.combinations(changing, size):
                versions = tuple(DELTA if i in chosen else NEW for i in range(len(sources)))
                weights = [self._delta_weight(sources[i]) for i in chosen]
                weight = weights[0]
                for factor in weights[1:]:
                    weight = exp.Mul(this=weight, expression=factor)
                if size % 2 == 0:
                    weight = exp.Neg(this=exp.Paren(this=weight))
                    self.signed = True
                terms.append(Term(versions, weight))
        return terms

    def term_bounds(self, select: exp.Select, sources: Sequence[Source], term: Term) -> List[exp.Expression]:
        """Key-bound placeholders for the term's sources other than its one changed table.

        Only inner joins: a term of a block with a LEFT JOIN evaluates whole sides, not a change.
        """
        if term.restrictions or DELTA not in term.versions:
            return []
        if any(s.join is not None and s.join.side.upper() == "LEFT" for s in sources):
            return []
        changed = [s for s, v in zip(sources, term.versions)
                   if v == DELTA and bound_input(s.node) is not None]
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
                        bound = KeyBound("", column.sql(), side,
                                         extreme_of(expression, side, placeholder, change.alias))
                        placeholders.append(exp.column(self._named(bound)))
        return placeholders

    def _named(self, bound: KeyBound) -> str:
        for name, known in self.bounds.items():
            if (known.column, known.operator, known.value) == (bound.column, bound.operator, bound.value):
                return name
        name = bound_placeholder(self.bound_prefix, len(self.bounds))
        self.bounds[name] = KeyBound(name, bound.column, bound.operator, bound.value)
        return name

    def _delta_weight(self, source: Source) -> exp.Expression:
        return exp.column(WEIGHT, table=source.alias)

    def _changed_keys(
        self,
        sources: Sequence[Source],
        position: int,
        prefix_terms: Sequence[Term],
        pairs: Sequence[Tuple[exp.Expression, exp.Expression]],
    ) -> exp.Query:
        """SELECT DISTINCT k0, k1, ... : the join keys present in delta(left side) or delta(right side)."""
        names = [f"k{j}" for j in range(len(pairs))]
        branches: List[exp.Select] = []
        for term in prefix_terms:
            from_, joins = render_from(self, sources[:position], term)
            projections = [exp.alias_(left.copy(), name) for (left, _), name in zip(pairs, names)]
            branches.append(exp.Select(expressions=projections, from_=from_, joins=joins))
        right = sources[position]
        if not is_constant(right.node):
            projections = [exp.alias_(r.copy(), name) for (_, r), name in zip(pairs, names)]
            branches.append(exp.Select(expressions=projections, from_=exp.From(this=self.source_at(right, DELTA))))
        keys = exp.Subquery(this=union_all(branches), alias=exp.TableAlias(this=exp.to_identifier("_streamsql_changed")))
        return exp.Select(expressions=[exp.column(name) for name in names], from_=exp.From(this=keys), distinct=exp.Distinct())

    def source_at(self, source: Source, version: str) -> exp.Expression:
        """The relation of a source at a version, under the source's alias."""
        node = source.node
        if version != DELTA or is_constant(node):
            return at_version(node, NEW if version == DELTA else version)
        if isinstance(node, exp.Subquery):
            alias = node.args.get("alias").copy()
            if alias.columns:
                alias.set("columns", [c.copy() for c in alias.columns] + [exp.to_identifier(WEIGHT)])
            return exp.Subquery(this=self.query_delta(node.this), alias=alias)
        return at_version(node, DELTA)


def equi_join_keys(
    condition: Optional[exp.Expression], left_aliases: Set[str], right_alias: str
) -> List[Tuple[exp.Expression, exp.Expression]]:
    """(left expression, right expression) pairs of the `=`/`<=>` conjuncts relating the two sides."""
    pairs = []
    for conjunct in conjuncts(condition):
        if not isinstance(conjunct, (exp.EQ, exp.NullSafeEQ)):
            continue
        first, second = conjunct.this, conjunct.expression
        first_tables, second_tables = aliases_of(first), aliases_of(second)
        if first_tables and first_tables <= left_aliases and second_tables == {right_alias}:
            pairs.append((first, second))
        elif second_tables and second_tables <= left_aliases and first_tables == {right_alias}:
            pairs.append((second, first))
    return pairs


def render_from(builder: DeltaBuilder, sources: Sequence[Source], term: Term) -> Tuple[exp.From, List[exp.Join]]:
    """FROM and JOIN clauses of `sources` at the term's versions, with its key restrictions."""
    from_ = exp.From(this=builder.source_at(sources[0], term.versions[0]))
    joins: List[exp.Join] = []
    for position in range(1, len(sources)):
        for restriction in term.restrictions:
            if restriction.position == position:
                joins.append(_semi_join(restriction))
        join = sources[position].join.copy()
        join.set("this", builder.source_at(sources[position], term.versions[position]))
        joins.append(join)
    return from_, joins


def _semi_join(restriction: KeyRestriction) -> exp.Join:
    alias = f"_streamsql_keys_{restriction.position}"
    condition = exp.and_(
        *(
            exp.NullSafeEQ(this=left.copy(), expression=exp.column(f"k{j}", table=alias))
            for j, left in enumerate(restriction.left_keys)
        )
    )
    keys = exp.Subquery(this=restriction.changed_keys.copy(), alias=exp.TableAlias(this=exp.to_identifier(alias)))
    return exp.Join(this=keys, side="LEFT", kind="SEMI", on=condition)


def render_block(
    builder: DeltaBuilder,
    select: exp.Select,
    sources: Sequence[Source],
    term: Term,
    projections: Optional[Sequence[exp.Expression]] = None,
) -> exp.Select:
    """The block evaluated at the term: `projections` (default: the block's), then the weight."""
    block = select.copy()
    if sources:
        from_, joins = render_from(builder, sources, term)
        block.set("from_", from_)
        block.set("joins", joins or None)
    chosen = [p.copy() for p in (projections if projections is not None else select.expressions)]
    block.set("expressions", chosen + [exp.alias_(term.weight.copy(), WEIGHT)])
    bounds = builder.term_bounds(select, sources, term) if sources else []
    if bounds:
        block = block.where(exp.and_(*bounds))
    return block


def union_all(queries) -> exp.Query:
    queries = list(queries)
    result = queries[0]
    for query in queries[1:]:
        result = exp.union(result, query, distinct=False)
    return result
