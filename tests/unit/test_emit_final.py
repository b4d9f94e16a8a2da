"""emit_final without Spark: which configs are refused, and the SQL of the groups a step emits.

Whether the rows are right is tests/functional/test_differential_lateness.py's business (the
`final_*` models there, against the oracle's model restricted to final groups).
"""

from __future__ import annotations

import pytest
import sqlglot

from dbt.adapters.streamsql.execution.commit.record import StepRecord
from dbt.adapters.streamsql.execution.event_time import emit_final as emit
from dbt.adapters.streamsql.execution.event_time import lateness as late
from dbt.adapters.streamsql.execution.pipeline.step import StepError, run_step
from dbt.adapters.streamsql.execution.shared.configs import config_warnings
from dbt.adapters.streamsql.planning.plan import Column
from tests.unit.test_step import (
    AGGREGATE,
    CHECKPOINT,
    EVENTS,
    LATE_WINDOW,
    LINEAR,
    model,
    new_session,
    roles,
)

WS = "2024-01-01 10:00:00"


def window_session():
    session = new_session(("demo.events", EVENTS))
    session.column_types["ws"] = "timestamp"
    session.answers.deletes = 0
    return session


def checkpoint(session, label: str, start: int = 0) -> str:
    (found,) = [
        s
        for s in session.statements[start:]
        if CHECKPOINT.match(s) and CHECKPOINT.match(s).group(1) == label
    ]
    return found


def view(session, label: str, start: int = 0) -> str:
    (found,) = [
        s
        for s in session.statements[start:]
        if s.startswith("CREATE OR REPLACE TEMPORARY VIEW") and f"_{label} AS" in s
    ]
    return found


# -- refusals: before anything is written --------------------------------------------------------


@pytest.mark.parametrize(
    "query, configs, sources, message",
    [
        (LINEAR, {"lateness": {"v10": "10"}}, None, "it is not an aggregate (its plan is linear)"),
        (
            AGGREGATE,
            {},
            None,
            "the model declares no lateness. Add lateness on one of its group's columns (k)",
        ),
        (
            AGGREGATE,
            {"lateness": {"total": "10"}},
            None,
            "needs every lateness column to be decided by the model's group, but total is not",
        ),
        (
            LATE_WINDOW,
            {"lateness": {"ws": "INTERVAL 1 HOUR"}, "watermark": {"ws": "INTERVAL 10 MINUTES"}},
            ("demo.events", EVENTS),
            "cannot be combined with watermark",
        ),
    ],
)
def test_emit_final_is_refused_where_it_cannot_apply(query, configs, sources, message):
    session = new_session(sources) if sources else new_session()
    session.column_types["ws"] = "timestamp"
    with pytest.raises(StepError) as error:
        run_step(session, model("m", emit_final=True, **configs), query)
    text = str(error.value)
    assert text.startswith("Model m: config emit_final") and message in text, text
    assert "demo.m" not in session.tables  # refused before the model's table was created


def test_emit_final_cannot_be_switched_on_or_off_without_a_full_refresh():
    session = window_session()
    settings = model("f", lateness={"ws": "INTERVAL 1 HOUR"}, emit_final=True)
    run_step(session, settings, LATE_WINDOW)
    session.append_to("demo.events")
    plain = model("f", lateness={"ws": "INTERVAL 1 HOUR"})
    with pytest.raises(StepError, match="no longer declares emit_final.*--full-refresh"):
        run_step(session, plain, LATE_WINDOW)
    rebuilt = run_step(
        session, model("f", lateness={"ws": "INTERVAL 1 HOUR"}, full_refresh=True), LATE_WINDOW
    )
    assert rebuilt.step == 1 and rebuilt.plan == "aggregate"


def test_emit_final_is_a_config_incremental_view_obeys():
    assert config_warnings("m", {"emit_final": True}, known=["enabled"]) == []


# -- the steps -----------------------------------------------------------------------------------


def test_a_first_step_emits_the_groups_below_the_waterline_as_inserts():
    session = window_session()
    settings = model("f", lateness={"ws": "INTERVAL 1 HOUR"}, emit_final=True)
    result = run_step(session, settings, LATE_WINDOW)
    assert result.plan == "aggregate, emit final" and result.waterline == {"ws": WS}
    record = StepRecord.from_json(session.commits("demo.f")[-1]["userMetadata"])
    assert record.emit_final and record.plan == "aggregate, emit final"
    steps = roles(session)
    # the aggregate's change is judged (quarantine, waterline) before the final groups are read
    order = [
        steps.index(r)
        for r in (
            "materialize net",
            "materialize classified",
            "view final_before",
            "view final_new",
            "view final_after",
            "materialize final",
            "insert demo.f",
            "insert demo.f__waterline",
            "insert demo.f__streamsql_state",
        )
    ]
    assert order == sorted(order)
    assert "merge demo.f" not in steps
    final_new = view(session, "final_new")
    group = "(_streamsql_grp._streamsql_g1.start)"
    assert f"{group} IS NOT NULL AND ({group} < CAST('{WS}' AS timestamp))" in final_new
    assert ">=" not in final_new  # a first step: every group below the waterline
    final = checkpoint(session, "final")
    assert "CAST(1 AS BIGINT) AS _streamsql_weight" in final and "-1" not in final
    insert = next(s for s in session.statements if s.startswith("INSERT INTO `demo`.`f` "))
    assert "_final" in insert and "_on_time" not in insert  # the model gets the final groups


def test_a_later_step_emits_only_the_band_between_the_two_waterlines():
    session = window_session()
    settings = model("f", lateness={"ws": "INTERVAL 1 HOUR"}, emit_final=True)
    run_step(session, settings, LATE_WINDOW)
    session.append_to("demo.events")
    session.answers.waterline = "2024-01-01 12:00:00"
    start = len(session.statements)
    result = run_step(session, settings, LATE_WINDOW)
    assert (result.step, result.plan) == (2, "aggregate, emit final")
    group = "(_streamsql_grp._streamsql_g1.start)"
    for label in ("final_before", "final_new"):  # both sides of the state after the step
        text = view(session, label, start)
        assert f"({group} < CAST('2024-01-01 12:00:00' AS timestamp))" in text
        assert f"{group} >= CAST('{WS}' AS timestamp)" in text
    before = view(session, "final_before", start)
    assert "WHERE _streamsql_step <= 1" in before  # the state as the previous step left it
    assert "merge demo.f" not in roles(session, start)


def test_no_waterline_yet_emits_nothing():
    session = window_session()
    session.answers.waterline, session.answers.inserts = None, 0
    result = run_step(
        session, model("f", lateness={"ws": "INTERVAL 1 HOUR"}, emit_final=True), LATE_WINDOW
    )
    assert result.waterline == {"ws": None}
    steps = roles(session)
    assert "view final_before" not in steps and "insert demo.f" not in steps
    # the change counted is the empty one (a query: it is not the view the step measured)
    (counts,) = [s for s in session.statements if s.startswith("SELECT") and " AS inserts" in s]
    assert "WHERE false" in counts


# -- the predicates --------------------------------------------------------------------------

RULES = late.lateness_rules(
    "m",
    [Column("ws", "timestamp"), Column("b", "bigint")],
    {"ws": "INTERVAL 1 HOUR", "b": "10"},
    {},
)
FINAL = [(RULES[0], "g.a"), (RULES[1], "g.b")]


def test_newly_final_with_several_columns_needs_all_non_null_one_below_now_none_below_before():
    condition = emit.newly_final(FINAL, {"ws": WS, "b": "90"}, {"ws": None, "b": "80"})
    assert condition == (
        f"(g.a) IS NOT NULL AND (g.b) IS NOT NULL AND ((g.a) < CAST('{WS}' AS timestamp) OR "
        "(g.b) < CAST('90' AS bigint)) AND (g.b) >= CAST('80' AS bigint)"
    )
    sqlglot.parse_one(f"SELECT 1 FROM t AS g WHERE {condition}", read="spark")
    assert emit.newly_final(FINAL, {"ws": None, "b": None}, {}) is None


def test_not_final_is_what_a_model_without_emit_final_holds_and_this_one_not_yet():
    assert emit.not_final(FINAL, {"ws": WS, "b": None}) == (
        f"(g.a) IS NOT NULL AND (g.b) IS NOT NULL AND (g.a) >= CAST('{WS}' AS timestamp)"
    )


def test_a_recovery_subtracts_the_groups_not_final_yet_and_emits_from_the_rebuilt_state():
    session = window_session()
    settings = model("f", lateness={"ws": "INTERVAL 1 HOUR"}, emit_final=True)
    run_step(session, settings, LATE_WINDOW)
    session.create_source("demo.events", EVENTS)  # dropped and created again
    session.tables["demo.events"].table_id = "table-2"
    session.append_to("demo.events")
    session.answers.waterline = "2024-01-01 12:00:00"
    start = len(session.statements)
    result = run_step(session, settings, LATE_WINDOW)
    assert result.plan == "aggregate, emit final"
    assert any(note.startswith("recovered (") for note in result.notes)
    # the query's change: minus the table, minus the groups it does not hold yet (not final
    # after step 1: lateness value not NULL and at or above W(1)), from the state of step 1
    net = checkpoint(session, "net", start)
    group = "(_streamsql_grp._streamsql_g1.start)"
    assert (
        f"{group} IS NOT NULL AND {group} >= CAST('{WS}' AS timestamp)" in net
        and "CAST(-1 AS BIGINT) AS _streamsql_weight" in net
    )
    # the final groups come from the rebuilt state (every group, as of now)
    final_new = view(session, "final_new", start)
    assert "_re_rebuilt" in final_new


def test_explain_names_the_emit_final_plan_and_a_refusal():
    from dbt.adapters.streamsql.execution.explain import explain_model

    session = window_session()
    settings = model("f", lateness={"ws": "INTERVAL 1 HOUR"}, emit_final=True)
    text = explain_model(session, settings, LATE_WINDOW)
    assert "Plan: aggregate, emit final (emit_final: the model holds only final groups" in text
    refused = explain_model(session, model("f", emit_final=True), LATE_WINDOW)
    assert "fails before it reads anything: Model f: config emit_final needs lateness" in refused
