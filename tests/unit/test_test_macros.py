"""The generic test `matches_recompute` (macros/tests/), rendered without dbt or Spark: what it
reads when the model has a completed step (each table pinned to that step), and when it has none.

The macro files are loaded into one Jinja environment with what dbt gives a test's context
stubbed: `graph`, `adapter`, `render`, `api`, `modules`, and `return` as dbt has it (the macro
stops and its caller gets the value).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict, List, Optional

import jinja2

from dbt.adapters.streamsql.planning.binding import pinned_text
from dbt.adapters.streamsql.planning.types import comparable

MACROS = Path(__file__).resolve().parents[2] / "dbt" / "include" / "streamsql" / "macros" / "tests"

MODEL_SQL = """{{ config(materialized='incremental_view', lateness={'ts': 'INTERVAL 1 HOUR'},
                     watermark={'ts': 'INTERVAL 10 MINUTES'}) }}
select e.id, e.ts, e.v from {{ source('raw', 'events') }} as e
join {{ ref('users') }} u on e.id = u.id"""


class Returned(Exception):
    def __init__(self, value: Any) -> None:
        self.value = value


def do_return(value: Any) -> None:
    raise Returned(value)


class Relation:
    def __init__(self, schema: str, identifier: str, database: Optional[str] = None) -> None:
        self.schema, self.identifier, self.database = schema, identifier, database

    def __str__(self) -> str:
        return f"`{self.schema}`.`{self.identifier}`"


class Column:
    def __init__(self, name: str, dtype: str) -> None:
        self.name, self.dtype = name, dtype


class Adapter:
    def __init__(self, steps: List[Dict[str, Any]], columns: Optional[List[Column]] = None) -> None:
        self.steps = steps
        self.asked: List[Any] = []
        self.columns = columns or [
            Column("id", "int"),
            Column("ts", "timestamp"),
            Column("v", "double"),
        ]

    def get_columns_in_relation(self, relation: Relation) -> List[Column]:
        return self.columns

    def quote(self, name: str) -> str:
        return f"`{name}`"

    def get_relation(self, database: Any, schema: str, identifier: str) -> Relation:
        return Relation(schema, identifier)

    def streamsql_completed_steps(self, relation: Relation, count: int) -> List[Dict[str, Any]]:
        self.asked.append((str(relation), count))
        return self.steps[:count]

    def streamsql_pinned_query(self, sql: str, versions: Dict[str, int]) -> str:
        return pinned_text(sql, versions)

    def streamsql_comparable(self, expression: str, data_type: str) -> str:
        return comparable(expression, data_type)


def node(name: str, raw_code: str = "", **config: Any) -> Dict[str, Any]:
    return {
        "resource_type": "model",
        "name": name,
        "alias": name,
        "schema": "demo",
        "database": None,
        "package_name": "p",
        "version": None,
        "latest_version": None,
        "raw_code": raw_code,
        "config": {"materialized": "incremental_view", **config},
    }


def render_test(steps: List[Dict[str, Any]], columns: Optional[List[Column]] = None) -> str:
    """The SQL `matches_recompute` renders for the model `demo.m` (MODEL_SQL)."""
    adapter = Adapter(steps, columns)
    environment = jinja2.Environment(extensions=["jinja2.ext.do"], undefined=jinja2.StrictUndefined)
    config = {"lateness": {"ts": "INTERVAL 1 HOUR"}, "watermark": {"ts": "INTERVAL 10 MINUTES"}}
    graph = {"nodes": {"model.p.m": node("m", MODEL_SQL, **config), "model.p.users": node("users")}}

    def render(code: str) -> str:  # the test's context: source() and config() as dbt has them
        return environment.from_string(code).render(
            config=lambda **kwargs: "", source=lambda source, table: f"`demo`.`{table}`"
        )

    context: Dict[str, Any] = {
        "execute": True,
        "graph": graph,
        "adapter": adapter,
        "render": render,
        "modules": type("Modules", (), {"re": re})(),
        "api": type("Api", (), {"Relation": type("R", (), {"create": staticmethod(Relation)})})(),
        "exceptions": type("E", (), {"raise_compiler_error": staticmethod(do_return)})(),
        "return": do_return,
    }
    modules: List[Any] = []

    def called(name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            macro = next(getattr(m, name) for m in modules if hasattr(m, name))
            try:
                return str(macro(*args, **kwargs))
            except Returned as returned:
                return returned.value

        return call

    sources = [path.read_text() for path in sorted(MACROS.glob("*.sql"))]
    for source in sources:
        for macro in environment.parse(source).find_all(jinja2.nodes.Macro):
            context[macro.name] = called(macro.name)
    modules.extend(environment.from_string(s, globals=dict(context)).module for s in sources)
    sql = context["test_matches_recompute"](Relation("demo", "m"))
    assert adapter.asked == [("`demo`.`m`", 1)]
    return " ".join(sql.split())


def test_every_table_is_read_as_of_the_last_completed_step():
    step = {"step": 3, "model_version": 7, "input_versions": {"demo.events": 12, "demo.users": 4}}
    sql = render_test([step])
    assert "from `demo`.`m` version as of 7 union all" in sql
    assert (
        "from `demo`.`events` VERSION AS OF 12 as e join `demo`.`users` VERSION AS OF 4 u "
        "on e.id = u.id"
    ) in sql
    assert "from `demo`.`m__late` where _streamsql_step <= 3 union all" in sql
    assert (
        "from `demo`.`m__pending` where _streamsql_held_step <= 3 and "
        "(_streamsql_released_step is null or _streamsql_released_step > 3) )"
    ) in sql


def test_before_the_first_step_every_table_is_read_as_it_is_now():
    for steps in ([], [{"step": 0, "model_version": 0, "input_versions": {}}]):
        sql = render_test(steps)
        assert "version as of" not in sql.lower()
        assert "from `demo`.`m` union all" in sql
        assert "from `demo`.`events` as e join `demo`.`users` u" in sql
        assert "from `demo`.`m__late` union all" in sql
        assert "from `demo`.`m__pending` where _streamsql_released_step is null )" in sql


def test_a_map_column_is_grouped_by_its_sorted_entries():
    columns = [Column("id", "int"), Column("m", "map<string,int>"), Column("v", "double")]
    sql = render_test([], columns)
    assert "select `id`, array_sort(map_entries(`m`)) as `m`, round(`v`, 6) as `v`," in sql
    assert "group by `id`, `m`, `v`" in sql
