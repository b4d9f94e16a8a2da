"""Where the adapter's Delta log store goes in the session's settings, and what happens without a
compiler. (That it compiles, loads and lists as Delta's store does: tests/functional/
test_log_store.py.)"""

from __future__ import annotations

import os
import stat

import pytest

from dbt.adapters.streamsql.spark import embedded_spark, log_store

JAR = "/cache/dbt-streamsql/streamsql-log-store-0123456789ab.jar"


@pytest.fixture
def compiled(monkeypatch):
    monkeypatch.setattr(log_store, "store_jar", lambda: JAR)


def test_the_store_rides_beside_deltas_jars_for_file_tables(compiled):
    conf = {"spark.jars": "file:///ivy/delta-spark.jar,file:///ivy/delta-storage.jar"}
    added = log_store.with_log_store(conf, {})
    assert added["spark.jars"] == conf["spark.jars"] + f",file://{JAR}"
    assert added["spark.delta.logStore.file.impl"] == "io.streamsql.ListFromLogStore"
    assert added["spark.delta.logStore.s3a.impl"] == "io.streamsql.ListFromS3SingleDriverLogStore"
    # a first start, where Ivy resolves Delta: the store is the only file named
    first = log_store.with_log_store({"spark.jars.packages": "io.delta:delta-spark_4.2_2.13:4"}, {})
    assert first["spark.jars"] == f"file://{JAR}"


@pytest.mark.parametrize(
    "own, kept",
    [
        ("spark.delta.logStore.class", set()),
        ("spark.delta.logStore.file.impl", {"spark.delta.logStore.s3a.impl"}),
        ("spark.delta.logStore.s3a.impl", {"spark.delta.logStore.file.impl"}),
        ("spark.delta.logStore.s3.impl", {"spark.delta.logStore.file.impl"}),
    ],
)
def test_a_profile_that_names_a_log_store_keeps_it(compiled, own, kept):
    """A store the profile names for a scheme (or for all: `.class`) is kept; the adapter's
    store for the other scheme is still added."""
    mine = {own: "io.delta.storage.S3DynamoDBLogStore"}
    conf = {"spark.jars": "file:///ivy/delta-spark.jar", **mine}
    added = log_store.with_log_store(conf, mine)
    assert added[own] == mine[own]
    stores = {"spark.delta.logStore.file.impl", "spark.delta.logStore.s3a.impl"}
    assert {key for key in stores if key in added and key != own} == kept
    if not kept:
        assert added == conf


def test_the_remembered_delta_jars_leave_the_store_out(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    delta = tmp_path / "delta-spark.jar"
    storage = tmp_path / "delta-storage.jar"
    for jar in (delta, storage):
        jar.write_bytes(b"jar")
    # as Spark's conf reads after a first start with the store in spark.jars: Ivy's jars are in
    # spark.repl.local.jars only (test_log_store.py, functional, starts one for real)
    conf = {
        "spark.jars": f"file://{JAR}",
        "spark.repl.local.jars": f"file://{JAR},file://{delta},file://{storage}",
    }

    class Session:
        class sparkContext:
            @staticmethod
            def getConf():
                return conf

    coordinate = embedded_spark.delta_maven_coordinate()
    embedded_spark.remember_jars(coordinate, Session)
    assert embedded_spark.cached_jars(coordinate) == f"file://{delta},file://{storage}"
    # a start without the store: Spark put Ivy's jars in spark.jars as well
    conf = {"spark.jars": f"file://{delta}", "spark.repl.local.jars": f"file://{delta}"}
    embedded_spark.remember_jars(coordinate, Session)
    assert embedded_spark.cached_jars(coordinate) == f"file://{delta}"


class Lines:
    """What the module logs (dbt routes its adapter logger elsewhere once a dbt run set up its
    event manager in this process, so pytest's caplog sees nothing then)."""

    def __init__(self) -> None:
        self.said: list = []

    def info(self, message: str) -> None:
        self.said.append(message)

    debug = info

    @property
    def text(self) -> str:
        return "\n".join(self.said)


def no_compiler(monkeypatch, tmp_path, java_home=None) -> Lines:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("JAVA_HOME", java_home or str(tmp_path / "no-jdk"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setattr(log_store, "_reported", False)
    lines = Lines()
    monkeypatch.setattr(log_store, "logger", lines)
    return lines


def test_without_a_compiler_deltas_store_is_used_and_a_line_says_why(tmp_path, monkeypatch):
    lines = no_compiler(monkeypatch, tmp_path)
    conf = {"spark.jars": "file:///ivy/delta-spark.jar"}
    assert log_store.store_jar() is None
    assert log_store.with_log_store(conf, {}) == conf
    said = lines.text
    assert "Delta's own log store is in use: no Java compiler (javac)" in said
    assert said.count("Delta's own log store") == 1  # once a process


def test_a_failed_compile_is_remembered_not_tried_at_every_start(tmp_path, monkeypatch):
    jdk = tmp_path / "jdk"
    (jdk / "bin").mkdir(parents=True)
    calls = tmp_path / "calls"
    javac = jdk / "bin" / "javac"
    javac.write_text(f"#!/bin/sh\necho run >> {calls}\necho 'error: no space left' >&2\nexit 1\n")
    javac.chmod(javac.stat().st_mode | stat.S_IXUSR)
    lines = no_compiler(monkeypatch, tmp_path, java_home=str(jdk))
    assert log_store.store_jar() is None
    assert log_store.store_jar() is None
    assert calls.read_text().count("run") == 1
    failed = log_store.jar_path() + ".failed"
    assert os.path.isfile(failed) and "no space left" in open(failed).read()
    assert "javac failed: error: no space left" in lines.text
    os.unlink(failed)  # as the line says: deleting it tries again
    assert log_store.store_jar() is None and calls.read_text().count("run") == 2
