"""`matches_recompute` (and the operational tests beside it) is right at any moment, on real Spark +
Delta: it reads the inputs at the versions the model's last completed step read, the model as
that step left it, and the side tables as of that step (docs/macros-and-tests.md).

Three models: `projected` reads a source, `per_k` is an aggregate over a ref of it, `timed` has
LATENESS and WATERMARK over another source. After two steps the sources move (inserts, deletes,
updates, rows late for `timed`) without a step: every test passes, and fails once a model's
table is really wrong. Then a step of `timed` is stopped after its model commit, before its side
tables (and, finishing it, between them): the tests pass at both moments, and after the run that
finishes it, and after one more step.
"""

import os
from collections import Counter

import pytest
from dbt.tests.util import run_dbt

from dbt.adapters.streamsql.execution.pipeline.step import FAULT_INJECTION_ENV

SOURCES = """
version: 2
sources:
  - name: rt
    schema: "{{ target.schema }}"
    tables: [{name: events}, {name: timed_events}]
"""

PROJECTED = """
{{ config(materialized='incremental_view') }}
select id, k, v * 10 as v10 from {{ source('rt', 'events') }} where k is not null
"""
PROJECTED_QUERY = "select id, k, v * 10 as v10 from {events} where k is not null"

PER_K = """
{{ config(materialized='incremental_view') }}
select p.k, count(*) as n, sum(p.v10) as total from {{ ref('projected') }} as p group by p.k
"""

TIMED = """
{{ config(materialized='incremental_view',
          lateness={'ts': 'INTERVAL 1 HOUR'}, watermark={'ts': 'INTERVAL 10 MINUTES'}) }}
select id, ts, v from {{ source('rt', 'timed_events') }}
"""

TESTS = """
version: 2
models:
  - name: projected
    data_tests: [matches_recompute]
  - name: per_k
    data_tests: [matches_recompute]
  - name: timed
    data_tests:
      - matches_recompute
      - late_rows_at_most:
          arguments: {max_rows: 100, last_steps: 10}
      - waterline_within:
          arguments: {column: ts, interval: "INTERVAL 2 HOURS", behind: max}
"""

# every test of the project, by its name and model
TESTS_RUN = {
    ("matches_recompute", "projected"),
    ("matches_recompute", "per_k"),
    ("matches_recompute", "timed"),
    ("late_rows_at_most", "timed"),
    ("waterline_within", "timed"),
}


def ts(text: str) -> str:
    return f"timestamp'2024-01-01 {text}'"


def bag(project, sql: str) -> Counter:
    return Counter(tuple(row) for row in project.run_sql(sql, fetch="all"))


def dbt_run(fail_at: str = "", expect_pass: bool = True):
    """`dbt run` of the project, optionally with the step's fault switch on; results by model."""
    if fail_at:
        os.environ[FAULT_INJECTION_ENV] = fail_at
    try:
        results = run_dbt(["run"], expect_pass=expect_pass)
    finally:
        os.environ.pop(FAULT_INJECTION_ENV, None)
    return {result.node.name: result for result in results}


def dbt_test(expect_pass: bool = True):
    """`dbt test`: each test's result by (test name, model)."""
    results = run_dbt(["test"], expect_pass=expect_pass)
    return {(r.node.test_metadata.name, r.node.attached_node.split(".")[-1]): r for r in results}


def statuses(results) -> dict:
    return {key: str(result.status) for key, result in results.items()}


def assert_all_pass(when: str) -> None:
    found = statuses(dbt_test())
    assert set(found) == TESTS_RUN, found
    assert set(found.values()) == {"pass"}, f"{when}: {found}"


class TestRecomputeTestAtAnyMoment:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "sources.yml": SOURCES,
            "projected.sql": PROJECTED,
            "per_k.sql": PER_K,
            "timed.sql": TIMED,
            "tests.yml": TESTS,
        }

    def test_the_tests_pass_between_runs_and_beside_a_step_and_fail_on_a_wrong_model(self, project):
        schema = project.test_schema
        events, timed_events = f"{schema}.events", f"{schema}.timed_events"
        timed = f"{schema}.timed"
        project.run_sql(f"create table {events} (id int, k int, v int)")
        project.run_sql(f"create table {timed_events} (id int, ts timestamp, v int)")

        # step 1. timed: 10:55 held (not 10 minutes below the newest row), waterline 09:30
        project.run_sql(
            f"insert into {events} values (1, 1, 10), (2, 1, 20), (2, 1, 20), (3, 2, 30), "
            "(4, null, 40)"
        )
        project.run_sql(
            f"insert into {timed_events} values (1, {ts('10:00:00')}, 1), "
            f"(2, {ts('10:30:00')}, 2), (3, {ts('10:55:00')}, 3)"
        )
        dbt_run()
        # step 2: 09:00 and NULL are quarantined; 10:55 released, 11:30 held; waterline 09:55
        project.run_sql(f"insert into {events} values (5, 3, 50)")
        project.run_sql(
            f"insert into {timed_events} values (4, {ts('11:30:00')}, 4), "
            f"(5, {ts('09:00:00')}, 5), (6, null, 6)"
        )
        steps = dbt_run()
        assert {name: r.adapter_response["step"] for name, r in steps.items()} == {
            "projected": 2,
            "per_k": 2,
            "timed": 2,
        }
        assert steps["timed"].adapter_response["late"] == 2
        assert_all_pass("after step 2")

        # The inputs move, and no step runs: inserts, a delete and an update of each source, and
        # for `timed` three changes late for the next step (an insert at 08:00, a NULL, the
        # delete of the 09:00 row), rows on time and rows its WATERMARK holds.
        project.run_sql(f"insert into {events} values (6, 2, 60), (7, 1, 70), (8, null, 80)")
        project.run_sql(f"delete from {events} where id = 3")
        project.run_sql(f"update {events} set k = 2, v = 25 where id = 1")
        project.run_sql(
            f"insert into {timed_events} values (7, {ts('12:30:00')}, 7), "
            f"(8, {ts('08:00:00')}, 8), (9, null, 9), (10, {ts('12:25:00')}, 10)"
        )
        project.run_sql(f"delete from {timed_events} where id in (1, 5)")
        project.run_sql(f"update {timed_events} set v = 20 where id = 2")
        # a test over the inputs as they are now would see the model behind
        now = bag(project, PROJECTED_QUERY.format(events=events))
        assert bag(project, f"select * from {schema}.projected") != now
        assert_all_pass("between two runs, the inputs moved")

        # The tests still see a model that is wrong: a row gone from `timed`, a group's total
        # changed in `per_k` (writes that are no step's); put back, they pass again.
        row = project.run_sql(f"select * from {timed} where id = 2", fetch="one")
        project.run_sql(f"delete from {timed} where id = 2")
        project.run_sql(f"update {schema}.per_k set total = total + 1 where k = 1")
        results = dbt_test(expect_pass=False)
        found = statuses(results)
        assert found[("matches_recompute", "timed")] == "fail", found
        assert found[("matches_recompute", "per_k")] == "fail", found
        assert found[("matches_recompute", "projected")] == "pass", found
        compiled = results[("matches_recompute", "timed")].node.compiled_code
        wrong = project.run_sql(f"select id, _streamsql_surplus from ({compiled})", fetch="all")
        assert [tuple(r) for r in wrong] == [(2, -1)]
        project.run_sql(f"insert into {timed} values (2, timestamp'{row[1]}', {row[2]})")
        project.run_sql(f"update {schema}.per_k set total = total - 1 where k = 1")
        assert_all_pass("with the wrong rows put back")

        # Beside a running step: step 3 of `timed` stopped after its model commit, before its
        # side tables; `projected` and `per_k` take their step 3 whole.
        failed = dbt_run(fail_at="before_quarantine", expect_pass=False)
        assert "injected fault at before_quarantine" in (failed["timed"].message or "")
        assert failed["per_k"].adapter_response["step"] == 3
        assert self.late_rows(project, 3) == 0  # the step has late rows, not written yet
        assert self.pending_rows(project, 3) == 0
        assert_all_pass("with step 3 of timed committed to the model only")

        # The run that finishes it stopped between the side tables: __late and __waterline
        # hold step 3, __pending does not yet.
        failed = dbt_run(fail_at="before_hold", expect_pass=False)
        assert "injected fault at before_hold" in (failed["timed"].message or "")
        assert self.late_rows(project, 3) == 3
        assert self.pending_rows(project, 3) == 0
        assert_all_pass("with step 3 of timed half written to its side tables")

        # finished; then one more step
        finished = dbt_run()
        assert finished["timed"].adapter_response["step"] == 3
        assert self.pending_rows(project, 3) > 0
        assert_all_pass("after the run that finished step 3")
        project.run_sql(f"insert into {events} values (9, 3, 90)")
        project.run_sql(f"delete from {events} where id = 2")
        project.run_sql(
            f"insert into {timed_events} values (11, {ts('13:30:00')}, 11), "
            f"(12, {ts('07:00:00')}, 12)"
        )
        steps = dbt_run()
        assert {r.adapter_response["step"] for r in steps.values()} == {4}
        assert_all_pass("after step 4")
        assert bag(project, f"select * from {schema}.projected") == bag(
            project, PROJECTED_QUERY.format(events=events)
        )

    def late_rows(self, project, step: int) -> int:
        return project.run_sql(
            f"select count(*) from {project.test_schema}.timed__late "
            f"where _streamsql_step = {step}",
            fetch="one",
        )[0]

    def pending_rows(self, project, step: int) -> int:
        return project.run_sql(
            f"select count(*) from {project.test_schema}.timed__pending "
            f"where {step} in (_streamsql_held_step, _streamsql_released_step)",
            fetch="one",
        )[0]
