"""Which tables a compiled model reads (before anything else about it is known)."""

from __future__ import annotations

from typing import List

import sqlglot
from sqlglot import exp


def normalize_table_name(table: exp.Table) -> str:
    """`spark_catalog`.`Demo`.`t` -> "demo.t": the schema-qualified name, lower case, unquoted."""
    parts = [part for part in (table.db, table.name) if part]
    return ".".join(part.lower() for part in parts)


def referenced_tables(sql: str) -> List[str]:
    """Normalized names of the tables `sql` reads, in order of first appearance.

    CTE names and table-valued functions (`range(5)`, `table_changes(...)`) are not tables.
    """
    tree = sqlglot.parse_one(sql.strip().rstrip(";"), read="spark")
    cte_names = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    names: List[str] = []
    for table in tree.find_all(exp.Table):
        if not isinstance(table.this, exp.Identifier):
            continue  # a table-valued function
        if not table.db and table.name.lower() in cte_names:
            continue
        name = normalize_table_name(table)
        if name not in names:
            names.append(name)
    return names
