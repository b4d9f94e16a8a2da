"""`streamsql_lateness_report`: what share of a model's changes each LATENESS would have kept.

Every step counts, per lateness column, how far behind the largest value seen before it its
changes arrived (d, event_time/lateness.py), per rung of a ladder, into `__waterline.behind`. A
change is late under a lateness L exactly when d > L, so the counts of the last steps, summed,
say for every rung what share of those steps' changes a LATENESS of that size would have
accepted. NULL and future changes are not counted (no LATENESS accepts them).

The state a LATENESS keeps: a model with state (an aggregate) keeps, and reads at every step
that changes it, the state of each group not yet final, the groups whose lateness value is not
below the waterline. Under a LATENESS L the waterline is the largest value seen minus L, so the
model's rows counted per rung of d = max_seen - c (`open_groups`, one query over the model's
table) say how many groups each rung would keep open. Final groups' state goes after
`final_state_retention`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from dbt.adapters.streamsql.execution.commit import history
from dbt.adapters.streamsql.execution.context import StepContext
from dbt.adapters.streamsql.execution.engine import statements as sql
from dbt.adapters.streamsql.execution.engine.sql_session import SqlSession
from dbt.adapters.streamsql.execution.event_time import lateness as late
from dbt.adapters.streamsql.execution.shared.errors import StepError
from dbt.adapters.streamsql.execution.shared.lateness_rule import LatenessRule
from dbt.adapters.streamsql.execution.shared.model import ModelSettings

# Per lateness column: the model's rows (groups) with a value in it, and per rung of its
# ladder those no further behind max_seen than the rung (the groups it keeps open).
OpenGroups = Dict[str, Tuple[int, List[int]]]
GROUPS_AT = 50  # the column of the report's "groups kept open"

# How a rung of seconds is written (the largest unit that divides it).
_SECOND_UNITS = ((86400, "day"), (3600, "hour"), (60, "min"), (1, "s"))


def changes(count: int) -> str:
    return f"{count:,} change{'' if count == 1 else 's'}"


def rung_label(value: int, unit: str) -> str:
    """A rung of the ladder as a reader says it: `5 min`, `2 days`, `1000`."""
    if unit == "units":
        return f"{value:,}"
    if unit == "days":
        return f"{value} day{'' if value == 1 else 's'}"
    if value == 0:
        return "0 s"
    for size, name in _SECOND_UNITS:
        if value % size == 0:
            count = value // size
            plural = "s" if count != 1 and name in ("day", "hour") else ""
            return f"{count} {name}{plural}"
    return f"{value} s"


@dataclass
class ColumnLateness:
    """One lateness column's counts, summed over the steps that counted them."""

    column: str
    unit: str = ""
    rungs: List[int] = field(default_factory=list)
    counts: List[int] = field(default_factory=list)  # per rung, then beyond the last
    steps: List[int] = field(default_factory=list)

    def add(self, step: int, behind: Mapping[str, object]) -> None:
        rungs = [int(v) for v in behind["le"]]  # type: ignore[union-attr]
        counts = [int(n) for n in behind["counts"]]  # type: ignore[union-attr]
        if len(counts) != len(rungs) + 1:
            return  # not a count this version writes
        if not self.rungs:
            self.unit, self.rungs, self.counts = str(behind["unit"]), rungs, [0] * len(counts)
        if rungs != self.rungs:
            return  # another ladder (the column's type changed): the newest steps' counts
        self.counts = [a + b for a, b in zip(self.counts, counts)]
        self.steps.append(step)

    @property
    def total(self) -> int:
        return sum(self.counts)

    def accepted(self) -> List[int]:
        """Per rung, the changes a LATENESS of that size would have accepted."""
        return list(accumulate(self.counts[:-1]))


def summed(rows: Sequence[Mapping[str, object]]) -> Dict[str, ColumnLateness]:
    """Per column, the counts of `__waterline` rows (`step`, `column_name`, `behind`), newest
    step first; rows without counts (a column's first step, steps of earlier versions) skip."""
    columns: Dict[str, ColumnLateness] = {}
    for row in sorted(rows, key=lambda r: -int(r["step"])):  # type: ignore[arg-type]
        text = row.get("behind")
        if not text:
            continue
        try:
            behind = json.loads(str(text))
        except ValueError:
            continue
        name = str(row["column_name"])
        columns.setdefault(name, ColumnLateness(name)).add(int(row["step"]), behind)  # type: ignore[arg-type]
    return columns


def model_report(session: SqlSession, model: ModelSettings, steps: object) -> str:
    """`streamsql_lateness_report` of `model` over its last `steps` steps: the counts of its
    `__waterline`, and the groups each rung would keep open when the model keeps state."""
    if not model.lateness:
        raise StepError(
            f"streamsql_lateness_report: model {model.name} has no `lateness` config, "
            "so its steps count nothing of how late changes arrive. Give it one (for "
            "example lateness: {ts: 'INTERVAL 1 DAY'}) and run a few steps."
        )
    try:
        count = int(str(steps))
    except ValueError:
        count = 0
    if count < 1:
        raise StepError(
            f"streamsql_lateness_report: steps is {steps}; pass a number of steps of "
            f"{model.name} to count, 1 or more (the default is 20)."
        )
    ctx = StepContext(session, model)
    table = model.waterline_table
    with ctx.role("the waterline rows of the steps to report on"):
        rows = session.query(
            f"SELECT * FROM {table} WHERE step > "
            f"(SELECT COALESCE(MAX(step), 0) - {count} FROM {table})"
        )
    record = history.read_last_record(ctx)
    kept: Optional[OpenGroups] = None
    state = "The model keeps no state: LATENESS decides only which changes are quarantined."
    if record is not None and record.state_tables and record.emit_final:
        state = "(emit_final: the groups kept open are in the state, not counted here.)"
    elif record is not None and record.state_tables:
        columns = list(ctx.delta_log.snapshot(model.target_name).columns)
        rules = late.lateness_rules(
            model.name, columns, model.lateness, model.max_future, model.final_state_retention
        )
        query = open_groups_query(model.target, rules, record.max_seen)
        if query is not None:
            with ctx.role("the model's groups, by how far behind the largest value seen"):
                kept = open_groups(rules, session.query(query)[0])
        state = (
            "groups kept open: the model's groups (rows) at or above the waterline that "
            "LATENESS would give now, whose state every step keeps and reads when it changes "
            "them; the state of groups below it goes after final_state_retention."
        )
    return report(model.name, table, model.lateness, rows, count, kept, state)


def open_groups_query(
    model_table: str, rules: Sequence[LatenessRule], max_seen: Mapping[str, Optional[str]]
) -> Optional[str]:
    """One row: per rule with a max_seen, the model's rows with a value in its column
    (`g_<i>`), and per rung those whose d = max_seen - c is at most the rung (`o_<i>_<j>`)."""
    parts = []
    for i, rule in enumerate(rules):
        seen = max_seen.get(rule.column.name)
        if seen is None:
            continue
        d = late.behind(rule, seen)
        ladder = late.BEHIND_LADDERS[late.behind_unit(rule.column.data_type)]
        parts.append(f"COUNT({sql.quote(rule.column.name)}) AS g_{i}")
        parts += [f"COUNT_IF({d} <= {rung}) AS o_{i}_{j}" for j, rung in enumerate(ladder)]
    return f"SELECT {', '.join(parts)} FROM {model_table}" if parts else None


def open_groups(rules: Sequence[LatenessRule], row: Mapping[str, object]) -> OpenGroups:
    """`open_groups_query`'s row, per column."""
    found: OpenGroups = {}
    for i, rule in enumerate(rules):
        if f"g_{i}" not in row:
            continue
        ladder = late.BEHIND_LADDERS[late.behind_unit(rule.column.data_type)]
        counts = [int(str(row[f"o_{i}_{j}"] or 0)) for j in range(len(ladder))]
        found[rule.column.name] = (int(str(row[f"g_{i}"] or 0)), counts)
    return found


def report(
    model: str,
    table: str,
    lateness: Mapping[str, str],
    rows: Sequence[Mapping[str, object]],
    steps: int,
    kept: Optional[OpenGroups] = None,
    state: str = "",
) -> str:
    """The report's text for `model` from the `__waterline` rows (`table`) of its last `steps`
    steps; `lateness`: the model's config, column to expression. `kept`: per column, the groups
    each rung keeps open (`open_groups`); `state`: what the report says of the state."""
    columns = summed(rows)
    lines = [f"Lateness of {model} over its last {steps} steps, from {table}."]
    if not columns:
        lines.append(
            "No step has counted how late its changes arrived yet: a column's first step has "
            "nothing to compare with, and steps of an earlier dbt-streamsql did not count. Run "
            "a few more steps."
        )
        return "\n".join(lines)
    for name, counted in columns.items():
        current = _config_of(lateness, name)
        span = f"steps {min(counted.steps)}-{max(counted.steps)}"
        lines.append("")
        lines.append(
            f"{name} (LATENESS {current or 'not set now'}): {changes(counted.total)} over "
            f"{span}, by how far behind the largest value seen before their step they arrived."
        )
        groups = _kept_of(kept or {}, name, len(counted.rungs))
        heading = f"  {'a LATENESS of':<16} would have accepted"
        lines.append(f"{heading:<{GROUPS_AT}}groups kept open" if groups else heading)
        for j, (rung, accepted) in enumerate(zip(counted.rungs, counted.accepted())):
            share = accepted / counted.total if counted.total else 1.0
            line = f"  {rung_label(rung, counted.unit):<16} {share:>8.2%}  ({changes(accepted)})"
            if groups:
                line = f"{line:<{GROUPS_AT}}{groups[1][j]:,} of {groups[0]:,}"
            lines.append(line)
        beyond = counted.counts[-1]
        lines.append(
            f"  more than {rung_label(counted.rungs[-1], counted.unit)}: {changes(beyond)}"
        )
    lines.append("")
    lines.append(
        "A change is late under a LATENESS when it arrived further behind than it; NULL and "
        "future changes are not counted. The model's __late table has the changes its own "
        "LATENESS set aside."
    )
    if state:
        lines.append(state)
    return "\n".join(lines)


def _kept_of(kept: OpenGroups, column: str, rungs: int) -> Optional[Tuple[int, List[int]]]:
    for name, groups in kept.items():
        if name.lower() == column.lower() and len(groups[1]) == rungs:
            return groups
    return None


def _config_of(lateness: Mapping[str, str], column: str) -> Optional[str]:
    for name, expression in lateness.items():
        if name.lower() == column.lower():
            return str(expression)
    return None
