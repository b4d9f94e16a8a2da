"""The SQL session a step runs in: the adapter's connection for the current thread."""

from __future__ import annotations

from typing import Any, Dict, List


class AdapterSqlSession:
    """Runs statements through dbt's connection (logged like every dbt query), raw rows back.

    Rows bypass agate on purpose: agate would turn strings that look like dates into dates.
    """

    def __init__(self, adapter: Any) -> None:
        self.adapter = adapter

    def query(self, statement: str) -> List[Dict[str, Any]]:
        _, cursor = self.adapter.connections.add_query(statement, auto_begin=False)
        rows = cursor.fetchall() or []
        names = [column[0] for column in cursor.description]
        return [dict(zip(names, row)) for row in rows]

    def run(self, statement: str) -> None:
        self.adapter.connections.add_query(statement, auto_begin=False)
