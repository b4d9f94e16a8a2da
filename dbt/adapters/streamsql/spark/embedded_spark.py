"""The embedded Spark session: Delta Lake, an on-disk metastore and warehouse, local defaults.

`method: session` must work with no Spark settings at all. This module turns a profile into a
running SparkSession with Delta Lake's SQL extensions and catalog, Delta's jars resolved from Maven
Central (cached by Ivy), and a Derby metastore plus warehouse under one directory, so that tables
survive from one `dbt run` to the next.

The embedded Derby metastore admits one process at a time. Rather than letting a second `dbt run`
die on Derby's "another instance may have booted the database", the process holds an exclusive
lock on the warehouse for as long as it lives and a second process waits for it (with progress
messages) up to `lock_timeout` seconds, then fails with a message that says what to do. The lock is
`filelock`'s, which takes the OS's own file lock on POSIX and on Windows alike.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional
from urllib.parse import urlparse

from dbt.adapters.events.logging import AdapterLogger
from dbt_common.exceptions import DbtRuntimeError
from filelock import FileLock, Timeout

from dbt.adapters.streamsql import object_store
from dbt.adapters.streamsql.spark import class_archive as archives
from dbt.adapters.streamsql.spark import writer_claim
from dbt.adapters.streamsql.spark.log_store import (
    LOG_STORE_SETTING,
    S3_LOG_STORE_CLASS,
    cache_dir,
    is_store_jar,
    with_log_store,
)

logger = AdapterLogger("StreamSQL")

DELTA_EXTENSIONS = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
SCALA_BINARY_VERSION = "2.13"
IVY_SETTINGS = os.path.join(os.path.dirname(__file__), "ivysettings.xml")


def delta_maven_coordinate() -> str:
    """The Maven coordinate of the Delta jar matching the installed pyspark and delta-spark.

    Delta 4.x publishes one artifact per Spark minor version, e.g. delta-spark_4.2_2.13.
    """
    from importlib.metadata import version

    import pyspark

    spark_minor = ".".join(pyspark.__version__.split(".")[:2])
    return f"io.delta:delta-spark_{spark_minor}_{SCALA_BINARY_VERSION}:{version('delta-spark')}"


def resolved_jars_file(coordinate: str) -> str:
    """Where the jar files Ivy resolved for `coordinate` are listed after a first start."""
    return os.path.join(cache_dir(), re.sub(r"[^A-Za-z0-9_.-]", "_", coordinate) + ".jars")


def cached_jars(coordinate: str) -> Optional[str]:
    """The jars a previous start resolved for `coordinate` (a `spark.jars` value), if every one
    of them is still on disk. Naming them skips Ivy's resolution, 1-2 s of every cold start."""
    try:
        with open(resolved_jars_file(coordinate)) as handle:
            jars = handle.read().strip()
    except OSError:
        return None
    paths = [urlparse(jar).path if jar.startswith("file:") else jar for jar in jars.split(",")]
    if not jars or not all(os.path.isfile(path) for path in paths):
        return None
    return jars


def remember_jars(coordinate: str, session: Any) -> None:
    """After Ivy resolved `coordinate`, list the jar files it gave for the next start.

    Spark adds them to `spark.jars` only when the start named no jar there; beside the log
    store's jar they are in `spark.repl.local.jars` (every local jar of the start) alone."""
    conf = session.sparkContext.getConf()
    listed = [conf.get(key, "") or "" for key in ("spark.jars", "spark.repl.local.jars")]
    # the adapter's log store rides along in spark.jars; it is added again at every start
    found = [jar for jar in ",".join(listed).split(",") if jar and not is_store_jar(jar)]
    jars = ",".join(dict.fromkeys(found))
    if not jars:
        return
    path = resolved_jars_file(coordinate)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".tmp", "w") as handle:
            handle.write(jars)
        os.replace(path + ".tmp", path)
    except OSError as error:  # a read-only home: every start resolves with Ivy, as before
        logger.debug(f"Could not record Delta's resolved jars in {path}: {error}")


@dataclass(frozen=True)
class SessionSettings:
    """What the embedded session is built from (derived from the profile)."""

    warehouse_dir: str
    master: str
    server_side_parameters: Dict[str, str]
    lock_timeout: int
    # On an s3a:// warehouse, claim it for this driver (writer_claim.py); False: the profile
    # says runs take turns by other means, or its log store orders commits across drivers.
    writer_claim: bool = True

    @property
    def uses_embedded_metastore(self) -> bool:
        params = self.server_side_parameters
        return not (
            "spark.hadoop.hive.metastore.uris" in params
            or "spark.hadoop.javax.jdo.option.ConnectionURL" in params
            or params.get("spark.sql.catalogImplementation") == "in-memory"
        )

    @property
    def cores(self) -> int:
        """Cores of a `local[N]` master (N; `local[*]`: this machine's); 4 for a cluster."""
        match = re.fullmatch(r"local\[(\d+|\*)\]", self.master.strip())
        if match is None:
            return 1 if self.master.strip() == "local" else 4
        if match.group(1) == "*":
            return os.cpu_count() or 2
        return int(match.group(1))

    def spark_conf(self) -> Dict[str, str]:
        """All Spark settings for the session; the profile's `server_side_parameters` win."""
        warehouse = self.warehouse_dir
        metastore = os.path.join(warehouse, "metastore_db")
        conf = {
            "spark.app.name": "dbt-streamsql",
            "spark.sql.extensions": DELTA_EXTENSIONS,
            "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
            "spark.sql.warehouse.dir": os.path.join(warehouse, "tables"),
            "spark.hadoop.javax.jdo.option.ConnectionURL": (
                f"jdbc:derby:;databaseName={metastore};create=true"
            ),
            # The JVM in UTC like the SQL session: on a JVM in another time zone Delta rebuilds
            # a small table's list of files after each commit instead of updating it. A JVM
            # that crashes writes its report beside Spark's log, not in the dbt project.
            "spark.driver.extraJavaOptions": (
                f"-Dderby.system.home={warehouse} -Duser.timezone=UTC "
                f"-XX:ErrorFile={os.path.join(warehouse, 'logs', 'hs_err_pid%p.log')}"
            ),
            # Tables created without a USING clause are Delta tables, with the change feed on.
            "spark.sql.sources.default": "delta",
            "spark.sql.legacy.createHiveTableByDefault": "false",
            "spark.databricks.delta.properties.defaults.enableChangeDataFeed": "true",
            # A laptop or CI machine: few cores, small shuffles, no web UI. A step is mostly
            # small queries, where every task more is overhead: one shuffle partition per core.
            "spark.driver.memory": "4g",
            "spark.sql.shuffle.partitions": str(self.cores),
            "spark.default.parallelism": str(self.cores),
            "spark.sql.adaptive.enabled": "true",
            # A MERGE whose source is not a plain Delta read copies the source first (a step's
            # own MERGEs skip that copy: their source is materialized already). Kept in memory,
            # spilling to disk only when memory runs out, where Delta's default is disk only.
            "spark.databricks.delta.merge.materializeSource.rddStorageLevel": "MEMORY_AND_DISK",
            # Delta rebuilds a table's state with this many tasks (default 50): costly on 2 cores.
            "spark.databricks.delta.snapshotPartitions": "2",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.ansi.enabled": "false",
        }
        params = self.server_side_parameters
        # tables on S3: the S3A connector's jars and settings (none for a local warehouse)
        conf.update(object_store.s3a_settings({**conf, **params}, os.environ))
        if "spark.jars" not in params and "spark.jars.packages" not in params:
            coordinate = self.maven_packages()
            jars = cached_jars(coordinate)
            if jars:  # resolved by an earlier start: the files, without asking Ivy again
                conf["spark.jars"] = jars
            else:
                conf["spark.jars.packages"] = coordinate
                conf["spark.jars.ivySettings"] = IVY_SETTINGS
        elif "spark.jars" not in params:
            conf["spark.jars.ivySettings"] = IVY_SETTINGS
        conf.update(self.server_side_parameters)
        return conf

    def maven_packages(self) -> str:
        """What the session asks Ivy for when the profile names no jars: Delta, and S3A for a
        session that uses it (object_store.py)."""
        tables = {"spark.sql.warehouse.dir": os.path.join(self.warehouse_dir, "tables")}
        return object_store.maven_packages(
            delta_maven_coordinate(), {**tables, **self.server_side_parameters}
        )


_session: Any = None
_session_settings: Optional[SessionSettings] = None
_startup_error: Optional[DbtRuntimeError] = None
_warehouse_lock: Optional[FileLock] = None
_session_guard = threading.Lock()


def get_spark_session(
    settings: SessionSettings, on_claim_lost: Optional[Callable[[str], None]] = None
) -> Any:
    """The process-wide SparkSession for these settings, started on first use.

    A JVM holds one SparkSession configuration, so all connections of a process share it. Asking
    for a different warehouse or master in the same process is an error rather than a silent
    write to the wrong place. A warehouse on s3a:// is claimed for this driver (writer_claim.py);
    `on_claim_lost` is called if another driver takes the claim later (by default the session
    is stopped).
    """
    global _session, _session_settings, _startup_error
    with _session_guard:
        if _startup_error is not None:
            # dbt opens connections again after a failure (even to close them); starting a JVM
            # that already failed once in this process would only fail again, slowly.
            raise _startup_error
        if _session is not None:
            if _session_settings is not None and (
                _session_settings.warehouse_dir != settings.warehouse_dir
                or _session_settings.master != settings.master
            ):
                raise DbtRuntimeError(
                    "This process already runs an embedded Spark session with warehouse "
                    f"{_session_settings.warehouse_dir!r} and master {_session_settings.master!r}; "
                    f"it cannot switch to warehouse {settings.warehouse_dir!r} and master "
                    f"{settings.master!r}. Use one warehouse_dir per dbt invocation."
                )
            return _session
        check_java()
        os.makedirs(settings.warehouse_dir, exist_ok=True)
        if settings.uses_embedded_metastore:
            # Derby runs in the driver (this process) whatever the master: on a cluster too,
            # a second driver on the same warehouse would find the metastore taken.
            _lock_warehouse(settings)
        try:
            session = _start_session(settings)
            if settings.writer_claim:
                writer_claim.claim_warehouse(
                    session,
                    settings.spark_conf(),
                    settings.warehouse_dir,
                    on_claim_lost or (lambda said: _stop_writing(session, said)),
                )
        except DbtRuntimeError as exc:
            _startup_error = exc
            raise
        _session, _session_settings = session, settings
        return _session


def _stop_writing(session: Any, said: str) -> None:
    """Another driver holds the warehouse's claim now: stop this one, as if it were killed."""
    logger.error(f"{said}; stopping this process's Spark session")
    session.stop()


def check_java() -> None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.path.exists(os.path.join(java_home, "bin", "java")):
        return
    if shutil.which("java"):
        return
    raise DbtRuntimeError(
        "dbt-streamsql's embedded Spark (method: session) needs Java 17 or newer, and no `java` "
        "was found on PATH and JAVA_HOME is not set. Install a JDK (for example "
        "`apt-get install openjdk-17-jdk-headless`) or set JAVA_HOME to one."
    )


def _lock_warehouse(settings: SessionSettings) -> None:
    """Hold an exclusive lock on the warehouse for the life of this process."""
    global _warehouse_lock
    if _warehouse_lock is not None:
        return  # this process holds it already
    _warehouse_lock = acquire_warehouse_lock(settings.warehouse_dir, settings.lock_timeout)


def acquire_warehouse_lock(warehouse_dir: str, timeout: int) -> FileLock:
    """The exclusive lock on `warehouse_dir`, once no other process holds it.

    Waits up to `timeout` seconds (not at all if 0 or less), logging every 30 s, then raises an
    error that names the holder. The lock is `<warehouse_dir>/.streamsql.lock`, the file that the
    earlier, fcntl-based versions of the adapter locked, so the two exclude each other on POSIX.
    The holder's pid is written beside it, in `.streamsql.lock.holder`: on Windows no other process
    can read a locked file. The caller keeps the returned lock; the process's end releases it.
    """
    path = os.path.join(warehouse_dir, ".streamsql.lock")
    # thread_local=False: the lock belongs to the process, not to the dbt thread that took it.
    lock = FileLock(path, thread_local=False)
    deadline = time.monotonic() + timeout
    try:
        lock.acquire(blocking=False)
    except Timeout:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DbtRuntimeError(
                    f"The warehouse {warehouse_dir} is in use by another process "
                    f"({_warehouse_holder(path)}) and stayed locked for {timeout} s. The embedded "
                    "metastore serves one process at a time: wait for that run to finish, raise "
                    "`lock_timeout` in the profile, or run concurrent jobs against a shared "
                    "metastore (method: thrift, or hive.metastore.uris)."
                ) from None
            logger.info(f"Waiting for another process to release the warehouse {warehouse_dir}")
            try:
                lock.acquire(timeout=min(remaining, 30), poll_interval=0.5)
                break
            except Timeout:
                continue
    with open(path + ".holder", "w") as holder:
        holder.write(f"pid {os.getpid()}")
    return lock


def _warehouse_holder(lock_path: str) -> str:
    try:
        with open(lock_path + ".holder") as holder:
            return holder.read().strip() or "unknown"
    except OSError:
        return "unknown"


def spark_log_path(warehouse_dir: str) -> str:
    """Where the embedded JVM's own output goes: the warehouse's logs/spark.log."""
    return os.path.join(warehouse_dir, "logs", "spark.log")


def output_tail(path: str, lines: int = 20) -> str:
    """The last lines of a log file ("" when there is none)."""
    try:
        with open(path, errors="replace") as handle:
            return "".join(handle.readlines()[-lines:])
    except OSError:
        return ""


def class_archive_folder() -> str:
    """Where Java's class archives for Spark's JVM are kept (class_archive.py)."""
    return os.path.join(cache_dir(), "class-archive")


def class_archive_file(settings: SessionSettings) -> Optional[str]:
    """The class archive a session with these settings maps (None: the archive is off)."""
    from pyspark.find_spark_home import _find_spark_home

    return archives.archive_path(
        class_archive_folder(), settings.spark_conf(), dict(os.environ), _find_spark_home()
    )


def launch_jvm(master: str, conf: Dict[str, str], log: str, class_archive: bool) -> None:
    """Start Spark's JVM with its output (start-up warnings, Ivy's resolution, log lines) in
    `log` rather than on the dbt command's terminal, unless this process has a JVM already.
    With `class_archive`, the JVM maps Java's class archive, or writes it (class_archive.py).

    PySpark starts the JVM when the first SparkContext is created and lets it write to the
    terminal; starting it here first, with the same settings, is PySpark's documented way to
    capture that output (`popen_kwargs`). The SparkContext then attaches to it."""
    from pyspark import SparkConf, SparkContext
    from pyspark.find_spark_home import _find_spark_home
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return
    os.makedirs(os.path.dirname(log), exist_ok=True)
    options: List[str] = []
    writer: Optional[archives.ArchiveWriter] = None
    if class_archive:
        options, writer = archives.java_options(
            class_archive_folder(), conf, dict(os.environ), _find_spark_home()
        )
    spark_conf = SparkConf(loadDefaults=False).setMaster(master)
    for key, value in conf.items():
        spark_conf.set(key, value)
    if options:
        java_options = conf.get("spark.driver.extraJavaOptions", "")
        spark_conf.set("spark.driver.extraJavaOptions", " ".join([java_options, *options]).strip())
    with open(log, "ab") as output:  # the JVM keeps its own handle
        gateway = launch_gateway(
            spark_conf, popen_kwargs={"stdout": output, "stderr": subprocess.STDOUT}
        )
    SparkContext._ensure_initialized(gateway=gateway)
    if writer is not None:
        logger.info(
            "This Spark start writes Java's class archive when the run ends (once per Java and "
            "Spark version; it makes later starts cheaper: docs/configuration.md)"
        )
        atexit.register(_finish_class_archive, writer, gateway.proc)


def _finish_class_archive(writer: archives.ArchiveWriter, jvm: Any) -> None:
    said = writer.finish(jvm)
    try:
        logger.info(said)
    except Exception:  # dbt's logging may be gone at exit
        pass


def _start_session(settings: SessionSettings) -> Any:
    from pyspark.sql import SparkSession

    conf = with_log_store(settings.spark_conf(), settings.server_side_parameters)
    packages = (
        f"Spark resolves {conf['spark.jars.packages']} and its dependencies from Maven Central "
        "on first use and caches them under ~/.ivy2*"
        if "spark.jars.packages" in conf
        else "spark.jars names them, and must name every jar Delta needs, each on disk"
    )
    builder = SparkSession.builder.master(settings.master).enableHiveSupport()
    for key, value in conf.items():
        builder = builder.config(key, value)
    started = time.monotonic()
    log = spark_log_path(settings.warehouse_dir)
    logger.info(
        f"Starting embedded Spark ({settings.master}, warehouse {settings.warehouse_dir}; "
        f"its output: {log})"
    )
    try:
        # a profile's own JVM options replace the adapter's, the class archive's too
        own_options = "spark.driver.extraJavaOptions" in settings.server_side_parameters
        launch_jvm(settings.master, conf, log, class_archive=not own_options)
        session = builder.getOrCreate()
    except Exception as exc:  # the JVM failed to start: explain the two usual causes
        raise DbtRuntimeError(
            "The embedded Spark session could not start. The usual causes:\n"
            "  1. Java: dbt-streamsql needs Java 17+ (`java -version`).\n"
            f"  2. Delta Lake's jars: {packages}. Without network "
            "access, copy all of them (~/.ivy2.5.2/jars/ after a first start on a machine with "
            "network; delta-spark and delta-storage alone are not enough) and name them in the "
            'profile: server_side_parameters: {spark.jars: "/path/delta-jars/*.jar"} '
            "(docs/configuration.md, 'Without network access to Maven Central').\n"
            f"Spark said: {exc}\nThe end of its output ({log}):\n{output_tail(log)}"
        ) from exc
    coordinate = settings.maven_packages()
    if conf.get("spark.jars.packages") == coordinate:  # Ivy resolved it: list what it gave
        remember_jars(coordinate, session)
    session.sparkContext.setLogLevel("ERROR")
    # PySpark also logs every failed statement with its JVM stack trace; dbt reports the error
    # itself, so the console would show each failure twice, the second time as a wall of Java.
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    if object_store.uses_s3a(conf):
        logger.info(object_store.s3_log_store_note(conf, S3_LOG_STORE_CLASS))
    store = conf.get(LOG_STORE_SETTING, "Delta's own")
    logger.debug(
        f"Embedded Spark started in {time.monotonic() - started:.1f} s (log store: {store})"
    )
    return session
