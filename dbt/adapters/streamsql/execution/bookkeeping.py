"""Where the model stands, and its tables.

The model's Delta history holds its step records (`progress.StepRecord`, one per completed step,
in the commit's userMetadata). `last_step` reads the last one; `prepare_target` checks that the
table was built by this query and creates side tables a config asks for, or, on a first or
full-refresh run, (re)creates every table. Every side-table commit of a step carries its record
too (`with_record`), which is how `unfinished_side_writes` tells which of a completed step's
side-table writes a crash left undone (commit.py). `compact_state_tables` rewrites the state
tables that have grown, before a step reads them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, List, Mapping, Optional, Sequence, Tuple

from dbt.adapters.streamsql.execution import lateness as late
from dbt.adapters.streamsql.execution import side_tables as side
from dbt.adapters.streamsql.execution import statements as sql
from dbt.adapters.streamsql.execution import watermark as wm
from dbt.adapters.streamsql.execution.context import StepContext, StepError
from dbt.adapters.streamsql.execution.delta_log import Commit
from dbt.adapters.streamsql.execution.inputs import InputState, describe_query, describe_views
from dbt.adapters.streamsql.execution.progress import StepRecord, last_record
from dbt.adapters.streamsql.planning.plan import AggregatePlan, Column, StepPlan

if TYPE_CHECKING:
    from dbt.adapters.streamsql.execution.event_time import EventTimeRules

USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
HISTORY_PAGE = 50  # commits of the model's history read to find its last step record
STATE_LAYOUT = "log"  # how state tables keep their rows (progress.StepRecord.state_layout)
# A state table is compacted after this many appends at the latest (compact_state_tables).
COMPACT_AFTER_STEPS = 100


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


def prepare_target(
    ctx: StepContext,
    plan: StepPlan,
    inputs: Sequence[InputState],
    output_columns: Sequence[Column],
    fingerprint: str,
    rules: "EventTimeRules",
    last: Optional[StepRecord],
) -> StepRecord:
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
        return last
    # Step 0: empty tables; the first step then reads every input in full.
    create_event_time_tables(ctx, output_columns, rules, replace=True)
    record = StepRecord(
        step=0,
        run_id=ctx.run_id,
        sql_fingerprint=fingerprint,
        incarnation=ctx.run_id,
        state_layout=STATE_LAYOUT,
        emit_final=bool(model.emit_final),
    )
    views = describe_views(inputs, plan.stages)
    for name, aggregate in state_aggregates(plan):
        create_state_table(ctx, model.table(f"__streamsql_{name}"), aggregate, views)
        record.state_tables.append(name)
    with ctx.role(f"create the model's table {model.target}, empty (step 0)"):
        with_record(
            ctx,
            record,
            lambda: ctx.session.run(
                sql.create_table(
                    model.target,
                    output_columns,
                    model.tblproperties,
                    model.partition_by,
                    model.cluster_by,
                    model.location,
                )
            ),
            idempotent=False,
        )
    return record


def read_last_record(ctx: StepContext) -> Optional[StepRecord]:
    """The model's last step record, reading only as much history as needed.

    Also notes the model table's current version in `ctx.target_version`.
    """
    with ctx.role("the model's last step record"):
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


def create_event_time_tables(
    ctx: StepContext, output_columns: Sequence[Column], rules: "EventTimeRules", replace: bool
) -> None:
    """`__late` and `__waterline` for LATENESS, `__pending` for WATERMARK: their columns decided
    here, their CREATE statements made by the package's macros (side_tables.py)."""
    model = ctx.model
    tables = []
    if rules.lateness:
        tables += [
            (side.LATE, "__late", late.late_table_columns(output_columns), "LATENESS quarantine"),
            (side.WATERLINE, "__waterline", list(late.WATERLINE_COLUMNS), "LATENESS waterlines"),
        ]
    if rules.watermark:
        tables.append(
            (
                side.PENDING,
                "__pending",
                list(output_columns) + list(wm.PENDING_COLUMNS),
                "WATERMARK held changes",
            )
        )
    for kind, suffix, columns, what in tables:
        statement = ctx.side_sql.create_table(
            kind, model.schema, model.identifier + suffix, columns, replace
        )
        how = "empty" if replace else "if missing"
        with ctx.role(f"create the {what} {model.table(suffix)}, {how}"):
            ctx.session.run(statement)
    pending = model.table_name("__pending")
    if (
        rules.watermark
        and not replace
        and wm.HELD_ID not in {c.name for c in ctx.delta_log.snapshot(pending).columns}
    ):
        ctx.log(
            f"{model.name}: giving the rows of {pending} ids (made by an earlier dbt-streamsql)"
        )
        with ctx.role(f"give the rows of {model.pending_table} ids"):
            for statement in wm.ids_missing(model.pending_table):
                ctx.session.run(statement)


def create_state_table(
    ctx: StepContext, table: str, aggregate: AggregatePlan, describe_views: Mapping[str, str]
) -> None:
    """An empty state table for `aggregate`: its state columns and the step that wrote a row."""
    declared = list(aggregate.state_columns)
    if not all(c.data_type for c in declared):  # types the planner could not infer
        unbounded = {bound.name: "true" for bound in aggregate.bounds}
        with ctx.role(f"the types of the state columns of {table}"):
            described = {
                c.name: c.data_type
                for c in describe_query(
                    ctx.session,
                    sql.bind_placeholders(aggregate.delta_sql, {**describe_views, **unbounded}),
                )
            }
        declared = [Column(c.name, c.data_type or described[c.name]) for c in declared]
    # Internal: nobody reads its change feed, so its writes need not write one.
    with ctx.role(f"create the state table {table}, empty"):
        ctx.session.run(
            sql.create_table(
                table,
                declared + [Column(sql.STEP, "bigint")],
                {"delta.enableChangeDataFeed": "false"},
            )
        )


def state_aggregates(plan: StepPlan) -> List[Tuple[str, AggregatePlan]]:
    """(state table name, its aggregate plan): the stages in plan order, then the top one."""
    found = [(stage.name, stage.aggregate) for stage in plan.stages]
    if plan.aggregate is not None:
        found.append(("state", plan.aggregate))
    return found


def require_state_tables(ctx: StepContext, plan: StepPlan, previous: StepRecord) -> None:
    """A table built when the model was planned another way lacks this plan's state tables."""
    names = [name for name, _ in state_aggregates(plan)]
    if names and previous.state_layout != STATE_LAYOUT:
        raise StepError(
            f"Model {ctx.model.name} keeps per-group state in tables built by an earlier "
            f"dbt-streamsql, which kept that state another way. Run `dbt run --full-refresh "
            f"--select {ctx.model.name}` once to rebuild them."
        )
    if any(name not in previous.state_tables for name in names):
        raise StepError(
            f"Model {ctx.model.name} is now maintained by a {plan.strategy} plan "
            f"({plan.reason}) that keeps per-group state its table was not built with (it "
            f"was last stepped by another plan, e.g. under an earlier dbt-streamsql). Run "
            f"`dbt run --full-refresh --select {ctx.model.name}` once to rebuild it."
        )


def compact_state_tables(
    ctx: StepContext, plan: StepPlan, previous: StepRecord, record: StepRecord
) -> None:
    """Rewrite each state table whose appended rows outnumber its live groups (or that was
    appended to COMPACT_AFTER_STEPS times) as one row per live group, before the step reads it.

    The state the table holds does not change (statements.compact_state), so this is safe at
    any moment, a crash included; `record` (the step's) gets the table's new counts.
    """
    for name, aggregate in state_aggregates(plan):
        live, appended, steps = previous.state_log.get(name, [0, 0, 0])
        if previous.step == 0 or (appended <= live and steps < COMPACT_AFTER_STEPS):
            continue
        table = ctx.model.table(f"__streamsql_{name}")
        keys = [c for c in aggregate.state_columns if c.name in aggregate.group_columns]
        statement = sql.compact_state(
            table, previous.step, keys, aggregate.state_columns, sql.time_first(keys)
        )
        with ctx.role(f"compact the state table {table}: one row per live group"):
            with_settings(
                ctx,
                [("spark.sql.files.maxRecordsPerFile", "250000")],
                lambda: ctx.session.run(statement),
            )
        written = ctx.delta_log.recent_commits(table, 1)[0]
        record.state_log[name] = [int(written.metrics.get("numOutputRows", 0)), 0, 0]


def unfinished_side_writes(ctx: StepContext, last: StepRecord) -> List[str]:
    """The side tables `last` names (progress.StepRecord.side_writes) that lack its write."""
    missing = []
    for suffix in last.side_writes:
        with ctx.role(f"did step {last.step} write {ctx.model.table(suffix)}?"):
            written, _ = newest_record(ctx, ctx.model.table_name(suffix))
        if written is None or written.incarnation != last.incarnation or written.step < last.step:
            missing.append(suffix)
    return missing


def record_before(ctx: StepContext, last: StepRecord) -> Tuple[StepRecord, int]:
    """The record of the step before `last`, and the version of the model's commit of `last`.

    Raises:
        StepError: the model's history no longer holds it (a VACUUM of its log).
    """
    commits = ctx.delta_log.recent_commits(ctx.model.target_name, HISTORY_PAGE)
    found: Optional[int] = None
    for commit in commits:
        record = StepRecord.from_json(commit.user_metadata)
        if record is None or record.incarnation != last.incarnation:
            continue
        if record.step == last.step:
            found = commit.version
        elif record.step == last.step - 1 and found is not None:
            return record, found
    raise StepError(
        f"Model {ctx.model.name}: step {last.step} was interrupted after its commit, and the "
        f"record of step {last.step - 1} it needs to finish is no longer in the model's recent "
        f"history. Run `dbt run --full-refresh --select {ctx.model.name}` to rebuild it."
    )


def with_record(
    ctx: StepContext,
    record: StepRecord,
    write: Callable[[], Any],
    idempotent: bool,
    table: str = "",
) -> None:
    """Run writing statements whose Delta commits carry the step record.

    `idempotent`: also Delta's txnAppId/txnVersion, so that a second commit of the same step
    (a re-run after a crash, another process) is skipped by Delta itself; `table` (a side
    table's suffix) makes the id that table's own, so each table takes the step once.
    """
    settings = [(USER_METADATA, record.to_json())]
    if idempotent:
        app = f"streamsql:{ctx.model.target_name}:{record.incarnation}{table and ':' + table}"
        settings += [(TXN_APP_ID, app), (TXN_VERSION, str(record.step))]
    with_settings(ctx, settings, write)


def with_settings(
    ctx: StepContext, settings: Sequence[Tuple[str, str]], run: Callable[[], Any]
) -> None:
    """Run with session settings that are reset afterwards, whatever happens."""
    for key, value in settings:
        ctx.session.run(sql.set_conf(key, value))
    try:
        run()
    finally:
        for key, _ in settings:
            ctx.session.run(sql.reset_conf(key))
