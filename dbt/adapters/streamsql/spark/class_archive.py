"""Java's class archive for Spark's JVM: start-up with the classes already parsed and verified.

A Spark JVM spends most of its first seconds loading and verifying some twenty thousand classes
from Spark's jars, and every `dbt run` on the embedded session (and every warm server) starts one.
The JVM can keep the classes it loaded in a file and map that file at the next start (class data
sharing, `-XX:ArchiveClassesAtExit` / `-XX:SharedArchiveFile`, JDK 13+), which removes most of
that work. This module decides which of the two options a new JVM gets:

- an archive for this JVM and these jars exists: the JVM maps it (`-XX:SharedArchiveFile`);
- none exists and no other process is writing one: the JVM writes one when it exits, into a
  partial file, which this process renames to the archive after waiting for the JVM to exit
  (`ArchiveWriter.finish`, run at this process's exit). Only the holder of `<key>.lock` writes;
  the lock is the OS's, so a killed writer leaves it free;
- another process is writing one: the JVM runs without any.

An archive is only valid for the exact JVM build and class path it was written with: its name is
a digest of both (`archive_key`), so a new Java, pyspark or jar makes a new archive, and the JVM
itself checks the class path again when it maps the file (and runs without the archive, as
before, when it does not match). The JVM writes an archive's header last, so a partial file whose
first four bytes are the archive magic is complete: a writer killed before it renamed its file
leaves a complete partial that the next writer renames, or an incomplete one that it deletes.
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from filelock import FileLock, Timeout

ARCHIVE_SUFFIX = ".jsa"
PARTIAL_SUFFIX = ".partial"
# The first four bytes of a CDS archive: the little-endian magic 0xf00baba8 of a dynamic archive
# (0xf00baba2 of a static one), written with the rest of the header when the archive is done.
ARCHIVE_MAGICS = (b"\xa8\xab\x0b\xf0", b"\xa2\xab\x0b\xf0")
# The setting that turns the archive off for one environment (for example a read-only home).
OFF_SWITCH = "STREAMSQL_CLASS_ARCHIVE"
OFF_VALUES = ("off", "0", "false", "no")
# A partial file without a magic this old belongs to a JVM that died while writing it.
ABANDONED_AFTER_S = 600
# Archives of other JVMs or jar sets kept besides the current one (each is 200-300 MB).
ARCHIVES_KEPT = 2
WAIT_FOR_DUMP_S = 300


def java_binary(environ: Dict[str, str]) -> Optional[str]:
    """The `java` that Spark's launcher runs: JAVA_HOME's, else the first on PATH."""
    java_home = environ.get("JAVA_HOME")
    if java_home and os.path.exists(os.path.join(java_home, "bin", "java")):
        return os.path.realpath(os.path.join(java_home, "bin", "java"))
    found = shutil.which("java", path=environ.get("PATH"))
    return os.path.realpath(found) if found else None


def archive_key(java: str, spark_home: str, conf: Dict[str, str]) -> str:
    """A digest of what an archive is valid for: the JVM build and the class path (Spark's jars
    and the profile's `spark.driver.extraClassPath`). Classes of `spark.jars` (Delta's) come
    through Spark's own class loader: the JVM checks each against its class file as it loads it,
    so a new Delta jar needs no new archive."""
    digest = hashlib.sha256()
    digest.update(java.encode())
    release = os.path.join(os.path.dirname(os.path.dirname(java)), "release")
    for path in (java, release):
        try:
            stat = os.stat(path)
            digest.update(f"{path}:{stat.st_size}:{stat.st_mtime_ns}".encode())
        except OSError:
            digest.update(f"{path}:absent".encode())
    for jar in sorted(glob.glob(os.path.join(spark_home, "jars", "*"))):
        stat = os.stat(jar)
        digest.update(f"{os.path.basename(jar)}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    digest.update(f"classpath={conf.get('spark.driver.extraClassPath', '')}".encode())
    return digest.hexdigest()[:16]


def is_complete(path: str) -> bool:
    """Whether the archive file at `path` was written to its end (its header is written last)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(4) in ARCHIVE_MAGICS
    except OSError:
        return False


@dataclass
class ArchiveWriter:
    """This process's claim to write the archive: the lock, the JVM's partial file, the name."""

    lock: FileLock
    partial: str
    archive: str

    def finish(self, jvm: "subprocess.Popen[bytes]") -> str:
        """Let the JVM exit (it writes the partial file as it does), wait for it, and rename a
        complete partial to the archive. Returns what was done, for the log."""
        try:
            if jvm.stdin is not None:
                jvm.stdin.close()  # PySpark's JVM exits when its standard input ends
            jvm.wait(timeout=WAIT_FOR_DUMP_S)
        except (OSError, subprocess.TimeoutExpired) as error:
            # still writing: a later writer adopts the file once it is complete
            self.lock.release()
            return f"Java's class archive was not finished ({error}); a later start retries"
        try:
            if not is_complete(self.partial):
                discard(self.partial)
                return "Java's class archive was not written (the JVM ended before it was done)"
            os.replace(self.partial, self.archive)
            prune(os.path.dirname(self.archive), keep=self.archive)
            return f"Wrote Java's class archive {self.archive}: later Spark starts map it"
        finally:
            self.lock.release()


def discard(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def used(archive: str) -> None:
    """Mark the archive as just used (its modification time), so that `prune` keeps it."""
    try:
        os.utime(archive)
    except OSError:  # a read-only cache: the archive is still mapped
        pass


def prune(folder: str, keep: str) -> None:
    """Delete all but the ARCHIVES_KEPT most recently used archives besides `keep`."""
    others = [p for p in glob.glob(os.path.join(folder, "*" + ARCHIVE_SUFFIX)) if p != keep]
    others.sort(key=lambda p: os.stat(p).st_mtime, reverse=True)
    for stale in others[ARCHIVES_KEPT:]:
        discard(stale)


def adopt_partials(folder: str, key: str, archive: str, now: float) -> bool:
    """Rename a complete partial of `key` (its writer died before renaming it) to the archive
    and delete abandoned ones; whether the archive exists now. Only the lock holder calls this."""
    for partial in glob.glob(os.path.join(folder, f"{key}.*{PARTIAL_SUFFIX}")):
        if not os.path.exists(archive) and is_complete(partial):
            os.replace(partial, archive)
            continue
        try:
            age = now - os.stat(partial).st_mtime
        except OSError:
            continue
        if os.path.exists(archive) or age > ABANDONED_AFTER_S:
            discard(partial)
    return os.path.exists(archive)


def archive_path(
    folder: str, conf: Dict[str, str], environ: Dict[str, str], spark_home: str
) -> Optional[str]:
    """Where the archive for a JVM started with `conf` is (or would be) kept; None where the
    archive is off: OFF_SWITCH says `off`, no `java` is found, or on Windows, where PySpark's
    child is a script rather than the JVM, so this process cannot wait for the JVM's exit."""
    if os.name == "nt" or environ.get(OFF_SWITCH, "").strip().lower() in OFF_VALUES:
        return None
    java = java_binary(environ)
    if java is None:
        return None
    return os.path.join(folder, archive_key(java, spark_home, conf) + ARCHIVE_SUFFIX)


def java_options(
    folder: str, conf: Dict[str, str], environ: Dict[str, str], spark_home: str
) -> Tuple[List[str], Optional[ArchiveWriter]]:
    """The JVM options for the class archive in `folder`, and this process's claim when the new
    JVM is to write it. No options where the archive is off (`archive_path`) or where another
    process is writing it now."""
    archive = archive_path(folder, conf, environ, spark_home)
    if archive is None:
        return [], None
    key = os.path.basename(archive)[: -len(ARCHIVE_SUFFIX)]
    if os.path.exists(archive):
        used(archive)
        return [f"-XX:SharedArchiveFile={archive}"], None
    try:
        os.makedirs(folder, exist_ok=True)
        lock = FileLock(os.path.join(folder, key + ".lock"), thread_local=False)
        lock.acquire(blocking=False)
    except (OSError, Timeout):  # another process writes it, or the cache cannot be written
        return [], None
    if adopt_partials(folder, key, archive, time.time()):
        lock.release()
        return [f"-XX:SharedArchiveFile={archive}"], None
    partial = os.path.join(folder, f"{key}.{os.getpid()}{PARTIAL_SUFFIX}")
    return [f"-XX:ArchiveClassesAtExit={partial}"], ArchiveWriter(lock, partial, archive)
