"""`dbt run-operation streamsql_explain`: what the next step of a model would do, without it.

`explain_model` asks what a step asks before it writes anything (phases 1 and 2 of step.py): the
inputs and the versions the next step would read them up to, the model's last step record, the
plan, the LATENESS and WATERMARK rules, the key a change is merged by; and, from the inputs'
changes, the plan the next step would run (a recovery, `auto`'s recompute), by the function
the step decides it with (plan_choice.decide). It only reads: DESCRIBE
statements, the Delta logs, and the count of the changes WATERMARK holds. `format_explanation`
turns what it found into the text the operation prints; it and the helpers below it are pure.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

from dbt.adapters.streamsql.execution.commit import history
from dbt.adapters.streamsql.execution.commit.record import StepRecord, sql_fingerprint
from dbt.adapters.streamsql.execution.commit.tables import sql_changed
from dbt.adapters.streamsql.execution.context import StepContext
from dbt.adapters.streamsql.execution.engine.sql_session import SqlSession
from dbt.adapters.streamsql.execution.event_time.emit_final import final_columns, plan_name
from dbt.adapters.streamsql.execution.event_time.rules import EventTimeRules
from dbt.adapters.streamsql.execution.event_time.watermark import held_count
from dbt.adapters.streamsql.execution.pipeline import input_views, inputs, plan_choice
from dbt.adapters.streamsql.execution.plan_advice import (
    avoid_partial_recompute,
    avoid_recompute,
    is_partial_recompute,
)
from dbt.adapters.streamsql.execution.recovery import schema
from dbt.adapters.streamsql.execution.shared.errors import StepError
from dbt.adapters.streamsql.execution.shared.input_state import InputState
from dbt.adapters.streamsql.execution.shared.model import ModelSettings
from dbt.adapters.streamsql.execution.shared.result import StepResult, human_size
from dbt.adapters.streamsql.execution.step_state import StepChoice, StepState
from dbt.adapters.streamsql.planning import global_top_k
from dbt.adapters.streamsql.planning.errors import PlanningError
from dbt.adapters.streamsql.planning.plan import FAST_PATH, StagePlan, StepPlan

RECOMPUTE = "recompute: "
WIDTH = 100  # the text's lines are wrapped at this many characters


@dataclass
class InputReading:
    """One input: the version the next step would read it up to, and the last step's."""

    name: str
    next_version: int
    last_version: Optional[int] = None  # None: no step has read it yet


@dataclass
class Explanation:
    """Everything `streamsql_explain` prints about one model."""

    model: ModelSettings
    plan: StepPlan
    rules: EventTimeRules
    key: Optional[Sequence[str]]  # plan_choice.ModelPlan.key
    inputs: List[InputReading]
    fingerprint: str  # of the SQL explained
    last: Optional[StepRecord] = None  # the model's last step record; None: not run yet
    # Why the next step would fail before it reads anything (its SQL changed, the table was
    # not built by incremental_view); None when it would not.
    problem: Optional[str] = None
    held: Optional[int] = None  # copies WATERMARK holds now (None: no watermark or no table)
    notes: List[str] = field(default_factory=list)
    unique: bool = False  # `key` is the model's unique_key
    # The plan the next step would run and why (plan_choice.decide, as the step asks it); None
    # when there is no next step to decide for (not run yet, nothing changed, a problem).
    choice: Optional[StepChoice] = None
    # No input changed since the last step (nor was one replaced): the next run is no step.
    unchanged: bool = False


def explain_model(session: SqlSession, model: ModelSettings, compiled_sql: str) -> str:
    """The text of `streamsql_explain` for `model`, whose query is `compiled_sql`.

    Raises:
        StepError: the plan cannot be made (an input is missing or not readable incrementally,
            the SQL is not one query, a LATENESS or WATERMARK config is wrong).
    """
    ctx = StepContext(session, model)
    try:
        return format_explanation(gather(ctx, compiled_sql))
    except PlanningError as error:
        raise StepError(f"Model {model.name}: {error}") from error
    finally:
        ctx.views.drop_all()


def gather(ctx: StepContext, compiled_sql: str) -> Explanation:
    """What a step would find before it writes anything, asked the way a step asks it."""
    model = ctx.model
    compiled_sql, read = input_views.describe_inputs(ctx, compiled_sql)  # views inlined
    decided = plan_choice.model_plan(ctx, compiled_sql, read)  # as the step decides it
    plan, rules = decided.plan, decided.rules
    fingerprint = sql_fingerprint(compiled_sql)
    found = Explanation(
        model,
        plan,
        rules,
        decided.key,
        [InputReading(i.table.name, i.version) for i in read],
        fingerprint,
        unique=decided.unique,
    )
    try:
        final_columns(model, plan, rules.lateness, rules.watermark)
        found.last = history.last_step(ctx)
    except StepError as error:
        found.problem = str(error)
    last = found.last
    if last is not None:
        for reading in found.inputs:
            reading.last_version = last.input_versions.get(reading.name)
        changed = sql_changed(model.name, last, compiled_sql, ctx.views_read)
        if changed:
            found.problem = changed
        pending = model.table_name("__pending")
        if rules.watermark and ctx.delta_log.exists(pending):
            found.held = int(ctx.session.query(held_count(model.pending_table))[0]["n"])
        found.unchanged = inputs.nothing_to_do(last, compiled_sql, read)  # as the step tells it
        if found.problem is None and not found.unchanged:
            try:
                found.choice = next_choice(ctx, decided, compiled_sql, read, last)
            except StepError as error:
                found.problem = str(error)
    return found


def next_choice(
    ctx: StepContext,
    decided: plan_choice.ModelPlan,
    compiled_sql: str,
    read: Sequence[InputState],
    last: StepRecord,
) -> StepChoice:
    """The plan the step after `last` would run, decided by the function the step calls
    (plan_choice.decide), from the same facts: the schema comparison and the inputs' changes."""
    versions = {i.table.name: i.version for i in read}
    step = StepState(
        compiled_sql,
        last,
        record=last.next(ctx.run_id, versions),
        result=StepResult(ctx.model.name, last.step + 1, "", ""),
        schema=schema.check(ctx, last, decided.output_columns, read),
    )
    step.first_step = inputs.first_read(last, read)
    return plan_choice.decide(ctx, decided, step, inputs.read_changes(ctx, read, last))


# -- the text ----------------------------------------------------------------------------------


def format_explanation(found: Explanation) -> str:
    model, plan = found.model, found.plan
    lines = [f"streamsql_explain: {model.name} ({model.table_name()})", ""]
    plan_text = plan_lines(plan, found.rules)
    if plan_name(plan, model) != plan.kind:
        plan_text[0] = (
            f"Plan: {plan_name(plan, model)} (emit_final: the model holds only "
            "final groups, each inserted once)"
        )
    lines += plan_text
    lines += ["", "Tables:"]
    lines += aligned(table_rows(model, plan, found.rules))
    merge_key = merge_key_text(plan, found.rules, found.key, found.unique)
    if model.rewrite_when_small:
        merge_key += (
            "; while the model's table is under 1 MiB, a step that removes rows writes it "
            "whole instead (INSERT OVERWRITE; rewrite_when_small)"
        )
    lines += [""] + wrapped(f"Merge key: {merge_key}", "")
    lines += ["", "LATENESS:"] + lateness_lines(found)
    lines += ["", "WATERMARK:"] + watermark_lines(found)
    lines += ["", "Inputs (version read up to):"]
    lines += aligned([(reading.name, input_text(reading, found.last)) for reading in found.inputs])
    lines += ["", "Next step:"]
    for line in next_step_lines(found):
        lines += wrapped(line, "  ")
    return "\n".join(lines)


def plan_lines(plan: StepPlan, rules: Optional[EventTimeRules] = None) -> List[str]:
    """The plan, its reason, what is on the fast path and what is recomputed (and how not to).
    `rules`: the model's LATENESS and WATERMARK (none when not given)."""
    rows: List[Tuple[str, str]] = [("reason", plan.reason)]
    if plan.kind == "recompute":
        why = plan.reason[len(RECOMPUTE) :] if plan.reason.startswith(RECOMPUTE) else plan.reason
        rows += [
            (
                "fast path",
                "none: each step evaluates the whole query over its inputs and diffs "
                "the result with the model's table (costs more than a full rebuild)",
            ),
            ("recomputed", f"the whole query, because {why}"),
            ("to avoid it", avoid_recompute(why)),
        ]
        return [f"Plan: {plan.kind}"] + aligned(rows)
    top, notes = split_reason(top_reason(plan))
    below = [note for note in notes if not is_partial_recompute(note)]
    rows.append(("fast path", ", ".join([top] + below)))
    for stage in plan.stages:
        stage_top, stage_notes = split_reason(stage.reason)
        stage_below = [note for note in stage_notes if not is_partial_recompute(note)]
        rows.append(
            (
                stage.name,
                ", ".join([stage_top] + stage_below)
                + f" (an aggregate below the top, {stage_columns(stage)})",
            )
        )
        notes += [note for note in stage_notes if is_partial_recompute(note)]
    partial = [note for note in notes if is_partial_recompute(note)]
    if global_top_k.CONSTRUCT in top:
        if rules is not None and (rules.lateness or rules.watermark):
            # they may set part of a change aside, so the rows below the cut are not known
            kept = "the model's (no rows below the cut are kept under LATENESS or WATERMARK)"
        elif plan.top_k is not None:
            kept = (
                f"the model's and the {plan.top_k.buffer_rows} below its cut the step record keeps"
            )
        else:
            kept = "the model's (no rows below the cut are kept: a column's type forbids)"
        rows.append(
            (
                "recomputed",
                "the query's first rows over its new inputs, only on a step whose deletions "
                f"leave fewer than the LIMIT of the rows known ({kept}); inserts, and updates "
                "that keep a row above the cut, never need it",
            )
        )
    elif not partial:
        rows.append(
            (
                "recomputed",
                "nothing: a step costs its inputs' change"
                + (
                    " and the state of the groups it touches"
                    if plan.aggregate is not None or plan.stages
                    else ""
                ),
            )
        )
    for note in dict.fromkeys(partial):
        rows.append(("recomputed", note))
        rows.append(("to avoid it", avoid_partial_recompute(note)))
    return [f"Plan: {plan.kind}"] + aligned(rows)


def top_reason(plan: StepPlan) -> str:
    """The plan's reason without the `fast path: ` prefix and the note on its stages."""
    reason = plan.reason[len(FAST_PATH) :] if plan.reason.startswith(FAST_PATH) else plan.reason
    if plan.stages:
        marker = f"; over {len(plan.stages)} stage"
        if marker in reason:
            reason = reason[: reason.index(marker)]
    return reason


def split_reason(reason: str) -> Tuple[str, List[str]]:
    """A fast path's reason as its shape and its notes (`group by (count(*)); min/max ...`)."""
    parts = [part.strip() for part in reason.split("; ") if part.strip()]
    return (parts[0] if parts else reason), parts[1:]


def stage_columns(stage: StagePlan) -> str:
    return "columns " + ", ".join(column.name for column in stage.columns)


def table_rows(
    model: ModelSettings, plan: StepPlan, rules: EventTimeRules
) -> List[Tuple[str, str]]:
    rows = [(model.table_name(), "the model: one Delta commit per step, with the step record")]
    for stage in plan.stages:
        rows.append(
            (
                model.table_name(f"__streamsql_{stage.name}"),
                f"per-group state of {stage.name} (internal)",
            )
        )
    if plan.aggregate is not None:
        rows.append(
            (model.table_name("__streamsql_state"), "per-group partial aggregates (internal)")
        )
    if rules.lateness:
        rows.append(
            (model.table_name("__late"), "LATENESS quarantine: late, NULL and future changes")
        )
        rows.append((model.table_name("__waterline"), "the waterline of each step"))
    if rules.watermark:
        rows.append((model.table_name("__pending"), "changes WATERMARK holds or held"))
    return rows


def merge_key_text(
    plan: StepPlan, rules: EventTimeRules, key: Optional[Sequence[str]], unique: bool = False
) -> str:
    whole = (
        "a step that only adds rows appends them (INSERT); one that removes rows MERGEs "
        "the change matching whole rows"
    )
    if unique and key:
        return (
            f"({', '.join(key)}), the model's unique_key: a row whose key stays is updated in "
            "place (MERGE by key), and every step checks that the key stays unique"
        )
    if key is not None:
        if not key:
            return "the one row of a global aggregate, updated in place (MERGE)"
        return (
            f"({', '.join(key)}): a changed group's row is updated in place (MERGE by key); "
            "a step that only adds rows appends them"
        )
    if plan.aggregate is not None and plan.aggregate.key_columns is not None:
        named = ", ".join(plan.aggregate.key_columns)
        outside = [
            name
            for name in rules.columns
            if name.lower() not in {k.lower() for k in plan.aggregate.key_columns}
        ]
        return (
            f"none: the output names its groups by ({named}), but the LATENESS/WATERMARK "
            f"column(s) {', '.join(outside)} are not among them, so a group's old and new "
            f"row can differ in lateness; {whole}"
        )
    if plan.aggregate is not None:
        return f"none: the output does not name its groups; {whole}"
    return f"none: {whole}"


def lateness_lines(found: Explanation) -> List[str]:
    if not found.rules.lateness:
        return ["  none"]
    last = found.last
    lines = []
    for rule in found.rules.lateness:
        name = rule.column.name
        text = f"  {name} ({rule.column.data_type}): lateness {rule.lateness}"
        if rule.max_future:
            text += f", max_future {rule.max_future}"
        lines += wrapped(text, "  ")
        if last is None:
            text = (
                "no step yet: the first step sets the waterline (nothing is late in it but "
                "NULL and future values)"
            )
        elif last.waterline.get(name) is None:
            text = f"no waterline after step {last.step} yet: no value seen"
        else:
            text = (
                f"waterline after step {last.step}: {last.waterline[name]} (largest value "
                f"seen: {last.max_seen.get(name)}); the next step quarantines a change "
                "below it"
            )
        lines += wrapped(text, "    ")
    return lines


def watermark_lines(found: Explanation) -> List[str]:
    if not found.rules.watermark:
        return ["  none"]
    lines = []
    for rule in found.rules.watermark:
        name = rule.column.name
        lines += wrapped(
            f"{name} ({rule.column.data_type}): watermark {rule.delay}: a change "
            f"is held until one at least {rule.delay} newer has been seen",
            "  ",
        )
        if found.last is not None:
            lines += wrapped(
                f"largest value seen after step {found.last.step}: "
                f"{found.last.watermark_seen.get(name)}",
                "    ",
            )
    if found.held is not None:
        lines += wrapped(
            f"held now: {found.held} change(s); streamsql_flush releases them all", "  "
        )
    return lines


def input_text(reading: InputReading, last: Optional[StepRecord]) -> str:
    if last is None or reading.last_version is None:
        return f"not read yet; the next step reads version {reading.next_version} in full"
    if reading.last_version == reading.next_version:
        return f"step {last.step} read version {reading.last_version}; unchanged since"
    commits = reading.next_version - reading.last_version
    return (
        f"step {last.step} read version {reading.last_version}; the next step reads "
        f"{reading.last_version + 1}..{reading.next_version} ({commits} commit"
        f"{'s' if commits != 1 else ''})"
    )


def next_step_lines(found: Explanation) -> List[str]:
    last = found.last
    if found.problem is not None:
        return [f"fails before it reads anything: {found.problem}"]
    if last is None:
        return [
            "not run yet: the first `dbt run` creates the model's tables and reads every "
            "input in full"
        ]
    lines = [f"SQL: the same as step {last.step}'s (fingerprint {found.fingerprint})"]
    if last.plan and last.plan != plan_name(found.plan, found.model):
        lines.append(f"step {last.step} ran a {last.plan} plan ({last.reason})")
    if found.unchanged:
        lines.append(
            f"no input changed since step {last.step}: the next run is not a step (nothing to do)"
        )
    else:
        lines.append(f"step {last.step + 1} reads the inputs' changes listed above")
        if found.choice is not None:
            lines += choice_lines(found.choice, found.model)
    return lines


def choice_lines(choice: StepChoice, model: ModelSettings) -> List[str]:
    """What the next step runs, when that is not simply the model's plan, and what `auto`
    weighed to decide it."""
    kind = choice.model_plan.kind
    if choice.recovered:
        return [
            f"it recovers ({choice.because}): it recomputes the model from its inputs and "
            "applies the difference, instead of reading the inputs' changes"
        ]
    if choice.because:
        written = (
            "; it writes the query's rows as the whole table (rewrite_on_recompute)"
            if choice.whole
            else "; it applies the difference to the model's table"
        )
        return [
            f"it recomputes the model instead of running its {kind} plan (strategy: auto): "
            f"{choice.because}{written}"
        ]
    if model.strategy != "auto" or kind == "recompute":
        return []
    lines = []
    stateless = kind == "linear" and not choice.model_plan.keeps_state
    if choice.change_bytes is not None and choice.input_bytes is not None and stateless:
        lines.append(
            f"it runs the {kind} plan (strategy: auto): its inputs changed by "
            f"{human_size(choice.change_bytes)} of their {human_size(choice.input_bytes)}; it "
            f"would recompute at {plan_choice.RECOMPUTE_SHARE:.0%} of inputs of "
            f"{human_size(plan_choice.MIN_INPUT_BYTES)} or more"
        )
    incremental, rebuild = choice.incremental_seconds, choice.rebuild_seconds
    if incremental is not None and rebuild is not None:
        lines.append(
            f"estimated from the recorded steps: an incremental step {incremental:.2f} s, "
            f"recomputing {rebuild:.2f} s; auto recomputes when that is under "
            f"{plan_choice.REBUILD_SHARE:.0%} of the incremental step's, over inputs of "
            f"{human_size(plan_choice.MIN_COST_INPUT_BYTES)} or more"
        )
    return lines


def aligned(rows: Sequence[Tuple[str, str]]) -> List[str]:
    """Labelled rows, the texts in one column, wrapped at WIDTH characters."""
    width = max((len(label) for label, _ in rows), default=0)
    lines = []
    for label, text in rows:
        indent = " " * (width + 4)
        lines += textwrap.wrap(
            text,
            WIDTH,
            initial_indent=f"  {label.ljust(width)}  ",
            subsequent_indent=indent,
            break_on_hyphens=False,
        ) or [label]
    return lines


def wrapped(text: str, indent: str) -> List[str]:
    return textwrap.wrap(
        text, WIDTH, initial_indent=indent, subsequent_indent=indent + "  ", break_on_hyphens=False
    )
