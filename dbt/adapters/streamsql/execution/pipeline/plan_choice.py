"""Which plan a step runs: the one place that decides it.

`model_plan` decides what every step of the model runs, before a step reads any change: the
planner's plan under the model's `strategy` config, the LATENESS and WATERMARK rules on the
query's columns, and the key a change is merged by (`unique_key`, or an aggregate's groups).
The step, the roll forward of a step a crash interrupted, and `streamsql_explain` all ask it.
`chosen` and the recovery (lost_history.prepare) may then replace the plan for one step, from
what that step's change turned out to be.

The planner gives the model's plan. `strategy: recompute` replaces it by the recompute plan
(the model's query over its inputs, diffed with its table) for every step; `strategy:
incremental` keeps it always. Under `auto`, the default, a step of a plan without state (a
linear plan without stages) recomputes instead when the log says its inputs changed about as
much as they hold (RECOMPUTE_SHARE of their bytes or more: a reload, a rewrite): then the
incremental plan reads and nets a change the size of the inputs, where a recompute reads them
once. Both write only the difference to the model, so its change feed is the same either way.
A plan with state keeps its plan: its state tables must follow every step. The choice, and
the two sizes it was made on, go into the step line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence

from dbt.adapters.streamsql.execution.context import StepContext
from dbt.adapters.streamsql.execution.event_time.rules import EventTimeRules, event_time_rules
from dbt.adapters.streamsql.execution.pipeline import inputs, keys
from dbt.adapters.streamsql.execution.pipeline.inputs import InputChange, InputState
from dbt.adapters.streamsql.execution.pipeline.meaning import Meaning
from dbt.adapters.streamsql.execution.result import human_size
from dbt.adapters.streamsql.execution.step_state import StepState
from dbt.adapters.streamsql.planning.plan import Column, StepPlan
from dbt.adapters.streamsql.planning.planner import plan_step, recompute_plan

# Under `auto`, a stateless step recomputes when its inputs' change is at least this share of
# their size (bytes of data files added and removed, against the inputs' bytes), and they hold
# at least MIN_INPUT_BYTES (below that a step's cost is its fixed cost, whichever way).
RECOMPUTE_SHARE = 0.5
MIN_INPUT_BYTES = 64 * 2**20


@dataclass
class ModelPlan:
    """What every step of a model runs, as decided before a step reads a change."""

    plan: StepPlan
    output_columns: List[Column]  # the query's, as Spark describes them
    rules: EventTimeRules  # LATENESS and WATERMARK on those columns
    # The columns a change is merged by: unique_key, or an aggregate's groups (keys.merge_key);
    # None: whole rows.
    key: Optional[Sequence[str]]
    unique: bool  # `key` is the model's unique_key, which every step checks
    # The digest of the texts whose readings Spark found alike (meaning.py), for the step
    # record; "" when the planner did not ask or they differ.
    meaning_checked: str = ""


def model_plan(
    ctx: StepContext, compiled_sql: str, read: Sequence[InputState], checked: str = ""
) -> ModelPlan:
    """The model's plan for its query `compiled_sql` over the inputs `read` (`checked`: the
    last step record's `meaning_checked`).

    Raises:
        StepError: a config the plan cannot obey (LATENESS, WATERMARK, unique_key).
        PlanningError: the query cannot be planned.
    """
    with ctx.role("the columns of the model's query"):
        output_columns = inputs.describe_query(ctx.session, compiled_sql)
    describe = inputs.describer(ctx.session, read)
    meaning = Meaning(ctx, describe, output_columns, checked)
    plan = planned(
        ctx,
        plan_step(
            compiled_sql,
            [i.table for i in read],
            output_columns,
            describe,
            meaning,
        ),
        compiled_sql,
        read,
        output_columns,
    )
    rules = event_time_rules(ctx, output_columns)
    unique_key = keys.key_columns(ctx, output_columns, rules.columns)
    key = unique_key or keys.merge_key(plan, rules.columns)
    return ModelPlan(
        plan, list(output_columns), rules, key, bool(unique_key), meaning_checked=meaning.alike
    )


def planned(
    ctx: StepContext,
    plan: StepPlan,
    compiled_sql: str,
    read: Sequence[InputState],
    output_columns: Sequence[Column],
) -> StepPlan:
    """The model's plan as its `strategy` config has it."""
    if ctx.model.strategy != "recompute" or plan.strategy == "recompute":
        return plan
    return recompute_plan(
        compiled_sql,
        [i.table for i in read],
        output_columns,
        "strategy: recompute (the model's config)",
    )


def chosen(
    ctx: StepContext, step: StepState, plan: StepPlan, changes: Sequence[InputChange]
) -> StepPlan:
    """The plan this step runs: `plan`, or under `auto` a recompute when the change is about as
    large as the inputs (see the module docstring); the choice goes into the step's notes."""
    if ctx.model.strategy != "auto" or plan.strategy != "linear" or plan.stages or step.first_step:
        return plan
    change_bytes = _total(change.size_bytes for change in changes)
    input_bytes = _total(change.input.size_bytes for change in changes)
    if (
        change_bytes is None
        or input_bytes is None
        or input_bytes < MIN_INPUT_BYTES
        or change_bytes < RECOMPUTE_SHARE * input_bytes
    ):
        return plan
    step.result.notes.append(
        f"recomputed this step: its inputs changed by {human_size(change_bytes)}, at least "
        f"{RECOMPUTE_SHARE:.0%} of their {human_size(input_bytes)}"
    )
    return recompute_plan(
        step.compiled_sql,
        [c.input.table for c in changes],
        plan.output_columns,
        "the inputs' change is as large as the inputs",
    )


def _total(values) -> Optional[int]:
    values = list(values)
    return None if any(v is None for v in values) else sum(values)
