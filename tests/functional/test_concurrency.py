"""Two `dbt run`s at the same time on the same models (docs/steps.md, "Two runs at the same time").

A batch is appended to the models' source first (a `dbt run` of a feeder project, whose
on-run-start hooks write it; two such writers at once would conflict in Delta themselves, which is
not what this tests), then two runs start together, each taking one step of each model: an
aggregate, and one with LATENESS (state, `__late`, `__waterline`). On the
embedded session (here) the second process waits for the warehouse lock, or gives up with a clear
message. Through a Thrift Server (`test_cluster.py` calls `two_runs_at_once` while its server
runs) both runs take their steps at the same time, and at most one can commit a given step. Either
way nothing may be corrupted: each completed step applied its own batch once, the models equal
their queries (minus what LATENESS quarantined), and each table shows whole steps only.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Dict, List, Tuple

from tests.dbt_process import DbtProject

BATCH = 50
MODELS = {
    "totals.sql": "{{ config(materialized='incremental_view') }}\n"
    "select k, count(*) as n, sum(v) as total "
    "from {{ target.schema }}.events group by k",
    "late_totals.sql": "{{ config(materialized='incremental_view', "
    "lateness={'ts': 'INTERVAL 1 HOUR'}) }}\n"
    "select k, ts, count(*) as n from {{ target.schema }}.events "
    "group by k, ts",
}
# Each batch moves event time on by a day, with a few rows two days behind (late).
HOOKS = [
    "create schema if not exists {{ target.schema }}",
    "create table if not exists {{ target.schema }}.events (k bigint, v bigint, ts timestamp) "
    "tblproperties ('delta.enableChangeDataFeed' = 'true')",
    f"insert into {{{{ target.schema }}}}.events select id % 7, id, timestamp_seconds("
    f"1704067200 + 86400 * (select count(*) div {BATCH} from {{{{ target.schema }}}}.events) "
    f"- case when id % 10 = 0 then 172800 else 0 end) from range({BATCH}) as r(id)",
]
# The feeder project's one model, so that its `dbt run` has a node to run with its hooks.
FEED_MARKER = "{{ config(materialized='view') }}\nselect 1 as fed"
CLEAR_FAILURE = (
    "in use by another process",
    "another run completed step",
    "another run wrote to its tables at the same time",
)


def two_runs_at_once(root: Path, target: Dict[str, Any]) -> List[Tuple[int, str]]:
    """A batch appended, then two `dbt run`s of the project started together; (return code,
    output) of each."""
    feeder = DbtProject.create(
        root.parent / f"{root.name}_feed",
        {"fed.sql": FEED_MARKER},
        target=target,
        project_extra={"on-run-start": HOOKS},
    )
    fed = feeder.dbt("run")
    assert fed.returncode == 0, fed.stdout[-4000:]
    if target.get("method", "session") == "session":
        # Spark's start-up warnings stay out of the terminal: they are in the warehouse's log
        terminal = fed.stdout + fed.stderr
        assert "NativeCodeLoader" not in terminal and "log4j" not in terminal, terminal[-3000:]
        warehouse = Path(str(feeder.target.get("warehouse_dir") or feeder.root / "warehouse"))
        assert "log4j" in (warehouse / "logs" / "spark.log").read_text()
    project = DbtProject.create(root, MODELS, target=target)
    runs = [project.dbt_popen("run"), project.dbt_popen("run")]
    outputs = []
    for process in runs:
        out, _ = process.communicate(timeout=900)
        outputs.append((process.returncode, out))
    return outputs


def model_failures(out: str) -> Dict[str, str]:
    """The error of each model in dbt's summary of a failed run: from its `Failure in model
    <name> (` to its `compiled code at`."""
    failures = {}
    for match in re.finditer(r"Failure in model (\w+) \(", out):
        rest = out[match.end() :]
        end = rest.find("compiled code at")
        failures[match.group(1)] = rest[: end if end >= 0 else 4000]
    return failures


def assert_consistent(root: Path, target: Dict[str, Any], outputs: List[Tuple[int, str]]) -> None:
    """What two runs at once must leave, whichever of them completed.

    A run that failed says why in words, and each model was stepped by one run or the other;
    then one more run (no new batch) catches up, and
    every batch appended is counted once in `totals`, `late_totals` with its quarantine equals
    its query, and `__waterline` has one row per step.
    """
    schema = target["schema"]
    for code, out in outputs:
        if code != 0:
            # each model that failed says why in words (a run may fail one model clearly and
            # another with Spark's stack trace); a run that failed before its models, once
            for text in model_failures(out).values() or [out]:
                assert any(message in text for message in CLEAR_FAILURE), text[-4000:]
    # each model was stepped by one of the runs (over a server, each run may win a different one)
    for name in MODELS:
        done = f"OK created sql incremental_view model {schema}.{name[: -len('.sql')]}"
        assert any(done in out for _, out in outputs), [out[-3000:] for _, out in outputs]
    settle = DbtProject.create(root.parent / f"{root.name}_settle", MODELS, target=target)
    settled = settle.dbt("run")
    assert settled.returncode == 0, settled.stdout[-4000:]

    late = (
        f"select k, ts, n, case when _streamsql_change = 'insert' then 1 else -1 end as w "
        f"from {schema}.late_totals__late"
    )
    check = (
        f"with expected as (select k, count(*) as n, sum(v) as total from {schema}.events "
        f"group by k), actual as (select * from {schema}.totals), "
        f"q as (select k, ts, count(*) as n from {schema}.events group by k, ts), "
        f"signed as (select k, ts, n, 1 as w from {schema}.late_totals union all {late}), "
        "held as (select k, ts, n, sum(w) as w from signed group by k, ts, n "
        "having sum(w) <> 0), q_weighted as (select k, ts, n, count(*) as w from q "
        "group by k, ts, n), "
        f"lines as (select step, count(*) as c from {schema}.late_totals__waterline "
        "group by step) "
        "select (select count(*) from (select * from actual except all select * from expected)) "
        "as extra, (select count(*) from (select * from expected except all select * from "
        f"actual)) as missing, (select count(*) from {schema}.events) as events, "
        "(select sum(n) from actual) as counted, "
        "(select count(*) from (select * from held except all select * from q_weighted)) "
        "as late_extra, (select count(*) from (select * from q_weighted except all "
        "select * from held)) as late_missing, "
        "(select count(*) from lines where c > 1) as doubled_waterlines, "
        "(select count(*) = max(step) from lines) as waterlines_contiguous"
    )
    # read with a project of its own (no hooks) on the same warehouse or server
    checker = DbtProject.create(root.parent / f"{root.name}_check", {}, target=target)
    shown = checker.dbt("show", "--inline", check, "--output", "json")
    assert shown.returncode == 0, shown.stdout[-4000:]
    start = shown.stdout.rindex("{", 0, shown.stdout.index('"show"'))
    row = json.JSONDecoder().raw_decode(shown.stdout[start:])[0]["show"][0]
    assert row == {
        "extra": 0,
        "missing": 0,
        "events": row["events"],
        "counted": row["events"],
        "late_extra": 0,
        "late_missing": 0,
        "doubled_waterlines": 0,
        "waterlines_contiguous": True,
    }, row


# Rounds of two runs at once, each on a schema of its own in the same warehouse (and warm server):
# STREAMSQL_CONCURRENCY_ROUNDS=5 shows a race that one round may miss (README, "Tests").
ROUNDS = int(os.environ.get("STREAMSQL_CONCURRENCY_ROUNDS", "1"))


def test_two_runs_at_once_leave_the_models_consistent(tmp_path):
    for round_ in range(ROUNDS):
        target = {
            "type": "streamsql",
            "schema": f"conc{round_}",
            "warehouse_dir": str(tmp_path / "wh"),
        }
        outputs = two_runs_at_once(tmp_path / f"p{round_}", target)
        assert_consistent(tmp_path / f"p{round_}", target, outputs)
