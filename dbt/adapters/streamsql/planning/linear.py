"""The delta rules for linear queries: projection, filter, UNION ALL, joins, derived tables.

A query's *delta* is a query returning its columns plus `_streamsql_weight`: the rows the query
gains (+1) and loses (-1) when its inputs change from their old to their new contents. For a SELECT
block over sources S0 ... Sn (joined left to right) the delta is a UNION ALL of *terms* (terms.py);
each term evaluates the same block with every source at a *version*: "new", "old" or "delta".

- table: the delta placeholder.
- joins (joins/): inner and cross joins telescope, delta(L join R) = delta(L) join R_new +
  L_old join delta(R), or for steps after the first (`newest`) expand over new versions only
  (joins/inner.py). Left, right and full equi-joins, semi and anti joins (IN, EXISTS, NOT EXISTS
  subqueries become those, subqueries.py) and NOT IN re-evaluate the block, new (+1) and old
  (-1), for the join keys their sides' changes hold (joins/keyed.py).
- a window block (top-K, windows.py): its rows re-evaluated, new (+1) and old (-1), in the
  partitions whose keys its FROM/WHERE's change holds.
- Restricted evaluations also carry key bounds (key_ranges.py, bounds.py): the range of the
  changed keys, as literals, on the columns that equal them, so that Delta skips the files of
  untouched keys.
- WHERE, projection and per-row generators (LATERAL VIEW) apply to every term unchanged.
- UNION ALL: the union of the branches' deltas.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Dict, List, Optional, Sequence, Set

import sqlglot
from sqlglot import exp

from dbt.adapters.streamsql.planning.binding import bound_input
from dbt.adapters.streamsql.planning.bounds import AT_LEAST, AT_MOST
from dbt.adapters.streamsql.planning.constructs import require_linear_select
from dbt.adapters.streamsql.planning.errors import RecomputeRequired
from dbt.adapters.streamsql.planning.joins.inner import join_terms, term_bounds
from dbt.adapters.streamsql.planning.joins.keyed import render_from
from dbt.adapters.streamsql.planning.joins.kinds import join_construct
from dbt.adapters.streamsql.planning.key_ranges import bounds_on, equalities_of, key_ranges
from dbt.adapters.streamsql.planning.plan import DIALECT, WEIGHT, KeyBound, bound_placeholder
from dbt.adapters.streamsql.planning.set_operations import SHAPE
from dbt.adapters.streamsql.planning.terms import (
    DELTA,
    NEW,
    OLD,
    KeyRestriction,
    Source,
    Term,
    at_version,
    distinct_keys,
    is_constant,
    union_all,
    weight_literal,
)
from dbt.adapters.streamsql.planning.types import TypeOracle
from dbt.adapters.streamsql.planning.window_reach import (
    LOWEST,
    Running,
    combine_running,
    range_reach,
    reach_predicate,
    rows_reach,
    running_reach,
)
from dbt.adapters.streamsql.planning.windows import (
    has_rank_filter,
    partition_keys,
    ranking_names,
    window_name,
    windows_of,
)

TOP_K = "top-k per partition"
WINDOWS = "window per partition"  # a window block without a rank filter above it
REACH = "from the change's reach"  # ... whose partitions are read from the change on


@dataclass
class DeltaBuilder:
    """Builds deltas and records which constructs it met (for the plan's reason).

    `bounds` collects the key bounds of the terms it renders (bounds.py), named with
    `bound_prefix` so that the plans of one step (stages, top) never share a name. Input
    positions from `stages_from` on are stages (views over state, no files to skip by a bound).
    """

    constructs: Set[str] = field(default_factory=set)
    bound_prefix: str = ""
    stages_from: Optional[int] = None
    oracle: Optional[TypeOracle] = None  # types of the tree's expressions (running windows)
    bounds: Dict[str, KeyBound] = field(default_factory=dict)
    newest: bool = False  # inner joins over new versions only (joins/inner.py)
    signed: bool = False  # set when a term has a negative weight for inserted rows
    # set when a rule re-evaluates old contents with weight -1 (key restrictions, windows): the
    # change may delete rows even when every input change is an insert
    retracting: bool = False

    def query_delta(self, query: exp.Expression) -> exp.Query:
        """The delta of a query: its columns plus `_streamsql_weight`."""
        if isinstance(query, exp.Subquery):
            return self.query_delta(query.this)
        if isinstance(query, exp.Union):
            if query.args.get("distinct"):
                raise RecomputeRequired(
                    "UNION (distinct) below the top of the query is not maintained incrementally"
                )
            self.constructs.add(query.meta.get(SHAPE, "union all"))  # or a ROLLUP's sets
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
        Bounded RANGE frames restrict each partition further, to the change's reach
        (window_reach.range_reach); bounded ROWS frames and LAG/LEAD, through a key bound computed
        before the step reads (window_reach.rows_reach); running windows, to the rows from the
        change on, with the rows below it as an aggregate (window_reach.running_reach). The last
        two only over an input's or a CTE's column, not a stage's.
        """
        reach = range_reach(select)
        sources = self.block_sources(select)
        rows = rows_reach(select) if reach is None else None
        if rows is not None and not self._of_a_table(rows[0], sources):
            rows = None  # a stage's column: no files to skip, and one more pass over the stage
        running = None
        top_k = has_rank_filter(select)
        if reach is None and rows is None and not top_k:  # a top-K block keeps its own plan
            running = running_reach(select, self.oracle)
        if running is not None and not self._of_a_table(running[0], sources):
            running = None  # over a stage: its view read twice more for the rows below
        reached = next((r for r in (reach, rows, running) if r is not None), None)
        if top_k:
            self.constructs.add(f"{TOP_K} ({', '.join(ranking_names(select)) or 'window'})")
        else:
            names = ", ".join(dict.fromkeys(window_name(w) for w in windows_of(select)))
            within = f" {REACH}" if reached is not None else ""
            self.constructs.add(f"{WINDOWS} ({names}){within}")
        keys = partition_keys(select)
        terms = self.block_terms(sources)
        if not terms:
            return self._empty(select, sources)
        self.retracting = True
        names = [f"k{j}" for j in range(len(keys))]
        below = select.copy()
        projections = [exp.alias_(key.copy(), name) for key, name in zip(keys, names)]
        order = reached[0] if reached is not None else None
        if order is not None:
            projections.append(exp.alias_(order.copy(), LOWEST))
        branches = [render_block(self, below, sources, term, projections) for term in terms]
        changed = distinct_keys(branches, names, LOWEST if reach is not None else None)
        strict = None  # ROWS and running reaches: a NULL lowest value reads the partition whole
        if rows is not None or running is not None:
            highest = running is not None and running.descending
            strict = distinct_keys(branches, names, LOWEST, null_wins=True, highest=highest)
        equalities = equalities_of(sources, select.args.get("where"))
        ranges = key_ranges(sources, terms, keys, equalities)
        bounds = bounds_on(self, sources, keys, ranges, equalities)
        predicate = None
        if reach is not None:
            bounds += self._reach_bound(sources, terms, reach, equalities)
            predicate = reach_predicate(reach[0], exp.GTE(this=order.copy(), expression=reach[1]))
        if rows is not None:
            bounds.append(self._rows_bound(below, sources, keys, names, strict, rows))
        if running is not None:
            select, changed, predicate = self._running(
                select, sources, keys, names, strict, running
            )
            bounds.append(self._running_bound(strict, running))
        restriction = KeyRestriction(
            len(sources),
            changed,
            tuple(keys),
            bounds=tuple(bounds),
            reach=predicate,
            joined=running is not None,  # the block reads the prefixes _running joined in
        )
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

    def _below_change(self, below, sources, keys, names, strict, predicate, projections):
        """The rows of the block below the windows (`below`) at the new version, in the changed
        partitions (`strict`, distinct_keys with `null_wins`) and where `predicate` (over
        their LOWEST) holds, as k0, k1, ... and `projections`: rows below each partition's
        change, the same at the old version."""
        lower = KeyRestriction(len(sources), strict, tuple(keys), reach=predicate)
        columns = [exp.alias_(key.copy(), name) for key, name in zip(keys, names)]
        term = Term((NEW,) * len(sources), weight_literal(1), (lower,))
        return render_block(self, below, sources, term, columns + list(projections))

    def _running(self, select, sources, keys, names, strict, running):
        """A block of running windows (window_reach.running_reach) evaluated from each touched
        partition's first changed c on (the lowest; descending, the highest): the changed keys
        with that c (NULL: the whole partition) and each window's aggregate over the
        partition's rows before it at the new version (the same at the old), joined to the
        block, whose windows combine it with their value over the rest. Returns the block, the
        changed keys with those aggregates and the predicate on the block's rows."""
        order, descending, windows = running
        count = len(sources)
        lowest = exp.column(LOWEST)
        is_null = exp.Is(this=order.copy(), expression=exp.Null())
        if descending:  # before: a higher c (NULLs come last)
            before: exp.Expression = exp.GT(this=order.copy(), expression=lowest.copy())
            rest = exp.or_(exp.LTE(this=order.copy(), expression=lowest.copy()), is_null.copy())
        else:  # before: a lower or NULL c
            before = exp.paren(
                exp.or_(exp.LT(this=order.copy(), expression=lowest.copy()), is_null.copy()),
                copy=False,
            )
            rest = exp.GTE(this=order.copy(), expression=lowest.copy())
        below_change = exp.and_(
            exp.Not(this=exp.Is(this=lowest.copy(), expression=exp.Null())), before
        )
        projections: List[exp.Expression] = []
        aggregates: List[exp.Expression] = []
        for i, entry in enumerate(windows):
            argument = entry.argument()
            if argument is not None:
                projections.append(exp.alias_(argument.copy(), f"_streamsql_x{i}"))
            prefix = entry.prefix(exp.column(f"_streamsql_x{i}"))
            aggregates.append(exp.alias_(prefix, f"_streamsql_p{i}"))
        rows = self._below_change(select, sources, keys, names, strict, below_change, projections)
        prefix = exp.Select(
            expressions=[exp.column(n) for n in names] + aggregates,
            from_=exp.From(
                this=exp.Subquery(
                    this=rows, alias=exp.TableAlias(this=exp.to_identifier("_streamsql_below"))
                )
            ),
            group=exp.Group(expressions=[exp.column(n) for n in names]),
        )
        on = exp.and_(
            *(
                exp.NullSafeEQ(
                    this=exp.column(n, table="_streamsql_c"),
                    expression=exp.column(n, table="_streamsql_p"),
                )
                for n in names
            )
        )
        changed = exp.Select(
            expressions=[exp.column(n, table="_streamsql_c") for n in names]
            + [exp.column(LOWEST, table="_streamsql_c")]
            + [exp.column(f"_streamsql_p{i}", table="_streamsql_p") for i in range(len(windows))],
            from_=exp.From(
                this=exp.Subquery(
                    this=strict, alias=exp.TableAlias(this=exp.to_identifier("_streamsql_c"))
                )
            ),
            joins=[
                exp.Join(
                    this=exp.Subquery(
                        this=prefix, alias=exp.TableAlias(this=exp.to_identifier("_streamsql_p"))
                    ),
                    side="LEFT",
                    on=on,
                )
            ],
        )
        block = select.copy()
        alias = f"_streamsql_keys_{count}"
        for i, (entry, found) in enumerate(zip(windows, windows_of(block))):
            value = exp.column(f"_streamsql_p{i}", table=alias)
            found.replace(combine_running(entry, value, found.copy()))
        predicate = exp.paren(
            exp.or_(exp.Is(this=lowest.copy(), expression=exp.Null()), rest), copy=False
        )
        return block, changed, predicate

    def _running_bound(self, changed: exp.Select, running: Running) -> exp.Expression:
        """`c >= <the change's lowest c>` (descending: `c <= <its highest>`, or a NULL c),
        `true` when a changed row's c is NULL (its partition is read whole): Delta skips the
        files before every touched partition's change."""
        first = "MAX" if running.descending else "MIN"
        value = (
            f"(SELECT CASE WHEN COUNT(*) = COUNT(_streamsql_lo) THEN {first}(_streamsql_lo) END "
            f"FROM ({changed.sql(DIALECT)}) AS _streamsql_r)"
        )
        side = AT_MOST if running.descending else AT_LEAST
        bound = KeyBound("", running.order.sql(DIALECT), side, value, open_when_null=True)
        name = exp.column(self.name_bound(bound))
        return reach_predicate(running.order, name) if running.descending else name

    def _reach_bound(self, sources, terms, reach, equalities) -> List[exp.Expression]:
        """A literal lower bound on a bounded RANGE frame's ORDER BY column (the change's lowest
        value minus the frame), so that Delta skips the files every touched partition's
        re-evaluation leaves out (window_reach.range_reach). None unless it is a column."""
        order, lowest = reach
        if not isinstance(order, exp.Column):
            return []
        found = key_ranges(sources, terms, [order], equalities)[0]
        if found is None:
            return []
        lowest = lowest.copy()
        for column in list(lowest.find_all(exp.Column)):
            if column.name == LOWEST:
                column.replace(exp.paren(sqlglot.parse_one(found[0], read=DIALECT), copy=False))
        name = self.name_bound(KeyBound("", order.sql(DIALECT), AT_LEAST, lowest.sql(DIALECT)))
        # the placeholder stands for the whole `o >= <literal>` (NULLs read as in the semi join)
        return [reach_predicate(order, exp.column(name))]

    def _rows_bound(self, below, sources, keys, names, strict, rows) -> exp.Expression:
        """A key bound `c >= <literal>` holding a block's rows to a ROWS frame's reach: the
        lowest, over the touched partitions, of the Nth highest c below the partition's first
        change (window_reach.rows_reach); `true` when a partition is read whole.

        Computed before the step reads, from the change and the touched partitions' rows
        below it at the new version (Spark keeps the N highest per partition as it reads them,
        a window group limit). Rows below the first change are the same in both versions, so
        one value serves the new and the old evaluation, and a lower one would only read more.
        """
        order, back = rows
        below_change = exp.LT(this=order.copy(), expression=exp.column(LOWEST))
        value = [exp.alias_(order.copy(), "_streamsql_v")]
        rows_below = self._below_change(
            below, sources, keys, names, strict, below_change, value
        ).sql(DIALECT)
        key_list = ", ".join(names)
        ranked = (
            f"SELECT {key_list}, _streamsql_v, ROW_NUMBER() OVER (PARTITION BY {key_list} "
            f"ORDER BY _streamsql_v DESC) AS _streamsql_r FROM ({rows_below}) AS _streamsql_below"
        )
        cuts = (
            f"SELECT {key_list}, CASE WHEN MAX(_streamsql_r) >= {back} THEN MIN(_streamsql_v) "
            f"END AS _streamsql_cut FROM ({ranked}) AS _streamsql_ranked "
            f"WHERE _streamsql_r <= {back} GROUP BY {key_list}"
        )
        on = " AND ".join(f"_streamsql_c.{n} <=> _streamsql_cuts.{n}" for n in names)
        value = (
            "(SELECT CASE WHEN COUNT(*) = COUNT(_streamsql_cuts._streamsql_cut) "
            f"THEN MIN(_streamsql_cuts._streamsql_cut) END FROM ({strict.sql(DIALECT)}) "
            f"AS _streamsql_c LEFT JOIN ({cuts}) AS _streamsql_cuts ON {on})"
        )
        bound = KeyBound("", order.sql(DIALECT), AT_LEAST, value, open_when_null=True)
        return exp.column(self.name_bound(bound))

    def _of_a_table(self, column: exp.Column, sources: Sequence[Source]) -> bool:
        """Whether `column` is read from an input table of the model or a derived table over
        them (a CTE; Spark pushes a bound on it down to the tables' files where it can), not
        from a stage (its rows are a view over its state: no files to skip)."""
        for source in sources:
            if source.alias != column.table:
                continue
            position = bound_input(source.node)
            if position is None:
                return isinstance(source.node, exp.Subquery)
            return self.stages_from is None or position < self.stages_from
        return False

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
        if select.args.get("laterals"):  # or the copies of an INTERSECT / EXCEPT ALL
            self.constructs.add(select.meta.get(SHAPE, "lateral view"))
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
        """The terms whose union is the delta of the join of `sources` (joins/inner.py)."""
        return join_terms(self, sources)

    def name_bound(self, bound: KeyBound) -> str:
        """The placeholder name of a key bound: a known bound's, or a new one it records."""
        for name, known in self.bounds.items():
            if replace(known, name="") == replace(bound, name=""):
                return name
        name = bound_placeholder(self.bound_prefix, len(self.bounds))
        self.bounds[name] = replace(bound, name=name)
        return name

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
    bounds = term_bounds(builder, select, sources, term) if sources else []
    for restriction in term.restrictions:
        bounds += [b.copy() for b in restriction.bounds]
    if term.gate is not None:
        bounds.append(term.gate.copy())
    if bounds:
        block = block.where(exp.and_(*bounds))
    return block
