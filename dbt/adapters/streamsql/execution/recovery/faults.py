"""Whether an input can still be read from where the last step left it: the faults a step checks.

A step reads each input's change feed from the version the previous step read it up to. Before
it reads, `history_fault` checks, from the input's Delta table id and its commits since that
version (which the Delta log reader gives without reading data), that this is still possible:

- the table id differs from the one the step record names, or the version went back: the input
  was dropped (or replaced) and created again. A table replaced in place (`CREATE OR REPLACE
  TABLE`, what dbt's `table` materialization runs) gets a new id from Delta but keeps its log:
  when the log's checksum file of the version the last step read still names the id the step
  record has, the schema is the one the table has now and every replacement kept the change feed
  on, the feed is read across the replacement (all rows out, all rows in; `bind_inputs` nets
  them, so the step sees only the rows that differ);
- commits the step needs are missing from the log: Delta's log retention removed them;
- a commit since then replaced the table, restored it, turned its change data feed off, or
  renamed or dropped a column (Delta cannot read a change feed across those);
- a VACUUM since then deleted files: the step checks (in the embedded session, where it can list
  the files those commits name) whether any file its read needs is gone; over SQL alone it
  assumes so.

`lost_history` tells a read that failed anyway (files deleted by hand, a VACUUM that logged no
commit) by its error. What the step does about a fault is lost_history.py's.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from dbt.adapters.streamsql.execution.commit.record import CREATING_OPERATIONS, StepRecord
from dbt.adapters.streamsql.execution.context import StepContext
from dbt.adapters.streamsql.execution.engine.delta_log import Commit, quoted
from dbt.adapters.streamsql.execution.shared.input_state import InputChange, InputState

# Operations after which an input is another table than the one the last step read.
REPLACING = CREATING_OPERATIONS | {"RESTORE"}
# Of those, the ones that replace a table in place: its log goes on (a change feed can be read
# across them when the checks above hold).
IN_PLACE = {
    "CREATE OR REPLACE TABLE",
    "REPLACE TABLE",
    "CREATE OR REPLACE TABLE AS SELECT",
    "REPLACE TABLE AS SELECT",
}
# Schema changes Delta cannot read a change feed across.
UNREADABLE_ACROSS = {
    "RENAME COLUMN": "renamed a column",
    "DROP COLUMNS": "dropped columns",
    "DROP COLUMN": "dropped a column",
}
CHANGE_FEED = "delta.enableChangeDataFeed"
COLUMN_MAPPING = "delta.columnMapping.mode"
# How Spark and Delta say that a file or a version a read needs is gone.
LOST_HISTORY_MARKERS = (
    "FAILED_READ_FILE.FILE_NOT_EXIST",
    "FileNotFoundException",
    "DELTA_MISSING_CHANGE_DATA",
    "DELTA_CHANGE_DATA_FEED_INCOMPATIBLE",
    "DELTA_FILE_NOT_FOUND",
    "DELTA_VERSIONS_NOT_CONTIGUOUS",
    "VersionNotFoundException",
    "DELTA_LOG_FILE_NOT_FOUND",
    "Cannot time travel Delta table",
    "DELTA_CDC_START_VERSION_AFTER_LATEST",
    "DELTA_MISSING_PART_FILES",
)
# Functions whose value depends on when or where the query runs, not on its inputs.


@dataclass(frozen=True)
class Fault:
    """Why an input's change since the last step cannot be read as a change feed."""

    input: str
    reason: str  # completes "<input> ..."
    first: int  # the versions the step needed: first..last
    last: int
    vacuum: bool = False  # only a VACUUM: the files the read needs may still be there

    def describe(self) -> str:
        needed = (
            f"version {self.first}"
            if self.first == self.last
            else f"versions {self.first} to {self.last}"
        )
        return f"{self.input} {self.reason} (the step needed the changes of {needed})"


def history_fault(
    name: str,
    before: Optional[int],
    now: int,
    recorded_id: Optional[str],
    current_id: Optional[str],
    commits: Optional[Sequence[Commit]],
    replaced_in_place: bool = False,
) -> Optional[Fault]:
    """Why the change of input `name` from version `before` (the last step's) to `now` cannot be
    read from its change feed; None when it can (as far as its log tells).

    `recorded_id`, `current_id`: the input's Delta table id then and now (None: unknown);
    `commits`: the input's commits after `before` up to `now`, as its log has them;
    `replaced_in_place`: `replacement_readable` found the table's replacements since `before`
    readable, so neither its new id nor those commits are a fault.
    """
    if before is None:
        return None  # a first read: the whole input, nothing of its history
    first, last = before + 1, max(now, before + 1)
    if recorded_id and current_id and recorded_id != current_id and not replaced_in_place:
        return Fault(
            name,
            "was dropped or replaced and created again since the last step "
            f"(its Delta table id was {recorded_id}, it is {current_id})",
            first,
            last,
        )
    if now < before:
        return Fault(
            name,
            f"is at version {now}, before the version {before} the last step "
            "read: it was created again",
            first,
            last,
        )
    if now == before:
        return None
    found = {commit.version: commit for commit in commits or ()}
    missing = [v for v in range(first, now + 1) if v not in found]
    if missing:
        gone = (
            f"version {missing[0]}"
            if len(missing) == 1
            else f"versions {missing[0]} to {missing[-1]}"
        )
        return Fault(
            name,
            f"no longer has the log of {gone} (Delta's log retention, "
            "delta.logRetentionDuration, removed it)",
            first,
            now,
        )
    vacuum: Optional[Fault] = None
    for version in range(first, now + 1):
        commit = found[version]
        operation = commit.operation.upper()
        if operation in REPLACING and not (replaced_in_place and operation in IN_PLACE):
            return Fault(
                name, f"was replaced at version {version} ({commit.operation})", first, now
            )
        if operation in UNREADABLE_ACROSS:
            return Fault(
                name,
                f"{UNREADABLE_ACROSS[operation]} at version {version}, which "
                "its change feed cannot be read across",
                first,
                now,
            )
        changed = changed_properties(commit)
        if operation in ("SET TBLPROPERTIES", "UNSET TBLPROPERTIES"):
            if CHANGE_FEED in changed and (
                operation == "UNSET TBLPROPERTIES" or str(changed[CHANGE_FEED]).lower() != "true"
            ):
                return Fault(
                    name, f"had its change data feed turned off at version {version}", first, now
                )
            if COLUMN_MAPPING in changed:
                return Fault(
                    name,
                    f"changed its column mapping at version {version}, which "
                    "its change feed cannot be read across",
                    first,
                    now,
                )
        if operation in ("VACUUM START", "VACUUM END") and vacuum is None:
            deleted = commit.metrics.get("numDeletedFiles", commit.metrics.get("numFilesToDelete"))
            if deleted is None or str(deleted) != "0":
                vacuum = Fault(
                    name,
                    f"was vacuumed at version {version}, which may have "
                    "deleted files of those versions",
                    first,
                    now,
                    vacuum=True,
                )
    return vacuum


def changed_properties(commit: Commit) -> dict:
    """The table properties a SET (values) or UNSET (keys, values None) TBLPROPERTIES names."""
    text = commit.parameters.get("properties")
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list):
        return {str(key): None for key in value}
    return {}


def same_tables(record: Optional[StepRecord], read: Sequence[InputState]) -> bool:
    """Whether every input is the table (by Delta table id) the record's step read."""
    if record is None:
        return True
    return all(record.input_ids.get(item.table.name) in (None, "", item.table_id) for item in read)


def in_place_replacements(
    before: Optional[int], now: int, commits: Optional[Sequence[Commit]]
) -> List[Commit]:
    """The commits after `before` up to `now` that replaced the table in place, when the log has
    every one of those commits (else none: a gap is a fault of its own)."""
    if before is None or now <= before or commits is None:
        return []
    found = {commit.version for commit in commits}
    if any(v not in found for v in range(before + 1, now + 1)):
        return []
    return [c for c in commits if before < c.version <= now and c.operation.upper() in IN_PLACE]


def replacement_readable(
    replacements: Sequence[Commit],
    recorded_id: Optional[str],
    identity: Optional[Tuple[str, str]],
    now_identity: Optional[Tuple[str, str]],
) -> bool:
    """Whether the change feed can be read across `replacements` (in_place_replacements):
    `identity`, `now_identity`: (table id, schema) from the log's checksum files of the version
    the last step read and of the version now (None: unknown). Only when the table at the
    version the last step read is the table it read (the id the step record names: a table
    dropped and created again has a log of its own that may have reached that version too), the
    schema did not change, and every replacement kept the change feed on."""
    if not replacements or not recorded_id or identity is None or now_identity is None:
        return False
    if identity[0] != recorded_id or identity[1] != now_identity[1]:
        return False
    return all(
        str(changed_properties(commit).get(CHANGE_FEED, "")).lower() == "true"
        for commit in replacements
    )


def log_identities(
    ctx: StepContext, name: str, versions: Sequence[int]
) -> Dict[int, Tuple[str, str]]:
    """(table id, schema) of table `name` at each of `versions`, from the checksum files Delta
    writes beside each commit (a DESCRIBE DETAIL for the table's location, then one small read
    per version); a version without one is left out."""
    try:
        location = str(ctx.session.query(f"DESCRIBE DETAIL {quoted(name)}")[0]["location"])
    except Exception:
        return {}
    found: Dict[int, Tuple[str, str]] = {}
    for version in versions:
        path = f"{location.rstrip('/')}/_delta_log/{version:020d}.crc"
        try:
            rows = ctx.session.query(
                f"SELECT metadata.id AS id, metadata.schemaString AS schema FROM json.`{path}`"
            )
        except Exception:
            continue
        if rows and rows[0].get("id"):
            found[version] = (str(rows[0]["id"]), str(rows[0]["schema"]))
    return found


def input_fault(ctx: StepContext, change: InputChange, previous: StepRecord) -> Optional[Fault]:
    """`history_fault` of one input, with a VACUUM's effect checked where it can be, and a
    replacement in place checked against the log's checksum files (then `change.replaced` names
    the replacing commits)."""
    item = change.input
    recorded_id = previous.input_ids.get(item.table.name)
    replacements = in_place_replacements(change.before, item.version, change.commits)
    readable = False
    if replacements and change.before is not None:
        with ctx.role(
            f"{item.table.name} was replaced in place since version {change.before}: its table "
            f"id and schema then and now, from its log's checksum files"
        ):
            found = log_identities(ctx, item.table.name, [change.before, item.version])
        readable = replacement_readable(
            replacements, recorded_id, found.get(change.before), found.get(item.version)
        )
    fault = history_fault(
        item.table.name,
        change.before,
        item.version,
        recorded_id,
        item.table_id,
        change.commits,
        replaced_in_place=readable,
    )
    if fault is None and readable:
        change.replaced = [(c.version, c.operation) for c in replacements]
    if fault is not None and fault.vacuum:
        gone = ctx.delta_log.missing_files(item.table.name, fault.first, fault.last)
        if gone == []:
            return None
        if gone:
            fault = dataclasses.replace(
                fault,
                reason=f"was vacuumed, which deleted {len(gone)} file(s) of those "
                f"versions (e.g. {gone[0].rsplit('/', 1)[-1]})",
            )
    return fault


def lost_history(error: BaseException) -> bool:
    """Whether a failed step failed because a file or version of a table's history is gone."""
    text = str(error)
    return any(marker in text for marker in LOST_HISTORY_MARKERS)
