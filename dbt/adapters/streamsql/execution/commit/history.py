"""Where the model stands: its step records, read from its Delta history.

The model's Delta history holds its step records (record.py: one per completed step, in the
commit's userMetadata). `last_step` reads the last one. Every side-table commit of a step carries
its record too (transactions.py), which is how `unfinished_side_writes` tells which of a
completed step's side-table writes a crash left undone; `record_before` finds the record a roll
forward starts from.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

from dbt.adapters.streamsql.execution.commit.record import StepRecord, last_record
from dbt.adapters.streamsql.execution.context import StepContext
from dbt.adapters.streamsql.execution.engine.delta_log import Commit
from dbt.adapters.streamsql.execution.errors import StepError

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
        raise StepError(
            f"Model {model.name}: the table {model.target_name} exists but was not built "
            "by incremental_view (no step record in its Delta history). Run `dbt run "
            f"--full-refresh --select {model.name}` to rebuild it as an incremental view."
        )
    return previous


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


def target_exists(ctx: StepContext) -> bool:
    """Asked of the catalog: a failing DESCRIBE would log a stack trace on the console."""
    return ctx.delta_log.exists(ctx.model.target_name)
