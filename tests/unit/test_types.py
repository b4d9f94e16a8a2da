"""What the planner knows of an expression's Spark type without Spark (planning/types.py)."""

import pytest

from dbt.adapters.streamsql.planning.binding import bind_tree, parse_query
from dbt.adapters.streamsql.planning.plan import Column, InputTable
from dbt.adapters.streamsql.planning.types import (
    DECIMAL,
    FRACTIONAL,
    INTEGRAL,
    TypeOracle,
    decimal_precision_scale,
    numeric_kind_of_type,
    sum_type,
)

EVENTS = InputTable(
    "demo.events",
    (
        Column("id", "bigint"),
        Column("ts", "timestamp"),
        Column("price", "decimal(10,2)"),
        Column("w", "double"),
    ),
)


@pytest.mark.parametrize(
    "data_type, kind",
    [
        ("int", INTEGRAL),
        ("BIGINT", INTEGRAL),
        ("long", INTEGRAL),
        ("double", FRACTIONAL),
        ("float", FRACTIONAL),
        ("decimal(10,2)", DECIMAL),
        ("decimal", DECIMAL),
        ("numeric(5)", DECIMAL),
        ("string", None),
        ("timestamp", None),
        (None, None),
    ],
)
def test_numeric_kind_of_a_type_name(data_type, kind):
    assert numeric_kind_of_type(data_type) == kind


def test_decimal_precision_and_scale_default_as_spark_does():
    assert decimal_precision_scale("decimal(12, 3)") == (12, 3)
    assert decimal_precision_scale("decimal") == (10, 0)
    assert decimal_precision_scale("double") is None


def test_sum_types_follow_spark():
    assert sum_type("int", None) == "bigint"
    assert sum_type("float", None) == "double"
    assert sum_type("decimal(10,2)", None) == "decimal(20,2)"
    assert sum_type("decimal(35,2)", None) == "decimal(38,2)"
    assert sum_type(None, INTEGRAL) == "bigint"
    assert sum_type(None, DECIMAL) == ""  # the exact decimal type is unknown


def oracle_and_projections(sql: str):
    tree = bind_tree(parse_query(sql), [EVENTS])
    return TypeOracle([EVENTS]), [p.unalias() for p in tree.expressions]


def test_types_of_columns_windows_and_what_a_derived_table_passes_through():
    oracle, projections = oracle_and_projections(
        "select id, window(ts, '1 hour'), x.p, x.q, (price) "
        "from demo.events join (select price as p, price * 2 as q from demo.events) x on true"
    )
    assert [oracle.type_of(p) for p in projections] == [
        "bigint",
        "struct<start:timestamp,end:timestamp>",
        "decimal(10,2)",
        None,
        "decimal(10,2)",
    ]


def test_numeric_kinds_of_literals_and_arithmetic():
    oracle, projections = oracle_and_projections(
        "select 1, 1.5, 1e3, id + 1, id / 2, price * id, w - 1, -id, upper('a') from demo.events"
    )
    assert [oracle.numeric_kind(p) for p in projections] == [
        INTEGRAL,
        DECIMAL,
        FRACTIONAL,
        INTEGRAL,
        FRACTIONAL,
        DECIMAL,
        FRACTIONAL,
        INTEGRAL,
        None,
    ]
