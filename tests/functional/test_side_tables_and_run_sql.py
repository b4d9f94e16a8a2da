"""A project's override of a side table's macro, the step's SQL in target/run/, and
location_root, on real Spark.

One project, two steps of a LATENESS model and of an aggregate with LATENESS and WATERMARK whose
location_root lies outside the warehouse: every one of its tables (model, state, `__late`,
`__waterline`, `__pending`) is created there, with the model's storage `tblproperties` (its
others on the model's table only). The project overrides `create_late_table` (adding
a table property taken from the model's config): the `__late` table has it, the `__waterline`
table (default macro) has not. After each `dbt run`, target/run/ holds the statements the step
sent, each after a comment of its role: exactly the statements dbt.log logs for the model, in
order. `dbt compile` still shows the model's SELECT.
"""

import json
import os

import pytest
from dbt.tests.util import run_dbt

from dbt.adapters.streamsql.execution.engine.trace import read_script

PROJECT = "test"  # dbt.tests' project name

SOURCES = """
version: 2
sources:
  - name: raw
    schema: "{{ target.schema }}"
    tables: [{name: events}]
"""

MODEL = """
{{ config(materialized='incremental_view', lateness={'ts': 'INTERVAL 1 HOUR'},
          meta={'owner': 'ops-team'}, rewrite_when_small=false) }}
select id, ts, v from {{ source('raw', 'events') }} where v >= 0
"""

LOCATED = """
{{ config(materialized='incremental_view', location_root=var('located_root'),
          lateness={'hour': 'INTERVAL 1 HOUR'}, watermark={'hour': 'INTERVAL 1 HOUR'},
          tblproperties={'delta.logRetentionDuration': 'interval 45 days',
                         'streamsql.test.kind': 'located'}) }}
select date_trunc('hour', ts) as hour, count(*) as n, sum(v) as total
from {{ source('raw', 'events') }} group by date_trunc('hour', ts)
"""

# Takes the location a model with location_root passes (docs/macros-and-tests.md).
OVERRIDE = """
{% macro streamsql__create_late_table(relation, columns, replace, location=none) -%}
  {{ return(streamsql_side_table_ddl(relation, columns, replace,
            properties={'streamsql.test.owner': config.get('meta', {}).get('owner', 'nobody')},
            location=location)) }}
{%- endmacro %}
"""


def dbt_log_statements(logs_dir, node_id):
    """The statements dbt.log (JSON lines) logs for `node_id` in its last invocation, in order."""
    events = []
    with open(os.path.join(logs_dir, "dbt.log")) as log:
        for line in log:
            if line.startswith("{"):
                events.append(json.loads(line))
    last = [e for e in events if e["info"]["name"] == "SQLQuery"][-1]["info"]["invocation_id"]
    return [
        e["data"]["sql"]
        for e in events
        if e["info"]["name"] == "SQLQuery"
        and e["info"]["invocation_id"] == last
        and e["data"].get("node_info", {}).get("unique_id") == node_id
    ]


class TestSideTableMacrosAndRunSql:
    @pytest.fixture(scope="class")
    def models(self):
        return {"sources.yml": SOURCES, "events_on_time.sql": MODEL, "located.sql": LOCATED}

    @pytest.fixture(scope="class")
    def located_root(self, tmp_path_factory):
        return str(tmp_path_factory.mktemp("lake") / "views")

    @pytest.fixture(scope="class")
    def project_config_update(self, located_root):
        return {"vars": {"located_root": located_root}}

    @pytest.fixture(scope="class")
    def macros(self):
        return {"side_table_overrides.sql": OVERRIDE}

    @pytest.fixture(scope="class")
    def steps(self, project, logs_dir):
        """Two steps; after each, the target/run file's statements and dbt.log's."""
        source = f"{project.test_schema}.events"
        project.run_sql(f"create or replace table {source} (id bigint, ts timestamp, v int)")
        node = f"model.{PROJECT}.events_on_time"
        run_file = os.path.join(
            project.project_root, "target", "run", PROJECT, "models", "events_on_time.sql"
        )
        taken = []
        for rows in (
            "(1, timestamp'2020-01-01 10:00:00', 1), (2, timestamp'2020-01-01 11:00:00', 2)",
            # late (below the 10:00 waterline), on time, and an update: a MERGE
            "(3, timestamp'2020-01-01 08:00:00', 3), (4, timestamp'2020-01-01 11:30:00', 4)",
        ):
            project.run_sql(f"insert into {source} values {rows}")
            if taken:
                project.run_sql(f"update {source} set v = 20 where id = 2")
            results = run_dbt(["--log-format-file", "json", "run"])
            assert len(results) == 2 and all(r.status == "success" for r in results)
            (result,) = [r for r in results if r.node.unique_id == node]
            with open(run_file) as written:
                text = written.read()
            taken.append((result.adapter_response, text, dbt_log_statements(logs_dir, node)))
        return taken

    def test_the_projects_override_shapes_the_late_table_only(self, project, steps):
        schema = project.test_schema

        def properties(table):
            return {
                row[0]: row[1]
                for row in project.run_sql(f"show tblproperties {schema}.{table}", fetch="all")
            }

        late = properties("events_on_time__late")
        assert late["streamsql.test.owner"] == "ops-team"  # the model's config, seen by the macro
        assert late["delta.enableChangeDataFeed"] == "true"
        assert "streamsql.test.owner" not in properties("events_on_time__waterline")
        assert [response["late"] for response, _, _ in steps] == [0, 1]
        assert project.run_sql(f"select id from {schema}.events_on_time__late", fetch="all") == [
            (3,)
        ]

    def test_target_run_holds_the_statements_dbt_logged_in_order(self, project, steps):
        for response, text, logged in steps:
            written = read_script(text)
            assert logged, "dbt.log logged no statement for the model"
            assert [statement for _, statement in written] == [s.rstrip() for s in logged]
            assert all(role and "\n" not in role for role, _ in written)
            assert text.startswith(
                f"-- dbt-streamsql: incremental_view {project.test_schema}."
                f"events_on_time: events_on_time: step {response['step']}: "
            )
        roles = [role for role, _ in read_script(steps[1][1])]
        model = f"`{project.test_schema}`.`events_on_time`"
        assert f"MERGE the change into the model {model} (step 2)" in roles
        assert f"append the step's late changes to {model[:-1]}__late`" in roles
        assert "LATENESS: the change, each row on time, late, null or future" in roles
        first = [role for role, _ in read_script(steps[0][1])]
        assert f"create the LATENESS quarantine {model[:-1]}__late`, empty" in first

    def test_a_small_models_merge_rewrites_files_instead_of_deletion_vectors(self, project, steps):
        """protocol.SMALL_TABLE_BYTES: a MERGE into a small model rewrites the files it touches
        (cheaper there than deletion vectors); its contents and change feed are the same."""
        _, text, _ = steps[1]
        # (the write's settings are one statement in the embedded session: one part each)
        settings = [part for _, statement in read_script(text) for part in statement.split(";\n")]
        assert "SET spark.databricks.delta.merge.deletionVectors.persistent=false" in settings
        schema = project.test_schema
        history = project.run_sql(f"describe history {schema}.events_on_time limit 1", fetch="all")
        operation = history[0][4]
        metrics = history[0][12]
        assert operation == "MERGE", history[0]
        assert int(metrics.get("numDeletionVectorsAdded", 0)) == 0, metrics
        assert int(metrics["numTargetFilesRemoved"]) >= 1, metrics

    def test_every_table_of_a_model_lies_under_its_location_root(
        self, project, steps, located_root
    ):
        schema = project.test_schema
        warehouse = project.run_sql(f"describe detail {schema}.events_on_time", fetch="one")
        suffixes = ["", "__streamsql_state", "__late", "__waterline", "__pending"]
        for suffix in suffixes:
            detail = project.run_sql(f"describe detail {schema}.located{suffix}", fetch="one")
            wanted = f"{located_root}/located{suffix}"
            # DESCRIBE DETAIL's row: its `location` is a file: URI ending with the path
            assert any(str(v).rstrip("/").endswith(wanted) for v in detail), (suffix, detail)
        assert located_root not in str(warehouse)  # a model without it stays in the warehouse
        # the model's storage properties on every one of its tables, its others on its own only
        for suffix in suffixes:
            properties = dict(
                project.run_sql(f"show tblproperties {schema}.located{suffix}", fetch="all")
            )
            assert properties.get("delta.logRetentionDuration") == "interval 45 days", suffix
            assert ("streamsql.test.kind" in properties) == (suffix == ""), (suffix, properties)
        state = dict(
            project.run_sql(f"show tblproperties {schema}.located__streamsql_state", fetch="all")
        )
        assert state["delta.enableChangeDataFeed"] == "false"
        hours = project.run_sql(f"select count(*) from {schema}.located", fetch="one")[0]
        assert hours >= 1

    def test_dbt_compile_still_shows_the_select(self, project, steps):
        run_dbt(["compile", "--select", "events_on_time"])
        compiled = os.path.join(
            project.project_root, "target", "compiled", PROJECT, "models", "events_on_time.sql"
        )
        with open(compiled) as text:
            sql = text.read()
        assert sql.strip().startswith("select id, ts, v from")
        assert "MERGE" not in sql
