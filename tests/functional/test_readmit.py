"""streamsql_readmit (docs/lateness-and-watermark.md) on real Spark + Delta: quarantined changes
applied after all, exactly once, followed downstream, and equal to the oracle.

`pickups` is the worked example's model (one hour of LATENESS on ts), `per_location` counts it
downstream, `hourly` counts the same rows per hour with LATENESS on the hour, so that a late
row quarantines an aggregate's delete and insert of one group, and `held_pickups` holds rows
with WATERMARK before its LATENESS judges them. The in-process class takes the
steps and readmits in one dbt project; the kill test runs each dbt command as a process of its
own and kills the readmit with SIGKILL between its model commit and its mark of `__late`.
"""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from dbt.adapters.streamsql.spark import warm_server
from tests.dbt_process import DbtProject
from tests.functional.test_kill import show

PICKUPS = """
{{ config(materialized='incremental_view', lateness={'ts': 'INTERVAL 1 HOUR'}) }}
select ts, location from {{ source('raw', 'order_pickup') }}
"""
PER_LOCATION = """
{{ config(materialized='incremental_view') }}
select location, count(*) as n from {{ ref('pickups') }} group by location
"""
HOURLY = """
{{ config(materialized='incremental_view', lateness={'hour': 'INTERVAL 1 HOUR'}) }}
select date_trunc('hour', ts) as hour, count(*) as n
from {{ source('raw', 'order_pickup') }} group by date_trunc('hour', ts)
"""
# WATERMARK and LATENESS: 02:00 is still held when step 5's 00:20 comes below the waterline 00:30
HELD = """
{{ config(materialized='incremental_view', watermark={'ts': 'INTERVAL 10 MINUTES'},
          lateness={'ts': 'INTERVAL 30 MINUTES'}) }}
select ts, location from {{ source('raw', 'order_pickup') }}
"""
SCHEMA = """
version: 2
sources:
  - name: raw
    schema: "{{ target.schema }}"
    tables: [{name: order_pickup}]
models:
  - name: pickups
    data_tests: [matches_recompute]
  - name: per_location
    data_tests: [matches_recompute]
  - name: hourly
    data_tests: [matches_recompute]
  - name: held_pickups
    data_tests: [matches_recompute]
"""
# The worked example's five rows as five steps (the fifth is late), then a sixth late row.
ROWS = [
    ("2020-01-01 00:00:00", "home"),
    ("2020-01-01 01:00:00", "office"),
    ("2020-01-01 00:10:00", "shop"),
    ("2020-01-01 02:00:00", "home"),
    ("2020-01-01 00:20:00", "friend"),
    ("2020-01-01 00:30:00", "park"),
]


def _rows(project, sql):
    return sorted(tuple(row) for row in project.run_sql(sql, fetch="all"))


def readmit(model, where, *extra, expect_pass=True):
    args = {"model": model, "where": where}
    for item in extra:
        args.update(item)
    return run_dbt_and_capture(
        ["run-operation", "streamsql_readmit", "--args", json.dumps(args)],
        expect_pass=expect_pass,
    )[1]


class TestReadmit:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "pickups.sql": PICKUPS,
            "per_location.sql": PER_LOCATION,
            "hourly.sql": HOURLY,
            "held_pickups.sql": HELD,
            "schema.yml": SCHEMA,
        }

    def test_readmitted_changes_apply_once_and_reach_downstream(self, project):
        schema = project.test_schema
        source = f"{schema}.order_pickup"
        project.run_sql(
            f"create or replace table {source} (ts timestamp, location string) "
            "tblproperties ('delta.enableChangeDataFeed' = 'true')"
        )
        for ts, location in ROWS:
            project.run_sql(f"insert into {source} values (timestamp'{ts}', '{location}')")
            run_dbt(["run"])
        late = _rows(
            project,
            f"select location, _streamsql_step, _streamsql_change from {schema}.pickups__late",
        )
        assert late == [("friend", 5, "insert"), ("park", 6, "insert")]
        hourly_late = _rows(
            project,
            f"select n, _streamsql_step, _streamsql_change from {schema}.hourly__late",
        )
        # the 00:00 group's updates of steps 5 and 6, both below the waterline 01:00
        assert hourly_late == [
            (2, 5, "delete"),
            (3, 5, "insert"),
            (3, 6, "delete"),
            (4, 6, "insert"),
        ]
        run_dbt(["test"])  # the oracle, before any readmit
        # the state each LATENESS would keep: `hourly` holds 00:00, 01:00 and 02:00, 2 hours, 1
        # hour and 0 behind the largest hour seen
        said = run_dbt_and_capture(
            ["run-operation", "streamsql_lateness_report", "--args", "{model: hourly}"]
        )[1]
        assert re.search(r"\n\s*0 s\s+.*\s1 of 3\n", said), said
        assert re.search(r"\n\s*1 hour\s+.*\s2 of 3\n", said), said
        assert re.search(r"\n\s*2 hours\s+.*\s3 of 3\n", said), said
        said = run_dbt_and_capture(
            ["run-operation", "streamsql_lateness_report", "--args", "{model: pickups}"]
        )[1]
        assert "The model keeps no state" in said, said

        # a dry run says what it would do and writes nothing
        said = readmit("pickups", "_streamsql_step = 5", {"dry_run": True})
        assert "dry run: would readmit 1 change(s) of step 5 (+1 -0 to the model)" in said, said
        assert (
            _rows(project, f"select location from {schema}.pickups where location = 'friend'") == []
        )

        # readmit one row: a step of its own, that moves no waterline
        waterlines = _rows(project, f"select step, waterline from {schema}.pickups__waterline")
        said = readmit("pickups", "location = 'friend'")
        assert "pickups: step 7: read 0 changes, applied 1 (+1 -0), late 0" in said, said
        assert "readmitted 1 change(s) of" in said, said
        assert _rows(
            project, f"select location from {schema}.pickups where location = 'friend'"
        ) == [("friend",)]
        marks = _rows(
            project,
            f"select location, _streamsql_readmitted_step from {schema}.pickups__late",
        )
        assert marks == [("friend", 7), ("park", None)]
        assert (
            _rows(project, f"select step, waterline from {schema}.pickups__waterline") == waterlines
        )
        changes = f"table_changes('{schema}.pickups', 0)"
        feed = _rows(
            project,
            f"select location, _change_type from {changes} "
            f"where _commit_version = (select max(_commit_version) from {changes})",
        )
        assert feed == [("friend", "insert")]

        # the same call again: nothing left to readmit, no step taken
        said = readmit("pickups", "location = 'friend'")
        assert "nothing to readmit" in said, said
        assert len(_rows(project, f"select * from {schema}.pickups where location = 'friend'")) == 1

        # downstream follows at its next step; the model itself has nothing to do
        results = {r.node.name: r.adapter_response for r in run_dbt(["run"])}
        assert results["pickups"]["_message"] == "unchanged"
        assert results["per_location"]["inserted"] == 1
        assert _rows(project, f"select location, n from {schema}.per_location") == [
            ("friend", 1),
            ("home", 2),
            ("office", 1),
            ("shop", 1),
        ]
        run_dbt(["test"])  # readmitted rows count as accepted

        # an aggregate: step 6's update deletes the row step 5's quarantined insert made
        said = readmit("hourly", "_streamsql_step = 6", expect_pass=False)
        assert "1 of the 1 row(s) the selected changes delete are not in the model" in said, said
        assert _rows(project, f"select n from {schema}.hourly where hour = '2020-01-01'") == [(2,)]
        said = readmit("hourly", "true")
        assert "applied 2 (+1 -1)" in said, said
        assert _rows(project, f"select cast(hour as string), n from {schema}.hourly") == [
            ("2020-01-01 00:00:00", 4),
            ("2020-01-01 01:00:00", 1),
            ("2020-01-01 02:00:00", 1),
        ]
        run_dbt(["test"])

        # steps go on as before: a new late row is quarantined, not readmitted
        project.run_sql(f"insert into {source} values (timestamp'2020-01-01 00:40:00', 'gym')")
        run_dbt(["run"])
        assert _rows(
            project,
            f"select location, _streamsql_readmitted_step from {schema}.pickups__late "
            "where location = 'gym'",
        ) == [("gym", None)]
        said = readmit("pickups", "location = 'gym' -- the late one")  # a comment ends its line
        assert "applied 1 (+1 -0)" in said, said
        run_dbt(["test"])

        # under WATERMARK: the readmit says what stays held, and holds nothing itself
        assert _rows(project, f"select location from {schema}.held_pickups__late") == [("friend",)]
        said = readmit("held_pickups", "true")
        assert "applied 1 (+1 -0), late 0, held 1," in said, said
        run_dbt(["test"])

        # a bad `where` is refused before anything is written
        history = f"describe history {schema}.pickups"
        before = len(project.run_sql(history, fetch="all"))
        for where, said in [
            ("true; drop table x", "is a statement, not a condition"),
            ("location = (select max(location) from x)", "reads another table"),
            ("_streamsql_at < current_timestamp()", "whose value changes between"),
            ("nothing_here = 1", "names nothing_here"),
        ]:
            out = readmit("pickups", where, expect_pass=False)
            assert "streamsql_readmit on model pickups:" in out and said in out, out
        out = readmit("per_location", "true", expect_pass=False)
        assert "it has no `" in out and "per_location__late" in out, out
        assert len(project.run_sql(history, fetch="all")) == before


KILL_MODELS = {
    "pickups.sql": PICKUPS,
    "per_location.sql": PER_LOCATION,
    "sources.yml": SCHEMA.split("models:")[0],
}
# each run adds the rows its `batch` var names: batch 2's and 3's rows are late
HOOKS = [
    "create schema if not exists {{ target.schema }}",
    "create table if not exists {{ target.schema }}.order_pickup (ts timestamp, location string) "
    "tblproperties ('delta.enableChangeDataFeed' = 'true')",
    "{% if var('batch', 0) == 1 %} insert into {{ target.schema }}.order_pickup values "
    "(timestamp'2020-01-01 00:00:00', 'home'), (timestamp'2020-01-01 02:00:00', 'office')"
    "{% elif var('batch', 0) == 2 %} insert into {{ target.schema }}.order_pickup values "
    "(timestamp'2020-01-01 00:20:00', 'friend'){% elif var('batch', 0) == 3 %} insert into "
    "{{ target.schema }}.order_pickup values (timestamp'2020-01-01 00:30:00', 'park')"
    "{% else %} select 1{% endif %}",
]


def test_a_readmit_killed_after_its_commit_is_finished_and_applies_once(tmp_path):
    """dbt processes over the warm server (the default), as cron runs them: the readmit's
    process is killed, the server lives on, and the next readmit finishes the step."""
    warehouse = tmp_path / "wh"
    project = DbtProject.create(
        tmp_path / "p",
        KILL_MODELS,
        target={
            "type": "streamsql",
            "schema": "readmit_kill",
            "warehouse_dir": str(warehouse),
            "keep_warm": True,
        },
        project_extra={"on-run-start": HOOKS},
    )
    try:
        killed_between_commit_and_mark(project, tmp_path / "paused")
    finally:
        warm_server.stop_server(warm_server.ServerPaths(str(warehouse)))


def run(project: DbtProject, *args: str) -> str:
    ran = project.dbt(*args)
    assert ran.returncode == 0, ran.stdout[-3000:]
    return ran.stdout


def killed_readmit(project: DbtProject, where: str, marker: Path) -> None:
    """A readmit of `where`, killed (SIGKILL, its process group) once its model commit landed
    and before it marks its rows of `__late`."""
    args = json.dumps({"model": "pickups", "where": where})
    process = project.dbt_held_at(
        "after_commit", marker, "run-operation", "streamsql_readmit", "--args", args
    )
    os.killpg(process.pid, signal.SIGKILL)
    process.communicate(timeout=60)


def killed_between_commit_and_mark(project: DbtProject, marker: Path) -> None:
    for batch in (1, 2):
        run(project, "run", "--vars", json.dumps({"batch": batch}))
    query = (
        "select (select count(*) from readmit_kill.pickups where location = '{0}') as applied, "
        "(select count(*) from readmit_kill.pickups__late where location = '{0}' and "
        "_streamsql_readmitted_step is not null) as marked, (select count(*) from "
        "readmit_kill.per_location where location = '{0}') as downstream"
    )
    # killed, then finished by the next readmit, which finds nothing left to readmit
    killed_readmit(project, "location = 'friend'", marker)
    assert show(project, query.format("friend")) == [{"applied": 1, "marked": 0, "downstream": 0}]
    args = json.dumps({"model": "pickups", "where": "location = 'friend'"})
    said = run(project, "run-operation", "streamsql_readmit", "--args", args)
    assert "finishing readmit step 3" in said and "nothing to readmit" in said, said[-3000:]
    # killed, then finished by the next `dbt run`
    run(project, "run", "--vars", json.dumps({"batch": 3}))  # step 4: park is late
    killed_readmit(project, "location = 'park'", marker)
    said = run(project, "run")
    assert "finishing step 5, which a crash interrupted" in said, said[-3000:]
    assert show(project, query.format("friend")) == [{"applied": 1, "marked": 1, "downstream": 1}]
    assert show(project, query.format("park")) == [{"applied": 1, "marked": 1, "downstream": 1}]
