"""Inputs that are not the table, or no longer have the history, the last step read.

A step checks before it reads that each input can still be read from where the last step left it
(faults.py: replaced, restored, vacuumed, its log expired). When one cannot, the step recovers
by itself, exactly: it recomputes the model's query over the inputs' current versions and
applies only the difference to the model, so the model's own change feed stays right for the
views that read it. The difference is taken against what the model would hold without LATENESS
and WATERMARK (its table, plus what `__late` quarantined and `__pending` holds; with emit_final,
plus the groups not final yet, which its table does not hold), so it is the change of the query
since the last step, which LATENESS and WATERMARK then judge like any step's change. State
tables are rebuilt as a first step builds them (every group from the inputs' current versions),
written as this step's rows, with the groups that are gone marked so. The one case that cannot
be exact is a query whose value depends on when it runs (`current_timestamp()`, `rand()`, ...):
a recompute would not give the rows the steps gave, so the step fails, naming the input, the
versions it needed and `dbt run --full-refresh`.

A read that fails anyway (files deleted by hand, a VACUUM that logged no commit) is retried once
as a recovery (`lost_history`, step.run_step).

`recovery_reasons` tells whether a step must recover, and `recovery_sql` is the change its
recompute plan computes: the step's plan is decided with them in one place
(pipeline/plan_choice.decide). `prepare` and `finish` are the two calls a step's change phase
makes after (step.compute_step): `prepare` records what the step read and swaps in first-step
reads for a recovery; `finish` adds the state rebuild and, for on_schema_change 'ignore',
projects the change on the model's columns (schema.py).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence

import sqlglot
from sqlglot import exp

from dbt.adapters.streamsql.execution.commit.aggregate_state import (
    StateRead,
    changed_groups,
    output_change,
)
from dbt.adapters.streamsql.execution.commit.record import StepRecord
from dbt.adapters.streamsql.execution.context import StepContext
from dbt.adapters.streamsql.execution.engine import statements as sql
from dbt.adapters.streamsql.execution.engine.views import inline
from dbt.adapters.streamsql.execution.event_time import emit_final as emit
from dbt.adapters.streamsql.execution.event_time import lateness as late
from dbt.adapters.streamsql.execution.event_time.rules import held_back_rows
from dbt.adapters.streamsql.execution.recovery import retention, schema
from dbt.adapters.streamsql.execution.recovery.faults import (
    input_fault,
    lost_history,
)
from dbt.adapters.streamsql.execution.shared.errors import DroppedStateReached, StepError
from dbt.adapters.streamsql.execution.shared.input_state import InputChange
from dbt.adapters.streamsql.execution.shared.result import StepResult
from dbt.adapters.streamsql.execution.shared.writes import ChangedGroups, ModelChange, StateWrite
from dbt.adapters.streamsql.execution.step_state import StepChoice, StepState
from dbt.adapters.streamsql.planning.plan import (
    COUNT,
    DIALECT,
    GROUPS,
    TARGET,
    WEIGHT,
    AggregatePlan,
    Column,
    StagePlan,
    StepPlan,
    delta_input,
    new_input,
    old_input,
)
from dbt.adapters.streamsql.planning.recompute import recompute_change_sql

NONDETERMINISTIC = {
    exp.CurrentTimestamp: "current_timestamp()",
    exp.CurrentDate: "current_date()",
    exp.CurrentTime: "current_time()",
    exp.Rand: "rand()",
    exp.Randn: "randn()",
    exp.Uuid: "uuid()",
    exp.Shuffle: "shuffle()",
}
NONDETERMINISTIC_NAMES = {
    "now",
    "localtimestamp",
    "current_timezone",
    "monotonically_increasing_id",
    "spark_partition_id",
    "input_file_name",
    "input_file_block_start",
    "input_file_block_length",
    "random",
    "uuid",
    "rand",
    "randn",
    "shuffle",
    "reflect",
    "java_method",
    "try_reflect",
    "randstr",
    "uniform",
}


# -- detection ----------------------------------------------------------------------------------


def take_again(
    failed: StepContext,
    error: BaseException,
    take_step: Callable[[StepContext, str], StepResult],
    started: float,
) -> StepResult:
    """Take a step again as a recovery, after reading some input's history failed (or its
    change reached state a compaction dropped: `DroppedStateReached`).

    `take_step(context, reason)` takes the step in a new context, recovering for `reason`.
    Nothing the failed attempt did stands in the way: a step writes nothing before its model's
    commit, and a commit that landed is found by the next attempt like by any run.
    """
    first_line = str(error).strip().splitlines()[0][:300] if str(error).strip() else repr(error)
    again = StepContext(failed.session, failed.model, failed.log, side_sql=failed.side_sql)
    reason = (
        str(error)
        if isinstance(error, DroppedStateReached)
        else f"reading its inputs' history failed ({first_line})"
    )
    failed.log(
        f"{failed.model.name}: {reason}; taking the step again from the inputs' current versions"
    )
    try:
        result = take_step(again, reason)
    except Exception as second:
        if not lost_history(second):
            raise
        raise StepError(
            f"Model {failed.model.name}: reading its inputs failed ({first_line}), and again "
            f"when the step recomputed the model from their current versions "
            f"({str(second).strip().splitlines()[0][:300]}): files of an input's current "
            f"version are gone. Repair or re-create that input, then run `dbt run "
            f"--full-refresh --select {failed.model.name}`."
        ) from second
    finally:
        again.views.drop_all()
    result.seconds = time.monotonic() - started
    return result


def nondeterministic(compiled_sql: str) -> Optional[str]:
    """The first function of the query whose value depends on when or where it runs."""
    try:
        tree = sqlglot.parse_one(compiled_sql, read=DIALECT)
    except Exception:
        return None
    for node in tree.walk():
        if isinstance(node, exp.StrToUnix) and (
            node.this is None or isinstance(node.this, exp.CurrentTimestamp)
        ):
            return "unix_timestamp()"
        for kind, label in NONDETERMINISTIC.items():
            if isinstance(node, kind):
                return label
        if isinstance(node, exp.Anonymous) and str(node.name).lower() in NONDETERMINISTIC_NAMES:
            return f"{str(node.name).lower()}()"
    return None


def star_in_expression(compiled_sql: str) -> bool:
    """Whether the query passes `*` to a function other than COUNT (`hash(*)`, `array(*)`):
    the values it computes then depend on every column of an input, new ones included."""
    try:
        tree = sqlglot.parse_one(compiled_sql, read=DIALECT)
    except Exception:
        return False
    for star in tree.find_all(exp.Star):
        parent = star.parent
        if isinstance(parent, exp.Func) and not isinstance(parent, exp.Count):
            return True
    return False


def schema_reason(
    ctx: StepContext, step: StepState, plan: StepPlan, changes: Sequence[InputChange]
) -> Optional[str]:
    """Why the model's existing rows need a recompute after its inputs' columns changed."""
    added_by_inputs = [
        name for change in changes for name in schema.added_by_inputs(change.commits or ())
    ]
    if added_by_inputs and star_in_expression(step.compiled_sql):
        return (
            f"input column(s) {', '.join(sorted(set(added_by_inputs)))} were added, which "
            "the model reads through * in an expression"
        )
    change, previous = step.schema, step.previous
    if change is None and previous.columns:  # a step being finished: as the step compared
        change = schema.compare(
            ctx.model.on_schema_change, schema.record_columns(previous), plan.output_columns
        )
    if change is None or change.mode not in ("append_new_columns", "sync_all_columns"):
        return None
    untraced = [c.name for c in change.added if c.name.lower() not in added_by_inputs]
    if untraced:
        return (
            f"the model's new column(s) {', '.join(untraced)} are not columns an input "
            "gained by ADD COLUMNS since the last step, so their values in its existing "
            "rows are recomputed"
        )
    return None


# -- the step's change, adjusted ----------------------------------------------------------------


@dataclass
class Adjusted:
    """What a step computes its change with, after `prepare`."""

    plan: StepPlan  # the model's plan, or the recompute that replaces it
    changes: List[InputChange]
    columns: List[Column]  # the columns the step writes (schema.written_columns)
    query_columns: List[Column]  # the query's output columns
    original: Optional[StepPlan] = None  # set when the step recovers: the model's own plan


def recovery_reasons(
    ctx: StepContext, step: StepState, plan: StepPlan, changes: Sequence[InputChange]
) -> List[str]:
    """Why the step cannot compute its change from its inputs' changes and recomputes the
    model instead (plan_choice.decide makes the plan): the reason it is taken again, inputs
    that cannot be read from where the last step left it, a schema change the model's rows need
    recomputed for; none when it can. Writes nothing.

    Raises:
        StepError: it must recover, but the query is not deterministic.
    """
    reasons = [step.recover_reason] if step.recover_reason else []
    for change in changes:
        fault = input_fault(ctx, change, step.previous)
        if fault is not None:
            reasons.append(fault.describe())
    why = schema_reason(ctx, step, plan, changes)
    if why:
        reasons.append(why)
    function = nondeterministic(step.compiled_sql) if reasons else None
    if function is not None:
        raise StepError(
            f"Model {ctx.model.name}: {'; '.join(reasons)}. The step cannot read that change, "
            f"and recomputing the model from its inputs would not give the rows its steps "
            f"gave, because its query calls {function}. Nothing was changed. Run `dbt run "
            f"--full-refresh --select {ctx.model.name}` to rebuild it from its inputs."
        )
    return reasons


def prepare(
    ctx: StepContext, step: StepState, choice: StepChoice, changes: Sequence[InputChange]
) -> Adjusted:
    """Before the change is computed, once the step's plan is chosen (`choice`): notes what
    the step record keeps of the inputs and the model's columns, warns of short retentions,
    applies a schema change to the model's tables, and for a recovery reads every input in
    full."""
    previous, record, result = step.previous, step.record, step.result
    now = time.time()
    query_columns = list(choice.model_plan.output_columns)
    columns = schema.written_columns(ctx, step.schema, previous, query_columns)
    record.input_ids = {c.input.table.name: c.input.table_id for c in changes}
    record.columns = [[c.name, c.data_type] for c in table_after(step, columns)]
    record.started_at = now
    result.notes.extend(
        retention.retention_notes(
            [(c.input.table.name, c.input.properties) for c in changes],
            now,
            previous.started_at if previous.step > 0 else None,
        )
    )
    if len(columns) < len(query_columns):
        kept = {c.name.lower() for c in columns}
        result.notes.append(
            "on_schema_change 'ignore': the query's column(s) "
            + ", ".join(c.name for c in query_columns if c.name.lower() not in kept)
            + " are not in the model"
        )
    schema.apply(ctx, step.schema, choice.model_plan)  # after every refusal: the first write
    if choice.note:
        result.notes.append(choice.note)
    if not choice.recovered:
        return Adjusted(choice.plan, list(changes), columns, query_columns)
    ctx.log(f"{ctx.model.name}: step {record.step} recomputes the model: {choice.because}")
    step.first_step = True  # every input is read as of its version now, in full
    record.recovered = list(choice.recovered)
    return Adjusted(
        choice.plan,
        [InputChange(c.input, None) for c in changes],
        columns,
        query_columns,
        original=choice.model_plan,
    )


def finish(
    ctx: StepContext, step: StepState, adjusted: Adjusted, model_change: ModelChange
) -> ModelChange:
    """After the change is computed: the state rebuild of a recovery, and the change projected
    on the model's columns (on_schema_change 'ignore')."""
    if adjusted.original is not None:
        rebuild_state(ctx, step, adjusted.original)
        return model_change  # the recompute wrote the model's columns already
    if len(adjusted.columns) == len(adjusted.query_columns):
        return model_change
    cols = sql.column_list(adjusted.columns)
    projected = f"SELECT {cols}, {WEIGHT} FROM {model_change.relation}"
    if model_change.appends:
        return ModelChange(inline(projected), appends=True)
    return ModelChange(
        ctx.views.materialize(
            "projected",
            sql.consolidate(inline(projected), adjusted.columns),
            "net change of the model, on the model's columns",
        )
    )


def table_after(step: StepState, written: Sequence[Column]) -> List[Column]:
    """The model table's columns after the step (schema.apply has altered it already)."""
    change = step.schema
    if change is None:
        return list(written)
    if change.mode == "ignore":
        return list(change.table)
    dropped = (
        {c.name.lower() for c in change.removed} if change.mode == "sync_all_columns" else set()
    )
    return [c for c in change.table if c.name.lower() not in dropped] + list(change.added)


def padded(plan: StepPlan, columns: Sequence[Column]) -> StepPlan:
    """A recompute plan reads the model's table with the query's columns: under 'ignore', give
    the table the columns it lacks, as NULL (the change is projected on its columns after)."""
    if plan.kind != "recompute" or len(columns) == len(plan.output_columns):
        return plan
    return dataclasses.replace(
        plan, change_sql=pad_target(plan.change_sql or "", columns, plan.output_columns)
    )


def pad_target(change_sql: str, have: Sequence[Column], want: Sequence[Column]) -> str:
    kept = {c.name.lower() for c in have}
    missing = [c for c in want if c.name.lower() not in kept]
    if not missing:
        return change_sql
    extra = ", ".join(f"CAST(NULL AS {c.data_type}) AS {sql.quote(c.name)}" for c in missing)
    return sql.replace_placeholders(
        change_sql, lambda name: f"(SELECT *, {extra} FROM {TARGET})" if name == TARGET else name
    )


def recovery_sql(
    ctx: StepContext, step: StepState, plan: StepPlan, columns: Sequence[Column]
) -> str:
    """The change of the model's query since the last step, with weights (plan.py's form):

    the query over the inputs now (+1) and the model's table (-1), planning/recompute.py's
    recompute, projected on the columns the step writes, plus what LATENESS set aside and
    WATERMARK holds as of the last step: the model's table plus those is the query as of the
    last step (docs/steps.md, the guarantee).
    """
    from dbt.adapters.streamsql.planning.binding import parse_query

    try:
        query = parse_query(step.compiled_sql)
    except Exception:
        query = None  # recompute_change_sql then finds the inputs by their tokens
    recompute = recompute_change_sql(step.compiled_sql, query, plan.inputs, plan.output_columns)
    # under 'ignore' the table lacks the query's new columns, which the step does not write
    recompute = pad_target(recompute, columns, plan.output_columns)
    cols = sql.column_list(columns)
    previous = step.previous
    late_rows, held_rows = held_back_rows(ctx, columns, columns, previous.step)
    unemitted = emit_final_rows(ctx, plan, columns, previous)
    parts = [f"SELECT {cols}, {WEIGHT} FROM ({recompute})", late_rows, unemitted, held_rows]
    return "\nUNION ALL\n".join(part for part in parts if part)


def emit_final_rows(
    ctx: StepContext, plan: StepPlan, columns: Sequence[Column], previous: StepRecord
) -> Optional[str]:
    """emit_final: the rows a model without it would hold and this one does not yet (the groups
    not final after the last step, with weight -1), so that the difference above is the
    query's change as the same model without emit_final would have it."""
    if not ctx.model.emit_final or plan.aggregate is None or previous.step == 0:
        return None
    rules = late.lateness_rules(
        ctx.model.name, plan.output_columns, ctx.model.lateness, ctx.model.max_future
    )
    final = emit.final_columns(ctx.model, plan, rules)
    aggregate = plan.aggregate
    keys = [c for c in aggregate.state_columns if c.name in aggregate.group_columns]
    before = sql.latest_state(
        sql.state_through(ctx.model.state_table, previous.step), keys, aggregate.state_columns
    )
    return emit.rows_of_groups(
        aggregate, inline(before), columns, emit.not_final(final, previous.waterline), weight=-1
    )


# -- state tables, rebuilt --------------------------------------------------------------------


def rebuild_state(ctx: StepContext, step: StepState, plan: StepPlan) -> None:
    """Every state table of `plan`, as a first step builds it, appended as this step's rows.

    The inputs are bound as a first step binds them (their versions now, all rows inserted);
    each stage is bound like an input for what reads it. Groups the table had and the inputs no
    longer give get a row with count 0, which hides their older rows (statements.latest_state).
    """
    previous, writes = step.previous, step.writes
    step.record.stage_dropped_below = {}  # every stage group's state is there again
    for stage in plan.stages:
        table = ctx.model.stage_table(stage.name)
        groups = rebuilt_groups(ctx, f"re_{stage.name}_", table, stage.aggregate, previous)
        bind_stage(ctx, stage, groups)
        writes.state.append(
            StateWrite(table, f"__streamsql_{stage.name}", stage.aggregate, groups, fresh=False)
        )
    if plan.aggregate is not None:
        step.record.state_dropped_below = {}  # every group's state is there again
        groups = rebuilt_groups(ctx, "re_", ctx.model.state_table, plan.aggregate, previous)
        writes.state.append(
            StateWrite(
                ctx.model.state_table, "__streamsql_state", plan.aggregate, groups, fresh=False
            )
        )


def rebuilt_groups(
    ctx: StepContext, label: str, table: str, aggregate: AggregatePlan, previous: StepRecord
) -> ChangedGroups:
    cols = sql.column_list(aggregate.state_columns)
    nothing = f"SELECT {cols} FROM {table} WHERE false"  # the state table's own types
    # every group, from nothing: as a first step (a recovery reads every input in full)
    fresh = changed_groups(
        ctx, label, aggregate, StateRead(nothing, first_step=True, inserts_only=True)
    )
    keys = [c for c in aggregate.state_columns if c.name in aggregate.group_columns]
    before = sql.latest_state(
        sql.state_through(table, previous.step), keys, aggregate.state_columns
    )
    # every group of either side: the rebuilt one where there is one, else a gone one (count
    # 0). (A full join: a UNION ALL of the two with an anti join here makes Spark's optimizer
    # fail with "key not found" on some group keys, a window's struct among them.)
    found = f"n.{COUNT} IS NOT NULL"  # a rebuilt group's count is never NULL
    every_group = ", ".join(
        f"CASE WHEN {found} THEN n.{sql.quote(c.name)} ELSE o.{sql.quote(c.name)} END "
        f"AS {sql.quote(c.name)}"
        if c in keys
        else f"COALESCE(n.{COUNT}, CAST(0 AS BIGINT)) AS {COUNT}"
        if c.name == COUNT
        else f"n.{sql.quote(c.name)}"
        for c in aggregate.state_columns
    )
    every = ctx.views.materialize(
        f"{label}rebuilt",
        f"SELECT {every_group} FROM {fresh.new} n FULL OUTER JOIN ({before}) o "
        f"ON {sql.null_safe_match(keys, 'o', 'n')}",
        f"the state of {table} rebuilt from the inputs (gone groups with count 0)",
    )
    with ctx.role(f"count the rebuilt groups of {table}"):
        count = int(ctx.session.query(sql.count_rows(every))[0]["n"])
    return ChangedGroups(every, inline(nothing), count)


def bind_stage(ctx: StepContext, stage: StagePlan, groups: ChangedGroups) -> None:
    """A rebuilt stage as the input the rest of the plan reads: all of it new, nothing old.

    (The output of a group with count 0, a gone one, is no row: plan.py, `output_sql`.)
    """
    aggregate, label, position = stage.aggregate, f"re_{stage.name}_", stage.position
    net = output_change(ctx, label, aggregate, groups, stage.columns, nothing_before=True)
    columns = sql.column_list(stage.columns)
    output = sql.bind_placeholders(aggregate.output_sql, {GROUPS: groups.new})
    ctx.bindings.set(
        new_input(position), ctx.views.view(f"{label}new", f"SELECT {columns} FROM ({output})")
    )
    ctx.bindings.set(old_input(position), inline(sql.typed_nothing(list(stage.columns))))
    ctx.bindings.set(delta_input(position), net)
