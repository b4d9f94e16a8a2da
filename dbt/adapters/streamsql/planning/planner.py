"""The planner's entry point: one model's compiled SELECT in, the `StepPlan` of a step out.

Strategy, by the shape of the query (docs/sql-support.md lists what the fast path covers):

- "linear": projection, filter, UNION ALL, inner/cross joins, left/right/full equi-joins, semi
  and anti joins (IN / EXISTS / NOT IN / NOT EXISTS subqueries become those, `subqueries.py`),
  window functions per partition, top-K blocks among them (`windows.py`), derived tables and
  CTEs, LATERAL VIEW generators (`linear.py`, the joins in `joins/`), scalar aggregate
  subqueries as joined stages (`scalar_subqueries.py`), INTERSECT ALL / EXCEPT ALL over a stage
  of counts (`set_operations.py`), ROLLUP / CUBE / GROUPING SETS as a UNION ALL of one stage
  per grouping set (`grouping_sets.py`);
- "aggregate": a GROUP BY / DISTINCT / UNION / INTERSECT / EXCEPT / global aggregate at the top
  (INTERSECT and EXCEPT as counts of each side's rows, `set_operations.py`), possibly under a
  projection and filter, over any linear FROM clause (`aggregates/`, one rule per aggregate kind);
- "recompute": everything else (`recompute.py`), with the construct that forced it as reason.

Aggregates anywhere else in the query (below a join, below another aggregate, in a UNION ALL
branch) are lifted out as stages (`stages.py`): each is maintained by an aggregate plan of its
own, and the rest of the query is planned over their results as if they were inputs.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Optional, Sequence

from sqlglot import exp

from dbt.adapters.streamsql.planning import global_top_k
from dbt.adapters.streamsql.planning.aggregates.planner import AggregatePlanner
from dbt.adapters.streamsql.planning.binding import bind_tree, bound_input, parse_query
from dbt.adapters.streamsql.planning.constructs import drop_ordering, nonlinear_construct
from dbt.adapters.streamsql.planning.errors import PlanningError, RecomputeRequired
from dbt.adapters.streamsql.planning.grouping_sets import rewrite as rewrite_grouping_sets
from dbt.adapters.streamsql.planning.linear import DeltaBuilder
from dbt.adapters.streamsql.planning.plan import (
    DIALECT,
    FAST_PATH,
    Column,
    GlobalTopKPlan,
    InputTable,
    StagePlan,
    StepPlan,
)
from dbt.adapters.streamsql.planning.recompute import recompute_change_sql, recompute_rows_sql
from dbt.adapters.streamsql.planning.scalar_subqueries import rewrite as rewrite_scalar_subqueries
from dbt.adapters.streamsql.planning.set_operations import rewrite as rewrite_set_operations
from dbt.adapters.streamsql.planning.stage_lateness import (
    Through,
    lateness_through,
    read_only_as_change,
)
from dbt.adapters.streamsql.planning.stages import LiftedStage, lift_stages, top_chain
from dbt.adapters.streamsql.planning.subqueries import rewrite as rewrite_subqueries
from dbt.adapters.streamsql.planning.terms import NEW, at_version
from dbt.adapters.streamsql.planning.types import TypeOracle
from dbt.adapters.streamsql.planning.windows import add_tie_breakers, eliminate_qualify

__all__ = ["plan_step", "recompute_plan", "PlanningError", "Describe", "MeaningCheck"]

# Given a SELECT over the `new` placeholders of the inputs, its result columns (DESCRIBE QUERY).
Describe = Callable[[str], Sequence[Column]]
# Given the model's SQL and the planner's reading of it written back (a SELECT over the `new`
# placeholders), why Spark would not read the two alike; None when it does (the executor asks
# Spark: execution/pipeline/meaning.py).
MeaningCheck = Callable[[str, str], Optional[str]]

_CONSTRUCT_ORDER = (
    "filter",
    "projection",
    "union all",
    "inner join",
    "left join",
    "right join",
    "full join",
    "semi join",
    "anti join",
    "in (subquery)",
    "exists",
    "not in (subquery)",
    "not exists",
    "lateral view",
    "derived table",
)


def plan_step(
    sql: str,
    inputs: Sequence[InputTable],
    output_columns: Sequence[Column],
    describe: Optional[Describe] = None,
    check_meaning: Optional[MeaningCheck] = None,
) -> StepPlan:
    """Plans one step of an incremental view.

    Args:
        sql: the model's compiled SELECT (Spark SQL).
        inputs: every table the SQL reads, names normalized ("schema.table"); input i is reachable
            in the plan's SQL only through the placeholders of position i.
        output_columns: the model's result columns and types, in order (DESCRIBE QUERY).
        describe: tells the result types of a stage's SELECT (the executor asks Spark). Without
            it, stage columns have unknown types and the plan falls back to what needs none.
        check_meaning: tells whether the planner's reading of the query means what the query
            does; where it does not, the plan is the recompute (which runs the SQL as written).

    Raises:
        PlanningError: the SQL is not one query, or it reads a table that is not an input.
    """
    inputs, output_columns = tuple(inputs), tuple(output_columns)
    if not output_columns:
        raise PlanningError("the model has no output columns")
    try:
        query = parse_query(sql)
    except RecomputeRequired as why:
        return _recompute(sql, None, inputs, output_columns, str(why))
    try:
        tree = bind_tree(query, inputs)
        if check_meaning is not None:
            differs = check_meaning(sql, at_version(tree, NEW).sql(DIALECT))
            if differs:
                raise RecomputeRequired(differs)
        return _fast_plan(tree, inputs, output_columns, describe)
    except RecomputeRequired as why:
        return _recompute(sql, query, inputs, output_columns, str(why))


def _fast_plan(tree: exp.Query, inputs, output_columns, describe: Optional[Describe]) -> StepPlan:
    limit = global_top_k.split(tree, output_columns)
    tree = rewrite_grouping_sets(rewrite_set_operations(eliminate_qualify(tree)), output_columns)
    rewrite_subqueries(tree)
    rewrite_scalar_subqueries(tree)
    if limit is not None:  # the query below the LIMIT, an aggregate at its top a stage
        tree = global_top_k.wrap(tree, output_columns)
    obstacle = nonlinear_construct(tree)
    if obstacle:
        raise RecomputeRequired(obstacle)
    if not any(bound_input(t) is not None for t in tree.find_all(exp.Table)):
        raise RecomputeRequired("the query reads no input")
    add_tie_breakers(tree, TypeOracle(inputs))
    drop_ordering(tree)
    lifted = lift_stages(tree, len(inputs), keep_top=limit is None)
    stages = _plan_stages(lifted, inputs, describe)
    readable = tuple(inputs) + tuple(InputTable(s.name, s.columns) for s in stages)
    stage_note = _stage_note(stages)
    through = lateness_through(tree, [c.name for c in output_columns], [s.position for s in stages])
    if limit is None and _is_aggregate(tree):
        planner = AggregatePlanner(TypeOracle(readable), stages_from=len(inputs))
        result = planner.plan(tree, output_columns)
        return _final_stages(
            StepPlan(
                kind="aggregate",
                reason=result.reason + stage_note,
                inputs=inputs,
                output_columns=output_columns,
                aggregate=result.plan,
                stages=stages,
            ),
            through,
        )
    _name_outputs(tree, [c.name for c in output_columns])
    builder = DeltaBuilder(stages_from=len(inputs), oracle=TypeOracle(readable))
    change = builder.query_delta(tree).sql(DIALECT)
    builder.newest = True
    later = builder.query_delta(tree).sql(DIALECT)
    bounds = list(builder.bounds.values())
    top_k = None
    if limit is not None:
        new = at_version(tree, NEW).sql(DIALECT)
        # bound on steps after the first only (a first step reads the query over the new inputs)
        bounds.append(global_top_k.gate(limit, later, output_columns))
        if limit.buffer:
            buffers = [
                global_top_k.buffer_sql(limit, delta, output_columns) for delta in (change, later)
            ]
            top_k = GlobalTopKPlan(
                limit.count,
                limit.buffer,
                buffers[0],
                global_top_k.new_top_sql(limit, new, output_columns),
                buffers[1] if buffers[1] != buffers[0] else None,
            )
        change, later = (
            global_top_k.change_sql(limit, delta, new, output_columns) for delta in (change, later)
        )
        builder.constructs.add(limit.construct)
        builder.retracting = True
    constructs = [c for c in _CONSTRUCT_ORDER if c in builder.constructs]
    constructs += sorted(c for c in builder.constructs if c not in _CONSTRUCT_ORDER)
    return _final_stages(
        StepPlan(
            kind="linear",
            reason=FAST_PATH + ", ".join(constructs) + stage_note,
            inputs=inputs,
            output_columns=output_columns,
            change_sql=change,
            monotonic=not builder.retracting,
            stages=stages,
            bounds=tuple(bounds),
            later_change_sql=later if later != change else None,
            later_monotonic=not builder.retracting and not builder.signed,
            top_k=top_k,
        ),
        through,
    )


def _final_stages(plan: StepPlan, through: Dict[int, Through]) -> StepPlan:
    """`plan` with each stage's `lateness_through`: the model columns that carry one of its
    columns, where nothing in the plan reads the stage but its change (stage_lateness.py).

    A top aggregate's MIN/MAX recomputes a changed group from the stage's rows after the step;
    it reads only groups a change reached, whose stage groups carry the same value (the
    column passes through), so those are never dropped ones: a change that reaches a dropped
    group fails the step before (aggregate_state.changed_groups)."""
    if not through:
        return plan
    texts = [plan.change_sql, plan.later_change_sql] + [b.value for b in plan.bounds]
    if plan.top_k is not None:
        texts += [plan.top_k.buffer_sql, plan.top_k.later_buffer_sql, plan.top_k.new_top_sql]
    top = plan.aggregate
    if top is not None:
        texts += [top.delta_sql, top.later_delta_sql, top.combine_without_recompute_sql]
        texts += [top.output_sql] + [b.value for b in top.bounds]
    stages = []
    for stage in plan.stages:
        others = [
            text
            for other in plan.stages
            if other is not stage
            for text in (
                other.aggregate.delta_sql,
                other.aggregate.later_delta_sql,
                other.aggregate.combine_sql,
                *[b.value for b in other.aggregate.bounds],
            )
        ]
        pairs = through.get(stage.position, ())
        if pairs and read_only_as_change(stage.position, texts + others):
            stage = dataclasses.replace(stage, lateness_through=pairs)
        stages.append(stage)
    return dataclasses.replace(plan, stages=tuple(stages))


def _plan_stages(
    lifted: Sequence[LiftedStage], inputs: Sequence[InputTable], describe: Optional[Describe]
) -> tuple:
    """An aggregate plan per lifted stage, each over the inputs and the stages before it."""
    readable: List[InputTable] = list(inputs)
    planned: List[StagePlan] = []
    for number, stage in enumerate(lifted):
        name = f"stage{number}"
        columns = _stage_columns(stage, lifted, describe)
        planner = AggregatePlanner(
            TypeOracle(readable), bound_prefix=f"{name}_", stages_from=len(inputs)
        )
        result = planner.plan(stage.query.copy(), columns)
        planned.append(
            StagePlan(
                name,
                stage.position,
                tuple(columns),
                result.plan,
                result.reason.replace(FAST_PATH, "", 1),
            )
        )
        readable.append(InputTable(name, tuple(columns)))
    return tuple(planned)


def _stage_columns(
    stage: LiftedStage, lifted: Sequence[LiftedStage], describe: Optional[Describe]
) -> List[Column]:
    if describe is None:
        return [Column(name, "") for name in stage.names]
    described = list(describe(at_version(stage.standalone(lifted), NEW).sql(DIALECT)))
    if len(described) != len(stage.names):
        raise RecomputeRequired(
            "an aggregate below the top of the query has columns the planner cannot match"
        )
    return [Column(name, column.data_type) for name, column in zip(stage.names, described)]


def _stage_note(stages: Sequence[StagePlan]) -> str:
    if not stages:
        return ""
    kinds = "; ".join(dict.fromkeys(stage.reason for stage in stages))
    count = f"{len(stages)} stage" + ("s" if len(stages) > 1 else "")
    return f"; over {count} ({kinds})"


def _is_aggregate(tree: exp.Expression) -> bool:
    """A GROUP BY / DISTINCT / aggregate at the top, possibly under projections over one derived
    table: the chain `stages.top_chain` keeps for the top's aggregate plan."""
    return bool(top_chain(tree))


def _name_outputs(tree: exp.Expression, names: Sequence[str]) -> None:
    """Aliases the top-level projections (of every UNION branch) to the model's column names."""
    if isinstance(tree, exp.SetOperation):
        _name_outputs(tree.this, names)
        _name_outputs(tree.expression, names)
        return
    if isinstance(tree, exp.Subquery):
        _name_outputs(tree.this, names)
        return
    if len(tree.expressions) != len(names):
        raise RecomputeRequired("the query's columns do not match the model's columns")
    tree.set(
        "expressions",
        [exp.alias_(p.unalias(), exp.to_identifier(n)) for p, n in zip(tree.expressions, names)],
    )


def recompute_plan(
    sql: str,
    inputs: Sequence[InputTable],
    output_columns: Sequence[Column],
    why: str,
    change_sql: Optional[str] = None,
) -> StepPlan:
    """The one constructor of a recompute plan, whatever chose it (the planner, a config, a
    step's choice, a recovery); `why` is the reason the step log gives.

    `change_sql`: the change, when it is not the query over the new inputs minus the model's
    table (planning/recompute.py); a recovery's adds what LATENESS and WATERMARK set aside."""
    rows_sql = None
    if change_sql is None:
        try:
            query: Optional[exp.Query] = parse_query(sql)
        except RecomputeRequired:
            query = None
        change_sql = recompute_change_sql(sql, query, tuple(inputs), tuple(output_columns))
        rows_sql = recompute_rows_sql(sql, query, tuple(inputs), tuple(output_columns))
    return StepPlan(
        kind="recompute",
        reason=f"recompute: {why}",
        inputs=tuple(inputs),
        output_columns=tuple(output_columns),
        change_sql=change_sql,
        rows_sql=rows_sql,
    )


def _recompute(sql, query, inputs, output_columns, why: str) -> StepPlan:
    change_sql = recompute_change_sql(sql, query, inputs, output_columns)
    return recompute_plan(sql, inputs, output_columns, why, change_sql)
