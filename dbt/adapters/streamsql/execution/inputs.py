"""Phase 1 of a step: the model's inputs, their versions, and their changes as views.

`describe_inputs` finds each table the model reads and the version this step reads it up to,
failing with a message that names the fix when an input cannot be read incrementally (not a
Delta table, missing, change feed off). `bind_inputs` then binds the planner's placeholders of
each input (plan.py: new, old, delta) to views pinned to versions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Sequence, Tuple

from dbt.adapters.streamsql.execution import statements as sql
from dbt.adapters.streamsql.execution.context import StepContext, StepError, StepResult
from dbt.adapters.streamsql.execution.progress import StepRecord
from dbt.adapters.streamsql.execution.sql_session import SqlSession
from dbt.adapters.streamsql.planning.plan import (
    WEIGHT,
    Column,
    InputTable,
    StagePlan,
    delta_input,
    new_input,
    old_input,
)
from dbt.adapters.streamsql.planning.references import referenced_tables

# How Spark/Delta say that DESCRIBE HISTORY met a table that is not a Delta table.
NOT_DELTA_MARKERS = ("DELTA_MISSING_DELTA_TABLE", "DELTA_ONLY_OPERATION", "not a Delta table",
                     "only supported for Delta tables")


@dataclass
class InputState:
    table: InputTable
    relation: str  # quoted name to use in SQL
    version: int


def describe_inputs(ctx: StepContext, compiled_sql: str) -> List[InputState]:
    """Every table the model reads, with its columns and current version."""
    return [describe_input(ctx, name) for name in referenced_tables(compiled_sql)]


def describe_input(ctx: StepContext, name: str) -> InputState:
    session, model = ctx.session, ctx.model.name
    relation = ".".join(sql.quote(part) for part in name.split("."))
    try:
        history = session.query(f"DESCRIBE HISTORY {relation} LIMIT 1")
    except Exception as exc:
        message = str(exc)
        if any(marker in message for marker in NOT_DELTA_MARKERS):
            raise StepError(
                f"Model {model} reads {name}, which is not a Delta table, so its "
                "changes cannot be read. Make it a Delta table (materialized='table' or "
                "'incremental_view' on this adapter, or CONVERT TO DELTA for a source)."
            ) from exc
        if "TABLE_OR_VIEW_NOT_FOUND" in message or "not found" in message.lower():
            raise StepError(
                f"Model {model} reads {name}, which does not exist (or is a view; "
                "incremental views read tables: materialize it as a table or incremental_view)."
            ) from exc
        raise
    properties = {row["key"]: row["value"]
                  for row in session.query(f"SHOW TBLPROPERTIES {relation}")}
    if properties.get("delta.enableChangeDataFeed", "false").lower() != "true":
        raise StepError(
            f"Model {model} reads {name}, whose Delta change data feed is off, so "
            "the step cannot tell what changed. Enable it with: ALTER TABLE "
            f"{name} SET TBLPROPERTIES (delta.enableChangeDataFeed = true)"
        )
    columns = tuple(describe_table(session, relation))
    return InputState(InputTable(name, columns), relation, int(history[0]["version"]))


def describe_table(session: SqlSession, relation: str) -> List[Column]:
    return [Column(row["col_name"], row["data_type"])
            for row in describe_rows(session, f"DESCRIBE TABLE {relation}")]


def describe_query(session: SqlSession, select: str) -> List[Column]:
    body = select.strip().rstrip(";")
    return [Column(row["col_name"], row["data_type"])
            for row in describe_rows(session, f"DESCRIBE QUERY {body}")]


def describe_rows(session: SqlSession, statement: str) -> List[Dict[str, Any]]:
    """The column rows of a DESCRIBE, without the partition and detail sections after them."""
    rows = []
    for row in session.query(statement):
        name = (row.get("col_name") or "").strip()
        if not name or name.startswith("#"):
            break  # partition and detail sections follow a blank or '#' line
        rows.append(row)
    return rows


def describer(session: SqlSession, inputs: Sequence[InputState]) -> Callable[[str], List[Column]]:
    """DESCRIBE QUERY of a SELECT over the inputs' `new` placeholders (for the planner)."""
    views = {new_input(i): f"(SELECT * FROM {item.relation})" for i, item in enumerate(inputs)}
    return lambda select: describe_query(session, sql.bind_placeholders(select, views))


def describe_views(inputs: Sequence[InputState], stages: Sequence[StagePlan]) -> Dict[str, str]:
    """Relations with the columns of every placeholder, to DESCRIBE a plan's SQL with."""
    views: Dict[str, str] = {}
    for i, item in enumerate(inputs):
        views[new_input(i)] = views[old_input(i)] = f"(SELECT * FROM {item.relation})"
        views[delta_input(i)] = (f"(SELECT *, CAST(1 AS BIGINT) AS {WEIGHT} "
                                 f"FROM {item.relation})")
    for stage in stages:
        views[new_input(stage.position)] = views[old_input(stage.position)] = (
            f"({sql.typed_nothing(stage.columns)})")
        views[delta_input(stage.position)] = (
            f"({sql.typed_nothing(list(stage.columns) + [Column(WEIGHT, 'bigint')])})")
    return views


def bind_inputs(ctx: StepContext, inputs: Sequence[InputState], previous: StepRecord,
                result: StepResult, cache_snapshots: bool = True) -> Tuple[Dict[str, str], int]:
    """Views of each input's new, old and delta; and how many delta rows are removals.

    Counts the changes read into `result`. `cache_snapshots`: a first step's change is an
    input's whole snapshot; without it, that change is read again where needed rather than
    copied into memory.
    """
    session, views_of_step = ctx.session, ctx.views
    views: Dict[str, str] = {}
    removals = 0
    for i, item in enumerate(inputs):
        name, cols, now = item.table.name, item.table.columns, item.version
        before = previous.input_versions.get(name)
        views[new_input(i)] = views_of_step.view(f"new_{i}", sql.input_as_of(item.relation, now))
        if before is None:
            views[old_input(i)] = views_of_step.view(f"old_{i}",
                                                     sql.empty_input(item.relation, now))
            change = sql.input_snapshot_as_change(item.relation, cols, now)
            if not cache_snapshots:
                views[delta_input(i)] = views_of_step.view(f"delta_{i}", change)
                result.changes_read += int(session.query(
                    sql.count_rows(f"{item.relation} VERSION AS OF {now}"))[0]["n"])
                continue
        else:
            views[old_input(i)] = views_of_step.view(f"old_{i}",
                                                     sql.input_as_of(item.relation, before))
            if before == now:
                change = sql.input_snapshot_as_change(item.relation, cols, now) + " WHERE false"
            else:
                change = sql.input_changes(name, cols, before, now)
        views[delta_input(i)] = views_of_step.materialize(f"delta_{i}", change)
        counts = session.query(sql.count_changes(views[delta_input(i)]))[0]
        result.changes_read += int(counts["n"])
        removals += int(counts["removals"])
    return views, removals
