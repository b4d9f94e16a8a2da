"""Which class-archive option a new Spark JVM gets, and how a written archive is promoted."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from filelock import FileLock

from dbt.adapters.streamsql.spark import class_archive as archives

MAGIC = archives.ARCHIVE_MAGICS[0]


@pytest.fixture
def machine(tmp_path):
    """A JAVA_HOME and a SPARK_HOME with two jars, and the archive folder."""
    java_home = tmp_path / "jdk"
    (java_home / "bin").mkdir(parents=True)
    (java_home / "bin" / "java").write_text("")
    (java_home / "release").write_text('JAVA_VERSION="17.0.15"\n')
    spark_home = tmp_path / "spark"
    (spark_home / "jars").mkdir(parents=True)
    for jar in ("spark-core.jar", "spark-sql.jar"):
        (spark_home / "jars" / jar).write_text(jar)
    return {
        "environ": {"JAVA_HOME": str(java_home), "PATH": ""},
        "spark_home": str(spark_home),
        "folder": str(tmp_path / "class-archive"),
    }


def options(machine, conf=None, environ=None):
    return archives.java_options(
        machine["folder"], conf or {}, environ or machine["environ"], machine["spark_home"]
    )


def archive_of(machine, conf=None):
    return archives.archive_path(
        machine["folder"], conf or {}, machine["environ"], machine["spark_home"]
    )


def test_the_key_follows_the_jvm_and_the_class_path(machine):
    key = os.path.basename(archive_of(machine))
    assert os.path.basename(archive_of(machine)) == key  # stable
    assert os.path.basename(archive_of(machine, {"spark.driver.memory": "2g"})) == key
    assert os.path.basename(archive_of(machine, {"spark.driver.extraClassPath": "/x.jar"})) != key
    with open(os.path.join(machine["spark_home"], "jars", "spark-core.jar"), "a") as jar:
        jar.write("a new build")
    assert os.path.basename(archive_of(machine)) != key
    os.replace(
        os.path.join(machine["spark_home"], "jars", "spark-core.jar"),
        os.path.join(machine["spark_home"], "jars", "spark-core-2.jar"),
    )
    assert os.path.basename(archive_of(machine)) != key


def test_no_archive_yet_the_jvm_writes_one_and_others_meanwhile_run_without(machine):
    flags, writer = options(machine)
    assert writer is not None
    assert flags == [f"-XX:ArchiveClassesAtExit={writer.partial}"]
    assert writer.partial.endswith(f".{os.getpid()}{archives.PARTIAL_SUFFIX}")
    assert writer.archive == archive_of(machine)
    # a second claim, as another process's, finds the lock held: no option at all
    assert options(machine) == ([], None)
    writer.lock.release()


def test_an_existing_archive_is_mapped_and_marked_used(machine):
    archive = archive_of(machine)
    os.makedirs(machine["folder"])
    write_partial(archive, complete=True, age_s=3600)
    assert options(machine) == ([f"-XX:SharedArchiveFile={archive}"], None)
    assert time.time() - os.stat(archive).st_mtime < 60  # prune keeps the archives in use


def test_the_off_switch_and_a_machine_without_java(machine):
    for value in ("off", "0", "false", "NO"):
        environ = {**machine["environ"], archives.OFF_SWITCH: value}
        assert options(machine, environ=environ) == ([], None)
    assert options(machine, environ={"PATH": ""}) == ([], None)


def write_partial(path, complete, age_s=0.0):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write((MAGIC if complete else b"\0\0\0\0") + b"\0" * 64)
    then = time.time() - age_s
    os.utime(path, (then, then))


def test_a_dead_writers_complete_partial_becomes_the_archive(machine):
    archive = archive_of(machine)
    key = os.path.basename(archive)[: -len(archives.ARCHIVE_SUFFIX)]
    partial = os.path.join(machine["folder"], f"{key}.12345{archives.PARTIAL_SUFFIX}")
    write_partial(partial, complete=True)
    assert options(machine) == ([f"-XX:SharedArchiveFile={archive}"], None)
    assert archives.is_complete(archive) and not os.path.exists(partial)
    # the claim was released: nothing holds the lock
    FileLock(os.path.join(machine["folder"], key + ".lock")).acquire(blocking=False)


def test_incomplete_partials_go_once_abandoned(machine):
    archive = archive_of(machine)
    key = os.path.basename(archive)[: -len(archives.ARCHIVE_SUFFIX)]
    young = os.path.join(machine["folder"], f"{key}.1{archives.PARTIAL_SUFFIX}")
    old = os.path.join(machine["folder"], f"{key}.2{archives.PARTIAL_SUFFIX}")
    write_partial(young, complete=False)
    write_partial(old, complete=False, age_s=archives.ABANDONED_AFTER_S + 60)
    flags, writer = options(machine)
    assert writer is not None and flags == [f"-XX:ArchiveClassesAtExit={writer.partial}"]
    assert os.path.exists(young) and not os.path.exists(old)
    writer.lock.release()


def jvm_like(partial, content):
    """A child that, like PySpark's JVM, ends when its standard input does, and writes
    `content` to `partial` as it ends."""
    script = (
        "import sys; sys.stdin.read(); "
        f"open({partial!r}, 'wb').write({content!r}) if {content!r} else None"
    )
    return subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE)


def test_finish_renames_a_complete_archive_and_prunes_old_ones(machine):
    os.makedirs(machine["folder"])
    for age, name in enumerate(["old1", "old2", "old3"]):
        write_partial(os.path.join(machine["folder"], name + ".jsa"), True, age_s=100 * age)
    flags, writer = options(machine)
    said = writer.finish(jvm_like(writer.partial, MAGIC + b"\0" * 64))
    assert said.startswith("Wrote Java's class archive")
    assert archives.is_complete(writer.archive) and not os.path.exists(writer.partial)
    kept = sorted(name for name in os.listdir(machine["folder"]) if name.endswith(".jsa"))
    assert kept == sorted(["old1.jsa", "old2.jsa", os.path.basename(writer.archive)])
    assert options(machine) == ([f"-XX:SharedArchiveFile={writer.archive}"], None)


@pytest.mark.parametrize("content", [b"\0" * 68, b""])
def test_finish_discards_what_the_jvm_did_not_write_to_its_end(machine, content):
    flags, writer = options(machine)
    said = writer.finish(jvm_like(writer.partial, content))
    assert "not written" in said
    assert not os.path.exists(writer.partial) and not os.path.exists(writer.archive)
    flags, again = options(machine)  # the claim is free again: the next JVM writes
    assert again is not None
    again.lock.release()
