"""`strategy: auto` by cost: models with state recompute while that is estimated cheaper, then
rebuild their state and step incrementally again, and stay equal to their queries throughout.

The estimates come from the model's recorded step costs (pipeline/step_cost.py); on tables this
small both ways cost a step's fixed cost, so the test sets them (`STREAMSQL_TEST_STEP_COSTS`,
read where the estimates are made): everything else is the step as users run it. Step 2 and 3
recompute (the state tables fall behind), step 4 rebuilds the state as a recovery, step 5 is
incremental again. An aggregate, an aggregate below a join (a stage), a LATENESS window
aggregate that quarantines a late row while it recomputes, and a view over the aggregate (which
reads the recomputed model's change) are each equal to their query after every step, and
`matches_recompute` passes at the end.
"""

from __future__ import annotations

import os
from typing import Dict, List, Optional

import pytest
from dbt.tests.util import run_dbt

from dbt.adapters.streamsql.execution.pipeline.step_cost import TEST_COSTS_ENV
from tests.differential import as_bag, bag_diff, model_columns

SOURCES_YML = """
version: 2
sources:
  - name: raw
    schema: "{{ target.schema }}"
    tables:
      - name: events
      - name: names
"""

MODELS = {
    "by_k": (
        "{{ config(materialized='incremental_view') }}\n"
        "select k, count(*) as n, sum(v) as total, max(v) as top "
        "from {{ source('raw', 'events') }} group by k"
    ),
    "named_totals": (
        "{{ config(materialized='incremental_view') }}\n"
        "select n.name, t.total from {{ source('raw', 'names') }} n join "
        "(select k, sum(v) as total from {{ source('raw', 'events') }} group by k) t "
        "on n.k = t.k"
    ),
    "hourly": (
        "{{ config(materialized='incremental_view', lateness={'hour': \"interval '1' hour\"}) }}\n"
        "select date_trunc('hour', ts) as hour, count(*) as n, sum(v) as total "
        "from {{ source('raw', 'events') }} group by 1"
    ),
    "big_groups": (
        "{{ config(materialized='incremental_view') }}\n"
        "select k, n from {{ ref('by_k') }} where n > 1"
    ),
}
PLANS = {"by_k": "aggregate", "named_totals": "linear", "hourly": "aggregate"}
# How a recompute `auto` chose writes each model: the query's rows as the whole table, or (for
# LATENESS, which judges the change) the difference (rewrite_on_recompute)
WHOLE = {"by_k": True, "named_totals": True, "hourly": False}
STATEFUL = ("by_k", "named_totals", "hourly")  # an aggregate, or one below a join (a stage)
MODELS_YML = "version: 2\nmodels:\n" + "".join(
    f"  - name: {name}\n    data_tests: [matches_recompute]\n" for name in MODELS
)


def events(*rows: str) -> str:
    return "insert into {schema}.events values " + ", ".join(rows)


# (the source's changes, the estimates "incremental,rebuild" the step weighs, what each stateful
# model's step computes: its plan's kind, "recompute", or "recovery")
STEPS: List[tuple] = [
    (
        [
            events(
                "(1, 1, 10, timestamp'2024-01-01 10:05:00')",
                "(2, 1, 20, timestamp'2024-01-01 10:10:00')",
                "(3, 2, 5, timestamp'2024-01-01 11:00:00')",
                "(4, 3, 7, timestamp'2024-01-01 12:00:00')",
            ),
            "insert into {schema}.names values (1, 'one'), (2, 'two'), (3, 'three')",
        ],
        None,
        "plan",
    ),
    (  # auto recomputes: its state tables fall behind
        [
            events(
                "(5, 2, 8, timestamp'2024-01-01 13:00:00')",
                "(6, 4, 1, timestamp'2024-01-01 13:30:00')",
            ),
            "delete from {schema}.events where id = 4",  # k 3's only row
        ],
        "5,1",
        "recompute",
    ),
    (  # and stays while it is the cheaper; a late row is quarantined all the same
        [
            "update {schema}.events set v = 30 where id = 5",
            events(
                "(7, 1, 3, timestamp'2024-01-01 09:00:00')",  # late: below 13:30 - 1 hour
                "(8, 4, 4, timestamp'2024-01-01 14:00:00')",
            ),
            "insert into {schema}.names values (4, 'four')",
        ],
        "5,1",
        "recompute",
    ),
    (  # an incremental step is the cheaper again: the state is rebuilt first
        [
            "delete from {schema}.events where id = 8",
            events("(9, 2, 2, timestamp'2024-01-01 14:30:00')"),
        ],
        "1,5",
        "recovery",
    ),
    (  # and then the incremental plan, over the rebuilt state
        [
            "update {schema}.events set k = 4 where id = 9",
            events("(10, 1, 6, timestamp'2024-01-01 15:00:00')"),
        ],
        "1,5",
        "plan",
    ),
]


def set_costs(costs: Optional[str]) -> None:
    if costs is None:
        os.environ.pop(TEST_COSTS_ENV, None)
    else:
        os.environ[TEST_COSTS_ENV] = costs


class TestAutoByCost:
    @pytest.fixture(scope="class")
    def models(self):
        found: Dict[str, str] = {"sources.yml": SOURCES_YML, "models.yml": MODELS_YML}
        found.update({f"{name}.sql": body for name, body in MODELS.items()})
        return found

    def test_models_recompute_rebuild_their_state_and_stay_equal_to_their_queries(self, project):
        schema = project.test_schema
        project.run_sql(
            f"create table {schema}.events (id int, k int, v int, ts timestamp) using delta"
        )
        project.run_sql(f"create table {schema}.names (k int, name string) using delta")
        compiled: Dict[str, str] = {}
        try:
            for step, (statements, costs, computed) in enumerate(STEPS, start=1):
                for statement in statements:
                    project.run_sql(statement)
                set_costs(costs)
                results = run_dbt(["run"])
                set_costs(None)
                for result in results:
                    name, response = result.node.name, result.adapter_response
                    compiled.setdefault(name, result.node.compiled_code.strip().rstrip(";"))
                    assert response["step"] == step, (name, response)
                    if name not in STATEFUL:
                        continue
                    assert response["plan"] == PLANS[name], (name, response)
                    notes = " ".join(response.get("notes") or [])
                    if computed == "plan":
                        assert response["computed"] == PLANS[name], (name, response)
                    elif computed == "recompute":
                        assert response["computed"] == "recompute", (name, response)
                        assert "recomputed this step: recomputing is estimated at 1.00 s " in (
                            notes
                        ), (name, notes)
                        # (the difference of a model this small is written whole too, as any
                        # step's: rewrite_when_small, "rewrite")
                        assert (response["write"] == "whole") == WHOLE[name], response
                        assert ("wrote the model whole" in notes) == WHOLE[name], notes
                    else:
                        assert response["computed"] == "recompute", (name, response)
                        assert "its state tables lack the steps since step 2" in notes, notes
                        assert response["write"] != "whole", response  # a recovery: the difference
                for name in MODELS:
                    if name == "hourly":
                        continue  # its late row is in its quarantine: matches_recompute below
                    relation = f"{schema}.{name}"
                    columns = ", ".join(f"`{c}`" for c in model_columns(project, relation))
                    actual = as_bag(
                        project.run_sql(f"select {columns} from {relation}", fetch="all")
                    )
                    expected = as_bag(
                        project.run_sql(f"select {columns} from ({compiled[name]}) q", fetch="all")
                    )
                    assert actual == expected, (
                        f"model {name} differs from its query after step {step}:\n"
                        f"{bag_diff(name, expected, actual)}"
                    )
                if step == 2:
                    self.check_whole_write(project, compiled["by_k"])
                late = project.run_sql(f"select count(*) from {schema}.hourly__late", fetch="one")[
                    0
                ]
                assert late == (0 if step < 3 else 1), (step, late)
                tested = run_dbt(["test"])  # every model, `hourly` with its quarantine
                assert len(tested) == len(MODELS), [r.node.name for r in tested]
        finally:
            set_costs(None)

    @staticmethod
    def check_whole_write(project, query: str) -> None:
        """by_k's step 2 wrote the query's rows as its whole table: one overwrite, whose change
        feed holds every row of the version before as a delete and every row after as an insert
        (big_groups, which reads it, nets it: its rows are checked against its query above)."""
        table = f"{project.test_schema}.by_k"
        history = project.run_sql(f"describe history {table}", fetch="all")
        newest = history[0].asDict()
        assert newest["operation"] == "WRITE", newest
        assert newest["operationParameters"]["mode"] == "Overwrite", newest
        version = newest["version"]
        feed = project.run_sql(
            f"select _change_type, count(*) from table_changes('{table}', {version}, {version}) "
            "group by _change_type",
            fetch="all",
        )
        before = project.run_sql(
            f"select count(*) from {table} version as of {version - 1}", fetch="one"
        )[0]
        after = len(project.run_sql(query, fetch="all"))
        assert dict(map(tuple, feed)) == {"delete": before, "insert": after}, feed
