"""What a step writes, as data: the model's change and the side-table writes after it.

The phases that compute a step (pipeline/, event_time/, recovery/) describe their writes with
these types and write nothing themselves; the commit protocol (commit/protocol.py) runs them in
order. Nothing here imports the protocol, so every room may use them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Sequence

from dbt.adapters.streamsql.execution.shared.lateness_rule import LatenessRule
from dbt.adapters.streamsql.planning.plan import AggregatePlan, Column

# The side tables, by their suffix to the model's name.
WATERLINE, LATE, PENDING = "__waterline", "__late", "__pending"


@dataclass
class ChangedGroups:
    """The groups of an aggregate that a step changes, as step-local views."""

    new: str  # materialized: the new state of every changed group (count 0: the group is gone)
    old: str  # materialized: the state of the changed groups before the step
    count: int  # how many groups changed (rows of `new`)


@dataclass(frozen=True)
class ModelChange:
    """The model's change: weighted rows (plan.py) in `relation`, a view or an inline SELECT.

    `appends`: every row has weight +1 and the rows are not netted (the change of a monotonic
    query over inserts only): it is appended as it is, and counted by its commit. `whole`:
    `relation` is the model's rows after the step, without weights (a recompute that writes
    the model whole: pipeline/plan_choice.py `writes_whole`); its commit replaces every row.
    `reads`: what an inline `relation` reads, for the statement log ("the changes of demo.src
    versions 3..5").
    """

    relation: str
    appends: bool = False
    reads: str = ""
    whole: bool = False


@dataclass
class StateWrite:
    """The new state of an aggregate's changed groups, appended to its state table."""

    table: str
    suffix: str  # the table's name after the model's: "__streamsql_state", "__streamsql_stage0"
    aggregate: AggregatePlan
    groups: ChangedGroups
    fresh: bool  # the table is empty (a first step): its groups sorted, without gone ones

    @property
    def name(self) -> str:  # the state table's name in the step record ("state", "stage0")
        return self.suffix[len("__streamsql_") :]


@dataclass
class HeldWrite:
    """WATERMARK: the released rows of `__pending` marked, this step's held changes added."""

    candidates: str  # this step's changes and the ones held before (materialized view)
    columns: Sequence[Column]


@dataclass
class QuarantineWrite:
    """LATENESS: this step's late changes into `__late`, and its waterlines into `__waterline`."""

    classified: str  # the change with each row's lateness reason (materialized view)
    columns: Sequence[Column]
    rules: Sequence[LatenessRule]


@dataclass(frozen=True)
class ReadmitWrite:
    """`streamsql_readmit`: the rows of `__late` the step readmitted, marked with its step.

    `condition`: the rows', over `__late`'s own columns only (event_time/readmit.py), so that
    marking them again after a crash marks the same rows."""

    condition: str


@dataclass
class StepWrites:
    """What a step writes after the model's commit."""

    state: List[StateWrite] = field(default_factory=list)
    held: Optional[HeldWrite] = None
    quarantine: Optional[QuarantineWrite] = None
    readmit: Optional[ReadmitWrite] = None

    def tables(self, late_rows: int) -> List[str]:
        """The side tables written, as suffixes of the model's name, in the order written."""
        tables = []
        if self.quarantine is not None:
            tables.append(WATERLINE)
            if late_rows:
                tables.append(LATE)
        if self.readmit is not None:
            tables.append(LATE)
        if self.held is not None:
            tables.append(PENDING)
        return tables + [write.suffix for write in self.state if write.groups.count]
