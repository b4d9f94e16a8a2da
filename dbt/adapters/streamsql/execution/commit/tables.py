"""The model's tables: created on a first or full-refresh run, checked and compacted after.

`prepare_target` checks that the model's table was built by this query and creates the side
tables a config asks for, or, on a first or full-refresh run, (re)creates every table, under a
step-0 record (transactions.py). `compact_state_tables` rewrites the state tables that have
grown, before a step reads them. Both write before the step's own commit (protocol.py): what
they write leaves every table's contents as it was, so a step killed after them is simply taken
again.
"""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from dbt.adapters.streamsql.execution.commit.record import (
    StepRecord,
    changed_clauses,
)
from dbt.adapters.streamsql.execution.commit.transactions import with_record, with_settings
from dbt.adapters.streamsql.execution.context import StepContext
from dbt.adapters.streamsql.execution.engine import side_tables as side
from dbt.adapters.streamsql.execution.engine import statements as sql
from dbt.adapters.streamsql.execution.engine.sql_session import describe_query
from dbt.adapters.streamsql.execution.event_time import lateness as late
from dbt.adapters.streamsql.execution.event_time import watermark as wm
from dbt.adapters.streamsql.execution.event_time.rules import EventTimeRules
from dbt.adapters.streamsql.execution.shared.errors import StepError
from dbt.adapters.streamsql.execution.shared.input_state import InputState
from dbt.adapters.streamsql.execution.shared.lateness_rule import LatenessRule
from dbt.adapters.streamsql.execution.step_state import StepState
from dbt.adapters.streamsql.planning.plan import (
    WEIGHT,
    AggregatePlan,
    Column,
    StagePlan,
    StepPlan,
    delta_input,
    new_input,
    old_input,
)

STATE_LAYOUT = "log"  # how state tables keep their rows (progress.StepRecord.state_layout)
# When a state table is compacted (compact_state_tables): once the rows appended since its last
# compaction outnumber both its live groups and COMPACT_MIN_ROWS, or after COMPACT_AFTER_STEPS
# appends. A step reads the state through its log (the latest row per group), so a log twice
# its live groups costs a large state's read about twice; a small state's extra rows cost next
# to nothing, while each compaction is a rewrite of the table (1-2 s, in the step that does it:
# every third step for a 100-group aggregate that changes 40 groups a step, under the old rule
# of appended > live alone). Each append adds a file or two: after 20 appends the table still
# holds under 50 files, where Delta keeps its file list in the version's checksum and a read
# after a commit needs no rebuild of it from the log.
COMPACT_MIN_ROWS = 100_000
COMPACT_AFTER_STEPS = 20


def sql_changed(
    model: str, last: StepRecord, compiled_sql: str, views: Sequence[str] = ()
) -> Optional[str]:
    """Why the model's table no longer matches its query, when its query changed in meaning
    since step `last` (comments and layout do not count); None when it did not. `views`: the
    views whose queries stand in `compiled_sql` (input_views.py)."""
    if last.same_sql(compiled_sql):
        return None
    clauses = changed_clauses(last.sql_clauses, compiled_sql)
    which = f" (its {', '.join(clauses)})" if clauses else ""
    through = (
        f" Its query includes the definitions of the views it reads ({', '.join(views)}): a "
        "changed view is a changed query."
        if views
        else ""
    )
    return (
        f"Model {model}: its SQL changed since step {last.step}{which}, so its table no longer "
        "matches its query. Run `dbt run --full-refresh --select "
        f"{model}` to rebuild it from its inputs. (Comments and layout are not a change.)" + through
    )


def prepare_target(
    ctx: StepContext,
    plan: StepPlan,
    inputs: Sequence[InputState],
    output_columns: Sequence[Column],
    compiled_sql: str,
    rules: "EventTimeRules",
    last: Optional[StepRecord],
) -> StepRecord:
    """The record the step continues from; (re)creates the model's tables when `last` is None
    (a first or full-refresh run, see `last_step`)."""
    model = ctx.model
    if last is not None:
        changed = sql_changed(model.name, last, compiled_sql, ctx.views_read)
        if changed:
            raise StepError(changed)
        require_state_tables(ctx, plan, last)
        # LATENESS or WATERMARK may have been added to the config since the last step.
        create_event_time_tables(ctx, output_columns, rules, replace=False, last=last)
        return last
    # Step 0: empty tables; the first step then reads every input in full.
    create_event_time_tables(ctx, output_columns, rules, replace=True)
    record = StepRecord(
        step=0,
        run_id=ctx.run_id,
        sql_fingerprint="",
        incarnation=ctx.run_id,
        state_layout=STATE_LAYOUT,
        emit_final=bool(model.emit_final),
    )
    record.fingerprint(compiled_sql)
    views = describe_views(inputs, plan.stages)
    for name, aggregate in state_aggregates(plan):
        suffix = f"__streamsql_{name}"
        create_state_table(
            ctx, model.table(suffix), aggregate, views, location=model.location_of(suffix)
        )
        record.state_tables.append(name)
    # The model's table is created last, and claims the model: when it did not exist, a plain
    # CREATE, so that of two first steps started together the second fails here (another run
    # created it: the clear concurrent-write error) instead of replacing the table the first one
    # is stepping. A full refresh replaces it; so does a model with a location_root, where a
    # plain CREATE over files left at that location would adopt them.
    claim = not model.full_refresh and model.location is None
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
                    replace=not claim,
                )
            ),
            idempotent=False,
        )
    return record


def create_event_time_tables(
    ctx: StepContext,
    output_columns: Sequence[Column],
    rules: "EventTimeRules",
    replace: bool,
    last: Optional[StepRecord] = None,
) -> None:
    """`__late` and `__waterline` for LATENESS, `__pending` for WATERMARK: their columns decided
    here, their CREATE statements made by the package's macros (side_tables.py). `last`: the
    step record the step continues from (an existing `__waterline` that lacks a column an
    earlier version did not write gets it, looked for until a step has written it)."""
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
    storage = model.storage_properties
    for kind, suffix, columns, what in tables:
        # the model's storage properties, set after the project's macro made the table (an
        # override need not know of them); only on a table this statement creates
        created = replace or bool(storage and not ctx.delta_log.exists(model.table_name(suffix)))
        statement = ctx.side_sql.create_table(
            kind,
            model.schema,
            model.identifier + suffix,
            columns,
            replace,
            model.location_of(suffix),
        )
        how = "empty" if replace else "if missing"
        with ctx.role(f"create the {what} {model.table(suffix)}, {how}"):
            ctx.session.run(statement)
        if storage and created:
            with ctx.role(f"the model's storage properties on {model.table(suffix)}"):
                ctx.session.run(sql.set_properties(model.table(suffix), storage))
    add_waterline_behind(ctx, rules, last)  # none to look for when `last` is None
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


def add_waterline_behind(
    ctx: StepContext, rules: "EventTimeRules", last: Optional[StepRecord]
) -> None:
    """Give a `__waterline` made by an earlier dbt-streamsql its `behind` column (NULL in the
    rows already there). Looked for only while the record the step continues from (`last`)
    has seen values but counted none: once a step has counted, its table has the column."""
    if not rules.lateness or last is None or last.behind or not any(last.max_seen.values()):
        return
    model = ctx.model
    table = model.table_name("__waterline")
    if late.BEHIND in {c.name for c in ctx.delta_log.snapshot(table).columns}:
        return
    ctx.log(
        f"{model.name}: adding the column {late.BEHIND} to {table} (made by an earlier "
        "dbt-streamsql)"
    )
    with ctx.role(f"add the column {late.BEHIND} to {model.waterline_table}"):
        ctx.session.run(sql.add_columns(model.waterline_table, [Column(late.BEHIND, "string")]))


def describe_views(inputs: Sequence[InputState], stages: Sequence[StagePlan]) -> Dict[str, str]:
    """Relations with the columns of every placeholder, to DESCRIBE a plan's SQL with."""
    views: Dict[str, str] = {}
    for i, item in enumerate(inputs):
        views[new_input(i)] = views[old_input(i)] = f"(SELECT * FROM {item.relation})"
        views[delta_input(i)] = f"(SELECT *, CAST(1 AS BIGINT) AS {WEIGHT} FROM {item.relation})"
    for stage in stages:
        views[new_input(stage.position)] = views[old_input(stage.position)] = (
            f"({sql.typed_nothing(stage.columns)})"
        )
        views[delta_input(stage.position)] = (
            f"({sql.typed_nothing(list(stage.columns) + [Column(WEIGHT, 'bigint')])})"
        )
    return views


def create_state_table(
    ctx: StepContext,
    table: str,
    aggregate: AggregatePlan,
    describe_views: Mapping[str, str],
    location: Optional[str] = None,
) -> None:
    """An empty state table for `aggregate`: its state columns and the step that wrote a row;
    at `location` when the model has a location_root, with the model's storage properties."""
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
                {**ctx.model.storage_properties, "delta.enableChangeDataFeed": "false"},
                location=location,
            )
        )


def state_aggregates(plan: StepPlan) -> List[Tuple[str, AggregatePlan]]:
    """(state table name, its aggregate plan): the stages in plan order, then the top one."""
    found = [(stage.name, stage.aggregate) for stage in plan.stages]
    if plan.aggregate is not None:
        found.append(("state", plan.aggregate))
    return found


def lateness_outputs(plan: StepPlan, name: str) -> Tuple[Tuple[str, str], ...]:
    """The model columns by which LATENESS makes groups of state table `name` final, with
    their SQL over its state rows: the top aggregate's group outputs; for a stage, those of
    its group outputs that a model column carries unchanged (planning/stage_lateness.py)."""
    if name == "state":
        return plan.aggregate.group_outputs if plan.aggregate is not None else ()
    stage = next(stage for stage in plan.stages if stage.name == name)
    by_name = {column.lower(): sql_text for column, sql_text in stage.aggregate.group_outputs}
    return tuple(
        (model_column, by_name[column.lower()])
        for model_column, column in stage.lateness_through
        if column.lower() in by_name
    )


def dropped_lines(record: StepRecord, name: str) -> Dict[str, str]:
    """Per lateness column, the line below which state table `name` holds no group."""
    if name == "state":
        return record.state_dropped_below
    return record.stage_dropped_below.get(name, {})


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
            f"Model {ctx.model.name} is now maintained by a {plan.kind} plan "
            f"({plan.reason}) that keeps per-group state its table was not built with (it "
            f"was last stepped by another plan, e.g. under an earlier dbt-streamsql). Run "
            f"`dbt run --full-refresh --select {ctx.model.name}` once to rebuild it."
        )


def due_for_compaction(live: int, appended: int, steps: int) -> bool:
    """Whether a state table with `live` groups at its last compaction, `appended` rows and
    `steps` appends since, is compacted before the next step reads it."""
    return appended > max(live, COMPACT_MIN_ROWS) or steps >= COMPACT_AFTER_STEPS


def compact_state_tables(
    ctx: StepContext, plan: StepPlan, step: StepState, lateness: Sequence[LatenessRule] = ()
) -> None:
    """Rewrite each state table whose appended rows outnumber its live groups and
    COMPACT_MIN_ROWS (or that was appended to COMPACT_AFTER_STEPS times) as one row per live
    group, before the step reads it; also once the waterline has moved its line of dropped
    state a retention up (`state_line_risen`).

    The rewrite also drops the groups that LATENESS made final long enough ago
    (`dropped_groups`): the top aggregate's, and a stage's whose group a model column with
    LATENESS carries (`lateness_outputs`). The state any step can still need does not change,
    so this is safe at any moment, a crash included (a step taken again rewrites the same way,
    from the same record); the step's record gets the table's new counts and what was dropped,
    its result a note.
    """
    previous, record = step.previous, step.record
    for name, aggregate in state_aggregates(plan):
        live, appended, steps = previous.state_log.get(name, [0, 0, 0])
        if previous.step == 0:
            continue
        outputs, lines = lateness_outputs(plan, name), dropped_lines(previous, name)
        due = due_for_compaction(live, appended, steps)
        if not due and steps:
            due = state_line_risen(ctx, outputs, lateness, previous.waterline, lines)
        if not due:
            continue
        table = ctx.model.table(f"__streamsql_{name}")
        keys = [c for c in aggregate.state_columns if c.name in aggregate.group_columns]
        keep, below = dropped_groups(ctx, outputs, lateness, previous.waterline, lines)
        statement = sql.compact_state(
            table, previous.step, keys, aggregate.state_columns, sql.time_first(keys), keep
        )
        role = "compact the state table {table}: one row per live group" + (
            ", without the final groups far below the waterline" if keep else ""
        )
        with ctx.role(role.format(table=table)):
            with_settings(
                ctx,
                [("spark.sql.files.maxRecordsPerFile", "250000")],
                lambda: ctx.session.run(statement),
            )
        written = ctx.delta_log.recent_commits(table, 1)[0]
        kept = int(written.metrics.get("numOutputRows", 0))
        record.state_log[name] = [kept, 0, 0]
        if below:
            if name == "state":
                record.state_dropped_below.update(below)
            else:
                record.stage_dropped_below.setdefault(name, {}).update(below)
            step.result.notes.append(
                f"dropped the state of final groups ({late.below_lines(below)}) from {table}; "
                f"{kept} group(s) kept"
            )


def state_line_risen(
    ctx: StepContext,
    outputs: Sequence[Tuple[str, str]],
    lateness: Sequence[LatenessRule],
    waterline: Mapping[str, Optional[str]],
    lines: Mapping[str, str],
) -> bool:
    """Whether the waterline has moved far enough since the top aggregate's state last dropped
    final groups that a rewrite now would drop at least another `final_state_retention` of
    them: then the state is rewritten at once rather than after COMPACT_AFTER_STEPS appends,
    which keeps the state of a model stepped often within about twice the retention below the
    waterline. One constant SELECT (no Spark job), and only once a first rewrite has drawn a
    line; the first line comes with the first ordinary compaction."""
    risen = [
        rule.state_line_risen(value, lines[rule.column.name])
        for rule, _, value in late.final_group_columns(lateness, waterline, outputs)
        if rule.state_kept is not None and rule.column.name in lines
    ]
    if not risen:
        return False
    due = " OR ".join(f"coalesce({check}, false)" for check in risen)
    with ctx.role("whether the waterline moved a retention past the line of dropped state"):
        return bool(ctx.session.query(f"SELECT {due} AS due")[0]["due"])


def dropped_groups(
    ctx: StepContext,
    outputs: Sequence[Tuple[str, str]],
    lateness: Sequence[LatenessRule],
    waterline: Mapping[str, Optional[str]],
    lines: Mapping[str, str],
) -> Tuple[str, Dict[str, str]]:
    """Which groups a compaction of a state table keeps, and the lines below which it drops
    the others (per lateness column, as strings). `outputs`: `lateness_outputs`; `lines`:
    those drawn before (`dropped_lines`).

    A group whose lateness column (a window start, a truncated hour) lies below the waterline is
    final: every later change to it is late, and its state serves only to describe such a change
    in `__late`. Its state is kept down to the waterline minus the rule's `state_kept` (config
    final_state_retention, by default the lateness), then dropped: a step whose late change
    reaches a dropped group recomputes the model instead (aggregate_state.changed_groups). The
    line never moves down, even when the config shrinks the retention later."""
    final = [
        (rule, expression, value)
        for rule, expression, value in late.final_group_columns(lateness, waterline, outputs)
        if rule.state_kept is not None
    ]
    if not final:
        return "", {}
    drawn = ", ".join(
        f"{rule.state_line(value, lines.get(rule.column.name))} AS l{i}"
        for i, (rule, _, value) in enumerate(final)
    )
    with ctx.role("the lines below which final groups' state is dropped"):
        row = ctx.session.query(f"SELECT {drawn}")[0]
    below = {
        rule.column.name: str(row[f"l{i}"])
        for i, (rule, _, _) in enumerate(final)
        if row[f"l{i}"] is not None
    }
    keep = " AND ".join(
        late.open_groups(rule, expression, below[rule.column.name])
        for rule, expression, _ in final
        if rule.column.name in below
    )
    return keep, below
