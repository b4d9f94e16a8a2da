"""The adapter's Delta log store (dbt/adapters/streamsql/spark/log_store.py) is in use for `file:`
tables, lists what Delta's own store lists, and leaves time travel, the change feed, OPTIMIZE,
VACUUM and Delta's log cleanup as they are.

The store only replaces how a table's `_delta_log` folder is listed; reads and writes are Delta's
`LocalLogStore`'s own. So the listing is compared with Delta's store file by file, on a log with
checkpoints and checksums, and the operations that list the log are run on top of it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import zipfile
from typing import Any, List, Tuple

import pytest

from dbt.adapters.streamsql.spark import class_archive, log_store
from dbt.adapters.streamsql.spark.embedded_spark import SessionSettings, get_spark_session

pytestmark = pytest.mark.functional

SCHEMA = "log_store_test"
DAY = 24 * 3600


@pytest.fixture(scope="module")
def spark(warehouse_dir):
    session = get_spark_session(SessionSettings(warehouse_dir, "local[2]", {}, 60)).newSession()
    session.sql(f"create schema if not exists {SCHEMA}")
    return session


def table_location(spark: Any, table: str) -> str:
    location = spark.sql(f"describe detail {table}").collect()[0]["location"]
    return location[len("file:") :] if location.startswith("file:") else location


def log_path(spark: Any, folder: str, name: str) -> Any:
    return spark._jvm.org.apache.hadoop.fs.Path(f"file:{folder}/_delta_log/{name}")


def store_of(spark: Any, folder: str) -> Any:
    """The log store Delta itself uses for the table in `folder`."""
    jvm = spark._jvm
    delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, folder)
    adaptor = delta_log.store().getDelegate(log_path(spark, folder, "_last_checkpoint"))
    return adaptor.logStoreImpl()


def listed(store: Any, path: Any, conf: Any) -> List[Tuple[str, int, int, bool]]:
    found = []
    files = store.listFrom(path, conf)
    while files.hasNext():
        status = files.next()
        found.append(
            (
                status.getPath().getName(),
                status.getLen(),
                status.getModificationTime(),
                status.isDirectory(),
            )
        )
    return found


def versions_in_log(folder: str) -> List[int]:
    return sorted(
        int(name[:20])
        for name in os.listdir(os.path.join(folder, "_delta_log"))
        if name.endswith(".json") and name[:20].isdigit()
    )


def test_the_store_compiles_into_a_jar_of_its_own_classes_only(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    jar = log_store.store_jar()
    assert jar is not None and jar.startswith(str(tmp_path)) and log_store.is_store_jar(jar)
    with zipfile.ZipFile(jar) as archive:
        classes = [name for name in archive.namelist() if name.endswith(".class")]
    # the stand-in for Delta's LocalLogStore it compiles against stays out: Delta's jar has it
    assert classes and all(name.startswith("io/streamsql/") for name in classes)
    assert log_store.store_jar() == jar  # compiled once


def test_file_tables_use_the_adapters_store_and_it_lists_as_deltas_does(spark):
    spark.sql(f"""
        create or replace table {SCHEMA}.listing (id int)
        tblproperties (delta.checkpointInterval = 4)
    """)
    for i in range(10):
        spark.sql(f"insert into {SCHEMA}.listing values ({i})")
    folder = table_location(spark, f"{SCHEMA}.listing")
    ours = store_of(spark, folder)
    assert ours.getClass().getName() == log_store.LOG_STORE_CLASS

    conf = spark._jsc.hadoopConfiguration()
    deltas = spark._jvm.io.delta.storage.LocalLogStore(conf)
    names = {name for name in os.listdir(os.path.join(folder, "_delta_log"))}
    # the log has what the listing must get right: checkpoints, checksums, the pointer file
    assert {"00000000000000000008.checkpoint.parquet", "_last_checkpoint"} <= names
    assert "00000000000000000010.crc" in names
    for start in [f"{v:020d}." for v in (0, 5, 8, 10, 11)] + ["_last_checkpoint"]:
        path = log_path(spark, folder, start)
        assert listed(ours, path, conf) == listed(deltas, path, conf), start
    missing = spark._jvm.org.apache.hadoop.fs.Path(f"file:{folder}/no_such_log/{0:020d}.json")
    for store in (ours, deltas):
        with pytest.raises(Exception, match="FileNotFoundException"):
            store.listFrom(missing, conf)


def test_time_travel_change_feed_optimize_vacuum_and_log_cleanup_work_on_it(spark):
    table = f"{SCHEMA}.timeline"
    spark.sql(f"""
        create or replace table {table} (id int) tblproperties (
            delta.enableChangeDataFeed = true,
            delta.checkpointInterval = 3,
            delta.logRetentionDuration = 'interval 1 days',
            delta.deletedFileRetentionDuration = 'interval 1 days'
        )
    """)
    for i in range(1, 7):  # versions 1-6, a file each
        spark.sql(f"insert into {table} values ({i})")
    folder = table_location(spark, table)
    assert store_of(spark, folder).getClass().getName() == log_store.LOG_STORE_CLASS

    # time travel: each version has the rows committed up to it
    for version in range(1, 7):
        rows = spark.sql(f"select count(*) as n from {table} version as of {version}")
        assert rows.collect()[0].n == version

    # OPTIMIZE rewrites the files into one and is no data change: the change feed skips it
    spark.sql(f"optimize {table}")
    assert spark.sql(f"describe detail {table}").collect()[0].numFiles == 1
    optimized = spark.sql(f"describe history {table} limit 1").collect()[0]
    assert optimized.operation == "OPTIMIZE"
    changes = spark.sql(
        f"select id, _change_type, _commit_version from table_changes('{table}', 1) order by id"
    ).collect()
    assert [(r.id, r._change_type, r._commit_version) for r in changes] == [
        (i, "insert", i) for i in range(1, 7)
    ]
    spark.sql(f"delete from {table} where id = 1")
    deleted = spark.sql(
        f"select id, _change_type from table_changes('{table}', {optimized.version + 1})"
    ).collect()
    assert [(r.id, r._change_type) for r in deleted] == [(1, "delete")]

    # VACUUM removes the files no version it keeps needs; the table reads the same
    vacuum = spark.newSession()
    vacuum.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    vacuum.sql(f"vacuum {table} retain 0 hours")
    data_files = [
        name
        for folder_name, _, files in os.walk(folder)
        if "_delta_log" not in folder_name
        for name in files
        if name.endswith(".parquet")
    ]
    assert len(data_files) == spark.sql(f"describe detail {table}").collect()[0].numFiles
    assert sorted(r.id for r in spark.table(table).collect()) == [2, 3, 4, 5, 6]

    # Log cleanup: the log's files of versions 0-6 (checkpoints at 3 and 6) made three days old;
    # the next checkpoint cleans up what the retention of a day no longer needs: all before the
    # checkpoint at 6. (Delta rounds its cutoff down to the day, so only old files show it.)
    log_folder = os.path.join(folder, "_delta_log")
    # (a second apart, in version order: Delta treats equal times as a clock skew to adjust)
    old = time.time() - 3 * DAY
    for name in os.listdir(log_folder):
        if name[:20].isdigit() and int(name[:20]) <= 6:
            stamp = old + int(name[:20])
            os.utime(os.path.join(log_folder, name), (stamp, stamp))
    assert versions_in_log(folder)[0] == 0
    latest = spark.sql(f"describe history {table} limit 1").collect()[0].version
    for i in range(7, 7 + 3 - latest % 3):  # up to and including the next checkpoint's version
        spark.sql(f"insert into {table} values ({i})")
    kept = versions_in_log(folder)
    assert kept[0] == 6, kept
    assert not any(name.startswith(f"{3:020d}.checkpoint") for name in os.listdir(log_folder))
    history = spark.sql(f"describe history {table}").collect()
    assert min(r.version for r in history) == 6
    with pytest.raises(Exception, match="(?i)version|time travel"):
        spark.sql(f"select * from {table} version as of 2").collect()
    expected = list(range(2, 7)) + list(range(7, 7 + 3 - latest % 3))
    assert sorted(r.id for r in spark.table(table).collect()) == expected
    # the change feed of the versions since reads
    since = spark.sql(f"select id from table_changes('{table}', {latest + 1})").collect()
    assert sorted(r.id for r in since) == list(range(7, 7 + 3 - latest % 3))


FIRST_START = """
import sys
from dbt.adapters.streamsql.spark import embedded_spark as e
session = e.get_spark_session(e.SessionSettings(sys.argv[1], "local[1]", {}, 60))
print("remembered:" + (e.cached_jars(e.delta_maven_coordinate()) or ""))
session.stop()
"""


def test_a_first_start_remembers_deltas_jars_beside_the_store(tmp_path):
    """A start with nothing cached asks Ivy for Delta's jars with the store's jar already in
    spark.jars, and lists Ivy's jars (not the store's) so that later starts skip Ivy; it also
    writes Java's class archive. A process of its own: the cache folder is read when a JVM
    starts."""
    done = subprocess.run(
        [sys.executable, "-c", FIRST_START, str(tmp_path / "warehouse")],
        env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("remembered:")]
    jars = [jar for jar in line[len("remembered:") :].split(",") if jar]
    names = [os.path.basename(jar) for jar in jars]
    assert any(name.startswith("io.delta_delta-spark_") for name in names), names
    assert any(name.startswith("io.delta_delta-storage-") for name in names), names
    assert not any(log_store.is_store_jar(jar) for jar in jars), names
    assert os.path.isfile(
        os.path.join(tmp_path / "cache", "dbt-streamsql", os.path.basename(log_store.jar_path()))
    ), "the store was compiled into the new cache folder too"
    # and its JVM wrote Java's class archive as it exited, which the process waited for
    folder = tmp_path / "cache" / "dbt-streamsql" / "class-archive"
    written = sorted(path.name for path in folder.iterdir() if not path.name.endswith(".lock"))
    assert len(written) == 1 and written[0].endswith(".jsa"), written
    assert class_archive.is_complete(str(folder / written[0]))
