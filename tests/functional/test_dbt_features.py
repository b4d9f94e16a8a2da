"""dbt features on an incremental_view project: `dbt source freshness` of both kinds (from a
source's `loaded_at_field`, and from its Delta table's last commit when it has none), dbt unit
tests of an incremental_view model, enforced model contracts checked at each step, and `dbt clone`
of an incremental view (a table; its next step says how to make it a view of its own).

One project for all of them: each test runs one dbt command over it.
"""

from __future__ import annotations

import re
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from dbt.tests.util import run_dbt

SOURCES_YML = """
version: 2
sources:
  - name: raw
    schema: "{{ target.schema }}"
    freshness:
      warn_after: {count: 1, period: hour}
      error_after: {count: 2, period: hour}
    tables:
      - name: events
      - name: loads
        loaded_at_field: loaded_at
"""

TOTALS = """
{{ config(materialized='incremental_view') }}
select k, count(*) as n, sum(v) as total from {{ source('raw', 'events') }} group by k
"""


# `total` is a sum of ints: a bigint, which the broken contract says is an int
CONTRACTED = """
{{ config(materialized='incremental_view') }}
select k, count(*) as n, sum(v) as total from {{ source('raw', 'events') }} group by k
"""

MODELS_YML = """
version: 2
models:
  - name: contracted
    config:
      contract: {enforced: true}
    columns:
      - {name: k, data_type: int}
      - {name: n, data_type: bigint}
      - {name: total, data_type: bigint}
  - name: broken_contract
    config:
      contract: {enforced: true}
    columns:
      - {name: k, data_type: int}
      - {name: n, data_type: bigint}
      - {name: total, data_type: int}
unit_tests:
  - name: totals_sums_each_k
    model: totals
    given:
      - input: source('raw', 'events')
        rows:
          - {id: 1, k: 1, v: 10}
          - {id: 2, k: 1, v: 20}
          - {id: 3, k: 2, v: 5}
    expect:
      rows:
        - {k: 1, n: 2, total: 30}
        - {k: 2, n: 1, total: 5}
  # a wrong expectation: the unit test runs the model's SQL, and fails
  - name: totals_wrong_expectation
    model: totals
    given:
      - input: source('raw', 'events')
        rows:
          - {id: 1, k: 1, v: 10}
    expect:
      rows:
        - {k: 1, n: 1, total: 11}
"""


def tables(project) -> set:
    return {row[1] for row in project.run_sql(f"show tables in {project.test_schema}", fetch="all")}


def by_name(results, name: str):
    matching = [r for r in results if r.node.name == name]
    assert len(matching) == 1, [r.node.name for r in results]
    return matching[0]


class TestDbtFeatures:
    @pytest.fixture(scope="class")
    def profiles_config_update(self, dbt_profile_target, unique_schema):
        """A second target, `dev`, in a schema of its own (what `dbt clone` clones into)."""
        default = dict(dbt_profile_target, schema=unique_schema)
        dev = dict(dbt_profile_target, schema=f"{unique_schema}_dev")
        return {"test": {"outputs": {"default": default, "dev": dev}, "target": "default"}}

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "sources.yml": SOURCES_YML,
            "models.yml": MODELS_YML,
            "totals.sql": TOTALS,
            "contracted.sql": CONTRACTED,
            "broken_contract.sql": CONTRACTED,
        }

    @pytest.fixture(scope="class", autouse=True)
    def sources(self, project):
        schema = project.test_schema
        project.run_sql(f"create table {schema}.events (id int, k int, v int) using delta")
        project.run_sql(f"insert into {schema}.events values (1, 1, 10), (2, 1, 20), (3, 2, 5)")
        project.run_sql(f"create table {schema}.loads (id int, loaded_at timestamp) using delta")
        # loaded 90 minutes ago by its field (committed just now): past warn_after, not error_after
        project.run_sql(
            f"insert into {schema}.loads values (1, current_timestamp() - interval 90 minutes)"
        )

    def test_source_freshness_from_the_field_and_from_the_last_commit(self, project):
        started = datetime.now(timezone.utc)
        results = run_dbt(["source", "freshness"], expect_pass=True)
        events = by_name(results, "events")
        loads = by_name(results, "loads")
        # no loaded_at_field: the time of the Delta table's last commit, a moment ago
        assert str(events.status) == "pass", (events.status, events.message)
        committed = events.max_loaded_at.astimezone(timezone.utc)
        assert started - timedelta(minutes=5) < committed <= datetime.now(timezone.utc), committed
        assert 0 <= events.age < 300, events.age
        # loaded_at_field: the newest value of the field, whatever the last commit
        assert str(loads.status) == "warn", (loads.status, loads.message)
        assert 85 * 60 < loads.age < 100 * 60, loads.age

    def test_unit_tests_run_the_model_sql_over_their_fixtures(self, project):
        results = run_dbt(["test", "--select", "test_type:unit"], expect_pass=False)
        assert str(by_name(results, "totals_sums_each_k").status) == "pass"
        wrong = by_name(results, "totals_wrong_expectation")
        assert str(wrong.status) == "fail", (wrong.status, wrong.message)
        # a unit test takes no step: the model's table is not there
        assert not {"totals", "totals__streamsql_state"} & tables(project), tables(project)

    def test_an_enforced_contract_is_checked_at_each_step(self, project):
        results = run_dbt(["run"], expect_pass=False)
        contracted = by_name(results, "contracted")
        assert str(contracted.status) == "success", contracted.message
        assert contracted.adapter_response["step"] == 1, contracted.adapter_response
        broken = by_name(results, "broken_contract")
        assert str(broken.status) == "error", broken.message
        assert "enforced contract" in broken.message, broken.message
        # the table of mismatches names the column
        assert re.search(r"\|\s*total\s*\|.*\|\s*data type mismatch", broken.message, re.I), (
            broken.message
        )
        assert "broken_contract" not in tables(project)  # nothing written
        # the next step is checked again, and passes
        project.run_sql(f"insert into {project.test_schema}.events values (4, 3, 7)")
        (second,) = run_dbt(["run", "--select", "contracted"])
        assert second.adapter_response["step"] == 2, second.adapter_response
        assert set(
            project.run_sql(f"select * from {project.test_schema}.contracted", fetch="all")
        ) == {
            (1, 2, 30),
            (2, 1, 5),
            (3, 1, 7),
        }

    def test_a_clone_serves_as_a_table_and_its_next_step_says_what_to_do(self, project, tmp_path):
        schema, dev = project.test_schema, f"{project.test_schema}_dev"
        run_dbt(["run", "--select", "totals"])
        state = tmp_path / "state"
        state.mkdir()
        shutil.copy(Path(project.project_root) / "target" / "manifest.json", state)
        try:
            (cloned,) = run_dbt(
                ["clone", "--state", str(state), "--target", "dev", "--select", "totals"]
            )
            assert str(cloned.status) == "success", cloned.message
            rows = "select k, n, total from {}.totals order by k"
            assert project.run_sql(rows.format(dev), fetch="all") == project.run_sql(
                rows.format(schema), fetch="all"
            )
            # the dev target's source (its schema is the target's)
            project.run_sql(
                f"create table {dev}.events using delta as select * from {schema}.events"
            )
            (step,) = run_dbt(["run", "--target", "dev", "--select", "totals"], expect_pass=False)
            assert str(step.status) == "error"
            assert f"the table {dev}.totals is a clone of" in step.message, step.message
            assert "--full-refresh --select totals" in step.message, step.message
        finally:
            project.run_sql(f"drop schema if exists {dev} cascade")
