"""WATERMARK (after Feldera): hold a change until the data has moved past it.

The rule as users see it: docs/lateness-and-watermark.md, section WATERMARK.

For a watermark column c with delay W, a change with value X in c is held until some change with
value >= X + W has been seen (in this or an earlier step); it is then applied in that step, as if
it had just arrived (so LATENESS still judges it). Several watermark columns: a change is released
when all of them allow it. A change with NULL in a watermark column cannot be ordered and is
released at once (LATENESS, if declared, quarantines it).

Held changes live in `<model>__pending`: the model's columns, the change's weight, the step that
held it, the step that released it (NULL while held) and an id. A step writes the table once, in
one MERGE by id (the macro `streamsql_merge_pending_rows` over `pending_changes`): it marks the
rows it releases and adds the changes it holds, so a reader sees all of a step's effect on the
table or none of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Mapping, Optional, Sequence

from dbt.adapters.streamsql.execution.engine.statements import column_list, quote
from dbt.adapters.streamsql.execution.event_time.lateness import (
    LatenessConfigError,
    constant_expression,
    find_column,
)
from dbt.adapters.streamsql.planning.dialect import string_literal
from dbt.adapters.streamsql.planning.plan import WEIGHT, Column

HELD_STEP = "_streamsql_held_step"
RELEASED_STEP = "_streamsql_released_step"
HELD_ID = "_streamsql_held_id"
RELEASE = "_streamsql_release"  # whether a candidate is released this step
PENDING_COLUMNS = (
    Column(WEIGHT, "bigint"),
    Column(HELD_STEP, "bigint"),
    Column(RELEASED_STEP, "bigint"),
    Column(HELD_ID, "string"),
)


@dataclass(frozen=True)
class WatermarkRule:
    column: Column
    delay: str  # a constant Spark SQL expression

    def literal(self, value: str) -> str:
        return f"CAST({string_literal(value)} AS {self.column.data_type})"


def watermark_rules(
    model: str, output_columns: Sequence[Column], watermark: Optional[Mapping[str, object]]
) -> List[WatermarkRule]:
    rules = []
    for name, value in dict(watermark or {}).items():
        column = find_column(model, "watermark", output_columns, str(name))
        if not constant_expression(str(value)):
            raise LatenessConfigError(
                f"Model {model}: config watermark[{name}] = {value!r} is not a constant "
                'expression. Use a literal such as "INTERVAL 10 MINUTES" or "100".'
            )
        rules.append(WatermarkRule(column, str(value)))
    return rules


def addition_check(rule: WatermarkRule) -> str:
    """A query that fails unless `column + delay` is comparable with the column."""
    col = rule.column
    return (
        f"SELECT CAST(NULL AS {col.data_type}) + ({rule.delay}) >= "
        f"CAST(NULL AS {col.data_type}) AS ok"
    )


def seen_query(
    net_view: str, rules: Sequence[WatermarkRule], seen: Mapping[str, Optional[str]]
) -> str:
    """One row, `s_<i>`: the largest value of each watermark column seen so far, as a string."""
    parts = []
    for i, rule in enumerate(rules):
        step_max = f"MAX({quote(rule.column.name)})"
        before = seen.get(rule.column.name)
        largest = f"greatest({rule.literal(before)}, {step_max})" if before else step_max
        parts.append(f"CAST({largest} AS STRING) AS s_{i}")
    return f"SELECT {', '.join(parts)} FROM {net_view}"


def release_condition(
    rules: Sequence[WatermarkRule], seen: Mapping[str, Optional[str]], release_all: bool = False
) -> str:
    if release_all:
        return "true"
    conditions = []
    for rule in rules:
        col = quote(rule.column.name)
        largest = seen.get(rule.column.name)
        passed = f"{col} + ({rule.delay}) <= {rule.literal(largest)}" if largest else "false"
        conditions.append(f"({col} IS NULL OR {passed})")
    return " AND ".join(conditions)


def candidates(
    net_view: str, pending_view: str, columns: Sequence[Column], step: int, condition: str
) -> str:
    """This step's changes and every change still held, each with the step that held it, an id
    (new for this step's changes) and whether the watermark releases it now (`condition`)."""
    cols = column_list(columns)
    return (
        f"SELECT *, {condition} AS {RELEASE} FROM ("
        f"SELECT {cols}, {WEIGHT}, CAST({step} AS BIGINT) AS {HELD_STEP}, "
        f"uuid() AS {HELD_ID} FROM {net_view} "
        f"UNION ALL SELECT {cols}, {WEIGHT}, {HELD_STEP}, {HELD_ID} FROM {pending_view} "
        f"WHERE {RELEASED_STEP} IS NULL)"
    )


def released(candidates_view: str, columns: Sequence[Column]) -> str:
    return f"SELECT {column_list(columns)}, {WEIGHT} FROM {candidates_view} WHERE {RELEASE}"


def pending_counts(candidates_view: str, step: int) -> str:
    """`held`: copies the table holds after the step; `writes`: rows the step changes in it (the
    held changes it releases, and its own changes it holds)."""
    return (
        f"SELECT COALESCE(SUM(abs({WEIGHT})) FILTER (WHERE NOT {RELEASE}), 0) AS held, "
        f"COUNT(*) FILTER (WHERE {RELEASE} <> ({HELD_STEP} = {step})) AS writes "
        f"FROM {candidates_view}"
    )


def pending_changes(candidates_view: str, columns: Sequence[Column], step: int) -> str:
    """The changes a step writes to `__pending`: the held ones it releases (to be marked) and
    its own that it holds (to be added), each with its weight, held step, id and whether it is
    released. The macro `streamsql_merge_pending_rows` makes the one MERGE by id that writes
    them."""
    return (
        f"SELECT {column_list(columns)}, {WEIGHT}, {HELD_STEP}, {HELD_ID}, {RELEASE} "
        f"FROM {candidates_view} WHERE {RELEASE} <> ({HELD_STEP} = {step})"
    )


def ids_missing(pending_table: str) -> List[str]:
    """Gives every row of a `__pending` table made before rows had ids an id of its own."""
    return [
        f"ALTER TABLE {pending_table} ADD COLUMNS ({HELD_ID} string)",
        f"UPDATE {pending_table} SET {HELD_ID} = uuid() WHERE {HELD_ID} IS NULL",
    ]


def held_count(pending_table: str) -> str:
    """The copies of changes `__pending` holds (docs/tables.md: its released step is NULL)."""
    return (
        f"SELECT COALESCE(SUM(abs({WEIGHT})), 0) AS n FROM {pending_table} "
        f"WHERE {RELEASED_STEP} IS NULL"
    )
