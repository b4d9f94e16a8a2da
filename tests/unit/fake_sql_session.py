"""A stand-in for Spark and Delta that a step's orchestration can run against, without Spark.

It keeps what a step's bookkeeping depends on, and nothing else: which tables exist, their
columns and properties, and each table's Delta history (version, operation, the commit's
`userMetadata`, and the idempotent-write ids `txnAppId`/`txnVersion`, which it honours the way
Delta does: a second write with an id and version already seen commits nothing). Queries that
would compute rows are answered from `FakeSqlSession.answers` (change counts, waterlines, ...).

Every statement is appended to `statements`, so a test can assert which statements a step runs
and in which order (and recorded in `trace`, with its role, as the adapter's session records
it); `commits(table)` shows what a table's history holds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import sqlglot
from sqlglot import exp

from dbt.adapters.streamsql.execution.engine.delta_log import SqlDeltaLog
from dbt.adapters.streamsql.execution.engine.sql_session import (
    LaterResets,
    checkpoint_text,
    conf_statements,
    measured,
)
from dbt.adapters.streamsql.execution.engine.trace import StatementTrace

USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"

WRITES = [
    (re.compile(r"^INSERT INTO (\S+)", re.I), "WRITE"),
    (re.compile(r"^INSERT OVERWRITE (\S+)", re.I), "WRITE OVERWRITE"),
    (re.compile(r"^MERGE INTO (\S+)", re.I), "MERGE"),
    (re.compile(r"^UPDATE (\S+)", re.I), "UPDATE"),
    (re.compile(r"^DELETE FROM (\S+)", re.I), "DELETE"),
    (re.compile(r"^ALTER TABLE (\S+) SET TBLPROPERTIES", re.I), "SET TBLPROPERTIES"),
    (re.compile(r"^RESTORE TABLE (\S+) TO VERSION AS OF (\d+)", re.I), "RESTORE"),
    (re.compile(r"^OPTIMIZE (\S+)$", re.I), "OPTIMIZE"),
]


def table_key(name: str) -> str:
    """`demo`.`t`, demo.t and DEMO.T all name the same table."""
    return name.replace("`", "").lower()


def split_top_level(text: str) -> List[str]:
    """Splits on commas outside parentheses and angle brackets (column definitions)."""
    parts, depth, current = [], 0, ""
    for char in text:
        if char in "(<":
            depth += 1
        elif char in ")>":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    if current.strip():
        parts.append(current.strip())
    return parts


@dataclass
class FakeTable:
    columns: List[Tuple[str, str]]
    properties: Dict[str, str] = field(default_factory=dict)
    history: List[Dict[str, Any]] = field(default_factory=list)  # oldest first
    txns: Dict[str, int] = field(default_factory=dict)

    @property
    def version(self) -> int:
        return self.history[-1]["version"]

    table_id: str = "table-1"
    size_bytes: int = 1000  # its data files' size (DESCRIBE DETAIL)
    num_files: int = 1  # its data files: one more per write, one after an OPTIMIZE
    location: Optional[str] = None  # where its files are (DESCRIBE DETAIL), if a test says
    provider: str = "delta"  # its format, as SHOW TABLE EXTENDED names it

    def commit(
        self,
        operation: str,
        metadata: Optional[str] = None,
        parameters: Optional[Dict[str, str]] = None,
        metrics: Optional[Dict[str, str]] = None,
    ) -> None:
        self.history.append(
            {
                "version": len(self.history),
                "operation": operation,
                "operationParameters": dict(parameters or {}),
                "operationMetrics": dict(metrics or {}),
                "userMetadata": metadata,
            }
        )


@dataclass
class Answers:
    """What the queries that compute rows return; a test sets what its scenario needs."""

    changes: int = 3  # rows of an input's change (count_changes) or snapshot (count_rows)
    removals: int = 0  # of which remove a row
    inserts: int = 3  # rows the model's change inserts (change_counts)
    deletes: int = 0  # ... and deletes
    widest: int = 1  # most copies of one row in the change
    recompute_groups: int = 0  # MIN/MAX groups that need a recompute (recompute_check)
    late: int = 0  # late copies (late_count)
    held: int = 0  # rows WATERMARK holds after the step (pending_counts)
    pending_writes: int = 1  # rows of __pending the step marks or adds (pending_counts)
    groups: int = 3  # groups an aggregate's change touches
    waterline: Optional[str] = "2024-01-01 10:00:00"  # w_<i> of waterline_query
    max_seen: Optional[str] = "2024-01-01 11:00:00"  # m_<i>
    seen: Optional[str] = "2024-01-01 11:00:00"  # s_<i> of the watermark's seen_query
    bound: str = "1"  # every key bound's value (bound_texts)
    touched_final_groups: Sequence[str] = ()  # final groups a late change touches


class FakeSqlSession(LaterResets):
    """Implements the executor's `SqlSession` over `FakeTable`s."""

    def __init__(self, describe: Optional[Callable[[str], Optional[List[Tuple[str, str]]]]] = None):
        super().__init__()
        self.tables: Dict[str, FakeTable] = {}
        self.conf: Dict[str, str] = {}
        self.statements: List[str] = []
        self.trace = StatementTrace()
        self.answers = Answers()
        self.describe = describe or (lambda sql: None)
        # DESCRIBE QUERY answers a column by its name: a source's columns, or what a test sets
        # here; anything else is a bigint.
        self.column_types: Dict[str, str] = {}
        self.fail_on: Optional[Tuple[str, str]] = None  # (statement prefix, error message)
        # Whether the step may take a table's snapshot as free (the embedded session reads it in
        # the JVM, without a statement); the fake still answers it through SQL.
        self.free_snapshots = False
        # views by their normalized name: (their query, their schema, their output columns)
        self.views: Dict[str, Tuple[str, str, Sequence[str]]] = {}

    # -- setting up ---------------------------------------------------------------------------

    def create_source(
        self, name: str, columns: Sequence[Tuple[str, str]], change_feed: bool = True
    ) -> None:
        properties = {"delta.enableChangeDataFeed": "true"} if change_feed else {}
        table = FakeTable(list(columns), properties)
        table.commit("CREATE TABLE")
        self.column_types.update(dict(columns))
        self.tables[table_key(name)] = table

    def create_view(self, name: str, text: str, columns: Sequence[str]) -> None:
        """A view in the catalog: no Delta table, a query (its schema: the view's)."""
        self.views[table_key(name)] = (text, table_key(name).split(".")[0], list(columns))

    def append_to(self, name: str, rows: int = 3, size_bytes: int = 100) -> None:
        """Someone else appends rows to a source: a new version."""
        table = self.tables[table_key(name)]
        table.commit(
            "WRITE",
            parameters={"mode": "Append"},
            metrics={"numOutputRows": str(rows), "numOutputBytes": str(size_bytes)},
        )
        table.size_bytes += size_bytes

    def delete_from(self, name: str, rows: int = 1) -> None:
        """Someone else deletes rows of a source: a new version."""
        self.tables[table_key(name)].commit("DELETE", metrics={"numDeletedRows": str(rows)})

    def commits(self, name: str) -> List[Dict[str, Any]]:
        return list(self.tables[table_key(name)].history)

    # -- the SqlSession protocol --------------------------------------------------------------

    def query(self, statement: str) -> List[Dict[str, Any]]:
        self.settle()
        self._send(statement)
        self._maybe_fail(statement)
        return self._answer(statement.strip())

    def run(self, statement: str) -> None:
        self.settle()
        self._send(statement)
        self._maybe_fail(statement)
        self._answer(statement.strip())

    def materialize(
        self, name: str, select: str, measures: Optional[Dict[str, str]] = None, alias: str = ""
    ) -> Dict[str, Any]:
        """As the embedded session: the measures in the same pass (answered as the query of
        them would be)."""
        self.settle()
        self._send(checkpoint_text(name, select, measures or {}, alias))
        if not measures:
            return {}
        return self._answer(measured(name, measures, alias))[0]

    def release(self, names: Sequence[str]) -> None:
        if names:  # one statement for all, with the resets that wait, as the embedded session
            unset = self._take_resets()
            drops = [f"DROP VIEW IF EXISTS {name}" for name in names]
            self._send(";\n".join(conf_statements(unset, []) + drops))
            self._unset(unset)

    def set_confs(self, settings: Sequence[Tuple[str, str]]) -> None:
        if settings:  # one statement for all, with the resets that wait, as the embedded session
            unset = self._take_resets()
            text = ";\n".join(conf_statements(unset, settings))
            self._send(text)
            self._unset(unset)
            self._maybe_fail(text)
            self.conf.update(settings)

    def unset_confs(self, keys: Sequence[str]) -> None:
        if keys and not self._defer_resets(keys):
            self._reset_now(keys)

    def _reset_now(self, keys: Sequence[str]) -> None:
        self._send(";\n".join(conf_statements(keys, [])))
        self._unset(keys)

    def _unset(self, keys: Sequence[str]) -> None:
        for key in keys:
            self.conf.pop(key, None)

    def local_checkpoints(self) -> bool:
        return True  # as the embedded session

    def delta_log(self) -> SqlDeltaLog:
        reader = SqlDeltaLog(self)
        reader.free_snapshots = self.free_snapshots
        return reader

    # -- statements -----------------------------------------------------------------------------

    def _send(self, statement: str) -> None:
        self.statements.append(statement)
        self.trace.record(statement)

    def _maybe_fail(self, statement: str) -> None:
        if self.fail_on and statement.strip().startswith(self.fail_on[0]):
            raise RuntimeError(self.fail_on[1])

    def _table(self, name: str) -> FakeTable:
        table = self.tables.get(table_key(name))
        if table is None:
            raise RuntimeError(
                f"[TABLE_OR_VIEW_NOT_FOUND] The table or view {name} cannot be found."
            )
        return table

    def _answer(self, statement: str) -> List[Dict[str, Any]]:
        match = re.match(r"^SET ([^=]+)=(.*)$", statement, re.S)
        if match:
            self.conf[match.group(1)] = match.group(2)
            return []
        match = re.match(r"^RESET (\S+)$", statement)
        if match:
            self.conf.pop(match.group(1), None)
            return []
        match = re.match(r"^DESCRIBE HISTORY (\S+)(?: LIMIT (\d+))?$", statement)
        if match:
            history = list(reversed(self._table(match.group(1)).history))
            return history[: int(match.group(2))] if match.group(2) else history
        match = re.match(r"^DESCRIBE DETAIL (\S+)$", statement)
        if match:
            table = self._table(match.group(1))
            return [
                {
                    "id": table.table_id,
                    "properties": dict(table.properties),
                    "sizeInBytes": table.size_bytes,
                    "numFiles": table.num_files,
                    "location": table.location,
                    "format": table.provider,
                }
            ]
        match = re.match(r"^DESCRIBE TABLE EXTENDED (\S+)$", statement)
        if match:  # the catalog's answer about a view (create_view); a table is not asked
            key = table_key(match.group(1))
            if key not in self.views:
                self._table(match.group(1))  # raises as Spark does for a missing one
                return [{"col_name": "Type", "data_type": "MANAGED"}]
            text, namespace, columns = self.views[key]
            return [
                {"col_name": "Type", "data_type": "VIEW"},
                {"col_name": "View Text", "data_type": text},
                {
                    "col_name": "View Catalog and Namespace",
                    "data_type": f"spark_catalog.{namespace}",
                },
                {
                    "col_name": "View Query Output Columns",
                    "data_type": "[" + ", ".join(f"`{c}`" for c in columns) + "]",
                },
            ]
        match = re.match(r"^DESCRIBE TABLE (\S+)$", statement)
        if match:
            return [{"col_name": n, "data_type": t} for n, t in self._table(match.group(1)).columns]
        match = re.match(r"^DESCRIBE QUERY (.*)$", statement, re.S)
        if match:
            return [{"col_name": n, "data_type": t} for n, t in self._describe(match.group(1))]
        match = re.match(r"^SHOW TABLE EXTENDED IN (\S+) LIKE '(.*)'$", statement)
        if match:  # a table is a Delta table here; its location only if a test gave it one
            found = self.tables.get(f"{table_key(match.group(1))}.{match.group(2).lower()}")
            if found is None:
                return []
            where = f"Location: {found.location}\n" if found.location else ""
            information = f"Type: MANAGED\nProvider: {found.provider}\n{where}"
            return [{"tableName": match.group(2), "isTemporary": False, "information": information}]
        match = re.match(r"^SHOW TABLES IN (\S+) LIKE '(.*)'$", statement)
        if match:
            wanted = f"{table_key(match.group(1))}.{match.group(2).lower()}"
            return [{"tableName": match.group(2)}] if wanted in self.tables else []
        match = re.match(
            r"^CREATE (OR REPLACE TABLE|TABLE IF NOT EXISTS|TABLE) (\S+) \((.*?)\) "
            r"USING delta(?:.*TBLPROPERTIES \((.*)\))?$",
            statement,
            re.S,
        )
        if match:
            self._create(*match.groups())
            return []
        for pattern, operation in WRITES:
            match = pattern.match(statement)
            if match:
                written = {"numOutputRows": str(self.answers.inserts)}
                writes_rows = operation.startswith("WRITE")
                self._write(match.group(1), operation, written if writes_rows else {})
                return []
        if re.match(r"^(CREATE OR REPLACE TEMPORARY VIEW|DROP VIEW|CACHE TABLE)", statement):
            return []
        return self._select(statement)

    def _create(self, how: str, name: str, definition: str, properties: Optional[str]) -> None:
        key = table_key(name)
        if how.startswith("TABLE IF NOT EXISTS") and key in self.tables:
            return
        if how == "TABLE" and key in self.tables:  # a plain CREATE, as Spark refuses it
            raise RuntimeError(
                f"[TABLE_OR_VIEW_ALREADY_EXISTS] Cannot create table or view {name} because "
                "it already exists."
            )
        columns = []
        for part in split_top_level(definition):
            column, data_type = part.split(" ", 1)
            columns.append((column.strip("`"), data_type))
        table = FakeTable(columns)
        for prop in split_top_level(properties or ""):
            k, v = prop.split("=", 1)
            table.properties[k.strip().strip("'")] = v.strip().strip("'")
        old = self.tables.get(key)
        if old is not None:  # CREATE OR REPLACE keeps the history and the idempotent-write ids
            table.history, table.txns = old.history, old.txns
        table.commit(
            "CREATE OR REPLACE TABLE" if old else "CREATE TABLE", self.conf.get(USER_METADATA)
        )
        self.tables[key] = table

    def _write(self, name: str, operation: str, metrics: Dict[str, str]) -> None:
        table = self._table(name)
        app, version = self.conf.get(TXN_APP_ID), self.conf.get(TXN_VERSION)
        if app is not None and version is not None:
            if table.txns.get(app, -1) >= int(version):
                return  # Delta skips a write it has already committed
            table.txns[app] = int(version)
        parameters = {}
        if operation == "OPTIMIZE":
            metrics = {"numRemovedFiles": str(table.num_files), "numAddedFiles": "1"}
            table.num_files = 1
        elif operation != "SET TBLPROPERTIES":
            table.num_files += 1
        if operation.startswith("WRITE"):
            operation, parameters = "WRITE", {"mode": operation[6:].title() or "Append"}
        table.commit(operation, self.conf.get(USER_METADATA), parameters, metrics)

    def _describe(self, query: str) -> List[Tuple[str, str]]:
        answered = self.describe(query)
        if answered is not None:
            return answered
        cast = re.match(r"^SELECT CAST\(NULL AS (.+?)\) - \(", query)
        if cast:  # lateness.subtraction_check: the difference has the column's type
            return [("w", cast.group(1))]
        tree = sqlglot.parse_one(query, read="spark")
        while isinstance(tree, exp.SetOperation):
            tree = tree.this
        return [
            (p.alias_or_name, self.column_types.get(p.alias_or_name, "bigint"))
            for p in tree.expressions
        ]

    def _select(self, statement: str) -> List[Dict[str, Any]]:
        a = self.answers
        if re.search(r" AS (lo0|inserts|final0|groups)\b", statement):  # a change's facts
            row: Dict[str, Any] = {}
            for name in re.findall(r" AS (\w+)", statement):
                if re.fullmatch(r"d?(lo|hi)\d+", name):
                    row[name] = a.bound
                elif re.fullmatch(r"final\d+", name):
                    row[name] = list(a.touched_final_groups)
            if " AS inserts" in statement:
                row.update({"inserts": a.inserts, "deletes": a.deletes, "widest": a.widest})
            if " AS groups" in statement:
                row["groups"] = a.groups
            if " AS recompute" in statement:
                row["recompute"] = a.recompute_groups
            return [row]
        if "HAVING SUM(n) > 1" in statement:  # unique_key: no key has two rows
            return []
        if " AS removals" in statement:
            return [{"n": a.changes, "removals": a.removals}]
        if " AS ok" in statement:
            return [{"ok": None}]
        if " AS w_0" in statement:
            count = len(re.findall(r" AS w_\d+", statement))
            waterlines: Dict[str, Any] = {"late": a.late}
            for i in range(count):
                waterlines.update({f"w_{i}": a.waterline, f"m_{i}": a.max_seen})
            return [waterlines]
        if " AS held, " in statement:
            return [{"held": a.held, "writes": a.pending_writes}]
        if " AS s_0" in statement:
            return [{f"s_{i}": a.seen for i in range(len(re.findall(r" AS s_\d+", statement)))}]
        if "CAST(unix_micros(" in statement or re.search(r"CAST\(v0 AS STRING\) AS v0", statement):
            count = len(re.findall(r" AS v\d+,| AS v\d+ FROM \(", statement))
            return [{f"v{i}": a.bound for i in range(count)}]
        if statement.startswith("SELECT DISTINCT CAST("):
            return [{"v": value} for value in a.touched_final_groups]
        if "COALESCE(SUM(abs(" in statement:
            late = "_streamsql_reason IS NOT NULL" in statement
            return [{"n": a.late if late else a.held}]
        if statement.startswith("SELECT COUNT(*) AS n FROM") and " WHERE " in statement:
            return [{"n": a.recompute_groups}]
        if statement.startswith("SELECT COUNT(*) AS n FROM"):
            return [{"n": a.changes}]
        raise AssertionError(f"the fake session has no answer for: {statement[:300]}")
