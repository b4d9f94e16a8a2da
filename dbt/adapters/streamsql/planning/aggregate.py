"""GROUP BY, DISTINCT, UNION (distinct) and global aggregates through per-group partial aggregates.

The state keeps, per group, `_streamsql_g<k>` (group values), `_streamsql_count` (sum of weights)
and partials `_streamsql_a<j>...` per aggregate call j:

| aggregate      | partials                               | maintained by                      |
|----------------|----------------------------------------|------------------------------------|
| COUNT(*)       | (the group count)                      | adding the delta's weights         |
| COUNT(x, ...)  | a<j>: rows with x non-null             | adding                             |
| SUM(x), AVG(x) | a<j>: sum of x, a<j>_n: non-null count | adding                             |
| MIN(x), MAX(x) | a<j>: the value                        | least/greatest with inserted rows; |
|                |                                        | recomputed when a deleted value    |
|                |                                        | could have been the extreme        |
| anything else  | a<j>: the value                        | recomputed for every changed group |

Weights are +1/-1 (plan.py); SUM's partial negates deleted values instead of multiplying so that
decimal sums keep Spark's result type (a CASE raises an error on any other weight).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

from sqlglot import exp

from dbt.adapters.streamsql.planning.constructs import (
    aggregate_calls,
    contains_aggregate,
    is_aggregate_call,
)
from dbt.adapters.streamsql.planning.errors import RecomputeRequired
from dbt.adapters.streamsql.planning.linear import (
    KEYED_CONSTRUCTS,
    TOP_K,
    DeltaBuilder,
    Source,
    Term,
    render_block,
    union_all,
)
from dbt.adapters.streamsql.planning.plan import (
    COUNT,
    DIALECT,
    FAST_PATH,
    GROUP_ALIAS,
    GROUP_DELTA,
    GROUPS,
    STATE,
    WEIGHT,
    AggregatePlan,
    Column,
)
from dbt.adapters.streamsql.planning.types import (
    DECIMAL,
    FRACTIONAL,
    INTEGRAL,
    TypeOracle,
    decimal_precision_scale,
    numeric_kind_of_type,
    sum_type,
)

COUNT_STAR, COUNT_VALUES, SUM, AVG, MIN, MAX, RECOMPUTE = (
    "count(*)",
    "count",
    "sum",
    "avg",
    "min",
    "max",
    "recompute",
)
CHANGES, ROWS, AFFECTED, RECOMPUTED = (
    "_streamsql_changes",
    "_streamsql_rows",
    "_streamsql_affected",
    "_streamsql_recomputed",
)
DELTA_ALIAS, STATE_ALIAS = "d", "s"


def group_column(k: int) -> str:
    return f"_streamsql_g{k}"


@dataclass
class AggregateCall:
    """One distinct aggregate call of the query and how its partials are kept."""

    index: int
    call: exp.Expression
    method: str  # COUNT_STAR, COUNT_VALUES, SUM, AVG, MIN, MAX or RECOMPUTE
    argument: Optional[exp.Expression] = None  # x (COUNT_VALUES: "all arguments are non-null")
    argument_type: Optional[str] = None
    result_type: str = ""  # the state type of a<j> ("" = read it from delta_sql)

    @property
    def value(self) -> str:
        return f"_streamsql_a{self.index}"

    @property
    def non_null(self) -> str:
        return f"_streamsql_a{self.index}_n"

    @property
    def deleted(self) -> str:
        return f"_streamsql_a{self.index}_deleted"

    @property
    def input(self) -> str:
        return f"_streamsql_x{self.index}"


@dataclass
class AggregateQuery:
    """The parts of one aggregate SELECT block, before any SQL is generated."""

    select: exp.Select
    sources: List[Source]
    groups: List[exp.Expression]
    group_types: List[str]
    calls: List[AggregateCall]
    outputs: List[Tuple[str, exp.Expression, Optional[str]]]  # name, expression, output type
    having: Optional[exp.Expression]
    recompute_columns: List[exp.Column] = field(default_factory=list)

    @property
    def is_global(self) -> bool:
        return not self.groups


@dataclass
class AggregateResult:
    plan: AggregatePlan
    reason: str


def is_aggregate_select(select: exp.Expression) -> bool:
    return isinstance(select, exp.Select) and bool(
        select.args.get("group")
        or select.args.get("having")
        or select.args.get("distinct")
        or any(contains_aggregate(p) for p in select.expressions)
    )


def distinct_over_union(union: exp.Union, names: Sequence[str]) -> exp.Select:
    """UNION (distinct) as SELECT DISTINCT over the UNION ALL of the same branches."""
    union_all = union.copy()
    union_all.set("distinct", False)
    alias = exp.TableAlias(
        this=exp.to_identifier("_streamsql_union"), columns=[exp.to_identifier(n) for n in names]
    )
    return exp.Select(
        expressions=[exp.column(name, table="_streamsql_union") for name in names],
        from_=exp.From(this=exp.Subquery(this=union_all, alias=alias)),
        distinct=exp.Distinct(),
    )


class AggregatePlanner:
    """Plans one aggregate model; see the module docstring for the state it keeps."""

    def __init__(self, oracle: TypeOracle, bound_prefix: str = ""):
        self._oracle = oracle
        self._builder = DeltaBuilder(bound_prefix=bound_prefix)
        self.methods: List[str] = []

    # -- shape ---------------------------------------------------------------------------------

    def plan(self, tree: exp.Query, output_columns: Sequence[Column]) -> AggregateResult:
        names = [c.name for c in output_columns]
        if isinstance(tree, exp.Union) and tree.args.get("distinct"):
            tree = distinct_over_union(tree, names)
        if not isinstance(tree, exp.Select):
            raise RecomputeRequired(f"{tree.key.upper()} is not maintained incrementally")
        if len(tree.expressions) != len(output_columns):
            raise RecomputeRequired("the query's columns do not match the model's columns")
        query, output_sql = self._plan_select(tree, names, [c.data_type for c in output_columns])
        top_level = is_aggregate_select(tree)
        delta_sql = self._delta_sql(query).sql(DIALECT)
        self._builder.newest = True
        later_delta_sql = self._delta_sql(query).sql(DIALECT)
        self._builder.newest = False
        plan = AggregatePlan(
            group_columns=tuple(group_column(k) for k in range(len(query.groups))),
            state_columns=self._state_columns(query),
            delta_sql=delta_sql,
            bounds=tuple(self._builder.bounds.values()),
            later_delta_sql=later_delta_sql if later_delta_sql != delta_sql else None,
            combine_sql=self._combine_sql(query).sql(DIALECT),
            output_sql=output_sql.sql(DIALECT),
            group_outputs=self._group_outputs(query) if top_level else (),
            key_columns=self._key_columns(query) if top_level else None,
            **self._shortcut(query),
        )
        return AggregateResult(plan=plan, reason=self._reason(query))

    def _plan_select(
        self, select: exp.Select, names: Sequence[str], types: Sequence[Optional[str]]
    ) -> Tuple[AggregateQuery, exp.Select]:
        """The aggregate block under `select` and the output SQL of `select` over the groups."""
        if is_aggregate_select(select):
            query = self._analyze(select, names, types)
            return query, self._output_sql(query)
        inner = self._single_derived_table(select)
        if inner is None:
            raise RecomputeRequired("an aggregate below a join is not maintained incrementally")
        subquery, inner_select = inner
        inner_names = [p.alias_or_name for p in inner_select.expressions]
        query, inner_output = self._plan_select(
            inner_select, inner_names, [None] * len(inner_names)
        )
        # projection/filter over the aggregate: the same SELECT over the inner output rows
        outer = select.copy()
        alias = subquery.args.get("alias").copy()
        if alias.columns:
            alias.set(
                "columns",
                [c.copy() for c in alias.columns]
                + [exp.to_identifier(g) for g in self._group_names(query)],
            )
        outer.set("from_", exp.From(this=exp.Subquery(this=inner_output, alias=alias)))
        outer.set(
            "expressions",
            [exp.alias_(p.unalias().copy(), name) for p, name in zip(select.expressions, names)]
            + [exp.column(g, table=subquery.alias_or_name) for g in self._group_names(query)],
        )
        return query, outer

    def _single_derived_table(
        self, select: exp.Select
    ) -> Optional[Tuple[exp.Subquery, exp.Select]]:
        from_ = select.args.get("from_")
        if from_ is None or select.args.get("joins") or select.args.get("laterals"):
            return None
        subquery = from_.this
        if not isinstance(subquery, exp.Subquery):
            return None
        inner = subquery.this
        if isinstance(inner, exp.Union) and inner.args.get("distinct"):
            return None
        if not isinstance(inner, exp.Select) or not (
            is_aggregate_select(inner) or self._single_derived_table(inner)
        ):
            return None
        return subquery, inner

    @staticmethod
    def _group_names(query: AggregateQuery) -> List[str]:
        return [group_column(k) for k in range(len(query.groups))]

    # -- analysis ------------------------------------------------------------------------------

    def _analyze(
        self, select: exp.Select, names: Sequence[str], types: Sequence[Optional[str]]
    ) -> AggregateQuery:
        if len(select.expressions) != len(names):
            raise RecomputeRequired("the query's columns do not match the model's columns")
        projections = [p.unalias() for p in select.expressions]
        group = select.args.get("group")
        if select.args.get("distinct"):
            if group is not None or any(contains_aggregate(p) for p in projections):
                raise RecomputeRequired(
                    "DISTINCT over an aggregate is not maintained incrementally"
                )
            if select.args["distinct"].args.get("on"):
                raise RecomputeRequired("DISTINCT ON is not maintained incrementally")
            group_expressions = projections
            self.methods.append("distinct")
        elif group is not None:
            for key in ("all", "rollup", "cube", "totals", "grouping_sets"):
                if group.args.get(key):
                    raise RecomputeRequired(
                        f"GROUP BY {key.upper().replace('_', ' ')} is not maintained incrementally"
                    )
            if any(
                isinstance(g, (exp.GroupingSets, exp.Rollup, exp.Cube)) for g in group.expressions
            ):
                raise RecomputeRequired(
                    "GROUPING SETS/ROLLUP/CUBE are not maintained incrementally"
                )
            group_expressions = list(group.expressions)
        else:
            group_expressions = []
        groups: List[exp.Expression] = []
        for expression in group_expressions:
            if contains_aggregate(expression):
                raise RecomputeRequired(
                    "an aggregate inside GROUP BY is not maintained incrementally"
                )
            if expression not in groups:
                groups.append(expression)

        sources = self._builder.block_sources(select)
        outputs = list(zip(names, projections, types))
        having = select.args.get("having")
        calls: List[AggregateCall] = []
        for node in projections + ([having.this] if having is not None else []):
            for call in aggregate_calls(node):
                if all(call != known.call for known in calls):
                    calls.append(self._classify(len(calls), call, outputs))
        query = AggregateQuery(
            select=select,
            sources=sources,
            groups=groups,
            group_types=[self._group_type(g, outputs) for g in groups],
            calls=calls,
            outputs=outputs,
            having=having.this if having is not None else None,
        )
        if query.is_global and any(c.method == RECOMPUTE for c in calls):
            name = next(c for c in calls if c.method == RECOMPUTE).call.sql(DIALECT)
            raise RecomputeRequired(f"{name} without GROUP BY is not maintained incrementally")
        if query.is_global and select.args.get("distinct") is None:
            self.methods.append("global aggregate")
        for call in calls:
            if call.method == RECOMPUTE:
                for column in call.call.find_all(exp.Column):
                    if column.table and column not in query.recompute_columns:
                        query.recompute_columns.append(column)
        return query

    def _group_type(self, group: exp.Expression, outputs) -> str:
        known = self._oracle.type_of(group)
        if known:
            return known
        for _, expression, output_type in outputs:
            if expression == group and output_type:
                return output_type
        return ""

    def _classify(self, index: int, call: exp.Expression, outputs) -> AggregateCall:
        output_type = next((t for _, e, t in outputs if e == call and t), "")
        recompute = AggregateCall(index, call, RECOMPUTE, result_type=output_type)
        if isinstance(call, exp.Filter):
            return recompute
        if isinstance(call, exp.Count):
            argument = call.this
            if isinstance(argument, exp.Distinct):
                return recompute
            arguments = ([argument] if argument is not None else []) + list(call.expressions)
            if (
                not arguments
                or isinstance(argument, exp.Star)
                or (len(arguments) == 1 and isinstance(argument, exp.Literal))
            ):
                return AggregateCall(index, call, COUNT_STAR, result_type="bigint")
            non_null = exp.and_(
                *(exp.Not(this=exp.Is(this=a.copy(), expression=exp.Null())) for a in arguments)
            )
            return AggregateCall(index, call, COUNT_VALUES, argument=non_null, result_type="bigint")
        if isinstance(call, (exp.Min, exp.Max)) and not call.expressions:
            argument = (
                call.this.expressions[0] if isinstance(call.this, exp.Distinct) else call.this
            )
            if isinstance(call.this, exp.Distinct) and len(call.this.expressions) != 1:
                return recompute
            argument_type = self._oracle.type_of(argument)
            method = MIN if isinstance(call, exp.Min) else MAX
            return AggregateCall(
                index, call, method, argument, argument_type, argument_type or output_type
            )
        if type(call) in (exp.Sum, exp.Avg) and not isinstance(call.this, exp.Distinct):
            argument = call.this
            argument_type = self._oracle.type_of(argument)
            kind = numeric_kind_of_type(argument_type) or self._oracle.numeric_kind(argument)
            if kind is None:
                return recompute
            method = SUM if isinstance(call, exp.Sum) else AVG
            if method == AVG and kind == DECIMAL and numeric_kind_of_type(argument_type) != DECIMAL:
                return recompute  # Spark's AVG result type needs the exact decimal type
            return AggregateCall(
                index, call, method, argument, argument_type, sum_type(argument_type, kind)
            )
        return recompute

    # -- state ---------------------------------------------------------------------------------

    def _state_columns(self, query: AggregateQuery) -> Tuple[Column, ...]:
        columns = [Column(group_column(k), t) for k, t in enumerate(query.group_types)]
        columns.append(Column(COUNT, "bigint"))
        for call in query.calls:
            if call.method == COUNT_STAR:
                continue
            columns.append(Column(call.value, call.result_type))
            if call.method in (SUM, AVG):
                columns.append(Column(call.non_null, "bigint"))
        return tuple(columns)

    def _changes_row(self, query: AggregateQuery) -> List[exp.Expression]:
        """Per-row columns the delta and the recompute aggregate over (before GROUP BY)."""
        row = [exp.alias_(g.copy(), group_column(k)) for k, g in enumerate(query.groups)]
        for call in query.calls:
            if call.argument is not None:
                row.append(exp.alias_(call.argument.copy(), call.input))
        for m, column in enumerate(query.recompute_columns):
            row.append(exp.alias_(column.copy(), f"_streamsql_c{m}"))
        return row

    def _over_row(self, call: AggregateCall, query: AggregateQuery, table: str) -> exp.Expression:
        """A RECOMPUTE/MIN/MAX call rewritten to read the per-row columns of relation `table`."""
        if call.method in (MIN, MAX):
            function = exp.Min if call.method == MIN else exp.Max
            return function(this=exp.column(call.input, table=table))
        rewritten = call.call.copy()
        for column in list(rewritten.find_all(exp.Column)):
            if column.table and column in query.recompute_columns:
                column.replace(
                    exp.column(f"_streamsql_c{query.recompute_columns.index(column)}", table=table)
                )
        return rewritten

    def _delta_sql(self, query: AggregateQuery) -> exp.Select:
        terms = self._builder.block_terms(query.sources)
        row = self._changes_row(query)
        branches = [render_block(self._builder, query.select, query.sources, t, row) for t in terms]
        for branch in branches:
            for key in ("group", "having", "distinct"):
                branch.set(key, None)
        if not branches:
            raise RecomputeRequired("the aggregate reads no input")
        weight = exp.column(WEIGHT, table=CHANGES)
        projections = [
            exp.alias_(exp.column(g, table=CHANGES), g) for g in self._group_names(query)
        ]
        projections.append(exp.alias_(exp.Sum(this=weight.copy()), COUNT))
        for call in query.calls:
            value = exp.column(call.input, table=CHANGES)
            if call.method == COUNT_VALUES:
                projections.append(
                    exp.alias_(exp.Sum(this=_if(value, weight, exp.Literal.number(0))), call.value)
                )
            elif call.method in (SUM, AVG):
                signed = exp.Case(
                    ifs=[
                        exp.If(
                            this=exp.EQ(this=weight.copy(), expression=exp.Literal.number(1)),
                            true=value.copy(),
                        ),
                        exp.If(
                            this=exp.EQ(this=weight.copy(), expression=exp.Literal.number(-1)),
                            true=exp.Neg(this=value.copy()),
                        ),
                    ],
                    default=exp.Anonymous(
                        this="raise_error",
                        expressions=[exp.Literal.string("streamsql: weight is not +1 or -1")],
                    ),
                )
                projections.append(exp.alias_(exp.Sum(this=signed), call.value))
                counted = _if(
                    exp.Not(this=exp.Is(this=value.copy(), expression=exp.Null())),
                    weight,
                    exp.Literal.number(0),
                )
                projections.append(exp.alias_(exp.Sum(this=counted), call.non_null))
            elif call.method in (MIN, MAX):
                function = exp.Min if call.method == MIN else exp.Max
                inserted = exp.Filter(
                    this=function(this=value.copy()),
                    expression=exp.Where(
                        this=exp.GT(this=weight.copy(), expression=exp.Literal.number(0))
                    ),
                )
                deleted = exp.Filter(
                    this=function(this=value.copy()),
                    expression=exp.Where(
                        this=exp.LT(this=weight.copy(), expression=exp.Literal.number(0))
                    ),
                )
                projections.append(exp.alias_(inserted, call.value))
                projections.append(exp.alias_(deleted, call.deleted))
            elif call.method == RECOMPUTE:
                # Only the type matters here: combine_sql recomputes the value.
                placeholder = (
                    exp.cast(exp.Null(), _data_type(call.result_type))
                    if call.result_type
                    else self._over_row(call, query, CHANGES)
                )
                projections.append(exp.alias_(placeholder, call.value))
        changes = exp.Subquery(
            this=union_all(branches), alias=exp.TableAlias(this=exp.to_identifier(CHANGES))
        )
        delta = exp.Select(expressions=projections, from_=exp.From(this=changes))
        if query.groups:
            delta.set(
                "group",
                exp.Group(
                    expressions=[exp.column(g, table=CHANGES) for g in self._group_names(query)]
                ),
            )
        else:
            delta.set(
                "having",
                exp.Having(
                    this=exp.GT(this=exp.Count(this=exp.Star()), expression=exp.Literal.number(0))
                ),
            )
        return delta

    @staticmethod
    def _may_lose_extreme(call: AggregateCall, table: Optional[str] = None) -> exp.Expression:
        """True when the group delta deletes a value and inserts nothing more extreme.

        If the most extreme inserted value is strictly more extreme than every deleted one, no
        copy of it was deleted, so it is in the group after the step and the new extreme is the
        old one combined with it, whatever was deleted (an update that raises a MAX, a count
        going up under a MAX of counts): no recompute is needed. Strictly: a step's delta is not
        netted, and a value inserted and deleted within the step is in both.
        """
        deleted = exp.column(call.deleted, table=table)
        inserted = exp.column(call.value, table=table)
        replaced = (exp.GT if call.method == MAX else exp.LT)(
            this=inserted, expression=deleted.copy()
        )
        return exp.and_(
            exp.Not(this=exp.Is(this=deleted, expression=exp.Null())),
            exp.Not(this=exp.Coalesce(this=replaced, expressions=[exp.false()])),
        )

    def _needs_recompute(self, call: AggregateCall) -> exp.Expression:
        """True when a deleted value may have been the group's MIN/MAX and nothing replaces it."""
        deleted = exp.column(call.deleted, table=DELTA_ALIAS)
        old = exp.column(call.value, table=STATE_ALIAS)
        still_beyond = (exp.GT if call.method == MIN else exp.LT)(this=deleted, expression=old)
        return exp.and_(
            self._may_lose_extreme(call, DELTA_ALIAS),
            exp.Not(this=exp.Coalesce(this=still_beyond, expressions=[exp.false()])),
        )

    def _group_match(self, query: AggregateQuery, left: str, right: str) -> exp.Expression:
        if not query.groups:
            return exp.true()
        return exp.and_(
            *(
                exp.NullSafeEQ(
                    this=exp.column(g, table=left), expression=exp.column(g, table=right)
                )
                for g in self._group_names(query)
            )
        )

    def _group_outputs(self, query: AggregateQuery) -> Tuple[Tuple[str, str], ...]:
        """Output columns computed from the group columns alone, as SQL over the state."""
        found = []
        for name, expression, _ in query.outputs:
            if contains_aggregate(expression):
                continue
            try:
                value = self._on_state(expression, query)
            except RecomputeRequired:
                continue
            groups = set(self._group_names(query))
            for column in ([value] if isinstance(value, exp.Column) else []) + list(
                value.find_all(exp.Column)
            ):
                if not column.table and column.name in groups:
                    column.set("table", exp.to_identifier(GROUP_ALIAS))
            found.append((name, value.sql(DIALECT)))
        return tuple(found)

    @staticmethod
    def _key_columns(query: AggregateQuery) -> Optional[Tuple[str, ...]]:
        """Output columns that name each group: its value, or a window group's start or end.

        A tumbling or hopping window has one duration, so its start (or end) names it.
        """
        names: List[str] = []
        for group in query.groups:
            is_window = isinstance(group, exp.Anonymous) and group.name.lower() == "window"
            for name, expression, _ in query.outputs:
                if expression == group or (
                    is_window
                    and isinstance(expression, exp.Dot)
                    and expression.this == group
                    and expression.name.lower() in ("start", "end")
                ):
                    names.append(name)
                    break
            else:
                return None
        return tuple(dict.fromkeys(names))

    def _shortcut(self, query: AggregateQuery) -> dict:
        """The combine without the recompute join, and when it may be used.

        Only MIN/MAX need the recompute, and only after a deletion nothing inserted outdoes
        (`_may_lose_extreme`); a step without one (every append-only step, and steps whose updates
        only push extremes further out) combines from the state alone instead of scanning the
        inputs' history.
        """
        extremes = [c for c in query.calls if c.method in (MIN, MAX)]
        if not extremes or any(c.method == RECOMPUTE for c in query.calls):
            return {}
        check = exp.Select(
            expressions=[exp.alias_(exp.Count(this=exp.Star()), "n")],
            from_=exp.From(this=exp.Table(this=exp.to_identifier(GROUP_DELTA))),
        ).where(exp.or_(*(self._may_lose_extreme(c) for c in extremes)))
        return {
            "combine_without_recompute_sql": self._combine_sql(query, recompute=False).sql(DIALECT),
            "recompute_check_sql": check.sql(DIALECT),
        }

    def _combine_sql(self, query: AggregateQuery, recompute: bool = True) -> exp.Select:
        d, s, r = DELTA_ALIAS, STATE_ALIAS, RECOMPUTED
        projections: List[exp.Expression] = [
            exp.alias_(exp.column(g, table=d), g) for g in self._group_names(query)
        ]
        projections.append(
            exp.alias_(
                _bigint(
                    _plus(
                        exp.Coalesce(
                            this=exp.column(COUNT, table=s), expressions=[exp.Literal.number(0)]
                        ),
                        exp.column(COUNT, table=d),
                    )
                ),
                COUNT,
            )
        )
        recomputed: List[AggregateCall] = []
        for call in query.calls:
            old, change = exp.column(call.value, table=s), exp.column(call.value, table=d)
            if call.method == COUNT_VALUES:
                value = _bigint(
                    _plus(exp.Coalesce(this=old, expressions=[exp.Literal.number(0)]), change)
                )
            elif call.method in (SUM, AVG):
                value = exp.Coalesce(
                    this=_plus(old, change), expressions=[old.copy(), change.copy()]
                )
                if call.result_type:
                    value = exp.cast(value, _data_type(call.result_type))
                non_null = _bigint(
                    _plus(
                        exp.Coalesce(
                            this=exp.column(call.non_null, table=s),
                            expressions=[exp.Literal.number(0)],
                        ),
                        exp.column(call.non_null, table=d),
                    )
                )
                projections.append(exp.alias_(value, call.value))
                projections.append(exp.alias_(non_null, call.non_null))
                continue
            elif call.method in (MIN, MAX):
                combined = (exp.Least if call.method == MIN else exp.Greatest)(
                    this=old, expressions=[change]
                )
                if recompute:
                    value = exp.Case(
                        ifs=[
                            exp.If(
                                this=self._needs_recompute(call),
                                true=exp.column(call.value, table=r),
                            )
                        ],
                        default=combined,
                    )
                    recomputed.append(call)
                else:
                    value = combined
            elif call.method == RECOMPUTE:
                value = exp.column(call.value, table=r)
                recomputed.append(call)
            else:
                continue
            if call.result_type and call.method != COUNT_VALUES:
                value = exp.cast(value, _data_type(call.result_type))
            projections.append(exp.alias_(value, call.value))
        combine = exp.Select(
            expressions=projections,
            from_=exp.From(
                this=exp.Table(
                    this=exp.to_identifier(GROUP_DELTA),
                    alias=exp.TableAlias(this=exp.to_identifier(d)),
                )
            ),
            joins=[
                exp.Join(
                    this=exp.Table(
                        this=exp.to_identifier(STATE),
                        alias=exp.TableAlias(this=exp.to_identifier(s)),
                    ),
                    side="LEFT",
                    on=self._group_match(query, d, s),
                )
            ],
        )
        if recomputed:
            recompute = exp.Subquery(
                this=self._recompute_sql(query, recomputed),
                alias=exp.TableAlias(this=exp.to_identifier(r)),
            )
            combine.append(
                "joins", exp.Join(this=recompute, side="LEFT", on=self._group_match(query, d, r))
            )
        return combine

    def _recompute_sql(self, query: AggregateQuery, calls: Sequence[AggregateCall]) -> exp.Select:
        """The values of `calls` for the changed groups that need them, from the NEW inputs."""
        everything_new = Term(("new",) * len(query.sources), exp.Literal.number(1))
        rows = render_block(
            self._builder, query.select, query.sources, everything_new, self._changes_row(query)
        )
        for key in ("group", "having", "distinct"):
            rows.set(key, None)
        # groups that need a recomputed value: all changed groups when any aggregate is always
        # recomputed, else those where a deletion may have removed a MIN/MAX
        d, s = DELTA_ALIAS, STATE_ALIAS
        affected = exp.Select(
            expressions=[exp.column(g, table=d) for g in self._group_names(query)]
            or [exp.Literal.number(1)],
            from_=exp.From(
                this=exp.Table(
                    this=exp.to_identifier(GROUP_DELTA),
                    alias=exp.TableAlias(this=exp.to_identifier(d)),
                )
            ),
            joins=[
                exp.Join(
                    this=exp.Table(
                        this=exp.to_identifier(STATE),
                        alias=exp.TableAlias(this=exp.to_identifier(s)),
                    ),
                    side="LEFT",
                    on=self._group_match(query, d, s),
                )
            ],
        )
        if all(c.method in (MIN, MAX) for c in calls):
            affected = affected.where(exp.or_(*(self._needs_recompute(c) for c in calls)))
        projections = [exp.alias_(exp.column(g, table=ROWS), g) for g in self._group_names(query)]
        projections += [exp.alias_(self._over_row(c, query, ROWS), c.value) for c in calls]
        recompute = exp.Select(
            expressions=projections,
            from_=exp.From(
                this=exp.Subquery(this=rows, alias=exp.TableAlias(this=exp.to_identifier(ROWS)))
            ),
            joins=[
                exp.Join(
                    this=exp.Subquery(
                        this=affected, alias=exp.TableAlias(this=exp.to_identifier(AFFECTED))
                    ),
                    side="LEFT",
                    kind="SEMI",
                    on=self._group_match(query, ROWS, AFFECTED),
                )
            ],
        )
        if query.groups:
            recompute.set(
                "group",
                exp.Group(
                    expressions=[exp.column(g, table=ROWS) for g in self._group_names(query)]
                ),
            )
        return recompute

    # -- output --------------------------------------------------------------------------------

    def _output_sql(self, query: AggregateQuery) -> exp.Select:
        projections = []
        for name, expression, output_type in query.outputs:
            value = self._on_state(expression, query)
            if contains_aggregate(expression) and output_type:
                value = exp.cast(value, _data_type(output_type))
            projections.append(exp.alias_(value, exp.to_identifier(name)))
        projections += [exp.column(g) for g in self._group_names(query)]
        groups = exp.Table(this=exp.to_identifier(GROUPS))
        if query.is_global:
            unit = exp.Subquery(
                this=exp.select(exp.alias_(exp.Literal.number(1), "_streamsql_unit")),
                alias=exp.TableAlias(this=exp.to_identifier("_streamsql_unit")),
            )
            output = exp.Select(
                expressions=projections,
                from_=exp.From(this=unit),
                joins=[exp.Join(this=groups, side="LEFT", on=exp.true())],
            )
            condition = None
        else:
            output = exp.Select(expressions=projections, from_=exp.From(this=groups))
            condition = exp.GT(this=exp.column(COUNT), expression=exp.Literal.number(0))
        if query.having is not None:
            having = self._on_state(query.having, query)
            condition = having if condition is None else exp.and_(condition, having)
        if condition is not None:
            output = output.where(condition)
        return output

    def _on_state(self, node: exp.Expression, query: AggregateQuery) -> exp.Expression:
        """`node` (a SELECT or HAVING expression) rewritten over the state columns."""
        for k, group in enumerate(query.groups):
            if node == group:
                return exp.column(group_column(k))
        if is_aggregate_call(node):
            call = next(c for c in query.calls if c.call == node)
            return self._final_value(call, query)
        if isinstance(node, exp.Column) and node.table:
            raise RecomputeRequired(f"column {node.sql(DIALECT)} is neither grouped nor aggregated")
        copy = node.copy()
        for child in list(copy.iter_expressions()):
            child.replace(self._on_state(child, query))
        return copy

    def _final_value(self, call: AggregateCall, query: AggregateQuery) -> exp.Expression:
        """The aggregate's value computed from the state columns of a group."""
        zero = exp.Literal.number(0)
        if call.method == COUNT_STAR:
            count = exp.column(COUNT)
            return exp.Coalesce(this=count, expressions=[zero]) if query.is_global else count
        if call.method == COUNT_VALUES:
            count = exp.column(call.value)
            return exp.Coalesce(this=count, expressions=[zero]) if query.is_global else count
        if call.method in (SUM, AVG):
            some = exp.GT(this=exp.column(call.non_null), expression=zero)
            total = exp.column(call.value)
            if call.result_type:
                total = exp.cast(total, _data_type(call.result_type))
            if call.method == SUM:
                return exp.Case(ifs=[exp.If(this=some, true=total)])
            kind = numeric_kind_of_type(call.argument_type) or self._oracle_kind(call)
            if kind == DECIMAL:
                precision, scale = decimal_precision_scale(call.argument_type)
                quotient = exp.Div(
                    this=total,
                    expression=exp.cast(
                        exp.column(call.non_null),
                        exp.DataType.build("decimal(20,0)", dialect=DIALECT),
                    ),
                )
                result = exp.DataType.build(
                    f"decimal({min(38, precision + 4)},{min(38, scale + 4)})", dialect=DIALECT
                )
                return exp.Case(ifs=[exp.If(this=some, true=exp.cast(quotient, result))])
            quotient = exp.Div(
                this=exp.cast(total, exp.DataType.build("double")),
                expression=exp.column(call.non_null),
            )
            return exp.Case(ifs=[exp.If(this=some, true=quotient)])
        return exp.column(call.value)

    def _oracle_kind(self, call: AggregateCall) -> Optional[str]:
        return {"bigint": INTEGRAL, "double": FRACTIONAL}.get(call.result_type)

    def _reason(self, query: AggregateQuery) -> str:
        shape = ", ".join(self.methods) if self.methods else "group by"
        kept = []
        for method in (COUNT_STAR, COUNT_VALUES, SUM, AVG, MIN, MAX):
            if any(c.method == method for c in query.calls):
                kept.append(
                    "count" if method == COUNT_VALUES and "count(*)" not in kept else method
                )
        detail = f"{shape} ({', '.join(dict.fromkeys(kept))})" if kept else shape
        notes = []
        if any(c.method in (MIN, MAX) for c in query.calls):
            notes.append("min/max recompute a group after a deletion")
        recomputed = sorted({_call_name(c.call) for c in query.calls if c.method == RECOMPUTE})
        if recomputed:
            notes.append(f"{', '.join(recomputed)} recomputed for changed groups only")
        below = [c for c in KEYED_CONSTRUCTS if c in self._builder.constructs]
        below += sorted(c for c in self._builder.constructs if c.startswith(TOP_K))
        if below:
            notes.append(f"over {', '.join(below)}")
        return FAST_PATH + "; ".join([detail] + notes)


def _call_name(call: exp.Expression) -> str:
    if isinstance(call, exp.Filter):
        return _call_name(call.this) + " filter"
    if isinstance(call, exp.Count) and isinstance(call.this, exp.Distinct):
        return "count(distinct)"
    inner = call.this if isinstance(call.this, exp.Distinct) else None
    name = call.sql(DIALECT).split("(", 1)[0].lower()
    return f"{name}(distinct)" if inner is not None else name


def _if(
    condition: exp.Expression, then: exp.Expression, otherwise: exp.Expression
) -> exp.Expression:
    return exp.Case(ifs=[exp.If(this=condition, true=then.copy())], default=otherwise)


def _plus(left: exp.Expression, right: exp.Expression) -> exp.Expression:
    return exp.Add(this=left.copy(), expression=right.copy())


def _bigint(value: exp.Expression) -> exp.Expression:
    return exp.cast(value, exp.DataType.build("bigint"))


def _data_type(spark_type: str) -> exp.DataType:
    try:
        return exp.DataType.build(spark_type, dialect=DIALECT)
    except Exception:  # a type sqlglot cannot parse: pass it through verbatim
        return exp.DataType.build(spark_type, dialect=DIALECT, udt=True)
