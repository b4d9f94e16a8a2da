"""Commit infos read as row counts, names, and the SQL reader's answers (execution/delta_log.py).

The JVM reader is checked against the SQL reader on real tables in
tests/functional/test_delta_log.py; here, without Spark, what a commit info is taken to say.
"""

import pytest

from dbt.adapters.streamsql.execution.engine.delta_log import (
    Commit,
    NotDeltaTable,
    SqlDeltaLog,
    TableMissing,
    name_parts,
)
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
