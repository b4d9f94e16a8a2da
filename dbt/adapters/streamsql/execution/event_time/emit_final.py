"""`emit_final`: an aggregate whose model holds only final groups, each inserted once.

A group is final when a LATENESS column that the group decides (a window start, a truncated
hour: `AggregatePlan.group_outputs`) is below its waterline: every later change to the group is
judged against a waterline at least as high, so it is late and quarantined. The aggregate keeps
its state table as without the config (every group, open ones included), computes its change
and judges it with LATENESS as usual (the change decides the quarantine and moves the
waterline); only what is applied to the model differs. Step n applies, as inserts, the groups
that became final in it, with their values read from the state after the step:

    every lateness column c is non-NULL, c < W(n) for some column, and c >= W(n-1) for all
    columns that had a waterline before the step (none on a first step)

(W(n): the waterline the step computed, lateness.py; W(n-1): the previous step's.) Nothing
else is written to the model, so its change feed holds inserts only.

Why each group is emitted once, with the value a model without the config would end with:
before step n, every change to the group was judged against a waterline at most W(n-1), which
the group's value is not below: each was on time, so the state after step n is the group's
value over every row, as the model without emit_final would hold it. From step n+1 on, each
change to it is judged against W(n) or higher, which its value is below: late, quarantined,
and never emitted (the bands [W(n-1), W(n)) of different steps do not overlap). A group
whose lateness column is NULL never becomes final (its changes are late with reason `null`).

Refused (with the model, the reason and the fix named) unless the model's plan is an aggregate
and every lateness column is one its group decides. WATERMARK is refused too: it would hold
changes that the state has already counted.
"""

from __future__ import annotations

from typing import List, Mapping, Optional, Sequence, Tuple

from dbt.adapters.streamsql.execution.engine import statements as sql
from dbt.adapters.streamsql.execution.shared.errors import StepError
from dbt.adapters.streamsql.execution.shared.lateness_rule import LatenessRule
from dbt.adapters.streamsql.execution.shared.model import ModelSettings
from dbt.adapters.streamsql.planning.plan import (
    GROUP_ALIAS,
    GROUPS,
    WEIGHT,
    AggregatePlan,
    Column,
    StepPlan,
)

PLAN_NAME = "aggregate, emit final"

# (rule, the lateness column as SQL over a state row aliased GROUP_ALIAS)
FinalColumn = Tuple[LatenessRule, str]


class EmitFinalConfigError(StepError):
    """emit_final on a model it cannot apply to; the message names the model and the fix."""


def plan_name(plan: StepPlan, model: ModelSettings) -> str:
    """The plan as the step line and the step record name it."""
    if model.emit_final and plan.kind == "aggregate":
        return PLAN_NAME
    return plan.kind


def final_columns(
    model: ModelSettings,
    plan: StepPlan,
    lateness: Sequence[LatenessRule],
    watermark: Sequence[object] = (),
) -> List[FinalColumn]:
    """The lateness columns that decide when a group is final ([] without emit_final).

    Raises:
        EmitFinalConfigError: the model declares emit_final, and it cannot apply.
    """
    if not model.emit_final:
        return []
    name = model.name
    aggregate = plan.aggregate
    if plan.kind != "aggregate" or aggregate is None:
        why = (
            "its plan is a recompute (`strategy: recompute`, or SQL the planner cannot "
            "maintain incrementally)"
            if plan.kind == "recompute"
            else f"it is not an aggregate (its plan is {plan.kind})"
        )
        raise EmitFinalConfigError(
            f"Model {name}: config emit_final applies to an aggregate grouped by a window or a "
            f"truncated time, but {why} ({plan.reason}). Remove emit_final, or make the model a "
            "GROUP BY whose group decides a column with lateness."
        )
    if watermark:
        raise EmitFinalConfigError(
            f"Model {name}: config emit_final cannot be combined with watermark: emit_final "
            "already holds every group until it is final, and a watermark would hold changes "
            "the aggregate's state has already counted. Remove watermark (keep lateness)."
        )
    decided = {output.lower(): expression for output, expression in aggregate.group_outputs}
    if not lateness:
        columns = ", ".join(output for output, _ in aggregate.group_outputs) or "none"
        raise EmitFinalConfigError(
            f"Model {name}: config emit_final needs lateness on a column the model's group "
            "decides (a window's start or end, a truncated time), because a group is final "
            "only once that column is below its waterline; the model declares no lateness. "
            f"Add lateness on one of its group's columns ({columns}), e.g. "
            "lateness={'window_start': 'INTERVAL 1 HOUR'}."
        )
    found = []
    for rule in lateness:
        expression = decided.get(rule.column.name.lower())
        if expression is None:
            columns = ", ".join(output for output, _ in aggregate.group_outputs) or "none"
            raise EmitFinalConfigError(
                f"Model {name}: config emit_final needs every lateness column to be decided by "
                f"the model's group, but {rule.column.name} is not (a group's value there can "
                "change after the group is final). Declare lateness on a column computed from "
                f"the GROUP BY alone ({columns}), or remove emit_final."
            )
        found.append((rule, expression))
    return found


def check_unchanged(model: ModelSettings, last_emit_final: bool, last_step: int) -> None:
    """emit_final cannot be switched on or off between steps: the model holds other rows."""
    if last_step > 0 and bool(model.emit_final) != bool(last_emit_final):
        now = "declares" if model.emit_final else "no longer declares"
        raise EmitFinalConfigError(
            f"Model {model.name}: its config {now} emit_final, but its table was built "
            f"{'without' if model.emit_final else 'with'} it (step {last_step}), so it holds "
            "other groups than the config says. Run `dbt run --full-refresh --select "
            f"{model.name}` to rebuild it, or restore the config."
        )


def newly_final(
    columns: Sequence[FinalColumn],
    waterline: Mapping[str, Optional[str]],
    before: Mapping[str, Optional[str]],
) -> Optional[str]:
    """The predicate over a state row (GROUP_ALIAS) of the groups a step makes final; None when
    no column has a waterline yet (nothing is final)."""
    below_now = [
        f"({expression}) < {rule.literal(waterline[rule.column.name])}"
        for rule, expression in columns
        if waterline.get(rule.column.name) is not None
    ]
    if not below_now:
        return None
    parts = [f"({expression}) IS NOT NULL" for _, expression in columns]
    parts.append("(" + " OR ".join(below_now) + ")")
    parts += [
        f"({expression}) >= {rule.literal(before[rule.column.name])}"
        for rule, expression in columns
        if before.get(rule.column.name) is not None
    ]
    return " AND ".join(parts)


def not_final(columns: Sequence[FinalColumn], before: Mapping[str, Optional[str]]) -> str:
    """The predicate over a state row of the groups not final after a step with waterlines
    `before` whose lateness columns are all non-NULL: the groups a model without emit_final
    holds and this one does not (yet)."""
    parts = [f"({expression}) IS NOT NULL" for _, expression in columns]
    parts += [
        f"({expression}) >= {rule.literal(before[rule.column.name])}"
        for rule, expression in columns
        if before.get(rule.column.name) is not None
    ]
    return " AND ".join(parts)


def rows_of_groups(
    aggregate: AggregatePlan,
    groups: str,
    columns: Sequence[Column],
    condition: Optional[str] = None,
    weight: int = 1,
) -> str:
    """The output rows (weight `weight`) of the groups of `groups` (a view, or an inline SELECT
    with the state's columns) that meet `condition` (over GROUP_ALIAS; None: all of them)."""
    if condition is not None:
        groups = f"(SELECT * FROM {groups} AS {GROUP_ALIAS} WHERE {condition})"
    output = sql.bind_placeholders(aggregate.output_sql, {GROUPS: groups})
    return (
        f"SELECT {sql.column_list(columns)}, CAST({weight} AS BIGINT) AS {WEIGHT} FROM ({output})"
    )
