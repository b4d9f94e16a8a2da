"""The SQL the adapter generates, recorded: a refactoring must leave it byte for byte the same.

Two records, both in `tests/unit/golden/`:

- `plans.json`: the planner's plan (every field of `StepPlan`, its stages and aggregates) for
  each query of the planner's unit tests (`test_planner.ALL_CASES`).
- `steps.json`: every statement a sequence of steps sends, with its role, for a set of models
  that covers each kind of plan and event-time rule (linear, aggregate, staged, top-K, join,
  recompute, strategy, unique_key, LATENESS, WATERMARK and flush, emit_final), run on the fake
  session (`fake_sql_session.py`). The run id and the times a step records are replaced by
  fixed marks; nothing else is touched.

A change that means to change the SQL regenerates the records and shows the difference in
review: `STREAMSQL_RECORD_SQL=1 pytest tests/unit/test_generated_sql.py`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path
from typing import Any, Callable, Dict, List

import pytest

from dbt.adapters.streamsql.planning.plan import Column
from dbt.adapters.streamsql.planning.planner import PlanningError, plan_step
from tests.unit.fake_sql_session import FakeSqlSession
from tests.unit.test_planner import ALL_CASES, INPUTS
from tests.unit.test_step import AGGREGATE, EVENTS, LATE_WINDOW, LINEAR, SRC, STAGED, model

GOLDEN = Path(__file__).parent / "golden"
RECORD = os.environ.get("STREAMSQL_RECORD_SQL") == "1"
RUN_ID = re.compile(r"\b[0-9a-f]{32}\b")
# times in the step record (when the step started, when its side tables were last cleaned)
CLOCKS = re.compile(r'"(started_at|cleaned_at)":[0-9.e+]+')
CLEANUP_TIMES = re.compile(r"(\[\d+,)[0-9.e+]+\]")  # the `cleanups` pairs [step, time]


def compare(name: str, found: Any) -> None:
    path = GOLDEN / name
    found = json.loads(json.dumps(found))  # tuples as lists, as the record holds them
    if RECORD:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
    expected = json.loads(path.read_text())
    for key in sorted(set(expected) | set(found)):
        assert found.get(key) == expected.get(key), f"{name}: {key} differs from the record"


def plan_record(sql: str, columns) -> Any:
    output = [Column(*(c.split(" ", 1) if " " in c else (c, "string"))) for c in columns]
    try:
        return dataclasses.asdict(plan_step(sql, INPUTS, output))
    except PlanningError as error:
        return {"error": str(error)}


def test_planner_sql_is_as_recorded():
    compare(
        "plans.json",
        {f"{i:03d} {sql}": plan_record(sql, columns) for i, (sql, columns) in enumerate(ALL_CASES)},
    )


# -- steps ------------------------------------------------------------------------------------


def normalized(statements: List[str]) -> List[str]:
    marks: Dict[str, str] = {}

    def mark(match: "re.Match[str]") -> str:
        return marks.setdefault(match.group(0), f"<run {len(marks)}>")

    return [
        CLEANUP_TIMES.sub(r"\g<1>0]", CLOCKS.sub(r'"\1":0', RUN_ID.sub(mark, s)))
        for s in statements
    ]


def traced(session: FakeSqlSession) -> List[str]:
    return normalized([f"-- {role}\n{statement}" for role, statement in session.trace.entries])


def steps_of(
    settings,
    query: str,
    source: str = "demo.src",
    columns=SRC,
    second: Callable[[FakeSqlSession], None] = lambda s: None,
    after: Callable[[FakeSqlSession], None] = lambda s: None,
) -> List[str]:
    """Step 1 over a source, a change of it (`second` sets the fake's answers), step 2, then
    `after` (a flush, a third step)."""
    from dbt.adapters.streamsql.execution.pipeline.step import run_step

    session = FakeSqlSession()
    session.create_source(source, columns)
    run_step(session, settings, query)
    session.append_to(source)
    second(session)
    run_step(session, settings, query)
    after(session)
    return traced(session)


def deletes(count: int) -> Callable[[FakeSqlSession], None]:
    def answer(session: FakeSqlSession) -> None:
        session.delete_from("demo.src", rows=count)
        session.answers.removals, session.answers.deletes = count, count

    return answer


def late_rows(session: FakeSqlSession) -> None:
    session.answers.late, session.answers.deletes = 2, 1
    session.answers.touched_final_groups = ["2024-01-01 08:00:00"]


def held_then_flushed(settings) -> Callable[[FakeSqlSession], None]:
    def flush(session: FakeSqlSession) -> None:
        from dbt.adapters.streamsql.execution.pipeline.step import flush_step

        session.answers.held = 0
        flush_step(session, settings)

    return flush


def third_step(settings, query: str) -> Callable[[FakeSqlSession], None]:
    def again(session: FakeSqlSession) -> None:
        from dbt.adapters.streamsql.execution.pipeline.step import run_step

        session.append_to("demo.src")
        run_step(session, settings, query)

    return again


TOPK = (
    "select id, k, v from (select id, k, v, row_number() over (partition by k order by v "
    "desc) as rn from demo.src) where rn <= 2"
)
JOINED = "select a.id, b.v from demo.src a join demo.src b on a.k = b.k where a.v > 0"
COUNT_DISTINCT = "select k, count(distinct v) as n from demo.src group by k"
LATE_EVENTS = "select id, k, ts from demo.events"
WATERMARK = model("wm", watermark={"ts": "INTERVAL 10 MINUTES"})

SCENARIOS: Dict[str, Callable[[], List[str]]] = {
    "linear, appends": lambda: steps_of(model("m"), LINEAR),
    "linear, deletes": lambda: steps_of(model("m"), LINEAR, second=deletes(2)),
    "linear, strategy recompute": lambda: steps_of(
        model("m", strategy="recompute"), LINEAR, second=deletes(1)
    ),
    "linear, unique_key": lambda: steps_of(
        model("m", unique_key=("id",)), LINEAR, second=deletes(1)
    ),
    "join": lambda: steps_of(model("j"), JOINED, second=deletes(1)),
    "top-k": lambda: steps_of(model("t"), TOPK, second=deletes(1)),
    "aggregate, three steps": lambda: steps_of(
        model("agg"), AGGREGATE, second=deletes(1), after=third_step(model("agg"), AGGREGATE)
    ),
    "aggregate, count distinct": lambda: steps_of(model("cd"), COUNT_DISTINCT, second=deletes(1)),
    "staged": lambda: steps_of(model("st"), STAGED, second=deletes(1)),
    "lateness window": lambda: steps_of(
        model("lw", lateness={"ws": "INTERVAL 1 HOUR"}),
        LATE_WINDOW,
        "demo.events",
        EVENTS,
        second=late_rows,
    ),
    "lateness, append_only": lambda: steps_of(
        model("la", lateness={"ts": "INTERVAL 1 HOUR"}, append_only=True),
        LATE_EVENTS,
        "demo.events",
        EVENTS,
    ),
    "emit_final": lambda: steps_of(
        model("ef", lateness={"ws": "INTERVAL 1 HOUR"}, emit_final=True),
        LATE_WINDOW,
        "demo.events",
        EVENTS,
        second=late_rows,
    ),
    "watermark and flush": lambda: steps_of(
        WATERMARK,
        LATE_EVENTS,
        "demo.events",
        EVENTS,
        second=lambda s: setattr(s.answers, "held", 2),
        after=held_then_flushed(WATERMARK),
    ),
}


def test_step_sql_is_as_recorded():
    found = {}
    for name, scenario in SCENARIOS.items():
        try:
            found[name] = scenario()
        except Exception as error:  # a refusal is recorded too: it must stay the same
            found[name] = [f"{type(error).__name__}: {error}"]
    compare("steps.json", found)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_each_scenario_takes_its_steps(name):
    """The record is of steps that ran, not of errors: every scenario completes."""
    assert len(SCENARIOS[name]()) > 10
