"""One step of an incremental view, phase by phase: what `dbt run` does for one model.

The materialization (macros/materializations/incremental_view.sql) calls
`StreamSQLAdapter.streamsql_step`, which calls `run_step`:

1. inputs      (inputs.py)      the tables the model reads and the versions this step reads;
   bookkeeping (bookkeeping.py) where the model stands: its last step record (a run whose
                                inputs did not change since then stops here);
2. plan        (planning/)      `plan_step`: how the model's change is computed from theirs;
   bookkeeping                  on a first run, the model's tables; after a crash, the
                                interrupted attempt undone; the inputs' changes bound;
3. change      (change.py)      stages first, then the linear, aggregate or recompute change;
4. event time  (event_time.py)  WATERMARK, then LATENESS, on that change; with emit_final
                                (emit_final.py) the model's change is then the groups that
                                became final instead;
5. commit      (commit.py)      every write, in the order that makes the step exactly-once.

Phases 1-4 only read and compute (into views pinned to versions); phase 5 writes. `flush_step`
(the `streamsql_flush` operation) is a step with no input change that releases everything
WATERMARK holds.
"""

from __future__ import annotations

import time
from typing import Callable, Optional, Sequence, Tuple

from dbt.adapters.streamsql.execution.commit import history, tables
from dbt.adapters.streamsql.execution.commit.protocol import commit_step, write_side_tables
from dbt.adapters.streamsql.execution.commit.record import StepRecord, sql_fingerprint
from dbt.adapters.streamsql.execution.commit.side_tables import SideTableSql, default_side_table_sql
from dbt.adapters.streamsql.execution.commit.writes import ModelChange, StepWrites
from dbt.adapters.streamsql.execution.context import StepContext
from dbt.adapters.streamsql.execution.engine.delta_log import TableMissing
from dbt.adapters.streamsql.execution.engine.sql_session import SqlSession
from dbt.adapters.streamsql.execution.engine.statements import column_list
from dbt.adapters.streamsql.execution.engine.views import inline
from dbt.adapters.streamsql.execution.errors import FAULT_INJECTION_ENV, InjectedFault, StepError
from dbt.adapters.streamsql.execution.event_time import emit_final
from dbt.adapters.streamsql.execution.event_time.rules import (
    EventTimeRules,
    apply_event_time,
    event_time_rules,
)
from dbt.adapters.streamsql.execution.model import ModelSettings
from dbt.adapters.streamsql.execution.pipeline import change, inputs, keys, plan_choice
from dbt.adapters.streamsql.execution.pipeline.inputs import InputState
from dbt.adapters.streamsql.execution.recovery import faults, schema
from dbt.adapters.streamsql.execution.recovery import lost_history as recovery
from dbt.adapters.streamsql.execution.result import StepResult
from dbt.adapters.streamsql.planning.errors import PlanningError
from dbt.adapters.streamsql.planning.plan import WEIGHT, Column, StepPlan

# How Delta says that another transaction's commit conflicts with this run's write; the last
# two: another run's first step created the same table a moment before this one's (the step
# creates its tables with OR REPLACE or IF NOT EXISTS, so nothing else makes them).
CONCURRENT_WRITE_MARKERS = (
    "ConcurrentAppendException",
    "ConcurrentDeleteReadException",
    "ConcurrentDeleteDeleteException",
    "ConcurrentTransactionException",
    "MetadataChangedException",
    "DELTA_CONCURRENT_",
    "DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION",
    "TABLE_OR_VIEW_ALREADY_EXISTS",
)

__all__ = [
    "run_step",
    "flush_step",
    "ModelSettings",
    "StepError",
    "StepResult",
    "FAULT_INJECTION_ENV",
    "InjectedFault",
]


def run_step(
    session: SqlSession,
    model: ModelSettings,
    compiled_sql: str,
    log: Callable[[str], None] = lambda line: None,
    side_sql: Optional[SideTableSql] = None,
) -> StepResult:
    """Runs one step of `model`, whose query is `compiled_sql`; what it did.

    `side_sql`: the side tables' statements (side_tables.py); by default the package's macros
    rendered without dbt."""
    ctx = StepContext(session, model, log, side_sql=side_sql or default_side_table_sql())
    started = time.monotonic()
    try:
        result = _step(ctx, compiled_sql)
    except PlanningError as error:
        raise StepError(f"Model {model.name}: {error}") from error
    except Exception as error:
        if faults.lost_history(error) and ctx.recover_reason is None:  # read it all again
            return recovery.take_again(
                ctx, error, lambda again: _step(again, compiled_sql), started
            )
        if any(marker in str(error) for marker in CONCURRENT_WRITE_MARKERS):
            raise StepError(
                f"Model {model.name}: another run wrote to its tables at the same time (Delta "
                f"refused this run's write: {str(error).splitlines()[0][:200]}). Whatever "
                "committed is consistent: run again to continue, and do not schedule two runs "
                "of one model at once."
            ) from error
        raise
    finally:
        ctx.views.drop_all()
    result.seconds = time.monotonic() - started
    return result


def _step(ctx: StepContext, compiled_sql: str) -> StepResult:
    # 1. inputs, and where the model stands: a step a crash left unfinished is finished first;
    # a run whose inputs did not change since the last step stops here
    read = inputs.describe_inputs(ctx, compiled_sql)
    fingerprint = sql_fingerprint(compiled_sql)
    versions = {i.table.name: i.version for i in read}
    last = history.last_step(ctx)
    if last is not None:
        emit_final.check_unchanged(ctx.model, last.emit_final, last.step)
    if last is not None and last.step > 0:
        unfinished = history.unfinished_side_writes(ctx, last)
        if unfinished:
            finish_step(
                ctx.session, ctx.model, compiled_sql, last, unfinished, ctx.log, ctx.side_sql
            )
    if (
        last is not None
        and last.unchanged(fingerprint, versions)
        and faults.same_tables(last, read)
    ):
        return StepResult(
            ctx.model.name,
            last.step,
            last.plan,
            last.reason,
            waterline=dict(last.waterline),
            skipped=True,
        )

    # 2. the plan (which fails on a config it cannot obey before anything is written, as do a
    # refused emit_final and schema change)
    decided = plan_choice.model_plan(ctx, compiled_sql, read)
    plan, output_columns, rules, key = (
        decided.plan,
        decided.output_columns,
        decided.rules,
        decided.key,
    )
    emit_final.final_columns(ctx.model, plan, rules.lateness, rules.watermark)
    schema.check(ctx, last, output_columns, read)
    previous = tables.prepare_target(ctx, plan, read, output_columns, fingerprint, rules, last)
    if (
        previous.step > 0
        and versions == previous.input_versions
        and faults.same_tables(previous, read)
    ):
        return StepResult(
            ctx.model.name,
            previous.step,
            emit_final.plan_name(plan, ctx.model),
            plan.reason,
            waterline=dict(previous.waterline),
            skipped=True,
        )

    ctx.checkpoint("start")
    name = emit_final.plan_name(plan, ctx.model)
    result = StepResult(ctx.model.name, previous.step + 1, name, plan.reason)
    record = previous.next(ctx.run_id, versions)
    record.plan, record.reason = name, plan.reason
    record.emit_final = ctx.model.emit_final  # a change since the last step was refused above
    tables.compact_state_tables(ctx, plan, previous, record)

    # 3. the change, and 4. event time
    model_change, writes = compute_step(ctx, plan, read, rules, previous, record, result)

    # 5. the commit
    columns = schema.written_columns(ctx, previous, plan.output_columns)
    keys.check_unique(ctx, model_change, columns, decided.unique and key, record.step)
    commit_step(
        ctx, model_change, columns, writes, previous, record, result, rules.lateness, key=key
    )
    return result


def compute_step(
    ctx: StepContext,
    plan: StepPlan,
    read: Sequence[InputState],
    rules: EventTimeRules,
    previous: StepRecord,
    record: StepRecord,
    result: StepResult,
) -> Tuple[ModelChange, StepWrites]:
    """Phases 3 and 4: the model's change from the inputs' changes since `previous`, and what
    the step writes besides; nothing is written (every read is pinned: commit.py)."""
    ctx.first_step = all(previous.input_versions.get(i.table.name) is None for i in read)
    final = emit_final.final_columns(ctx.model, plan, rules.lateness, rules.watermark)
    changes = inputs.read_changes(ctx, read, previous)
    # an input that cannot be read from where the last step left it: a recompute (recovery.py)
    adjusted = recovery.prepare(ctx, plan, changes, previous, record, result)
    plan, changes = adjusted.plan, adjusted.changes
    plan = plan_choice.chosen(ctx, plan, changes, result)  # or a recompute
    removals = inputs.bind_inputs(ctx, changes, result, change.placeholder_reads(plan))
    ctx.inserts_only = removals == 0

    # stages first (each reads the inputs and the stages before it)
    writes = StepWrites()
    for stage in plan.stages:
        removals, state_write = change.stage_change(ctx, stage, previous)
        ctx.inserts_only = ctx.inserts_only and removals == 0
        writes.state.append(state_write)
    if plan.strategy == "aggregate":
        model_change, state_write = change.aggregate_change(ctx, plan, previous, rules.lateness)
        writes.state.append(state_write)
    elif plan.strategy == "linear":
        model_change = change.linear_change(ctx, plan)
    else:
        model_change = change.recompute_change(ctx, plan)

    model_change = recovery.finish(ctx, adjusted, model_change, writes, previous)
    if rules.watermark or rules.lateness:
        model_change = ModelChange(
            apply_event_time(
                ctx,
                model_change.relation,
                adjusted.columns,
                rules,
                previous,
                record,
                result,
                writes,
            )
        )
    if final:  # emit_final: the change judged above decided lateness and waterlines only
        aggregate = (adjusted.original or plan).aggregate
        state = next(w for w in writes.state if w.suffix == "__streamsql_state")
        assert aggregate is not None
        model_change = change.final_groups_change(
            ctx, aggregate, state, final, previous, record, adjusted.columns
        )
    return model_change, writes


def finish_step(
    session: SqlSession,
    model: ModelSettings,
    compiled_sql: str,
    last: StepRecord,
    unfinished: Sequence[str],
    log: Callable[[str], None],
    side_sql: SideTableSql,
) -> None:
    """Writes what a crash left unwritten of step `last` (committed to the model, with side
    tables named in its record still without it): the step computed again from the inputs'
    versions it read and the state before it, every side-table write tried again (Delta skips
    those that landed before, commit.py)."""
    ctx = StepContext(session, model, log, side_sql=side_sql)
    try:
        ctx.log(
            f"{model.name}: finishing step {last.step}, which a crash interrupted after its "
            f"commit: {', '.join(unfinished)} without it yet"
        )
        previous, committed_at = history.record_before(ctx, last)
        ctx.target_version = committed_at - 1
        working = previous.next(ctx.run_id, dict(last.input_versions))
        if last.flush:
            columns = list(ctx.delta_log.snapshot(model.target_name).columns)
            rules = event_time_rules(ctx, columns)
            _, writes = flush_change(
                ctx, columns, rules, previous, working, StepResult(model.name, last.step, "", "")
            )
        else:
            read = [
                inputs.pinned(item, last.input_versions)
                for item in inputs.describe_inputs(ctx, compiled_sql)
            ]
            decided = plan_choice.model_plan(ctx, compiled_sql, read)
            plan, rules = decided.plan, decided.rules
            _, writes = compute_step(
                ctx, plan, read, rules, previous, working, StepResult(model.name, last.step, "", "")
            )
        write_side_tables(ctx, writes, previous, last)
    finally:
        ctx.views.drop_all()


def flush_step(
    session: SqlSession,
    model: ModelSettings,
    log: Callable[[str], None] = lambda line: None,
    side_sql: Optional[SideTableSql] = None,
) -> StepResult:
    """Releases every held change (`streamsql_flush`): a step that reads no input."""
    ctx = StepContext(session, model, log, side_sql=side_sql or default_side_table_sql())
    started = time.monotonic()
    try:
        try:
            columns = list(ctx.delta_log.snapshot(model.target_name).columns)
        except TableMissing as missing:
            raise StepError(
                f"Model {model.name} has not run as an incremental_view yet: nothing is held."
            ) from missing
        rules = event_time_rules(ctx, columns)
        previous = history.read_last_record(ctx)
        if previous is None:
            raise StepError(
                f"Model {model.name} has not run as an incremental_view yet: nothing is held."
            )
        if not rules.watermark:
            raise StepError(f"Model {model.name} declares no watermark: nothing is held.")
        unfinished = history.unfinished_side_writes(ctx, previous)
        if unfinished:
            raise StepError(
                f"Model {model.name}: its step {previous.step} was interrupted; "
                "run `dbt run` for it to finish that step, then flush."
            )
        record = previous.next(ctx.run_id, dict(previous.input_versions))
        record.flush = True
        result = StepResult(model.name, record.step, "flush", "release every held change")
        released, writes = flush_change(ctx, columns, rules, previous, record, result)
        commit_step(
            ctx, ModelChange(released), columns, writes, previous, record, result, rules.lateness
        )
    finally:
        ctx.views.drop_all()
    result.seconds = time.monotonic() - started
    return result


def flush_change(
    ctx: StepContext,
    columns: Sequence[Column],
    rules: EventTimeRules,
    previous: StepRecord,
    record: StepRecord,
    result: StepResult,
) -> Tuple[str, StepWrites]:
    """A flush's change: everything WATERMARK holds, released (and judged by LATENESS)."""
    nothing = inline(
        f"SELECT {column_list(columns)}, CAST(0 AS BIGINT) AS {WEIGHT} "
        f"FROM {ctx.model.target} WHERE false"
    )
    writes = StepWrites()
    released = apply_event_time(
        ctx, nothing, columns, rules, previous, record, result, writes, release_all=True
    )
    return released, writes
