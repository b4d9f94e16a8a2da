"""What the planner knows of an expression's Spark type without Spark (planning/types.py)."""

import pytest
import sqlglot

from dbt.adapters.streamsql.planning.binding import bind_tree, parse_query
from dbt.adapters.streamsql.planning.plan import Column, InputTable
from dbt.adapters.streamsql.planning.types import (
    DECIMAL,
    FRACTIONAL,
    INTEGRAL,
    SparkType,
    TypeOracle,
    UncomparableType,
    comparable,
    compared_as_is,
    decimal_precision_scale,
    numeric_kind_of_type,
    parse_type,
    sum_type,
    uncomparable_part,
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


# -- comparing values of any type -----------------------------------------------------------------

INT, STRING = SparkType("int"), SparkType("string")


def test_parse_type_takes_nested_types_apart():
    assert parse_type("map<string,array<struct<a:int,b:map<string,int>>>>") == SparkType(
        "map",
        (
            STRING,
            SparkType(
                "array",
                (SparkType("struct", (INT, SparkType("map", (STRING, INT))), ("a", "b")),),
            ),
        ),
    )


@pytest.mark.parametrize(
    "text, parsed",
    [
        ("decimal(10,2)", SparkType("decimal(10,2)")),
        ("MAP < STRING , INT >", SparkType("map", (STRING, INT))),
        ("map<decimal(10,2),int>", SparkType("map", (SparkType("decimal(10,2)"), INT))),
        ("interval day to second", SparkType("interval day to second")),
        # DESCRIBE prints struct field names as they are, and a window's field `end`
        ("struct<a b:int,end:string>", SparkType("struct", (INT, STRING), ("a b", "end"))),
        ("struct<`x,y`:int,`a``b`:int>", SparkType("struct", (INT, INT), ("x,y", "a`b"))),
        # a field's NOT NULL and COMMENT (DDL) say nothing of its values
        (
            "struct<a:int NOT NULL,b:map<int,int> COMMENT 'x,>',c:string comment 'y'>",
            SparkType("struct", (INT, SparkType("map", (INT, INT)), STRING), ("a", "b", "c")),
        ),
        ("struct<>", SparkType("struct")),
        (
            "map<string collate UTF8_LCASE,int>",
            SparkType("map", (SparkType("string collate utf8_lcase"), INT)),
        ),
    ],
)
def test_parse_type_reads_what_describe_prints(text, parsed):
    assert parse_type(text) == parsed


@pytest.mark.parametrize("text", ["map<string,int", "array<>", "struct<a int>", "int>", ""])
def test_parse_type_refuses_what_is_not_a_type(text):
    with pytest.raises(ValueError):
        parse_type(text)


@pytest.mark.parametrize(
    "data_type",
    ["int", "decimal(10,2)", "string collate UTF8_LCASE", "array<struct<a:int,b:binary>>",
     "struct<start:timestamp,end:timestamp>", "interval day to second", "void", "", "map<int"],
)  # fmt: skip
def test_types_spark_compares_are_compared_as_they_are(data_type):
    assert compared_as_is(data_type)
    assert comparable("t.`c`", data_type) == "t.`c`"
    assert uncomparable_part(data_type) is None


def test_a_map_is_its_entries_sorted():
    assert comparable("t.`m`", "map<string,int>") == "array_sort(map_entries(t.`m`))"
    assert not compared_as_is("map<string,int>")


def test_a_map_of_maps_is_sorted_at_every_level():
    assert comparable("m", "map<int,map<string,int>>") == (
        "array_sort(transform(map_entries(m), _streamsql_e0 -> named_struct('key', "
        "_streamsql_e0.key, 'value', array_sort(map_entries(_streamsql_e0.value)))))"
    )


def test_arrays_and_structs_holding_maps_are_compared_part_by_part():
    assert comparable("a", "array<map<string,int>>") == (
        "transform(a, _streamsql_e0 -> array_sort(map_entries(_streamsql_e0)))"
    )
    # a NULL struct stays NULL, unlike a struct of NULLs; fields compared as they are stay
    assert comparable("t.`s`", "struct<p:int,q:map<string,int>>") == (
        "if(t.`s` IS NULL, NULL, named_struct('f0', t.`s`.`p`, 'f1', "
        "array_sort(map_entries(t.`s`.`q`))))"
    )
    assert comparable("s", "struct<`a b`:map<int,int>>") == (
        "if(s IS NULL, NULL, named_struct('f0', array_sort(map_entries(s.`a b`))))"
    )


def test_nested_lambdas_have_names_of_their_own():
    canonical = comparable("c", "map<string,array<struct<a:int,b:map<string,int>>>>")
    assert canonical == (
        "array_sort(transform(map_entries(c), _streamsql_e0 -> named_struct('key', "
        "_streamsql_e0.key, 'value', transform(_streamsql_e0.value, _streamsql_e1 -> "
        "if(_streamsql_e1 IS NULL, NULL, named_struct('f0', _streamsql_e1.`a`, 'f1', "
        "array_sort(map_entries(_streamsql_e1.`b`))))))))"
    )
    sqlglot.parse_one(f"SELECT {canonical} <=> {canonical}", read="spark")


def test_a_variant_is_its_json():
    assert comparable("v", "variant") == "to_json(v)"
    assert (
        comparable("v", "array<variant>") == "transform(v, _streamsql_e0 -> to_json(_streamsql_e0))"
    )
    assert comparable("v", "map<string,variant>") == (
        "array_sort(transform(map_entries(v), _streamsql_e0 -> named_struct('key', "
        "_streamsql_e0.key, 'value', to_json(_streamsql_e0.value))))"
    )


@pytest.mark.parametrize(
    "data_type, part",
    [
        ("geometry(0)", "geometry(0)"),
        ("interval", "interval"),  # CALENDAR INTERVAL, not an ANSI interval
        ("array<geography(4326)>", "geography(4326)"),
        ("map<string,some_udt>", "some_udt"),
    ],
)
def test_types_without_a_comparable_form_are_named(data_type, part):
    assert uncomparable_part(data_type) == part
    with pytest.raises(UncomparableType, match="which Spark cannot compare"):
        comparable("c", data_type)
