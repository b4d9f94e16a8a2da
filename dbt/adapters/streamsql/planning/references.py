"""Which tables a compiled model reads (before anything else about it is known)."""

from __future__ import annotations

from typing import List

from sqlglot import exp

from dbt.adapters.streamsql.planning.binding import input_references, parse_query
from dbt.adapters.streamsql.planning.errors import PlanningError, RecomputeRequired


def normalize_table_name(table: exp.Table) -> str:
    """`spark_catalog`.`Demo`.`t` -> "demo.t": the schema-qualified name, lower case, unquoted."""
    parts = [part for part in (table.db, table.name) if part]
    return ".".join(part.lower() for part in parts)


def referenced_tables(sql: str) -> List[str]:
    """Normalized names of the stored tables `sql` reads (not CTEs, not table functions).

    Raises:
        PlanningError: the SQL cannot be parsed, so its inputs are unknown.
    """
    try:
        query = parse_query(sql)
    except RecomputeRequired as error:
        raise PlanningError(f"cannot find the tables this model reads: {error}") from error
    names: List[str] = []
    for table in input_references(query):
        name = normalize_table_name(table)
        if name not in names:
            names.append(name)
    return names
