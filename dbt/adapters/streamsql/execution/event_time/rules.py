"""Phase 4 of a step: event time. WATERMARK first, then LATENESS, on the model's change.

`event_time_rules` reads and checks the model's config before the step writes anything (a
wrong config fails the step with the model, the config and the fix named). `apply_event_time`
then turns the model's change into the change to apply: WATERMARK holds back what the data has
not moved past yet and releases what it now allows (watermark.py has the rule); LATENESS sets
aside what is late, NULL or too far in the future, and moves the waterline (lateness.py). Both
only compute: what they write (held rows, quarantined rows, waterlines) is described in the
step's `StepWrites` and written by the commit protocol (commit/protocol.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from dbt.adapters.streamsql.execution.context import StepContext
from dbt.adapters.streamsql.execution.engine import statements as sql
from dbt.adapters.streamsql.execution.engine.views import inline
from dbt.adapters.streamsql.execution.event_time import lateness as late
from dbt.adapters.streamsql.execution.event_time import readmit
from dbt.adapters.streamsql.execution.event_time import watermark as wm
from dbt.adapters.streamsql.execution.shared.errors import StepError
from dbt.adapters.streamsql.execution.shared.lateness_rule import LatenessRule
from dbt.adapters.streamsql.execution.shared.writes import HeldWrite, QuarantineWrite
from dbt.adapters.streamsql.execution.step_state import StepState
from dbt.adapters.streamsql.planning.plan import WEIGHT, Column


@dataclass
class EventTimeRules:
    lateness: List[LatenessRule]
    watermark: List[wm.WatermarkRule]

    @property
    def columns(self) -> List[str]:
        """Every column a LATENESS or WATERMARK rule names."""
        return [rule.column.name for rule in list(self.lateness) + list(self.watermark)]


def event_time_rules(ctx: StepContext, output_columns: Sequence[Column]) -> EventTimeRules:
    """The model's LATENESS and WATERMARK, checked before the step writes anything."""
    model = ctx.model
    try:
        rules = late.lateness_rules(
            model.name,
            output_columns,
            model.lateness,
            model.max_future,
            model.final_state_retention,
        )
        held = wm.watermark_rules(model.name, output_columns, model.watermark)
    except late.LatenessConfigError as exc:
        raise StepError(str(exc)) from exc
    for hold_rule in held:
        try:
            with ctx.role(
                f"check watermark[{hold_rule.column.name}]: can the column and its delay be added?"
            ):
                ctx.session.query(wm.addition_check(hold_rule))
        except Exception as exc:
            raise StepError(
                f"Model {model.name}: config watermark[{hold_rule.column.name}] = "
                f"{hold_rule.delay!r} cannot be added to column {hold_rule.column.name} of "
                f"type {hold_rule.column.data_type}. Use an INTERVAL for timestamps and "
                f"dates and a number for numeric columns. Spark said: "
                f"{str(exc).splitlines()[0][:300]}"
            ) from exc
    for rule in rules:
        amounts = [("lateness", rule.lateness)]
        if rule.final_state:  # set apart from the lateness: its type is checked too
            amounts.append(("final_state_retention", rule.final_state))
        for config_name, amount in amounts:
            check_subtraction(ctx, rule, config_name, amount)
    return EventTimeRules(rules, held)


def check_subtraction(ctx: StepContext, rule: LatenessRule, config_name: str, amount: str) -> None:
    """Fails the step, naming the config, unless `amount` can be subtracted from the rule's
    column and leaves a value of the column's type."""
    try:
        with ctx.role(
            f"check {config_name}[{rule.column.name}]: the type of the column minus "
            + ("its lateness" if config_name == "lateness" else "it")
        ):
            described = ctx.session.query(late.subtraction_check(rule, amount))
        problem = late.subtraction_error(rule, described[0]["data_type"], amount)
    except Exception as exc:
        problem = str(exc).splitlines()[0][:300]
    if problem:
        raise StepError(
            f"Model {ctx.model.name}: config {config_name}[{rule.column.name}] = "
            f"{amount!r} cannot be subtracted from column {rule.column.name} of "
            f"type {rule.column.data_type}: {problem}. Use an INTERVAL for timestamps "
            f'and dates (e.g. "INTERVAL 1 HOUR") and a number for numeric columns.'
        )


def apply_event_time(
    ctx: StepContext,
    step: StepState,
    net: str,
    columns: Sequence[Column],
    rules: EventTimeRules,
    release_all: bool = False,
) -> str:
    """The change to apply to the model: WATERMARK, then LATENESS, applied to `net`."""
    if rules.watermark:
        net = apply_watermark(ctx, step, net, columns, rules.watermark, release_all)
    if rules.lateness:
        net = apply_lateness(ctx, step, net, columns, rules.lateness)
    return net


def apply_watermark(
    ctx: StepContext,
    step: StepState,
    net: str,
    columns: Sequence[Column],
    rules: Sequence[wm.WatermarkRule],
    release_all: bool,
) -> str:
    """Hold back changes the watermark does not allow yet; release those it now allows.

    What the step holds and releases is computed from `__pending` as the last completed step
    left it (its commits come only after the model's: protocol.py); the write of the step's marks
    and held changes goes into `step.writes`, if there is anything to write.
    """
    session, pending = ctx.session, ctx.model.pending_table
    previous, record, number = step.previous, step.record, step.record.step
    with ctx.role("WATERMARK: the largest value seen of each watermark column"):
        row = session.query(wm.seen_query(net, rules, previous.watermark_seen))[0]
    for i, rule in enumerate(rules):
        record.watermark_seen[rule.column.name] = row[f"s_{i}"]
    condition = wm.release_condition(rules, record.watermark_seen, release_all)
    candidates = ctx.views.materialize(
        "candidates",
        wm.candidates(net, inline(f"SELECT * FROM {pending}"), columns, number, condition),
        f"WATERMARK: this step's changes and those {pending} holds, each released or not",
    )
    with ctx.role(f"WATERMARK: count what stays held, and what the step writes to {pending}"):
        counts = session.query(wm.pending_counts(candidates, number))[0]
    step.result.held = int(counts["held"])
    if int(counts["writes"]):
        step.writes.held = HeldWrite(candidates, columns)
    return ctx.views.materialize(
        "released",
        sql.consolidate(f"({wm.released(candidates, columns)})", columns),
        "WATERMARK: the changes released, netted",
    )


def apply_lateness(
    ctx: StepContext,
    step: StepState,
    net: str,
    columns: Sequence[Column],
    rules: Sequence[LatenessRule],
) -> str:
    """Set late changes aside, move the waterline, and return the changes to apply."""
    previous, record = step.previous, step.record
    classified = ctx.views.materialize(
        "classified",
        late.classify(net, columns, rules, previous.waterline),
        "LATENESS: the change, each row on time, late, null or future",
    )
    with ctx.role("LATENESS: the new waterlines, and how many changes are late"):
        row = ctx.session.query(
            late.waterline_query(classified, rules, previous.waterline, previous.max_seen)
        )[0]
    step.result.late = int(row["late"])
    for i, rule in enumerate(rules):
        record.waterline[rule.column.name] = row[f"w_{i}"]
        record.max_seen[rule.column.name] = row[f"m_{i}"]
        counted = row.get(f"b_{i}")  # NULL before any value was seen
        if counted is not None:
            record.behind[rule.column.name] = [int(n) for n in json.loads(counted)]
    step.writes.quarantine = QuarantineWrite(classified, columns, rules)
    # A plain view over the materialized `classified`: counted and applied, never recomputed.
    return ctx.views.view(
        "on_time", late.on_time(classified, columns), "LATENESS: the changes on time"
    )


def held_back_rows(
    ctx: StepContext, columns: Sequence[Column], written: Sequence[Column], step: int
) -> Tuple[Optional[str], Optional[str]]:
    """What LATENESS set aside (`__late`, less what a readmit applied) and what WATERMARK
    holds (`__pending`) as of step `step`, as changes with weights: the model's table minus
    these is the model's query as of that step (docs/steps.md, the guarantee), so a change
    computed as the query minus the table adds them back, and they must be taken out again (a
    recompute would otherwise hold or quarantine them a second time). (late rows, held rows);
    None where the table is not there. Each has `columns`, those not in the side tables (not
    `written`: on_schema_change 'ignore') NULL."""
    kept = {c.name.lower() for c in written}
    cols = ", ".join(
        sql.quote(c.name)
        if c.name.lower() in kept
        else f"CAST(NULL AS {c.data_type}) AS {sql.quote(c.name)}"
        for c in columns
    )
    model = ctx.model
    late_rows = held_rows = None
    late_name = model.table_name("__late")
    if ctx.delta_log.exists(late_name):
        late_rows = (
            f"SELECT {cols}, CAST(CASE WHEN _streamsql_change = 'insert' THEN -1 ELSE 1 END "
            f"AS BIGINT) AS {WEIGHT} FROM {model.late_table} WHERE _streamsql_step <= {step}"
        )
        late_columns = {c.name.lower() for c in ctx.delta_log.snapshot(late_name).columns}
        if readmit.READMITTED_STEP in late_columns:  # what a readmit applied is not set aside
            late_rows += f" AND {readmit.not_readmitted_by(step)}"
    if ctx.delta_log.exists(model.table_name("__pending")):
        held_rows = (
            f"SELECT {cols}, -{WEIGHT} AS {WEIGHT} FROM {model.pending_table} "
            f"WHERE {wm.HELD_STEP} <= {step} "
            f"AND ({wm.RELEASED_STEP} IS NULL OR {wm.RELEASED_STEP} > {step})"
        )
    return late_rows, held_rows
