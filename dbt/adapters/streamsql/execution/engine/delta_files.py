"""Delta's log read from its files on this machine: the warm server's reader.

Through the warm server (Spark Connect on this machine) a step cannot call into Spark's JVM, but
the tables' files are on this machine's disk: a table's version, schema, properties and size
come from its newest commit and checksum files (`00...0N.json`, `00...0N.crc`), its history from
the commit files, with no statement. What only the catalog knows (where a table's files are,
whether it exists) is asked once per dbt invocation, or taken from dbt's relation cache.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Callable, Dict, List, Optional, Tuple
from urllib.parse import unquote, urlparse

from dbt.adapters.events.logging import AdapterLogger

from dbt.adapters.streamsql.execution.engine.delta_log import (
    Commit,
    DeltaLogReader,
    JvmSnapshotLog,
    NotDeltaTable,
    SqlDeltaLog,
    TableSnapshot,
    ask_catalog,
    commit_from_info,
    name_parts,
    note_elsewhere,
    quoted,
)
from dbt.adapters.streamsql.planning.plan import Column

logger = AdapterLogger("StreamSQL")

# A table's location, per dbt invocation (the key's first part) and table name: its folder on
# this machine (None: not local) and the catalog's form of it (`file:/...`), which snapshots give
# as SQL's do.
_LOCATIONS: Dict[Tuple[str, str], Tuple[Optional[str], str]] = {}
_DELTA_TYPE_NAMES = {"integer": "int", "long": "bigint", "short": "smallint", "byte": "tinyint"}


def catalog_type(delta_type: Any) -> str:
    """A type of a Delta schema (its JSON form) as Spark's catalog string (`DESCRIBE TABLE`)."""
    if isinstance(delta_type, str):
        return _DELTA_TYPE_NAMES.get(delta_type, delta_type)
    kind = delta_type["type"]
    if kind == "struct":
        fields = ",".join(f"{f['name']}:{catalog_type(f['type'])}" for f in delta_type["fields"])
        return f"struct<{fields}>"
    if kind == "array":
        return f"array<{catalog_type(delta_type['elementType'])}>"
    if kind == "map":
        return f"map<{catalog_type(delta_type['keyType'])},{catalog_type(delta_type['valueType'])}>"
    raise ValueError(f"unknown Delta type {delta_type!r}")


# What dbt's relation cache knows of a table: its location (a Delta table's, from the
# `SHOW TABLE EXTENDED` dbt ran when the invocation began), or None when it knows nothing.
KnownLocation = Callable[[str], Optional[str]]

# The location line of `SHOW TABLE EXTENDED`'s information about a table.
LOCATION_LINE = re.compile(r"^Location: (.+)$", re.MULTILINE)
# A name `SHOW TABLE EXTENDED ... LIKE` matches as itself (its pattern is a regular expression
# with `*` and `|` as wildcards).
PLAIN_NAME = re.compile(r"^\w+$")


def delta_location(information: str) -> Optional[str]:
    """A Delta table's location from `SHOW TABLE EXTENDED`'s information about it; None for
    another kind of table or a view."""
    if "Provider: delta" not in information:
        return None
    found = LOCATION_LINE.search(information)
    return found.group(1).strip() if found else None


class LogFiles:
    """A table's version, snapshot and commits read from its `_delta_log` files on this machine,
    from the last checkpoint on (a cost that does not grow with the log); `fallback` answers
    where `_log_dir` gives no folder, or a file is not there."""

    free_snapshots = True
    VERSION_FILE = re.compile(r"^(\d{20})\.json$")

    def __init__(self, fallback: DeltaLogReader) -> None:
        self.fallback = fallback

    def _log_dir(self, name: str) -> Optional[str]:
        """The table's `_delta_log` folder on this machine; None: ask `fallback`."""
        raise NotImplementedError

    def _location(self, name: str) -> str:
        """The table's location as a snapshot gives it, once `_log_dir` found its folder."""
        raise NotImplementedError

    def version(self, name: str) -> int:
        log = self._log_dir(name)
        version = self._latest(log) if log else None
        return self.fallback.version(name) if version is None else version

    def snapshot(self, name: str) -> TableSnapshot:
        log = self._log_dir(name)
        version = self._latest(log) if log else None
        if log is None or version is None:
            return self.fallback.snapshot(name)
        try:
            with open(os.path.join(log, f"{version:020d}.crc")) as handle:
                checksum = json.load(handle)
            metadata = checksum["metadata"]
            schema = json.loads(metadata["schemaString"])
            columns = tuple(Column(f["name"], catalog_type(f["type"])) for f in schema["fields"])
            size, files = checksum.get("tableSizeBytes"), checksum.get("numFiles")
            return TableSnapshot(
                version,
                str(metadata["id"]),
                {str(k): str(v) for k, v in (metadata.get("configuration") or {}).items()},
                columns,
                int(size) if size is not None else None,
                int(files) if files is not None else None,
                self._location(name),
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:  # no checksum file
            logger.debug(f"Reading {name}'s checksum file failed ({exc}); asking another way")
            return self.fallback.snapshot(name)

    def commits(self, name: str, first: int, last: int) -> List[Commit]:
        if last < first:
            return []
        log = self._log_dir(name)
        latest = self._latest(log) if log else None
        if log is None or latest is None:
            return self.fallback.commits(name, first, last)
        found = [self._commit(log, v) for v in range(max(first, 0), min(last, latest) + 1)]
        return [commit for commit in found if commit is not None]

    def recent_commits(self, name: str, limit: int) -> List[Commit]:
        log = self._log_dir(name)
        latest = self._latest(log) if log else None
        if log is None or latest is None:
            return self.fallback.recent_commits(name, limit)
        found = [self._commit(log, v) for v in range(latest, max(latest - limit, -1), -1)]
        return [commit for commit in found if commit is not None]

    def missing_files(self, name: str, first: int, last: int) -> Optional[List[str]]:
        return self.fallback.missing_files(name, first, last)

    def _latest(self, log: str) -> Optional[int]:
        """The newest committed version: from the last checkpoint on, the first missing file."""
        version = -1
        try:
            with open(os.path.join(log, "_last_checkpoint")) as handle:
                version = int(json.load(handle)["version"])
        except (OSError, ValueError, KeyError):
            versions = [
                int(match.group(1))
                for match in map(self.VERSION_FILE.match, os.listdir(log))
                if match
            ]
            version = max(versions, default=-1)
        while os.path.exists(os.path.join(log, f"{version + 1:020d}.json")):
            version += 1
        return version if version >= 0 else None

    @staticmethod
    def _commit(log: str, version: int) -> Optional[Commit]:
        try:
            with open(os.path.join(log, f"{version:020d}.json")) as handle:
                for line in handle:
                    if line.startswith('{"commitInfo"'):
                        info = json.loads(line)["commitInfo"]
                        break
                else:
                    return None
        except OSError:  # removed by the log's retention, as DESCRIBE HISTORY would not show it
            return None
        return commit_from_info(version, info)


class FileDeltaLog(LogFiles):
    """Reads Delta's log files on this machine's file system; asks `fallback` when it cannot.

    Where a table's files are is the catalog's answer: `known` gives it from dbt's relation
    cache (no statement), else one `SHOW TABLE EXTENDED` per table and dbt invocation, which
    reads the metastore only. (`DESCRIBE DETAIL` would also do: it rebuilds the table's file list
    from its log to give its size, 0.5-1 s after a commit, and the step's read of the table
    rebuilds it again.) A table that statement does not show as Delta is asked `DESCRIBE
    DETAIL`, whose error says what it is."""

    def __init__(
        self, fallback: SqlDeltaLog, invocation: str, known: Optional[KnownLocation] = None
    ) -> None:
        super().__init__(fallback)
        self.fallback: SqlDeltaLog = fallback
        self.invocation = invocation
        self.known = known or (lambda name: None)

    def exists(self, name: str) -> bool:
        # the catalog's answer (files may outlive a table): dbt's cache of it, else a statement
        if self._cached_location(name) is not None:
            return True
        return self.fallback.exists(name)

    # -- the files -------------------------------------------------------------------------------

    def _log_dir(self, name: str) -> Optional[str]:
        """The table's `_delta_log` directory if it is on this machine (None: ask SQL).

        Raises TableMissing / NotDeltaTable as SQL does."""
        key = (self.invocation, name)
        if key not in _LOCATIONS:
            known = self._cached_location(name) or self._catalog_location(name)
            if known is None:
                detail = self._detail(name)
                if str(detail.get("format") or "").lower() != "delta":
                    raise NotDeltaTable(f"{name} is not a Delta table")
                known = str(detail.get("location") or "")
            location = urlparse(known)
            local = location.scheme in ("", "file") and os.path.isdir(unquote(location.path))
            if location.scheme not in ("", "file"):
                note_elsewhere(name, known, "through SQL (DESCRIBE HISTORY, DESCRIBE DETAIL)")
            _LOCATIONS[key] = (unquote(location.path) if local else None, known)
        path = _LOCATIONS[key][0]
        if path is None:
            return None
        log = os.path.join(path, "_delta_log")
        if not os.path.isdir(log):  # dropped since: let SQL say what it is now
            del _LOCATIONS[key]
            return None
        return log

    def _location(self, name: str) -> str:
        return _LOCATIONS[(self.invocation, name)][1]

    def _catalog_location(self, name: str) -> Optional[str]:
        """A Delta table's location as the metastore gives it; None when it does not say (a
        table of another kind, a view, a name this cannot ask for, an error)."""
        schema, table = name_parts(name)
        if not (PLAIN_NAME.match(schema) and PLAIN_NAME.match(table)):
            return None
        try:
            rows = self.fallback.session.query(f"SHOW TABLE EXTENDED IN `{schema}` LIKE '{table}'")
        except Exception as exc:  # a missing schema: DESCRIBE DETAIL says so
            logger.debug(f"SHOW TABLE EXTENDED for {name} failed ({exc}); asking DESCRIBE DETAIL")
            return None
        for row in rows:
            if str(row.get("tableName", "")).lower() == table.lower() and not row.get(
                "isTemporary"
            ):
                return delta_location(str(row.get("information") or ""))
        return None

    def _detail(self, name: str) -> Dict[str, Any]:
        return ask_catalog(self.fallback.session, f"DESCRIBE DETAIL {quoted(name)}")[0]

    def _cached_location(self, name: str) -> Optional[str]:
        """The location dbt's relation cache gives `name`, for a Delta table; None otherwise.
        A location whose log is gone is not taken (the table was dropped since)."""
        location = self.known(name)
        if not location:
            return None
        path = urlparse(location)
        if path.scheme in ("", "file") and not os.path.isdir(
            os.path.join(unquote(path.path), "_delta_log")
        ):
            return None
        return location


class JvmDeltaLog(LogFiles):
    """The embedded session's reader: the catalog's answers (whether a table exists, where its
    files are) from the driver's JVM, a metastore lookup each; the version, snapshot and commits
    from the log's files when they are on this machine, else from Delta's snapshot in the JVM
    (`JvmSnapshotLog`, which asks SQL when the JVM cannot answer)."""

    def __init__(self, spark: Any, fallback: SqlDeltaLog) -> None:
        self.jvm = JvmSnapshotLog(spark, fallback)
        super().__init__(self.jvm)
        # per table: (its log's folder, its location) as the JVM said, for this reader (a step)
        self._where: Dict[str, Tuple[str, str]] = {}

    def exists(self, name: str) -> bool:
        return self.jvm.exists(name)

    def _log_dir(self, name: str) -> Optional[str]:
        """Raises TableMissing as the catalog says. The catalog is asked once per table and
        reader (one step of one model; a metastore lookup of 5-10 ms): then the folder's
        presence says the table is there. A step may create a table it found missing (a miss
        is not kept), or replace one (its folder stays); a dropped table loses its folder, and
        the JVM is asked again."""
        if name not in self._where:
            found = self.jvm.location(name)
            if found is None:
                return None
            self._where[name] = found
        log = self._where[name][0]
        if not os.path.isdir(log):  # not a Delta table, or dropped: the JVM says what it is
            del self._where[name]
            return None
        return log

    def _location(self, name: str) -> str:
        return self._where[name][1]
