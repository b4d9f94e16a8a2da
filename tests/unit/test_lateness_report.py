"""streamsql_lateness_report's arithmetic: the shares each rung of LATENESS would have kept."""

from __future__ import annotations

import json

from dbt.adapters.streamsql.execution.lateness_report import report, rung_label, summed

LADDER = [0, 1, 10, 60, 300, 600, 1800, 3600]


def row(step, counts, column="ts", unit="seconds", rungs=LADDER):
    behind = json.dumps({"unit": unit, "le": rungs, "counts": counts})
    return {"step": step, "column_name": column, "behind": behind}


def test_rungs_read_as_people_say_them():
    said = [rung_label(v, "seconds") for v in (0, 1, 10, 60, 300, 3600, 7200, 86400, 172800)]
    assert said == ["0 s", "1 s", "10 s", "1 min", "5 min", "1 hour", "2 hours", "1 day", "2 days"]
    assert rung_label(1, "days") == "1 day" and rung_label(7, "days") == "7 days"
    assert rung_label(10**6, "units") == "1,000,000"


def test_counts_sum_over_steps_and_accumulate_over_rungs():
    rows = [
        row(3, [5, 1, 0, 2, 0, 0, 0, 1, 1]),
        row(4, [3, 0, 1, 0, 0, 0, 0, 0, 0]),
        {"step": 2, "column_name": "ts", "behind": None},  # a first step counts nothing
    ]
    (counted,) = summed(rows).values()
    assert counted.steps == [4, 3] and counted.total == 14
    assert counted.counts == [8, 1, 1, 2, 0, 0, 0, 1, 1]
    assert counted.accepted() == [8, 9, 10, 12, 12, 12, 12, 13]  # the last change: beyond 1 hour


def test_a_step_with_another_ladder_is_left_out():
    rows = [row(5, [1, 0, 0, 0, 0, 0, 0, 0, 0]), row(4, [7, 0], unit="units", rungs=[0])]
    (counted,) = summed(rows).values()
    assert counted.steps == [5] and counted.total == 1


def test_the_report_names_the_column_its_lateness_and_each_share():
    text = report(
        "pickups",
        "`demo`.`pickups__waterline`",
        {"TS": "INTERVAL 1 HOUR"},
        [row(3, [5, 1, 0, 2, 0, 0, 0, 1, 1])],
        20,
    )
    lines = text.splitlines()
    assert (
        lines[0] == "Lateness of pickups over its last 20 steps, from `demo`.`pickups__waterline`."
    )
    assert "ts (LATENESS INTERVAL 1 HOUR): 10 changes over steps 3-3" in text
    assert "  0 s                50.00%  (5 changes)" in lines
    assert "  1 min              80.00%  (8 changes)" in lines
    assert "  1 hour             90.00%  (9 changes)" in lines
    assert "  more than 1 hour: 1 change" in lines


def test_no_counts_yet_says_why():
    text = report("m", "t", {"ts": "INTERVAL 1 HOUR"}, [], 20)
    assert "No step has counted how late its changes arrived yet" in text


def test_the_groups_each_lateness_keeps_open_stand_beside_its_share():
    kept = {"ts": (40, [4, 4, 9, 12, 20, 20, 25, 31])}
    text = report(
        "hourly",
        "t",
        {"ts": "INTERVAL 1 HOUR"},
        [row(3, [5, 1, 0, 2, 0, 0, 0, 1, 1])],
        20,
        kept,
        "groups kept open: ...",
    )
    lines = text.splitlines()
    assert "  a LATENESS of    would have accepted            groups kept open" in lines
    assert "  0 s                50.00%  (5 changes)          4 of 40" in lines
    assert "  1 hour             90.00%  (9 changes)          31 of 40" in lines
    assert lines[-1] == "groups kept open: ..."
    # a ladder of another length (the column's type changed) shows no groups
    other = report("m", "t", {}, [row(3, [5, 1, 0, 2, 0, 0, 0, 1, 1])], 20, {"ts": (1, [1])})
    assert "groups kept open" not in other


def test_the_open_groups_are_counted_per_rung_in_one_query():
    from dbt.adapters.streamsql.execution.event_time.lateness import lateness_rules
    from dbt.adapters.streamsql.execution.lateness_report import open_groups, open_groups_query
    from dbt.adapters.streamsql.planning.plan import Column

    rules = lateness_rules(
        "m", [Column("hour", "timestamp"), Column("n", "bigint")], {"hour": "INTERVAL 1 HOUR"}, None
    )
    query = open_groups_query("`demo`.`m`", rules, {"hour": "2020-01-01 02:00:00"})
    assert query is not None and query.startswith("SELECT COUNT(`hour`) AS g_0, COUNT_IF(")
    assert query.endswith(" FROM `demo`.`m`")
    assert "unix_micros(CAST(`hour` AS TIMESTAMP))" in query
    assert open_groups_query("`demo`.`m`", rules, {}) is None  # nothing seen yet
    row = {"g_0": 3, **{f"o_0_{j}": min(j + 1, 3) for j in range(15)}}
    assert open_groups(rules, row) == {"hour": (3, [min(j + 1, 3) for j in range(15)])}


def test_a_steps_that_is_not_a_count_of_steps_is_refused_naming_the_model():
    import pytest

    from dbt.adapters.streamsql.execution.lateness_report import model_report
    from dbt.adapters.streamsql.execution.shared.errors import StepError
    from dbt.adapters.streamsql.execution.shared.model import ModelSettings

    model = ModelSettings(
        name="m", schema="demo", identifier="m", lateness={"ts": "INTERVAL 1 HOUR"}
    )
    for steps in (0, -3, "twenty"):
        with pytest.raises(StepError, match=r"steps is .*; pass a number of steps of m"):
            model_report(None, model, steps)  # refused before it reads anything
    with pytest.raises(StepError, match="model m has no `lateness` config"):
        model_report(None, ModelSettings(name="m", schema="demo", identifier="m"), 20)
