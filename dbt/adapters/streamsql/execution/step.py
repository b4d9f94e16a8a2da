"""One step of an incremental view, phase by phase: what `dbt run` does for one model.

The materialization (macros/materializations/incremental_view.sql) calls
`StreamSQLAdapter.streamsql_step`, which calls `run_step`:

1. inputs      (inputs.py)      the tables the model reads and the versions this step reads;
2. plan        (planning/)      `plan_step`: how the model's change is computed from theirs;
   bookkeeping (bookkeeping.py) where the model stands: its last step record; on a first run,
                                its tables; after a crash, the interrupted attempt undone;
3. change      (change.py)      stages first, then the linear, aggregate or recompute change;
4. event time  (event_time.py)  WATERMARK, then LATENESS, on that change;
5. commit      (commit.py)      every write, in the order that makes the step exactly-once.

Phases 1-4 only read and compute (into views pinned to versions); phase 5 writes. `flush_step`
(the `streamsql_flush` operation) is a step with no input change that releases everything
WATERMARK holds.
"""

from __future__ import annotations

import time
from typing import Callable

from dbt.adapters.streamsql.execution import bookkeeping, change, inputs
from dbt.adapters.streamsql.execution.commit import StepWrites, commit_step, merge_key
from dbt.adapters.streamsql.execution.context import (
    FAULT_INJECTION_ENV,
    InjectedFault,
    ModelSettings,
    StepContext,
    StepError,
    StepResult,
)
from dbt.adapters.streamsql.execution.event_time import apply_event_time, event_time_rules
from dbt.adapters.streamsql.execution.progress import sql_fingerprint
from dbt.adapters.streamsql.execution.sql_session import SqlSession
from dbt.adapters.streamsql.execution.statements import column_list
from dbt.adapters.streamsql.planning.errors import PlanningError
from dbt.adapters.streamsql.planning.plan import WEIGHT
from dbt.adapters.streamsql.planning.planner import plan_step

__all__ = ["run_step", "flush_step", "ModelSettings", "StepError", "StepResult",
           "FAULT_INJECTION_ENV", "InjectedFault"]


def run_step(session: SqlSession, model: ModelSettings, compiled_sql: str,
             log: Callable[[str], None] = lambda line: None) -> StepResult:
    """Runs one step of `model`, whose query is `compiled_sql`; what it did."""
    ctx = StepContext(session, model, log)
    started = time.monotonic()
    try:
        result = _step(ctx, compiled_sql)
    except PlanningError as error:
        raise StepError(f"Model {model.name}: {error}") from error
    finally:
        ctx.views.drop_all()
    result.seconds = time.monotonic() - started
    return result


def _step(ctx: StepContext, compiled_sql: str) -> StepResult:
    # 1. inputs, and 2. the plan
    read = inputs.describe_inputs(ctx, compiled_sql)
    output_columns = inputs.describe_query(ctx.session, compiled_sql)
    plan = plan_step(compiled_sql, [i.table for i in read], output_columns,
                     inputs.describer(ctx.session, read))
    rules = event_time_rules(ctx, output_columns)  # fails before anything is written
    previous = bookkeeping.prepare_target(ctx, plan, read, output_columns,
                                          sql_fingerprint(compiled_sql), rules)
    versions = {i.table.name: i.version for i in read}
    if previous.step > 0 and versions == previous.input_versions:
        return StepResult(ctx.model.name, previous.step, plan.strategy, plan.reason,
                          waterline=dict(previous.waterline), skipped=True)

    ctx.checkpoint("start")
    result = StepResult(ctx.model.name, previous.step + 1, plan.strategy, plan.reason)
    ctx.first_step = all(previous.input_versions.get(i.table.name) is None for i in read)
    # A monotonic linear query over inserts only needs no netting, and on a first step the
    # inputs' snapshots need not be copied into memory.
    copy_snapshots = not (ctx.first_step or (plan.strategy == "linear" and plan.monotonic))
    views, removals = inputs.bind_inputs(ctx, read, previous, result, copy_snapshots)
    ctx.inserts_only = removals == 0
    record = previous.next(ctx.run_id, versions)

    # 3. the change: stages first (each reads the inputs and the stages before it)
    writes = StepWrites()
    for stage in plan.stages:
        removals, state_write = change.stage_change(ctx, stage, views, previous)
        ctx.inserts_only = ctx.inserts_only and removals == 0
        writes.state.append(state_write)
    if plan.strategy == "aggregate":
        net, state_write = change.aggregate_change(ctx, plan, views, previous, rules.lateness)
        writes.state.append(state_write)
    elif plan.strategy == "linear":
        net = change.linear_change(ctx, plan, views)
    else:
        net = change.recompute_change(ctx, plan, views)

    # 4. event time, and 5. the commit
    net = apply_event_time(ctx, net, plan.output_columns, rules, previous, record, result, writes)
    commit_step(ctx, net, plan.output_columns, writes, previous, record, result, rules.lateness,
                key=merge_key(plan, rules.columns))
    return result


def flush_step(session: SqlSession, model: ModelSettings,
               log: Callable[[str], None] = lambda line: None) -> StepResult:
    """Releases every held change (`streamsql_flush`): a step that reads no input."""
    ctx = StepContext(session, model, log)
    started = time.monotonic()
    try:
        columns = inputs.describe_table(ctx.session, model.target)
        rules = event_time_rules(ctx, columns)
        previous = bookkeeping.read_last_record(ctx)
        if previous is None:
            raise StepError(f"Model {model.name} has not run as an incremental_view "
                            "yet: nothing is held.")
        if not rules.watermark:
            raise StepError(f"Model {model.name} declares no watermark: nothing is held.")
        record = previous.next(ctx.run_id, dict(previous.input_versions))
        result = StepResult(model.name, record.step, "flush", "release every held change")
        empty = ctx.views.view("nothing", f"SELECT {column_list(columns)}, CAST(0 AS BIGINT) "
                                          f"AS {WEIGHT} FROM {model.target} WHERE false")
        writes = StepWrites()
        net = apply_event_time(ctx, empty, columns, rules, previous, record, result, writes,
                               release_all=True)
        commit_step(ctx, net, columns, writes, previous, record, result, rules.lateness)
    finally:
        ctx.views.drop_all()
    result.seconds = time.monotonic() - started
    return result
