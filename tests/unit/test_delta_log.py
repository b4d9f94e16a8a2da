"""Commit infos read as row counts, names, and the SQL reader's answers (execution/delta_log.py).

The JVM reader is checked against the SQL reader on real tables in
tests/functional/test_delta_log.py; here, without Spark, what a commit info is taken to say.
"""

import json
from types import SimpleNamespace

import pytest

from dbt.adapters.streamsql.execution.engine.delta_files import FileDeltaLog
from dbt.adapters.streamsql.execution.engine.delta_log import (
    Commit,
    NotDeltaTable,
    SqlDeltaLog,
    TableMissing,
    name_parts,
)
from dbt.adapters.streamsql.execution.engine.sql_session import AdapterSqlSession
from dbt.adapters.streamsql.planning.plan import Column
from tests.unit.fake_sql_session import FakeSqlSession


@pytest.mark.parametrize(
    "commit, rows",
    [
        (Commit(1, "WRITE", {"mode": "Append"}, {"numOutputRows": "7"}), (7, 0)),
        (Commit(1, "STREAMING UPDATE", {"outputMode": "Append"}, {"numOutputRows": "2"}), (2, 0)),
        (Commit(1, "WRITE", {"mode": "Overwrite"}, {"numOutputRows": "7"}), None),
        (Commit(1, "WRITE", {"mode": "Append"}, {}), None),  # no metrics: cannot tell
        (Commit(1, "DELETE", {}, {"numDeletedRows": "3"}), (3, 3)),
        (Commit(1, "DELETE", {}, {"numRemovedFiles": "2"}), None),  # a whole-file delete
        (Commit(1, "UPDATE", {}, {"numUpdatedRows": "2"}), (4, 2)),  # old and new rows
        (
            Commit(
                1,
                "MERGE",
                {},
                {
                    "numTargetRowsInserted": "5",
                    "numTargetRowsUpdated": "1",
                    "numTargetRowsDeleted": "2",
                },
            ),
            (9, 3),
        ),
        (Commit(1, "MERGE", {}, {"numTargetRowsInserted": "5"}), None),
        (Commit(1, "OPTIMIZE", {}, {"numAddedFiles": "1"}), (0, 0)),
        (Commit(1, "SET TBLPROPERTIES"), (0, 0)),
        (Commit(1, "RESTORE", {}, {"numRestoredFiles": "1"}), None),
        (Commit(1, "CREATE OR REPLACE TABLE AS SELECT", {}, {"numOutputRows": "1"}), None),
    ],
)
def test_change_rows_are_only_what_the_commit_info_says_for_certain(commit, rows):
    assert commit.change_rows == rows


def test_names_split_on_dots_outside_backquotes():
    assert name_parts("demo.events") == ("demo", "events")
    assert name_parts("`demo`.`ev.ents`") == ("demo", "ev.ents")
    assert name_parts("spark_catalog.demo.events") == ("demo", "events")
    with pytest.raises(ValueError):
        name_parts("events")


def test_the_sql_reader_reads_thrift_style_maps_and_json_values():
    session = FakeSqlSession()
    session.create_source("demo.src", [("id", "bigint")])
    session.append_to("demo.src", rows=4)
    table = session.tables["demo.src"]
    table.history[-1]["operationParameters"] = '{"mode":"Append","partitionBy":"[]"}'
    table.history[-1]["operationMetrics"] = '{"numOutputRows":"4"}'
    (commit,) = SqlDeltaLog(session).commits("demo.src", 1, 1)
    assert (commit.parameters["mode"], commit.change_rows) == ("Append", (4, 0))


def test_the_sql_reader_names_missing_tables():
    with pytest.raises(TableMissing):
        SqlDeltaLog(FakeSqlSession()).snapshot("demo.nothing")


def test_the_sql_reader_names_tables_that_are_not_delta():
    session = FakeSqlSession()
    session.fail_on = ("DESCRIBE HISTORY", "[DELTA_MISSING_DELTA_TABLE] demo.p is not Delta")
    with pytest.raises(NotDeltaTable):
        SqlDeltaLog(session).version("demo.p")


def delta_table_files(root, version: int = 0) -> str:
    """A Delta table's log on disk, as far as the file reader reads it: a commit and the
    checksum file of `version`."""
    log = root / "_delta_log"
    log.mkdir(parents=True)
    schema = '{"type":"struct","fields":[{"name":"id","type":"long","nullable":true}]}'
    (log / f"{version:020d}.json").write_text(
        json.dumps({"commitInfo": {"operation": "WRITE", "operationMetrics": {}}}) + "\n"
    )
    (log / f"{version:020d}.crc").write_text(
        json.dumps(
            {
                "tableSizeBytes": 123,
                "metadata": {"id": "table-1", "schemaString": schema, "configuration": {}},
            }
        )
    )
    return f"file:{root}"


def test_the_file_reader_takes_a_location_from_dbts_cache_without_a_statement(tmp_path):
    session = FakeSqlSession()
    cached = {"demo.t": delta_table_files(tmp_path / "t")}
    reader = FileDeltaLog(SqlDeltaLog(session), "run-1", cached.get)
    assert reader.exists("demo.t")
    snapshot = reader.snapshot("demo.t")
    assert (snapshot.version, snapshot.size_bytes, snapshot.columns) == (
        0,
        123,
        (Column("id", "bigint"),),
    )
    assert session.statements == []  # neither SHOW TABLES nor DESCRIBE DETAIL


def test_a_cached_location_whose_log_is_gone_is_asked_of_the_catalog(tmp_path):
    session = FakeSqlSession()
    session.create_source("demo.t", [("id", "bigint")])
    cached = {"demo.t": f"file:{tmp_path / 'dropped'}"}  # the table was dropped since
    reader = FileDeltaLog(SqlDeltaLog(session), "run-2", cached.get)
    assert reader.exists("demo.t")
    assert session.statements == ["SHOW TABLES IN `demo` LIKE 't'"]


def test_the_file_reader_asks_the_metastore_where_a_table_dbt_did_not_list_is(tmp_path):
    """A source outside the schemas dbt lists: one SHOW TABLE EXTENDED, which reads the
    metastore only (DESCRIBE DETAIL would rebuild the table's file list to give its size)."""
    session = FakeSqlSession()
    session.create_source("demo.src", [("id", "bigint")])
    session.tables["demo.src"].location = delta_table_files(tmp_path / "src")
    reader = FileDeltaLog(SqlDeltaLog(session), "run-3")
    assert reader.snapshot("demo.src").version == 0
    assert reader.version("demo.src") == 0
    assert session.statements == ["SHOW TABLE EXTENDED IN `demo` LIKE 'src'"]


@pytest.mark.parametrize("provider, name", [("parquet", "demo.p"), ("delta", "demo.`odd-name`")])
def test_the_file_reader_asks_describe_detail_what_the_metastore_does_not_say(
    tmp_path, provider, name
):
    """Not shown as Delta, or a name SHOW TABLE EXTENDED's pattern cannot match as itself:
    DESCRIBE DETAIL, whose answer (or error) says what the table is."""
    session = FakeSqlSession()
    session.create_source(name, [("id", "bigint")])
    table = next(iter(session.tables.values()))
    table.provider, table.location = provider, delta_table_files(tmp_path / "t")
    reader = FileDeltaLog(SqlDeltaLog(session), f"run-4-{provider}")
    if provider == "delta":
        assert reader.version(name) == 0
        assert [s.split(" ")[0:2] for s in session.statements] == [["DESCRIBE", "DETAIL"]]
    else:
        with pytest.raises(NotDeltaTable):
            reader.version(name)
        assert session.statements[0].startswith("SHOW TABLE EXTENDED IN `demo` LIKE 'p'")


def test_the_location_of_a_delta_table_in_dbts_relation_cache():
    information = (
        "Catalog: spark_catalog\nDatabase: demo\nTable: m\nType: MANAGED\nProvider: delta\n"
        "Location: file:/w/tables/demo.db/m\nSerde Library: x\n"
    )
    relations = [
        SimpleNamespace(identifier="M", information=information),
        SimpleNamespace(identifier="v", information="Type: VIEW\nProvider: parquet\n"),
    ]
    cache = SimpleNamespace(
        get_relations=lambda database, schema: relations if schema == "demo" else []
    )
    session = AdapterSqlSession(SimpleNamespace(cache=cache))
    assert session.known_location("demo.m") == "file:/w/tables/demo.db/m"
    assert session.known_location("`demo`.`m`") == "file:/w/tables/demo.db/m"
    assert session.known_location("demo.v") is None  # not a Delta table
    assert session.known_location("demo.other") is None
    assert session.known_location("other.m") is None


def test_the_file_reader_steps_aside_to_sql_for_a_table_on_an_object_store():
    """The warm server's reader reads `_delta_log` files on this machine only: a table on
    s3a:// is asked through SQL, and the step aside is said (once per process and scheme)."""
    from dbt.adapters.streamsql.execution.engine import delta_log

    delta_log._NOTED.clear()
    session = FakeSqlSession()
    session.create_source("demo.t", [("id", "bigint")])
    cached = {"demo.t": "s3a://lake/wh/tables/demo.db/t"}
    notes = []
    real_info = delta_log.logger.info
    delta_log.logger.info = notes.append
    try:
        reader = FileDeltaLog(SqlDeltaLog(session), "run-object-store", cached.get)
        assert reader.version("demo.t") == SqlDeltaLog(session).version("demo.t")
        reader.version("demo.t")
    finally:
        delta_log.logger.info = real_info
    assert any(s.startswith("DESCRIBE HISTORY") for s in session.statements)
    assert len(notes) == 1 and "Tables on s3a:// (first: demo.t)" in notes[0], notes
    assert "through SQL" in notes[0]
