"""WATERMARK (SPEC section 5, after Feldera): hold a change until the data has moved past it.

For a watermark column c with delay W, a change with value X in c is held until some change with
value >= X + W has been seen (in this or an earlier step); it is then applied in that step, as if
it had just arrived (so LATENESS still judges it). Several watermark columns: a change is released
when all of them allow it. A change with NULL in a watermark column cannot be ordered and is
released at once (LATENESS, if declared, quarantines it).

Held changes live in `<model>__pending`: the model's columns, the change's weight, the step that
held it and the step that released it (NULL while held). Rows are never rewritten in place except
to mark their release, so an interrupted step is undone by forgetting marks and rows of its step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Mapping, Optional, Sequence

from dbt.adapters.streamsql.execution.lateness import (
    LatenessConfigError,
    constant_expression,
    find_column,
)
from dbt.adapters.streamsql.execution.statements import column_list, count_copies, quote
from dbt.adapters.streamsql.planning.plan import WEIGHT, Column

HELD_STEP = "_streamsql_held_step"
RELEASED_STEP = "_streamsql_released_step"
PENDING_COLUMNS = (
    Column(WEIGHT, "bigint"),
    Column(HELD_STEP, "bigint"),
    Column(RELEASED_STEP, "bigint"),
)


@dataclass(frozen=True)
class WatermarkRule:
    column: Column
    delay: str  # a constant Spark SQL expression

    def literal(self, value: str) -> str:
        return f"CAST('{value}' AS {self.column.data_type})"


def watermark_rules(model: str, output_columns: Sequence[Column],
                    watermark: Optional[Mapping[str, object]]) -> List[WatermarkRule]:
    rules = []
    for name, value in dict(watermark or {}).items():
        column = find_column(model, "watermark", output_columns, str(name))
        if not constant_expression(str(value)):
            raise LatenessConfigError(
                f"Model {model}: config watermark[{name}] = {value!r} is not a constant "
                "expression. Use a literal such as \"INTERVAL 10 MINUTES\" or \"100\"."
            )
        rules.append(WatermarkRule(column, str(value)))
    return rules


def addition_check(rule: WatermarkRule) -> str:
    """A query that fails unless `column + delay` is comparable with the column."""
    col = rule.column
    return (f"SELECT CAST(NULL AS {col.data_type}) + ({rule.delay}) >= "
            f"CAST(NULL AS {col.data_type}) AS ok")


def seen_query(net_view: str, rules: Sequence[WatermarkRule],
               seen: Mapping[str, Optional[str]]) -> str:
    """One row, `s_<i>`: the largest value of each watermark column seen so far, as a string."""
    parts = []
    for i, rule in enumerate(rules):
        step_max = f"MAX({quote(rule.column.name)})"
        before = seen.get(rule.column.name)
        largest = f"greatest({rule.literal(before)}, {step_max})" if before else step_max
        parts.append(f"CAST({largest} AS STRING) AS s_{i}")
    return f"SELECT {', '.join(parts)} FROM {net_view}"


def release_condition(rules: Sequence[WatermarkRule], seen: Mapping[str, Optional[str]],
                      release_all: bool = False) -> str:
    if release_all:
        return "true"
    conditions = []
    for rule in rules:
        col = quote(rule.column.name)
        largest = seen.get(rule.column.name)
        passed = f"{col} + ({rule.delay}) <= {rule.literal(largest)}" if largest else "false"
        conditions.append(f"({col} IS NULL OR {passed})")
    return " AND ".join(conditions)


def candidates(net_view: str, pending_view: str, columns: Sequence[Column], step: int) -> str:
    """This step's changes and every change still held, each with the step that held it."""
    cols = column_list(columns)
    return (
        f"SELECT {cols}, {WEIGHT}, CAST({step} AS BIGINT) AS {HELD_STEP} FROM {net_view} "
        f"UNION ALL SELECT {cols}, {WEIGHT}, {HELD_STEP} FROM {pending_view} "
        f"WHERE {RELEASED_STEP} IS NULL"
    )


def released(candidates_view: str, columns: Sequence[Column], condition: str) -> str:
    return (f"SELECT {column_list(columns)}, {WEIGHT} FROM {candidates_view} "
            f"WHERE {condition}")


def mark_released(pending_table: str, condition: str, step: int) -> str:
    return (f"UPDATE {pending_table} SET {RELEASED_STEP} = {step} "
            f"WHERE {RELEASED_STEP} IS NULL AND ({condition})")


def hold(pending_table: str, candidates_view: str, columns: Sequence[Column], condition: str,
         step: int) -> str:
    """Changes that arrived in this step and are not released yet."""
    cols = column_list(columns)
    return (
        f"INSERT INTO {pending_table} ({cols}, {WEIGHT}, {HELD_STEP}, {RELEASED_STEP}) "
        f"SELECT {cols}, {WEIGHT}, {HELD_STEP}, CAST(NULL AS BIGINT) FROM {candidates_view} "
        f"WHERE {HELD_STEP} = {step} AND NOT ({condition})"
    )


def held_count(pending_table: str) -> str:
    return count_copies(pending_table, f"{RELEASED_STEP} IS NULL")


def forget_attempt(pending_table: str, step: int) -> List[str]:
    """Undo an interrupted attempt of `step`: its held rows and its release marks."""
    return [
        f"DELETE FROM {pending_table} WHERE {HELD_STEP} >= {step}",
        f"UPDATE {pending_table} SET {RELEASED_STEP} = NULL WHERE {RELEASED_STEP} >= {step}",
    ]
