"""docs/steps.md's "What a crash leaves" under kill -9: `dbt run` processes killed at random
moments, JVM and all.

Each run first appends a batch to the source (an on-run-start hook: some rows are late, some
have no event time), then takes a step of two models: an aggregate with LATENESS (state table,
`__late`, `__waterline`) and a linear model over it. Runs are killed with SIGKILL to their whole
process group at seeded random moments (during start-up, the hook, a computation, a commit or a
side-table write), then one run completes. Afterwards:

- every table shows whole steps: the model equals its query over the source minus what its
  quarantine holds (late inserts out, late deletes back), and the downstream model equals its
  query over the upstream model;
- no step was applied twice or skipped: the model's step records are 0, 1, ..., n once each,
  and `__waterline` holds one row per step.

    STREAMSQL_KILL_SEED=3 STREAMSQL_KILLS=12 pytest tests/functional/test_kill.py
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
from pathlib import Path

from tests.dbt_process import DbtProject

SEED = int(os.environ.get("STREAMSQL_KILL_SEED", "20241123"))
KILLS = int(os.environ.get("STREAMSQL_KILLS", "5"))
BATCH = 40
MODELS = {
    "windows.sql": (
        "{{ config(materialized='incremental_view', lateness={'ws': 'INTERVAL 1 HOUR'}) }}\n"
        "select k, window(ts, '10 minutes').start as ws, count(*) as n, max(v) as top "
        "from {{ target.schema }}.events group by k, window(ts, '10 minutes')"
    ),
    "busy_windows.sql": (
        "{{ config(materialized='incremental_view') }}\n"
        "select k, ws, n from {{ ref('windows') }} where n > 1"
    ),
}
# ids continue from the largest one; event time moves forward 5 minutes per id, and every
# seventh row is 3 hours behind (late once the waterline has moved), every eleventh has none
NEXT = "(select coalesce(max(id), 0) from {{ target.schema }}.events)"
HOOKS = [
    "create schema if not exists {{ target.schema }}",
    "create table if not exists {{ target.schema }}.events (id bigint, k bigint, ts timestamp, "
    "v bigint) tblproperties ('delta.enableChangeDataFeed' = 'true')",
    f"insert into {{{{ target.schema }}}}.events select {NEXT} + id, id % 3, "
    f"case when id % 11 = 0 then null when id % 7 = 0 "
    f"then timestamp_seconds(1704067200 + ({NEXT} + id) * 300 - 10800) "
    f"else timestamp_seconds(1704067200 + ({NEXT} + id) * 300) end, id "
    f"from range(1, {BATCH + 1}) as r(id)",
]


def show(project: DbtProject, query: str) -> list:
    """The rows of a query, through `dbt show` (a process of its own on the warehouse)."""
    shown = project.dbt("show", "--inline", query, "--output", "json", "--limit", "-1")
    assert shown.returncode == 0, shown.stdout[-3000:]
    start = shown.stdout.index('"show"')
    start = shown.stdout.rindex("{", 0, start)
    document, _ = json.JSONDecoder().raw_decode(shown.stdout[start:])
    return document["show"]


def step_records(table_dir: Path) -> list:
    """The step numbers in the records of a Delta table's commits, read from its log files."""
    commits = sorted((table_dir / "_delta_log").glob("*.json"))
    return steps_of_commits(commit.read_text() for commit in commits)


def steps_of_commits(commits) -> list:
    """The step numbers in the records of a table's commit files (their texts, in order)."""
    steps = []
    for text in commits:
        for line in text.splitlines():
            info = json.loads(line).get("commitInfo")
            if info and info.get("userMetadata"):
                steps.append(json.loads(info["userMetadata"])["streamsql"]["step"])
    return steps


def test_runs_killed_at_random_moments_never_apply_a_step_twice_or_lose_one(tmp_path):
    project = DbtProject.create(
        tmp_path / "p",
        MODELS,
        target={"type": "streamsql", "schema": "kill", "warehouse_dir": str(tmp_path / "wh")},
        project_extra={"on-run-start": HOOKS},
    )
    rng = random.Random(SEED)
    assert project.dbt("run").returncode == 0  # step 1 of both, so kills land on later steps
    killed = 0
    for _ in range(KILLS):
        process = project.dbt_popen("run")
        try:  # killed at that moment if still running (no waiting on a run that has ended)
            process.wait(timeout=rng.uniform(3, 45))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            killed += 1
        process.communicate(timeout=600)
    final = project.dbt("run")
    assert final.returncode == 0, final.stdout[-3000:]
    assert killed, "no run was killed: lengthen the runs or shorten the waits"

    checker = DbtProject.create(tmp_path / "check", {}, target=project.target)
    row = show(checker, whole_steps_query())[0]
    numbers = step_records(tmp_path / "wh" / "tables" / "kill.db" / "windows")
    assert_whole_steps(row, numbers)


def whole_steps_query() -> str:
    """One row of counts that are 0 when every table of the kill models shows whole steps.

    The model + its quarantined inserts - its quarantined deletes = the query; the downstream
    model = its query over the model; one __waterline row per step."""
    query = (
        "select k, window(ts, '10 minutes').start as ws, count(*) as n, max(v) as top "
        "from kill.events group by k, window(ts, '10 minutes')"
    )
    late = (
        "select k, ws, n, top, case when _streamsql_change = 'insert' then 1 else -1 end "
        "as w from kill.windows__late"
    )
    busy = "select k, ws, n from kill.windows where n > 1"
    return (
        f"with q as ({query}), l as ({late}), signed as (select k, ws, n, top, 1 as w "
        "from kill.windows union all select * from l), held as (select k, ws, n, top, "
        "sum(w) as w from signed group by k, ws, n, top having sum(w) <> 0), "
        "expected as (select k, ws, n, top, count(*) as w from q group by k, ws, n, top), "
        "lines as (select step, count(*) as c from kill.windows__waterline group by step) "
        "select (select count(*) from (select * from held except all select * from "
        "expected)) as extra, (select count(*) from (select * from expected except all "
        "select * from held)) as missing, (select count(*) from held where w < 0) "
        "as negative, (select count(*) from kill.windows__late) as late_rows, "
        f"(select count(*) from (select k, ws, n from kill.busy_windows except all {busy})) "
        f"as downstream_extra, (select count(*) from ({busy} except all select k, ws, n "
        "from kill.busy_windows)) as downstream_missing, "
        "(select count(*) from lines) as waterline_steps, "
        "(select coalesce(max(step), 0) from lines) as last_waterline_step, "
        "(select count(*) from lines where c <> 1) as doubled_waterlines"
    )


def assert_whole_steps(row: dict, numbers: list) -> None:
    """`whole_steps_query`'s row and the model's step records (in commit order) show each step
    applied once, none skipped, and quarantining that happened."""
    assert numbers == list(range(numbers[-1] + 1)), numbers  # each step once, none skipped
    assert row == {
        "extra": 0,
        "missing": 0,
        "negative": 0,
        "late_rows": row["late_rows"],
        "downstream_extra": 0,
        "downstream_missing": 0,
        "waterline_steps": numbers[-1],
        "last_waterline_step": numbers[-1],
        "doubled_waterlines": 0,
    }, (row, numbers)
    assert row["late_rows"] > 0, row  # the kills happened around real quarantining
