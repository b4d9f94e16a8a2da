"""Every config a step reads (configs.MODEL_CONFIGS with a `field`) reaches the step, set through
`dbt_project.yml` (`+name:`) and set through `{{ config(...) }}` in the model file.

One project, three `dbt run`s. Each route has the same four models, the configs split where they
cannot be combined (`CONFIGS`), with values that differ between the routes where the value shows:

- `lin_*` (`select *`): lateness, max_future, unique_key, on_schema_change, partition_by,
  tblproperties, location_root, waterline_retention, compact_files, rewrite_when_small;
- `fin_*` (an hourly count): emit_final (with lateness on the hour), liquid_clustered_by,
  final_state_retention;
- `wm_*`: watermark, append_only, strategy (recompute), pending_retention. Only its first step
  is looked at (its second fails: append_only), whose result does not depend on the plan.
- `rec_*` (a count by key): rewrite_on_recompute, on a step `auto` recomputes (a third run, whose
  cost estimates the test sets: `STREAMSQL_TEST_STEP_COSTS`).

Each config's check reads what the step did: the table's DESCRIBE DETAIL, the `__late` and
`__pending` tables, the model's rows and change feed, the step's adapter response and step line,
or the step's refusal naming the config. Without the config (or with the other route's value) the
check fails: the old bug, `strategy` documented but never passed to the step, fails
`test_strategy`.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest
from dbt.tests.util import run_dbt

from dbt.adapters.streamsql.execution.commit import small_files
from dbt.adapters.streamsql.execution.commit.record import StepRecord
from dbt.adapters.streamsql.execution.pipeline.step_cost import TEST_COSTS_ENV
from dbt.adapters.streamsql.execution.shared.configs import MODEL_CONFIGS
from tests.functional.test_incremental_view_basics import by_name
from tests.functional.test_side_tables_and_run_sql import SOURCES

ROUTES = ("project", "config")  # dbt_project.yml's models are <model>_p, config()'s <model>_c


QUERIES = {
    "lin": "select * from {{ source('raw', 'events') }}",
    "fin": "select date_trunc('hour', ts) as hour, count(*) as n "
    "from {{ source('raw', 'events') }} where v >= 0 group by date_trunc('hour', ts)",
    "wm": "select id, ts, v from {{ source('raw', 'events') }} where v >= 0",
    "rec": "select k, count(*) as n from {{ source('raw', 'events') }} group by k",
}

# model -> config -> (its value in dbt_project.yml, its value in config()); `{lake}` is a
# directory of the test's own.
CONFIGS = {
    "lin": {
        "lateness": ({"ts": "INTERVAL 1 HOUR"}, {"ts": "INTERVAL 2 HOURS"}),
        "max_future": ({"ts": "INTERVAL 1 DAY"}, {"ts": "INTERVAL 1 DAY"}),
        "unique_key": (["id", "ts"], ["id", "ts"]),
        "on_schema_change": ("append_new_columns", "append_new_columns"),
        "partition_by": ("k", ["k"]),
        "tblproperties": (
            {"streamsql.test.route": "dbt_project.yml"},
            {"streamsql.test.route": "config()"},
        ),
        "location_root": ("{lake}/project", "{lake}/config"),
        "waterline_retention": ("0 seconds", "interval 0 seconds"),
        "compact_files": (False, True),
        "rewrite_when_small": (False, True),
    },
    "fin": {
        "lateness": ({"hour": "INTERVAL 1 HOUR"}, {"hour": "INTERVAL 1 HOUR"}),
        "emit_final": (True, True),
        "liquid_clustered_by": ("hour", ["hour"]),
        "final_state_retention": ({"hour": "INTERVAL 2 HOURS"}, {"hour": "INTERVAL 3 HOURS"}),
    },
    "wm": {
        "watermark": ({"ts": "INTERVAL 30 MINUTES"}, {"ts": "INTERVAL 45 MINUTES"}),
        "append_only": (True, True),
        "strategy": ("recompute", "recompute"),
        "pending_retention": ("forever", "1 day"),
    },
    "rec": {"rewrite_on_recompute": (False, True)},
}

# What the values above make the steps do, per route.
WATERLINE = {"project": "2020-01-01 11:00:00", "config": "2020-01-01 10:00:00"}  # 12:00 - lateness
HELD = {"project": {4}, "config": {4, 5}}  # the rows within the watermark of 12:00, the newest
PROPERTY = {"project": "dbt_project.yml", "config": "config()"}

# The input, before step 1 (one commit): ids 6 (NULL ts) and 9 (ts in 2999) only lin_* reads.
EVENTS = """
create table {events} using delta as
select cast(id as bigint) as id, k, cast(ts as timestamp) as ts, v from values
  (1, 1, '2020-01-01 10:00:00', 1),
  (2, 1, '2020-01-01 10:30:00', 2),
  (3, 2, '2020-01-01 11:00:00', 3),
  (4, 2, '2020-01-01 12:00:00', 4),
  (5, 2, '2020-01-01 11:30:00', 5),
  (6, 3, null, -1),
  (9, 3, '2999-01-01 00:00:00', -1) as t(id, k, ts, v)
"""
STEP_2 = (
    "alter table {events} add columns (extra string)",  # on_schema_change
    # unique_key: id 4 updated in place; append_only: deleting id 3 is refused (it is on time for
    # lin_*'s lateness)
    "merge into {events} t using (select 3 as id union all select 4) c on t.id = c.id "
    "when matched and t.id = 4 then update set v = 40 when matched then delete",
)
SECOND_RUN = "lin_p lin_c wm_p wm_c"  # the models whose configs act on a later step
THIRD_RUN = "rec_p rec_c"  # ... and on a step `auto` recomputes


def route_configs(route: str, lake: str) -> dict:
    """model name -> its configs, as `route` sets them."""
    index = ROUTES.index(route)
    configs = {}
    for model, values in CONFIGS.items():
        configs[name(model, route)] = {
            config: value[index].replace("{lake}", lake)
            if isinstance(value[index], str)
            else value[index]
            for config, value in values.items()
        }
    return configs


def name(model: str, route: str) -> str:
    return f"{model}_{route[0]}"


def run_file(project, model: str) -> str:
    """The statements of the model's last step (target/run)."""
    path = os.path.join(project.project_root, "target", "run", "test", "models", f"{model}.sql")
    with open(path) as handle:
        return handle.read()


def test_every_config_a_step_reads_is_set_on_both_routes():
    read_by_the_step = {spec.name for spec in MODEL_CONFIGS if spec.field is not None}
    for route in ROUTES:
        assert {c for configs in route_configs(route, "").values() for c in configs} == (
            read_by_the_step
        )


class TestConfigsReachTheStep:
    @pytest.fixture(scope="class")
    def lake(self, tmp_path_factory):
        return str(tmp_path_factory.mktemp("configs_lake"))

    @pytest.fixture(scope="class")
    def models(self, lake):
        files = {"sources.yml": SOURCES}
        for model, query in QUERIES.items():
            files[f"{name(model, 'project')}.sql"] = query
            configs = route_configs("config", lake)[name(model, "config")]
            arguments = ", ".join(f"{key}={value!r}" for key, value in configs.items())
            files[f"{name(model, 'config')}.sql"] = (
                f"{{{{ config(materialized='incremental_view', {arguments}) }}}}\n{query}"
            )
        return files

    @pytest.fixture(scope="class")
    def project_config_update(self, lake):
        models = {
            model: {"+materialized": "incremental_view", **{f"+{k}": v for k, v in configs.items()}}
            for model, configs in route_configs("project", lake).items()
        }
        return {"models": {"test": models}}

    @pytest.fixture(scope="class")
    def steps(self, project):
        """Step 1 of every model, then step 2 of SECOND_RUN's, then step 2 of THIRD_RUN's,
        which `auto` recomputes: the run results of each."""
        events = f"{project.test_schema}.events"
        project.run_sql(EVENTS.format(events=events))
        first = run_dbt(["run"])
        for statement in STEP_2:
            project.run_sql(statement.format(events=events))
        # compact_files: step 2 checks the files, and compacts a table holding any
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(small_files, "COMPACT_CHECK_EVERY", 1)
            patch.setattr(small_files, "COMPACT_ABOVE_FILES", 0)
            second = run_dbt(["run", "--select", SECOND_RUN], expect_pass=False)
        with pytest.MonkeyPatch.context() as patch:
            # an incremental step estimated at 5 s, a rebuild at 1 s: auto recomputes
            patch.setenv(TEST_COSTS_ENV, "5,1")
            third = run_dbt(["run", "--select", THIRD_RUN])
        return first, second, third

    @pytest.fixture(scope="class")
    def query(self, project, steps):
        """The rows of a query, each query run once for the class."""
        done = {}

        def rows(sql: str) -> list:
            if sql not in done:
                done[sql] = [tuple(r) for r in project.run_sql(sql, fetch="all")]
            return done[sql]

        return rows

    @pytest.fixture(scope="class")
    def detail(self, project, steps):
        done = {}

        def described(model: str) -> dict:
            if model not in done:
                table = f"{project.test_schema}.{model}"
                done[model] = project.run_sql(f"describe detail {table}", fetch="one").asDict()
            return done[model]

        return described

    def table(self, project, model: str, route: str, suffix: str = "") -> str:
        return f"{project.test_schema}.{name(model, route)}{suffix}"

    def late(self, project, query, route) -> Counter:
        late_table = self.table(project, "lin", route, "__late")
        return Counter(query(f"select id, _streamsql_step, _streamsql_reason from {late_table}"))

    @pytest.mark.parametrize("route", ROUTES)
    def test_lateness(self, project, steps, query, route):
        # the waterline after step 1: the largest ts seen (12:00; NULL and the future row left
        # out) minus the route's lateness
        response = by_name(steps[0], name("lin", route)).adapter_response
        assert response["waterline"] == {"ts": WATERLINE[route]}, response
        assert self.late(project, query, route)[(6, 1, "null")] == 1  # NULL in a lateness column

    @pytest.mark.parametrize("route", ROUTES)
    def test_max_future(self, project, steps, query, route):
        assert self.late(project, query, route)[(9, 1, "future")] == 1  # the row of 2999

    @pytest.mark.parametrize("route", ROUTES)
    def test_unique_key(self, project, steps, query, route):
        # step 2's update of id 4 is applied in place: an update pair in the model's change
        # feed (without a key, a change is applied matching whole rows: a delete, an insert)
        updates = query(
            f"select id, v, _change_type from table_changes('{self.table(project, 'lin', route)}'"
            ", 1) where _change_type like 'update%'"
        )
        if route == "project":  # rewrite_when_small: false
            assert Counter(updates) == Counter(
                {(4, 4, "update_preimage"): 1, (4, 40, "update_postimage"): 1}
            ), updates
            return
        # written whole (a small model): every row out and in again, no update pair; netted,
        # step 2's versions (from 2: after step 1's) remove id 3 and change id 4's v
        assert updates == [], updates
        netted = query(
            "select id, v, sum(case when _change_type = 'insert' then 1 else -1 end) as w "
            f"from table_changes('{self.table(project, 'lin', route)}', 2) "
            "group by id, v having w <> 0"
        )
        assert Counter(netted) == Counter({(3, 3, -1): 1, (4, 4, -1): 1, (4, 40, 1): 1}), netted

    @pytest.mark.parametrize("route", ROUTES)
    def test_on_schema_change(self, project, steps, query, route):
        # append_new_columns: the input's new column is the model's too (ignore, the default,
        # keeps the model's columns)
        found = query(f"select id, v, extra from {self.table(project, 'lin', route)} where id = 4")
        assert found == [(4, 40, None)], found

    @pytest.mark.parametrize("route", ROUTES)
    def test_waterline_retention(self, project, steps, query, route):
        # a retention of 0: step 2 first deleted step 1's waterline row (the default keeps 30
        # days of them)
        waterline = self.table(project, "lin", route, "__waterline")
        assert query(f"select step from {waterline}") == [(2,)]
        notes = by_name(steps[1], name("lin", route)).adapter_response["notes"]
        assert f"removed 1 row(s) of {waterline} older than 0 seconds" in notes, notes

    @pytest.mark.parametrize("route", ROUTES)
    def test_pending_retention(self, project, steps, route):
        # a retention keeps the clean-ups' [step, time] in the step record (cleanup.py); forever
        # keeps none, as nothing released is ever deleted
        table = self.table(project, "wm", route)
        history = project.run_sql(f"describe history {table}", fetch="all")
        records = [StepRecord.from_json(row.asDict()["userMetadata"]) for row in history]
        first = next(r for r in records if r is not None and r.step == 1)
        assert [c[0] for c in first.cleanups] == ([0] if route == "config" else []), first

    @pytest.mark.parametrize("route", ROUTES)
    def test_compact_files(self, project, steps, route):
        # off in dbt_project.yml, on (the default) in config(): only lin_c's step 2 compacted
        # its table (an OPTIMIZE that packs nothing makes no commit: the statement shows it)
        statements = run_file(project, name("lin", route))
        optimize = f"OPTIMIZE `{project.test_schema}`.`{name('lin', route)}`"
        assert (optimize in statements) == (route == "config"), statements[-3000:]

    @pytest.mark.parametrize("route", ROUTES)
    def test_rewrite_when_small(self, project, steps, route):
        # off in dbt_project.yml: step 2's removals MERGEd; on (the default) in config(): the
        # small model written whole, every partition at once
        statements = run_file(project, name("lin", route))
        model = f"`{project.test_schema}`.`{name('lin', route)}`"
        assert (f"INSERT OVERWRITE {model} " in statements) == (route == "config"), statements
        assert (f"MERGE INTO {model} " in statements) == (route == "project"), statements

    @pytest.mark.parametrize("route", ROUTES)
    def test_rewrite_on_recompute(self, project, steps, route):
        # off in dbt_project.yml: the recompute's difference applied; on (the default) in
        # config(): the query's rows written as the whole table
        response = by_name(steps[2], name("rec", route)).adapter_response
        assert response["step"] == 2 and response["computed"] == "recompute", response
        assert (response["write"] == "whole") == (route == "config"), response
        statements = run_file(project, name("rec", route))
        model = f"`{project.test_schema}`.`{name('rec', route)}`"
        whole = f"INSERT OVERWRITE {model} (`k`, `n`) SELECT `k`, `n` FROM (SELECT k, n\nFROM ("
        assert (whole in statements) == (route == "config"), statements[-3000:]

    @pytest.mark.parametrize("route", ROUTES)
    def test_final_state_retention(self, project, steps, route):
        # a value of its own: the step checks its type, as it checks the lateness (the state it
        # drops shows only once a compaction runs: test_lateness.py's TestFinalStateDropped)
        statements = run_file(project, name("fin", route))
        hours = 2 if route == "project" else 3
        check = f"DESCRIBE QUERY SELECT CAST(NULL AS timestamp) - (INTERVAL {hours} HOURS) AS w"
        assert check in statements, statements[-3000:]

    @pytest.mark.parametrize("route", ROUTES)
    def test_partition_by(self, steps, detail, route):
        found = detail(name("lin", route))
        assert found["partitionColumns"] == ["k"], found

    @pytest.mark.parametrize("route", ROUTES)
    def test_tblproperties(self, steps, detail, route):
        found = detail(name("lin", route))
        assert found["properties"].get("streamsql.test.route") == PROPERTY[route], found

    @pytest.mark.parametrize("route", ROUTES)
    def test_location_root(self, steps, detail, lake, route):
        found = detail(name("lin", route))
        assert found["location"].endswith(f"{lake}/{route}/{name('lin', route)}"), found

    @pytest.mark.parametrize("route", ROUTES)
    def test_liquid_clustered_by(self, steps, detail, route):
        found = detail(name("fin", route))
        assert found["clusteringColumns"] == ["hour"], found

    @pytest.mark.parametrize("route", ROUTES)
    def test_emit_final(self, project, steps, query, route):
        table = self.table(project, "fin", route)
        # waterline 11:00: of the groups 10:00, 11:00 and 12:00 only the first is final
        found = query(f"select cast(hour as string), n from {table}")
        assert found == [("2020-01-01 10:00:00", 2)], found

    @pytest.mark.parametrize("route", ROUTES)
    def test_watermark(self, project, steps, query, route):
        response = by_name(steps[0], name("wm", route)).adapter_response
        held = len(HELD[route])
        assert (response["held"], response["inserted"]) == (held, 5 - held), response
        pending = self.table(project, "wm", route, "__pending")
        found = query(f"select id from {pending} where _streamsql_held_step = 1")
        assert {row[0] for row in found} == HELD[route], found

    @pytest.mark.parametrize("route", ROUTES)
    def test_append_only(self, steps, route):
        # step 2 deletes id 3: the step refuses it, naming the model and the config
        failed = by_name(steps[1], name("wm", route))
        assert failed.status == "error", (failed.status, failed.message)
        assert f"Model {name('wm', route)} is configured append_only" in failed.message

    @pytest.mark.parametrize("route", ROUTES)
    def test_strategy(self, steps, route):
        """The old bug: `strategy` was documented, but impl.model_settings never passed it, so
        every model ran `auto` (here: a linear plan, `select ... where` being a projection)."""
        response = by_name(steps[0], name("wm", route)).adapter_response
        assert (response["plan"], response["computed"]) == ("recompute", "recompute"), response
        line = response["step_line"]
        assert "; recompute (recompute: strategy: recompute (the model's config)); " in line, line
