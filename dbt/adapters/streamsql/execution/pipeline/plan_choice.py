"""Which plan a step runs: the one place that decides it.

Two calls, made in this order by the step (pipeline/step.py), by the roll forward of a step a
crash interrupted, and by `streamsql_explain`, so that what explain prints is what the run does:

- `model_plan`, before a step reads any change: the model's plan, which its tables follow (the
  planner's plan under the model's `strategy` config), the LATENESS and WATERMARK rules on the
  query's columns, and the key a change is merged by (`unique_key`, or an aggregate's groups).
- `decide`, once the step knows its inputs' changes: the plan this step runs, with why. In
  order: a recovery (an input that cannot be read from where the last step left it, or a schema
  change the model's rows need recomputed for: recovery/lost_history.py) recomputes the model
  from its inputs; under `auto` a large change, or a rebuild estimated cheaper, recomputes; a
  model whose state fell behind rebuilds it (a recovery); otherwise the model's plan runs.

The planner gives the model's plan. `strategy: recompute` replaces it by the recompute plan
(the model's query over its inputs, diffed with its table) for every step; `strategy:
incremental` keeps it always. Under `auto`, the default, a step of a plan without state (a
linear plan without stages) recomputes instead when the log says its inputs changed about as
much as they hold (RECOMPUTE_SHARE of their bytes or more: a reload, a rewrite): then the
incremental plan reads and nets a change the size of the inputs, where a recompute reads them
once. A recompute `auto` chose writes the query's rows as the whole table (`writes_whole`,
config `rewrite_on_recompute`) unless the model needs the difference; a recovery writes the
difference.
Under `auto` a step of any plan (but emit_final's, whose table holds only final groups) also
recomputes when the model's recorded step costs (step_cost.py) estimate a rebuild under
REBUILD_SHARE of an incremental step, and stays with it while it is estimated the cheaper;
with no price of a rebuild recorded yet, a step whose incremental estimate is EXPLORE_SECONDS
or more recomputes once to price it (a plan with state only where its recompute writes the
table whole and a wrong guess costs little: EXPLORE_RISK_STEPS). A
plan with state writes no state while it recomputes (the record says since when:
`state_behind_since`); the next step that runs the plan first rebuilds its state tables from the
inputs, as a recovery. The choice, and the sizes and estimates it was made on, go into the step
line and into explain's "Next step".

Every recompute plan, whichever of these chose it, is made by planner.recompute_plan.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import List, Optional, Sequence

from dbt.adapters.streamsql.execution.context import StepContext
from dbt.adapters.streamsql.execution.engine.sql_session import describe_query
from dbt.adapters.streamsql.execution.event_time.rules import EventTimeRules, event_time_rules
from dbt.adapters.streamsql.execution.pipeline import inputs, keys, step_cost
from dbt.adapters.streamsql.execution.pipeline.meaning import Meaning
from dbt.adapters.streamsql.execution.recovery import lost_history, schema
from dbt.adapters.streamsql.execution.shared.input_state import InputChange, InputState
from dbt.adapters.streamsql.execution.shared.model import ModelSettings
from dbt.adapters.streamsql.execution.shared.result import human_size
from dbt.adapters.streamsql.execution.step_state import StepChoice, StepState
from dbt.adapters.streamsql.planning.plan import Column, StepPlan
from dbt.adapters.streamsql.planning.planner import plan_step, recompute_plan

# Under `auto`, a stateless step recomputes when its inputs' change is at least this share of
# their size (bytes of data files added and removed, against the inputs' bytes), and they hold
# at least MIN_INPUT_BYTES (below that a step's cost is its fixed cost, whichever way).
RECOMPUTE_SHARE = 0.5
MIN_INPUT_BYTES = 64 * 2**20
# Under `auto`, a step also recomputes when the cost of a rebuild, estimated from the model's
# recorded steps (step_cost.py), is under REBUILD_SHARE of an incremental step's (a margin, so
# that noise does not flip it), and stays with it while it is the cheaper; not for inputs under
# MIN_COST_INPUT_BYTES, where either costs about a step's fixed cost.
REBUILD_SHARE = 0.8
MIN_COST_INPUT_BYTES = 16 * 2**20
# With no rebuild price recorded yet (a model stepped before steps kept their costs), a step of
# a plan without state whose incremental estimate is at least this recomputes once, to price
# it. A plan with state does not: coming back, it rebuilds its state tables from the inputs,
# which can cost many incremental steps, and its first step, which builds them, prices nothing;
# it recomputes by cost once some recompute (a recovery) has priced it.
EXPLORE_SECONDS = 1.0
# ... unless its recompute writes the table whole (writes_whole): then the recompute costs about
# a rebuild, and staying with it while it is the cheaper needs no state. A wrong guess costs the
# recompute and, coming back, a rebuild of the state, each at most about what the model's first
# step cost (it computed the query and built the state); it explores only when that excess over
# two incremental steps is at most EXPLORE_RISK_STEPS incremental steps.
EXPLORE_RISK_STEPS = 10


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
        output_columns = describe_query(ctx.session, compiled_sql)
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
    """The plan step `step` runs, given its inputs' `changes` (inputs.read_changes): a recovery
    (of an input, or of state tables `auto` left behind), `auto`'s recompute of a large change or
    of a step estimated cheaper that way, or the model's plan (see the module docstring).

    Writes nothing, so that explain asks it as the step does.

    Raises:
        StepError: the step must recover, but recomputing the query would not give the rows
            its steps gave (a nondeterministic function).
    """
    model_plan, previous = decided.plan, step.previous
    columns = schema.written_columns(ctx, step.schema, previous, model_plan.output_columns)
    reasons = lost_history.recovery_reasons(ctx, step, model_plan, changes)
    input_bytes = _total(change.input.size_bytes for change in changes)
    costs = step_cost.costs_after(previous, ctx.last_committed_at)
    estimated = step_cost.estimates(costs, input_bytes)
    choice = StepChoice(
        model_plan,
        model_plan,
        change_bytes=_total(change.size_bytes for change in changes),
        input_bytes=input_bytes,
        costs=costs,
        incremental_seconds=estimated.incremental,
        rebuild_seconds=estimated.rebuild,
    )
    whole = writes_whole(ctx.model, decided, columns)
    because = "" if reasons else auto_reason(ctx.model, step, choice, estimated, whole)
    if not reasons and not because and previous.state_behind_since is not None:
        reasons = [
            f"its state tables lack the steps since step {previous.state_behind_since}, which "
            "recomputed the model (strategy: auto), so they are rebuilt from the inputs"
        ]
    if reasons:
        because = "; ".join(reasons)
        recovery = recompute_plan(
            step.compiled_sql,
            model_plan.inputs,
            columns,
            because,
            change_sql=lost_history.recovery_sql(ctx, step, model_plan, columns),
        )
        return dataclasses.replace(choice, plan=recovery, because=because, recovered=tuple(reasons))
    plan = model_plan
    if because:
        plan = recompute_plan(
            step.compiled_sql,
            model_plan.inputs,
            model_plan.output_columns,
            "strategy: auto chose to recompute this step",
        )
    # under on_schema_change 'ignore' a recompute reads the model's table with the query's
    # columns: the table gets those it lacks, as NULL
    return dataclasses.replace(
        choice,
        plan=lost_history.padded(plan, columns),
        because=because,
        whole=bool(because) and whole and plan.rows_sql is not None,
    )


def writes_whole(model: ModelSettings, decided: ModelPlan, columns: Sequence[Column]) -> bool:
    """Whether a step `auto` recomputes writes the query's rows as the whole table, one INSERT
    OVERWRITE as dbt's `table` writes it, instead of netting them against the table and
    applying the difference: `rewrite_on_recompute` on, and nothing that needs the difference
    (LATENESS and WATERMARK judge it; `unique_key` and `append_only` check it), and the table's
    columns (`columns`) the query's (under on_schema_change 'ignore' the table may lack some)."""
    if not model.rewrite_on_recompute or model.append_only or model.emit_final:
        return False
    if decided.unique or decided.rules.lateness or decided.rules.watermark:
        return False
    query = decided.plan.output_columns
    return [c.name.lower() for c in columns] == [c.name.lower() for c in query]


def auto_reason(
    model: ModelSettings,
    step: StepState,
    choice: StepChoice,
    estimated: step_cost.Estimates,
    whole: bool = False,
) -> str:
    """Why `auto` recomputes this step instead of running the model's plan; "" when it does
    not. `choice`: the model's plan, with the sizes and estimates weighed; `estimated`: those
    estimates (`forced`: a test's, step_cost.TEST_COSTS_ENV, taken whatever the inputs' size);
    `whole`: a recompute would write the table whole (`writes_whole`)."""
    forced = estimated.forced
    plan, change_bytes, input_bytes = choice.model_plan, choice.change_bytes, choice.input_bytes
    if model.strategy != "auto" or plan.kind == "recompute" or step.first_step:
        return ""
    if plan.kind == "linear" and not plan.keeps_state and change_bytes is not None and input_bytes:
        if input_bytes >= MIN_INPUT_BYTES and change_bytes >= RECOMPUTE_SHARE * input_bytes:
            return (
                f"its inputs changed by {human_size(change_bytes)}, at least "
                f"{RECOMPUTE_SHARE:.0%} of their {human_size(input_bytes)}"
            )
    incremental, rebuild = choice.incremental_seconds, choice.rebuild_seconds
    if model.emit_final or incremental is None:
        return ""
    if not forced and (input_bytes is None or input_bytes < MIN_COST_INPUT_BYTES):
        return ""
    if rebuild is None:
        if incremental < EXPLORE_SECONDS:
            return ""
        # a model with state would pay a rebuild of its state to come back: it explores only
        # where its recompute is about a rebuild's cost and a wrong guess costs little
        first = estimated.first
        if plan.keeps_state and not (
            whole
            and first is not None
            and 2 * (first - incremental) <= EXPLORE_RISK_STEPS * incremental
        ):
            return ""
        return (
            f"no step has recomputed the model yet and an incremental step is estimated at "
            f"{incremental:.2f} s, so this one recomputes, to learn what that costs"
        )
    # a step that recomputed (and not to recover) stays with it while it is the cheaper
    previous = step.previous
    staying = previous.computed == step_cost.RECOMPUTED and not previous.recovered
    if rebuild >= (1.0 if staying else REBUILD_SHARE) * incremental:
        return ""
    return (
        f"recomputing is estimated at {rebuild:.2f} s against {incremental:.2f} s for an "
        "incremental step (from the costs of its recorded steps)"
    )


def _total(values) -> Optional[int]:
    values = list(values)
    return None if any(v is None for v in values) else sum(values)
