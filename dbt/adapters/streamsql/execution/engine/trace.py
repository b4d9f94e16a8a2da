"""The statements a step sent, in order, each with its role: what `target/run/` shows of a step.

A session (sql_session.py) records every statement as it sends it, the ones dbt logs as
`SQLQuery` in dbt.log and nothing else, so the two lists are the same. Its role is what the step
says it is doing (`StatementTrace.role`: "MERGE the change into the model `demo`.`m`", "the
changes of demo.src versions 3..5") or, where the step says nothing, what the statement's own
text tells (`statement_role`: "the last commit of demo.src", "the step record, for the next
commit"). A statement that only serves the one the step names (a setting, a catalog read) gets
both: "MERGE the change into the model `demo`.`m`: the step record, for the next commit".

`StatementTrace.script` is the text the materialization writes to `target/run/` (dbt's `write`);
`read_script` reads it back.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Iterator, List, Optional, Sequence, Tuple

# A numbered role comment: the line before each statement of a script.
ROLE_LINE = re.compile(r"^-- (\d+)\. (.*)$")

_ROLES: Sequence[Tuple[re.Pattern, str, bool]] = [
    # (statement pattern, role with the pattern's groups as {1}, {2}, whether it only serves
    # the statement the step names)
    (
        re.compile(r"SET spark\.databricks\.delta\.commitInfo\.userMetadata="),
        "the step record, for the next commit",
        True,
    ),
    (
        re.compile(r"SET spark\.databricks\.delta\.write\.txnAppId="),
        "Delta's idempotent-write id, for the next commit",
        True,
    ),
    (
        re.compile(r"SET spark\.databricks\.delta\.write\.txnVersion="),
        "Delta's idempotent-write version (the step), for the next commit",
        True,
    ),
    (re.compile(r"SET ([^=\s]+)="), "the setting {1}", True),
    (re.compile(r"RESET (\S+)$"), "the setting {1} unset", True),
    (re.compile(r"DESCRIBE HISTORY (\S+) LIMIT 1$"), "the last commit of {1}", True),
    (re.compile(r"DESCRIBE HISTORY (\S+) LIMIT (\d+)$"), "the last {2} commits of {1}", True),
    (re.compile(r"DESCRIBE HISTORY (\S+)"), "the commits of {1}", True),
    (re.compile(r"DESCRIBE DETAIL (\S+)"), "the id, properties and size of {1}", True),
    (re.compile(r"DESCRIBE TABLE (\S+)"), "the columns of {1}", True),
    (re.compile(r"SHOW TABLES IN (\S+) LIKE '(.*)'$"), "whether {1} has a table {2}", True),
    (re.compile(r"DROP VIEW IF EXISTS (\S+)"), "free the view {1}", True),
    (re.compile(r"DESCRIBE QUERY "), "the columns of a query", False),
    (re.compile(r"CREATE OR REPLACE TEMPORARY VIEW (\S+)"), "the view {1}", False),
    (re.compile(r"(?:CHECKPOINT|CACHE TABLE) (\S+)"), "{1}, computed now", False),
    (re.compile(r"CREATE OR REPLACE TABLE (\S+)"), "create {1}", False),
    (re.compile(r"CREATE TABLE IF NOT EXISTS (\S+)"), "create {1} if missing", False),
    (re.compile(r"INSERT OVERWRITE (\S+)"), "overwrite {1}", False),
    (re.compile(r"INSERT INTO (\S+)"), "insert into {1}", False),
    (re.compile(r"MERGE INTO (\S+)"), "MERGE into {1}", False),
    (re.compile(r"UPDATE (\S+)"), "update {1}", False),
    (re.compile(r"DELETE FROM (\S+)"), "delete from {1}", False),
    (re.compile(r"ALTER TABLE (\S+)"), "alter {1}", False),
]


# What a setting a write carries is for, in a batch of settings (below).
_SETTING_NAMES = {
    "spark.databricks.delta.commitInfo.userMetadata": "the step record",
    "spark.databricks.delta.write.txnAppId": "Delta's idempotent-write id",
    "spark.databricks.delta.write.txnVersion": "its version (the step)",
}


def statement_role(statement: str) -> Tuple[str, bool]:
    """What a statement's text says it does, and whether it only serves another statement."""
    text = statement.lstrip()
    parts = text.split(";\n")
    if len(parts) > 1:  # several settings, or several views freed, sent in one call
        return _batch_role(parts), True
    for pattern, role, serving in _ROLES:
        match = pattern.match(text)
        if match:
            return role.format(None, *match.groups()), serving
    return "a query", False


def _batch_role(parts: Sequence[str]) -> str:
    """The role of statements sent in one call: settings reset, then settings for the next
    commit, then views freed (sql_session.py); each run of one kind named once."""
    runs: List[Tuple[str, List[str]]] = []
    for part in parts:
        kind = part.split(None, 1)[0]
        if runs and runs[-1][0] == kind:
            runs[-1][1].append(part)
        else:
            runs.append((kind, [part]))
    return "; ".join(_run_role(kind, run) for kind, run in runs)


def _run_role(kind: str, parts: Sequence[str]) -> str:
    names = [part.split(None, 1)[1].split("=", 1)[0] for part in parts if " " in part]
    said = ", ".join(_SETTING_NAMES.get(name, name) for name in names)
    if kind == "SET":
        return f"the settings of the next commit: {said}"
    if kind == "RESET":
        return f"the settings unset: {said}"
    if len(parts) > 1 and all(part.startswith("DROP VIEW IF EXISTS ") for part in parts):
        return f"free the views {', '.join(part.split()[-1] for part in parts)}"
    return "; ".join(statement_role(part)[0] for part in parts)


class StatementTrace:
    """The statements a session sent, in order, each with its role."""

    def __init__(self) -> None:
        self.entries: List[Tuple[str, str]] = []  # (role, statement)
        self._roles: List[str] = []

    @contextmanager
    def role(self, text: Optional[str]) -> Iterator[None]:
        """The role of the statements sent inside (the innermost role counts); None: none."""
        if not text:
            yield
            return
        self._roles.append(text)
        try:
            yield
        finally:
            self._roles.pop()

    @property
    def current(self) -> Optional[str]:
        """The role statements sent now get (None: their own)."""
        return self._roles[-1] if self._roles else None

    def record(self, statement: str) -> None:
        """Called by the session as it sends `statement`."""
        own, serving = statement_role(statement)
        if not self._roles:
            role = own
        elif serving:
            role = f"{self._roles[-1]}: {own}"
        else:
            role = self._roles[-1]
        self.entries.append((role, statement))

    def script(self, header: Sequence[str] = (), since: int = 0) -> str:
        """The statements from entry `since` on as SQL text: `header` (comment lines), then each
        statement after a numbered comment of its role, ended by `;`."""
        lines = [f"-- {line}" for line in header]
        for number, (role, statement) in enumerate(self.entries[since:], start=1):
            lines += ["", f"-- {number}. {' '.join(role.split())}", f"{statement.rstrip()};"]
        return "\n".join(lines) + "\n"


def read_script(text: str) -> List[Tuple[str, str]]:
    """The (role, statement) pairs of a `StatementTrace.script`, in order."""
    entries: List[Tuple[str, List[str]]] = []
    for line in text.split("\n"):
        match = ROLE_LINE.match(line)
        if match and int(match.group(1)) == len(entries) + 1:
            entries.append((match.group(2), []))
        elif entries:
            entries[-1][1].append(line)
    found = []
    for role, lines in entries:
        statement = "\n".join(lines).rstrip()
        if statement.endswith(";"):
            statement = statement[:-1]
        found.append((role, statement.rstrip("\n")))
    return found
