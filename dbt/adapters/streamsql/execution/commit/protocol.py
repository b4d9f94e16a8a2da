"""Phase 5 of a step: every write, in the one order that makes a step exactly-once.

Everything a step writes is computed first, by the phases before this one, into relations pinned
to versions; they describe their writes as `StepWrites` and write nothing themselves.
`commit_step` checks the change (append_only), then:

1. commits the model's change, in one Delta commit that carries the step record (the input
   versions, the waterlines, and which side tables the step writes next) and is idempotent
   (Delta's `txnAppId`/`txnVersion`: a second commit of the same step is skipped by Delta);
2. writes each side table the record names, one commit each: `__waterline`, `__late` (its
   new rows, or for a readmit its readmitted rows marked), `__pending`, then the state tables
   (stages in plan order, then the top aggregate's). Each of these commits is idempotent too,
   under an id of its own per table.

Why no table ever shows part of a step, and why a step happens exactly once: until 1 commits,
the step wrote nothing (a run killed before leaves every table as it was; the next run takes
the step from scratch). Once 1 commits, the step has happened. Each side table then gets the
step in one commit: all of its rows, or none yet. A run killed between 1 and the end of 2 leaves
some side tables without the step: the next run finds them (`history.unfinished_side_writes`)
and first finishes the step (step.py): it computes it again from the same input versions and
the state as it was before the step (inputs are read by version, state tables by step number:
statements.state_through), and writes again; Delta skips the writes that had landed. Two runs
at once compute the same step; Delta commits one model write, and the other run finds another
run's record and stops before writing anything.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from dbt.adapters.streamsql.execution.commit.aggregate_state import group_columns
from dbt.adapters.streamsql.execution.commit.bounds import (
    CHANGE_ALIAS,
    change_measures,
    key_columns,
    ranges_from,
)
from dbt.adapters.streamsql.execution.commit.history import newest_record
from dbt.adapters.streamsql.execution.commit.record import StepRecord
from dbt.adapters.streamsql.execution.commit.transactions import with_record
from dbt.adapters.streamsql.execution.context import StepContext
from dbt.adapters.streamsql.execution.engine import model_writes
from dbt.adapters.streamsql.execution.engine import statements as sql
from dbt.adapters.streamsql.execution.engine.sql_session import measured
from dbt.adapters.streamsql.execution.event_time import lateness as late
from dbt.adapters.streamsql.execution.event_time import watermark as wm
from dbt.adapters.streamsql.execution.shared.errors import StepError
from dbt.adapters.streamsql.execution.shared.lateness_rule import LatenessRule
from dbt.adapters.streamsql.execution.shared.result import WRITE_REWRITE, WRITE_WHOLE
from dbt.adapters.streamsql.execution.shared.writes import (
    LATE,
    PENDING,
    WATERLINE,
    ModelChange,
    StateWrite,
    StepWrites,
)
from dbt.adapters.streamsql.execution.step_state import StepState
from dbt.adapters.streamsql.planning.plan import Column

MAX_RECORDS_PER_FILE = "spark.sql.files.maxRecordsPerFile"
# Rows per file of a first step's sorted bulk write: small enough files that a later step's key
# ranges skip most of them.
BULK_FILE_ROWS = 250_000
# Whether Delta copies a MERGE's source before it reads it twice: needless for a source that is
# a checkpointed change and nothing else (a MERGE by key). A MERGE that matches whole rows is
# not such a source: it joins the change with the model to count copies, and without the copy
# Delta runs that join twice. Not over Thrift: there the source is a cached view, and another
# session's CACHE TABLE on the same server can match part of its plan while the MERGE runs,
# which Delta refuses (DELTA_MERGE_SOURCE_CACHED_DURING_EXECUTION) unless it copied the source.
MATERIALIZE_SOURCE = "spark.databricks.delta.merge.materializeSource"
# Whether a MERGE marks the rows it replaces in deletion vectors (Delta's default) or rewrites
# each file it touches. Rewriting costs with the size of the files touched and saves the
# deletion vectors' jobs, so a model rewrites only below SMALL_TABLE_BYTES in files of at most
# REWRITTEN_FILE_BYTES on average (from the version's checksum file, read in the JVM: no
# statement); a larger model, or one whose size a step cannot read for free, keeps them
# (bench/small_merge.py and bench/step_vs_rebuild.py measure both sides).
PERSISTENT_DELETION_VECTORS = "spark.databricks.delta.merge.deletionVectors.persistent"
SMALL_TABLE_BYTES = 64 * 2**20
REWRITTEN_FILE_BYTES = 4 * 2**20
# A step that removes rows from a model under REWRITE_BYTES writes the model whole, in one
# INSERT OVERWRITE into one file, instead of a MERGE (config `rewrite_when_small`, on by
# default; bench/write_paths.py measures both). Its change feed then shows every row removed and
# added again: readers in this adapter net it (pipeline/inputs.py), and users who read the feed
# can turn it off.
REWRITE_BYTES = 2**20
PARTITION_OVERWRITE = "spark.sql.sources.partitionOverwriteMode"


def commit_step(
    ctx: StepContext,
    step: StepState,
    change: ModelChange,
    columns: Sequence[Column],
    lateness: Sequence[LatenessRule],
    key: Optional[Sequence[str]] = None,
) -> None:
    """Count and check the change, then write everything in order (see the module docstring).

    `change`: the change to apply to the model, netted unless it only appends (then its rows
    are counted by its commit). `key`: columns the model holds at most one row per
    (`keys.merge_key`).
    """
    previous, record, result, writes = step.previous, step.record, step.result, step.writes
    ranges: List[str] = []
    if change.whole:
        # every row out, the query's rows in: counted by the table's statistics before and
        # the commit after (Delta answers a COUNT(*) from its files' statistics)
        with ctx.role("count the model's rows before it is written whole"):
            result.deleted = int(ctx.session.query(sql.count_rows(ctx.model.target))[0]["n"])
    elif not change.appends:
        # The change's counts and key ranges (`bounds.change_measures`): measured by the pass
        # that computed the change where it could, else one query.
        wanted = change_measures(columns, key, step.first_step)
        counts = ctx.views.measured(change.relation, wanted)
        if counts is None:
            with ctx.role("count the model's change: its inserts, deletes and key ranges"):
                counts = ctx.session.query(measured(change.relation, wanted, CHANGE_ALIAS))[0]
        key_range_list = ranges_from(
            key_columns(columns, key), CHANGE_ALIAS, counts, step.first_step
        )
        result.inserted, result.deleted = int(counts["inserts"]), int(counts["deletes"])
        if int(counts["widest"]) > 1:  # several copies of one row: not one row per key
            key = None
        ranges = (
            key_range_list
            if key is not None
            else (
                []
                if step.first_step
                else sql.range_predicates(columns, CHANGE_ALIAS, counts, name="d")
            )
        )
    if ctx.model.append_only and result.deleted:
        raise StepError(
            f"Model {ctx.model.name} is configured append_only, but step {record.step} "
            f"would delete or update {result.deleted} row(s) of it. {ctx.nothing_changed()} "
            "Remove `append_only` from the model's config if its result can shrink, or find "
            "the input update/delete that caused this."
        )
    record.side_writes = writes.tables(result.late)
    for write in writes.state:
        live, appended, steps = record.state_log.get(write.name, [0, 0, 0])
        record.state_log[write.name] = (
            [write.groups.count, 0, 0]
            if write.fresh
            else [live, appended + write.groups.count, steps + 1]
        )
    ctx.checkpoint("before_commit")
    bounds = late.target_bounds(lateness, previous.waterline) + list(ranges)
    commit_model(ctx, step, change, columns, key, bounds)
    ctx.checkpoint("after_commit")
    write_side_tables(ctx, writes, previous, record)
    result.waterline = dict(record.waterline)


def write_side_tables(
    ctx: StepContext, writes: StepWrites, previous: StepRecord, record: StepRecord
) -> None:
    """Write 2 of the module docstring: each side table the record names, idempotently."""
    wanted = set(record.side_writes)
    model, statements = ctx.model, ctx.side_sql  # the statements: macros (side_tables.py)
    if writes.quarantine is not None:
        ctx.checkpoint("before_quarantine")
        write = writes.quarantine
        if WATERLINE in wanted:
            rows = late.waterline_rows(
                record.step, write.rules, record.waterline, record.max_seen, record.behind
            )
            with_side_record(
                ctx,
                record,
                WATERLINE,
                f"append the step's waterlines to {model.waterline_table}",
                statements.append_waterline_rows(
                    model.schema, model.identifier + WATERLINE, late.WATERLINE_COLUMNS, rows
                ),
            )
        if LATE in wanted:
            rows = late.quarantine_rows(
                write.classified, write.columns, record.step, previous.waterline
            )
            with_side_record(
                ctx,
                record,
                LATE,
                f"append the step's late changes to {model.late_table}",
                statements.append_late_rows(
                    model.schema,
                    model.identifier + LATE,
                    late.late_table_columns(write.columns),
                    rows,
                ),
            )
    if writes.readmit is not None and LATE in wanted:
        ctx.checkpoint("before_readmit_mark")
        with_side_record(
            ctx,
            record,
            LATE,
            f"mark the readmitted rows of {model.late_table} with step {record.step}",
            statements.mark_readmitted_rows(
                model.schema, model.identifier + LATE, writes.readmit.condition, record.step
            ),
        )
    if writes.held is not None and PENDING in wanted:
        ctx.checkpoint("before_hold")
        changes = wm.pending_changes(writes.held.candidates, writes.held.columns, record.step)
        with_side_record(
            ctx,
            record,
            PENDING,
            f"MERGE into {model.pending_table}: the changes the step releases and those it holds",
            statements.merge_pending_rows(
                model.schema, model.identifier + PENDING, writes.held.columns, changes, record.step
            ),
        )
    for state in writes.state:
        if state.suffix in wanted:
            write_state(ctx, state, record)


def write_state(ctx: StepContext, write: StateWrite, record: StepRecord) -> None:
    """The changed groups' new state, appended to the state table as this step's rows (a state
    table is a log: `statements.latest_state`; bookkeeping.compact_state_tables compacts it).

    An append is one INSERT, where updating the groups in place would be a MERGE (several times
    dearer on Delta). A first write sorts the groups by key, time first, into files of at most
    BULK_FILE_ROWS rows: later steps' key ranges then skip all but a few.
    """
    ctx.checkpoint("before_state")
    aggregate = write.aggregate
    order = sql.time_first(group_columns(aggregate))
    statement = sql.insert_state(
        write.table,
        write.groups.new,
        aggregate.state_columns,
        record.step,
        order if write.fresh else (),
        everything=not write.fresh,
    )
    settings = [(MAX_RECORDS_PER_FILE, str(BULK_FILE_ROWS))] if write.fresh else []
    role = f"append the changed groups' new state to {write.table}"
    with ctx.role(role):
        with_side_record(ctx, record, write.suffix, role, statement, settings)
    ctx.checkpoint("after_state")


def with_side_record(
    ctx: StepContext,
    record: StepRecord,
    suffix: str,
    role: str,
    statement: str,
    settings: Sequence[Tuple[str, str]] = (),
) -> None:
    """Run a side table's write of the step, idempotently: under the table's own id, so that
    Delta skips it when this step's write to that table has landed before. `role`: the write's,
    in the statement log; `settings`: the write's other session settings."""
    with ctx.role(role):
        with_record(
            ctx,
            record,
            lambda: ctx.session.run(statement),
            idempotent=True,
            table=suffix,
            also=settings,
        )


def small_table(ctx: StepContext, name: str) -> bool:
    """Whether `name` is known, for free, to be below SMALL_TABLE_BYTES in files of at most
    REWRITTEN_FILE_BYTES on average (a MERGE then rewrites the files it touches)."""
    if not ctx.delta_log.free_snapshots:
        return False
    snapshot = ctx.delta_log.snapshot(name)
    size, files = snapshot.size_bytes, snapshot.num_files
    if size is None or files is None or size >= SMALL_TABLE_BYTES:
        return False
    return files == 0 or size / files <= REWRITTEN_FILE_BYTES


def rewrite_whole(ctx: StepContext, columns: Sequence[Column]) -> bool:
    """Whether a step that removes rows writes the model whole instead of MERGEing into it:
    `rewrite_when_small` on, the model's size known for free and under REWRITE_BYTES, its
    columns the step's and all groupable (EXCEPT ALL matches rows by every column)."""
    if not ctx.model.rewrite_when_small or not ctx.delta_log.free_snapshots:
        return False
    if not sql.groupable(columns):
        return False
    snapshot = ctx.delta_log.snapshot(ctx.model.target_name)
    if snapshot.size_bytes is None or snapshot.size_bytes >= REWRITE_BYTES:
        return False
    names = [c.name.lower() for c in snapshot.columns]
    return names == [c.name.lower() for c in columns]


def commit_model(
    ctx: StepContext,
    step: StepState,
    change: ModelChange,
    columns: Sequence[Column],
    key: Optional[Sequence[str]] = None,
    bounds: Sequence[str] = (),
) -> None:
    """The model's change and `step`'s record, in one idempotent Delta commit.

    The query's rows as the whole table, for a recompute that writes it whole (its commit
    counts them); a blind INSERT when nothing is deleted (the change as it is when it only
    appends: its commit counts it); a MERGE by key for a model that holds one row per key;
    otherwise a MERGE that matches whole rows (`model_writes.merge_change`); a metadata-only
    commit when nothing changes. Then checks that the commit is this run's. `bounds`:
    predicates over the model (alias `t`) that every row the change touches meets (the rows
    LATENESS keeps open, the change's key ranges), for a MERGE.

    The change a MERGE by key reads is checkpointed already in the embedded session: Delta need
    not copy it again first (`MATERIALIZE_SOURCE`).
    """
    result, record, first = step.result, step.record, step.previous.step == 0
    target, net = ctx.model.target, change.relation
    keys = key_columns(columns, key)
    settings: List[Tuple[str, str]] = []
    no_copy = [(MATERIALIZE_SOURCE, "none")] if ctx.session.local_checkpoints() else []
    if result.deleted and not change.appends and small_table(ctx, ctx.model.target_name):
        settings.append((PERSISTENT_DELETION_VECTORS, "false"))
    if change.whole:
        statement = model_writes.write_whole(target, net, columns)
        settings = [(PARTITION_OVERWRITE, "static")]  # every partition, as `rewrite` does
        result.write = WRITE_WHOLE
        role = f"write the model {target} whole: the query's rows"
    elif change.appends:
        statement = sql.append_change(target, net, columns)
        role = f"append the change to the model {target}"
    elif result.deleted and rewrite_whole(ctx, columns):
        if key is not None:
            statement = model_writes.rewrite_by_key(target, net, columns, key)
        else:
            statement = model_writes.rewrite_change(target, net, columns)
        # the whole table, even where the session's default overwrites only some partitions
        settings = [(PARTITION_OVERWRITE, "static")]
        result.write = WRITE_REWRITE
        role = f"rewrite the model {target} whole (under {REWRITE_BYTES // 2**20} MiB)"
    elif result.deleted and key is not None:
        statement = model_writes.merge_by_key(target, net, columns, key, list(bounds))
        settings += no_copy
        role = f"MERGE the change into the model {target}, by key"
    elif result.deleted:
        statement = model_writes.merge_change(target, net, columns, list(bounds))
        role = f"MERGE the change into the model {target}"
    elif result.inserted and first and keys:
        # An aggregate's first rows, sorted by key like its state: later MERGEs by key skip
        # the files of keys they do not touch.
        statement = sql.insert_copies(target, net, columns, sql.time_first(keys))
        settings.append((MAX_RECORDS_PER_FILE, str(BULK_FILE_ROWS)))
        role = f"insert the change into the model {target}, sorted by key"
    elif result.inserted:
        statement = sql.insert_copies(target, net, columns)
        role = f"insert the change into the model {target}"
    else:
        statement = sql.mark_step(target, record.step)
        role = f"record step {record.step} on the model {target}, which no row changes"
    role += f" (step {record.step})"
    # the settings around the write under `role`; the write itself also says what it reads
    write_role = f"{role}, from {change.reads}" if change.reads else role

    def write() -> None:
        with ctx.role(write_role):
            ctx.session.run(statement)

    with ctx.role(role):
        with_record(ctx, record, write, idempotent=True, also=settings)
    with ctx.role("is the model's new commit this run's?"):
        committed, commits = newest_record(ctx, ctx.model.target_name)
    if committed is None or (committed.step, committed.run_id) != (record.step, ctx.run_id):
        raise StepError(
            f"Model {ctx.model.name}: another run completed step {record.step} at the same "
            "time; this run applied nothing. The model is consistent; run again to continue."
        )
    if change.appends or change.whole:
        ours = next(
            commit for commit in commits if StepRecord.from_json(commit.user_metadata) == committed
        )
        result.inserted = int(ours.metrics.get("numOutputRows", 0))
