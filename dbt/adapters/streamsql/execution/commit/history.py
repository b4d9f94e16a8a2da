"""Where the model stands: its step records, read from its Delta history.

The model's Delta history holds its step records (record.py: one per completed step, in the
commit's userMetadata). `last_step` reads the last one. Every side-table commit of a step carries
its record too (transactions.py), which is how `unfinished_side_writes` tells which of a
completed step's side-table writes a crash left undone; `record_before` finds the record a roll
forward starts from. `completed_steps` is what a reader outside a step (the generic tests) sees:
the records from the last step whose every write landed, with the model versions they made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from dbt.adapters.streamsql.execution.commit.record import (
    CREATING_OPERATIONS,
    StepRecord,
    last_record,
)
from dbt.adapters.streamsql.execution.context import StepContext
from dbt.adapters.streamsql.execution.engine.delta_log import Commit, DeltaLogReader
from dbt.adapters.streamsql.execution.shared.errors import StepError

HISTORY_PAGE = 50  # commits of the model's history read to find its last step record


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
        source = clone_source(ctx.delta_log.recent_commits(model.target_name, HISTORY_PAGE))
        if source is not None:
            raise StepError(
                f"Model {model.name}: the table {model.target_name} is a clone of {source} "
                "(dbt clone, or CREATE TABLE ... CLONE): it has that table's rows but none of "
                "its steps, state or side tables, so no step can continue from it. Run `dbt run "
                f"--full-refresh --select {model.name}` to build it as an incremental view of "
                f"its own, or leave it out of `dbt run` while the clone serves (--exclude "
                f"{model.name})."
            )
        raise StepError(
            f"Model {model.name}: the table {model.target_name} exists but was not built "
            "by incremental_view (no step record in its Delta history). Run `dbt run "
            f"--full-refresh --select {model.name}` to rebuild it as an incremental view."
        )
    return previous


def clone_source(commits: Sequence[Commit]) -> Optional[str]:
    """The table a table was cloned from (Delta's CLONE commit, newest first in `commits`:
    the oldest one that is a clone), or None when it is no clone."""
    for commit in reversed(list(commits)):
        if "CLONE" in commit.operation.upper():
            return str(commit.parameters.get("source") or "another table")
    return None


def read_last_record(ctx: StepContext) -> Optional[StepRecord]:
    """The model's last step record, reading only as much history as needed.

    Also notes the model table's current version in `ctx.target_version`, and when the record's
    commit was made in `ctx.last_committed_at`.
    """
    with ctx.role("the model's last step record"):
        record, commits = newest_record(ctx, ctx.model.target_name)
    ctx.target_version = commits[0].version if commits else None
    # the newest commit that carries a record is the step's model commit: its time ends the
    # step's cost (pipeline/step_cost.py)
    ctx.last_committed_at = next(
        (c.timestamp for c in commits if StepRecord.from_json(c.user_metadata) is not None), None
    )
    return record


def newest_record(ctx: StepContext, table: str) -> Tuple[Optional[StepRecord], List[Commit]]:
    """The newest step record in a table's history, and the commits read, newest first.

    Usually the newest commit holds it; after commits by others (OPTIMIZE, a user's ALTER)
    older ones are read, a page at a time.
    """
    return newest_record_in(ctx.delta_log, table)


def newest_record_in(log: DeltaLogReader, table: str) -> Tuple[Optional[StepRecord], List[Commit]]:
    """`newest_record`, asked of a Delta log reader."""
    commits: List[Commit] = []
    for limit in (1, HISTORY_PAGE, None):
        if limit is None:
            limit = commits[0].version + 1 if commits else 1
        commits = log.recent_commits(table, limit)
        record = last_record(commit.as_history_row() for commit in commits)
        if record is not None or len(commits) < limit:
            return record, commits
    return None, commits


def unfinished_side_writes(ctx: StepContext, last: StepRecord) -> List[str]:
    """The side tables `last` names (progress.StepRecord.side_writes) that lack its write."""
    missing = []
    for suffix in last.side_writes:
        with ctx.role(f"did step {last.step} write {ctx.model.table(suffix)}?"):
            landed = side_write_landed(ctx.delta_log, ctx.model.table_name(suffix), last)
        if not landed:
            missing.append(suffix)
    return missing


def side_write_landed(log: DeltaLogReader, table: str, last: StepRecord) -> bool:
    """Whether the side table `table` holds step `last`'s write: its newest record is that
    step's or a later one's, of the same incarnation (a step writes only after the one before
    it finished)."""
    written, _ = newest_record_in(log, table)
    return (
        written is not None
        and written.incarnation == last.incarnation
        and written.step >= last.step
    )


@dataclass(frozen=True)
class RecordedStep:
    """A step as the model's history shows it."""

    record: StepRecord
    # The model's version the step made: the newest commit that carries its record.
    version: int
    # The model's newest version before the next step's first commit (its newest version when
    # there is no next step): the step's rows, and whatever commits without a step record (an
    # OPTIMIZE, a user's write) did to them since.
    last_version: int


def step_records(log: DeltaLogReader, table: str, count: int) -> List[RecordedStep]:
    """The table's newest steps, newest first: at most `count`, of its current incarnation only
    (since its last creation or full refresh), down to step 0. Reads a page of history first,
    and the whole history only when the page holds too few."""
    commits: List[Commit] = []
    found: List[RecordedStep] = []
    for limit in (count + 10, None):
        if limit is None:
            limit = commits[0].version + 1 if commits else 1  # the whole history
        commits = log.recent_commits(table, limit)
        found, ended = incarnation_steps(commits, count)
        if ended or len(commits) < limit:
            break
    return found


def incarnation_steps(commits: List[Commit], count: int) -> Tuple[List[RecordedStep], bool]:
    """`step_records` of these commits (newest first), and whether they reach the end: step 0,
    `count` steps, or the commit before the incarnation's first."""
    found: List[RecordedStep] = []
    through = commits[0].version if commits else -1  # the newest version of the step found next
    for commit in commits:
        record = StepRecord.from_json(commit.user_metadata)
        if record is None:
            if commit.operation.upper() in CREATING_OPERATIONS:
                return found, True
            continue
        if found and record.incarnation != found[0].record.incarnation:
            return found, True
        if found and found[-1].record.step == record.step:
            through = commit.version - 1  # an earlier commit of the same step
            continue
        found.append(RecordedStep(record, commit.version, through))
        through = commit.version - 1
        if record.step == 0 or len(found) >= count:
            return found, True
    return found, False


def completed_steps(log: DeltaLogReader, table: str, count: int) -> List[RecordedStep]:
    """`step_records` from the model's last completed step on: the newest step is left out while
    a side table its record names lacks its write (the step is running, or a crash stopped it
    after its model commit; `unfinished_side_writes`). Only the newest can be unfinished: a step
    starts by finishing the one before it."""
    found = step_records(log, table, count + 1)
    if found and not all(
        side_write_landed(log, table + suffix, found[0].record)
        for suffix in found[0].record.side_writes
    ):
        found = found[1:]
    return found[:count]


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


def target_exists(ctx: StepContext) -> bool:
    """Asked of the catalog: a failing DESCRIBE would log a stack trace on the console."""
    return ctx.delta_log.exists(ctx.model.target_name)
