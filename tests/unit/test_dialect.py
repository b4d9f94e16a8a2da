"""planning/dialect.py: the planner reads Spark SQL's literals as Spark 4 does, and says which of
them it writes differently (tests/functional/test_literal_meaning.py asks Spark for the values)."""

import sqlglot
from sqlglot import exp

from dbt.adapters.streamsql.planning.dialect import (
    LiteralReading,
    changed_readings,
    literal_regions,
    readings_probe,
)
from dbt.adapters.streamsql.planning.plan import DIALECT, Column, InputTable
from dbt.adapters.streamsql.planning.planner import plan_step


def value(sql: str):
    return sqlglot.parse_one(f"SELECT {sql}", read=DIALECT).selects[0]


def test_a_doubled_quote_is_one_quote_not_two_literals():
    literal = value("'O''Brien'")
    assert isinstance(literal, exp.Literal) and literal.this == "O'Brien"
    assert literal.sql(DIALECT) == "'O\\'Brien'"
    assert value("'%''%'").this == "%'%"
    assert value("''''").this == "'"
    assert value("'''a'").this == "'a"
    assert value('"a""b"').this == 'a"b'
    assert value("'a\\\\''b'").this == "a\\'b"  # an escaped backslash, then a doubled quote


def test_adjacent_literals_with_space_between_are_still_concatenated():
    assert value("'a' 'b'").sql(DIALECT) == "CONCAT('a', 'b')"


def test_hexadecimal_digits_after_zero_x_are_a_name_as_in_spark():
    name = value("0x1F")
    assert isinstance(name, exp.Column) and name.name == "0x1F"
    assert value("X'1F'").sql(DIALECT) == "X'1F'"


def test_literal_regions_take_adjacent_strings_and_number_suffixes_whole():
    sql = "select 'a' 'b', 1L, 1.5BD, x'0A', s from t where s like '%''%' and n > 10"
    assert [r.text for r in literal_regions(sql)] == [
        "'a' 'b'",
        "1L",
        "1.5BD",
        "x'0A'",
        "'%''%'",
        "10",
    ]
    assert all(sql[r.start :].startswith(r.text) for r in literal_regions(sql))


def test_only_literals_written_differently_need_spark():
    readings = changed_readings(
        "select 'plain', 10, 'plain', 'O''Brien', 1L, \"dq\" from t where x = 'O''Brien'"
    )
    assert readings == [
        LiteralReading("'O''Brien'", "'O\\'Brien'"),
        LiteralReading("1L", "CAST(1 AS BIGINT)"),
        LiteralReading('"dq"', "'dq'"),
    ]
    assert changed_readings("select a, 'x' from t where n > 1.5") == []


def test_the_probe_compares_type_and_value_null_safely():
    probe = readings_probe([LiteralReading("1L", "CAST(1 AS BIGINT)")])
    assert probe == (
        "SELECT typeof(1L) = typeof(CAST(1 AS BIGINT)) AND (1L) <=> (CAST(1 AS BIGINT)) AS `r0`"
    )


INPUTS = [InputTable("demo.t", (Column("id", "int"), Column("s", "string")))]
COLUMNS = [Column("id", "int"), Column("s", "string")]
QUOTED = "select id, s from demo.t where s like '%''%'"


def test_the_fast_path_keeps_a_doubled_quote_as_one_pattern():
    plan = plan_step(QUOTED, INPUTS, COLUMNS)
    assert plan.kind == "linear"
    assert "LIKE '%\\'%'" in plan.change_sql
    assert "CONCAT" not in plan.change_sql


def test_a_reading_the_check_finds_different_is_recomputed_with_its_reason():
    asked = []

    def check(sql, rendered):
        asked.append((sql, rendered))
        return "the planner reads the literal X as Y"

    plan = plan_step(QUOTED, INPUTS, COLUMNS, check_meaning=check)
    assert plan.kind == "recompute"
    assert plan.reason == "recompute: the planner reads the literal X as Y"
    sql, rendered = asked[0]
    assert sql == QUOTED
    assert "LIKE '%\\'%'" in rendered and "__streamsql_new_0__" in rendered


def test_a_reading_the_check_finds_alike_keeps_the_fast_path():
    plan = plan_step(QUOTED, INPUTS, COLUMNS, check_meaning=lambda sql, rendered: None)
    assert plan.kind == "linear"
