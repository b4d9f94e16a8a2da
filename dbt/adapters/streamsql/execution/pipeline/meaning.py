"""Whether the planner's reading of a model's query means what the query does: Spark says.

The fast paths are built from sqlglot's reading of the model's SQL, written back as Spark SQL;
a place where that reading differs from Spark's own parser would change the model's rows
without an error. `Meaning` gives the planner a check of the two (planner.MeaningCheck), made
of what Spark analyzes, no job run:

- every literal the planner writes differently from the model's text (planning/dialect.py,
  `changed_readings`) has the same type and value both ways (one SELECT of constants);
- the planner's whole query has the columns of the model's (DESCRIBE QUERY), type for type.

Where they differ the planner plans the recompute, which runs the SQL as written, and says why
in the plan's reason (the step line). The step record keeps the digest of the texts found
alike, so a model asks once per version of its query (a query that differs asks every step).
"""

from __future__ import annotations

import hashlib
from typing import Optional, Sequence

from sqlglot.errors import SqlglotError

from dbt.adapters.streamsql.execution.context import StepContext
from dbt.adapters.streamsql.planning.dialect import changed_readings, readings_probe
from dbt.adapters.streamsql.planning.plan import Column
from dbt.adapters.streamsql.planning.planner import Describe


class Meaning:
    """The planner's check of its reading of the query (a planner.MeaningCheck), asked of Spark
    through `ctx.session` (`describe`: DESCRIBE QUERY over the inputs' `new` placeholders).

    `checked` is the digest a step record keeps (StepRecord.meaning_checked) of the texts an
    earlier step found alike: the same texts again need no question. After the planner's call,
    `alike` is the digest of the texts found alike ("" when they were not)."""

    def __init__(
        self,
        ctx: StepContext,
        describe: Describe,
        output_columns: Sequence[Column],
        checked: str = "",
    ) -> None:
        self.ctx, self.describe, self.output_columns = ctx, describe, output_columns
        self.checked = checked
        self.alike = ""

    def __call__(self, sql: str, rendered: str) -> Optional[str]:
        key = _digest(sql, rendered, self.output_columns)
        if key == self.checked:
            self.alike = key
            return None
        with self.ctx.role("the planner's reading of the query"):
            verdict = _differs(self.ctx, self.describe, self.output_columns, sql, rendered)
        self.alike = key if verdict is None else ""
        return verdict


def _digest(sql: str, rendered: str, output_columns: Sequence[Column]) -> str:
    types = "\0".join(c.data_type for c in output_columns)
    return hashlib.sha256("\0\0".join((sql, rendered, types)).encode()).hexdigest()[:16]


def _differs(
    ctx: StepContext,
    describe: Describe,
    output_columns: Sequence[Column],
    sql: str,
    rendered: str,
) -> Optional[str]:
    """Why Spark reads the model's SQL and the planner's rendering of it differently, if it
    does."""
    try:
        readings = changed_readings(sql)
    except SqlglotError:
        return "the planner cannot read the query's literals alone"
    if readings:
        try:
            row = ctx.session.query(readings_probe(readings))[0]
        except Exception as error:  # a literal Spark reads only in its place in the query
            return f"Spark cannot check the planner's reading of its literals ({_first(error)})"
        for number, reading in enumerate(readings):
            if row.get(f"r{number}") is not True:
                return (
                    f"the planner reads the literal {reading.text} as "
                    f"{reading.rendered or 'something else'}, which Spark does not take for "
                    "the same value"
                )
    try:
        described = describe(rendered)
    except Exception as error:
        return f"Spark cannot analyze the planner's reading of the query ({_first(error)})"
    ours = [c.data_type for c in described]
    theirs = [c.data_type for c in output_columns]
    if ours != theirs:
        return (
            "the planner's reading of the query has the column types "
            f"({', '.join(ours)}) where the query's are ({', '.join(theirs)})"
        )
    return None


def _first(error: Exception) -> str:
    lines = str(error).strip().splitlines()
    return lines[0][:200] if lines else type(error).__name__
