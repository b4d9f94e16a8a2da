"""Placeholders are realized when a statement first uses them, and only then (bindings.py)."""

import pytest

from dbt.adapters.streamsql.execution.engine.bindings import INLINE, MATERIALIZED, VIEW, Bindings
from dbt.adapters.streamsql.execution.engine.views import StepViews
from tests.unit.fake_sql_session import FakeSqlSession

NEW, OLD, DELTA = "__streamsql_new_0__", "__streamsql_old_0__", "__streamsql_delta_0__"


def bindings():
    session = FakeSqlSession()
    return Bindings(StepViews(session, "p")), session


def test_nothing_is_run_for_what_no_statement_reads():
    b, session = bindings()
    b.define(NEW, "new_0", "SELECT * FROM t VERSION AS OF 2", INLINE)
    b.define(OLD, "old_0", "SELECT * FROM t VERSION AS OF 1", VIEW)
    b.define(DELTA, "delta_0", "SELECT * FROM table_changes('t', 2, 2)", MATERIALIZED)
    assert b.bind(f"SELECT * FROM {NEW} AS n") == (
        "SELECT * FROM (SELECT * FROM t VERSION AS OF 2) AS n"
    )
    assert session.statements == []


def test_a_view_and_a_materialized_view_are_made_once_on_first_use():
    b, session = bindings()
    b.define(OLD, "old_0", "SELECT * FROM t VERSION AS OF 1", VIEW)
    b.define(DELTA, "delta_0", "SELECT 1", MATERIALIZED)
    first = b.bind(f"SELECT * FROM {OLD} o JOIN {DELTA} d JOIN {OLD} p")
    second = b.bind(f"SELECT * FROM {DELTA}")
    assert first == "SELECT * FROM p_old_0 o JOIN p_delta_0 d JOIN p_old_0 p"
    assert second == "SELECT * FROM p_delta_0"
    assert session.statements == [
        "CREATE OR REPLACE TEMPORARY VIEW p_old_0 AS SELECT * FROM t VERSION AS OF 1",
        "CHECKPOINT p_delta_0 AS SELECT 1",
    ]


def test_local_names_and_set_text_come_as_they_are():
    b, _ = bindings()
    b.set("__streamsql_bound_0__", "(x >= 3)")
    assert (
        b.bind(
            "a AND __streamsql_bound_0__ FROM __streamsql_state__", {"__streamsql_state__": "st"}
        )
        == "a AND (x >= 3) FROM st"
    )


def test_an_unbound_placeholder_is_an_error_naming_it():
    b, _ = bindings()
    with pytest.raises(KeyError, match=DELTA):
        b.bind(f"SELECT * FROM {DELTA}")
