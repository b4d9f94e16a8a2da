"""Which plan a step runs: the model's `strategy` config, and a step's choice to recompute.

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

from typing import Optional, Sequence

from dbt.adapters.streamsql.execution.context import StepContext
from dbt.adapters.streamsql.execution.pipeline.inputs import InputChange, InputState
from dbt.adapters.streamsql.execution.result import StepResult
from dbt.adapters.streamsql.planning.plan import Column, StepPlan
from dbt.adapters.streamsql.planning.planner import recompute_plan

# Under `auto`, a stateless step recomputes when its inputs' change is at least this share of
# their size (bytes of data files added and removed, against the inputs' bytes), and they hold
# at least MIN_INPUT_BYTES (below that a step's cost is its fixed cost, whichever way).
RECOMPUTE_SHARE = 0.5
MIN_INPUT_BYTES = 64 * 2**20


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
    ctx: StepContext, plan: StepPlan, changes: Sequence[InputChange], result: StepResult
) -> StepPlan:
    """The plan this step runs: `plan`, or under `auto` a recompute when the change is about as
    large as the inputs (see the module docstring); the choice goes into `result`'s notes."""
    if ctx.model.strategy != "auto" or plan.strategy != "linear" or plan.stages or ctx.first_step:
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
    result.notes.append(
        f"recomputed this step: its inputs changed by {_size(change_bytes)}, at least "
        f"{RECOMPUTE_SHARE:.0%} of their {_size(input_bytes)}"
    )
    return recompute_plan(
        ctx.compiled_sql,
        [c.input.table for c in changes],
        plan.output_columns,
        "the inputs' change is as large as the inputs",
    )


def _total(values) -> Optional[int]:
    values = list(values)
    return None if any(v is None for v in values) else sum(values)


def _size(size: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size} B"
