"""method: session fails clearly. (That it works with no settings and keeps tables between
processes: tests/functional/test_warm_server.py, on the default warm server.)"""

import os
import shutil

from tests.dbt_process import DbtProject

MODELS = {
    "numbers.sql": "{{ config(materialized='table') }} select id from range(5) as r(id)",
    "evens.sql": "{{ config(materialized='view') }} select id from {{ ref('numbers') }} "
    "where id % 2 = 0",
}


def test_unknown_method_names_the_field(tmp_path):
    project = DbtProject.create(
        tmp_path / "p", MODELS, target={"type": "streamsql", "schema": "s", "method": "carrier"}
    )
    result = project.dbt("debug")
    assert result.returncode != 0
    assert "carrier" in result.stdout and "method" in result.stdout


def test_missing_schema_is_named(tmp_path):
    project = DbtProject.create(tmp_path / "p", MODELS, target={"type": "streamsql"})
    result = project.dbt("run")
    assert result.returncode != 0
    assert "schema" in result.stdout


def test_missing_java_is_explained(tmp_path):
    project = DbtProject.create(tmp_path / "p", MODELS)
    bin_dir = os.path.dirname(shutil.which("dbt") or os.sys.executable)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "JAVA_HOME": ""}
    env["PATH"] = ":".join(p for p in env["PATH"].split(":") if not os.path.exists(f"{p}/java"))
    result = project.dbt("run", env=env)
    assert result.returncode != 0
    assert "needs Java 17" in result.stdout


def test_unresolvable_delta_jars_are_explained(tmp_path):
    project = DbtProject.create(
        tmp_path / "p",
        MODELS,
        target={
            "type": "streamsql",
            "schema": "s",
            "server_side_parameters": {
                "spark.jars.packages": "io.delta:no-such-artifact_2.13:0.0.0"
            },
        },
    )
    result = project.dbt("run")
    assert result.returncode != 0
    assert "Delta Lake's jars" in result.stdout
    assert "spark.jars" in result.stdout
    # what Spark printed is in the warehouse's log, and the error quotes its end
    log = project.root / "warehouse" / "logs" / "spark.log"
    assert f"The end of its output ({log})" in result.stdout
    assert "no-such-artifact" in log.read_text()


def test_the_jvm_maps_javas_class_archive_or_writes_it(small_spark, warehouse_dir):
    """The test run's JVM (started as a `dbt run`'s is) maps the class archive that
    scripts/warm_jars.py wrote, or, where none was written yet, writes it at its exit."""
    from pyspark import SparkContext

    from dbt.adapters.streamsql.spark.embedded_spark import SessionSettings, class_archive_file
    from tests.conftest import SMALL_DATA_SETTINGS

    jvm = SparkContext._gateway.proc.pid
    with open(f"/proc/{jvm}/cmdline", "rb") as handle:
        arguments = handle.read().decode().split("\0")
    archive = class_archive_file(
        SessionSettings(warehouse_dir, "local[2]", SMALL_DATA_SETTINGS, 600)
    )
    assert archive is not None  # on unless STREAMSQL_CLASS_ARCHIVE=off
    mapped = [a.split("=", 1)[1] for a in arguments if a.startswith("-XX:SharedArchiveFile=")]
    writing = [a.split("=", 1)[1] for a in arguments if a.startswith("-XX:ArchiveClassesAtExit=")]
    assert len(mapped) + len(writing) == 1, arguments
    if mapped:
        assert mapped == [archive]
        with open(f"/proc/{jvm}/maps") as maps:  # the JVM accepted it: its pages are mapped
            assert any(line.endswith(archive) for line in maps.read().splitlines())
    else:
        assert writing[0].startswith(archive[: -len(".jsa")] + ".")
        assert writing[0].endswith(".partial")
