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
from dbt.adapters.streamsql.execution.commit import ModelChange, StepWrites, commit_step, merge_key
from dbt.adapters.streamsql.execution.context import (
    FAULT_INJECTION_ENV,
    InjectedFault,
    ModelSettings,
    StepContext,
    StepError,
    StepResult,
)
from dbt.adapters.streamsql.execution.delta_log import TableMissing
from dbt.adapters.streamsql.execution.event_time import apply_event_time, event_time_rules
from dbt.adapters.streamsql.execution.progress import sql_fingerprint
from dbt.adapters.streamsql.execution.sql_session import SqlSession
from dbt.adapters.streamsql.execution.statements import column_list
from dbt.adapters.streamsql.execution.views import inline
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
    # 1. inputs, and where the model stands: a run whose inputs did not change stops here
    read = inputs.describe_inputs(ctx, compiled_sql)
    fingerprint = sql_fingerprint(compiled_sql)
    versions = {i.table.name: i.version for i in read}
    last = bookkeeping.last_step(ctx)
    if last is not None and last.unchanged(fingerprint, versions):
        return StepResult(ctx.model.name, last.step, last.plan, last.reason,
                          waterline=dict(last.waterline), skipped=True)

    # 2. the plan
    output_columns = inputs.describe_query(ctx.session, compiled_sql)
    plan = plan_step(compiled_sql, [i.table for i in read], output_columns,
                     inputs.describer(ctx.session, read))
    rules = event_time_rules(ctx, output_columns)  # fails before anything is written
    previous = bookkeeping.prepare_target(ctx, plan, read, output_columns, fingerprint, rules,
                                          last)
    if previous.step > 0 and versions == previous.input_versions:
        return StepResult(ctx.model.name, previous.step, plan.strategy, plan.reason,
                          waterline=dict(previous.waterline), skipped=True)

    ctx.checkpoint("start")
    result = StepResult(ctx.model.name, previous.step + 1, plan.strategy, plan.reason)
    ctx.first_step = all(previous.input_versions.get(i.table.name) is None for i in read)
    changes = inputs.read_changes(ctx, read, previous)
    removals = inputs.bind_inputs(ctx, changes, result, change.placeholder_reads(plan))
    ctx.inserts_only = removals == 0
    record = previous.next(ctx.run_id, versions)
    record.plan, record.reason = plan.strategy, plan.reason

    # 3. the change: stages first (each reads the inputs and the stages before it)
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

    # 4. event time, and 5. the commit
    if rules.watermark or rules.lateness:
        model_change = ModelChange(apply_event_time(
            ctx, model_change.relation, plan.output_columns, rules, previous, record, result,
            writes))
    commit_step(ctx, model_change, plan.output_columns, writes, previous, record, result,
                rules.lateness, key=merge_key(plan, rules.columns))
    return result


def flush_step(session: SqlSession, model: ModelSettings,
               log: Callable[[str], None] = lambda line: None) -> StepResult:
    """Releases every held change (`streamsql_flush`): a step that reads no input."""
    ctx = StepContext(session, model, log)
    started = time.monotonic()
    try:
        try:
            columns = list(ctx.delta_log.snapshot(model.target_name).columns)
        except TableMissing as missing:
            raise StepError(f"Model {model.name} has not run as an incremental_view yet: "
                            "nothing is held.") from missing
        rules = event_time_rules(ctx, columns)
        previous = bookkeeping.read_last_record(ctx)
        if previous is None:
            raise StepError(f"Model {model.name} has not run as an incremental_view "
                            "yet: nothing is held.")
        if not rules.watermark:
            raise StepError(f"Model {model.name} declares no watermark: nothing is held.")
        record = previous.next(ctx.run_id, dict(previous.input_versions))
        result = StepResult(model.name, record.step, "flush", "release every held change")
        nothing = inline(f"SELECT {column_list(columns)}, CAST(0 AS BIGINT) AS {WEIGHT} "
                         f"FROM {model.target} WHERE false")
        writes = StepWrites()
        released = apply_event_time(ctx, nothing, columns, rules, previous, record, result,
                                    writes, release_all=True)
        commit_step(ctx, ModelChange(released), columns, writes, previous, record, result,
                    rules.lateness)
    finally:
        ctx.views.drop_all()
    result.seconds = time.monotonic() - started
    return result
