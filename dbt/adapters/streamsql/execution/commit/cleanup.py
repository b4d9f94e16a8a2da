"""Side tables kept within their retention: old `__waterline` rows and released `__pending`
rows go.

A model with LATENESS appends a row per rule to `__waterline` at every step: a model stepped
every five minutes adds 100,000 rows a year, which nothing reads after a while (a step's
waterline is in its step record; `waterline_within` reads the newest step's rows). A model with
WATERMARK keeps in `__pending` every change it held, marked with the step that released it;
steps read only the rows still held (and those a step not yet completed released). Once a day,
or once per retention when that is shorter (at every step for none), a step first deletes the
`__waterline` rows written more than `waterline_retention` ago and the `__pending` rows released
more than `pending_retention` ago (30 days each by default; `forever` keeps them).

`__pending` has no release time: the step record keeps, per clean-up within the retention, the
last completed step and the time (`cleanups`). Rows released by a step no later than the newest
such step whose time is beyond the retention go, so a released row stays at least the retention
and at most a clean-up interval longer.

The deletes are safe at any moment: they run before the step's own writes, carry no step record
(the step's history reading skips commits without one), and a step killed after them deletes
nothing more when it is taken again. The time of the last clean-up travels in the step record
(`cleaned_at`): the first step of a model, and the first one after an upgrade, only start that
clock.

`__late` is not cleaned: a step that recomputes the model (strategy `recompute`, a large change
under `auto`, a recovery from lost input history) takes every quarantined row out of the
recompute, so a row deleted from `__late` would be applied by the next such step.
"""

from __future__ import annotations

import time
from typing import Dict, Optional

from dbt.adapters.streamsql.execution.context import StepContext
from dbt.adapters.streamsql.execution.event_time.rules import EventTimeRules
from dbt.adapters.streamsql.execution.event_time.watermark import RELEASED_STEP
from dbt.adapters.streamsql.execution.shared.intervals import human
from dbt.adapters.streamsql.execution.shared.writes import PENDING, WATERLINE
from dbt.adapters.streamsql.execution.step_state import StepState

# The longest a model goes between two clean-ups (a shorter retention: that long).
CLEAN_EVERY_SECONDS = 86400.0


def clean_side_tables(
    ctx: StepContext, rules: EventTimeRules, step: StepState, now: Optional[float] = None
) -> None:
    """Delete the `__waterline` rows and the released `__pending` rows beyond the model's
    retentions, when a clean-up is due; the step's result gets a note of how many went."""
    now = time.time() if now is None else now
    previous, record, model = step.previous, step.record, ctx.model
    record.cleaned_at = previous.cleaned_at
    record.cleanups = [list(c) for c in previous.cleanups]
    retentions: Dict[str, float] = {}
    if rules.lateness and model.waterline_retention is not None:
        retentions[WATERLINE] = model.waterline_retention
    if rules.watermark and model.pending_retention is not None:
        retentions[PENDING] = model.pending_retention
    if previous.step == 0 or previous.cleaned_at is None:
        record.cleaned_at = now  # the clock starts
        record.cleanups = [[previous.step, now]] if PENDING in retentions else []
        return
    if not retentions or now - previous.cleaned_at < min(CLEAN_EVERY_SECONDS, *retentions.values()):
        return
    if WATERLINE in retentions:
        _delete(
            ctx,
            step,
            WATERLINE,
            f"at < timestamp_seconds({now - retentions[WATERLINE]:.6f})",
            f"older than {human(retentions[WATERLINE])}",
        )
    # every step up to the previous one had completed by now: what they released counts from now
    cleanups = [list(c) for c in previous.cleanups] + [[previous.step, now]]
    if PENDING in retentions:
        cutoff = now - retentions[PENDING]
        beyond = [c for c in cleanups if c[1] <= cutoff]
        if beyond:
            last = int(max(c[0] for c in beyond))
            _delete(
                ctx,
                step,
                PENDING,
                f"{RELEASED_STEP} <= {last}",
                f"released over {human(retentions[PENDING])} ago",
            )
            # the newest clean-up beyond the retention stands for the older ones
            cleanups = [c for c in cleanups if c[1] > cutoff or c[0] == last]
        record.cleanups = cleanups
    else:
        record.cleanups = []
    record.cleaned_at = now


def _delete(ctx: StepContext, step: StepState, suffix: str, condition: str, which: str) -> None:
    """Delete the rows of the model's side table `suffix` that `condition` picks; the step line
    says how many went (`which`: what they are)."""
    table = ctx.model.table(suffix)
    with ctx.role(f"remove the rows of {table} {which}"):
        ctx.session.run(f"DELETE FROM {table} WHERE {condition}")
    removed = deleted_rows(ctx, ctx.model.table_name(suffix))
    if removed:
        step.result.notes.append(
            f"removed {removed} row(s) of {ctx.model.table_name(suffix)} {which}"
        )


def deleted_rows(ctx: StepContext, table: str) -> int:
    """How many rows the table's newest commit deleted (0 when it is not a DELETE)."""
    newest = ctx.delta_log.recent_commits(table, 1)
    if not newest or newest[0].operation.upper() != "DELETE":
        return 0
    return int(newest[0].metrics.get("numDeletedRows", 0) or 0)
