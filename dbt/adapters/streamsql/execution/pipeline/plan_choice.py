"""Which plan a step runs: the one place that decides it.

Two calls, made in this order by the step (pipeline/step.py), by the roll forward of a step a
crash interrupted, and by `streamsql_explain`, so that what explain prints is what the run does:

- `model_plan`, before a step reads any change: the model's plan, which its tables follow (the
  planner's plan under the model's `strategy` config), the LATENESS and WATERMARK rules on the
  query's columns, and the key a change is merged by (`unique_key`, or an aggregate's groups).
- `decide`, once the step knows its inputs' changes: the plan this step runs, with why. In
  order: a recovery (an input that cannot be read from where the last step left it, or a schema
  change the model's rows need recomputed for: recovery/lost_history.py) recomputes the model
  from its inputs; under `auto` a large change recomputes; otherwise the model's plan runs.

The planner gives the model's plan. `strategy: recompute` replaces it by the recompute plan
(the model's query over its inputs, diffed with its table) for every step; `strategy:
incremental` keeps it always. Under `auto`, the default, a step of a plan without state (a
linear plan without stages) recomputes instead when the log says its inputs changed about as
much as they hold (RECOMPUTE_SHARE of their bytes or more: a reload, a rewrite): then the
incremental plan reads and nets a change the size of the inputs, where a recompute reads them
once. Both write only the difference to the model, so its change feed is the same either way.
A plan with state keeps its plan: its state tables must follow every step. The choice, and
the two sizes it was made on, go into the step line and into explain's "Next step".

Every recompute plan, whichever of these chose it, is made by planner.recompute_plan.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import List, Optional, Sequence

from dbt.adapters.streamsql.execution.context import StepContext
from dbt.adapters.streamsql.execution.event_time.rules import EventTimeRules, event_time_rules
from dbt.adapters.streamsql.execution.pipeline import inputs, keys
from dbt.adapters.streamsql.execution.pipeline.meaning import Meaning
from dbt.adapters.streamsql.execution.recovery import lost_history, schema
from dbt.adapters.streamsql.execution.shared.input_state import InputChange, InputState
from dbt.adapters.streamsql.execution.shared.result import human_size
from dbt.adapters.streamsql.execution.step_state import StepChoice, StepState
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
    if ctx.model.strategy != "recompute" or plan.kind == "recompute":
        return plan
    return recompute_plan(
        compiled_sql,
        [i.table for i in read],
        output_columns,
        "strategy: recompute (the model's config)",
    )


def decide(
    ctx: StepContext, decided: ModelPlan, step: StepState, changes: Sequence[InputChange]
) -> StepChoice:
    """The plan step `step` runs, given its inputs' `changes` (inputs.read_changes): a recovery,
    `auto`'s recompute of a large change, or the model's plan (see the module docstring).

    Writes nothing, so that explain asks it as the step does.

    Raises:
        StepError: the step must recover, but recomputing the query would not give the rows
            its steps gave (a nondeterministic function).
    """
    model_plan = decided.plan
    columns = schema.written_columns(ctx, step.schema, step.previous, model_plan.output_columns)
    reasons = lost_history.recovery_reasons(ctx, step, model_plan, changes)
    if reasons:
        because = "; ".join(reasons)
        recovery = recompute_plan(
            step.compiled_sql,
            model_plan.inputs,
            columns,
            because,
            change_sql=lost_history.recovery_sql(ctx, step, model_plan, columns),
        )
        return StepChoice(recovery, model_plan, because, recovered=tuple(reasons))
    choice = StepChoice(model_plan, model_plan)
    if (
        ctx.model.strategy == "auto"
        and model_plan.kind == "linear"
        and not model_plan.stages
        and not step.first_step
    ):
        change_bytes = _total(change.size_bytes for change in changes)
        input_bytes = _total(change.input.size_bytes for change in changes)
        choice = dataclasses.replace(choice, change_bytes=change_bytes, input_bytes=input_bytes)
        if (
            change_bytes is not None
            and input_bytes is not None
            and input_bytes >= MIN_INPUT_BYTES
            and change_bytes >= RECOMPUTE_SHARE * input_bytes
        ):
            because = (
                f"its inputs changed by {human_size(change_bytes)}, at least "
                f"{RECOMPUTE_SHARE:.0%} of their {human_size(input_bytes)}"
            )
            recompute = recompute_plan(
                step.compiled_sql,
                model_plan.inputs,
                model_plan.output_columns,
                "the inputs' change is as large as the inputs",
            )
            choice = dataclasses.replace(choice, plan=recompute, because=because)
    # under on_schema_change 'ignore' a recompute reads the model's table with the query's
    # columns: the table gets those it lacks, as NULL
    return dataclasses.replace(choice, plan=lost_history.padded(choice.plan, columns))


def _total(values) -> Optional[int]:
    values = list(values)
    return None if any(v is None for v in values) else sum(values)
