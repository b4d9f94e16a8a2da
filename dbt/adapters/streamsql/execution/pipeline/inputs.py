"""Phase 1 of a step: the model's inputs, their versions, and their changes.

`describe_inputs` finds each table the model reads and the version this step reads it up to,
failing with a message that names the fix when an input cannot be read incrementally (not a
Delta table, missing, change feed off). `read_changes` learns from each input's commits since the
last step how many rows its change holds and whether any of them removes a row, where the log
tells (appends, MERGE/DELETE/UPDATE with their row counts): then nothing is counted by a query.
`bind_inputs` defines the planner's placeholders of each input (plan.py: new, old, delta) as
relations pinned to versions, made readable when a statement first uses them (bindings.py).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Mapping, Optional, Sequence

from dbt.adapters.streamsql.execution.commit.record import StepRecord
from dbt.adapters.streamsql.execution.context import StepContext
from dbt.adapters.streamsql.execution.engine import statements as sql
from dbt.adapters.streamsql.execution.engine.bindings import INLINE, MATERIALIZED, VIEW
from dbt.adapters.streamsql.execution.engine.delta_log import (
    Commit,
    NotDeltaTable,
    TableMissing,
    quoted,
)
from dbt.adapters.streamsql.execution.engine.sql_session import SqlSession, describe_query
from dbt.adapters.streamsql.execution.recovery import faults
from dbt.adapters.streamsql.execution.shared.errors import StepError
from dbt.adapters.streamsql.execution.shared.input_state import InputChange, InputState
from dbt.adapters.streamsql.execution.shared.result import StepResult
from dbt.adapters.streamsql.planning.plan import (
    Column,
    InputTable,
    delta_input,
    new_input,
    old_input,
)
from dbt.adapters.streamsql.planning.references import referenced_tables


def describe_inputs(
    ctx: StepContext, compiled_sql: str, described: Optional[Dict[str, InputState]] = None
) -> List[InputState]:
    """Every table the model reads, with its columns and current version. `described`: tables
    described already (input_views.py: each table once, however many views it inlines), kept
    up to date with those this call describes."""
    found = {} if described is None else described
    names = referenced_tables(compiled_sql)
    for name in names:
        if name not in found:
            found[name] = describe_input(ctx, name)
    return [found[name] for name in names]


class InputUnreadable(StepError):
    """An input that is not a Delta table, or not in the catalog as a table: the step plans
    with its query if it is a view (input_views.py), else fails with this message."""

    def __init__(self, message: str, name: str) -> None:
        super().__init__(message)
        self.name = name


def describe_input(ctx: StepContext, name: str) -> InputState:
    model = ctx.model.name
    try:
        snapshot = ctx.delta_log.snapshot(name)
    except NotDeltaTable as exc:
        raise InputUnreadable(
            f"Model {model} reads {name}, which is not a Delta table, so its "
            "changes cannot be read. Make it a Delta table (materialized='table' or "
            "'incremental_view' on this adapter, or CONVERT TO DELTA for a source).",
            name,
        ) from exc
    except TableMissing as exc:
        raise InputUnreadable(f"Model {model} reads {name}, which does not exist.", name) from exc
    if snapshot.properties.get("delta.enableChangeDataFeed", "false").lower() != "true":
        raise StepError(
            f"Model {model} reads {name}, whose Delta change data feed is off, so "
            "the step cannot tell what changed. Enable it with: ALTER TABLE "
            f"{name} SET TBLPROPERTIES (delta.enableChangeDataFeed = true)"
        )
    return InputState(
        InputTable(name, snapshot.columns),
        quoted(name),
        snapshot.version,
        snapshot.table_id,
        size_bytes=snapshot.size_bytes,
        properties=snapshot.properties,
    )


def pinned(item: InputState, versions: Mapping[str, int]) -> InputState:
    """`item` as of the version `versions` names for it (a step being computed again)."""
    if item.table.name not in versions:
        raise StepError(f"the step being finished did not read {item.table.name}")
    return dataclasses.replace(item, version=versions[item.table.name])


def describer(session: SqlSession, inputs: Sequence[InputState]) -> Callable[[str], List[Column]]:
    """DESCRIBE QUERY of a SELECT over the inputs' `new` placeholders (for the planner)."""
    views = {new_input(i): f"(SELECT * FROM {item.relation})" for i, item in enumerate(inputs)}
    return lambda select: describe_query(session, sql.bind_placeholders(select, views))


def nothing_to_do(last: StepRecord, compiled_sql: str, read: Sequence[InputState]) -> bool:
    """Whether a run of `compiled_sql` over `read` after step `last` has nothing to do: the same
    query, every input at the version `last` read, and none of them another table since."""
    versions = {item.table.name: item.version for item in read}
    return last.unchanged(compiled_sql, versions) and faults.same_tables(last, read)


def first_read(previous: StepRecord, read: Sequence[InputState]) -> bool:
    """Whether a step after `previous` reads every input of `read` in full (none read yet)."""
    return all(previous.input_versions.get(i.table.name) is None for i in read)


def read_changes(
    ctx: StepContext, read: Sequence[InputState], previous: StepRecord
) -> List[InputChange]:
    """Each input's change since the last step, counted from its commits where they tell."""
    changes = []
    for item in read:
        before = previous.input_versions.get(item.table.name)
        change = InputChange(item, before)
        if before == item.version:
            change.rows, change.removals, change.size_bytes = 0, 0, 0
        elif before is not None:
            with ctx.role(
                f"the commits of {item.table.name} since version {before}: how many rows changed"
            ):
                commits = ctx.delta_log.commits(item.table.name, before + 1, item.version)
            change.commits = commits
            change.rewritten = any(overwrites(commit) for commit in commits)
            counts = [commit.change_rows for commit in commits]
            if len(counts) == item.version - before and None not in counts:
                change.rows = sum(rows for rows, _ in counts)  # type: ignore[misc]
                change.removals = sum(removals for _, removals in counts)  # type: ignore[misc]
            sizes = [commit.change_bytes for commit in commits]
            if len(sizes) == item.version - before and None not in sizes:
                change.size_bytes = sum(sizes)  # type: ignore[arg-type]
        changes.append(change)
    return changes


def overwrites(commit: Commit) -> bool:
    """Whether `commit` overwrote its table's rows (a WRITE in mode Overwrite)."""
    return commit.operation.upper() == "WRITE" and commit.parameters.get("mode") == "Overwrite"


def bind_inputs(
    ctx: StepContext, changes: Sequence[InputChange], result: StepResult, reads: Mapping[str, int]
) -> int:
    """Define each input's new, old and delta placeholders; count the changes read into `result`.

    Returns how many rows of the changes remove a row. `reads`: how many times the step may read
    each placeholder; a change read more than once, or one the log could not count, is
    materialized (and counted), anything else is read where it is used.
    """
    bindings, session = ctx.bindings, ctx.session
    removals = 0
    for i, change in enumerate(changes):
        item, before = change.input, change.before
        relation, cols, now, name = item.relation, item.table.columns, item.version, item.table.name
        bindings.define(
            new_input(i),
            f"new_{i}",
            sql.input_as_of(relation, now),
            role=f"{name} as of version {now}",
        )
        if before is None:  # the whole input is the change
            bindings.define(
                old_input(i),
                f"old_{i}",
                sql.empty_input(relation, now),
                role=f"{name} before the first step: nothing",
            )
            bindings.define(
                delta_input(i),
                f"delta_{i}",
                sql.input_snapshot_as_change(relation, cols, now),
                role=f"all of {name} as of version {now} (a first step's change)",
            )
            with ctx.role(f"count the rows of {name} version {now} (a first step reads them all)"):
                result.changes_read += int(
                    session.query(sql.count_rows(f"{relation} VERSION AS OF {now}"))[0]["n"]
                )
            continue
        # An older version: a view, so that Delta rebuilds its file list once at most.
        bindings.define(
            old_input(i),
            f"old_{i}",
            sql.input_as_of(relation, before),
            VIEW,
            role=f"{name} as of version {before}, before the step",
        )
        if before == now:
            change_sql = sql.input_snapshot_as_change(relation, cols, now) + " WHERE false"
            read = f"{name}: no change since version {now}"
        else:
            change_sql = sql.input_changes(item.table.name, cols, before, now)
            read = f"the changes of {name} versions {before + 1}..{now}"
        if (change.replaced or change.rewritten) and sql.matchable(cols):
            # a replacement's or an overwrite's feed is every row out and in again: netted,
            # the rows that differ, one row per copy
            change_sql = sql.netted_rows(f"({change_sql})", cols)
            read += ", netted (" + ("replaced in place" if change.replaced else "overwritten") + ")"
            change.rows = change.removals = None
        counted = change.rows is not None and change.removals is not None
        how = INLINE if counted and reads.get(delta_input(i), 0) <= 1 else MATERIALIZED
        bindings.define(delta_input(i), f"delta_{i}", change_sql, how, role=read)
        if not counted:
            changed = bindings.relation(delta_input(i))
            with ctx.role(f"count the changes of {name} versions {before + 1}..{now}"):
                counts = session.query(sql.count_changes(changed))[0]
            change.rows, change.removals = int(counts["n"]), int(counts["removals"])
        if change.replaced:
            result.notes.append(replaced_note(name, change))
        result.changes_read += change.rows or 0
        removals += change.removals or 0
    return removals


def replaced_note(name: str, change: InputChange) -> str:
    """The step line's note on an input whose change was read across its replacement."""
    versions = ", ".join(
        f"{operation} at version {version}" for version, operation in change.replaced
    )
    return (
        f"{name} was replaced in place ({versions}): read its change feed across it, "
        f"{change.rows} row(s) differ"
    )
