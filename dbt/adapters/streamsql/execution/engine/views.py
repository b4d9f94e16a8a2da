"""The relations a step computes with: inline, temporary views, and materialized ones.

Most intermediate results are `inline`: their SELECT is written into the statement that reads
it, which costs no statement and lets Spark plan them together. A temporary view (`view`) is
created once, for a relation whose planning is dear (an older version of a table). A
materialized view
(`SqlSession.materialize`: a local checkpoint in the embedded session, CACHE TABLE over Thrift) is
computed once, now: for results read several times, or read across the step's own writes to
the tables they were computed from. `drop_all` frees the materialized ones at the end of a step;
plain views keep their names from step to step and are replaced, not dropped.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from dbt.adapters.streamsql.execution.engine import statements as sql
from dbt.adapters.streamsql.execution.engine.sql_session import SqlSession


def inline(select: str) -> str:
    """A relation written into the statements that read it: no statement of its own."""
    return f"({select})"


class StepViews:
    def __init__(self, session: SqlSession, prefix: str) -> None:
        self.session = session
        self.prefix = prefix
        self._materialized: List[str] = []
        # view name -> the measures it was computed with, and their values
        self._measured: Dict[str, Tuple[Dict[str, str], Dict[str, Any]]] = {}

    def view(self, label: str, select: str, role: Optional[str] = None) -> str:
        """A plain view: read once, planned with what reads it. `role`: what it holds, for the
        statement log (trace.py)."""
        name = f"{self.prefix}_{label}"
        with self.session.trace.role(role or f"the view {label}"):
            self.session.run(sql.temp_view(name, select))
        return name

    def materialize(self, label: str, select: str, role: Optional[str] = None) -> str:
        """A view computed once, now: read several times, or across the step's writes."""
        return self.measure(label, select, {}, "", role)[0]

    def measure(
        self,
        label: str,
        select: str,
        measures: Dict[str, str],
        alias: str,
        role: Optional[str] = None,
    ) -> Tuple[str, Dict[str, Any]]:
        """`materialize`, and the values of `measures` (name -> aggregate expression over the
        view's rows, aliased `alias`), computed as it is (`SqlSession.materialize`)."""
        name = f"{self.prefix}_{label}"
        with self.session.trace.role(role or f"{label}, computed now"):
            values = self.session.materialize(name, select, measures, alias)
        self._materialized.append(name)
        if measures:
            self._measured[name] = (dict(measures), values)
        else:  # computed again without them: what was measured before is not this view's
            self._measured.pop(name, None)
        return name, values

    def measured(self, relation: str, wanted: Dict[str, str]) -> Optional[Dict[str, Any]]:
        """The values of `wanted` (name -> expression) if `relation` is a view of this step
        measured with each of them as it was computed; else None (to be queried)."""
        measures, values = self._measured.get(relation, ({}, {}))
        if any(measures.get(name) != expression for name, expression in wanted.items()):
            return None
        return {name: values[name] for name in wanted}

    def drop_all(self) -> None:
        """Free the data of the step's materialized views (plain views are replaced next step)."""
        names, self._materialized = list(reversed(self._materialized)), []
        self._measured.clear()
        try:
            self.session.release(names)
        except Exception:  # cleanup must not hide the step's own error
            pass
