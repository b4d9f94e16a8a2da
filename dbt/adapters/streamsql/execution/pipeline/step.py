"""One step of an incremental view, phase by phase: what `dbt run` does for one model.

The materialization (macros/materializations/incremental_view.sql) calls
`StreamSQLAdapter.streamsql_step`, which calls `run_step`:

1. inputs      (inputs.py)           the tables the model reads and the versions this step
                                     reads; where the model stands (commit/history.py): its
                                     last step record. A step a crash left unfinished is
                                     finished first; a run whose inputs did not change stops.
2. plan        (plan_choice.py)      the model's plan (planning/), rules and merge key; the
                                     configs and the schema change are checked. On a first run
                                     the model's tables are created (commit/tables.py); state
                                     tables due for it are compacted.
3. change      (change.py)           the inputs' changes read, a recovery decided and a schema
                                     change applied to the tables (recovery/), then stages,
                                     then the linear, aggregate or recompute change;
4. event time  (event_time/)         WATERMARK, then LATENESS, on that change; with emit_final
                                     the model's change is then the groups that became final;
5. commit      (commit/protocol.py)  every write of the step's result, in the order that makes
                                     the step exactly-once.

Phases 3 and 4 compute into views pinned to versions and write nothing; the writes before phase
5 are the ones a step needs before it can read (creating tables, altering them for a schema
change, compacting state) and are safe to repeat. A `StepState` (step_state.py) carries what
the step learns from phase to phase. `flush_step` (the `streamsql_flush` operation) is a step
with no input change that releases everything WATERMARK holds; `streamsql_readmit`'s step
(execution/readmit.py) is another, finished here when a crash interrupted it.
"""

from __future__ import annotations

import re
import time
from typing import Callable, Optional, Sequence, Tuple

from dbt.adapters.streamsql.execution.commit import bounds, cleanup, history, small_files, tables
from dbt.adapters.streamsql.execution.commit.protocol import commit_step, write_side_tables
from dbt.adapters.streamsql.execution.commit.record import StepRecord
from dbt.adapters.streamsql.execution.context import StepContext
from dbt.adapters.streamsql.execution.engine.delta_log import TableMissing
from dbt.adapters.streamsql.execution.engine.side_tables import SideTableSql, default_side_table_sql
from dbt.adapters.streamsql.execution.engine.sql_session import SqlSession
from dbt.adapters.streamsql.execution.engine.statements import column_list
from dbt.adapters.streamsql.execution.engine.views import inline
from dbt.adapters.streamsql.execution.event_time import emit_final
from dbt.adapters.streamsql.execution.event_time.rules import (
    EventTimeRules,
    apply_event_time,
    event_time_rules,
)
from dbt.adapters.streamsql.execution.pipeline import (
    change,
    input_views,
    inputs,
    keys,
    plan_choice,
    small_step,
)
from dbt.adapters.streamsql.execution.recovery import faults, schema
from dbt.adapters.streamsql.execution.recovery import lost_history as recovery
from dbt.adapters.streamsql.execution.shared.errors import (
    FAULT_INJECTION_ENV,
    DroppedStateReached,
    InjectedFault,
    StepError,
)
from dbt.adapters.streamsql.execution.shared.input_state import InputState
from dbt.adapters.streamsql.execution.shared.model import ModelSettings
from dbt.adapters.streamsql.execution.shared.result import StepResult
from dbt.adapters.streamsql.execution.shared.writes import ModelChange, ReadmitWrite
from dbt.adapters.streamsql.execution.step_state import StepState
from dbt.adapters.streamsql.planning.errors import PlanningError
from dbt.adapters.streamsql.planning.plan import WEIGHT, Column

# How Delta says that another transaction's commit conflicts with this run's write (Delta's
# transaction conflicts, SQLSTATE 2D521: DELTA_CONCURRENT_*, DELTA_METADATA_CHANGED and
# DELTA_PROTOCOL_CHANGED, by error class or exception name); the rest: another run's first step
# created the same table a moment before this one's (the step creates its tables with OR REPLACE
# or IF NOT EXISTS, so nothing else makes them). Two first steps' CREATE OR REPLACE of one table
# end in DELTA_PROTOCOL_CHANGED ("multiple writers are writing to an empty directory") in Delta,
# or in an AlreadyExistsException from the Hive metastore when both pass Spark's own check.
CONCURRENT_WRITE_MARKERS = (
    "ConcurrentAppendException",
    "ConcurrentDeleteReadException",
    "ConcurrentDeleteDeleteException",
    "ConcurrentTransactionException",
    "ConcurrentWriteException",
    "MetadataChangedException",
    "ProtocolChangedException",
    "DeltaConcurrentModificationException",
    "DELTA_CONCURRENT_",
    "DELTA_METADATA_CHANGED",
    "DELTA_PROTOCOL_CHANGED",
    "DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION",
    "TABLE_OR_VIEW_ALREADY_EXISTS",
    "AlreadyExistsException(message:Table",
)
# What comes before Delta's own words on the line that carries them: the Thrift Server's wrapper.
SERVER_PREFIXES = ("org.apache.hive.service.cli.HiveSQLException:", "Error running query:")
REPEATED_ERROR_CLASS = re.compile(r"^(\[[A-Z_.]+\]) [\w.$]+: (?=\1)")


def concurrent_write(error: BaseException) -> Optional[str]:
    """The line of `error` in which Delta (or the metastore) refused a write because another
    run wrote the same table at the same time, without the server's wrapper; None when it is
    not such an error.

    The line, not the first one: dbt's errors begin with their title (`Runtime Error`,
    `Database Error`), a Thrift Server's with `HiveSQLException`."""
    for line in str(error).splitlines():
        if any(marker in line for marker in CONCURRENT_WRITE_MARKERS):
            line = line.strip()
            for prefix in SERVER_PREFIXES:
                if line.startswith(prefix):
                    line = line[len(prefix) :].strip()
            # `[CLASS] io.delta.exceptions.X: [CLASS] X: ...`: Delta's words once
            return REPEATED_ERROR_CLASS.sub("", line)
    return None


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
    # resets of settings go with the step's next call (sql_session.LaterResets)
    with session.resets_later():
        try:
            result = _step(ctx, compiled_sql)
        except PlanningError as error:
            raise StepError(f"Model {model.name}: {error}") from error
        except Exception as error:
            # read it all again, once: a history gone, or state dropped that the change needs
            if faults.lost_history(error) or isinstance(error, DroppedStateReached):

                def take_step(again: StepContext, why: str) -> StepResult:
                    try:
                        return _step(again, compiled_sql, why)
                    finally:
                        small_step.leave(again)

                return recovery.take_again(ctx, error, take_step, started)
            refused = concurrent_write(error)
            if refused is not None:
                raise StepError(
                    f"Model {model.name}: another run wrote to its tables at the same time (Delta "
                    f"refused this run's write: {refused[:200]}). Whatever "
                    "committed is consistent: run again to continue, and do not schedule two runs "
                    "of one model at once."
                ) from error
            raise
        finally:
            small_step.leave(ctx)  # (its resets go with the views freed)
            ctx.views.drop_all()
    result.seconds = time.monotonic() - started
    return result


def _step(ctx: StepContext, compiled_sql: str, recover_reason: Optional[str] = None) -> StepResult:
    # 1. inputs, and where the model stands: a step a crash left unfinished is finished first;
    # a run whose inputs did not change since the last step stops here
    # (an input that is a view: the query is planned with the view's query in its place)
    compiled_sql, read = input_views.describe_inputs(ctx, compiled_sql)
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
    if last is not None and inputs.nothing_to_do(last, compiled_sql, read):
        return StepResult(
            ctx.model.name,
            last.step,
            last.plan,
            last.reason,
            waterline=dict(last.waterline),
            skipped=True,
        )

    small_step.enter(ctx, read)  # small tables: Spark's planning for large data off

    # 2. the plan (a config it cannot obey fails here, before anything is written, as do a
    # refused emit_final and a refused schema change); on a first run, the model's tables
    decided = plan_choice.model_plan(
        ctx, compiled_sql, read, last.meaning_checked if last is not None else ""
    )
    plan, rules = decided.plan, decided.rules
    emit_final.final_columns(ctx.model, plan, rules.lateness, rules.watermark)
    compared = schema.check(ctx, last, decided.output_columns, read)
    previous = tables.prepare_target(
        ctx, plan, read, decided.output_columns, compiled_sql, rules, last
    )
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
    step = StepState(
        compiled_sql,
        previous,
        record=previous.next(ctx.run_id, versions),
        result=StepResult(ctx.model.name, previous.step + 1, name, plan.reason),
        schema=compared,
        recover_reason=recover_reason,
    )
    step.record.plan, step.record.reason = name, plan.reason
    step.record.meaning_checked = decided.meaning_checked
    if ctx.views_read:
        step.result.notes.append(
            f"read the views {', '.join(ctx.views_read)} through their queries"
        )
    step.record.fingerprint(compiled_sql)  # a record of an earlier version's: upgraded
    step.record.emit_final = ctx.model.emit_final  # a change since the last step was refused
    tables.compact_state_tables(ctx, plan, step, rules.lateness)
    cleanup.clean_side_tables(ctx, rules, step)
    small_files.tidy_files(ctx, rules, step)

    # 3. the change, and 4. event time
    columns = schema.written_columns(ctx, step.schema, previous, plan.output_columns)
    key = decided.key
    model_change = compute_step(ctx, step, decided, read, (columns, key))

    # 5. the commit
    keys.check_unique(ctx, model_change, columns, decided.unique and key, step.record.step)
    commit_step(ctx, step, model_change, columns, rules.lateness, key=key)
    return step.result


def compute_step(
    ctx: StepContext,
    step: StepState,
    decided: plan_choice.ModelPlan,
    read: Sequence[InputState],
    committed_as: Optional[Tuple[Sequence[Column], Optional[Sequence[str]]]] = None,
) -> ModelChange:
    """Phases 3 and 4: the model's change from the inputs' changes since the step's previous
    one; what the step writes besides goes into `step.writes`. Nothing is written (every read
    is pinned to a version: commit/protocol.py) but a schema change to the model's tables.
    `committed_as`: the columns and key the commit writes the change with, so that the pass
    computing the change also measures what the commit needs of it
    (`StepState.change_measures`)."""
    previous, rules = step.previous, decided.rules
    step.first_step = inputs.first_read(previous, read)
    if committed_as is not None:
        step.change_measures = bounds.change_measures(*committed_as, step.first_step)
    final = emit_final.final_columns(ctx.model, decided.plan, rules.lateness, rules.watermark)
    changes = inputs.read_changes(ctx, read, previous)
    # the plan this step runs: the model's, or a recompute (a recovery, `auto`)
    choice = plan_choice.decide(ctx, decided, step, changes)
    adjusted = recovery.prepare(ctx, step, choice, changes)
    plan, changes = adjusted.plan, adjusted.changes
    if step.first_step or plan.kind == "recompute":
        small_step.reads_in_full(ctx, choice.input_bytes)
    step.result.computed = step.record.computed = plan.kind
    step.record.costs, step.record.input_bytes = choice.costs, choice.input_bytes
    if choice.recovered:
        step.record.state_behind_since = None  # the recovery rebuilds them
    elif choice.because and decided.plan.keeps_state and step.record.state_behind_since is None:
        step.record.state_behind_since = step.record.step  # this step writes no state
    removals = inputs.bind_inputs(ctx, changes, step.result, change.placeholder_reads(plan))
    step.inserts_only = removals == 0

    # stages first (each reads the inputs and the stages before it)
    for stage in plan.stages:
        removals, state_write = change.stage_change(ctx, step, plan, stage, rules.lateness)
        step.inserts_only = step.inserts_only and removals == 0
        step.writes.state.append(state_write)
    if plan.kind == "aggregate":
        model_change, state_write = change.aggregate_change(ctx, step, plan, rules.lateness)
        step.writes.state.append(state_write)
    elif plan.kind == "linear":
        keep_buffer = not (rules.lateness or rules.watermark)
        model_change = change.linear_change(ctx, step, plan, keep_buffer)
    elif choice.whole:
        model_change = change.whole_change(ctx, plan)
    else:
        # a recovery's plan takes out what LATENESS and WATERMARK set aside already
        written = adjusted.columns if adjusted.original is None else None
        model_change = change.recompute_change(ctx, step, plan, written)

    model_change = recovery.finish(ctx, step, adjusted, model_change)
    if rules.watermark or rules.lateness:
        model_change = ModelChange(
            apply_event_time(ctx, step, model_change.relation, adjusted.columns, rules)
        )
    if final:  # emit_final: the change judged above decided lateness and waterlines only
        aggregate = (adjusted.original or plan).aggregate
        state = next(w for w in step.writes.state if w.suffix == "__streamsql_state")
        assert aggregate is not None
        model_change = change.final_groups_change(
            ctx, step, aggregate, state, final, adjusted.columns
        )
    return model_change


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
    those that landed before: commit/protocol.py)."""
    ctx = StepContext(session, model, log, side_sql=side_sql)
    try:
        ctx.log(
            f"{model.name}: finishing step {last.step}, which a crash interrupted after its "
            f"commit: {', '.join(unfinished)} without it yet"
        )
        previous, committed_at = history.record_before(ctx, last)
        ctx.target_version = committed_at - 1
        step = StepState(
            compiled_sql,
            previous,
            record=previous.next(ctx.run_id, dict(last.input_versions)),
            result=StepResult(model.name, last.step, "", ""),
            # computed again as it was: a recompute if it was one, over the state as it was
            recover_reason="; ".join(last.recovered) or None,
        )
        step.record.state_dropped_below = dict(last.state_dropped_below)
        if last.flush:
            columns = list(ctx.delta_log.snapshot(model.target_name).columns)
            flush_change(ctx, step, columns, event_time_rules(ctx, columns))
        elif last.readmit is not None:  # its one side write: the rows it took, marked
            step.writes.readmit = ReadmitWrite(str(last.readmit["condition"]))
        else:
            read = [
                inputs.pinned(item, last.input_versions)
                for item in inputs.describe_inputs(ctx, compiled_sql)
            ]
            decided = plan_choice.model_plan(ctx, compiled_sql, read, last.meaning_checked)
            compute_step(ctx, step, decided, read)
        write_side_tables(ctx, step.writes, previous, last)
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
    with session.resets_later():
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
            tables.add_waterline_behind(ctx, rules, previous)  # a table of an earlier version
            record = previous.next(ctx.run_id, dict(previous.input_versions))
            record.flush = True
            step = StepState(
                "",
                previous,
                record,
                StepResult(
                    model.name, record.step, "flush", "release every held change", computed="flush"
                ),
            )
            released = flush_change(ctx, step, columns, rules)
            commit_step(ctx, step, ModelChange(released), columns, rules.lateness)
        finally:
            ctx.views.drop_all()
    step.result.seconds = time.monotonic() - started
    return step.result


def flush_change(
    ctx: StepContext, step: StepState, columns: Sequence[Column], rules: EventTimeRules
) -> str:
    """A flush's change: everything WATERMARK holds, released (and judged by LATENESS)."""
    nothing = inline(
        f"SELECT {column_list(columns)}, CAST(0 AS BIGINT) AS {WEIGHT} "
        f"FROM {ctx.model.target} WHERE false"
    )
    return apply_event_time(ctx, step, nothing, columns, rules, release_all=True)
