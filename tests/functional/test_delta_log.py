"""Delta's log read without statements says what SQL says, and commits' row counts match their
change feed.

The embedded session answers a step's catalog questions without statements (execution/engine):
`JvmDeltaLog` asks the driver's JVM what the catalog knows and reads the log's files for the rest,
with Delta's snapshot in the JVM (`JvmSnapshotLog`) behind it; a Thrift connection asks through
SQL (`SqlDeltaLog`). All must give the same answers on real tables, and each must answer by
itself (a silent fall back would only show as lost speed, or as a cost that grows with the log).
"""

from __future__ import annotations

from typing import Any, Dict, List

import pytest

from dbt.adapters.streamsql.execution.engine import delta_files, delta_log
from dbt.adapters.streamsql.execution.engine.delta_files import FileDeltaLog, JvmDeltaLog
from dbt.adapters.streamsql.execution.engine.delta_log import (
    NotDeltaTable,
    SqlDeltaLog,
    TableMissing,
)
from dbt.adapters.streamsql.spark.embedded_spark import SessionSettings, get_spark_session

SCHEMA = "delta_log_test"


class SparkSqlSession:
    """Just enough of a SqlSession for SqlDeltaLog: rows of a statement as dicts."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark

    def query(self, statement: str) -> List[Dict[str, Any]]:
        return [row.asDict() for row in self.spark.sql(statement).collect()]


@pytest.fixture(scope="module")
def spark(warehouse_dir):
    return get_spark_session(SessionSettings(warehouse_dir, "local[2]", {}, 60))


class OnlyLocations(SqlDeltaLog):
    """The file reader's fallback, refusing every question but the catalog's (exists, and the
    location it reads from a session query): a silent fall back would only show as lost speed."""

    def _refuse(self, *args: Any) -> Any:
        raise AssertionError(f"the file reader fell back to SQL: {args}")

    version = snapshot = commits = recent_commits = _refuse


class Refuses:
    """A reader's fallback that must not be asked (a Delta table's questions)."""

    def __getattr__(self, question: str) -> Any:
        def refuse(*args: Any) -> Any:
            raise AssertionError(f"the reader fell back for {question}{args}")

        return refuse


@pytest.fixture(scope="module")
def readers(spark):
    """The embedded session's reader, whose Delta snapshot in the JVM must not fall back to SQL,
    and the SQL reader."""
    sql_reader = SqlDeltaLog(SparkSqlSession(spark))
    jvm_reader = JvmDeltaLog(spark, sql_reader)

    def no_fall_back(question, error, ask):
        raise AssertionError(f"the JVM reader fell back to SQL for {question}: {error}")

    jvm_reader.jvm._fall_back = no_fall_back
    return jvm_reader, sql_reader


@pytest.fixture(scope="module")
def files_only(spark, readers):
    """The embedded session's reader that must read a Delta table's files: its fallback (Delta's
    snapshot, whose update lists the whole log) refuses."""
    reader = JvmDeltaLog(spark, readers[1])
    reader.jvm._fall_back = readers[0].jvm._fall_back
    reader.fallback = Refuses()
    return reader


@pytest.fixture(scope="module")
def file_reader(spark):
    """What the warm server's clients read: the log's files on this machine."""
    return FileDeltaLog(OnlyLocations(SparkSqlSession(spark)), "test_delta_log")


@pytest.fixture(scope="module")
def table(spark):
    name = f"{SCHEMA}.events"
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
    spark.sql(f"DROP TABLE IF EXISTS {name}")
    spark.sql(f"""CREATE TABLE {name} (id BIGINT, price DECIMAL(10,2), at TIMESTAMP, day DATE,
                  tags ARRAY<STRING>, span STRUCT<start: TIMESTAMP, `end`: TIMESTAMP>,
                  attrs MAP<STRING, INT>, part STRING)
                  USING delta PARTITIONED BY (part)
                  TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')""")
    spark.sql(f"""INSERT INTO {name} SELECT id, CAST(id AS DECIMAL(10,2)), TIMESTAMP'2024-01-01',
                  DATE'2024-01-01', array('a'), named_struct('start', TIMESTAMP'2024-01-01',
                  'end', TIMESTAMP'2024-01-02'), map('k', 1), CAST(id % 2 AS STRING)
                  FROM range(10)""")
    spark.sql(f"""MERGE INTO {name} t USING (SELECT id FROM range(8, 13)) s ON t.id = s.id
                  WHEN MATCHED AND t.id = 8 THEN DELETE
                  WHEN MATCHED THEN UPDATE SET price = price + 1
                  WHEN NOT MATCHED THEN INSERT (id, part) VALUES (s.id, 'x')""")
    spark.sql(f"DELETE FROM {name} WHERE id < 3")
    spark.sql(f"UPDATE {name} SET price = 0 WHERE id IN (3, 4)")
    spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('note' = 'a')")
    spark.sql(f"INSERT INTO {name} (id, part) VALUES (100, 'y')")
    return name


def test_snapshots_agree(readers, files_only, file_reader, table):
    jvm, sql = readers
    from_jvm, from_sql = jvm.jvm.snapshot(table), sql.snapshot(table)
    assert from_jvm == from_sql  # the size from the version's checksum file included
    assert files_only.snapshot(table) == from_sql
    assert file_reader.snapshot(table) == from_sql
    assert file_reader.version(table) == from_sql.version
    assert from_jvm.version == 6 and from_jvm.table_id and from_jvm.size_bytes
    assert from_jvm.properties["delta.enableChangeDataFeed"] == "true"
    assert [c.data_type for c in from_jvm.columns] == [
        "bigint",
        "decimal(10,2)",
        "timestamp",
        "date",
        "array<string>",
        "struct<start:timestamp,end:timestamp>",
        "map<string,int>",
        "string",
    ]


def test_commits_agree_and_count_their_change_feed(spark, readers, files_only, file_reader, table):
    jvm, sql = readers
    from_jvm, from_sql = jvm.jvm.commits(table, 1, 6), sql.commits(table, 1, 6)
    for reader in (files_only, file_reader):
        assert reader.commits(table, 1, 6) == from_jvm
        assert reader.recent_commits(table, 3) == jvm.jvm.recent_commits(table, 3)
    assert [c.version for c in from_jvm] == [1, 2, 3, 4, 5, 6]
    for a, b in zip(from_jvm, from_sql):
        assert (a.operation, dict(a.parameters), dict(a.metrics), a.user_metadata) == (
            b.operation,
            dict(b.parameters),
            dict(b.metrics),
            b.user_metadata,
        ), a.version
        # The commit info's clock and the log file's modification time name one instant.
        assert a.timestamp is not None and abs(a.timestamp - b.timestamp) < 2.0, a.version
    assert jvm.jvm.recent_commits(table, 2) == sql.recent_commits(table, 2)
    for commit in from_jvm:
        rows = spark.sql(
            f"SELECT count(*) AS n, count_if(_change_type IN ('delete', 'update_preimage')) AS r "
            f"FROM table_changes('{table}', {commit.version}, {commit.version})"
        ).collect()[0]
        assert commit.change_rows == (rows["n"], rows["r"]), (commit.operation, commit.metrics)


def test_what_is_not_a_delta_table_or_not_there(spark, readers, file_reader):
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
    spark.sql(f"CREATE TABLE IF NOT EXISTS {SCHEMA}.plain (a INT) USING parquet")
    spark.sql(f"CREATE OR REPLACE VIEW {SCHEMA}.a_view AS SELECT 1 AS a")
    for reader in (*readers, readers[0].jvm, file_reader):
        with pytest.raises(NotDeltaTable):
            reader.snapshot(f"{SCHEMA}.plain")
        for name in ("nothing_here", "a_view"):
            with pytest.raises(TableMissing):
                reader.snapshot(f"{SCHEMA}.{name}")
        assert reader.exists(f"{SCHEMA}.plain") and not reader.exists(f"{SCHEMA}.nothing_here")


def test_names_may_be_quoted(readers, table):
    jvm, _ = readers
    schema, name = table.split(".")
    assert jvm.version(f"`{schema}`.`{name}`") == jvm.version(table)
    assert delta_log.name_parts("`a.b`.`c``d`") == ("a.b", "c`d")


def test_a_long_log_is_read_from_its_last_checkpoint_without_listing_it(
    spark, readers, files_only, monkeypatch
):
    """Delta's snapshot lists a table's whole `_delta_log` on a local file system, a cost that
    grows with the log (30 days of it by default; bench/results/soak_400.md). The embedded
    reader finds the newest version from the last checkpoint on: it answers a table with
    checkpoints without its fallback and without listing the folder, after a table was
    replaced too, and says a table dropped since it read it is missing."""
    name = f"{SCHEMA}.long_log"
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
    spark.sql(f"DROP TABLE IF EXISTS {name}")
    spark.sql(
        f"CREATE TABLE {name} (id BIGINT) USING delta "
        "TBLPROPERTIES ('delta.checkpointInterval' = '3')"
    )
    for batch in range(8):
        spark.sql(f"INSERT INTO {name} VALUES ({batch})")
    _, sql = readers
    with monkeypatch.context() as patched:
        patched.setattr(delta_files.os, "listdir", Refuses().listdir)
        assert files_only.version(name) == sql.version(name) == 8
        assert files_only.snapshot(name) == sql.snapshot(name)
        assert files_only.recent_commits(name, 3) == sql.recent_commits(name, 3)
        assert [c.version for c in files_only.commits(name, 5, 8)] == [5, 6, 7, 8]
        spark.sql(f"CREATE OR REPLACE TABLE {name} (id BIGINT, at DATE) USING delta")
        assert files_only.snapshot(name) == sql.snapshot(name)
        assert files_only.snapshot(name).columns[1].data_type == "date"
    embedded = readers[0]
    assert embedded.version(name) == 9  # its folder now known to this reader
    spark.sql(f"DROP TABLE {name}")  # and its folder removed
    with pytest.raises(TableMissing):
        embedded.version(name)
    assert not embedded.exists(name)
