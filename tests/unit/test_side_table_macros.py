"""The side tables' macros (macros/side_tables/), rendered without dbt or Spark.

As dbt-spark's unit tests render its macros: the macro files loaded into a Jinja environment, with
`adapter.dispatch`, `config` and `return` stubbed the way dbt provides them. A project's macros
(`project`) come first, as dbt searches the root project before the adapter's package. What the
default macros render is compared with the statements the step has always sent (the model
table's DDL, which Python still writes: statements.create_table).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import jinja2
import pytest
import sqlglot

from dbt.adapters.streamsql.execution.engine import side_tables as side
from dbt.adapters.streamsql.execution.engine import statements as sql
from dbt.adapters.streamsql.execution.event_time import lateness as late
from dbt.adapters.streamsql.execution.event_time import watermark as wm
from dbt.adapters.streamsql.planning.plan import Column

COLS = [Column("id", "bigint"), Column("ts", "timestamp"), Column("odd`name", "struct<a:int>")]
TABLES = {
    side.LATE: ("m__late", late.late_table_columns(COLS)),
    side.WATERLINE: ("m__waterline", list(late.WATERLINE_COLUMNS)),
    side.PENDING: ("m__pending", COLS + list(wm.PENDING_COLUMNS)),
}


class Macros:
    """The package's side-table macros, after a project's own, in one Jinja environment.

    As in dbt, a macro calls another by its bare name whichever file holds it (the project's
    first), and `adapter.dispatch(name, 'dbt')` looks for `streamsql__`, `spark__`, then
    `default__<name>`, in the project first.
    """

    def __init__(self, project: str = "", config: Optional[Dict[str, Any]] = None) -> None:
        settings = dict(config or {})
        stubs: Dict[str, Any] = {
            "adapter": self,
            "config": type(
                "Config",
                (),
                {"get": staticmethod(lambda key, default=None: settings.get(key, default))},
            )(),
            "return": lambda value: value,
        }
        environment = jinja2.Environment(
            extensions=["jinja2.ext.do"], undefined=jinja2.StrictUndefined
        )
        sources = [project] + [path.read_text() for path in sorted(side.MACRO_DIR.glob("*.sql"))]
        for source in sources:  # every macro by its bare name, found when called
            for macro in environment.parse(source).find_all(jinja2.nodes.Macro):
                stubs[macro.name] = (
                    lambda name: lambda *args, **kwargs: self.find(name)(*args, **kwargs)
                )(macro.name)
        self.modules = [
            environment.from_string(source, globals=dict(stubs)).module for source in sources
        ]

    def find(self, name: str) -> Any:
        for module in self.modules:
            if hasattr(module, name):
                return getattr(module, name)
        return None

    def dispatch(self, name: str, namespace: Optional[str] = None) -> Any:
        assert namespace == "dbt"  # the namespace whose search starts at the root project
        for prefix in side.DISPATCH_PREFIXES:
            found = self.find(f"{prefix}__{name}")
            if found is not None:
                return found
        raise AssertionError(f"nothing implements {name}")

    def __call__(self, name: str, **arguments: Any) -> Any:
        return self.find(name)(**arguments)


def statements(project: str = "", config: Optional[Dict[str, Any]] = None) -> side.SideTableSql:
    return side.SideTableSql(Macros(project, config))


def ddl(kind: str, replace: bool, project: str = "", **config: Any) -> str:
    name, columns = TABLES[kind]
    return statements(project, config).create_table(kind, "demo", name, columns, replace)


@pytest.mark.parametrize("kind", sorted(TABLES))
def test_the_default_ddl_is_the_adapters_delta_table_ddl(kind):
    name, columns = TABLES[kind]
    created = sql.create_table(f"`demo`.`{name}`", columns)
    assert ddl(kind, replace=True) == created
    assert ddl(kind, replace=False) == created.replace(
        "CREATE OR REPLACE TABLE", "CREATE TABLE IF NOT EXISTS"
    )
    sqlglot.parse_one(ddl(kind, replace=True), read="spark")


def test_the_ddl_macro_takes_more_properties_and_a_location():
    project = """
{% macro streamsql__create_pending_table(relation, columns, replace) -%}
  {{ return(streamsql_side_table_ddl(relation, columns, replace,
            properties={'delta.enableChangeDataFeed': 'false', 'delta.appendOnly': false},
            location='/lake/' ~ relation.identifier)) }}
{%- endmacro %}
"""
    statement = ddl(side.PENDING, replace=True, project=project)
    assert statement.endswith(
        ") USING delta LOCATION '/lake/m__pending' TBLPROPERTIES ('delta.enableChangeDataFeed' = "
        "'false', 'delta.enableDeletionVectors' = 'true', 'delta.appendOnly' = 'False')"
    )
    name, columns = TABLES[side.PENDING]
    assert statement == sql.create_table(
        f"`demo`.`{name}`",
        columns,
        {"delta.enableChangeDataFeed": "false", "delta.appendOnly": "False"},
        location="/lake/m__pending",
    )


@pytest.mark.parametrize("kind", sorted(TABLES))
def test_a_model_with_location_root_gets_each_side_table_under_it(kind):
    name, columns = TABLES[kind]
    located = statements("", {}).create_table(
        kind, "demo", name, columns, True, location=f"s3a://lake/views/{name}"
    )
    assert located == sql.create_table(
        f"`demo`.`{name}`", columns, location=f"s3a://lake/views/{name}"
    )


def test_an_override_without_location_still_serves_models_without_location_root():
    """Overrides written before location_root reached the side tables take three arguments."""
    project = """
{% macro streamsql__create_late_table(relation, columns, replace) -%}
  {{ return(default__create_late_table(relation, columns, replace) ~ ' -- mine') }}
{%- endmacro %}
"""
    assert ddl(side.LATE, replace=True, project=project).endswith(" -- mine")


def test_a_project_override_of_one_table_is_dispatched_first_and_sees_the_models_config():
    project = """
{% macro streamsql__create_late_table(relation, columns, replace) -%}
  {{ return(default__create_late_table(relation, columns, replace) | replace(
       "TBLPROPERTIES (", "TBLPROPERTIES ('delta.logRetentionDuration' = '"
       ~ config.get('late_retention', 'interval 30 days') ~ "', ")) }}
{%- endmacro %}
"""
    late_table = ddl(side.LATE, replace=False, project=project, late_retention="interval 1 year")
    assert late_table.startswith("CREATE TABLE IF NOT EXISTS `demo`.`m__late` (`id` bigint, ")
    assert late_table.endswith(
        " USING delta TBLPROPERTIES ('delta.logRetentionDuration' = "
        "'interval 1 year', 'delta.enableChangeDataFeed' = 'true', "
        "'delta.enableDeletionVectors' = 'true')"
    )
    assert ddl(side.WATERLINE, replace=False, project=project) == ddl(
        side.WATERLINE, replace=False
    )  # the other tables keep the default


def test_overriding_side_table_ddl_changes_all_three_tables():
    project = """
{% macro default__side_table_ddl(relation, columns, replace, properties=none, location=none) -%}
  CREATE TABLE {{ relation }} ({{ columns | map(attribute='name') | join(', ') }})
{%- endmacro %}
"""
    assert [ddl(kind, True, project) for kind in sorted(TABLES)] == [
        "CREATE TABLE `demo`.`m__late` (id, ts, odd`name, _streamsql_step, _streamsql_change, "
        "_streamsql_column, _streamsql_waterline, _streamsql_reason, _streamsql_at)",
        "CREATE TABLE `demo`.`m__pending` (id, ts, odd`name, _streamsql_weight, "
        "_streamsql_held_step, _streamsql_released_step, _streamsql_held_id)",
        "CREATE TABLE `demo`.`m__waterline` (step, column_name, waterline, max_seen, at, behind)",
    ]


def test_the_default_writes_are_the_statements_the_step_sends():
    rules = late.lateness_rules("m", COLS, {"ts": "INTERVAL 1 HOUR"}, {})
    rows = late.waterline_rows(3, rules, {"ts": "2020-01-01 00:00:00"}, {"ts": None})
    assert statements().append_waterline_rows(
        "demo", "m__waterline", late.WATERLINE_COLUMNS, rows
    ) == (
        "INSERT INTO `demo`.`m__waterline` VALUES (CAST(3 AS BIGINT), 'ts', "
        "'2020-01-01 00:00:00', CAST(NULL AS STRING), current_timestamp(), CAST(NULL AS STRING))"
    )
    quarantined = late.quarantine_rows("c", COLS, 3, {})
    appended = statements().append_late_rows(
        "demo", "m__late", late.late_table_columns(COLS), quarantined
    )
    assert appended == (
        "INSERT INTO `demo`.`m__late` (`id`, `ts`, `odd``name`, "
        "`_streamsql_step`, `_streamsql_change`, `_streamsql_column`, "
        f"`_streamsql_waterline`, `_streamsql_reason`, `_streamsql_at`) "
        f"{quarantined}"
    )
    changes = wm.pending_changes("cand", COLS, 4)
    merged = statements().merge_pending_rows("demo", "m__pending", COLS, changes, 4)
    assert merged == (
        f"MERGE INTO `demo`.`m__pending` AS t USING ({changes}) AS s ON t._streamsql_held_id = "
        "s._streamsql_held_id WHEN MATCHED AND s._streamsql_release THEN UPDATE SET "
        "_streamsql_released_step = 4 WHEN NOT MATCHED AND NOT s._streamsql_release THEN "
        "INSERT (`id`, `ts`, `odd``name`, _streamsql_weight, _streamsql_held_step, "
        "_streamsql_released_step, _streamsql_held_id) VALUES (s.`id`, s.`ts`, s.`odd``name`, "
        "s._streamsql_weight, s._streamsql_held_step, CAST(NULL AS BIGINT), "
        "s._streamsql_held_id)"
    )
    for statement in (appended, merged):
        sqlglot.parse_one(statement, read="spark")


def test_an_append_override_can_send_late_rows_elsewhere():
    project = """
{% macro streamsql__append_late_rows(relation, columns, rows) -%}
  INSERT INTO ops.all_late SELECT '{{ relation.identifier }}' AS model, * FROM ({{ rows }})
{%- endmacro %}
"""
    statement = statements(project).append_late_rows("demo", "m__late", COLS, "SELECT 1")
    assert statement == "INSERT INTO ops.all_late SELECT 'm__late' AS model, * FROM (SELECT 1)"


def test_the_plain_jinja_rendering_matches_the_dbt_like_one():
    """package_macros (what a step uses outside dbt) renders what the macros render in dbt."""
    for kind, (name, columns) in TABLES.items():
        for replace in (True, False):
            assert side.default_side_table_sql().create_table(
                kind, "demo", name, columns, replace
            ) == ddl(kind, replace)


def test_every_macro_the_step_calls_is_in_the_package_with_a_default():
    macros = Macros()
    for name in side.MACROS:
        assert macros.find(name) is not None, name
    dispatched = [
        "create_late_table",
        "create_waterline_table",
        "create_pending_table",
        "side_table_ddl",
        "append_late_rows",
        "append_waterline_rows",
        "merge_pending_rows",
    ]
    for name in dispatched:
        assert macros.find(f"default__{name}") is not None, name


def test_a_statement_is_trimmed_and_an_empty_one_is_an_error():
    calls: List[Dict[str, Any]] = []

    def call(name: str, **arguments: Any) -> str:
        calls.append({"name": name, **arguments})
        return {"streamsql_append_late_rows": "\n  INSERT INTO x SELECT 1 ;\n"}.get(name, " ")

    statements_ = side.SideTableSql(call, relation=lambda schema, name: f"<{schema}.{name}>")
    assert (
        statements_.append_late_rows("s", "m__late", COLS, "SELECT 1") == "INSERT INTO x SELECT 1"
    )
    assert calls[0]["relation"] == "<s.m__late>" and calls[0]["rows"] == "SELECT 1"
    with pytest.raises(side.SideTableError, match="streamsql_create_waterline_table returned no"):
        statements_.create_table(side.WATERLINE, "s", "m__waterline", COLS, True)


def test_the_macros_dbt_hands_over_must_all_be_there():
    handed = {name: (lambda name=name, **arguments: name) for name in side.MACROS}
    call = side.dbt_macros(handed)
    assert call("streamsql_merge_pending_rows", relation="r") == "streamsql_merge_pending_rows"
    del handed["streamsql_append_late_rows"]
    with pytest.raises(side.SideTableError, match="streamsql_append_late_rows"):
        side.dbt_macros(handed)
