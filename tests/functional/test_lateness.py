"""LATENESS (SPEC section 4) on real Spark + Delta: seed 001's reference example and friends."""

import pytest
from dbt.tests.util import run_dbt

SEED_001_ROWS = [
    ("2020-01-01 00:00:00", "home"),
    ("2020-01-01 01:00:00", "office"),
    ("2020-01-01 00:10:00", "shop"),  # late, but not too late
    ("2020-01-01 02:00:00", "home"),
    ("2020-01-01 00:20:00", "friend"),  # too late when the inserts are five steps
]

PICKUPS = """
{{ config(materialized='incremental_view', lateness={'ts': 'INTERVAL 1 HOUR'}) }}
select ts, location from {{ var('source') }}
"""


def _insert(project, table, rows):
    values = ", ".join(f"(timestamp'{ts}', '{loc}')" for ts, loc in rows)
    project.run_sql(f"insert into {table} values {values}")


def _rows(project, sql):
    return [tuple(row) for row in project.run_sql(sql, fetch="all")]


class LatenessProject:
    @pytest.fixture(scope="class")
    def source(self, project):
        table = f"{project.test_schema}.order_pickup"
        project.run_sql(f"create or replace table {table} (ts timestamp, location string)")
        return table

    @pytest.fixture(scope="class")
    def models(self):
        return {"pickups.sql": PICKUPS}

    def step(self, project, source):
        results = run_dbt(["run", "--vars", f"{{source: {source}}}"])
        return results[0].adapter_response


class TestSeed001AsFiveSteps(LatenessProject):
    def test_fifth_row_is_quarantined(self, project, source):
        responses = []
        for row in SEED_001_ROWS:
            _insert(project, source, [row])
            responses.append(self.step(project, source))
        schema = project.test_schema
        applied = _rows(project, f"select location from {schema}.pickups order by ts")
        assert applied == [("home",), ("shop",), ("office",), ("home",)]
        late = _rows(project, f"select location, _streamsql_step, _streamsql_change, "
                     f"_streamsql_column, _streamsql_waterline, _streamsql_reason "
                     f"from {schema}.pickups__late")
        assert late == [("friend", 5, "insert", "ts", "2020-01-01 01:00:00", "late")]
        assert [r["late"] for r in responses] == [0, 0, 0, 0, 1]
        # W(n) = max(W(n-1), max(ts of step n) - 1 hour), one row per step.
        waterlines = _rows(project, f"select step, column_name, waterline, max_seen "
                           f"from {schema}.pickups__waterline order by step")
        assert waterlines == [
            (1, "ts", "2019-12-31 23:00:00", "2020-01-01 00:00:00"),
            (2, "ts", "2020-01-01 00:00:00", "2020-01-01 01:00:00"),
            (3, "ts", "2020-01-01 00:00:00", "2020-01-01 01:00:00"),
            (4, "ts", "2020-01-01 01:00:00", "2020-01-01 02:00:00"),
            (5, "ts", "2020-01-01 01:00:00", "2020-01-01 02:00:00"),
        ]
        assert responses[-1]["waterline"] == {"ts": "2020-01-01 01:00:00"}


class TestSeed001AsOneStep(LatenessProject):
    def test_all_five_rows_are_applied(self, project, source):
        _insert(project, source, SEED_001_ROWS)
        response = self.step(project, source)
        schema = project.test_schema
        assert response["late"] == 0 and response["inserted"] == 5
        assert len(_rows(project, f"select * from {schema}.pickups")) == 5
        assert _rows(project, f"select count(*) from {schema}.pickups__late") == [(0,)]


class TestLateDeletesAndNulls(LatenessProject):
    def test_late_delete_and_null_are_quarantined(self, project, source):
        _insert(project, source, [("2020-01-01 00:00:00", "a"), ("2020-01-01 05:00:00", "b")])
        self.step(project, source)  # waterline 04:00
        project.run_sql(f"delete from {source} where location = 'a'")  # a delete below it
        project.run_sql(f"insert into {source} values (null, 'nowhere')")
        response = self.step(project, source)
        schema = project.test_schema
        assert response["late"] == 2 and response["applied"] == 0
        assert sorted(_rows(project, f"select location from {schema}.pickups")) == [("a",), ("b",)]
        late = sorted(_rows(project, f"select location, _streamsql_change, _streamsql_reason "
                            f"from {schema}.pickups__late"))
        assert late == [("a", "delete", "late"), ("nowhere", "insert", "null")]
