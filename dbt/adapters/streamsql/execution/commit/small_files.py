"""Tables that stay a few files each: a step compacts the model's table and its side tables.

Every step adds a file or two to the model's table and to `__late`, `__waterline` and
`__pending`: a view stepped every five minutes would hold 100,000 files after a year, and each
read after a commit lists them all (under about 50 files Delta keeps the list in the version's
checksum; above, it is rebuilt from the log). So every COMPACT_CHECK_EVERY-th step first reads
each table's file count and size from its version's checksum (no Spark job), and a table holding
more than COMPACT_ABOVE_FILES files averaging under SMALL_FILE_BYTES gets an `OPTIMIZE` that
packs its files under SMALL_FILE_BYTES into files of up to PACKED_FILE_BYTES. A table of small
files thus holds at most about COMPACT_ABOVE_FILES files plus what ten steps add. (A table of
large files with small ones among them is compacted once the small ones bring the average
under SMALL_FILE_BYTES.) The state tables have their own rewrite
(tables.compact_state_tables).

`OPTIMIZE` changes no row: its commit is marked as no data change, so the change feed, the
models that read this one and the step's own history reading all skip it. It runs before the
step's own writes and carries no step record, so a step killed after it is simply taken again.
A compaction that fails (another writer's conflicting commit) is reported in the step line and
the step goes on: the files wait for the next check. The config `compact_files: false` leaves
compaction to the user.

Compaction, the state tables' rewrites and every MERGE leave the replaced files on disk (time
travel reads them) until the user runs `VACUUM`, which stays the user's decision. On the same
steps, `tidy_files` also sums the data files each table of the model keeps on this machine's
disk (no statement; a table elsewhere is not checked); where the files its current version no
longer uses outweigh its live data (UNUSED_SHARE, and at least UNUSED_MIN_BYTES), the step line
says so and names the command.
"""

from __future__ import annotations

import os
import time
from typing import List, Optional
from urllib.parse import unquote, urlparse

from dbt.adapters.streamsql.execution.commit.transactions import with_settings
from dbt.adapters.streamsql.execution.context import StepContext
from dbt.adapters.streamsql.execution.engine.delta_log import TableMissing, TableSnapshot
from dbt.adapters.streamsql.execution.event_time.rules import EventTimeRules
from dbt.adapters.streamsql.execution.shared.result import human_size
from dbt.adapters.streamsql.execution.shared.writes import LATE, PENDING, WATERLINE
from dbt.adapters.streamsql.execution.step_state import StepState

COMPACT_CHECK_EVERY = 10  # steps
COMPACT_ABOVE_FILES = 25
SMALL_FILE_BYTES = 32 * 1024 * 1024
PACKED_FILE_BYTES = 128 * 1024 * 1024
UNUSED_SHARE = 1.0  # warn when the files the current version does not use exceed its data ...
UNUSED_MIN_BYTES = 64 * 1024 * 1024  # ... and this


def compactable_tables(rules: EventTimeRules) -> List[str]:
    """The suffixes of the model's tables this rule compacts: its own and its side tables."""
    suffixes = [""]
    if rules.lateness:
        suffixes += [LATE, WATERLINE]
    if rules.watermark:
        suffixes.append(PENDING)
    return suffixes


def tidy_files(ctx: StepContext, rules: EventTimeRules, step: StepState) -> None:
    """On every COMPACT_CHECK_EVERY-th step, one read of each of the model's tables' snapshots:
    OPTIMIZE the model's table and side tables that hold too many small files (the step line
    says what was packed, and how long it took), then a note for each of those and of its state
    tables whose files not in use call for a VACUUM."""
    if step.record.step % COMPACT_CHECK_EVERY:
        return
    compactable = compactable_tables(rules) if ctx.model.compact_files else []
    state = [f"__streamsql_{s}" for s in step.record.state_tables]
    for suffix in compactable_tables(rules) + state:
        name = ctx.model.table_name(suffix)
        try:
            snapshot = ctx.delta_log.snapshot(name)
            if suffix in compactable and _compact(ctx, suffix, snapshot, step):
                snapshot = ctx.delta_log.snapshot(name)  # its files now: the packed ones live
        except TableMissing:
            continue
        note = unused_files_note(name, snapshot)
        if note:
            step.result.notes.append(note)


def _compact(ctx: StepContext, suffix: str, snapshot: TableSnapshot, step: StepState) -> bool:
    """OPTIMIZE the model's table `suffix` if it holds too many small files; whether it did."""
    files, size = snapshot.num_files, snapshot.size_bytes
    if files is None or files <= COMPACT_ABOVE_FILES:
        return False
    if size is not None and size >= files * SMALL_FILE_BYTES:
        return False  # large files on average: little for an OPTIMIZE to gain
    name = ctx.model.table_name(suffix)
    started = time.time()
    settings = [
        ("spark.databricks.delta.optimize.minFileSize", str(SMALL_FILE_BYTES)),
        ("spark.databricks.delta.optimize.maxFileSize", str(PACKED_FILE_BYTES)),
    ]
    table = ctx.model.table(suffix)
    try:
        with ctx.role(f"compact {table}: {files} files, averaging under 32 MB"):
            with_settings(ctx, settings, lambda: ctx.session.run(f"OPTIMIZE {table}"))
    except Exception as exc:  # a conflicting commit: the next check tries again
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        step.result.notes.append(f"compacting {name} failed, left for later: {first_line}")
        return False
    newest = ctx.delta_log.recent_commits(name, 1)
    if newest and newest[0].operation.upper() == "OPTIMIZE":
        metrics = newest[0].metrics
        step.result.notes.append(
            f"compacted {name}: {metrics.get('numRemovedFiles', '?')} files into "
            f"{metrics.get('numAddedFiles', '?')} in {time.time() - started:.1f} s"
        )
    return True


def unused_files_note(name: str, snapshot: TableSnapshot) -> Optional[str]:
    """The step line's warning when table `name`'s files not in use outweigh its live data."""
    unused = unused_bytes(snapshot.location, snapshot.size_bytes)
    live = snapshot.size_bytes or 0
    if unused is None or unused < UNUSED_MIN_BYTES or unused <= UNUSED_SHARE * live:
        return None
    return (
        f"{name} holds {human_size(unused)} in files its current version no longer uses, beside "
        f"{human_size(live)} of data: VACUUM {name} deletes those older than the table's "
        "retention (delta.deletedFileRetentionDuration, 7 days by default)"
    )


def unused_bytes(location: Optional[str], live: Optional[int]) -> Optional[int]:
    """The bytes of a table's data files (change-data files included) on disk beyond the
    `live` bytes its current version uses: what VACUUM deletes once they are old enough. None
    where the table's files are not on this machine's file system, or its size is unknown."""
    if not location or live is None:
        return None
    parsed = urlparse(location)
    root = unquote(parsed.path)
    if parsed.scheme not in ("", "file") or not os.path.isdir(root):
        return None
    on_disk = 0
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = [name for name in subfolders if name != "_delta_log"]
        for name in files:
            if name.endswith(".parquet") and not name.startswith("."):
                try:
                    on_disk += os.path.getsize(os.path.join(folder, name))
                except OSError:  # deleted meanwhile (a VACUUM)
                    continue
    return max(on_disk - live, 0)
