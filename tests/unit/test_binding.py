"""The model's SQL text as a step read its inputs: `pinned_text` (planning/binding.py)."""

import pytest

from dbt.adapters.streamsql.planning.binding import pinned_text
from dbt.adapters.streamsql.planning.errors import RecomputeRequired


def test_every_reference_to_a_recorded_input_is_pinned_and_nothing_else_changes():
    sql = (
        "with c as (select * from `demo`.`Events` where note = 'demo.events')\n"
        "select c.id, u.name from c join spark_catalog.demo.users u on c.id = u.id\n"
        "where c.id in (select id from demo.events) and c.k not in (select k from demo.other)"
    )
    assert pinned_text(sql, {"demo.events": 4, "demo.users": 7}) == (
        "with c as (select * from `demo`.`Events` VERSION AS OF 4 where note = 'demo.events')\n"
        "select c.id, u.name from c join spark_catalog.demo.users VERSION AS OF 7 u "
        "on c.id = u.id\n"
        "where c.id in (select id from demo.events VERSION AS OF 4) "
        "and c.k not in (select k from demo.other)"
    )


def test_a_cte_named_like_an_input_and_a_reference_with_a_version_are_left_alone():
    sql = "with events as (select 1 as id) select * from events, demo.events version as of 1 e"
    assert pinned_text(sql, {"events": 3, "demo.events": 4}) == sql


def test_no_versions_no_change_and_versions_become_numbers_only():
    sql = "select * from demo.t as t -- a comment\n;"
    assert pinned_text(sql, {}) == sql
    assert pinned_text(sql, {"DEMO.T": "12"}) == (
        "select * from demo.t VERSION AS OF 12 as t -- a comment\n;"
    )
    with pytest.raises(ValueError):
        pinned_text(sql, {"demo.t": "1; drop table demo.t"})


def test_sql_that_does_not_parse_is_an_error():
    with pytest.raises(RecomputeRequired):
        pinned_text("select from from", {"demo.t": 1})
