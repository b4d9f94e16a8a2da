"""`streamsql_lateness_report`: what share of a model's changes each LATENESS would have kept.

Every step counts, per lateness column, how far behind the largest value seen before it its
changes arrived (d, event_time/lateness.py), per rung of a ladder, into `__waterline.behind`. A
change is late under a lateness L exactly when d > L, so the counts of the last steps, summed,
say for every rung what share of those steps' changes a LATENESS of that size would have
accepted. NULL and future changes are not counted (no LATENESS accepts them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Dict, List, Mapping, Optional, Sequence

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


def report(
    model: str,
    table: str,
    lateness: Mapping[str, str],
    rows: Sequence[Mapping[str, object]],
    steps: int,
) -> str:
    """The report's text for `model` from the `__waterline` rows (`table`) of its last `steps`
    steps; `lateness`: the model's config, column to expression."""
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
        lines.append(f"  {'a LATENESS of':<16} would have accepted")
        for rung, accepted in zip(counted.rungs, counted.accepted()):
            share = accepted / counted.total if counted.total else 1.0
            lines.append(
                f"  {rung_label(rung, counted.unit):<16} {share:>8.2%}  ({changes(accepted)})"
            )
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
    return "\n".join(lines)


def _config_of(lateness: Mapping[str, str], column: str) -> Optional[str]:
    for name, expression in lateness.items():
        if name.lower() == column.lower():
            return str(expression)
    return None
