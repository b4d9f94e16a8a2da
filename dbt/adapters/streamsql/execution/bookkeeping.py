"""Phase 2 of a step: where the model stands, and its tables.

The model's Delta history holds its step records (`progress.StepRecord`, one per completed step,
in the commit's userMetadata). `prepare_target` reads the last one, checks that the table was
built by this query, creates side tables a config asks for, and undoes what an interrupted
attempt left in state tables; on a first or full-refresh run it (re)creates every table instead.
Every side-table commit carries the record of the step that made it (`with_record`), which is how
`interrupted` tells an unfinished attempt's writes from a completed step's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, List, Mapping, Optional, Sequence, Tuple

from dbt.adapters.streamsql.execution import lateness as late
from dbt.adapters.streamsql.execution import statements as sql
from dbt.adapters.streamsql.execution import watermark as wm
from dbt.adapters.streamsql.execution.context import StepContext, StepError
from dbt.adapters.streamsql.execution.delta_log import Commit
from dbt.adapters.streamsql.execution.inputs import InputState, describe_query, describe_views
from dbt.adapters.streamsql.execution.progress import CREATING_OPERATIONS, StepRecord, last_record
from dbt.adapters.streamsql.planning.plan import AggregatePlan, Column, StepPlan

if TYPE_CHECKING:
    from dbt.adapters.streamsql.execution.event_time import EventTimeRules

USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
HISTORY_PAGE = 50  # commits of the model's history read to find its last step record
STATE_LAYOUT = "log"  # how state tables keep their rows (progress.StepRecord.state_layout)


def last_step(ctx: StepContext) -> Optional[StepRecord]:
    """The model's last step record; None on a first or full-refresh run.

    Raises:
        StepError: the model's table exists but was not built by incremental_view.
    """
    model = ctx.model
    ctx.target_version = None
    if model.full_refresh or not target_exists(ctx):
        return None
    previous = read_last_record(ctx)
    if previous is None:
        raise StepError(
            f"Model {model.name}: the table {model.target_name} exists but was not built "
            "by incremental_view (no step record in its Delta history). Run `dbt run "
            f"--full-refresh --select {model.name}` to rebuild it as an incremental view."
        )
    return previous


def prepare_target(ctx: StepContext, plan: StepPlan, inputs: Sequence[InputState],
                   output_columns: Sequence[Column], fingerprint: str,
                   rules: "EventTimeRules", last: Optional[StepRecord]) -> StepRecord:
    """The record the step continues from; (re)creates the model's tables when `last` is None
    (a first or full-refresh run, see `last_step`)."""
    model = ctx.model
    if last is not None:
        if last.sql_fingerprint != fingerprint:
            raise StepError(
                f"Model {model.name}: its SQL changed since step {last.step}, so its "
                "table no longer matches its query. Run `dbt run --full-refresh --select "
                f"{model.name}` to rebuild it from its inputs."
            )
        require_state_tables(ctx, plan, last)
        # LATENESS or WATERMARK may have been added to the config since the last step.
        create_event_time_tables(ctx, output_columns, rules, replace=False)
        undo_interrupted_state(ctx, plan, last)
        return last
    # Step 0: empty tables; the first step then reads every input in full.
    create_event_time_tables(ctx, output_columns, rules, replace=True)
    record = StepRecord(step=0, run_id=ctx.run_id, sql_fingerprint=fingerprint,
                        incarnation=ctx.run_id, state_layout=STATE_LAYOUT)
    views = describe_views(inputs, plan.stages)
    for stage in plan.stages:
        record.stage_versions[stage.name] = create_state_table(
            ctx, model.stage_table(stage.name), stage.aggregate, views)
    if plan.aggregate is not None:
        record.state_version = create_state_table(ctx, model.state_table, plan.aggregate, views)
    with_record(ctx, record, lambda: ctx.session.run(sql.create_table(
        model.target, output_columns, model.tblproperties, model.partition_by,
        model.cluster_by, model.location)), idempotent=False)
    return record


def read_last_record(ctx: StepContext) -> Optional[StepRecord]:
    """The model's last step record, reading only as much history as needed.

    Also notes the model table's current version in `ctx.target_version`.
    """
    record, commits = newest_record(ctx, ctx.model.target_name)
    ctx.target_version = commits[0].version if commits else None
    return record


def newest_record(ctx: StepContext, table: str) -> Tuple[Optional[StepRecord], List[Commit]]:
    """The newest step record in a table's history, and the commits read, newest first.

    Usually the newest commit holds it; after commits by others (OPTIMIZE, a user's ALTER)
    older ones are read, a page at a time.
    """
    commits: List[Commit] = []
    for limit in (1, HISTORY_PAGE, None):
        if limit is None:
            limit = commits[0].version + 1 if commits else 1
        commits = ctx.delta_log.recent_commits(table, limit)
        record = last_record(commit.as_history_row() for commit in commits)
        if record is not None or len(commits) < limit:
            return record, commits
    return None, commits


def target_exists(ctx: StepContext) -> bool:
    """Asked of the catalog: a failing DESCRIBE would log a stack trace on the console."""
    return ctx.delta_log.exists(ctx.model.target_name)


def create_event_time_tables(ctx: StepContext, output_columns: Sequence[Column],
                             rules: "EventTimeRules", replace: bool) -> None:
    """`__late` and `__waterline` for LATENESS, `__pending` for WATERMARK."""
    model = ctx.model
    tables = []
    if rules.lateness:
        tables += [
            (model.late_table, list(output_columns) + list(late.QUARANTINE_COLUMNS)),
            (model.waterline_table, list(late.WATERLINE_COLUMNS)),
        ]
    if rules.watermark:
        tables.append((model.pending_table, list(output_columns) + list(wm.PENDING_COLUMNS)))
    for table, columns in tables:
        statement = sql.create_table(table, columns)
        if not replace:
            statement = statement.replace("CREATE OR REPLACE TABLE",
                                          "CREATE TABLE IF NOT EXISTS", 1)
        ctx.session.run(statement)


def create_state_table(ctx: StepContext, table: str, aggregate: AggregatePlan,
                       describe_views: Mapping[str, str]) -> int:
    """An empty state table for `aggregate`; returns its version."""
    declared = list(aggregate.state_columns)
    if not all(c.data_type for c in declared):  # types the planner could not infer
        unbounded = {bound.name: "true" for bound in aggregate.bounds}
        described = {c.name: c.data_type for c in describe_query(ctx.session, sql.bind_placeholders(
            aggregate.delta_sql, {**describe_views, **unbounded}))}
        declared = [Column(c.name, c.data_type or described[c.name]) for c in declared]
    # Internal: nobody reads its change feed, so its writes need not write one.
    ctx.session.run(sql.create_table(table, declared + [Column(sql.STEP, "bigint")],
                                     {"delta.enableChangeDataFeed": "false"}))
    return ctx.latest_version(table)


def state_tables(ctx: StepContext, plan: StepPlan,
                 record: StepRecord) -> List[Tuple[str, Optional[int]]]:
    """(state table, its version in `record`) for the plan's stages and top aggregate."""
    tables = [(ctx.model.stage_table(stage.name), record.stage_versions.get(stage.name))
              for stage in plan.stages]
    if plan.aggregate is not None:
        tables.append((ctx.model.state_table, record.state_version))
    return tables


def require_state_tables(ctx: StepContext, plan: StepPlan, previous: StepRecord) -> None:
    """A table built when the model was planned another way lacks this plan's state tables."""
    tables = state_tables(ctx, plan, previous)
    if tables and previous.state_layout != STATE_LAYOUT:
        raise StepError(
            f"Model {ctx.model.name} keeps per-group state in tables built by an earlier "
            f"dbt-streamsql, which kept that state another way. Run `dbt run --full-refresh "
            f"--select {ctx.model.name}` once to rebuild them."
        )
    if any(version is None for _, version in tables):
        raise StepError(
            f"Model {ctx.model.name} is now maintained by a {plan.strategy} plan "
            f"({plan.reason}) that keeps per-group state its table was not built with (it "
            f"was last stepped by another plan, e.g. under an earlier dbt-streamsql). Run "
            f"`dbt run --full-refresh --select {ctx.model.name}` once to rebuild it."
        )


def undo_interrupted_state(ctx: StepContext, plan: StepPlan, previous: StepRecord) -> None:
    """Restore each state table to the version the last completed step recorded."""
    for table, version in state_tables(ctx, plan, previous):
        current = ctx.latest_version(table)
        if current != version:
            ctx.log(f"{ctx.model.name}: undoing an interrupted step in {table} "
                    f"(version {current} -> {version})")
            ctx.session.run(sql.restore(table, version))


def interrupted(ctx: StepContext, table: str, previous: StepRecord) -> bool:
    """Whether an attempt after the last completed step wrote to a side table.

    Side-table commits carry the step record of the attempt that made them, so the table's
    last commit tells; one that carries none (the table's creation aside) is treated as such
    an attempt, and undoing it is harmless when it is not.
    """
    commit = ctx.delta_log.recent_commits(table, 1)[0]
    written_by = StepRecord.from_json(commit.user_metadata)
    if written_by is not None:
        return written_by.step > previous.step
    return commit.operation.upper() not in CREATING_OPERATIONS


def with_record(ctx: StepContext, record: StepRecord, write: Callable[[], Any],
                idempotent: bool) -> None:
    """Run writing statements whose Delta commits carry the step record.

    `idempotent`: also Delta's txnAppId/txnVersion, so that a second commit of the same step
    (a re-run after a crash, another process) is skipped by Delta itself.
    """
    settings = [(USER_METADATA, record.to_json())]
    if idempotent:
        settings += [(TXN_APP_ID, f"streamsql:{ctx.model.target_name}:{record.incarnation}"),
                     (TXN_VERSION, str(record.step))]
    with_settings(ctx, settings, write)


def with_settings(ctx: StepContext, settings: Sequence[Tuple[str, str]],
                  run: Callable[[], Any]) -> None:
    """Run with session settings that are reset afterwards, whatever happens."""
    for key, value in settings:
        ctx.session.run(sql.set_conf(key, value))
    try:
        run()
    finally:
        for key, _ in settings:
            ctx.session.run(sql.reset_conf(key))
