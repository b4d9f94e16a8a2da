"""unique_key: the model's merge key, checked to be unique by every step.

With `unique_key` a model holds at most one row per key. Each step checks that before it
commits: the keys its change touches, counted in the model's table plus the change, may not
come out above one. A step that would break it fails, naming the model, the key and a value,
and writes nothing. A change that removes rows is then applied by key (model_writes.merge_by_key): a
row whose key stays is updated in place, which the model's change feed shows as an
update_preimage/update_postimage pair.

A LATENESS or WATERMARK column outside the key could split an update of one row into a late (or
held) delete and an on-time insert, leaving two rows with the key: such a config is refused.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

from dbt.adapters.streamsql.execution.context import StepContext
from dbt.adapters.streamsql.execution.engine import statements as sql
from dbt.adapters.streamsql.execution.shared.errors import StepError
from dbt.adapters.streamsql.execution.shared.writes import ModelChange
from dbt.adapters.streamsql.planning.plan import WEIGHT, Column, StepPlan


def key_columns(
    ctx: StepContext, columns: Sequence[Column], event_time_columns: Sequence[str]
) -> Optional[List[str]]:
    """The model's unique_key, as its output columns' names; None without one.

    Raises:
        StepError: a key column is not an output column, or a LATENESS or WATERMARK column is
            not part of the key.
    """
    wanted = list(ctx.model.unique_key)
    if not wanted:
        return None
    by_name = {c.name.lower(): c.name for c in columns}
    unknown = [name for name in wanted if name.lower() not in by_name]
    if unknown:
        raise StepError(
            f"Model {ctx.model.name}: config unique_key names {', '.join(unknown)}, which the "
            f"model does not have (its columns: {', '.join(c.name for c in columns)}). Name "
            "output columns of the model."
        )
    key = [by_name[name.lower()] for name in wanted]
    outside = [name for name in event_time_columns if name.lower() not in {k.lower() for k in key}]
    if outside:
        raise StepError(
            f"Model {ctx.model.name}: config unique_key ({', '.join(key)}) leaves out "
            f"{', '.join(outside)}, which LATENESS or WATERMARK judge: a late or held half of "
            "an update would leave two rows with one key. Add those columns to unique_key, or "
            "remove unique_key."
        )
    return key


def merge_key(
    plan: StepPlan, lateness_and_watermark_columns: Sequence[str]
) -> Optional[Sequence[str]]:
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


def check_unique(
    ctx: StepContext,
    change: ModelChange,
    columns: Sequence[Column],
    key: Optional[Sequence[str]],
    step: int,
) -> None:
    """Fail unless every key the change touches has at most one row after the step.

    Raises:
        StepError: the model would hold two rows or more with one key.
    """
    if not key:
        return
    wanted = {name.lower() for name in key}
    keys = [c for c in columns if c.name.lower() in wanted]
    cols, groups = sql.grouped_columns(keys), sql.grouping(keys)
    if sql.groupable(keys):
        touched = f"(SELECT DISTINCT {cols} FROM {change.relation})"
    else:  # Spark has no DISTINCT of a map
        touched = f"(SELECT {cols} FROM {change.relation} GROUP BY {groups})"
    counted = (
        f"SELECT {sql.column_list(keys, 't.')}, CAST(1 AS BIGINT) AS n "
        f"FROM {ctx.model.target} t LEFT SEMI JOIN {touched} c "
        f"ON {sql.null_safe_match(keys, 't', 'c')} "
        f"UNION ALL SELECT {sql.column_list(keys)}, {WEIGHT} AS n FROM {change.relation}"
    )
    with ctx.role("unique_key: would a key have two rows after the step?"):
        rows = ctx.session.query(
            f"SELECT {cols}, SUM(n) AS n FROM ({counted}) GROUP BY {groups} "
            "HAVING SUM(n) > 1 LIMIT 1"
        )
    if rows:
        row = rows[0]
        value = ", ".join(f"{c.name} = {row[c.name]!r}" for c in keys)
        raise StepError(
            f"Model {ctx.model.name}: unique_key ({', '.join(c.name for c in keys)}) would not "
            f"be unique after step {step}: the model would hold {row['n']} rows with {value}. "
            f"{ctx.nothing_changed()} The model's query gives several rows for that key: fix the "
            f"inputs or the query, or remove unique_key."
        )
