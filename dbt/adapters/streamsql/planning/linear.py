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
  outside K both sides are unchanged, so the two evaluations would cancel. The same holds for
  every join whose result rows each belong to one key and depend only on the rows of both sides
  with that key: LEFT SEMI / LEFT ANTI joins (IN, EXISTS, NOT EXISTS subqueries become those,
  subqueries.py) take the same rule; RIGHT and FULL joins restrict the right side to K as well
  (a NULL-padded right row belongs to its own key), so that NULL-padded rows come and go with
  their keys' matches.
- NOT IN (a null-aware anti join): the rule above while the subquery neither holds a NULL nor
  changes between empty and not empty (a row's fate then depends on its key alone); otherwise
  every row's fate may change: the whole old result out, the whole new result in. Each pair of
  terms is gated by that condition, the whole-result pair also by a key bound the executor
  turns into `false` when the condition is not met, so that Spark prunes it before reading.
- a window block (top-K, windows.py): its rows re-evaluated, new (+1) and old (-1), in the
  partitions whose keys its FROM/WHERE's change holds.
- Restricted evaluations also carry key bounds (bounds.py): the range of the changed keys, as
  literals, on the columns that equal them, so that Delta skips the files of untouched keys.
- WHERE, projection and per-row generators (LATERAL VIEW) apply to every term unchanged.
- UNION ALL: the union of the branches' deltas.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set, Tuple

from sqlglot import exp

from dbt.adapters.streamsql.planning.binding import bound_input
from dbt.adapters.streamsql.planning.bounds import (
    AT_LEAST,
    AT_MOST,
    aliases_of,
    conjuncts,
    extreme_of,
    key_range_predicate,
    range_facts,
)
from dbt.adapters.streamsql.planning.constructs import contains_aggregate, require_linear_select
from dbt.adapters.streamsql.planning.errors import RecomputeRequired
from dbt.adapters.streamsql.planning.plan import (
    DIALECT,
    WEIGHT,
    KeyBound,
    bound_placeholder,
    delta_input,
    new_input,
    old_input,
)
from dbt.adapters.streamsql.planning.subqueries import null_aware_pair, origin
from dbt.adapters.streamsql.planning.windows import partition_keys, ranking_names, windows_of

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


@dataclass(frozen=True)
class Term:
    """One evaluation of a block: a version per source, its weight and key restrictions.

    `gate`: a condition on the whole evaluation (NOT IN), ANDed into its WHERE.
    """

    versions: Tuple[str, ...]
    weight: exp.Expression
    restrictions: Tuple[KeyRestriction, ...] = ()
    gate: Optional[exp.Expression] = None


INNER, LEFT, RIGHT, FULL = "inner", "left", "right", "full"
SEMI, ANTI, NOT_IN = "semi", "anti", "not in"
# Constructs an aggregate plan's reason names too (what the aggregate's delta reads through).
KEYED_CONSTRUCTS = (
    "right join",
    "full join",
    "semi join",
    "anti join",
    "in (subquery)",
    "exists",
    "not in (subquery)",
    "not exists",
)
TOP_K = "top-k per partition"


def join_rule(join: Optional[exp.Join]) -> str:
    """Which delta rule a join takes (INNER: telescoping; the others: key restriction)."""
    if join is None:
        return INNER
    side, kind = join.side.upper(), join.kind.upper()
    if kind == "SEMI":
        return SEMI
    if kind == "ANTI":
        return NOT_IN if null_aware_pair(join) is not None else ANTI
    return {"LEFT": LEFT, "RIGHT": RIGHT, "FULL": FULL}.get(side, INNER)


def _join_text(join: exp.Join) -> str:
    return " ".join(part for part in (join.side.upper(), join.kind.upper(), "JOIN") if part)


def join_construct(join: exp.Join) -> str:
    """The name of a join in a plan's reason."""
    rule = join_rule(join)
    if rule in (SEMI, ANTI, NOT_IN):
        return origin(join) or f"{rule} join"
    return f"{rule} join"


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
    return exp.Table(
        this=exp.to_identifier(name), alias=alias.copy() if alias is not None else None
    )


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
    # set when a rule re-evaluates old contents with weight -1 (key restrictions, windows): the
    # change may delete rows even when every input change is an insert
    retracting: bool = False

    # Inclusion-exclusion has 2^k - 1 terms for k inputs: above this, telescoping.
    MAX_NEWEST_SOURCES = 4

    def query_delta(self, query: exp.Expression) -> exp.Query:
        """The delta of a query: its columns plus `_streamsql_weight`."""
        if isinstance(query, exp.Subquery):
            return self.query_delta(query.this)
        if isinstance(query, exp.Union):
            if query.args.get("distinct"):
                raise RecomputeRequired(
                    "UNION (distinct) below the top of the query is not maintained incrementally"
                )
            self.constructs.add("union all")
            return exp.union(
                self.query_delta(query.this), self.query_delta(query.expression), distinct=False
            )
        if isinstance(query, exp.Select):
            return self.select_delta(query)
        raise RecomputeRequired(f"{query.key.upper()} is not maintained incrementally")

    def select_delta(self, select: exp.Select) -> exp.Query:
        if windows_of(select):
            return self.window_delta(select)
        require_linear_select(select)
        sources = self.block_sources(select)
        terms = self.block_terms(sources)
        if select.args.get("where"):
            self.constructs.add("filter")
        self.constructs.add("projection")
        if not terms:
            return self._empty(select, sources)
        return union_all(render_block(self, select, sources, term) for term in terms)

    def _empty(self, select: exp.Select, sources: Sequence[Source]) -> exp.Query:
        empty = render_block(self, select, sources, Term((NEW,) * len(sources), weight_literal(0)))
        return empty.where(exp.false())

    def window_delta(self, select: exp.Select) -> exp.Query:
        """A top-K block (windows.py): its partitions whose rows change, re-evaluated.

        K = the partition keys of the rows in the change of the block below its windows (FROM,
        joins, WHERE); the block over the new inputs restricted to K, +1, and over the old, -1.
        """
        self.constructs.add(f"{TOP_K} ({', '.join(ranking_names(select)) or 'window'})")
        sources = self.block_sources(select)
        keys = partition_keys(select)
        terms = self.block_terms(sources)
        if not terms:
            return self._empty(select, sources)
        self.retracting = True
        names = [f"k{j}" for j in range(len(keys))]
        below = select.copy()
        projections = [exp.alias_(key.copy(), name) for key, name in zip(keys, names)]
        branches = [render_block(self, below, sources, term, projections) for term in terms]
        changed = _distinct_keys(branches, names)
        equalities = _equalities(sources, select.args.get("where"))
        ranges = self._key_ranges(sources, terms, keys, equalities)
        bounds = self._bounds_on(sources, keys, ranges, equalities)
        restriction = KeyRestriction(len(sources), changed, tuple(keys), bounds=tuple(bounds))
        count = len(sources)
        return union_all(
            [
                render_block(
                    self, select, sources, Term((NEW,) * count, weight_literal(1), (restriction,))
                ),
                render_block(
                    self, select, sources, Term((OLD,) * count, weight_literal(-1), (restriction,))
                ),
            ]
        )

    def block_sources(self, select: exp.Select) -> List[Source]:
        """The FROM clause of a block as sources; rejects joins without a delta rule."""
        from_ = select.args.get("from_")
        if from_ is None:
            return []
        sources = [self._source(from_.this, None)]
        for join in select.args.get("joins") or []:
            kind = join.kind.upper()
            if join.method or join.args.get("using"):
                raise RecomputeRequired(
                    f"{join.method or 'USING'} join is not maintained incrementally"
                )
            if kind not in ("", "INNER", "CROSS", "OUTER", "SEMI", "ANTI"):
                raise RecomputeRequired(f"{kind} JOIN is not maintained incrementally")
            self.constructs.add(join_construct(join))
            sources.append(self._source(join.this, join))
        if select.args.get("laterals"):
            self.constructs.add("lateral view")
        return sources

    def _source(self, node: exp.Expression, join: Optional[exp.Join]) -> Source:
        if isinstance(node, exp.Subquery) and not isinstance(node.this, exp.Query):
            raise RecomputeRequired("a parenthesized join is not maintained incrementally")
        if isinstance(node, exp.Subquery):
            if not node.alias_or_name.startswith("_streamsql_"):  # not one the planner made
                self.constructs.add("derived table")
        elif bound_input(node) is None and not is_constant(node):
            raise RecomputeRequired(f"{node.key.upper()} in FROM is not maintained incrementally")
        return Source(node=node, alias=node.alias_or_name, join=join)

    def block_terms(self, sources: Sequence[Source]) -> List[Term]:
        """The terms whose union is the delta of the join of `sources` (see the module
        docstring)."""
        if not sources:
            return []
        changing = [i for i, source in enumerate(sources) if not is_constant(source.node)]
        inner_only = all(join_rule(s.join) == INNER for s in sources)
        if self.newest and inner_only and 1 < len(changing) <= self.MAX_NEWEST_SOURCES:
            return self._newest_terms(sources, changing)
        terms: List[Term] = []
        if not is_constant(sources[0].node):
            terms.append(Term((DELTA,), self._delta_weight(sources[0])))
        for position in range(1, len(sources)):
            source = sources[position]
            if join_rule(source.join) != INNER:
                terms = self._restricted_terms(sources, position, terms)
                continue
            terms = [Term(t.versions + (NEW,), t.weight, t.restrictions, t.gate) for t in terms]
            if not is_constant(source.node):
                terms.append(Term((OLD,) * position + (DELTA,), self._delta_weight(source)))
        return terms

    def _restricted_terms(
        self, sources: Sequence[Source], position: int, terms: List[Term]
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
                f"{_join_text(source.join)} without an equality between its "
                "two sides is not maintained incrementally"
            )
        if not terms and is_constant(source.node):
            return terms
        self.retracting = True
        equalities = _equalities(sources[:position])
        left_keys = [left for left, _ in pairs]
        ranges = self._key_ranges(
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
                    right_bounds.append(self._range_predicate(right, key_range))
        restriction = KeyRestriction(
            position=position,
            changed_keys=self._changed_keys(sources, position, terms, pairs),
            left_keys=tuple(left_keys),
            bounds=tuple(self._bounds_on(sources[:position], left_keys, ranges, equalities)),
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
        by_key = self._not_in_by_key(source, pairs[0][1])
        not_by_key = exp.Not(this=exp.Paren(this=by_key.copy()))
        needed = exp.Case(ifs=[exp.If(this=not_by_key.copy(), true=exp.Literal.number(1))])
        gate = self._named(KeyBound("", "1", AT_MOST, needed.sql(DIALECT)))
        whole = exp.and_(exp.column(gate), not_by_key)
        return [
            Term((NEW,) * count, weight_literal(1), (restriction,), by_key),
            Term((OLD,) * count, weight_literal(-1), (restriction,), by_key.copy()),
            Term((NEW,) * count, weight_literal(1), (), whole),
            Term((OLD,) * count, weight_literal(-1), (), whole.copy()),
        ]

    def _not_in_by_key(self, source: Source, key: exp.Expression) -> exp.Expression:
        """True when NOT IN over `source` decides each row by its key alone in both versions:
        the subquery holds no NULL, old or new, and is empty in both or in neither."""

        def holds_a_row(version: str, condition: Optional[exp.Expression]) -> exp.Expression:
            probe = exp.Select(
                expressions=[exp.Literal.number(1)],
                from_=exp.From(this=self.source_at(source, version)),
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

    def _key_ranges(
        self,
        sources: Sequence[Source],
        terms: Sequence[Term],
        keys: Sequence[exp.Expression],
        equalities: Sequence[Equality],
        right: Optional[Source] = None,
        right_keys: Sequence[exp.Expression] = (),
    ) -> List[Optional[Tuple[str, str]]]:
        """Per key: (MIN, MAX) scalar SQL over delta placeholders bounding every non-NULL value the
        changed keys can hold, or None where no such bound follows from the change.

        A term's rows come from the change of each input it reads as a change, so a key is bounded
        by the range, over one of those changes, of an expression the key equals (bounds.py).
        """
        ranges: List[Optional[Tuple[str, str]]] = []
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

    def _bounds_on(
        self,
        sources: Sequence[Source],
        keys: Sequence[exp.Expression],
        ranges: Sequence[Optional[Tuple[str, str]]],
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
            predicates += [self._range_predicate(column, key_range) for column in columns]
        return predicates

    def _range_predicate(self, column: exp.Column, key_range: Tuple[str, str]) -> exp.Expression:
        low = self._named(KeyBound("", column.sql(DIALECT), AT_LEAST, key_range[0]))
        high = self._named(KeyBound("", column.sql(DIALECT), AT_MOST, key_range[1]))
        return key_range_predicate(column, low, high)

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

    def term_bounds(
        self, select: exp.Select, sources: Sequence[Source], term: Term
    ) -> List[exp.Expression]:
        """Key-bound placeholders for the term's sources other than its one changed table.

        Only inner joins: a term of a block with a LEFT JOIN evaluates whole sides, not a change.
        """
        if term.restrictions or term.gate is not None or DELTA not in term.versions:
            return []
        if any(join_rule(s.join) != INNER for s in sources):
            return []
        changed = [
            s
            for s, v in zip(sources, term.versions)
            if v == DELTA and bound_input(s.node) is not None
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
                    for column, side, expression in range_facts(
                        condition, source.alias, change.alias
                    ):
                        bound = KeyBound(
                            "",
                            column.sql(),
                            side,
                            extreme_of(expression, side, placeholder, change.alias),
                        )
                        placeholders.append(exp.column(self._named(bound)))
        return placeholders

    def _named(self, bound: KeyBound) -> str:
        for name, known in self.bounds.items():
            if (known.column, known.operator, known.value) == (
                bound.column,
                bound.operator,
                bound.value,
            ):
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
        """SELECT DISTINCT k0, k1, ... : the join keys present in delta(left side) or
        delta(right side)."""
        names = [f"k{j}" for j in range(len(pairs))]
        branches: List[exp.Select] = []
        for term in prefix_terms:
            from_, joins = render_from(self, sources[:position], term)
            projections = [exp.alias_(left.copy(), name) for (left, _), name in zip(pairs, names)]
            branch = exp.Select(expressions=projections, from_=from_, joins=joins)
            branches.append(branch.where(term.gate.copy()) if term.gate is not None else branch)
        right = sources[position]
        if not is_constant(right.node):
            projections = [exp.alias_(r.copy(), name) for (_, r), name in zip(pairs, names)]
            branches.append(
                exp.Select(
                    expressions=projections, from_=exp.From(this=self.source_at(right, DELTA))
                )
            )
        return _distinct_keys(branches, names)

    def source_at(self, source: Source, version: str) -> exp.Expression:
        """The relation of a source at a version, under the source's alias."""
        node = source.node
        if version != DELTA or is_constant(node):
            return at_version(node, NEW if version == DELTA else version)
        if isinstance(node, exp.Subquery):
            alias = node.args.get("alias").copy()
            if alias.columns:
                alias.set(
                    "columns", [c.copy() for c in alias.columns] + [exp.to_identifier(WEIGHT)]
                )
            return exp.Subquery(this=self.query_delta(node.this), alias=alias)
        return at_version(node, DELTA)


def equi_join_keys(
    condition: Optional[exp.Expression], left_aliases: Set[str], right_alias: str
) -> List[Tuple[exp.Expression, exp.Expression]]:
    """(left expression, right expression) pairs of the `=`/`<=>` conjuncts relating the two
    sides."""
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


def render_from(
    builder: DeltaBuilder, sources: Sequence[Source], term: Term
) -> Tuple[exp.From, List[exp.Join]]:
    """FROM and JOIN clauses of `sources` at the term's versions, with its key restrictions."""
    from_ = exp.From(this=builder.source_at(sources[0], term.versions[0]))
    joins: List[exp.Join] = []
    for position in range(1, len(sources)):
        restriction = next((r for r in term.restrictions if r.position == position), None)
        if restriction is not None:
            joins.append(
                _semi_join(
                    restriction.left_keys, restriction.changed_keys, f"_streamsql_keys_{position}"
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
                )
            )
    return from_, joins


def _semi_join(
    left_keys: Sequence[exp.Expression], changed_keys: exp.Query, alias: str
) -> exp.Join:
    condition = exp.and_(
        *(
            exp.NullSafeEQ(this=left.copy(), expression=exp.column(f"k{j}", table=alias))
            for j, left in enumerate(left_keys)
        )
    )
    keys = exp.Subquery(
        this=changed_keys.copy(), alias=exp.TableAlias(this=exp.to_identifier(alias))
    )
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
    for restriction in term.restrictions:
        bounds += [b.copy() for b in restriction.bounds]
    if term.gate is not None:
        bounds.append(term.gate.copy())
    if bounds:
        block = block.where(exp.and_(*bounds))
    return block


def union_all(queries) -> exp.Query:
    queries = list(queries)
    result = queries[0]
    for query in queries[1:]:
        result = exp.union(result, query, distinct=False)
    return result


def _distinct_keys(branches: Sequence[exp.Query], names: Sequence[str]) -> exp.Select:
    """SELECT DISTINCT k0, k1, ... over the UNION ALL of `branches` (each projecting them first)."""
    alias = exp.TableAlias(this=exp.to_identifier("_streamsql_changed"))
    keys = exp.Subquery(this=union_all(branches), alias=alias)
    return exp.Select(
        expressions=[exp.column(name) for name in names],
        from_=exp.From(this=keys),
        distinct=exp.Distinct(),
    )


def _equalities(
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
