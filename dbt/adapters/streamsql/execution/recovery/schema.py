"""on_schema_change: a model whose query's columns no longer match its table's.

The model's SQL fingerprint does not change when `select *` reads an input that gained a
column, so each step compares the query's output columns (DESCRIBE QUERY) with the model
table's columns: those the last step record lists (`StepRecord.columns`), or, for a record
written before records listed them, the table's own (the Delta log reader's snapshot).

- A column whose type changed is refused, whatever the setting: the rows the model holds have
  the old type.
- `ignore` (dbt's default): the model keeps its columns; the step writes the query's change
  projected on them (and netted again). A column the query no longer has cannot be ignored.
- `fail`: the step fails, naming the columns.
- `append_new_columns`: new columns are added to the model's table (and to `__late` and
  `__pending`) before the step computes anything; columns the query lost stay, NULL in new
  rows.
- `sync_all_columns`: as append_new_columns, and the columns the query lost are dropped
  (Delta needs column mapping for that: the table is switched to it first).

What the new column holds in the model's existing rows: NULL, which is what the query gives when
the column is a new column of an input (`ALTER TABLE ... ADD COLUMNS` gives NULL to existing
rows) read through `*`. When that cannot be shown from the inputs' commits, the step recomputes
the model and applies the difference instead (lost_history.py), which fills the column. A model
whose state tables would need another layout (a `select distinct *`) can only be rebuilt by a
full refresh, and the step says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import List, Optional, Sequence

from dbt.adapters.streamsql.execution.commit.record import StepRecord
from dbt.adapters.streamsql.execution.commit.tables import state_aggregates
from dbt.adapters.streamsql.execution.context import StepContext
from dbt.adapters.streamsql.execution.engine import statements as sql
from dbt.adapters.streamsql.execution.engine.delta_log import Commit
from dbt.adapters.streamsql.execution.shared.errors import StepError
from dbt.adapters.streamsql.execution.shared.input_state import InputState
from dbt.adapters.streamsql.planning.plan import Column, StepPlan
from dbt.adapters.streamsql.planning.types import uncomparable_part

COLUMN_MAPPING = "delta.columnMapping.mode"


@dataclass
class SchemaChange:
    """The model's columns before the step next to its query's."""

    mode: str  # the model's on_schema_change
    table: List[Column]  # the model table's columns before the step
    query: List[Column]  # the query's output columns
    added: List[Column] = field(default_factory=list)  # in the query, not in the table
    removed: List[Column] = field(default_factory=list)  # in the table, not in the query

    @property
    def changed(self) -> bool:
        return bool(self.added or self.removed)


def compare(mode: str, table: Sequence[Column], query: Sequence[Column]) -> SchemaChange:
    """The model's columns (`table`) next to its query's, matched by name, case aside."""
    table_names = {c.name.lower() for c in table}
    query_names = {c.name.lower() for c in query}
    return SchemaChange(
        mode,
        list(table),
        list(query),
        [c for c in query if c.name.lower() not in table_names],
        [c for c in table if c.name.lower() not in query_names],
    )


def normalized_type(data_type: str) -> str:
    return "".join(data_type.lower().split())


def record_columns(record: StepRecord) -> List[Column]:
    return [Column(name, data_type) for name, data_type in record.columns]


def model_columns(ctx: StepContext, record: StepRecord) -> List[Column]:
    """The model table's columns as of `record`'s step."""
    if record.columns:
        return record_columns(record)
    return list(ctx.delta_log.snapshot(ctx.model.target_name).columns)


def check(
    ctx: StepContext,
    last: Optional[StepRecord],
    query: Sequence[Column],
    read: Sequence[InputState],
) -> Optional[SchemaChange]:
    """Compare the query's columns with the model's; refuse what the model's setting refuses.

    Writes nothing. The step keeps the comparison (`StepState.schema`) for its later phases.

    Raises:
        StepError: a column has a type no step can match rows by (`check_types`); a column
            changed type; on_schema_change 'fail' and the columns changed; 'ignore' and the
            query lost a column.
    """
    check_types(ctx.model.name, query)
    if last is None:
        return None
    model = ctx.model
    table = model_columns(ctx, last)
    change = compare(model.on_schema_change, table, query)
    by_name = {c.name.lower(): c for c in table}
    for column in query:
        old = by_name.get(column.name.lower())
        if old is not None and normalized_type(old.data_type) != normalized_type(column.data_type):
            raise StepError(
                f"Model {model.name}: column {column.name} is {column.data_type} in the "
                f"model's query{sources(read, column.name)} but {old.data_type} in its table "
                f"(since step {last.step}). A changed type cannot be applied to the rows the "
                f"model holds. Cast the column back to {old.data_type} in the model's SELECT, "
                f"or run `dbt run --full-refresh --select {model.name}` to rebuild the model "
                f"with the new type."
            )
    if not change.changed:
        return change
    described = describe(change, read)
    if change.mode == "fail":
        raise StepError(
            f"Model {model.name}: its query's columns changed since step {last.step} "
            f"({described}), and its config on_schema_change is 'fail'. Nothing was changed. "
            f"Set on_schema_change to 'append_new_columns' or 'sync_all_columns' to apply "
            f"the change to the model, or run `dbt run --full-refresh --select {model.name}`."
        )
    if change.mode == "ignore" and change.removed:
        raise StepError(
            f"Model {model.name}: its query's columns changed since step {last.step} "
            f"({described}). With on_schema_change 'ignore' (the default) the model keeps "
            f"its columns, but it cannot fill {names(change.removed)}, which the query no "
            f"longer has. Nothing was changed. Set on_schema_change to 'append_new_columns' "
            f"(keeps the column, NULL in new rows) or 'sync_all_columns' (drops it), or run "
            f"`dbt run --full-refresh --select {model.name}`."
        )
    return change


def apply(ctx: StepContext, change: Optional[SchemaChange], plan: StepPlan) -> None:
    """Alter the model's tables for append_new_columns and sync_all_columns.

    Raises:
        StepError: the change needs state tables of another layout (only a full refresh
            rebuilds those); nothing is altered then.
    """
    if change is None or not change.changed:
        return
    check_state_layout(ctx, change, plan)
    model = ctx.model
    if change.mode == "ignore":
        ctx.log(
            f"{model.name}: on_schema_change 'ignore': the query's new column(s) "
            f"{names(change.added)} are not added to the model"
        )
        return
    tables = [(model.target, model.target_name)] + [
        (model.table(suffix), model.table_name(suffix))
        for suffix in ("__late", "__pending")
        if ctx.delta_log.exists(model.table_name(suffix))
    ]
    # Against each table's columns now, not the record's: a step refused after this ran (by
    # append_only or unique_key), or killed before its commit, left them altered already.
    have = {
        name: {c.name.lower() for c in ctx.delta_log.snapshot(name).columns} for _, name in tables
    }
    if change.added:
        ctx.log(
            f"{model.name}: on_schema_change '{change.mode}': adding column(s) "
            f"{names(change.added)}"
        )
        for table, name in tables:
            missing = [c for c in change.added if c.name.lower() not in have[name]]
            if missing:
                ctx.session.run(sql.add_columns(table, missing))
    if change.removed and change.mode == "sync_all_columns":
        ctx.log(
            f"{model.name}: on_schema_change 'sync_all_columns': dropping column(s) "
            f"{names(change.removed)}"
        )
        for table, name in tables:
            present = [c for c in change.removed if c.name.lower() in have[name]]
            if not present:
                continue
            if ctx.delta_log.snapshot(name).properties.get(COLUMN_MAPPING, "none") == "none":
                ctx.session.run(
                    f"ALTER TABLE {table} SET TBLPROPERTIES ('{COLUMN_MAPPING}' = 'name')"
                )
            ctx.session.run(drop_columns(table, present))
    ctx.altered = describe_altered(change)
    ctx.target_version = ctx.latest_version(model.target_name)


def describe_altered(change: SchemaChange) -> str:
    """What `apply` did to the model's tables, for a refusal that comes after it."""
    parts = []
    if change.added:
        parts.append(f"added {names(change.added)} (NULL in its rows)")
    if change.removed and change.mode == "sync_all_columns":
        parts.append(f"dropped {names(change.removed)}")
    return f"on_schema_change '{change.mode}' " + " and ".join(parts) if parts else ""


def check_types(model: str, columns: Sequence[Column]) -> None:
    """Refuse a column whose values a step cannot match: every write matches the model's rows
    by all their columns, which takes a type Spark compares, or one with a comparable form (a
    map, a VARIANT: planning/types.py, `comparable`).

    Raises:
        StepError: a column of a type such as GEOMETRY.
    """
    for column in columns:
        part = uncomparable_part(column.data_type)
        if part is not None:
            which = (
                "which Spark cannot compare"
                if part == column.data_type.strip().lower()
                else f"whose {part} values Spark cannot compare"
            )
            raise StepError(
                f"Model {model}: column {column.name} is of type {column.data_type}, {which}, "
                f"and a step matches the model's rows by every column. Convert the column in "
                f"the model's SELECT to a "
                f"type Spark compares (e.g. st_asbinary({column.name}) for a geometry, or "
                f"CAST({column.name} AS STRING)), or leave it out."
            )


def check_state_layout(ctx: StepContext, change: SchemaChange, plan: StepPlan) -> None:
    """A plan whose state tables need other columns than they have (say, `distinct *` over an
    input that gained a column: one more group column) cannot be stepped any more."""
    for name, aggregate in state_aggregates(plan):
        table = ctx.model.table_name(f"__streamsql_{name}")
        have = [c.name.lower() for c in ctx.delta_log.snapshot(table).columns if c.name != sql.STEP]
        want = [c.name.lower() for c in aggregate.state_columns]
        if have != want:
            raise StepError(
                f"Model {ctx.model.name}: its query's columns changed ({describe(change, [])}) "
                f"in a way that changes the groups it keeps state for, which only a rebuild "
                f"can give. Nothing was changed. Run `dbt run --full-refresh --select "
                f"{ctx.model.name}`."
            )


def written_columns(
    ctx: StepContext,
    change: Optional[SchemaChange],
    previous: StepRecord,
    query: Sequence[Column],
) -> List[Column]:
    """The columns a step writes: the query's, or with 'ignore' those the model's table has.

    `change`: what `check` found this step (None: not compared, as in a step being finished)."""
    if ctx.model.on_schema_change != "ignore":
        return list(query)
    if change is not None:
        table = change.table
    elif previous.step > 0 or previous.columns:
        table = model_columns(ctx, previous)
    else:
        return list(query)
    kept = {c.name.lower() for c in table}
    return [c for c in query if c.name.lower() in kept]


def added_by_inputs(commits: Sequence[Commit]) -> List[str]:
    """Names (lower case) of the columns `ALTER TABLE ... ADD COLUMNS` commits added."""
    found = []
    for commit in commits:
        if commit.operation.upper() != "ADD COLUMNS":
            continue
        try:
            columns = json.loads(commit.parameters.get("columns") or "[]")
        except ValueError:
            continue
        for item in columns:
            column = item.get("column", item) if isinstance(item, dict) else {}
            if isinstance(column, dict) and column.get("name"):
                found.append(str(column["name"]).lower())
    return found


def drop_columns(table: str, columns: Sequence[Column]) -> str:
    return f"ALTER TABLE {table} DROP COLUMNS ({sql.column_list(columns)})"


def names(columns: Sequence[Column]) -> str:
    return ", ".join(c.name for c in columns)


def sources(read: Sequence[InputState], column: str) -> str:
    """ " (from input x)" for the inputs that have a column of that name."""
    found = [
        i.table.name for i in read if any(c.name.lower() == column.lower() for c in i.table.columns)
    ]
    return f" (from {', '.join(found)})" if found else ""


def describe(change: SchemaChange, read: Sequence[InputState]) -> str:
    parts = []
    if change.added:
        parts.append(
            "added: "
            + ", ".join(f"{c.name} {c.data_type}{sources(read, c.name)}" for c in change.added)
        )
    if change.removed:
        parts.append("no longer in the query: " + names(change.removed))
    return "; ".join(parts)
