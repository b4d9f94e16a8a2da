"""Phase 3 of a step: the model's change, one function per kind of plan.

Each returns the name of a view holding the model's change as weighted rows (plan.py: the
model's columns plus `_streamsql_weight`), consolidated unless noted, and computes nothing it
writes: a plan with state returns its state write (`writes.StateWrite`) for protocol.py to run.

- `stage_change`: an aggregate below the top of the query (planning/stages.py); binds the stage's
  placeholders so that what reads it sees one more input. Stages run first, in plan order.
- `linear_change`: projection, filter, UNION ALL, joins, over input (and stage) changes.
- `aggregate_change`: GROUP BY and its kin, through the model's state table.
- `recompute_change`: the query over the new inputs, diffed with the model's table.
- `final_groups_change`: emit_final, after LATENESS: the groups that became final, as inserts.
"""

from __future__ import annotations

from collections import Counter
from functools import reduce
from typing import Mapping, Optional, Sequence, Tuple

from dbt.adapters.streamsql.execution.commit import tables
from dbt.adapters.streamsql.execution.commit.aggregate_state import (
    StateRead,
    changed_groups,
    group_columns,
    output_change,
    state_before,
)
from dbt.adapters.streamsql.execution.commit.bounds import CHANGE_ALIAS, bind_bounds
from dbt.adapters.streamsql.execution.context import StepContext
from dbt.adapters.streamsql.execution.engine import statements as sql
from dbt.adapters.streamsql.execution.engine.bindings import MATERIALIZED
from dbt.adapters.streamsql.execution.engine.views import inline
from dbt.adapters.streamsql.execution.event_time import emit_final as emit
from dbt.adapters.streamsql.execution.event_time import lateness as late
from dbt.adapters.streamsql.execution.event_time.rules import held_back_rows
from dbt.adapters.streamsql.execution.shared.errors import DroppedStateReached
from dbt.adapters.streamsql.execution.shared.lateness_rule import LatenessRule
from dbt.adapters.streamsql.execution.shared.writes import ModelChange, StateWrite
from dbt.adapters.streamsql.execution.step_state import StepState
from dbt.adapters.streamsql.planning import global_top_k
from dbt.adapters.streamsql.planning.plan import (
    GROUP_ALIAS,
    GROUPS,
    TARGET,
    WEIGHT,
    AggregatePlan,
    Column,
    GlobalTopKPlan,
    StagePlan,
    StepPlan,
    delta_input,
    new_input,
    old_input,
)


def placeholder_reads(plan: StepPlan) -> Counter:
    """How many times the SQL a step may run reads each placeholder (an upper bound).

    A plan has two forms of some SQL (for first and later steps); the larger count of the two
    is taken. Key bounds read their change once more, for its MIN and MAX.
    """
    families = []
    if plan.kind == "linear":
        families.append((plan.change_sql or "", plan.later_change_sql or ""))
        if plan.top_k is not None:
            families.append((plan.top_k.buffer_sql, plan.top_k.later_buffer_sql or ""))
            families.append((plan.top_k.new_top_sql,))
    aggregates = [stage.aggregate for stage in plan.stages]
    if plan.aggregate is not None:
        aggregates.append(plan.aggregate)
    for aggregate in aggregates:
        families.append((aggregate.delta_sql, aggregate.later_delta_sql or ""))
        families.append((aggregate.combine_sql,))
    reads: Counter = Counter()
    for forms in families:
        counts = [Counter(sql.placeholder_occurrences(text)) for text in forms]
        reads += reduce(lambda a, b: a | b, counts, Counter())
    for bound in list(plan.bounds) + [b for a in aggregates for b in a.bounds]:
        reads += Counter(sql.placeholder_occurrences(bound.value))
    return reads


def stage_change(
    ctx: StepContext,
    step: StepState,
    plan: StepPlan,
    stage: StagePlan,
    lateness: Sequence[LatenessRule],
) -> Tuple[int, StateWrite]:
    """Bind a stage's placeholders (its result before and after the step, and the change).

    Returns how many rows of the stage's change are removals, and the write of its state.
    Where a model column with LATENESS carries one of its group columns, a change that reaches
    a group whose state a compaction dropped fails the step (`DroppedStateReached`), as for the
    top aggregate.
    """
    aggregate, label, position = stage.aggregate, f"{stage.name}_", stage.position
    table, previous = ctx.model.stage_table(stage.name), step.previous
    outputs = tables.lateness_outputs(plan, stage.name)
    dropped = tables.dropped_lines(step.record, stage.name)
    check_lines(dropped, lateness, outputs)
    state = state_before(table, previous.step, aggregate)
    groups = changed_groups(
        ctx, label, aggregate, state_read(step, state, lateness, dropped, group_outputs=outputs)
    )
    net = output_change(ctx, label, aggregate, groups, stage.columns)
    # The stage's whole result, before and after the step: what reads it may need any group.
    # Temporary views, not inline: Spark's optimizer fails on some queries that read the union
    # of `state_after` written inline (an internal "key not found" when it rewrites the union's
    # constraints), and planning a view once costs less than planning it in every statement.
    whole_state = ctx.views.view(
        f"{label}whole_state", state, f"{stage.name}: its whole state before the step"
    )
    state_after = ctx.views.view(
        f"{label}state_after",
        sql.state_after(whole_state, groups.new, group_columns(aggregate)),
        f"{stage.name}: its whole state after the step",
    )
    columns = sql.column_list(stage.columns)
    for version, placeholder, state_view in (
        ("old", old_input(position), whole_state),
        ("new", new_input(position), state_after),
    ):
        output = sql.bind_placeholders(aggregate.output_sql, {GROUPS: state_view})
        when = "before" if version == "old" else "after"
        ctx.bindings.set(
            placeholder,
            ctx.views.view(
                f"{label}{version}",
                f"SELECT {columns} FROM ({output})",
                f"{stage.name}: its rows {when} the step, read like an input's",
            ),
        )
    ctx.bindings.set(delta_input(position), net)
    with ctx.role(f"{stage.name}: count the removals in its change"):
        removals = int(ctx.session.query(sql.count_changes(net))[0]["removals"])
    return removals, StateWrite(
        table, f"__streamsql_{stage.name}", aggregate, groups, fresh=previous.step == 0
    )


def check_lines(
    lines: Mapping[str, str],
    lateness: Sequence[LatenessRule],
    outputs: Sequence[Tuple[str, str]],
) -> None:
    """A state table lacks the groups below `lines`; if the model no longer declares the
    lateness of such a column (or its groups no longer decide it), an on-time change may now
    reach one of them: the step recomputes the model, which rebuilds every group's state."""
    decided = {name.lower() for name, _ in outputs}
    ruled = {rule.column.name for rule in lateness if rule.column.name.lower() in decided}
    orphaned = {column: line for column, line in lines.items() if column not in ruled}
    if orphaned:
        raise DroppedStateReached(
            f"the state of final groups was dropped ({late.below_lines(orphaned)}), and the "
            "model no longer declares that lateness: its state is rebuilt"
        )


def linear_change(
    ctx: StepContext, step: StepState, plan: StepPlan, keep_buffer: bool = False
) -> ModelChange:
    """The change of a linear query: its delta rules over the input (and stage) changes.

    A monotonic query over inserts only changes by inserts: every row of its change has weight
    +1, and it is appended as it is, read once, by the model's INSERT. Otherwise the change is
    netted (and materialized: the commit counts it, then writes it).

    `keep_buffer`: a global top-K's step record keeps the rows below its cut (not where LATENESS
    or WATERMARK may take rows out of the change after it is computed).
    """
    change_sql, monotonic = plan.change_sql or "", plan.monotonic
    top_k = plan.top_k
    later = not (step.first_step or (monotonic and step.inserts_only))
    # The form that reads no input's older version has negative terms even for inserts:
    # used where the change is netted anyway (something was removed), so that inserts keep
    # their append without netting.
    if later and plan.later_change_sql:
        change_sql, monotonic = plan.later_change_sql, plan.later_monotonic
    if TARGET in change_sql:  # a global top-K reads the model's rows (global_top_k.py)
        define_target(ctx)
    if top_k is not None:
        define_buffer(ctx, step, plan, keep_buffer)
    bind_bounds(ctx, plan.bounds, change_sql, step.first_step)
    opened = global_top_k.GATE in change_sql and (
        step.first_step or ctx.bindings.relation(global_top_k.GATE) != "false"
    )
    if opened and not step.first_step:
        step.result.notes.append(global_top_k.READ_AGAIN)
    if top_k is not None:
        define_new_top(ctx, plan, top_k, opened)
    change = inline(ctx.bindings.bind(change_sql))
    reads = ctx.bindings.reads(change_sql)
    if top_k is not None and keep_buffer:
        buffer_sql = top_k.buffer_sql
        if later and plan.later_change_sql:
            buffer_sql = top_k.later_buffer_sql or buffer_sql
        with ctx.role(with_reads("global top-k: the rows below its cut, for the record", reads)):
            rows = ctx.session.query(ctx.bindings.bind(buffer_sql))
        buffer = global_top_k.buffer_record(top_k.buffer_rows, plan.output_columns, rows)
        step.record.top_k_buffer = buffer
    if monotonic and step.inserts_only:
        return ModelChange(change, appends=True, reads=reads)
    return model_net(
        ctx,
        step,
        sql.consolidate(change, plan.output_columns),
        with_reads("net change of the model", reads),
    )


def model_net(ctx: StepContext, step: StepState, select: str, role: str) -> ModelChange:
    """The model's netted change, materialized, and measured for the commit as it is computed
    (`StepState.change_measures`)."""
    net, _ = ctx.views.measure("net", select, step.change_measures, CHANGE_ALIAS, role)
    return ModelChange(net)


def with_reads(role: str, reads: str) -> str:
    """A statement's role, and what the inline relations written into it read."""
    return f"{role}, from {reads}" if reads else role


def define_buffer(ctx: StepContext, step: StepState, plan: StepPlan, keep: bool) -> None:
    """Binds a global top-K's rows below its cut as the last step's record kept them, and
    whether they and the model were all of the query's rows: none, and not, on a first step,
    without such rows in the record, or where the step keeps none (`keep`)."""
    rows, complete = global_top_k.buffer_kept(step.previous.top_k_buffer, plan.output_columns)
    if step.first_step or not keep:
        rows, complete = [], False
    ctx.bindings.define(
        global_top_k.BUFFER,
        "topk_buffer",
        global_top_k.buffer_relation(plan.output_columns, rows),
        role=f"the {len(rows)} row(s) below the cut the last step kept",
    )
    ctx.bindings.set(global_top_k.COMPLETE, "true" if complete else "false")


def define_new_top(ctx: StepContext, plan: StepPlan, top_k: GlobalTopKPlan, opened: bool) -> None:
    """Binds a global top-K's first rows of the query over the new inputs: computed once, for
    the change and the rows below the cut, where the gate opened; elsewhere nothing (the
    statements that read it take no row from it then, and Spark plans no read of the query)."""
    if opened:
        ctx.bindings.define(
            global_top_k.NEW_TOP,
            "topk_new",
            ctx.bindings.bind(top_k.new_top_sql),  # the inputs it reads, as the step binds them
            MATERIALIZED,
            role="the query's first rows over its new inputs",
        )
    else:
        ctx.bindings.define(
            global_top_k.NEW_TOP, "topk_new", global_top_k.buffer_relation(plan.output_columns, [])
        )


def define_target(ctx: StepContext) -> None:
    """Binds `__streamsql_target__`: the model's table as of the step's start."""
    version = ctx.target_version
    if version is None:
        version = ctx.latest_version(ctx.model.target_name)
    ctx.bindings.define(
        TARGET,
        "target",
        sql.input_as_of(ctx.model.target, version),
        role=f"the model's table as of version {version}",
    )


def recompute_change(
    ctx: StepContext,
    step: StepState,
    plan: StepPlan,
    written: Optional[Sequence[Column]] = None,
) -> ModelChange:
    """The query over the new inputs (+1) and the model's table before the step (-1), netted.

    `written`: the columns the step writes, when the table is only the query minus what
    LATENESS set aside and WATERMARK holds (event_time/rules.py `held_back_rows`): those are
    taken out of the change too, so that a recompute neither holds nor quarantines them again.
    None: `plan` accounts for them already (a recovery's, lost_history.recovery_sql)."""
    define_target(ctx)
    change_sql = ctx.bindings.bind(plan.change_sql or "")
    if written is not None:
        held = held_back_rows(ctx, plan.output_columns, written, step.previous.step)
        if any(held):
            cols = sql.column_list(plan.output_columns)
            parts = [f"SELECT {cols}, {WEIGHT} FROM ({change_sql})"] + [h for h in held if h]
            change_sql = "\nUNION ALL\n".join(parts)
    change = inline(change_sql)
    return model_net(
        ctx,
        step,
        sql.consolidate(change, plan.output_columns),
        with_reads(
            "net change of the model: its query recomputed, minus its table",
            ctx.bindings.reads(plan.change_sql or ""),
        ),
    )


def whole_change(ctx: StepContext, plan: StepPlan) -> ModelChange:
    """The model's rows after the step, written as its whole table (plan_choice.writes_whole):
    the query over the new inputs, not netted against the table."""
    rows = plan.rows_sql or ""
    return ModelChange(
        inline(ctx.bindings.bind(rows)),
        reads=ctx.bindings.reads(rows),
        whole=True,
    )


def state_read(
    step: StepState,
    state: str,
    lateness: Sequence[LatenessRule],
    dropped: Mapping[str, str],
    group_outputs: Optional[Sequence[Tuple[str, str]]] = None,
) -> StateRead:
    """How `step` reads an aggregate's state, `state` being its whole state before the step
    (state_before), `dropped` where compaction dropped final groups' state."""
    previous = step.previous
    return StateRead(
        state,
        step.first_step,
        step.inserts_only,
        lateness,
        previous.waterline,
        state_empty=previous.step == 0,
        dropped_below=dropped,
        group_outputs=group_outputs,
    )


def aggregate_change(
    ctx: StepContext, step: StepState, plan: StepPlan, lateness: Sequence[LatenessRule]
) -> Tuple[ModelChange, StateWrite]:
    """The top aggregate's change to the model, and the write of its state."""
    aggregate, previous = plan.aggregate, step.previous
    assert aggregate is not None
    dropped = step.record.state_dropped_below
    check_lines(dropped, lateness, aggregate.group_outputs)
    state = state_before(ctx.model.state_table, previous.step, aggregate)
    groups = changed_groups(ctx, "", aggregate, state_read(step, state, lateness, dropped))
    # The table starts empty, even where the query's old output is not (a global aggregate
    # has one row over no input): on the first step there is nothing to delete.
    net = output_change(
        ctx,
        "",
        aggregate,
        groups,
        plan.output_columns,
        nothing_before=previous.step == 0,
        measures=step.change_measures,
    )
    return (
        ModelChange(net),
        StateWrite(
            ctx.model.state_table, "__streamsql_state", aggregate, groups, fresh=previous.step == 0
        ),
    )


def final_groups_change(
    ctx: StepContext,
    step: StepState,
    aggregate: AggregatePlan,
    state: StateWrite,
    final: Sequence[emit.FinalColumn],
    columns: Sequence[Column],
) -> ModelChange:
    """emit_final: the groups this step makes final, inserted with their values after the
    step (emit_final.py); the change computed before only decided lateness and waterlines."""
    previous, record = step.previous, step.record
    condition = emit.newly_final(final, record.waterline, previous.waterline)
    if condition is None:  # no waterline yet: nothing is final
        return ModelChange(inline(sql.typed_nothing(list(columns) + [Column(WEIGHT, "bigint")])))
    groups = group_columns(aggregate)
    before = state_before(ctx.model.state_table, previous.step, aggregate)
    # Views, as stage_change has them: Spark's optimizer fails on some queries reading the
    # union of a state written inline.
    chosen = ctx.views.view(
        "final_before", f"SELECT * FROM ({before}) AS {GROUP_ALIAS} WHERE {condition}"
    )
    new = ctx.views.view(
        "final_new", f"SELECT * FROM {state.groups.new} AS {GROUP_ALIAS} WHERE {condition}"
    )
    after = ctx.views.view("final_after", sql.state_after(chosen, new, groups))
    rows = emit.rows_of_groups(aggregate, after, columns)
    return ModelChange(ctx.views.materialize("final", sql.consolidate(inline(rows), columns)))
