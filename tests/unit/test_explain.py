"""streamsql_explain's text (execution/explain.py): pure formatting of a plan and a step record."""

from __future__ import annotations

from typing import Optional

import pytest

from dbt.adapters.streamsql.execution.commit.record import StepRecord
from dbt.adapters.streamsql.execution.event_time.rules import EventTimeRules
from dbt.adapters.streamsql.execution.event_time.watermark import WatermarkRule
from dbt.adapters.streamsql.execution.explain import (
    Explanation,
    InputReading,
    avoid_recompute,
    format_explanation,
    input_text,
    merge_key_text,
    plan_lines,
    split_reason,
    top_reason,
)
from dbt.adapters.streamsql.execution.pipeline.keys import merge_key
from dbt.adapters.streamsql.execution.shared.lateness_rule import LatenessRule
from dbt.adapters.streamsql.execution.shared.model import ModelSettings
from dbt.adapters.streamsql.planning.plan import Column, InputTable, StepPlan
from dbt.adapters.streamsql.planning.planner import plan_step

EVENTS = InputTable(
    "s.events", (Column("id", "bigint"), Column("ts", "timestamp"), Column("v", "int"))
)
KEYS = InputTable("s.keys", (Column("id", "bigint"), Column("name", "string")))
TS = Column("ts", "timestamp")
NO_RULES = EventTimeRules([], [])


def plan(sql: str, *columns: str) -> StepPlan:
    return plan_step(sql, (EVENTS, KEYS), [Column(*c.split()) for c in columns])


def model(name: str = "m") -> ModelSettings:
    return ModelSettings(name=name, schema="s", identifier=name)


def record(step: int = 3, **fields) -> StepRecord:
    return StepRecord(step=step, run_id="r", sql_fingerprint="f", **fields)


def explanation(
    step_plan: StepPlan,
    rules: EventTimeRules = NO_RULES,
    last: Optional[StepRecord] = None,
    **fields,
) -> Explanation:
    return Explanation(
        model(),
        step_plan,
        rules,
        merge_key(step_plan, rules.columns),
        fields.pop("inputs", [InputReading("s.events", 7, None)]),
        "f",
        last=last,
        **fields,
    )


LINEAR = "select id, ts, v from s.events where v > 0"
AGGREGATE = (
    "select date_trunc('hour', ts) as hour, count(*) as n, max(v) as top from s.events group by 1"
)
STAGED = (
    "select k.name, t.n from s.keys k "
    "join (select id, count(*) as n from s.events group by id) t on k.id = t.id"
)
TOP_3 = "select id, v from s.events order by v desc limit 3"
TOP_3_AFTER_2 = "select id, v from s.events order by v desc limit 3 offset 2"


def test_linear_plan_lists_its_constructs_and_recomputes_nothing():
    lines = plan_lines(plan(LINEAR, "id bigint", "ts timestamp", "v int"))
    assert lines[0] == "Plan: linear"
    assert "  reason      fast path: filter, projection" in lines
    assert "  fast path   filter, projection" in lines
    assert "  recomputed  nothing: a step costs its inputs' change" in lines


def test_aggregate_plan_names_what_it_recomputes_for_a_group_and_why():
    text = "\n".join(plan_lines(plan(AGGREGATE, "hour timestamp", "n bigint", "top int")))
    assert "fast path    group by (count(*), max)" in text
    assert "recomputed   min/max recompute a group after a deletion" in text
    assert "inputs that only gain rows never need it" in text


def test_staged_plan_shows_each_stage_and_its_state_table():
    staged = plan(STAGED, "name string", "n bigint")
    assert top_reason(staged) == "projection, inner join"
    found = format_explanation(explanation(staged))
    assert "  stage0      group by (count(*)) (an aggregate below the top, columns id, n)" in found
    assert "s.m__streamsql_stage0" in found
    assert "s.m__streamsql_state" not in found  # the top is linear


def test_recompute_plan_says_what_forces_it_and_how_to_avoid_it():
    text = "\n".join(plan_lines(plan(TOP_3_AFTER_2, "id bigint", "v int")))
    assert "Plan: recompute" in text
    assert "recomputed   the whole query, because LIMIT with OFFSET is not maintained" in text
    assert "to avoid it  drop the OFFSET (ORDER BY ... LIMIT k at the top" in text


def test_global_top_k_says_when_a_step_reads_the_whole_query():
    text = "\n".join(plan_lines(plan(TOP_3, "id bigint", "v int")))
    assert "Plan: linear" in text
    assert "fast path   projection, global top-k (limit 3)" in text
    assert "recomputed  the query's first rows over its new inputs, only on a step whose" in text
    assert "the 10 below its cut the step record" in " ".join(text.split())
    assert "nothing" not in text


def test_global_top_k_under_lateness_says_no_rows_below_the_cut_are_kept():
    # the step keeps none there (step.py: LATENESS or WATERMARK may set part of a change aside)
    rules = EventTimeRules([LatenessRule(Column("v", "int"), "10")], [])
    text = " ".join("\n".join(plan_lines(plan(TOP_3, "id bigint", "v int"), rules)).split())
    assert "the model's (no rows below the cut are kept under LATENESS or WATERMARK)" in text
    assert "below its cut the step record keeps" not in text


def test_split_reason_separates_shape_and_notes():
    assert split_reason("group by (count(*), max); min/max recompute a group after a deletion") == (
        "group by (count(*), max)",
        ["min/max recompute a group after a deletion"],
    )
    assert split_reason("projection") == ("projection", [])


@pytest.mark.parametrize(
    "why, advice",
    [
        (
            "window function row_number() without PARTITION BY is not maintained incrementally",
            "partition the window",
        ),
        ("window function collect_list() is not maintained incrementally", "LAG, LEAD"),
        (
            "window function first_value() over a RANGE frame (the default with ORDER BY) is not "
            "maintained incrementally",
            "ROWS frame",
        ),
        ("window function sum() without PARTITION BY is not maintained", "partition the window"),
        ("LIMIT is not maintained incrementally", "top rows per partition"),
        ("OFFSET is not maintained incrementally", "top rows per partition"),
        ("LIMIT without ORDER BY (any k rows) is not maintained", "add an ORDER BY"),
        (
            "ORDER BY t.v ... LIMIT orders by something the query does not select, which is not",
            "select what the ORDER BY orders by",
        ),
        ("ORDER BY ... LIMIT over a MAP<STRING,INT> column (m) is not", "leave the column out"),
        ("NOT IN (subquery) over several columns is not maintained incrementally", "NOT EXISTS"),
        ("correlated NOT IN (subquery) is not maintained incrementally", "NOT EXISTS"),
        (
            "FULL OUTER JOIN without an equality between its two sides is not maintained "
            "incrementally",
            "add an equality",
        ),
        (
            "EXISTS other than a condition ANDed into a WHERE clause (under OR, NOT, CASE, in a "
            "projection or join condition) is not maintained incrementally",
            "AND the condition",
        ),
        (
            "scalar subquery other than an aggregate without GROUP BY (correlated by equalities "
            "only), read in a WHERE or in the projections of a block without aggregates or "
            "windows, is not maintained incrementally",
            "join the subquery",
        ),
        ("nondeterministic function rand() is not maintained incrementally", "outside the model"),
        ("user-defined function my_udf() may be nondeterministic or an aggregate", "built-in"),
        (
            "INTERSECT ALL whose sides repeat a column name is not maintained incrementally",
            "a name of its own",
        ),
        ("GROUP BY ALL is not maintained incrementally", "list the GROUP BY"),
        (
            "session_window() merges rows across changes and is not maintained incrementally",
            "window()",
        ),
        ("the query reads no input", "reads no table"),
        ("something new", "docs/sql-support.md"),
    ],
)
def test_avoid_recompute_names_a_rewrite_per_construct(why, advice):
    assert advice in avoid_recompute(why)


def test_merge_key_of_an_aggregate_naming_its_groups():
    grouped = plan(AGGREGATE, "hour timestamp", "n bigint", "top int")
    assert merge_key_text(grouped, NO_RULES, merge_key(grouped, [])).startswith(
        "(hour): a changed group's row is updated in place"
    )
    # A LATENESS column outside the key: rows are matched whole.
    rules = EventTimeRules([LatenessRule(Column("top", "int"), "10")], [])
    text = merge_key_text(grouped, rules, merge_key(grouped, rules.columns))
    assert text.startswith(
        "none: the output names its groups by (hour), but the "
        "LATENESS/WATERMARK column(s) top are not among them"
    )


def test_merge_key_of_a_linear_model_and_a_global_aggregate():
    linear = plan(LINEAR, "id bigint", "ts timestamp", "v int")
    assert merge_key_text(linear, NO_RULES, None).startswith("none: a step that only adds rows")
    total = plan("select count(*) as n from s.events", "n bigint")
    assert merge_key_text(total, NO_RULES, merge_key(total, [])).startswith(
        "the one row of a global aggregate"
    )


def test_input_versions_against_the_last_step():
    last = record(step=4)
    assert (
        input_text(InputReading("s.events", 9, 6), last)
        == "step 4 read version 6; the next step reads 7..9 (3 commits)"
    )
    assert (
        input_text(InputReading("s.events", 6, 6), last) == "step 4 read version 6; unchanged since"
    )
    assert (
        input_text(InputReading("s.events", 2, None), None)
        == "not read yet; the next step reads version 2 in full"
    )


def test_whole_text_with_lateness_watermark_and_a_last_step():
    linear = plan(LINEAR, "id bigint", "ts timestamp", "v int")
    rules = EventTimeRules(
        [LatenessRule(TS, "INTERVAL 1 HOUR", "INTERVAL 1 DAY")],
        [WatermarkRule(TS, "INTERVAL 10 MINUTES")],
    )
    last = record(
        step=3,
        input_versions={"s.events": 5},
        plan="linear",
        waterline={"ts": "2024-01-01 10:00:00"},
        max_seen={"ts": "2024-01-01 11:00:00"},
        watermark_seen={"ts": "2024-01-01 11:05:00"},
    )
    text = format_explanation(
        explanation(linear, rules, last, held=4, inputs=[InputReading("s.events", 7, 5)])
    )
    assert text.splitlines()[0] == "streamsql_explain: m (s.m)"
    for expected in [
        "  s.m__late       LATENESS quarantine: late, NULL and future changes",
        "  s.m__pending    changes WATERMARK holds or held",
        "  ts (timestamp): lateness INTERVAL 1 HOUR, max_future INTERVAL 1 DAY",
        "    waterline after step 3: 2024-01-01 10:00:00 (largest value seen: 2024-01-01",
        "  held now: 4 change(s); streamsql_flush releases them all",
        "  s.events  step 3 read version 5; the next step reads 6..7 (2 commits)",
        "  SQL: the same as step 3's (fingerprint f)",
        "  step 4 reads the inputs' changes listed above",
    ]:
        assert expected in text, expected
    assert all(len(line) <= 100 for line in text.splitlines())


def test_next_step_not_run_yet_unchanged_and_failing():
    linear = plan(LINEAR, "id bigint", "ts timestamp", "v int")
    assert "not run yet: the first `dbt run` creates" in format_explanation(explanation(linear))
    unchanged = explanation(
        linear,
        last=record(step=2, input_versions={"s.events": 7}),
        inputs=[InputReading("s.events", 7, 7)],
        unchanged=True,
    )
    assert "no input changed since step 2: the next run is not a step" in format_explanation(
        unchanged
    )
    failing = explanation(linear, last=record(step=2), problem="Model m: its SQL changed")
    assert "fails before it reads anything: Model m: its SQL changed" in format_explanation(failing)
