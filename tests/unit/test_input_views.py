"""Inputs that are views: the step plans with each view's query in its place (input_views.py).

What the inlined query computes is the functional tests' business
(tests/functional/test_incremental_view_basics.py, TestViewInputs); here, which text the step
plans with, what it asks the catalog, and what it records.
"""

from __future__ import annotations

import pytest

from dbt.adapters.streamsql.execution.commit.record import sql_fingerprint
from dbt.adapters.streamsql.execution.pipeline import input_views
from dbt.adapters.streamsql.execution.pipeline.input_views import (
    ViewDefinition,
    view_definition,
    view_query,
    with_view,
)
from dbt.adapters.streamsql.execution.pipeline.step import run_step
from dbt.adapters.streamsql.execution.shared.errors import StepError
from tests.unit.test_step import model, new_session, roles, steps_recorded

VIEW = ViewDefinition("demo.stg", "select id, k from src where k is not null", "demo", ("id", "k"))


def test_a_view_reference_becomes_its_query_under_the_views_name_or_the_alias():
    sql = (
        "select s.id, stg.k from demo.stg join demo.src s on s.id = stg.id "
        "join demo.stg as x on 1=1"
    )
    inlined = with_view(sql, VIEW)
    body = (
        "SELECT `id`, `k` FROM (select id, k from `demo`.src where k is not null) "
        "AS _streamsql_view"
    )
    assert inlined == (
        f"select s.id, stg.k from ({body}) AS stg join demo.src s on s.id = stg.id "
        f"join ({body}) as x on 1=1"
    )


def test_a_views_query_reads_in_its_own_schema_and_keeps_its_columns():
    view = ViewDefinition(
        "demo.v",
        "with c as (select * from t) select * from c join other.u on c.id = u.id",
        "staging",
        ("id", "weird col"),
    )
    assert view_query(view) == (
        "SELECT `id`, `weird col` FROM (with c as (select * from `staging`.t) select * from c "
        "join other.u on c.id = u.id) AS _streamsql_view"
    )


def test_the_catalogs_description_of_a_view_and_of_a_table():
    rows = [
        {"col_name": "id", "data_type": "int"},
        {"col_name": "", "data_type": ""},
        {"col_name": "Type", "data_type": "VIEW"},
        {"col_name": "View Text", "data_type": "select * from t"},
        {"col_name": "View Catalog and Namespace", "data_type": "spark_catalog.s1"},
        {"col_name": "View Query Output Columns", "data_type": "[`id`, `v`]"},
    ]
    found = view_definition(lambda statement: rows, "s1.v0")
    assert found == ViewDefinition("s1.v0", "select * from t", "s1", ("id", "v"))
    table = [{"col_name": "Type", "data_type": "MANAGED"}]
    assert view_definition(lambda statement: table, "s1.t") is None

    def missing(statement):
        raise RuntimeError("[TABLE_OR_VIEW_NOT_FOUND]")

    assert view_definition(missing, "s1.nothing") is None


def test_a_model_over_a_view_steps_over_the_views_table_and_records_the_inlined_query():
    session = new_session()
    session.create_view(
        "demo.stg", "select id, k, v from src where k is not null", ["id", "k", "v"]
    )
    query = "select k, count(*) as n from demo.stg group by k"
    first = run_step(session, model("agg"), query)
    assert (first.step, first.plan) == (1, "aggregate")
    inlined = with_view(query, view_definition(session.query, "demo.stg"))
    record = session.commits("demo.agg")[-1]["userMetadata"]
    assert sql_fingerprint(inlined) in record and sql_fingerprint(query) not in record
    # the view's table is the input: its change is what the next step reads
    session.append_to("demo.src")
    start = len(session.statements)
    second = run_step(session, model("agg"), query)
    assert (second.step, second.skipped) == (2, False)
    assert "read the views demo.stg through their queries" in second.notes
    assert "history demo.src" in roles(session, start)
    # a run with nothing new is not a step, through the view too
    assert run_step(session, model("agg"), query).skipped
    assert steps_recorded(session, "demo.agg")[-1] == 2


def test_a_changed_view_is_a_changed_query():
    session = new_session()
    session.create_view("demo.stg", "select id, k from src", ["id", "k"])
    query = "select k, count(*) as n from demo.stg group by k"
    run_step(session, model("agg"), query)
    session.create_view("demo.stg", "select id, k from src where k > 0", ["id", "k"])
    session.append_to("demo.src")
    with pytest.raises(StepError, match="full-refresh") as refused:
        run_step(session, model("agg"), query)
    assert "the definitions of the views it reads (demo.stg)" in str(refused.value)


def test_an_input_that_is_neither_a_table_nor_a_view_still_says_so():
    session = new_session()
    with pytest.raises(StepError, match="reads demo.nothing, which does not exist"):
        run_step(session, model("m"), "select id from demo.nothing")


def test_views_of_views_stop_at_a_depth(monkeypatch):
    monkeypatch.setattr(input_views, "MAX_DEPTH", 2)
    session = new_session()
    session.create_view("demo.v1", "select id, k from src", ["id", "k"])
    session.create_view("demo.v2", "select id, k from v1", ["id", "k"])
    session.create_view("demo.v3", "select id, k from v2", ["id", "k"])
    assert run_step(session, model("two"), "select id, k from demo.v2").step == 1
    with pytest.raises(StepError, match="views of views more than 2 deep"):
        run_step(session, model("three"), "select id, k from demo.v3")
