"""streamsql_readmit: quarantined changes applied to the model after all, exactly once.

A row of `<model>__late` is a change of the model that a step computed and LATENESS did not
apply (docs/lateness-and-watermark.md). Readmitting some of them is a step of its own
(execution/readmit.py): it reads no input (its record keeps the input versions and waterlines
of the step before), its change is the selected rows (an insert as +1, a delete as -1, netted),
committed to the model like any step's change, and its one side write marks those rows in
`__late` with its step (READMITTED_STEP). Afterwards the guarantee of docs/steps.md reads the
late changes as those not readmitted.

Exactly once: the change is read from `__late` at one version, under `condition`: the rows
not readmitted yet, of the steps completed before, that meet the user's `where`. The mark is
one UPDATE under the same condition, with the step's idempotent-write id: Delta skips it when it
has landed, and between the model's commit and the mark nothing else writes `__late` (the next
step, or the next readmit, first finishes this one), so a mark made again after a crash marks
the same rows. That needs a `where` whose value on a row cannot change between the two: it may
read only the row's own columns, and no clock, random value or other table (`checked_where`).

Everything here builds SQL or checks text; execution/readmit.py runs it.
"""

from __future__ import annotations

from typing import List, Sequence

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from dbt.adapters.streamsql.execution.engine import statements as sql
from dbt.adapters.streamsql.execution.shared.errors import StepError
from dbt.adapters.streamsql.planning.plan import DIALECT, WEIGHT, Column

READMITTED_STEP = "_streamsql_readmitted_step"
READMITTED_COLUMN = Column(READMITTED_STEP, "bigint")
# What a `where` may not call: values that differ between the readmit's read and its mark.
UNSTABLE = (
    exp.CurrentTimestamp,
    exp.CurrentDate,
    exp.CurrentTime,
    exp.CurrentDatetime,
    exp.Localtimestamp,
    exp.Rand,
    exp.Uuid,
)
UNSTABLE_NAMES = {
    "now",
    "rand",
    "randn",
    "random",
    "uuid",
    "shuffle",
    "monotonically_increasing_id",
    "spark_partition_id",
    "input_file_name",
    "input_file_block_start",
    "input_file_block_length",
    "current_timestamp",
    "current_date",
    "localtimestamp",
    "unix_timestamp",
    "try_reflect",
    "reflect",
    "java_method",
}
EXAMPLE = "e.g. \"_streamsql_step between 3 and 5 and _streamsql_reason = 'late'\""


def checked_where(model: str, where: str, late_table: str, late_columns: Sequence[str]) -> str:
    """`where` as the readmit runs it, once checked: one condition over `late_table`'s own
    columns (`late_columns`) that gives a row the same value whenever it is evaluated.

    Raises:
        StepError: naming the model and what to change.
    """
    text = (where or "").strip()
    start = f"streamsql_readmit on model {model}:"
    if not text:
        raise StepError(
            f"{start} no `where` given. Pass a condition over the columns of {late_table} "
            f"({EXAMPLE}), or where: 'true' to readmit every quarantined change."
        )
    try:
        tree = sqlglot.parse_one(text, read=DIALECT)
    except ParseError as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise StepError(
            f"{start} its `where` ({text!r}) is not a SQL condition ({first}). Pass a condition "
            f"over the columns of {late_table}, {EXAMPLE}."
        ) from error
    if isinstance(tree, (exp.Query, exp.Block, exp.Command, exp.DDL, exp.DML, exp.Drop)):
        raise StepError(
            f"{start} its `where` ({text!r}) is a statement, not a condition. Pass a "
            f"condition over the columns of {late_table}, {EXAMPLE}."
        )
    if any(isinstance(node, (exp.Query, exp.Table)) for node in tree.walk()):
        raise StepError(
            f"{start} its `where` ({text!r}) reads another table. It may read only the "
            f"columns of {late_table}: select the rows by their values, {EXAMPLE}."
        )
    unstable = _unstable_calls(tree)
    if unstable:
        raise StepError(
            f"{start} its `where` ({text!r}) calls {', '.join(unstable)}, whose value changes "
            "between the readmit's read and its mark of the rows (after a crash they would "
            "differ). Write the time or the values out, e.g. "
            "\"_streamsql_at < timestamp'2026-12-01 00:00:00'\"."
        )
    known = {name.lower() for name in late_columns}
    qualified = sorted({c.sql(dialect=DIALECT) for c in tree.find_all(exp.Column) if c.table})
    if qualified:
        raise StepError(
            f"{start} its `where` ({text!r}) qualifies {', '.join(qualified)} with a table. "
            f"Name the columns of {late_table} alone."
        )
    lambda_names = {
        param.name.lower()
        for function in tree.find_all(exp.Lambda)
        for param in function.expressions
    }
    unknown = sorted(
        {
            column.name
            for column in tree.find_all(exp.Column)
            if column.name.lower() not in known | lambda_names
        }
    )
    if unknown:
        raise StepError(
            f"{start} its `where` ({text!r}) names {', '.join(unknown)}, which {late_table} "
            f"does not have. Its columns: {', '.join(late_columns)}."
        )
    return text


def _unstable_calls(tree: exp.Expression) -> List[str]:
    found = []
    for node in tree.walk():
        if isinstance(node, UNSTABLE):
            found.append(node.sql(dialect=DIALECT))
        elif isinstance(node, exp.Anonymous) and str(node.this).lower() in UNSTABLE_NAMES:
            found.append(f"{node.this}()")
    return sorted(set(found))


def condition(where: str, through_step: int, marked: bool = True) -> str:
    """The rows a readmit takes: not readmitted yet, quarantined by a step up to
    `through_step` (the last completed one), and meeting `where` (`checked_where`).
    `marked`: `__late` has READMITTED_STEP (a table made before readmit has none, and no row
    of it was readmitted)."""
    fresh = f"{READMITTED_STEP} IS NULL AND " if marked else ""
    # on lines of its own: a `--` comment that ends `where` ends there
    return f"{fresh}_streamsql_step <= {int(through_step)} AND (\n{where}\n)"


def not_readmitted_by(step: int) -> str:
    """The rows of `__late` still set aside after step `step`: those no step up to it
    readmitted (a table made before readmit has no READMITTED_STEP: use none)."""
    return f"({READMITTED_STEP} IS NULL OR {READMITTED_STEP} > {int(step)})"


def selected_rows(late_at: str, rows_condition: str) -> str:
    """How many rows of `__late` (`late_at`: the table at the readmit's version) are taken,
    and the steps that quarantined them."""
    return (
        "SELECT COUNT(*) AS selected, MIN(_streamsql_step) AS first_step, "
        f"MAX(_streamsql_step) AS last_step FROM {late_at} WHERE {rows_condition}"
    )


def readmitted_change(
    late_at: str, columns: Sequence[Column], late_names: Sequence[str], rows_condition: str
) -> str:
    """The readmit's change of the model, netted: each taken row of `__late` as +1 (an
    insert the step did not apply) or -1 (a delete), with the model's `columns` (those
    `__late` lacks, NULL: on_schema_change 'ignore')."""
    have = {name.lower() for name in late_names}
    values = ", ".join(
        sql.quote(c.name)
        if c.name.lower() in have
        else f"CAST(NULL AS {c.data_type}) AS {sql.quote(c.name)}"
        for c in columns
    )
    signed = (
        f"SELECT {values}, CAST(CASE WHEN _streamsql_change = 'insert' THEN 1 ELSE -1 END "
        f"AS BIGINT) AS {WEIGHT} FROM {late_at} WHERE {rows_condition}"
    )
    return sql.consolidate(f"({signed})", columns)


def missing_deletes(change: str, model_table: str, columns: Sequence[Column]) -> str:
    """The copies the change deletes that the model does not hold (0 when it holds them
    all), and one such row as text: a delete whose insert was quarantined too, or readmitted
    without it."""
    cols = sql.column_list(columns)
    held = (
        f"SELECT {sql.grouped_columns(columns)}, COUNT(*) AS _held FROM {model_table} "
        f"GROUP BY {sql.grouping(columns)}"
    )
    short = f"d.{WEIGHT} + COALESCE(m._held, 0) < 0"
    return (
        f"SELECT COALESCE(SUM(-d.{WEIGHT} - COALESCE(m._held, 0)), 0) AS missing, "
        f"CAST(first(struct({sql.column_list(columns, 'd.')})) AS STRING) AS example "
        f"FROM (SELECT {cols}, {WEIGHT} FROM {change} WHERE {WEIGHT} < 0) d "
        f"LEFT JOIN ({held}) m ON {sql.null_safe_match(columns, 'd', 'm')} WHERE {short}"
    )
