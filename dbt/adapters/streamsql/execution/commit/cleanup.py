"""Side tables kept within their retention: old `__waterline` rows go.

A model with LATENESS appends a row per rule to `__waterline` at every step: a model stepped
every five minutes adds 100,000 rows a year, which nothing reads after a while (a step's
waterline is in its step record; `waterline_within` reads the newest step's rows). Once a day, or
once per retention when that is shorter (at every step for none), a step first deletes the rows
written more than `waterline_retention` ago (30 days by default; `forever` keeps them).

The delete is safe at any moment: it runs before the step's own writes, carries no step record
(the step's history reading skips commits without one), and a step killed after it deletes
nothing more when it is taken again. The time of the last clean-up travels in the step record
(`cleaned_at`): the first step of a model, and the first one after an upgrade, only start that
clock.

`__late` is not cleaned: a step that recomputes the model (strategy `recompute`, a large change
under `auto`, a recovery from lost input history) takes every quarantined row out of the
recompute, so a row deleted from `__late` would be applied by the next such step.
"""

from __future__ import annotations

import time
from typing import Optional

from dbt.adapters.streamsql.execution.commit.writes import WATERLINE
from dbt.adapters.streamsql.execution.context import StepContext
from dbt.adapters.streamsql.execution.event_time.rules import EventTimeRules
from dbt.adapters.streamsql.execution.recovery.retention import human
from dbt.adapters.streamsql.execution.step_state import StepState

# The longest a model goes between two clean-ups (a shorter retention: that long).
CLEAN_EVERY_SECONDS = 86400.0


def clean_side_tables(
    ctx: StepContext, rules: EventTimeRules, step: StepState, now: Optional[float] = None
) -> None:
    """Delete the `__waterline` rows older than the model's retention, when a clean-up is due;
    the step's result gets a note of how many went."""
    now = time.time() if now is None else now
    previous, record = step.previous, step.record
    record.cleaned_at = previous.cleaned_at
    if previous.step == 0 or previous.cleaned_at is None:
        record.cleaned_at = now  # the clock starts
        return
    seconds = ctx.model.waterline_retention
    if not rules.lateness or seconds is None:
        return
    if now - previous.cleaned_at < min(CLEAN_EVERY_SECONDS, seconds):
        return
    table = ctx.model.table(WATERLINE)
    with ctx.role(f"remove the rows of {table} written over {human(seconds)} ago"):
        ctx.session.run(f"DELETE FROM {table} WHERE at < timestamp_seconds({now - seconds:.6f})")
    removed = deleted_rows(ctx, ctx.model.table_name(WATERLINE))
    if removed:
        step.result.notes.append(
            f"removed {removed} row(s) of {ctx.model.table_name(WATERLINE)} older than "
            f"{human(seconds)}"
        )
    record.cleaned_at = now


def deleted_rows(ctx: StepContext, table: str) -> int:
    """How many rows the table's newest commit deleted (0 when it is not a DELETE)."""
    newest = ctx.delta_log.recent_commits(table, 1)
    if not newest or newest[0].operation.upper() != "DELETE":
        return 0
    return int(newest[0].metrics.get("numDeletedRows", 0) or 0)
