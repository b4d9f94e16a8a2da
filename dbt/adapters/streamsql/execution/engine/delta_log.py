"""What a step asks of a Delta table's log: its version, identity, properties, columns, commits.

A step asks these questions of every table it touches, every step: which version an input is at,
whether its commits since the last step only inserted rows, where the model stands (the step record
in its last commit), whether a write landed. Two readers answer them:

- `SqlDeltaLog` asks through SQL (`DESCRIBE HISTORY`, `DESCRIBE DETAIL`, `DESCRIBE TABLE`). It works
  on every connection, a Thrift Server included; each question is a statement of 0.05-0.2 s, and
  reading history is the dearest of them.
- `FileDeltaLog` (delta_files.py: a warm server on this host, spark/warm_server.py) reads the log's
  files itself: the newest version's checksum file (version, id, properties, schema, size) and
  the commit files, each in well under a millisecond. It takes the table's location from dbt's
  relation cache, else asks SQL once per table and dbt invocation (`DESCRIBE DETAIL`), and asks
  SQL instead wherever a file is not there.
- `JvmDeltaLog` (delta_files.py; the embedded session only) asks the driver's JVM through py4j
  what only the catalog knows (whether a table exists, where its files are), and reads the log's
  files itself where they are on this machine, as `FileDeltaLog` does. Elsewhere, or when a file
  is not there, `JvmSnapshotLog` (here) asks Delta's own classes for the table's snapshot and
  commits, in milliseconds, with no statement and no Spark job. Those classes of the pinned
  delta-spark (`DeltaLog`, `Snapshot`, the log's actions) are not a public API: when one of them
  does not answer as expected, it asks `SqlDeltaLog` instead, so a Delta upgrade can cost speed
  but not correctness.

  Why not Delta's snapshot everywhere: `DeltaLog.update` and `getChanges` list the table's whole
  `_delta_log` folder on a local file system, and the public `Catalog.tableExists` loads the
  table's snapshot to answer, so each cost grows with the log's length (Delta keeps 30 days of
  it): 10-30 ms on a new table, 50-80 ms at 400 versions (bench/results/soak_400.md). The files
  are found from the last checkpoint on, at a cost that does not grow.

Names are unquoted `schema.table` (as `InputTable.name`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Protocol, Tuple

from dbt.adapters.events.logging import AdapterLogger

from dbt.adapters.streamsql.planning.plan import Column

logger = AdapterLogger("StreamSQL")

# How Spark and Delta say that a table is not a Delta table, or is not there.
NOT_DELTA_MARKERS = (
    "DELTA_MISSING_DELTA_TABLE",
    "DELTA_ONLY_OPERATION",
    "not a Delta table",
    "only supported for Delta tables",
)
MISSING_MARKERS = (
    "TABLE_OR_VIEW_NOT_FOUND",
    "not found",
    "NoSuchTableException",
    "EXPECT_TABLE_NOT_VIEW",
    "did not specify locationUri",
)

# Operations that change no row (the change feed skips them).
NO_ROW_CHANGE = {
    "SET TBLPROPERTIES",
    "UNSET TBLPROPERTIES",
    "OPTIMIZE",
    "VACUUM START",
    "VACUUM END",
    "ADD COLUMNS",
    "CHANGE COLUMN",
    "RENAME COLUMN",
    "ADD CONSTRAINT",
    "DROP CONSTRAINT",
    "UPGRADE PROTOCOL",
    "SET COLUMN COMMENT",
    "ADD FEATURE",
    "CREATE TABLE",
    "ANALYZE STATS",
    "COMPUTE STATS",
}
# A MERGE's row counts: inserted, updated and deleted (the last two include the matched and the
# not-matched-by-source rows).
MERGE_METRICS = ("numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsDeleted")


# (scheme, reader) pairs whose step-aside this process has said (note_elsewhere)
_NOTED: set = set()


def note_elsewhere(name: str, location: str, how: str) -> None:
    """Say once per process and kind of location that a table's log is not read from files on
    this machine, and how it is read instead; once per table at debug level."""
    scheme = location.split("://", 1)[0] if "://" in location else location
    logger.debug(f"{name}'s log is at {location}: read {how}")
    if (scheme, how) not in _NOTED:
        _NOTED.add((scheme, how))
        logger.info(
            f"Tables on {scheme}:// (first: {name}): their Delta logs are read {how}, not from "
            "files on this machine (docs/deployment.md, 'What runs differently on an object store')"
        )


class TableMissing(Exception):
    """The table does not exist (or is a view)."""


class NotDeltaTable(Exception):
    """The table exists but is not a Delta table."""


@dataclass(frozen=True)
class TableSnapshot:
    version: int
    table_id: str
    properties: Mapping[str, str]
    columns: Tuple[Column, ...]
    size_bytes: Optional[int] = None  # the data files' size, when known
    num_files: Optional[int] = None  # how many data files it holds, when known
    location: Optional[str] = None  # where its files are (a path or URI), when known


@dataclass(frozen=True)
class Commit:
    """One commit of a table's history, as its commit info tells it."""

    version: int
    operation: str
    parameters: Mapping[str, str] = field(default_factory=dict)
    metrics: Mapping[str, str] = field(default_factory=dict)
    user_metadata: Optional[str] = None
    # When it was committed, in seconds since the epoch (None: the history does not say). Not
    # part of a commit's identity: the commit info's own timestamp (the writer's clock as it
    # committed, what the file readers give) and DESCRIBE HISTORY's (the log file's modification
    # time when in-commit timestamps are off) name one commit a few milliseconds apart.
    timestamp: Optional[float] = field(default=None, compare=False)

    def as_history_row(self) -> Dict[str, Any]:
        """In the shape of a `DESCRIBE HISTORY` row (what `record.last_record` reads)."""
        return {
            "version": self.version,
            "operation": self.operation,
            "userMetadata": self.user_metadata,
        }

    @property
    def change_rows(self) -> Optional[Tuple[int, int]]:
        """(rows, removals): the rows this commit adds to the change feed, and how many of them
        remove a row (a delete, or an update's old row); None when the commit info cannot tell.

        Only what the commit's operation and metrics say for certain: an append, a MERGE, DELETE
        or UPDATE with their row counts, or an operation that changes no row.
        """
        operation = self.operation.upper()
        if operation in NO_ROW_CHANGE:
            return 0, 0
        if operation in ("WRITE", "STREAMING UPDATE"):
            mode = self.parameters.get("mode") or self.parameters.get("outputMode")
            rows = self._metric("numOutputRows")
            return (rows, 0) if mode == "Append" and rows is not None else None
        if operation == "DELETE":
            deleted = self._metric("numDeletedRows")
            return None if deleted is None else (deleted, deleted)
        if operation == "UPDATE":
            updated = self._metric("numUpdatedRows")
            return None if updated is None else (2 * updated, updated)
        if operation == "MERGE":
            counts = [self._metric(name) for name in MERGE_METRICS]
            if any(count is None for count in counts):
                return None
            inserted, updated, deleted = counts
            return inserted + 2 * updated + deleted, updated + deleted
        return None

    @property
    def change_bytes(self) -> Optional[int]:
        """Bytes of data files this commit added and removed; None when it cannot tell."""
        operation = self.operation.upper()
        if operation in NO_ROW_CHANGE:
            return 0
        names = {
            "WRITE": ("numOutputBytes",),
            "STREAMING UPDATE": ("numOutputBytes",),
            "DELETE": ("numAddedBytes", "numRemovedBytes"),
            "UPDATE": ("numAddedBytes", "numRemovedBytes"),
            "MERGE": ("numTargetBytesAdded", "numTargetBytesRemoved"),
        }.get(operation)
        values = [self._metric(name) for name in names or ()]
        return sum(values) if values and None not in values else None  # type: ignore[arg-type]

    def _metric(self, name: str) -> Optional[int]:
        value = self.metrics.get(name)
        try:
            return None if value is None else int(value)
        except ValueError:
            return None


class DeltaLogReader(Protocol):
    # Whether `snapshot` costs no statement (read in the JVM): a step may then ask it for a
    # table's size where it only helps a choice (commit/protocol.py, small tables' MERGEs).
    free_snapshots: bool

    def exists(self, name: str) -> bool: ...

    def snapshot(self, name: str) -> TableSnapshot: ...

    def version(self, name: str) -> int: ...

    def commits(self, name: str, first: int, last: int) -> List[Commit]: ...

    def recent_commits(self, name: str, limit: int) -> List[Commit]: ...

    def missing_files(self, name: str, first: int, last: int) -> Optional[List[str]]:
        """Files that the commits `first`..`last` of table `name` name and that are gone (their
        add, remove and change-data files and deletion vectors); None where this reader cannot
        tell, or asking failed."""
        ...


def name_parts(name: str) -> Tuple[str, str]:
    """(schema, table) of `schema.table` or `` `schema`.`table` ``."""
    parts, current, quoted_part, i = [], "", False, 0
    while i < len(name):
        char = name[i]
        if char == "`":
            if quoted_part and name[i + 1 : i + 2] == "`":
                current += "`"
                i += 1
            else:
                quoted_part = not quoted_part
        elif char == "." and not quoted_part:
            parts.append(current)
            current = ""
        else:
            current += char
        i += 1
    parts.append(current)
    if len(parts) < 2:
        raise ValueError(f"expected schema.table, got {name!r}")
    return parts[-2], parts[-1]


def quoted(name: str) -> str:
    return ".".join("`" + part.replace("`", "``") + "`" for part in name_parts(name))


def commit_from_info(version: int, info: Dict[str, Any]) -> Commit:
    """A commit from its commitInfo action as the log's JSON has it."""
    return Commit(
        version,
        str(info.get("operation") or ""),
        {str(k): plain_parameter(v) for k, v in (info.get("operationParameters") or {}).items()},
        {str(k): str(v) for k, v in (info.get("operationMetrics") or {}).items()},
        info.get("userMetadata"),
        epoch_seconds(info.get("timestamp")),
    )


def epoch_seconds(value: Any) -> Optional[float]:
    """A commit's time as seconds since the epoch: from the log's milliseconds, or from the
    timestamp DESCRIBE HISTORY gives; None when it is neither."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value) / 1000.0
    timestamp = getattr(value, "timestamp", None)
    return float(timestamp()) if callable(timestamp) else None


def plain_parameter(value: Any) -> str:
    """Commit parameters are stored as JSON values ("Append" with its quotes); plain text here."""
    text = str(value)
    if len(text) >= 2 and text[0] == text[-1] == '"':
        try:
            return str(json.loads(text))
        except ValueError:
            return text[1:-1]
    return text


def _mapping(value: Any) -> Dict[str, str]:
    """A map column as a session returns it: a dict, or (over Thrift) JSON text."""
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return {str(k): plain_parameter(v) for k, v in dict(value).items()}


def ask_catalog(session: Any, statement: str) -> List[Dict[str, Any]]:
    """The rows of a statement about a table; TableMissing / NotDeltaTable as Spark says."""
    try:
        return session.query(statement)
    except Exception as exc:
        message = str(exc)
        if any(marker in message for marker in NOT_DELTA_MARKERS):
            raise NotDeltaTable(message) from exc
        if any(marker.lower() in message.lower() for marker in MISSING_MARKERS):
            raise TableMissing(message) from exc
        raise


class SqlDeltaLog:
    """Answers through SQL statements on the step's session (every connection method)."""

    free_snapshots = False

    def __init__(self, session: Any) -> None:
        self.session = session

    def exists(self, name: str) -> bool:
        schema, table = name_parts(name)
        rows = self.session.query(f"SHOW TABLES IN `{schema}` LIKE '{table}'")
        return any(str(row.get("tableName", "")).lower() == table.lower() for row in rows)

    def version(self, name: str) -> int:
        history = self._history(name, 1)
        return int(history[0]["version"])

    def snapshot(self, name: str) -> TableSnapshot:
        version = self.version(name)
        detail = self.session.query(f"DESCRIBE DETAIL {quoted(name)}")[0]
        columns = []
        for row in self.session.query(f"DESCRIBE TABLE {quoted(name)}"):
            column = (row.get("col_name") or "").strip()
            if not column or column.startswith("#"):
                break  # partition and detail sections follow a blank or '#' line
            columns.append(Column(row["col_name"], row["data_type"]))
        size, files = detail.get("sizeInBytes"), detail.get("numFiles")
        return TableSnapshot(
            version,
            str(detail.get("id") or ""),
            _mapping(detail.get("properties")),
            tuple(columns),
            int(size) if size is not None else None,
            int(files) if files is not None else None,
            str(detail["location"]) if detail.get("location") else None,
        )

    def commits(self, name: str, first: int, last: int) -> List[Commit]:
        if last < first:
            return []
        latest = self.version(name)
        rows = self._history(name, latest - first + 1)
        found = [self._commit(row) for row in rows if first <= int(row["version"]) <= last]
        return sorted(found, key=lambda commit: commit.version)

    def recent_commits(self, name: str, limit: int) -> List[Commit]:
        return [self._commit(row) for row in self._history(name, limit)]

    def missing_files(self, name: str, first: int, last: int) -> Optional[List[str]]:
        return None  # SQL does not name a commit's files

    def _history(self, name: str, limit: int) -> List[Dict[str, Any]]:
        return ask_catalog(self.session, f"DESCRIBE HISTORY {quoted(name)} LIMIT {limit}")

    @staticmethod
    def _commit(row: Mapping[str, Any]) -> Commit:
        return Commit(
            int(row["version"]),
            str(row.get("operation") or ""),
            _mapping(row.get("operationParameters")),
            _mapping(row.get("operationMetrics")),
            row.get("userMetadata"),
            epoch_seconds(row.get("timestamp")),
        )


class JvmSnapshotLog:
    """Reads Delta's log in the embedded session's JVM; asks `fallback` when that fails."""

    free_snapshots = True

    def __init__(self, spark: Any, fallback: SqlDeltaLog) -> None:
        self.spark = spark
        self.fallback = fallback
        self.jvm = spark._jvm
        self._handles: Optional[Dict[str, Any]] = None

    @property
    def handles(self) -> Dict[str, Any]:
        """The JVM classes and objects the reader calls, looked up once: py4j resolves
        `jvm.org.apache.spark...` a package at a time, a round trip each."""
        if self._handles is None:
            jvm = self.jvm
            option = jvm.scala.Option
            self._handles = {
                # the session catalog (the metastore's answer), not the public `Catalog`, whose
                # `tableExists` loads a Delta table's snapshot: a listing of its log
                "catalog": self.spark._jsparkSession.sessionState().catalog(),
                "option": option,
                "none": option.empty(),
                "identifier": jvm.org.apache.spark.sql.catalyst.TableIdentifier,
                "delta_log": jvm.org.apache.spark.sql.delta.DeltaLog,
            }
        return self._handles

    def exists(self, name: str) -> bool:
        try:
            return bool(self.handles["catalog"].tableExists(self._identifier(name)))
        except Exception as exc:
            return self._fall_back("exists", exc, lambda: self.fallback.exists(name))

    def location(self, name: str) -> Optional[Tuple[str, str]]:
        """(the log's folder on this machine, the table's location as Delta gives it) of a table
        the catalog has; None when its files are not on a local file system or the JVM cannot
        say. Raises TableMissing as the catalog says."""
        try:
            delta_log = self._delta_log(name)
            log_path = delta_log.logPath().toUri()
            if str(log_path.getScheme() or "file") != "file":
                note_elsewhere(name, str(log_path), "through Delta's snapshot in the JVM")
                return None
            return str(log_path.getPath()), str(delta_log.dataPath().toString())
        except TableMissing:
            raise
        except Exception as exc:
            logger.debug(f"Asking the JVM where {name} is failed ({exc}); reading its snapshot")
            return None

    def version(self, name: str) -> int:
        try:
            return int(self._current(name).version())
        except (TableMissing, NotDeltaTable):
            raise
        except Exception as exc:
            return self._fall_back("version", exc, lambda: self.fallback.version(name))

    def snapshot(self, name: str) -> TableSnapshot:
        """The table's newest snapshot: version, id, properties, columns, and its size from the
        version's checksum file (None without one).

        Not `Snapshot.sizeInBytes`: that rebuilds the list of every data file from the log, a
        Spark job of 0.5-3 s after each commit to the table, which a step otherwise never needs
        for a table it only appends to or reads the change feed of.
        """
        try:
            delta_log = self._delta_log(name)
            snapshot = self._update(delta_log, name)
            metadata = json.loads(snapshot.metadata().json())["metaData"]  # one call
            schema = snapshot.schema()
            fields = [schema.apply(i) for i in range(schema.length())]
            columns = tuple(Column(f.name(), f.dataType().catalogString()) for f in fields)
            checksum = snapshot.checksumOpt()
            size = files = None
            if checksum.isDefined():
                found = checksum.get()  # one py4j call, not one per field
                size, files = int(found.tableSizeBytes()), int(found.numFiles())
            return TableSnapshot(
                int(snapshot.version()),
                str(metadata["id"]),
                {str(k): str(v) for k, v in (metadata.get("configuration") or {}).items()},
                columns,
                size,
                files,
                str(delta_log.dataPath().toString()),
            )
        except (TableMissing, NotDeltaTable):
            raise
        except Exception as exc:
            return self._fall_back("snapshot", exc, lambda: self.fallback.snapshot(name))

    def commits(self, name: str, first: int, last: int) -> List[Commit]:
        if last < first:
            return []
        try:
            found = []
            for version, info in self._commit_infos(self._delta_log(name), first):
                if version > last:
                    break
                found.append(self._commit(version, info))
            return found
        except (TableMissing, NotDeltaTable):
            raise
        except Exception as exc:
            return self._fall_back("commits", exc, lambda: self.fallback.commits(name, first, last))

    def recent_commits(self, name: str, limit: int) -> List[Commit]:
        try:
            delta_log = self._delta_log(name)
            latest = int(self._update(delta_log, name).version())
            infos = self._commit_infos(delta_log, max(latest - limit + 1, 0))
            return sorted(
                (self._commit(version, info) for version, info in infos),
                key=lambda commit: -commit.version,
            )
        except (TableMissing, NotDeltaTable):
            raise
        except Exception as exc:
            return self._fall_back(
                "recent_commits", exc, lambda: self.fallback.recent_commits(name, limit)
            )

    def missing_files(self, name: str, first: int, last: int) -> Optional[List[str]]:
        try:
            delta_log = self._delta_log(name)
            hadoop = self.jvm.org.apache.hadoop.fs.Path
            data_path = delta_log.dataPath()
            fs = data_path.getFileSystem(delta_log.newDeltaHadoopConf())
            paths = []
            changes = delta_log.getChanges(first, self.handles["none"], False)
            while changes.hasNext():
                pair = changes.next()
                if int(pair._1()) > last:
                    break
                actions = pair._2().iterator()
                while actions.hasNext():
                    action = actions.next()
                    kind = action.getClass().getSimpleName()
                    if kind == "AddFile" and not action.dataChange():
                        continue  # written by OPTIMIZE: no read of the change needs it
                    if kind not in ("AddFile", "RemoveFile", "AddCDCFile"):
                        continue
                    paths.append(hadoop(data_path, hadoop(self.jvm.java.net.URI(action.path()))))
                    vector = action.deletionVector() if kind != "AddCDCFile" else None
                    if vector is not None and vector.isOnDisk():
                        paths.append(vector.absolutePath(data_path))
            return [str(path.toString()) for path in paths if not fs.exists(path)]
        except Exception as exc:
            logger.debug(f"Listing the files of {name}'s commits {first}-{last} failed: {exc}")
            return None

    # -- the JVM side ---------------------------------------------------------------------------

    def _identifier(self, name: str) -> Any:
        schema, table = name_parts(name)
        return self.handles["identifier"](table, self.handles["option"].apply(schema))

    def _delta_log(self, name: str) -> Any:
        handles = self.handles
        identifier = self._identifier(name)
        if not handles["catalog"].tableExists(identifier):
            raise TableMissing(f"{name} not found")
        try:
            return handles["delta_log"].forTable(self.spark._jsparkSession, identifier)
        except Exception as exc:
            if "did not specify locationUri" in str(exc):  # a view
                raise TableMissing(str(exc)) from exc
            raise

    def _current(self, name: str) -> Any:
        return self._update(self._delta_log(name), name)

    def _update(self, delta_log: Any, name: str) -> Any:
        none = self.handles["none"]
        snapshot = delta_log.update(False, none, none)
        if int(snapshot.version()) < 0:
            raise NotDeltaTable(f"{name} is not a Delta table")
        return snapshot

    def _commit_infos(self, delta_log: Any, first: int) -> Iterator[Tuple[int, Any]]:
        """(version, commit info) of every commit from `first` on, oldest first."""
        changes = delta_log.getChanges(first, self.handles["none"], False)
        while changes.hasNext():
            pair = changes.next()
            actions = pair._2().iterator()
            while actions.hasNext():
                action = actions.next()
                if action.getClass().getSimpleName() == "CommitInfo":
                    yield int(pair._1()), action
                    break

    def _commit(self, version: int, info: Any) -> Commit:
        # as the JSON of the log's commitInfo line: one call, where its maps would cross py4j
        # an entry at a time
        return commit_from_info(version, json.loads(info.json())["commitInfo"])

    def _fall_back(self, question: str, error: Exception, ask: Any) -> Any:
        logger.debug(
            f"Reading Delta's log in the JVM failed ({question}: "
            f"{str(error).splitlines()[0][:200]}); asking through SQL"
        )
        return ask()
