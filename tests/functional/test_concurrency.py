"""SPEC section 6: two `dbt run`s at the same time on the same model and warehouse.

Each run first appends a batch to the model's source (an on-run-start hook) and then takes one step
of the model. The embedded metastore serves one process at a time, so the second process waits for
the warehouse lock (or gives up with a clear message). Either way nothing may be corrupted: the
steps that completed each applied their own batch once, and the model equals its query.
"""

from __future__ import annotations

import re

from tests.dbt_process import DbtProject

BATCH = 50
MODELS = {
    "totals.sql": "{{ config(materialized='incremental_view') }}\n"
                  "select k, count(*) as n, sum(v) as total "
                  "from {{ target.schema }}.events group by k",
}
HOOKS = [
    "create schema if not exists {{ target.schema }}",
    "create table if not exists {{ target.schema }}.events (k bigint, v bigint)",
    f"insert into {{{{ target.schema }}}}.events select id % 7, id from range({BATCH}) as r(id)",
]
STEP_LINE = re.compile(r"totals: step (\d+): read (\d+) changes, applied (\d+)")
CLEAR_FAILURE = ("in use by another process", "another run completed step")


def test_two_runs_at_once_leave_the_model_consistent(tmp_path):
    project = DbtProject.create(
        tmp_path / "p", MODELS,
        target={"type": "streamsql", "schema": "conc", "warehouse_dir": str(tmp_path / "wh")},
        project_extra={"on-run-start": HOOKS})

    runs = [project.dbt_popen("run"), project.dbt_popen("run")]
    outputs = []
    for process in runs:
        out, _ = process.communicate(timeout=900)
        outputs.append((process.returncode, out))

    succeeded = [out for code, out in outputs if code == 0]
    for code, out in outputs:
        if code != 0:
            assert any(message in out for message in CLEAR_FAILURE), out
    assert succeeded, outputs

    # each completed run took the next step and read exactly its own batch
    steps = sorted(tuple(int(n) for n in STEP_LINE.search(out).groups()) for out in succeeded)
    assert [s[0] for s in steps] == list(range(1, len(succeeded) + 1)), steps
    assert all(read == BATCH for _, read, _ in steps), steps

    # the model equals its query over everything that was appended, and no step ran twice
    check = (
        "with expected as (select k, count(*) as n, sum(v) as total from conc.events group by k), "
        "actual as (select * from conc.totals) "
        "select (select count(*) from (select * from actual except all select * from expected)) "
        "as extra, (select count(*) from (select * from expected except all select * from actual)) "
        "as missing, (select count(*) from conc.events) as events, "
        "(select sum(n) from actual) as counted"
    )
    # read with a project of its own (no hooks) on the same warehouse
    checker = DbtProject.create(tmp_path / "check", {}, target=project.target)
    shown = checker.dbt("show", "--inline", check, "--output", "json")
    assert shown.returncode == 0, shown.stdout
    row = {key: int(re.search(rf'"{key}": (\d+)', shown.stdout).group(1))
           for key in ("extra", "missing", "events", "counted")}
    # every completed step's batch counted exactly once
    assert row["counted"] == BATCH * len(succeeded), row
    if len(succeeded) == len(outputs):
        assert row == {"extra": 0, "missing": 0, "events": BATCH * 2, "counted": BATCH * 2}, row
