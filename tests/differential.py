"""What both differential tests share: literals for generated DML, and multiset comparison.

A differential test changes source tables at random, runs a step, and compares each model's table
with what it should hold, as multisets of rows (`as_bag`); `bag_diff` says how two bags differ.
"""

from __future__ import annotations

import datetime
from collections import Counter
from decimal import Decimal
from typing import List, Sequence


def sql_literal(value) -> str:
    """A Python value as a Spark SQL literal (NULL, timestamps, decimals, strings, numbers)."""
    if value is None:
        return "NULL"
    if isinstance(value, datetime.datetime):
        return f"TIMESTAMP'{value:%Y-%m-%d %H:%M:%S}'"
    if isinstance(value, Decimal):
        return f"CAST({value} AS DECIMAL(10,2))"
    if isinstance(value, str):  # backslashes escaped too: Spark reads '\d' as d
        return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"
    return str(value)


def values_clause(rows: Sequence[tuple]) -> str:
    return ", ".join("(" + ", ".join(sql_literal(v) for v in row) + ")" for row in rows)


def normalized(value):
    """A value in the form two equal results agree on (floats rounded, decimals normalized; a
    map as its entries sorted, arrays and structs as tuples, all of them hashable)."""
    if isinstance(value, dict):
        return tuple(sorted(((normalized(k), normalized(v)) for k, v in value.items()), key=repr))
    if isinstance(value, (list, tuple)):
        return tuple(normalized(v) for v in value)
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, Decimal):
        return value.normalize() if value == value else value
    return value


def as_bag(rows) -> Counter:
    return Counter(tuple(normalized(v) for v in row) for row in rows)


def model_columns(project, relation: str) -> List[str]:
    """The model's own columns (not the adapter's `_streamsql_` bookkeeping), in order."""
    rows = project.run_sql(f"describe table {relation}", fetch="all")
    columns = []
    for row in rows:
        name = (row[0] or "").strip()
        if not name or name.startswith("#"):
            break
        if not name.startswith("_streamsql_"):
            columns.append(name)
    return columns


def bag_diff(what: str, expected: Counter, actual: Counter) -> str:
    """How `actual` differs from `expected`: counts, then up to 15 rows of each kind."""
    missing, extra = expected - actual, actual - expected
    lines = [
        f"{what}: {sum(missing.values())} row(s) expected but missing, "
        f"{sum(extra.values())} unexpected"
    ]
    lines += [f"  - missing x{n}: {row}" for row, n in sorted(missing.items(), key=repr)[:15]]
    lines += [f"  + extra   x{n}: {row}" for row, n in sorted(extra.items(), key=repr)[:15]]
    return "\n".join(lines)


def differing(project, checks: Sequence[tuple]) -> List[str]:
    """Of `checks` (name, its columns, a relation, a SELECT), the names where the relation's
    rows and the SELECT's differ as multisets, found in one Spark query for all of them: each
    side's rows are counted by every column (NULLs count together, as do -0.0 and 0.0), and a
    full outer join of the two counts, NULL-safe on every column, finds the rows whose counts
    differ. (A union of the two sides, grouped, would be shorter, but Spark 4.2's optimizer
    fails on a query of many such unions.)

    Equal here implies equal under `as_bag` (which only also rounds floats), so a caller that
    goes on to compare the names returned with `as_bag` asserts exactly what comparing every
    check that way would; it saves two queries and two collects a check."""
    if not checks:
        return []
    counts = []
    for name, names, relation, select in checks:
        columns = ", ".join(names)
        on = " and ".join(f"a.{c} <=> b.{c}" for c in names)
        counts.append(
            f"(select count(*) from (select {columns}, count(*) as _n from {relation} "
            f"group by {columns}) a full outer join (select {columns}, count(*) as _n from "
            f"({select}) q group by {columns}) b on {on} "
            "where a._n is null or b._n is null or a._n != b._n) as `" + name + "`"
        )
    row = project.run_sql("select " + ", ".join(counts), fetch="one")
    return [name for (name, *_), groups in zip(checks, row) if groups]
