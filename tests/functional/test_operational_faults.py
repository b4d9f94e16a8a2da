"""Operational faults a production pipeline meets, on real Spark + Delta + dbt.

One project, three `dbt run`s:

1. every model's first step (and a unique_key that does not hold: refused);
2. after a source gained a column (one model per on_schema_change value), a source's column
   changed type (refused), a source VACUUMed with retention 0 after updates and deletes (its
   change feed gone), a source dropped and created again (and then replaced in place, so that its
   new log reaches past the version the last step read), a source whose change feed was turned
   off and on, a dbt `table` model replaced by its run (read across the replacement, no
   recovery), and a source VACUUMed without a VACUUM commit (the read fails; the step is taken
   again as a recovery): every model either equals its query again (as multisets, the compiled
   SELECT evaluated from scratch) or fails with a message naming the model, the input and the
   fix, its table as it was;
3. after ordinary changes and a dropped source column: recovered models are stepped
   incrementally again and still equal their query; sync_all_columns drops the column.
"""

from __future__ import annotations

from collections import Counter
from typing import Dict

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from dbt.adapters.streamsql.spark.embedded_spark import SessionSettings, get_spark_session
from tests.differential import as_bag, bag_diff

SOURCES = ("wide", "typed", "vac", "recreated", "cdf", "silent", "src_uk")
SOURCES_YML = (
    'version: 2\nsources:\n  - name: raw\n    schema: "{{ target.schema }}"\n'
    "    tables:\n" + "".join(f"      - name: {t}\n" for t in SOURCES)
)


def src(table: str) -> str:
    return "{{ source('raw', '" + table + "') }}"


def iv(sql: str, **configs: str) -> str:
    extra = "".join(f", {k}={v}" for k, v in configs.items())
    return "{{ config(materialized='incremental_view'" + extra + ") }}\n" + sql


MODELS: Dict[str, str] = {
    # on_schema_change, one model per value, all `select *` over `wide`
    "osc_ignore": iv(f"select * from {src('wide')}"),
    "osc_fail": iv(f"select * from {src('wide')}", on_schema_change="'fail'"),
    "osc_append": iv(f"select * from {src('wide')}", on_schema_change="'append_new_columns'"),
    "osc_sync": iv(f"select * from {src('wide')}", on_schema_change="'sync_all_columns'"),
    # a step refused (unique_key) after append_new_columns altered its table, then taken again
    "osc_unique": iv(
        f"select * from {src('wide')}",
        on_schema_change="'append_new_columns'",
        unique_key="'id'",
    ),
    "typed_star": iv(f"select * from {src('typed')}"),
    # VACUUM with retention 0: linear, aggregate, staged, and a model that reads a recovered one
    "vac_linear": iv(f"select id, k, v * 2 as v2 from {src('vac')} where v is not null"),
    "vac_agg": iv(
        f"select k, count(*) as n, sum(v) as total, max(v) as top from {src('vac')} group by k"
    ),
    "vac_staged": iv(
        f"select f.id, f.k, a.n from {src('vac')} f join (select k, count(*) as n "
        f"from {src('vac')} group by k) a on f.k = a.k"
    ),
    "vac_downstream": iv("select k, n, total from {{ ref('vac_agg') }} where n > 1"),
    # dropped and created again: linear, LATENESS, and one that cannot be recomputed exactly
    "rec_linear": iv(f"select id, k, v from {src('recreated')} where k > 0"),
    "rec_late": iv(
        f"select id, ts, v from {src('recreated')}", lateness="{'ts': 'INTERVAL 1 HOUR'}"
    ),
    "rec_nondet": iv(f"select id, k, current_date() as d from {src('recreated')}"),
    # change data feed off and on; files gone without a VACUUM commit
    "cdf_linear": iv(f"select id, k, v from {src('cdf')} where k >= 0"),
    "silent_linear": iv(f"select id, v from {src('silent')}"),
    # unique_key
    # MERGEd at any size: its update shows as an update pair (a small model written whole would
    # show every row out and in again)
    "uk_good": iv(
        f"select id, k, v from {src('src_uk')}", unique_key="'id'", rewrite_when_small="false"
    ),
    "uk_dup": iv(f"select k, v from {src('src_uk')}", unique_key="'k'"),
    # a dbt `table` model (replaced in place by every run of it) read by two views
    "up_table": "{{ config(materialized='table') }}\n" + f"select id, k, v from {src('src_uk')}",
    "up_agg": iv("select k, count(*) as n, sum(v) as total from {{ ref('up_table') }} group by k"),
    "up_linear": iv("select id, v from {{ ref('up_table') }} where k > 0"),
    # a misspelled config
    "typo": iv(f"select id from {src('src_uk')}", latenes="{'ts': 'INTERVAL 1 HOUR'}"),
}


@pytest.fixture(scope="module")
def spark(warehouse_dir):
    """The embedded session itself, for what dbt's connection should not do (VACUUM with
    retention 0 needs a setting of its own)."""
    return get_spark_session(SessionSettings(warehouse_dir, "local[2]", {}, 60)).newSession()


def by_name(results):
    return {r.node.name: r for r in results}


class TestOperationalFaults:
    @pytest.fixture(scope="class")
    def dbt_profile_target(self, dbt_profile_target):
        return {**dbt_profile_target, "threads": 4}

    @pytest.fixture(scope="class")
    def models(self):
        return {**{f"{name}.sql": sql for name, sql in MODELS.items()}, "sources.yml": SOURCES_YML}

    def sql(self, project, statement: str):
        return project.run_sql(statement.format(s=project.test_schema), fetch="all")

    def version(self, project, table: str) -> int:
        return int(self.sql(project, f"describe history {{s}}.{table} limit 1")[0][0])

    def columns(self, project, table: str):
        rows = self.sql(project, f"describe table {{s}}.{table}")
        names = []
        for row in rows:
            if not row[0] or row[0].startswith("#"):
                break
            names.append(row[0])
        return names

    def assert_matches_query(
        self, project, compiled: Dict[str, str], name: str, columns=None
    ) -> None:
        columns = columns or self.columns(project, name)
        cols = ", ".join(f"`{c}`" for c in columns)
        body = compiled[name].strip().rstrip(";")
        actual = as_bag(self.sql(project, f"select {cols} from {{s}}.{name}"))
        expected = as_bag(project.run_sql(f"select {cols} from ({body}) q", fetch="all"))
        assert actual == expected, bag_diff(name, expected, actual)

    def test_faults_between_steps(self, project, spark):
        s = project.test_schema
        cdf = "tblproperties ('delta.enableChangeDataFeed' = 'true')"
        run = lambda statement: spark.sql(statement.format(s=s))  # noqa: E731
        run(f"create table {{s}}.wide (id int, v int) {cdf}")
        run(f"create table {{s}}.typed (id int, x int) {cdf}")
        run(
            "create table {s}.vac (id int, k int, v int) tblproperties ("
            "'delta.enableChangeDataFeed' = 'true', "
            "'delta.deletedFileRetentionDuration' = 'interval 1 hour')"
        )
        run(f"create table {{s}}.recreated (id int, k int, v int, ts timestamp) {cdf}")
        run(f"create table {{s}}.cdf (id int, k int, v int) {cdf}")
        run(f"create table {{s}}.silent (id int, v int) {cdf}")
        run(f"create table {{s}}.src_uk (id int, k int, v int) {cdf}")
        run("insert into {s}.wide values (1, 10), (2, 20)")
        run("insert into {s}.typed values (1, 1)")
        run("insert into {s}.vac values (1, 1, 10), (2, 1, 20), (3, 2, 30), (4, 3, null)")
        run(
            "insert into {s}.recreated values (1, 1, 10, timestamp'2024-01-01 10:00:00'), "
            "(2, 2, 20, timestamp'2024-01-01 11:00:00'), (3, 0, 30, "
            "timestamp'2024-01-01 12:00:00')"
        )
        run("insert into {s}.cdf values (1, 1, 10), (2, 2, 20)")
        run("insert into {s}.silent values (1, 10), (2, 20), (3, 30)")
        run("insert into {s}.src_uk values (1, 1, 10), (2, 1, 20), (3, 2, 30)")

        # -- 1. first steps ------------------------------------------------------------------
        results, output = run_dbt_and_capture(["run"], expect_pass=False)
        first = by_name(results)
        compiled = {name: r.node.compiled_code for name, r in first.items()}
        assert "config 'latenes' is not a config of incremental_view or of dbt" in output
        assert "Did you mean 'lateness'?" in output
        failed = {name for name, r in first.items() if r.status != "success"}
        assert failed == {"uk_dup"}, {n: first[n].message for n in failed}
        message = first["uk_dup"].message
        assert "Model uk_dup: unique_key (k) would not be unique after step 1" in message
        assert self.sql(project, "select count(*) from {s}.uk_dup")[0][0] == 0
        notes = first["vac_linear"].adapter_response["notes"]
        assert any("retention: " in n and ".vac keeps 1 hour of history" in n for n in notes)
        normal = {name: first[name].adapter_response["seconds"] for name in ("vac_linear",)}
        before = {
            name: self.version(project, name) for name in ("osc_fail", "typed_star", "rec_nondet")
        }

        # -- the faults --------------------------------------------------------------------------
        run("alter table {s}.wide add columns (c int)")
        run("insert into {s}.wide values (3, 30, 3)")
        run("update {s}.wide set c = 1 where id = 1")
        run("insert into {s}.wide values (2, 99, 9)")  # id 2 twice: osc_unique refuses
        run(
            "create or replace table {s}.typed (id int, x bigint) "
            "tblproperties ('delta.enableChangeDataFeed' = 'true')"
        )
        run("insert into {s}.typed values (1, 1), (2, 2)")
        run("update {s}.vac set v = 11 where id = 1")
        run("delete from {s}.vac where id = 3")
        run("insert into {s}.vac values (5, 2, 50), (6, 4, 60)")
        run("optimize {s}.vac")
        run("set spark.databricks.delta.retentionDurationCheck.enabled = false")
        run("vacuum {s}.vac retain 0 hours")
        run("drop table {s}.recreated")
        run(f"create table {{s}}.recreated (id int, k int, v int, ts timestamp) {cdf}")
        run(
            "insert into {s}.recreated values (1, 1, 10, timestamp'2024-01-01 10:00:00'), "
            "(4, 4, 40, timestamp'2024-01-01 12:30:00'), "
            "(5, 5, 50, timestamp'2024-01-01 08:00:00')"
        )  # 5 is below the waterline: late
        # replaced in place once created again: its new log now reaches past the version the
        # last step read, with a replacement in between; still another table than that step's
        run(f"create or replace table {{s}}.recreated {cdf} as select * from {{s}}.recreated")
        run("alter table {s}.cdf set tblproperties (delta.enableChangeDataFeed = false)")
        run("update {s}.cdf set v = 21 where id = 2")
        run("insert into {s}.cdf values (3, 3, 30)")
        run("alter table {s}.cdf set tblproperties (delta.enableChangeDataFeed = true)")
        run("delete from {s}.silent where id = 2")
        run("set spark.databricks.delta.vacuum.logging.enabled = false")
        run("vacuum {s}.silent retain 0 hours")
        run("set spark.databricks.delta.vacuum.logging.enabled = true")
        run("update {s}.src_uk set v = 12 where id = 1")

        # -- 2. the step after them -------------------------------------------------------------
        second = by_name(run_dbt(["run"], expect_pass=False))
        failed = {name for name, r in second.items() if r.status != "success"}
        assert failed == {"osc_fail", "osc_unique", "typed_star", "rec_nondet", "uk_dup"}, {
            n: second[n].message for n in failed
        }
        unique = second["osc_unique"].message
        assert "Model osc_unique: unique_key (id) would not be unique after step 2" in unique
        # the refusal comes after the column was added, and says so
        assert (
            "Nothing was changed but the model's columns: on_schema_change "
            "'append_new_columns' added c (NULL in its rows)" in unique
        ), unique
        assert self.columns(project, "osc_unique") == ["id", "v", "c"]
        assert (
            self.sql(project, "select count(*) from {s}.osc_unique where c is not null")[0][0] == 0
        )
        fail = second["osc_fail"].message
        assert (
            "Model osc_fail: its query's columns changed since step 1 (added: c int (from "
            f"{s}.wide))"
            in fail
            and "on_schema_change is 'fail'" in fail
        )
        assert "--full-refresh --select osc_fail" in fail
        typed = second["typed_star"].message
        assert (
            "Model typed_star: column x is bigint in the model's query (from "
            f"{s}.typed) but int in its table" in typed
        )
        assert "--full-refresh --select typed_star" in typed
        nondet = second["rec_nondet"].message
        assert (
            f"Model rec_nondet: {s}.recreated was dropped or replaced and created again" in nondet
            and "current_date()" in nondet
        )
        assert "the step needed the changes of" in nondet
        assert "--full-refresh --select rec_nondet" in nondet
        for name, version in before.items():  # each refused model's table is as it was
            assert self.version(project, name) == version, name
        assert self.columns(project, "osc_fail") == ["id", "v"]

        assert self.columns(project, "osc_ignore") == ["id", "v"]
        assert any(
            "on_schema_change 'ignore': the query's column(s) c are not in the model" in n
            for n in second["osc_ignore"].adapter_response["notes"]
        )
        self.assert_matches_query(project, compiled, "osc_ignore")
        for name in ("osc_append", "osc_sync"):
            assert self.columns(project, name) == ["id", "v", "c"]
            self.assert_matches_query(project, compiled, name)
            assert not any("recovered" in n for n in second[name].adapter_response["notes"])

        expected_reason = {
            "vac_linear": ".vac was vacuumed, which deleted",
            "vac_agg": ".vac was vacuumed",
            "vac_staged": ".vac was vacuumed",
            "rec_linear": ".recreated was dropped",
            "rec_late": ".recreated was dropped",
            "cdf_linear": "change data feed turned off",
            "silent_linear": "reading its inputs' history failed",
        }
        for name, reason in expected_reason.items():
            notes = second[name].adapter_response["notes"]
            assert any(n.startswith("recovered (") and reason in n for n in notes), (name, notes)
            if name != "rec_late":
                self.assert_matches_query(project, compiled, name)
        self.assert_matches_query(project, compiled, "vac_downstream")
        assert not any("recovered" in n for n in second["vac_downstream"].adapter_response["notes"])
        self.assert_read_across_replacement(project, compiled, second, differ=2)
        self.assert_late_model_holds_its_guarantee(project, compiled, late_rows={5})
        recovery = {name: second[name].adapter_response["seconds"] for name in normal}
        self.assert_matches_query(project, compiled, "uk_good")
        feed = self.sql(
            project,
            "select _change_type from table_changes('{s}.uk_good', "
            f"{self.version(project, 'uk_good')})",
        )
        assert sorted(r[0] for r in feed) == ["update_postimage", "update_preimage"]

        # -- 3. ordinary changes, and a dropped source column -------------------------------------
        run("delete from {s}.wide where v = 99")  # osc_unique's key holds again
        run("insert into {s}.vac values (7, 1, 70)")
        run("delete from {s}.vac where id = 2")
        run("insert into {s}.recreated values (6, 6, 60, timestamp'2024-01-01 13:00:00')")
        run("update {s}.cdf set k = 5 where id = 1")
        run("insert into {s}.silent values (4, 40)")
        run("alter table {s}.wide set tblproperties ('delta.columnMapping.mode' = 'name')")
        run("alter table {s}.wide drop column v")
        run("insert into {s}.wide values (4, 4)")
        run("insert into {s}.src_uk values (4, 2, 40)")

        third = by_name(run_dbt(["run"], expect_pass=False))
        failed = {name for name, r in third.items() if r.status != "success"}
        assert failed == {"osc_ignore", "osc_fail", "typed_star", "rec_nondet", "uk_dup"}, {
            n: third[n].message for n in failed
        }
        assert "cannot fill v, which the query no longer has" in third["osc_ignore"].message
        for name in (
            "vac_linear",
            "vac_agg",
            "vac_staged",
            "vac_downstream",
            "rec_linear",
            "cdf_linear",
            "silent_linear",
            "uk_good",
            "up_agg",
            "up_linear",
        ):
            notes = third[name].adapter_response["notes"]
            assert not any(n.startswith("recovered") for n in notes), (name, notes)
            assert third[name].adapter_response["plan"] == first[name].adapter_response["plan"]
            self.assert_matches_query(project, compiled, name)
        self.assert_late_model_holds_its_guarantee(project, compiled, late_rows={5})
        self.assert_read_across_replacement(project, compiled, third, differ=1)
        # the input dropped a column: read again from its current version, and the column kept
        # (append_new_columns, NULL in the new row) or dropped (sync_all_columns)
        # (the first commit its change feed cannot be read across: the column mapping switch)
        assert any(
            n.startswith("recovered (") and ".wide changed its column mapping" in n
            for n in third["osc_append"].adapter_response["notes"]
        )
        assert self.columns(project, "osc_append") == ["id", "v", "c"]
        self.assert_matches_query(project, compiled, "osc_append", columns=["id", "c"])
        kept = [tuple(r) for r in self.sql(project, "select id, v from {s}.osc_append")]
        assert sorted(kept, key=lambda r: r[0]) == [(1, 10), (2, 20), (3, 30), (4, None)]
        assert self.columns(project, "osc_sync") == ["id", "c"]
        self.assert_matches_query(project, compiled, "osc_sync")
        # the refused step taken again over the table its refusal left altered
        assert self.columns(project, "osc_unique") == ["id", "v", "c"]
        self.assert_matches_query(project, compiled, "osc_unique", columns=["id", "c"])
        normal = {name: third[name].adapter_response["seconds"] for name in normal}
        print(f"\nrecovery step vs normal step, seconds: {recovery} vs {normal}")

    def assert_read_across_replacement(self, project, compiled, results, differ: int) -> None:
        """The views over the dbt `table` model read its change feed across the run's
        CREATE OR REPLACE, netted to the rows that differ (the update of one row: 2; an insert:
        1), instead of recomputing."""
        upstream = f"{project.test_schema}.up_table was replaced in place"
        for name in ("up_agg", "up_linear"):
            notes = results[name].adapter_response["notes"]
            assert not any(n.startswith("recovered") for n in notes), (name, notes)
            assert any(upstream in n for n in notes), (name, notes)
            self.assert_matches_query(project, compiled, name)
        notes = results["up_linear"].adapter_response["notes"]
        assert any(f"{differ} row(s) differ" in n for n in notes), notes

    def assert_late_model_holds_its_guarantee(self, project, compiled, late_rows) -> None:
        """rec_late = its query - late inserts + late deletes (docs/steps.md)."""
        body = compiled["rec_late"].strip().rstrip(";")
        model = as_bag(self.sql(project, "select id, ts, v from {s}.rec_late"))
        query = as_bag(project.run_sql(f"select id, ts, v from ({body}) q", fetch="all"))
        late = self.sql(project, "select id, ts, v, _streamsql_change from {s}.rec_late__late")
        inserted = Counter(tuple(r[:3]) for r in late if r[3] == "insert")
        deleted = Counter(tuple(r[:3]) for r in late if r[3] == "delete")
        assert model + inserted == query + deleted, bag_diff(
            "rec_late", query + deleted, model + inserted
        )
        assert {r[0] for r in late if r[3] == "insert"} == late_rows
