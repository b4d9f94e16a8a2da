"""Aggregate state: the groups a step changes, before and after, and the output change they make.

An aggregate plan (the model's top aggregate, or a stage) keeps per-group partial aggregates in a
state table (plan.py, `AggregatePlan`). A step computes the change of each group from the input
changes (`delta_sql`), combines it with the group's state before the step (`combine_sql`), and
derives the change of the aggregate's output rows from the changed groups' old and new state.
Only the part of the state the changed groups' key ranges reach is read (and later MERGEd), and
with LATENESS on a column the group decides (a window start), not the state of final groups.
The write of the new state is a `StateWrite` (shared/writes.py); it runs with the step's other
writes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from dbt.adapters.streamsql.execution.commit.bounds import (
    CHANGE_ALIAS,
    bind_bounds,
    range_measures,
    ranges_from,
)
from dbt.adapters.streamsql.execution.context import StepContext
from dbt.adapters.streamsql.execution.engine import statements as sql
from dbt.adapters.streamsql.execution.engine.views import inline
from dbt.adapters.streamsql.execution.event_time import lateness as late
from dbt.adapters.streamsql.execution.shared.errors import DroppedStateReached
from dbt.adapters.streamsql.execution.shared.lateness_rule import LatenessRule
from dbt.adapters.streamsql.execution.shared.writes import ChangedGroups
from dbt.adapters.streamsql.planning.plan import (
    GROUP_ALIAS,
    GROUP_DELTA,
    GROUPS,
    STATE,
    AggregatePlan,
    Column,
)

# Late changes touching final groups of at most this many lateness values (say, old windows)
# still let a step skip the state of the other final groups.
MAX_FINAL_GROUP_VALUES = 100


def group_columns(aggregate: AggregatePlan) -> List[Column]:
    return [c for c in aggregate.state_columns if c.name in aggregate.group_columns]


def state_before(table: str, step: int, aggregate: AggregatePlan) -> str:
    """The SELECT of an aggregate's whole state as of step `step` (the steps' rows up to it).

    Before the first step (`step` 0) the state is empty: a filter that is always false, which
    Spark's optimizer folds into an empty relation, so no statement reads the state table (the
    first read of a table costs a Spark job to list its files, even of an empty one)."""
    state = sql.latest_state(
        sql.state_through(table, step), group_columns(aggregate), aggregate.state_columns
    )
    return state if step > 0 else f"SELECT * FROM ({state}) AS {GROUP_ALIAS} WHERE false"


@dataclass(frozen=True)
class StateRead:
    """How a step reads an aggregate's state for its changed groups (`changed_groups`)."""

    # The SELECT of the whole state before the step (`state_before`); only the part the changed
    # groups' key ranges reach is read, narrowed further by the LATENESS rules whose column
    # the group decides (`final_group_bounds`).
    state: str
    first_step: bool  # the step's (step_state.py)
    inserts_only: bool  # the step's, so far (step_state.py)
    lateness: Sequence[LatenessRule] = ()
    waterline: Optional[Mapping[str, Optional[str]]] = None  # the previous step's
    state_empty: bool = False  # `state` is the empty state before a first step
    # Per lateness column, the value below which final groups' state was dropped
    # (tables.dropped_groups).
    dropped_below: Optional[Mapping[str, str]] = None
    # The model columns LATENESS judges that the aggregate's groups decide, with their SQL over
    # a state row; None: its own (`AggregatePlan.group_outputs`); a stage's are those the
    # model carries (tables.lateness_outputs).
    group_outputs: Optional[Sequence[Tuple[str, str]]] = None


def changed_groups(
    ctx: StepContext, label: str, aggregate: AggregatePlan, read: StateRead
) -> ChangedGroups:
    """Group delta, state before the step, and the old and new state of changed groups, the
    state read as `read` says.

    Raises:
        DroppedStateReached: the change reaches a group below `read.dropped_below`, whose
            state before the step is no longer there to tell what the change did.
    """
    state, first_step, state_empty = read.state, read.first_step, read.state_empty
    group_outputs, dropped_below = read.group_outputs, read.dropped_below
    delta_sql = aggregate.delta_form(first_step, read.inserts_only)
    bind_bounds(ctx, aggregate.bounds, delta_sql, first_step)
    who = aggregate_name(label)
    reads = ctx.bindings.reads(delta_sql)
    outputs = aggregate.group_outputs if group_outputs is None else group_outputs
    final = late.final_group_columns(read.lateness, read.waterline or {}, outputs)
    # (no FILTER clause: Spark refuses one in measures computed with the pass; collect_set
    # leaves out the NULLs of the other rows)
    touched = {
        f"final{i}": f"collect_set(CASE WHEN NOT {late.open_groups(rule, expression, value)} "
        f"THEN CAST({expression} AS STRING) END)"
        for i, (rule, expression, value) in enumerate(final)
    }
    dropped = dropped_below or {}
    below = {
        f"dropped{i}": f"MAX(CASE WHEN ({expression}) < "
        f"{rule.literal(dropped[rule.column.name])} THEN 1 ELSE 0 END)"
        for i, (rule, expression, _) in enumerate(final)
        if rule.column.name in dropped
    }
    # The changed groups, counted and with their key ranges, as they are computed; with MIN/MAX,
    # also how many may have lost an extreme.
    shortcut = aggregate.recompute_check and aggregate.combine_without_recompute_sql
    check = {"recompute": aggregate.recompute_check} if shortcut else {}
    measures = range_measures(
        group_columns(aggregate),
        GROUP_ALIAS,
        {"groups": "COUNT(*)", **touched, **below, **check},
        first_step,
    )
    group_delta, found = ctx.views.measure(
        f"{label}group_delta",
        ctx.bindings.bind(delta_sql),
        measures,
        GROUP_ALIAS,
        f"{who}: the change of each group"
        + (f", from {reads}" if reads else "")
        + "; how many groups, and their key ranges"
        + ("; may a deletion have removed a group's MIN or MAX?" if shortcut else ""),
    )
    reached = {
        rule.column.name: dropped[rule.column.name]
        for i, (rule, _, _) in enumerate(final)
        if int(found.get(f"dropped{i}") or 0)
    }
    if reached:
        raise DroppedStateReached(
            "a late change reached final groups whose state was dropped "
            f"({late.below_lines(reached)}; "
            "config final_state_retention keeps more)"
        )
    ranges = ranges_from(group_columns(aggregate), GROUP_ALIAS, found, first_step)
    bounds = final_group_bounds(final, [as_list(found[name]) for name in touched]) + ranges
    if bounds:
        state = f"SELECT * FROM ({state}) AS {GROUP_ALIAS} WHERE {' AND '.join(bounds)}"
    state = inline(state)
    # The changed groups' state before the step, read from the state table once: the new
    # state and the output change both start from it (each read the table again before).
    # Before the first step it is empty (state_before): nothing to read.
    old_groups = sql.previous_groups(state, group_delta, group_columns(aggregate))
    old = (
        inline(old_groups)
        if state_empty
        else ctx.views.materialize(
            f"{label}groups_old",
            old_groups,
            f"{who}: the state of the changed groups before the step",
        )
    )
    local = {GROUP_DELTA: group_delta, STATE: old}
    combine = aggregate.combine_sql
    if shortcut and int(found["recompute"]) == 0:
        # No deleted value can have been a MIN/MAX: skip re-reading the inputs' history.
        combine = aggregate.combine_without_recompute_sql
    new = ctx.views.materialize(
        f"{label}groups_new",
        ctx.bindings.bind(combine, local),
        f"{who}: the new state of the changed groups",
    )
    return ChangedGroups(new, old, int(found["groups"]))


def output_change(
    ctx: StepContext,
    label: str,
    aggregate: AggregatePlan,
    groups: ChangedGroups,
    columns: Sequence[Column],
    nothing_before: bool = False,
    measures: Optional[Dict[str, str]] = None,
) -> str:
    """The consolidated change of the aggregate's output rows (materialized view).

    `nothing_before`: the output before the step is empty (a first step: the model's table
    starts empty even where the query's old output is not, e.g. a global aggregate's one row).
    `measures`: what to measure over it as it is computed (rows aliased `t`: the commit's,
    `bounds.change_measures`).
    """
    output_new = sql.bind_placeholders(aggregate.output_sql, {GROUPS: groups.new})
    output_old = sql.bind_placeholders(aggregate.output_sql, {GROUPS: groups.old})
    if nothing_before:
        output_old = f"SELECT * FROM ({output_old}) WHERE false"
    change = inline(sql.output_change(output_new, output_old, columns))
    whose = "the model" if not label else aggregate_name(label)
    net, _ = ctx.views.measure(
        f"{label}net",
        sql.consolidate(change, columns),
        measures or {},
        CHANGE_ALIAS,
        f"net change of {whose}",
    )
    return net


def aggregate_name(label: str) -> str:
    """The aggregate a view label belongs to, for the statement log: "stage0", "the aggregate"
    (the model's own), a rebuild's "re_stage0"."""
    return label.rstrip("_") or "the aggregate"


def final_group_bounds(
    final: Sequence[Tuple[LatenessRule, str, str]], touched: Sequence[List[str]]
) -> List[str]:
    """Predicates that leave out the state of final groups this step does not touch.

    A group whose LATENESS column (a window start, a truncated hour) is below the previous
    waterline is final: any change to it is late. The step reads the state of the other
    groups, plus that of the few final groups its late changes touch (`touched`, per rule of
    `final`: the values of those groups; needed to describe the quarantined change), named by
    value so that Delta can still skip files.
    """
    bounds = []
    for (rule, expression, value), values in zip(final, touched):
        if len(values) > MAX_FINAL_GROUP_VALUES:
            return []  # late changes all over history: read the whole state
        bounds.append(late.open_groups(rule, expression, value, sorted(values)))
    return bounds


def as_list(value: Any) -> List[str]:
    """An array as a session returns it: a list, or (over Thrift) JSON text."""
    if value is None:
        return []
    if isinstance(value, str):
        return [str(item) for item in json.loads(value)]
    return [str(item) for item in value]
