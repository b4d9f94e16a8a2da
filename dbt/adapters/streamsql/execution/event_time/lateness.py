"""LATENESS (after Feldera): which changes of a step are late, and the waterline.

The rule as users see it: docs/lateness-and-watermark.md, section LATENESS.

For a lateness column c with lateness L, a step n:
- classifies each change of the model: NULL in c -> `null`; c more than `max_future` after now ->
  `future`; c below the previous step's waterline W(n-1) -> `late`. Several columns: the first
  column (in config order) that flags a change names it; `null` before `future` before `late`.
- moves the waterline: W(n) = max(W(n-1), max(c over this step's changes that are neither NULL
  nor future) - L). It never decreases and takes effect one step later.

Each step also counts how far behind the largest value seen before it (M(n-1)) its changes
arrived, d = M(n-1) - c, per rung of a ladder (`BEHIND_LADDERS`: seconds for timestamps, days
for dates, the column's own units otherwise), and writes the counts to `__waterline.behind`.
Since W(n-1) = M(n-1) - L for a lateness L held since, a change is late under L exactly when d
> L, so the counts tell what share of the changes any rung of the ladder would have accepted
(`streamsql_lateness_report`, lateness_report.py).

Everything here builds SQL; `step.py` runs it. The statements that create and write the
side tables come from macros (side_tables.py).
"""

from __future__ import annotations

import json
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import sqlglot
from sqlglot import exp

from dbt.adapters.streamsql.execution.engine.statements import column_list, quote
from dbt.adapters.streamsql.execution.shared.intervals import KEEP_FOREVER
from dbt.adapters.streamsql.execution.shared.lateness_rule import LatenessRule
from dbt.adapters.streamsql.planning.dialect import string_literal
from dbt.adapters.streamsql.planning.plan import DIALECT, WEIGHT, Column

LATE_COLUMN = "_streamsql_column"
REASON = "_streamsql_reason"
QUARANTINE_COLUMNS = (
    Column("_streamsql_step", "bigint"),
    Column("_streamsql_change", "string"),
    Column(LATE_COLUMN, "string"),
    Column("_streamsql_waterline", "string"),
    Column(REASON, "string"),
    Column("_streamsql_at", "timestamp"),
)
BEHIND = "behind"
WATERLINE_COLUMNS = (
    Column("step", "bigint"),
    Column("column_name", "string"),
    Column("waterline", "string"),
    Column("max_seen", "string"),
    Column("at", "timestamp"),
    # JSON: {"unit", "le": the ladder's rungs, "counts": the changes with d <= each rung and
    # above the rung before, then those above the last}; NULL on a column's first step
    Column(BEHIND, "string"),
)
# The rungs d is counted at, by the unit of d (`behind_unit`).
BEHIND_LADDERS: Dict[str, Tuple[int, ...]] = {
    "seconds": (
        *(0, 1, 10, 60, 300, 600, 1800, 3600, 7200, 21600, 43200),
        *(86400, 172800, 604800, 2592000),
    ),
    "days": (0, 1, 2, 7, 14, 30, 90, 365),
    "units": (0, 1, 10, 100, 1000, 10**4, 10**5, 10**6, 10**7, 10**8, 10**9),
}


class LatenessConfigError(Exception):
    pass


def constant_expression(text: str) -> bool:
    """True when `text` is one SQL expression that reads no column and no table."""
    try:
        tree = sqlglot.parse_one(f"SELECT {text}", read=DIALECT)
    except sqlglot.errors.ParseError:
        return False
    select = tree if isinstance(tree, exp.Select) else None
    if select is None or len(select.expressions) != 1:
        return False
    return not any(True for _ in select.find_all(exp.Column, exp.Subquery, exp.Star))


def lateness_rules(
    model: str,
    output_columns: Sequence[Column],
    lateness: Optional[Mapping[str, object]],
    max_future: Optional[Mapping[str, object]],
    final_state: Optional[Mapping[str, object]] = None,
) -> List[LatenessRule]:
    """Rules from the model's config, checked for what can be checked without Spark.

    `final_state`: config final_state_retention, per column (the key EVERY_COLUMN for all)."""
    lateness = dict(lateness or {})
    max_future = dict(max_future or {})
    final_state = dict(final_state or {})
    named_state = {k: v for k, v in final_state.items() if k != EVERY_COLUMN}
    for config_name, mapping in (
        ("lateness", lateness),
        ("max_future", max_future),
        ("final_state_retention", named_state),
    ):
        for name, value in mapping.items():
            find_column(model, config_name, output_columns, str(name))
            if config_name == "final_state_retention" and _forever(value):
                continue
            if not constant_expression(str(value)):
                raise LatenessConfigError(
                    f"Model {model}: config {config_name}[{name}] = {value!r} is not a constant "
                    'expression. Use a literal such as "INTERVAL 1 HOUR" or "1000".'
                )
    every = final_state.get(EVERY_COLUMN)
    if every is not None and not _forever(every) and not constant_expression(str(every)):
        raise LatenessConfigError(
            f"Model {model}: config final_state_retention = {every!r} is not a constant "
            'expression. Use a literal such as "INTERVAL 1 DAY", or "forever".'
        )
    for config_name, mapping in (
        ("max_future", max_future),
        ("final_state_retention", named_state),
    ):
        for name in mapping:
            if str(name).lower() not in {str(k).lower() for k in lateness}:
                raise LatenessConfigError(
                    f"Model {model}: config {config_name} names {name!r}, which has no "
                    "lateness. Declare lateness for that column too."
                )
    rules = []
    for name, value in lateness.items():
        kept = _lookup(named_state, str(name))
        if kept is None and every is not None:
            kept = str(every)
        rules.append(
            LatenessRule(
                find_column(model, "lateness", output_columns, str(name)),
                str(value),
                _lookup(max_future, str(name)),
                None if kept is not None and _forever(kept) else (kept or ""),
            )
        )
    return rules


# final_state_retention as one value for every lateness column
EVERY_COLUMN = "*"


def below_lines(lines: Mapping[str, str]) -> str:
    """Lines below which final groups' state was dropped, as the step line and errors say
    them: `hour_start below 2024-01-01 04:00:00, ...`."""
    return ", ".join(f"{column} below {value}" for column, value in lines.items())


def _forever(value: object) -> bool:
    return str(value).strip().lower() == KEEP_FOREVER


def find_column(
    model: str, config_name: str, output_columns: Sequence[Column], name: str
) -> Column:
    """The model's output column a config names (case-insensitively), or a clear error."""
    for column in output_columns:
        if column.name.lower() == name.lower():
            return column
    available = ", ".join(c.name for c in output_columns)
    raise LatenessConfigError(
        f"Model {model}: config {config_name} names column {name!r}, which the model does not "
        f"have (its columns: {available}). Use one of the model's output columns."
    )


def _lookup(mapping: Mapping[str, object], name: str) -> Optional[str]:
    for key, value in mapping.items():
        if str(key).lower() == name.lower():
            return str(value)
    return None


def subtraction_check(rule: LatenessRule, amount: Optional[str] = None) -> str:
    """DESCRIBE of `column - lateness` (or `amount`): it fails, or tells the type of the
    difference."""
    subtracted = rule.lateness if amount is None else amount
    return f"DESCRIBE QUERY SELECT CAST(NULL AS {rule.column.data_type}) - ({subtracted}) AS w"


NUMERIC_TYPES = ("tinyint", "smallint", "int", "bigint", "float", "double", "decimal")


def type_family(data_type: str) -> str:
    """What kind of value a Spark type holds, for deciding what may be subtracted from what."""
    name = data_type.lower()
    if name.startswith(NUMERIC_TYPES):
        return "number"
    if name.startswith("timestamp"):
        return "timestamp"
    if name == "date":
        return "date"
    return name


def subtraction_error(
    rule: LatenessRule, difference_type: str, amount: Optional[str] = None
) -> Optional[str]:
    """Why `column - lateness` is not a value to compare the column with (None if it is).

    Spark will happily turn a string into a timestamp to subtract an interval from it; a
    lateness on a string column is still a mistake, so the types are checked, not just the SQL.
    """
    column_family = type_family(rule.column.data_type)
    if column_family not in ("number", "timestamp", "date"):
        return f"a {rule.column.data_type} column has no order that LATENESS can measure"
    if type_family(difference_type) != column_family:
        return (
            f"{rule.column.data_type} - ({rule.lateness if amount is None else amount}) "
            f"is a {difference_type}, "
            f"not a {rule.column.data_type}"
        )
    return None


def _future(rule: LatenessRule) -> str:
    return f"{quote(rule.column.name)} > current_timestamp() + ({rule.max_future})"


def classify(
    net_view: str,
    columns: Sequence[Column],
    rules: Sequence[LatenessRule],
    waterline: Mapping[str, Optional[str]],
) -> str:
    """The change with the column and reason that make a row late (both NULL when it is not)."""
    cases: List[tuple] = []
    for rule in rules:
        cases.append((f"{quote(rule.column.name)} IS NULL", rule.column.name, "null"))
    for rule in rules:
        if rule.max_future:
            cases.append((_future(rule), rule.column.name, "future"))
    for rule in rules:
        previous = waterline.get(rule.column.name)
        if previous is not None:
            cases.append(
                (f"{quote(rule.column.name)} < {rule.literal(previous)}", rule.column.name, "late")
            )
    if not cases:
        return (
            f"SELECT *, CAST(NULL AS STRING) AS {LATE_COLUMN}, "
            f"CAST(NULL AS STRING) AS {REASON} FROM {net_view}"
        )
    column_case = " ".join(f"WHEN {cond} THEN {string_literal(name)}" for cond, name, _ in cases)
    reason_case = " ".join(f"WHEN {cond} THEN '{reason}'" for cond, _, reason in cases)
    return (
        f"SELECT {column_list(columns)}, {WEIGHT}, CASE {column_case} END AS {LATE_COLUMN}, "
        f"CASE {reason_case} END AS {REASON} FROM {net_view}"
    )


def target_bounds(
    rules: Sequence[LatenessRule], waterline: Mapping[str, Optional[str]]
) -> List[str]:
    """Predicates every row a step may delete from the model satisfies.

    A change is applied only if its value is at or above the previous waterline in every
    lateness column, so the rows it deletes are too: the model's files below the waterline can be
    skipped. This is how waterlines keep a step's MERGE from reading the model's history.
    """
    return [
        f"t.{quote(rule.column.name)} >= {rule.literal(waterline[rule.column.name])}"
        for rule in rules
        if waterline.get(rule.column.name) is not None
    ]


def final_group_columns(
    rules: Sequence[LatenessRule],
    waterline: Mapping[str, Optional[str]],
    group_outputs: Sequence[Tuple[str, str]],
) -> List[Tuple[LatenessRule, str, str]]:
    """(rule, expression, previous waterline) for lateness columns an aggregate's group decides.

    Where a lateness column is computed from the group alone (a window start, a truncated hour;
    `expression` is over a state row aliased GROUP_ALIAS), a group whose value is below the
    previous waterline is final: any change to its row is late.
    """
    by_name = {name.lower(): expression for name, expression in group_outputs}
    found = []
    for rule in rules:
        expression = by_name.get(rule.column.name.lower())
        value = waterline.get(rule.column.name)
        if expression and value is not None:
            found.append((rule, expression, value))
    return found


def open_groups(
    rule: LatenessRule, expression: str, waterline: str, also: Sequence[str] = ()
) -> str:
    """A predicate over a state row: its group is not final, or its value is one of `also`.

    Groups with NULL there are kept: few, and any change to them is late anyway. Every part is
    a comparison of a column with constants, so Delta can skip files by their statistics.
    """
    parts = [f"({expression}) >= {rule.literal(waterline)}", f"({expression}) IS NULL"]
    if also:
        parts.append(f"({expression}) IN ({', '.join(rule.literal(v) for v in also)})")
    return "(" + " OR ".join(parts) + ")"


def on_time(classified_view: str, columns: Sequence[Column]) -> str:
    return f"SELECT {column_list(columns)}, {WEIGHT} FROM {classified_view} WHERE {REASON} IS NULL"


def behind_unit(data_type: str) -> str:
    """The unit d is counted in for a lateness column of this type (BEHIND_LADDERS)."""
    kind = data_type.strip().lower()
    if kind.startswith("timestamp"):
        return "seconds"
    return "days" if kind == "date" else "units"


def behind(rule: LatenessRule, seen_before: str) -> str:
    """SQL of d = M(n-1) - c for a row, in `behind_unit`'s unit (M(n-1): `seen_before`)."""
    col, seen = quote(rule.column.name), rule.literal(seen_before)
    unit = behind_unit(rule.column.data_type)
    if unit == "seconds":
        return (
            f"(unix_micros(CAST({seen} AS TIMESTAMP)) - unix_micros(CAST({col} AS TIMESTAMP)))"
            " / 1000000.0"
        )
    if unit == "days":
        return f"datediff({seen}, {col})"
    return f"({seen} - {col})"


def behind_counts(rule: LatenessRule, seen_before: str, counted: str) -> str:
    """SQL of the JSON array of the changes counted per rung of d (WATERLINE_COLUMNS)."""
    d = behind(rule, seen_before)
    rungs = BEHIND_LADDERS[behind_unit(rule.column.data_type)]
    bands = [f"{d} <= {rungs[0]}"]
    bands += [f"{d} > {low} AND {d} <= {high}" for low, high in zip(rungs, rungs[1:])]
    bands.append(f"{d} > {rungs[-1]}")
    sums = [
        f"COALESCE(SUM(abs({WEIGHT})) FILTER (WHERE {counted} AND {band}), 0)" for band in bands
    ]
    return f"to_json(array({', '.join(sums)}))"


def behind_json(rule: LatenessRule, counts: Sequence[int]) -> str:
    """The `behind` value of a column's `__waterline` row, from `behind_counts`'s counts."""
    unit = behind_unit(rule.column.data_type)
    return json.dumps(
        {"unit": unit, "le": list(BEHIND_LADDERS[unit]), "counts": [int(n) for n in counts]},
        separators=(",", ":"),
    )


def waterline_query(
    classified_view: str,
    rules: Sequence[LatenessRule],
    waterline: Mapping[str, Optional[str]],
    max_seen: Mapping[str, Optional[str]],
) -> str:
    """One row: for each rule `w_<i>` (the new waterline), `m_<i>` (the largest value seen
    so far, this step included), as strings, and `b_<i>`, the JSON array of the changes counted
    per rung of how far behind they arrived (`behind_counts`; NULL before any value was seen);
    and `late`, how many rows are set aside."""
    parts = [f"COALESCE(SUM(abs({WEIGHT})) FILTER (WHERE {REASON} IS NOT NULL), 0) AS late"]
    for i, rule in enumerate(rules):
        col = quote(rule.column.name)
        counted = f"{col} IS NOT NULL"
        if rule.max_future:
            counted += f" AND NOT ({_future(rule)})"
        seen_before = max_seen.get(rule.column.name)
        counts = (
            behind_counts(rule, seen_before, counted) if seen_before else "CAST(NULL AS STRING)"
        )
        parts.append(f"{counts} AS b_{i}")
        seen = f"MAX(CASE WHEN {counted} THEN {col} END)"
        candidate = f"CAST({seen} - ({rule.lateness}) AS {rule.column.data_type})"
        previous = waterline.get(rule.column.name)
        new = f"greatest({rule.literal(previous)}, {candidate})" if previous else candidate
        largest = f"greatest({rule.literal(seen_before)}, {seen})" if seen_before else seen
        parts.append(f"CAST({new} AS STRING) AS w_{i}, CAST({largest} AS STRING) AS m_{i}")
    return f"SELECT {', '.join(parts)} FROM {classified_view}"


def late_table_columns(columns: Sequence[Column]) -> List[Column]:
    """The columns of `<model>__late`: the model's, then QUARANTINE_COLUMNS."""
    return list(columns) + list(QUARANTINE_COLUMNS)


def quarantine_rows(
    classified_view: str,
    columns: Sequence[Column],
    step: int,
    waterline: Mapping[str, Optional[str]],
) -> str:
    """The rows a step adds to `<model>__late` (`late_table_columns`): its late changes, one
    row per copy. (The macro `streamsql_append_late_rows` makes the statement that adds them.)"""
    known = [(name, value) for name, value in waterline.items() if value is not None]
    waterline_case = (
        "CASE "
        + " ".join(
            f"WHEN {LATE_COLUMN} = {string_literal(name)} THEN {string_literal(value)}"
            for name, value in known
        )
        + " END"
        if known
        else "CAST(NULL AS STRING)"
    )
    return (
        f"SELECT {column_list(columns)}, CAST({step} AS BIGINT), "
        f"CASE WHEN {WEIGHT} > 0 THEN 'insert' ELSE 'delete' END, {LATE_COLUMN}, "
        f"{waterline_case}, {REASON}, current_timestamp() "
        f"FROM {classified_view} LATERAL VIEW explode(sequence(1, abs({WEIGHT}))) c AS _copy "
        f"WHERE {REASON} IS NOT NULL"
    )


def waterline_rows(
    step: int,
    rules: Sequence[LatenessRule],
    values: Dict[str, Optional[str]],
    max_seen: Dict[str, Optional[str]],
    behind_counted: Optional[Mapping[str, Sequence[int]]] = None,
) -> str:
    """The rows a step adds to `<model>__waterline` (WATERLINE_COLUMNS), one per rule, as
    VALUES; `behind_counted`: per column, `behind_counts`'s counts (none: NULL). (The macro
    `streamsql_append_waterline_rows` makes the statement that adds them.)"""
    rows = []
    for rule in rules:
        name = rule.column.name
        counts = (behind_counted or {}).get(name)
        rows.append(
            f"(CAST({step} AS BIGINT), {string_literal(name)}, "
            f"{_string_or_null(values.get(name))}, {_string_or_null(max_seen.get(name))}, "
            "current_timestamp(), "
            f"{_string_or_null(behind_json(rule, counts) if counts is not None else None)})"
        )
    return f"VALUES {', '.join(rows)}"


def _string_or_null(value: Optional[str]) -> str:
    return "CAST(NULL AS STRING)" if value is None else string_literal(value)
