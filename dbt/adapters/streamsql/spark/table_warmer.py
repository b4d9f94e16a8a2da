"""Between runs, the warm server reads the tables that changed since it last read them.

The first write or filtered read of a Delta table after a commit loads the table's new snapshot:
its log since the last checkpoint and the list of its files (0.1-0.5 s a small table here, more
for a table of many files). In a `dbt run` that sits on the step's path, once per table the step
reads or writes: the views it committed to in the step before, their state tables, and the
sources other jobs appended to. A warm server is idle between cron runs. It does that loading
then, for every table of its warehouse whose `_delta_log/` changed, so that the next run's
statements find each snapshot loaded in the server's JVM. It reads only while no client's
statement is on the server, one table at a time, looking again before each table; a run that
begins meanwhile waits for one table's read at most.

What it reads is what any reader would: the table's current version, through Spark, as
`SELECT COUNT(*)`. Nothing is written, and nothing a run sees changes but its time.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

DELTA_LOG = "_delta_log"
# a server reads only after this long without a client's statement: a run's own statements
# follow each other within a fraction of this
QUIET_SECONDS = 1.0


def delta_tables(tables_dir: str) -> Dict[str, int]:
    """The Delta tables under a Spark warehouse directory (the default database's tables and
    those of each `<name>.db/` directory), each with its log directory's change time (ns)."""
    found: Dict[str, int] = {}

    def look(directory: str, depth: int) -> None:
        try:
            entries = list(os.scandir(directory))
        except OSError:  # dropped meanwhile, or not ours to read
            return
        for entry in entries:
            if entry.name.startswith((".", "_")) or not entry.is_dir(follow_symlinks=False):
                continue
            try:
                found[entry.path] = os.stat(os.path.join(entry.path, DELTA_LOG)).st_mtime_ns
            except OSError:
                if depth == 0 and entry.name.endswith(".db"):
                    look(entry.path, 1)

    look(tables_dir, 0)
    return found


class TableWarmer:
    """Reads each table whose log changed since its last read, while `idle()` says so.

    `read(path)` loads the table's current version; `idle()` is asked before each table. The
    tables present when the warmer is made count as read: a server's first run loads them."""

    def __init__(
        self, tables_dir: str, read: Callable[[str], None], idle: Callable[[], bool]
    ) -> None:
        self.tables_dir = tables_dir
        self._read = read
        self._idle = idle
        self._seen = delta_tables(tables_dir)

    def pending(self) -> List[Tuple[str, int]]:
        """Tables changed since their last read, each with its log's change time as listed, the
        most recently changed first."""
        now = delta_tables(self.tables_dir)
        for gone in set(self._seen) - set(now):
            del self._seen[gone]
        stale = [(m, p) for p, m in now.items() if self._seen.get(p) != m]
        return [(path, changed) for changed, path in sorted(stale, reverse=True)]

    def warm(self) -> Tuple[List[str], List[Tuple[str, str]], float]:
        """One pass: the tables read, those that failed (path, first line of the error), and
        the seconds it took. A failed table is tried again once its log changes again."""
        started = time.monotonic()
        read: List[str] = []
        failed: List[Tuple[str, str]] = []
        for path, changed in self.pending():
            try:
                if not self._idle():
                    break
            except Exception:  # the JVM is gone: the server's loop finds that out and stops
                break
            try:
                self._read(path)
                read.append(path)
            except Exception as error:  # not named if dropped since the listing
                if os.path.isdir(os.path.join(path, DELTA_LOG)):
                    said = str(error).strip().splitlines()
                    failed.append((path, said[0][:200] if said else type(error).__name__))
            # as listed, before the read: a commit since is read in the next pass
            self._seen[path] = changed
        return read, failed, time.monotonic() - started


def report_warming(read: List[str], failed: List[Tuple[str, str]], seconds: float) -> None:
    """The server's log line for a pass of its table warmer (none for a pass that read none)."""
    if read:
        names = ", ".join(os.path.basename(path) for path in read[:4])
        more = f" and {len(read) - 4} more" if len(read) > 4 else ""
        print(
            f"{time.strftime('%H:%M:%S')} read {len(read)} changed tables in {seconds:.1f} s "
            f"({names}{more})",
            flush=True,
        )
    for path, error in failed:
        print(
            f"{time.strftime('%H:%M:%S')} could not read {path} between runs: {error}", flush=True
        )


def read_with(spark: Any) -> Callable[[str], None]:
    """Loads a table's current version into the session's JVM (its snapshot and file list)."""

    def read(path: str) -> None:
        spark.sql(f"SELECT COUNT(*) FROM delta.`{path.replace('`', '``')}`").collect()

    return read


class ConnectActivity:
    """When a client's statement was last on the Spark Connect server (its execution manager,
    read through py4j)."""

    def __init__(self, jvm: Any) -> None:
        service = jvm.java.lang.Class.forName(
            "org.apache.spark.sql.connect.service.SparkConnectService$"
        )
        self._manager = service.getField("MODULE$").get(None).executionManager()
        self._clock = jvm.java.lang.System
        self._listed: Tuple[str, ...] = ()
        self._listed_since = time.monotonic()

    def quiet_for(self) -> float:
        """Seconds without a client's statement running or starting; 0 while one runs."""
        executions = self._manager.listActiveExecutions()
        if executions.isLeft():  # none listed: when the last one ended (the JVM's nanoTime)
            return max(0.0, (self._clock.nanoTime() - executions.left().get()) / 1e9)
        # Listed executions include finished ones a client has not released (a client that
        # ended without closing its session), kept until the server drops them: quiet since
        # the list last changed, as seen from here.
        listed = []
        holders = self._manager.listExecuteHolders().iterator()
        while holders.hasNext():
            holder = holders.next()
            if holder.isExecuteThreadRunnerAlive():
                return 0.0
            listed.append(holder.executeKey().toString())
        keys = tuple(sorted(listed))
        if keys != self._listed:
            self._listed, self._listed_since = keys, time.monotonic()
        return time.monotonic() - self._listed_since


def local_tables_dir(spark: Any) -> Optional[str]:
    """The session's warehouse directory if it is on this machine's file system (it need not
    exist yet)."""
    location = spark.conf.get("spark.sql.warehouse.dir")
    if location.startswith("file:"):
        location = location[len("file:") :]
        while location.startswith("//"):
            location = location[1:]
    return location if location.startswith("/") else None  # created by the first table


def server_warmer(spark: Any, stopping: Any) -> Tuple[Optional[TableWarmer], str]:
    """The warm server's warmer and a line for its log saying what it does (or why not)."""
    tables_dir = local_tables_dir(spark)
    if tables_dir is None:  # on an object store a look for changed logs is a LIST per table
        return None, (
            "tables are not read between runs: the warehouse "
            f"({spark.conf.get('spark.sql.warehouse.dir')}) is not on this machine, and looking "
            "for changed tables there every second would be requests to it; a run's first "
            "statement on a table loads its new version"
        )
    try:
        activity = ConnectActivity(spark.sparkContext._jvm)
        activity.quiet_for()
    except Exception as error:  # another Spark Connect: not known when a client is on it
        said = str(error).strip().splitlines()
        return None, "tables are not read between runs: " + (said[0][:200] if said else "")

    def idle() -> bool:
        return not stopping.is_set() and activity.quiet_for() >= QUIET_SECONDS

    warmer = TableWarmer(tables_dir, read_with(spark), idle)
    return warmer, f"between runs, tables that changed are read again ({tables_dir})"
