"""Phase 5 of a step: every write, in the one order that makes a step exactly-once.

Everything a step writes is computed first, into views pinned to versions, by the phases before
this one; they describe their writes as `StepWrites` and write nothing themselves. `commit_step`
then checks the change (append_only) and writes, in this order:

1. the state tables (stages in plan order, then the top aggregate): `StateWrite`;
2. held rows (`__pending`): `HeldWrite`;
3. the quarantine and the waterline (`__late`, `__waterline`): `QuarantineWrite`;
4. last, the model's change, in one Delta commit that carries the step record (input versions,
   state versions, waterlines) and is idempotent with Delta's `txnAppId`/`txnVersion`.

Why that is crash-safe: a reader learns where the model stands only from the model's own
history, so until 4 commits the step has not happened. Writes 1-3 carry the attempt's step record
in their commits; the next run finds them there (`bookkeeping.interrupted`) and undoes them
before it recomputes (state tables are restored to the versions the last record names; rows
of `__pending`, `__late` and `__waterline` with this step's number are deleted). A step killed
after 4 is complete: the next run finds its record, and its inputs' versions tell it there is
nothing left to do. If 4 runs twice (a retry, or two processes), Delta commits it once.
What this order does not give yet: between 1-3 and 4, a reader of a side table sees the
attempt's rows until the next run undoes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

from dbt.adapters.streamsql.execution import lateness as late
from dbt.adapters.streamsql.execution import statements as sql
from dbt.adapters.streamsql.execution import watermark as wm
from dbt.adapters.streamsql.execution.bookkeeping import (
    interrupted,
    newest_record,
    with_record,
    with_settings,
)
from dbt.adapters.streamsql.execution.bounds import key_ranges
from dbt.adapters.streamsql.execution.context import StepContext, StepError, StepResult
from dbt.adapters.streamsql.execution.progress import StepRecord
from dbt.adapters.streamsql.execution.state import ChangedGroups, group_columns
from dbt.adapters.streamsql.planning.plan import AggregatePlan, Column, StepPlan

MAX_RECORDS_PER_FILE = "spark.sql.files.maxRecordsPerFile"
# Rows per file of a first step's sorted bulk write: small enough files that a later step's key
# ranges skip most of them.
BULK_FILE_ROWS = 250_000
# A state table's log is compacted after this many steps at the latest (write_state).
COMPACT_AFTER_STEPS = 100
# Whether Delta copies a MERGE's source before it reads it twice: needless for a source that is
# materialized already, and which reads nothing that changes.
MATERIALIZE_SOURCE = "spark.databricks.delta.merge.materializeSource"


@dataclass(frozen=True)
class ModelChange:
    """The model's change: weighted rows (plan.py) in `relation`, a view or an inline SELECT.

    `appends`: every row has weight +1 and the rows are not netted (the change of a monotonic
    query over inserts only): it is appended as it is, and counted by its commit.
    """

    relation: str
    appends: bool = False


@dataclass
class StateWrite:
    """The new state of an aggregate's changed groups, into its state table."""

    table: str
    aggregate: AggregatePlan
    groups: ChangedGroups
    fresh: bool  # the table is empty (first step): a sorted bulk INSERT instead of a MERGE
    stage: Optional[str] = None  # the stage it belongs to; None for the top aggregate


@dataclass
class HeldWrite:
    """WATERMARK: mark the released rows of `__pending`, and hold this step's new ones."""

    condition: str  # which changes the watermark releases (watermark.release_condition)
    candidates: str  # this step's changes and the ones held before (materialized view)
    columns: Sequence[Column]


@dataclass
class QuarantineWrite:
    """LATENESS: this step's late changes into `__late`, and its waterlines into `__waterline`."""

    classified: str  # the change with each row's lateness reason (materialized view)
    columns: Sequence[Column]
    rules: Sequence[late.LatenessRule]


@dataclass
class StepWrites:
    """What a step writes before the model's commit, in the order `commit_step` writes it."""

    state: List[StateWrite] = field(default_factory=list)
    held: Optional[HeldWrite] = None
    quarantine: Optional[QuarantineWrite] = None


def merge_key(plan: StepPlan,
              lateness_and_watermark_columns: Sequence[str]) -> Optional[Sequence[str]]:
    """The model's key when a change may be applied by key: an aggregate naming its groups.

    Only when every LATENESS and WATERMARK column is part of the key: otherwise a group's old
    row may be late (not deleted) while its new row is on time (inserted), and the model
    then rightly holds both.
    """
    if plan.aggregate is None or plan.aggregate.key_columns is None:
        return None
    key = {name.lower() for name in plan.aggregate.key_columns}
    if any(name.lower() not in key for name in lateness_and_watermark_columns):
        return None
    return plan.aggregate.key_columns


def commit_step(ctx: StepContext, change: ModelChange, columns: Sequence[Column],
                writes: StepWrites, previous: StepRecord, record: StepRecord, result: StepResult,
                lateness: Sequence[late.LatenessRule],
                key: Optional[Sequence[str]] = None) -> None:
    """Count and check the change, then write everything in order (see the module docstring).

    `change`: the change to apply to the model, netted unless it only appends (then its rows
    are counted by its commit). `key`: columns the model holds at most one row per
    (`merge_key`).
    """
    ranges: List[str] = []
    if not change.appends:
        # One query: the change's counts and, for a MERGE by key, its range of keys.
        ranges, counts = key_ranges(ctx, key_columns(columns, key), change.relation, "t",
                                    sql.change_count_aggregates())
        result.inserted, result.deleted = int(counts["inserts"]), int(counts["deletes"])
        if int(counts["widest"]) > 1:  # several copies of one row: not one row per key
            key = None
    if ctx.model.append_only and result.deleted:
        raise StepError(
            f"Model {ctx.model.name} is configured append_only, but step {record.step} "
            f"would delete or update {result.deleted} row(s) of it. Nothing was changed. "
            "Remove `append_only` from the model's config if its result can shrink, or find "
            "the input update/delete that caused this."
        )
    # Every side table's commit carries the step record: the next step tells from it whether
    # an attempt that never committed wrote there (`bookkeeping.interrupted`).
    with_record(ctx, record, lambda: write_side_tables(ctx, writes, previous, record, result),
                idempotent=False)
    ctx.checkpoint("before_commit")
    bounds = late.target_bounds(lateness, previous.waterline)
    commit_model(ctx, change, columns, result, record, bounds, key, ranges,
                 first=previous.step == 0)
    ctx.checkpoint("after_commit")
    result.waterline = dict(record.waterline)


def write_side_tables(ctx: StepContext, writes: StepWrites, previous: StepRecord,
                      record: StepRecord, result: StepResult) -> None:
    """Writes 1-3 of the module docstring, in that order."""
    for state in writes.state:
        write_state(ctx, state, record)
    if writes.held is not None:
        write_held(ctx, writes.held, record.step, result)
    if writes.quarantine is not None:
        write_quarantine(ctx, writes.quarantine, previous, record, result)


def write_state(ctx: StepContext, write: StateWrite, record: StepRecord) -> None:
    """The changed groups' new state, appended to the state table (a log, see
    `statements.latest_state`); the table's new version goes into the step record.

    An append is one INSERT, where updating the groups in place would be a MERGE (several
    times dearer on Delta). The log is compacted, in the same one statement as this step's
    write, when the rows appended since its last compaction outnumber its live groups, or after
    COMPACT_AFTER_STEPS steps. A first write and a compaction sort the groups by key, time first,
    into files of at most BULK_FILE_ROWS rows: later steps' key ranges then skip all but a few.
    """
    ctx.checkpoint("before_state")
    aggregate, state = write.aggregate, write.table
    keys, order = group_columns(aggregate), sql.time_first(group_columns(aggregate))
    name = write.stage or "state"
    live, appended, steps = record.state_log.get(name, [0, 0, 0])
    before = record.state_version if write.stage is None else record.stage_versions[write.stage]
    compact = write.fresh or appended > live or steps >= COMPACT_AFTER_STEPS
    if write.fresh:
        statement = sql.insert_state(state, write.groups.new, aggregate.state_columns,
                                     record.step, order, everything=False)
    elif compact:
        assert before is not None
        statement = sql.rewrite_state(state, before, write.groups.new, keys,
                                      aggregate.state_columns, record.step, order)
    else:
        statement = sql.insert_state(state, write.groups.new, aggregate.state_columns,
                                     record.step, ())
    settings = [(MAX_RECORDS_PER_FILE, str(BULK_FILE_ROWS))] if compact else []
    with_settings(ctx, settings, lambda: ctx.session.run(statement))
    written = ctx.delta_log.recent_commits(state, 1)[0]
    rows = int(written.metrics.get("numOutputRows", 0))
    record.state_log[name] = [rows, 0, 0] if compact else [live, appended + rows, steps + 1]
    if write.stage is None:
        record.state_version = written.version
    else:
        record.stage_versions[write.stage] = written.version
    ctx.checkpoint("after_state")


def write_held(ctx: StepContext, write: HeldWrite, step: int, result: StepResult) -> None:
    ctx.checkpoint("before_hold")
    pending = ctx.model.pending_table
    ctx.session.run(wm.mark_released(pending, write.condition, step))
    ctx.session.run(wm.hold(pending, write.candidates, write.columns, write.condition, step))
    result.held = int(ctx.session.query(wm.held_count(pending))[0]["n"])


def write_quarantine(ctx: StepContext, write: QuarantineWrite, previous: StepRecord,
                     record: StepRecord, result: StepResult) -> None:
    ctx.checkpoint("before_quarantine")
    model, step = ctx.model, record.step
    for table, step_column in ((model.late_table, "_streamsql_step"),
                               (model.waterline_table, "step")):
        if interrupted(ctx, table, previous):
            ctx.session.run(late.forget_attempt(table, step_column, step))
    if result.late:
        ctx.session.run(late.quarantine_insert(model.late_table, write.classified, write.columns,
                                               step, previous.waterline))
    ctx.session.run(late.waterline_insert(model.waterline_table, step, write.rules,
                                          record.waterline, record.max_seen))


def key_columns(columns: Sequence[Column], key: Optional[Sequence[str]]) -> List[Column]:
    if key is None:
        return []
    wanted = {name.lower() for name in key}
    return [c for c in columns if c.name.lower() in wanted]


def commit_model(ctx: StepContext, change: ModelChange, columns: Sequence[Column],
                 result: StepResult, record: StepRecord, target_bounds: Sequence[str] = (),
                 key: Optional[Sequence[str]] = None, key_ranges: Sequence[str] = (),
                 first: bool = False) -> None:
    """The model's change and the step record, in one idempotent Delta commit.

    A blind INSERT when nothing is deleted (the change as it is when it only appends: its
    commit counts it); a MERGE by key for a model that holds one row per key; otherwise a MERGE
    that matches whole rows (`statements.merge_change`); a metadata-only commit when nothing
    changes. Then checks that the commit is this run's. `key_ranges`: predicates over the model
    (alias `t`) that every key of the change meets, for a MERGE by key.

    The change a MERGE reads is materialized already: Delta need not copy it again first
    (`MATERIALIZE_SOURCE`).
    """
    target, net = ctx.model.target, change.relation
    keys = key_columns(columns, key)
    settings: List[Tuple[str, str]] = []
    if change.appends:
        statement = sql.append_change(target, net, columns)
    elif result.deleted and key is not None:
        statement = sql.merge_by_key(target, net, columns, key,
                                     list(target_bounds) + list(key_ranges))
        settings.append((MATERIALIZE_SOURCE, "none"))
    elif result.deleted:
        statement = sql.merge_change(target, net, columns, target_bounds)
        settings.append((MATERIALIZE_SOURCE, "none"))
    elif result.inserted and first and keys:
        # An aggregate's first rows, sorted by key like its state: later MERGEs by key skip
        # the files of keys they do not touch.
        statement = sql.insert_copies(target, net, columns, sql.time_first(keys))
        settings.append((MAX_RECORDS_PER_FILE, str(BULK_FILE_ROWS)))
    elif result.inserted:
        statement = sql.insert_copies(target, net, columns)
    else:
        statement = sql.mark_step(target, record.step)
    with_record(ctx, record, lambda: with_settings(
        ctx, settings, lambda: ctx.session.run(statement)), idempotent=True)
    committed, commits = newest_record(ctx, ctx.model.target_name)
    if committed is None or (committed.step, committed.run_id) != (record.step, ctx.run_id):
        raise StepError(
            f"Model {ctx.model.name}: another run completed step {record.step} at the same "
            "time; this run applied nothing. The model is consistent; run again to continue."
        )
    if change.appends:
        ours = next(commit for commit in commits
                    if StepRecord.from_json(commit.user_metadata) == committed)
        result.inserted = int(ours.metrics.get("numOutputRows", 0))
