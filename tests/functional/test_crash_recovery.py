"""A step that fails at any point is completed exactly once by the next run, and no table ever
shows part of a step (docs/steps.md, "How a step commits" and "What a crash leaves").

The step's test-only fault switch (`STREAMSQL_TEST_FAIL_AT`) makes a step fail at one of its named
checkpoints. For each checkpoint a linear and an aggregate step reach (and, for a query over an
aggregate below a join, the points around its stage's state write), the test fails a step there,
checks what the failed step left behind (the model as before the step when the fault comes before
its commit, as after it when it comes after), re-runs, and checks the model against its query
evaluated from scratch (a change applied twice or lost would show), then takes one more step.
`TestSideTablesAfterCrash` does the same for the quarantine, waterline and held rows of a model
with LATENESS and WATERMARK: at the moment of the fault each side table holds all of the step or
none of it, and after the re-run each equals a twin model's that never failed.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Dict, List, Tuple

import pytest
from dbt.tests.util import run_dbt

from dbt.adapters.streamsql.execution.pipeline.step import FAULT_INJECTION_ENV
from tests.over_connect import OverConnect

LINEAR_CHECKPOINTS = ["start", "before_commit", "after_commit"]  # a linear step has no state
AGGREGATE_CHECKPOINTS = ["start", "before_commit", "after_commit", "before_state", "after_state"]
STAGED_CHECKPOINTS = ["before_commit", "before_state"]  # the model committed, the stage not yet
# Points after the model's commit: the step has happened; side tables may still lack it.
AFTER_COMMIT = {"after_commit", "before_quarantine", "before_hold", "before_state", "after_state"}
CASES: List[Tuple[str, str]] = (
    [("linear", point) for point in LINEAR_CHECKPOINTS]
    + [("aggregate", point) for point in AGGREGATE_CHECKPOINTS]
    + [("staged", point) for point in STAGED_CHECKPOINTS]
)

QUERIES = {
    "linear": "select id, k, v * 10 as v10 from {src} where k is not null",
    "aggregate": "select k, count(*) as n, sum(v) as total, min(v) as lo, max(v) as hi "
    "from {src} group by k",
    "staged": "select s.id, s.v, a.n from {src} s join "
    "(select k, count(*) as n from {src} group by k) a on s.k = a.k",
}


def model_name(kind: str, point: str) -> str:
    return f"{kind}_{point}"


def source_name(kind: str, point: str) -> str:
    return f"src_{kind}_{point}"


def bag(project, sql: str) -> Counter:
    return Counter(tuple(row) for row in project.run_sql(sql, fetch="all"))


def latest_version(project, relation: str) -> int:
    return int(project.run_sql(f"describe history {relation} limit 1", fetch="one")[0])


def run_step(model: str, fail_at: str = "", expect_pass: bool = True):
    """One `dbt run` of one model, optionally with the fault switch on; its result."""
    if fail_at:
        os.environ[FAULT_INJECTION_ENV] = fail_at
    try:
        results = run_dbt(["run", "--select", model], expect_pass=expect_pass)
    finally:
        os.environ.pop(FAULT_INJECTION_ENV, None)
    assert len(results) == 1
    return results[0]


# Over Spark Connect (TestCrashRecoveryOverConnect): a step with state stopped after the model's
# commit, so that the roll-forward reads the step's inputs and state through the server. The
# staged query has both an aggregate (its stage, with a state table) and a join; a linear step's
# or a top-level aggregate's recovery asks the server nothing this one does not.
CONNECT_CASES = [("staged", "before_state")]


class TestCrashRecovery:
    cases = CASES

    @pytest.fixture(scope="class")
    def models(self) -> Dict[str, str]:
        files = {}
        for kind, point in self.cases:
            src = "{{ target.schema }}." + source_name(kind, point)
            files[f"{model_name(kind, point)}.sql"] = (
                "{{ config(materialized='incremental_view') }}\n" + QUERIES[kind].format(src=src)
            )
        return files

    @pytest.mark.parametrize("kind,point", CASES, ids=[f"{k}-{p}" for k, p in CASES])
    def test_failed_step_completes_exactly_once(self, project, kind, point):
        schema = project.test_schema
        src = f"{schema}.{source_name(kind, point)}"
        name = model_name(kind, point)
        model = f"{schema}.{name}"
        expected_sql = QUERIES[kind].format(src=src)

        def assert_model_equals_query(when: str) -> None:
            actual, expected = bag(project, f"select * from {model}"), bag(project, expected_sql)
            assert actual == expected, (
                f"{name} {when}: extra {actual - expected}, missing {expected - actual}"
            )

        project.run_sql(f"create table {src} (id int, k int, v int)")
        project.run_sql(
            f"insert into {src} values (1, 1, 10), (2, 1, 20), (2, 1, 20), "
            "(3, 2, 30), (4, null, 40), (5, 3, 50)"
        )
        first = run_step(name)
        assert first.adapter_response["step"] == 1
        assert_model_equals_query("after step 1")
        before_rows = bag(project, f"select * from {model}")
        before_version = latest_version(project, model)

        # step 2's change set: 6 changes (an insert of 2 rows, a delete, an update of a key)
        project.run_sql(f"insert into {src} values (6, 2, 60), (7, 1, 70)")
        project.run_sql(f"delete from {src} where id = 3")
        project.run_sql(f"update {src} set k = 2, v = 25 where id = 1")
        step2_changes = 2 + 1 + 2

        failed = run_step(name, fail_at=point, expect_pass=False)
        assert f"injected fault at {point}" in (failed.message or ""), failed.message
        if point in AFTER_COMMIT:
            assert latest_version(project, model) > before_version
            assert_model_equals_query(f"after a fault at {point}")
        else:
            # nothing a reader of the model can see has changed
            assert latest_version(project, model) == before_version
            assert bag(project, f"select * from {model}") == before_rows

        rerun = run_step(name).adapter_response
        assert rerun["step"] == 2, rerun
        if point in AFTER_COMMIT:
            # step 2 had happened: the run finished its state, and had nothing left to do
            assert (rerun["changes_read"], rerun["applied"]) == (0, 0), rerun
        else:
            assert rerun["changes_read"] == step2_changes, rerun
        assert_model_equals_query(f"after re-running a step that failed at {point}")
        if kind == "aggregate":  # a change applied twice would double the counts
            total = project.run_sql(f"select sum(n) from {model}", fetch="one")[0]
            assert total == project.run_sql(f"select count(*) from {src}", fetch="one")[0]

        # the step after that reads exactly its own changes
        project.run_sql(f"insert into {src} values (8, 3, 80)")
        project.run_sql(f"delete from {src} where id = 2")  # both duplicates
        following = run_step(name).adapter_response
        assert following["step"] == 3, following
        assert following["changes_read"] == 3, following
        assert_model_equals_query("in the step after the recovered one")


TIMED_CONFIG = (
    "{{ config(materialized='incremental_view', "
    "lateness={'ts': 'INTERVAL 1 HOUR'}, watermark={'ts': 'INTERVAL 10 MINUTES'}) }}\n"
)
TIMED_SQL = "select id, ts, v from {{ target.schema }}.src_timed"
SIDE_TABLES = {"__late": "_streamsql_at", "__waterline": "at", "__pending": None}
# fault point -> which side tables hold step 2 when the step stops there (all of it or none)
SIDE_FAULTS = {
    "before_commit": (),
    "before_quarantine": (),
    "before_hold": ("__late", "__waterline"),
}


class TestCrashRecoveryOverConnect(OverConnect, TestCrashRecovery):
    """The same crashes, each step through a Spark Connect server (`method: connect`)."""

    cases = CONNECT_CASES

    @pytest.mark.parametrize(
        "kind,point", CONNECT_CASES, ids=[f"{k}-{p}" for k, p in CONNECT_CASES]
    )
    def test_failed_step_completes_exactly_once(self, project, kind, point):
        super().test_failed_step_completes_exactly_once(project, kind, point)


class TestSideTablesAfterCrash:
    """A step with LATENESS and WATERMARK stopped before its commit and between its side-table
    writes: at that moment each side table holds all of the step's rows or none of them, and the
    re-run leaves every table as a step that never failed does (a twin model, same query)."""

    @pytest.fixture(scope="class")
    def models(self) -> Dict[str, str]:
        files = {"timed_twin.sql": TIMED_CONFIG + TIMED_SQL}
        for point in SIDE_FAULTS:
            files[f"timed_{point}.sql"] = TIMED_CONFIG + TIMED_SQL
        return files

    def side_rows(self, project, model: str, suffix: str) -> Counter:
        relation = f"{project.test_schema}.{model}{suffix}"
        wall_clock = SIDE_TABLES[suffix]
        columns = [
            row[0]
            for row in project.run_sql(f"describe table {relation}", fetch="all")
            if row[0]
            and not row[0].startswith("#")
            and row[0] != wall_clock
            and row[0] != "_streamsql_held_id"
        ]
        return bag(project, f"select {', '.join(columns)} from {relation}")

    def step_rows(self, project, model: str, suffix: str, step: int) -> int:
        column = {
            "__late": "_streamsql_step",
            "__waterline": "step",
            "__pending": "coalesce(_streamsql_released_step, _streamsql_held_step)",
        }[suffix]
        return project.run_sql(
            f"select count(*) from {project.test_schema}.{model}{suffix} where {column} = {step}",
            fetch="one",
        )[0]

    def assert_like_twin(self, project, model: str, when: str) -> None:
        schema = project.test_schema
        assert bag(project, f"select * from {schema}.{model}") == bag(
            project, f"select * from {schema}.timed_twin"
        ), f"{model} {when}"
        for suffix in SIDE_TABLES:
            assert self.side_rows(project, model, suffix) == self.side_rows(
                project, "timed_twin", suffix
            ), f"{model}{suffix} {when}"

    def test_side_tables_hold_all_of_a_step_or_none_and_the_rerun_finishes_it(self, project):
        src = f"{project.test_schema}.src_timed"
        project.run_sql(f"create table {src} (id int, ts timestamp, v int)")
        project.run_sql(
            f"insert into {src} values (1, timestamp'2024-01-01 10:00:00', 1), "
            "(2, timestamp'2024-01-01 10:30:00', 2)"
        )
        run_dbt(["run"])
        # step 2: moves the waterline, releases held rows, holds new ones, and brings a late row
        # (08:00 is below step 1's waterline, 09:30) and a NULL
        project.run_sql(
            f"insert into {src} values (3, timestamp'2024-01-01 12:00:00', 3), "
            "(4, timestamp'2024-01-01 08:00:00', 4), (5, null, 5), "
            "(6, timestamp'2024-01-01 11:55:00', 6)"
        )
        assert run_step("timed_twin").adapter_response["step"] == 2
        for point, written in SIDE_FAULTS.items():
            model = f"timed_{point}"
            failed = run_step(model, fail_at=point, expect_pass=False)
            assert f"injected fault at {point}" in (failed.message or ""), failed.message
            for suffix in SIDE_TABLES:
                # all of step 2 (as the twin has it) or none of it
                expected = (
                    self.step_rows(project, "timed_twin", suffix, 2) if suffix in written else 0
                )
                assert self.step_rows(project, model, suffix, 2) == expected, (point, suffix)
            assert run_step(model).adapter_response["step"] == 2
            self.assert_like_twin(project, model, f"after the re-run of a fault at {point}")
        project.run_sql(
            f"insert into {src} values (7, timestamp'2024-01-01 13:00:00', 7), "
            "(8, timestamp'2024-01-01 09:00:00', 8)"
        )
        run_dbt(["run"])
        for point in SIDE_FAULTS:
            self.assert_like_twin(project, f"timed_{point}", "after step 3")
