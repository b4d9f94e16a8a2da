"""A Delta log store for tables on the local file system whose listing does not grow with the log.

For nearly every statement that names a table, Delta asks the table's `_delta_log` folder for
the files from a version on. Delta's own store for `file:` paths lists the whole folder through
Hadoop and builds a file status (a few system calls) for each of its files: four a version, and
a log keeps at least the current day's versions. A pinned read went from 54 ms at 5 versions to
412 ms at 1,600 (bench/results/delta_resolve.md); a pipeline that steps every few minutes gets
there within days. `ListFromLogStore` (jvm/, beside this module) lists names only and builds a
status only for the files Delta goes on to read: flat from 400 versions on.

The adapter ships the store as Java source and compiles it on first use with the JDK's `javac`
into the user's cache (~/.cache/dbt-streamsql), once per version of the source. It compiles
against a stand-in for Delta's `LocalLogStore` (jvm/stub/), so it needs no Delta jar and works
on a first start, before Ivy has fetched Delta. At run time the class loads beside Delta's own
jars (`spark.jars`) and extends the real `LocalLogStore`: it writes, reads and lists exactly what
Delta's store does; only the listing's cost differs.

Without a JDK compiler (a JRE only), or when a profile names a log store itself, Delta's own
store is used, with one line saying why.

The same jar carries `SharedMetastoreThreadState`, which the warm server uses to keep one
metastore connection across its statements' threads (`share_metastore_state`, which
warm_server.py calls).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path
from typing import Any, Dict, List, Optional

from dbt.adapters.events.logging import AdapterLogger

logger = AdapterLogger("StreamSQL")

LOG_STORE_CLASS = "io.streamsql.ListFromLogStore"
LOG_STORE_SETTING = "spark.delta.logStore.file.impl"
# For s3a:// tables: Delta's S3 store, listing from a version (jvm/ListFromS3SingleDriverLogStore)
S3_LOG_STORE_CLASS = "io.streamsql.ListFromS3SingleDriverLogStore"
S3_LOG_STORE_SETTING = "spark.delta.logStore.s3a.impl"
# A profile that names any of a scheme's settings chose its log store for that scheme: the
# adapter does not replace it.
OWN_STORE_SETTINGS = {
    LOG_STORE_SETTING: (LOG_STORE_SETTING, "spark.delta.logStore.class"),
    S3_LOG_STORE_SETTING: (
        S3_LOG_STORE_SETTING,
        "spark.delta.logStore.s3.impl",
        "spark.delta.logStore.class",
    ),
}
JAR_PREFIX = "streamsql-log-store-"
JVM_DIR = os.path.join(os.path.dirname(__file__), "jvm")
SOURCE = os.path.join(JVM_DIR, "ListFromLogStore.java")
S3_SOURCE = os.path.join(JVM_DIR, "ListFromS3SingleDriverLogStore.java")
# Compiled into the same jar: the warm server's one metastore connection (warm_server.py)
METASTORE_SOURCE = os.path.join(JVM_DIR, "SharedMetastoreThreadState.java")
STUB = os.path.join(JVM_DIR, "stub", "io", "delta", "storage", "LocalLogStore.java")
S3_STUB = os.path.join(JVM_DIR, "stub", "io", "delta", "storage", "S3SingleDriverLogStore.java")
JAVA_RELEASE = "17"  # Spark 4's minimum: classes for a newer JVM would not load on Java 17

_reported = False


def cache_dir() -> str:
    """The adapter's cache folder (the compiled store, the jar lists Ivy resolved)."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "dbt-streamsql")


def jar_path() -> str:
    """Where this version of the store's source is compiled to."""
    digest = hashlib.sha256(JAVA_RELEASE.encode())
    for path in (SOURCE, STUB, METASTORE_SOURCE, S3_SOURCE, S3_STUB):
        with open(path, "rb") as handle:
            digest.update(handle.read())
    return os.path.join(cache_dir(), f"{JAR_PREFIX}{digest.hexdigest()[:12]}.jar")


def find_javac() -> Optional[str]:
    """The compiler of the JDK Spark runs on: JAVA_HOME's, else the one on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = os.path.join(java_home, "bin", "javac")
        if os.path.isfile(candidate):
            return candidate
    return shutil.which("javac")


def hadoop_jars() -> List[str]:
    """Spark's own Hadoop API jar(s), which the store's source names (FileSystem, Path, ...)."""
    import pyspark

    folder = os.path.join(os.path.dirname(pyspark.__file__), "jars")
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    return [os.path.join(folder, n) for n in names if n.startswith("hadoop-client-api-")]


def compile_store(target: str) -> Optional[str]:
    """Compile the store into the jar `target`; the reason when it cannot be, else None."""
    javac = find_javac()
    if javac is None:
        return "no Java compiler (javac) was found: JAVA_HOME and PATH have a JRE only"
    hadoop = hadoop_jars()
    if not hadoop:
        return "pyspark's Hadoop jar (pyspark/jars/hadoop-client-api-*.jar) was not found"
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="streamsql-log-store-") as work:
        stub_classes, classes = os.path.join(work, "stub"), os.path.join(work, "classes")
        common = [javac, "--release", JAVA_RELEASE, "-nowarn", "-encoding", "UTF-8"]
        steps = [
            [*common, "-cp", os.pathsep.join(hadoop), "-d", stub_classes, STUB, S3_STUB],
            [
                *common,
                *("-cp", os.pathsep.join([stub_classes, *hadoop]), "-d", classes),
                *(SOURCE, METASTORE_SOURCE, S3_SOURCE),
            ],
        ]
        for command in steps:
            try:
                done = subprocess.run(command, capture_output=True, text=True, timeout=300)
            except (OSError, subprocess.TimeoutExpired) as error:
                return f"{os.path.basename(javac)} could not run: {error}"
            if done.returncode != 0:
                said = (done.stderr or done.stdout).strip().splitlines()
                return f"javac failed: {' / '.join(said[:3])}"
        # A jar is a zip of the classes; only ours, never the stand-in for Delta's class.
        staged = os.path.join(work, "store.jar")
        with zipfile.ZipFile(staged, "w", zipfile.ZIP_DEFLATED) as jar:
            jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
            for folder, _, files in os.walk(classes):
                for name in sorted(files):
                    path = os.path.join(folder, name)
                    jar.write(path, os.path.relpath(path, classes).replace(os.sep, "/"))
        # Another process may compile the same source at the same time: the last rename wins,
        # and both wrote the same classes.
        shutil.copyfile(staged, target + f".{os.getpid()}.tmp")
        os.replace(target + f".{os.getpid()}.tmp", target)
    return None


def store_jar() -> Optional[str]:
    """The compiled store (compiling it on first use), or None with one line saying why not.

    A compile that failed is not tried again by every start: the reason is kept beside where the
    jar would be (`<jar>.failed`); delete that file to try again."""
    global _reported
    try:
        target = jar_path()
    except OSError as error:  # an installation without the source files
        reason: Optional[str] = f"its source is missing ({error})"
    else:
        if os.path.isfile(target):
            return target
        failed = target + ".failed"
        reason = None
        if os.path.isfile(failed):
            with open(failed) as handle:
                reason = handle.read().strip() or "an earlier compile failed"
            reason += f" (kept in {failed}; delete it to try again)"
        else:
            try:
                reason = compile_store(target)
            except OSError as error:  # e.g. a read-only home
                reason = f"it could not be written to {target}: {error}"
            if reason is None:
                logger.debug(f"Compiled the Delta log store {LOG_STORE_CLASS} into {target}")
                return target
            if find_javac() is not None:  # a compiler that failed: remember why
                try:
                    with open(failed, "w") as handle:
                        handle.write(reason)
                except OSError:
                    pass
    if not _reported:
        _reported = True
        logger.info(
            f"Delta's own log store is in use: {reason}. Statements on a table slow down as its "
            "log grows (docs/tables.md, 'Log length'). To use the adapter's store instead, see "
            "docs/configuration.md, 'Delta's log store' (a JDK's javac, a writable cache folder)."
        )
    return None


def is_store_jar(jar: str) -> bool:
    """Whether an entry of `spark.jars` is the compiled store (not one of Delta's jars)."""
    return os.path.basename(jar).startswith(JAR_PREFIX)


def with_log_store(conf: Dict[str, str], own: Dict[str, str]) -> Dict[str, str]:
    """`conf` with the adapter's log stores for `file:` and `s3a:` tables added to it, each
    unless the profile's own settings (`own`) chose a log store for its scheme, and neither if
    the stores cannot be compiled."""
    stores = {
        setting: store
        for setting, store in (
            (LOG_STORE_SETTING, LOG_STORE_CLASS),
            (S3_LOG_STORE_SETTING, S3_LOG_STORE_CLASS),
        )
        if not any(chosen in own for chosen in OWN_STORE_SETTINGS[setting])
    }
    if not stores:
        return conf
    jar = store_jar()
    if jar is None:
        return conf
    uri = Path(jar).resolve().as_uri()
    jars = conf.get("spark.jars", "")
    return {**conf, "spark.jars": f"{jars},{uri}" if jars else uri, **stores}


def share_metastore_state(spark: Any) -> str:
    """One embedded-metastore connection for all statements (jvm/SharedMetastoreThreadState.java:
    Spark Connect runs each statement on a new thread, and Hive builds its store and its
    configuration again for every thread); what was done, as a line for the server's log."""
    jvm = spark.sparkContext._jvm
    try:
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        shared = jvm.io.streamsql.SharedMetastoreThreadState.share(loader)
    except Exception as error:  # no compiled helper (no javac), or another Hive
        said = str(error).strip().splitlines()
        return "the metastore's connection is per statement (each pays for a new one): " + (
            said[0][:200] if said else type(error).__name__
        )
    return f"one metastore connection for all statements ({shared} shared across threads)"
