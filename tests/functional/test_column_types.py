"""Column types a model carries: maps, arrays, structs, and maps inside arrays and structs.

Spark compares no map with `<=>`, `=`, EXCEPT or DISTINCT, so the step matches such rows by a
comparable form of them (planning/types.py, `comparable`). Here a plain model passes every kind
of column through and GROUP BY models group by them and output them, over inserts, deletes and
updates (a map's entries reordered only, NULL maps, NULL values, duplicate rows); after every
step each model's table equals its query recomputed from scratch. A type the step cannot match
is refused at the first step, naming the model, the column and its type.
"""

from __future__ import annotations

from typing import Dict, List

import pytest
from dbt.tests.util import run_dbt

from tests.differential import as_bag, bag_diff, model_columns

SOURCES_YML = """
version: 2
sources:
  - name: raw
    schema: "{{ target.schema }}"
    tables:
      - name: events
      - name: variants
"""

COLUMNS = (
    "id int, k int, m map<string,int>, a array<int>, st struct<x:int,y:string>, "
    "am array<map<string,int>>, sm struct<p:int,q:map<string,int>>, "
    "deep map<string,array<struct<a:int,b:map<string,int>>>>"
)

# (name, SQL, the plan it steps with)
MODELS = {
    "passthrough": (
        "select id, k, m, a, st, am, sm, deep from {{ source('raw', 'events') }} where k >= 0",
        "linear",
    ),
    # no id: rows that are equal but for id are copies of one row
    "copies": ("select k, m, sm, am from {{ source('raw', 'events') }}", "linear"),
    "by_k": (
        "select k, count(*) as n, sum(id) as total, map('n', count(*), 'total', sum(id)) as stats, "
        "named_struct('n', count(*), 'tags', map('k', k)) as packed "
        "from {{ source('raw', 'events') }} group by k",
        "aggregate",
    ),
    "by_struct": (
        "select st, a, count(*) as n, sum(id) as total from {{ source('raw', 'events') }} "
        "group by st, a",
        "aggregate",
    ),
    # Spark's own GROUP BY of a map with a NULL value gives 0 under code generation (the
    # suite's profile runs without it, SMALL_DATA_SETTINGS; docs/known-gaps.md), so the oracle
    # below is right only because the profile's settings reach every session (connections)
    "by_map": (
        "select m, count(*) as n, sum(id) as total from {{ source('raw', 'events') }} group by m",
        "aggregate",
    ),
    "by_nested_map": (
        "select sm, am, count(*) as n from {{ source('raw', 'events') }} group by sm, am",
        "aggregate",
    ),
    # an ORDER BY ... LIMIT breaks ties by every column: one that Spark cannot order (a
    # struct or array holding a map) leaves it a recompute
    "top_ids": (
        "select id, sm, am from {{ source('raw', 'events') }} order by id desc limit 3",
        "recompute",
    ),
    # one row per id: a change applied as updates by key
    "keyed": (
        "{{ config(unique_key='id') }} select id, m, deep from {{ source('raw', 'events') }}",
        "linear",
    ),
    "recomputed": (
        "select id, k, m from {{ source('raw', 'events') }} order by id limit 3 offset 1",
        "recompute",
    ),
    # no n: rows 1 and 2 of id 1 are copies of one row (their objects' fields in either order)
    "variant_rows": ("select id, v from {{ source('raw', 'variants') }}", "linear"),
    "by_variant_id": (
        "select id, count(*) as c, max_by(v, n) as latest from {{ source('raw', 'variants') }} "
        "group by id",
        "aggregate",
    ),
}

VARIANTS = "id int, n int, v variant"

MODELS_YML = "version: 2\nmodels:\n" + "".join(
    f"  - name: {name}\n    data_tests: [matches_recompute]\n" for name in MODELS
)


def event(id: int, k: int, m: str, sm_q: str, am: str = "array(map('x', 1))") -> str:
    """A row of events as SQL; `m`, `sm_q` and `am` are SQL expressions."""
    return (
        f"({id}, {k}, {m}, array({k}, {id % 3}), named_struct('x', {k}, 'y', 'k{k}'), {am}, "
        f"named_struct('p', {k}, 'q', {sm_q}), "
        f"map('d', array(named_struct('a', {id}, 'b', {m}))))"
    )


# The source's changes, one list of statements per step (`run_sql` fills in `{schema}`).
STEPS: List[List[str]] = [
    [
        "insert into {schema}.events values "
        + ", ".join(
            [
                event(1, 1, "map('a', 1, 'b', 2)", "map('z', 1)"),
                event(2, 1, "map('b', 2, 'a', 1)", "map('z', 1)"),  # m equal to row 1's
                event(3, 2, "map('a', 1)", "map('z', 2, 'y', 3)"),
                event(4, 2, "map('a', 1)", "map('z', 2, 'y', 3)"),
                event(5, 3, "NULL", "NULL", "NULL"),
                event(6, 3, "map('a', NULL)", "map()", "array(map('x', NULL), NULL)"),
                event(7, -1, "map()", "map('y', 3, 'z', 2)"),
            ]
        )
    ],
    # deletes: one of two equal rows of `copies`, a NULL map, a map with a NULL value
    ["delete from {schema}.events where id in (2, 5, 6)"],
    # updates: a map's entries reordered only (the same value), a map's value changed, a nested
    # map changed, a row moved to another group; and inserts
    [
        "update {schema}.events set m = map('a', 1, 'b', 2) where id = 1",
        "update {schema}.events set m = map('a', 5) where id = 3",
        "update {schema}.events set sm = named_struct('p', 2, 'q', map('y', 3, 'z', 2)) "
        "where id = 4",
        "update {schema}.events set k = 1 where id = 7",
        "insert into {schema}.events values "
        + ", ".join(
            [
                event(8, 2, "map('b', 2, 'a', 1)", "map('z', 1)"),
                event(9, 2, "map('b', 2, 'a', 1)", "map('z', 1)"),
            ]
        ),
    ],
    # everything of one group and one of two copies gone; a NULL map back
    [
        "delete from {schema}.events where k = 2 and id <> 9",
        "update {schema}.events set m = NULL, am = NULL where id = 1",
        "insert into {schema}.events values " + event(10, 3, "NULL", "NULL", "NULL"),
    ],
]

# The changes of `variants`, one list a step (an object's fields in either order are one value).
VARIANT_STEPS: List[List[str]] = [
    [
        'insert into {schema}.variants values (1, 1, parse_json(\'{{"a": 1, "b": [1, 2]}}\')), '
        "(1, 2, parse_json('{{\"b\": [1, 2], \"a\": 1}}')), (2, 1, parse_json('null')), "
        "(3, 1, NULL), (3, 2, parse_json('\"text\"'))"
    ],
    [
        "delete from {schema}.variants where id = 1 and n = 2",
        "delete from {schema}.variants where id = 3 and n = 1",
    ],
    ['update {schema}.variants set v = parse_json(\'{{"b": [1, 2], "a": 1}}\') where id = 1'],
    [
        'update {schema}.variants set v = parse_json(\'{{"a": {{"c": 1.5}}}}\') where id = 2',
        "insert into {schema}.variants values (1, 3, parse_json('[{{\"x\": 1}}]'))",
    ],
]


def comparable_columns(project, relation: str) -> str:
    """The model's columns to SELECT for a comparison in Python: VARIANTs as JSON text."""
    types = {row[0]: row[1] for row in project.run_sql(f"describe table {relation}", fetch="all")}
    return ", ".join(
        f"to_json(`{c}`) AS `{c}`" if types[c] == "variant" else f"`{c}`"
        for c in model_columns(project, relation)
    )


class TestColumnTypes:
    @pytest.fixture(scope="class")
    def models(self):
        found: Dict[str, str] = {"sources.yml": SOURCES_YML, "models.yml": MODELS_YML}
        for name, (body, _) in MODELS.items():
            found[f"{name}.sql"] = "{{ config(materialized='incremental_view') }}\n" + body
        return found

    def test_every_model_equals_its_query_after_every_step(self, project):
        events = f"{project.test_schema}.events"
        variants = f"{project.test_schema}.variants"
        project.run_sql(f"create table {events} ({COLUMNS}) using delta")
        project.run_sql(f"create table {variants} ({VARIANTS}) using delta")
        compiled: Dict[str, str] = {}
        for step, statements in enumerate(STEPS, start=1):
            for statement in statements + VARIANT_STEPS[step - 1]:
                project.run_sql(statement)  # ({schema} filled in by run_sql)
            results = run_dbt(["run"])
            for result in results:
                name = result.node.name
                response = result.adapter_response
                assert response["step"] == step, (name, response)
                assert response["plan"] == MODELS[name][1], (name, response)
                # and the step computed its change with that plan (not a recompute instead)
                assert response.get("computed") in (MODELS[name][1], ""), (name, response)
                compiled.setdefault(name, result.node.compiled_code.strip().rstrip(";"))
            for name in MODELS:
                relation = f"{project.test_schema}.{name}"
                columns = comparable_columns(project, relation)
                actual = as_bag(project.run_sql(f"select {columns} from {relation}", fetch="all"))
                expected = as_bag(
                    project.run_sql(f"select {columns} from ({compiled[name]}) q", fetch="all")
                )
                assert actual == expected, (
                    f"model {name} differs from its query after step {step}:\n"
                    f"{bag_diff(name, expected, actual)}"
                )
        # and the generic test says so of every model, maps and variants compared as the step
        # compares them
        tested = run_dbt(["test"])
        assert len(tested) == len(MODELS), [r.node.name for r in tested]


class TestUncomparableType:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "shapes.sql": "{{ config(materialized='incremental_view') }}\n"
            "select id, st_geomfromwkb(wkb) as shape from {{ source('raw', 'events') }}",
            "sources.yml": SOURCES_YML,
        }

    def test_a_geometry_column_is_refused_at_the_first_step(self, project):
        schema = project.test_schema
        project.run_sql(f"create table {schema}.events (id int, wkb binary) using delta")
        # the point (1, 2) as WKB
        project.run_sql(
            f"insert into {schema}.events values (1, X'0101000000000000000000F03F0000000000000040')"
        )
        results = run_dbt(["run"], expect_pass=False)
        message = results[0].message
        assert "Model shapes: column shape is of type geometry(0), which Spark cannot compare" in (
            message
        ), message
        assert "st_asbinary(shape)" in message, message
        assert "DATATYPE_MISMATCH" not in message, message
        tables = {row[1] for row in project.run_sql(f"show tables in {schema}", fetch="all")}
        assert "shapes" not in tables, tables  # nothing was written
