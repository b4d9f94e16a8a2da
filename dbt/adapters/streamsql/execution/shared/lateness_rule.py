"""A LATENESS rule of a model's column: what the step classifies the change's rows by
(event_time/lateness.py) and what its quarantine write carries (writes.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from dbt.adapters.streamsql.planning.dialect import string_literal
from dbt.adapters.streamsql.planning.plan import Column


@dataclass(frozen=True)
class LatenessRule:
    column: Column
    lateness: str  # a constant Spark SQL expression
    max_future: Optional[str] = None
    # How far below the waterline an aggregate keeps the state of final groups (config
    # final_state_retention, a constant expression like `lateness`): "" for the lateness
    # itself, None for ever.
    final_state: Optional[str] = ""

    def literal(self, value: str) -> str:
        """A stored waterline (a string) as a value of the column's type."""
        return f"CAST({string_literal(value)} AS {self.column.data_type})"

    @property
    def state_kept(self) -> Optional[str]:
        """How far below the waterline final groups' state is kept; None: for ever."""
        return self.lateness if self.final_state == "" else self.final_state

    def state_line(self, waterline: str, dropped_before: Optional[str]) -> str:
        """SQL for the value below which a final group's state is dropped, given the
        waterline: the waterline minus `state_kept`, never below an earlier line (as a string,
        like a waterline)."""
        line = self._below(self.literal(waterline))
        if dropped_before is not None:
            line = f"greatest({self.literal(dropped_before)}, {line})"
        return f"CAST({line} AS STRING)"

    def state_line_risen(self, waterline: str, dropped_before: str) -> str:
        """SQL for whether the line, given the waterline, now lies `state_kept` or more above
        the line `dropped_before` (true: a rewrite would drop that much more state)."""
        above = f"CAST({self.literal(dropped_before)} + ({self.state_kept}) AS "
        return f"{self._below(self.literal(waterline))} >= {above}{self.column.data_type})"

    def _below(self, value: str) -> str:
        return f"CAST({value} - ({self.state_kept}) AS {self.column.data_type})"
