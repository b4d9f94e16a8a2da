"""incremental_view basics: the step report, skipped steps, full refresh, append_only, inputs the
step cannot read, a changed model SQL, configuration in YAML, and insert-only steps."""

from __future__ import annotations

import os
import re
from collections import Counter

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture, write_file

from dbt.adapters.streamsql.planning import global_top_k
from dbt.adapters.streamsql.progress import PROGRESS_ENV
from tests.over_connect import OverConnect

SOURCES_YML = """
version: 2
sources:
  - name: raw
    schema: "{{ target.schema }}"
    tables:
      - name: src
      - name: parquet_src
      - name: no_feed_src
"""

POSITIVE = """
{{ config(materialized='incremental_view') }}
select id, k, v from {{ source('raw', 'src') }} where v > 0
"""

TOTALS = """
{{ config(materialized='incremental_view') }}
select k, count(*) as n, sum(v) as total from {{ source('raw', 'src') }} group by k
"""

EVERYTHING = """
{{ config(materialized='incremental_view') }}
select count(*) as n, max(v) as top from {{ source('raw', 'src') }}
"""


def rows(project, relation: str, columns: str = "*") -> Counter:
    return Counter(
        tuple(r) for r in project.run_sql(f"select {columns} from {relation}", fetch="all")
    )


def latest_version(project, relation: str) -> int:
    return int(project.run_sql(f"describe history {relation} limit 1", fetch="one")[0])


def by_name(results, name: str):
    matching = [r for r in results if r.node.name == name]
    assert len(matching) == 1, [r.node.name for r in results]
    return matching[0]


def create_src(project) -> str:
    table = f"{project.test_schema}.src"
    project.run_sql(f"create table {table} (id int, k int, v int)")
    return table


class TestStepReport:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "positive.sql": POSITIVE,
            "totals.sql": TOTALS,
            "everything.sql": EVERYTHING,
            "sources.yml": SOURCES_YML,
        }

    def test_numbers_of_a_known_change_then_a_skipped_step(self, project):
        src = create_src(project)
        project.run_sql(f"insert into {src} values (1, 1, 10), (2, 1, 20), (3, 2, -5)")
        results = run_dbt(["run"])
        first = by_name(results, "positive").adapter_response
        assert first["step"] == 1
        assert first["plan"] == "linear", first
        assert (first["changes_read"], first["inserted"], first["deleted"]) == (3, 2, 0)
        assert first["applied"] == 2
        totals = by_name(results, "totals").adapter_response
        assert totals["plan"] == "aggregate", totals
        assert (totals["step"], totals["inserted"], totals["deleted"]) == (1, 2, 0)
        # a global aggregate's first step inserts its one row and deletes nothing
        everything = by_name(results, "everything").adapter_response
        assert (everything["inserted"], everything["deleted"]) == (1, 0), everything
        assert rows(project, f"{project.test_schema}.everything") == Counter({(3, 20): 1})

        # an update (pre- and post-image) and a delete: 3 changes read
        project.run_sql(f"update {src} set v = 11 where id = 1")
        project.run_sql(f"delete from {src} where id = 2")
        with pytest.MonkeyPatch.context() as patch:  # a progress line every 0.2 s of a step
            patch.setenv(PROGRESS_ENV, "0.2")
            results, log = run_dbt_and_capture(["run"])
        # each step takes longer than 0.2 s: it said what it was doing as it ran
        progress = re.findall(r"positive: step running for \d+ s, statement \d+: .+", log)
        assert progress, log
        second = by_name(results, "positive").adapter_response
        assert second["step"] == 2
        assert (second["changes_read"], second["inserted"], second["deleted"]) == (3, 1, 2)
        assert second["applied"] == 3
        # the step line once, in the log; dbt's result line shows the short status
        assert log.count("positive: step 2: read 3 changes, applied 3 (+1 -2)") == 1, log
        assert second["step_line"].startswith("positive: step 2: read 3 changes")
        assert second["_message"] == "+1 -2"
        ok_line = r"OK created sql incremental_view model \S+\.positive .*\[(\x1b\[32m)?\+1 -2\b"
        assert re.search(ok_line, log), log
        assert rows(project, f"{project.test_schema}.positive") == Counter({(1, 1, 11): 1})
        totals = by_name(results, "totals").adapter_response
        # group 1 goes from (1, 2, 30) to (1, 1, 11): one row deleted, one inserted
        assert (totals["step"], totals["inserted"], totals["deleted"]) == (2, 1, 1)
        assert rows(project, f"{project.test_schema}.totals") == Counter(
            {(1, 1, 11): 1, (2, 1, -5): 1}
        )

        # no input change: the step is skipped and the model's table is not touched
        before = {
            name: (
                latest_version(project, f"{project.test_schema}.{name}"),
                rows(project, f"{project.test_schema}.{name}"),
            )
            for name in ("positive", "totals", "everything")
        }
        results, log = run_dbt_and_capture(["run"])
        for name in ("positive", "totals", "everything"):
            response = by_name(results, name).adapter_response
            assert response["step"] == 2, response
            assert (response["changes_read"], response["applied"]) == (0, 0), response
            assert response["_message"] == "unchanged", response
            assert "inputs unchanged, nothing to do" in response["step_line"]
            assert f"{name}: step 2: inputs unchanged, nothing to do" in log
            assert (
                latest_version(project, f"{project.test_schema}.{name}"),
                rows(project, f"{project.test_schema}.{name}"),
            ) == before[name]


class TestFullRefresh:
    @pytest.fixture(scope="class")
    def models(self):
        return {"totals.sql": TOTALS, "sources.yml": SOURCES_YML}

    def test_full_refresh_rebuilds_from_the_inputs(self, project):
        src = create_src(project)
        model = f"{project.test_schema}.totals"
        project.run_sql(f"insert into {src} values (1, 1, 10), (2, 2, 20)")
        run_dbt(["run"])
        project.run_sql(f"insert into {src} values (3, 1, 5)")
        run_dbt(["run"])
        # someone damages the model's table behind the adapter's back
        project.run_sql(f"insert into {model} values (9, 9, 9)")
        project.run_sql(f"delete from {model} where k = 2")

        results = run_dbt(["run", "--full-refresh"])
        response = by_name(results, "totals").adapter_response
        assert response["step"] == 1, response
        assert response["changes_read"] == 3, response
        assert rows(project, model) == Counter({(1, 2, 15): 1, (2, 1, 20): 1})

        # and the rebuilt model keeps stepping normally
        project.run_sql(f"delete from {src} where id = 1")
        results = run_dbt(["run"])
        response = by_name(results, "totals").adapter_response
        assert response["step"] == 2, response
        assert response["changes_read"] == 1, response
        assert rows(project, model) == Counter({(1, 1, 5): 1, (2, 1, 20): 1})


class TestAppendOnly:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "growing.sql": "{{ config(materialized='incremental_view', append_only=true) }}\n"
            "select id, v from {{ source('raw', 'src') }}",
            "sources.yml": SOURCES_YML,
        }

    def test_a_delete_fails_the_step_and_changes_nothing(self, project):
        src = create_src(project)
        model = f"{project.test_schema}.growing"
        project.run_sql(f"insert into {src} values (1, 1, 10), (2, 1, 20)")
        run_dbt(["run"])
        project.run_sql(f"insert into {src} values (3, 1, 30)")
        results = run_dbt(["run"])
        assert by_name(results, "growing").adapter_response["step"] == 2
        before = (latest_version(project, model), rows(project, model))

        project.run_sql(f"delete from {src} where id = 1")
        project.run_sql(f"insert into {src} values (4, 1, 40)")
        results = run_dbt(["run"], expect_pass=False)
        message = by_name(results, "growing").message
        assert "growing" in message and "append_only" in message, message
        assert (latest_version(project, model), rows(project, model)) == before

        # still failing on the next run: the offending change was not consumed
        results = run_dbt(["run"], expect_pass=False)
        assert "append_only" in by_name(results, "growing").message
        assert (latest_version(project, model), rows(project, model)) == before


class TestProfileSettings:
    """The profile's runtime settings reach each connection's session, also in a process whose
    Spark was started with others (this suite's: SMALL_DATA_SETTINGS shuffle to 1 partition)."""

    @pytest.fixture(scope="class")
    def dbt_profile_target(self, dbt_profile_target):
        settings = {
            **dbt_profile_target["server_side_parameters"],
            "spark.sql.shuffle.partitions": "3",
        }
        return {**dbt_profile_target, "server_side_parameters": settings}

    @pytest.fixture(scope="class")
    def models(self):
        return {"one.sql": "{{ config(materialized='table') }} select 1 as id"}

    def test_a_runtime_setting_of_the_profile_reaches_the_session(self, project):
        run_dbt(["run"])
        row = project.run_sql("set spark.sql.shuffle.partitions", fetch="one")
        assert row[1] == "3", row


class TestNonDeltaInput:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "from_parquet.sql": "{{ config(materialized='incremental_view') }}\n"
            "select id from {{ source('raw', 'parquet_src') }}",
            "sources.yml": SOURCES_YML,
        }

    def test_a_parquet_input_is_explained(self, project):
        schema = project.test_schema
        project.run_sql(f"create table {schema}.parquet_src (id int) using parquet")
        project.run_sql(f"insert into {schema}.parquet_src values (1)")

        results = run_dbt(["run"], expect_pass=False)
        message = by_name(results, "from_parquet").message
        assert "from_parquet" in message and "parquet_src" in message, message
        assert "not a Delta table" in message, message
        assert "CONVERT TO DELTA" in message, message
        tables = {row[1] for row in project.run_sql(f"show tables in {schema}", fetch="all")}
        assert "from_parquet" not in tables, tables  # nothing was written


class TestChangeFeedOff:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "from_no_feed.sql": "{{ config(materialized='incremental_view') }}\n"
            "select id from {{ source('raw', 'no_feed_src') }}",
            "sources.yml": SOURCES_YML,
        }

    def test_feed_off_is_explained_with_the_fix(self, project):
        schema = project.test_schema
        project.run_sql(
            f"create table {schema}.no_feed_src (id int) using delta "
            "tblproperties (delta.enableChangeDataFeed = false)"
        )
        project.run_sql(f"insert into {schema}.no_feed_src values (1)")

        results = run_dbt(["run"], expect_pass=False)
        message = by_name(results, "from_no_feed").message
        assert "from_no_feed" in message and "no_feed_src" in message, message
        assert "change data feed" in message, message
        assert "delta.enableChangeDataFeed = true" in message, message
        tables = {row[1] for row in project.run_sql(f"show tables in {schema}", fetch="all")}
        assert "from_no_feed" not in tables, tables  # nothing was written

        # following the advice makes the model work
        project.run_sql(
            f"alter table {schema}.no_feed_src "
            "set tblproperties (delta.enableChangeDataFeed = true)"
        )
        results = run_dbt(["run"])
        assert by_name(results, "from_no_feed").adapter_response["step"] == 1
        assert rows(project, f"{schema}.from_no_feed") == Counter({(1,): 1})


class TestChangedSql:
    @pytest.fixture(scope="class")
    def models(self):
        return {"positive.sql": POSITIVE, "sources.yml": SOURCES_YML}

    def test_changed_sql_asks_for_a_full_refresh(self, project):
        src = create_src(project)
        model = f"{project.test_schema}.positive"
        project.run_sql(f"insert into {src} values (1, 1, 10), (2, 1, -20)")
        run_dbt(["run"])
        before = (latest_version(project, model), rows(project, model))

        write_file(
            POSITIVE.replace("where v > 0", "where v < 0"),
            project.project_root,
            "models",
            "positive.sql",
        )
        results = run_dbt(["run"], expect_pass=False)
        message = by_name(results, "positive").message
        assert "positive" in message and "--full-refresh" in message, message
        assert (latest_version(project, model), rows(project, model)) == before

        results = run_dbt(["run", "--full-refresh"])
        assert by_name(results, "positive").adapter_response["step"] == 1
        assert rows(project, model) == Counter({(2, 1, -20): 1})


class TestYamlConfig:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "configured_in_yaml.sql": "select k, count(*) as n from {{ source('raw', 'src') }} "
            "group by k",
            "sources.yml": SOURCES_YML,
            "models.yml": """
version: 2
models:
  - name: configured_in_yaml
    config:
      materialized: incremental_view
""",
        }

    def test_materialization_from_yaml(self, project):
        src = create_src(project)
        model = f"{project.test_schema}.configured_in_yaml"
        project.run_sql(f"insert into {src} values (1, 1, 10), (2, 1, 20), (3, 2, 30)")
        results = run_dbt(["run"])
        response = by_name(results, "configured_in_yaml").adapter_response
        assert (response["step"], response["plan"]) == (1, "aggregate"), response
        project.run_sql(f"delete from {src} where id = 3")
        results = run_dbt(["run"])
        response = by_name(results, "configured_in_yaml").adapter_response
        assert (response["step"], response["deleted"]) == (2, 1), response
        assert rows(project, model) == Counter({(1, 2): 1})


COPIES = """
{{ config(materialized='incremental_view') }}
select k, v from {{ source('raw', 'src') }}
"""

PAIRS = """
{{ config(materialized='incremental_view') }}
select a.id as a_id, b.id as b_id, a.k from {{ source('raw', 'src') }} a
join {{ source('raw', 'src') }} b on a.k = b.k
"""

TOP_PAIR = """
{{ config(materialized='incremental_view') }}
select a.k, max(b.v) as top, count(*) as n from {{ source('raw', 'src') }} a
join {{ source('raw', 'src') }} b on a.k = b.k group by a.k
"""

LEFT_PAIRS = """
{{ config(materialized='incremental_view') }}
select a.id, b.v from {{ source('raw', 'src') }} a
left join {{ source('raw', 'src') }} b on a.k = b.k and b.v > 15
"""

TOP_THREE = """
{{ config(materialized='incremental_view') }}
select id, v from {{ source('raw', 'src') }} order by v desc, id limit 3
"""


# How a step's materialized views appear in dbt.log: CHECKPOINT in the embedded session (a
# local checkpoint), CACHE TABLE over Thrift.
MATERIALIZED = ("CHECKPOINT ", "CACHE TABLE ")


def materializes(line: str, model: str) -> bool:
    return any(f".{model}: {kind}" in line for kind in MATERIALIZED)


def net_statements(logs_dir: str, model: str, since: int) -> list:
    """The statements materializing `model`'s `_net` view run after byte `since` of dbt.log."""
    with open(f"{logs_dir}/dbt.log", encoding="utf-8") as log:
        log.seek(since)
        return [line for line in log if materializes(line, model) and "_net AS " in line]


def model_inserts(logs_dir: str, model: str, since: int) -> list:
    """The INSERTs into `model`'s own table run after byte `since` of dbt.log."""
    with open(f"{logs_dir}/dbt.log", encoding="utf-8") as log:
        log.seek(since)
        return [line for line in log if f".{model}: INSERT INTO " in line and f"{model}` (" in line]


def log_size(logs_dir: str) -> int:
    with open(f"{logs_dir}/dbt.log", "rb") as log:
        return log.seek(0, 2)


TOTALS_MERGED = """
{{ config(materialized='incremental_view', rewrite_when_small=false) }}
select k, count(*) as n, sum(v) as total from {{ source('raw', 'src') }} group by k
"""

# LATENESS 0 on k, over totals: the waterline is the highest k seen, and a change to a lower k
# is late. A rewrite of totals removes and adds every row again; netted, only what differs.
TOTALS_LATE = """
{{ config(materialized='incremental_view', lateness={'k': '0'}) }}
select k, n, total from {{ ref('totals') }}
"""

KEPT = """
{{ config(materialized='incremental_view') }}
select k, v from {{ source('raw', 'src') }} where v > 0
"""

# an aggregate over kept: it reads kept's netted change one row per copy
KEPT_TOTALS = """
{{ config(materialized='incremental_view') }}
select k, count(*) as n, sum(v) as total from {{ ref('kept') }} group by k
"""


class TestSmallModelRewrite:
    """A step that removes rows of a small model writes it whole (INSERT OVERWRITE, one file),
    by key or by whole rows; `rewrite_when_small: false` keeps the MERGE; a model downstream
    sees only the rows that differ."""

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "totals.sql": TOTALS,
            "totals_merged.sql": TOTALS_MERGED,
            "totals_late.sql": TOTALS_LATE,
            "kept.sql": KEPT,
            "kept_totals.sql": KEPT_TOTALS,
            "sources.yml": SOURCES_YML,
        }

    def last_commit(self, project, name: str) -> dict:
        row = project.run_sql(f"describe history {project.test_schema}.{name} limit 1", fetch="one")
        return row.asDict()

    def test_rewritten_merged_and_netted_downstream(self, project):
        src = create_src(project)
        schema = project.test_schema
        project.run_sql(
            f"insert into {src} values (1, 1, 10), (2, 1, 20), (3, 2, 5), (4, 3, 7), (5, 3, 2), "
            "(8, 3, 7)"
        )
        run_dbt(["run"])
        # only group 3 changes: its n and total; kept loses (3, 2) and both copies of (3, 7)
        # (netted: one row of weight -2, read downstream as two rows of -1) and gains (3, 9)
        # and (3, 1)
        project.run_sql(f"update {src} set v = 9 where id = 5")
        project.run_sql(f"insert into {src} values (6, 3, 1)")
        project.run_sql(f"delete from {src} where id in (4, 8)")
        results = run_dbt(["run"])

        totals = by_name(results, "totals").adapter_response
        assert totals["write"] == "rewrite" and totals["deleted"] == 1, totals
        assert "the model written whole (small)" in totals["step_line"], totals
        commit = self.last_commit(project, "totals")
        assert commit["operation"] == "WRITE", commit
        assert commit["operationParameters"]["mode"] == "Overwrite", commit
        files = project.run_sql(f"describe detail {schema}.totals", fetch="one")
        assert files.asDict()["numFiles"] == 1, files

        kept = by_name(results, "kept").adapter_response
        assert kept["write"] == "rewrite", kept
        assert self.last_commit(project, "kept")["operationParameters"]["mode"] == "Overwrite"
        # kept's overwrite read netted: its 6 rows out and 5 in again are 5 rows that differ
        kept_totals = by_name(results, "kept_totals").adapter_response
        assert kept_totals["changes_read"] == 5, kept_totals

        merged = by_name(results, "totals_merged").adapter_response
        assert merged["write"] == "", merged
        assert self.last_commit(project, "totals_merged")["operation"] == "MERGE"

        # downstream: the overwrite's feed netted to group 3's old and new row, both on time
        late = by_name(results, "totals_late").adapter_response
        assert (late["late"], late["inserted"], late["deleted"]) == (0, 1, 1), late
        assert rows(project, f"{schema}.totals_late__late") == Counter()

        groups = f"select k, count(*), sum(v) from {src} group by k"
        expected = Counter(tuple(r) for r in project.run_sql(groups, fetch="all"))
        assert expected[(3, 2, 10)] == 1, expected
        for name in ("totals", "totals_merged", "totals_late", "kept_totals"):
            assert rows(project, f"{schema}.{name}") == expected, name
        positive = f"select k, v from {src} where v > 0"
        expected = Counter(tuple(r) for r in project.run_sql(positive, fetch="all"))
        assert rows(project, f"{schema}.kept") == expected


class TestInsertOnlySteps:
    """Inserts through a query without left joins are appended without netting, by one INSERT
    that reads the change; the result is the same multiset (duplicates included) as the
    query's, and a deletion nets again. A MAX over a join is not recomputed from the inputs for
    inserts."""

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "copies.sql": COPIES,
            "pairs.sql": PAIRS,
            "left_pairs.sql": LEFT_PAIRS,
            "top_pair.sql": TOP_PAIR,
            "top_three.sql": TOP_THREE,
            "sources.yml": SOURCES_YML,
        }

    def assert_models_equal_queries(self, project):
        schema = project.test_schema
        queries = {
            "copies": f"select k, v from {schema}.src",
            "pairs": f"select a.id, b.id, a.k from {schema}.src a join {schema}.src b on a.k = b.k",
            "left_pairs": f"select a.id, b.v from {schema}.src a left join {schema}.src b "
            "on a.k = b.k and b.v > 15",
            "top_pair": f"select a.k, max(b.v), count(*) from {schema}.src a join {schema}.src b "
            "on a.k = b.k group by a.k",
            "top_three": f"select id, v from {schema}.src order by v desc, id limit 3",
        }
        for name, query in queries.items():
            expected = Counter(tuple(r) for r in project.run_sql(query, fetch="all"))
            assert rows(project, f"{schema}.{name}") == expected, name

    def test_inserts_skip_netting_and_keep_duplicates(self, project, logs_dir):
        src = create_src(project)
        project.run_sql(f"insert into {src} values (1, 1, 10), (1, 1, 10), (2, 1, 20), (3, 2, 5)")
        since = log_size(logs_dir) if os.path.exists(f"{logs_dir}/dbt.log") else 0
        run_dbt(["run"])
        self.assert_models_equal_queries(project)
        # the first step inserts the query over the snapshots: nothing is cached
        with open(f"{logs_dir}/dbt.log", encoding="utf-8") as log:
            log.seek(since)
            cached = [line for line in log if materializes(line, "pairs")]
        assert cached == [], cached

        # inserts only, duplicating rows that are already there
        project.run_sql(f"insert into {src} values (1, 1, 10), (4, 2, 30)")
        since = log_size(logs_dir)
        results = run_dbt(["run"])
        self.assert_models_equal_queries(project)
        assert by_name(results, "copies").adapter_response["inserted"] == 2
        for model in ("copies", "pairs"):  # appended as it is: not netted, not materialized
            assert net_statements(logs_dir, model, since) == [], model
            inserts = model_inserts(logs_dir, model, since)
            assert len(inserts) == 1 and "GROUP BY" not in inserts[0], (model, inserts)
        statements = net_statements(logs_dir, "left_pairs", since)
        assert len(statements) == 1 and "HAVING SUM" in statements[0], statements
        # Read as join terms without older versions, the inserts would hold negative terms
        # (taken for deleted maxima: k = 2's 30 here) and MAX would recompute its groups.
        with open(f"{logs_dir}/dbt.log", encoding="utf-8") as log:
            log.seek(since)
            recomputed = [
                line
                for line in log
                if materializes(line, "top_pair") and "_streamsql_recomputed" in line
            ]
        assert recomputed == [], recomputed
        # the global top-K's new rows come from its own rows and the change alone
        top_three = by_name(results, "top_three").adapter_response
        assert top_three["plan"] == "linear" and not top_three["notes"], top_three

        # a deletion: the change is netted again
        project.run_sql(f"delete from {src} where id = 1")
        since = log_size(logs_dir)
        results = run_dbt(["run"])
        self.assert_models_equal_queries(project)
        assert by_name(results, "copies").adapter_response["deleted"] == 3
        for model in ("copies", "pairs", "left_pairs"):
            statements = net_statements(logs_dir, model, since)
            assert len(statements) == 1 and "HAVING SUM" in statements[0], (model, statements)
        # the top three lost their third row, (1, 10): the row below the cut that takes its
        # place, (3, 5), is among those the step record keeps (the query is not read again)
        top_three = by_name(results, "top_three").adapter_response
        assert top_three["notes"] == [], top_three
        assert (top_three["inserted"], top_three["deleted"]) == (1, 1), top_three

        # more rows than the record keeps below the cut (3 + 10), then deletions of the top
        # 16: the rows left are not all known, and the query is read again (the step says so)
        project.run_sql(f"insert into {src} select id, 3, id from range(100, 120) as r(id)")
        results = run_dbt(["run"])
        self.assert_models_equal_queries(project)
        assert by_name(results, "top_three").adapter_response["notes"] == []
        project.run_sql(f"delete from {src} where id >= 104")
        results = run_dbt(["run"])
        self.assert_models_equal_queries(project)
        top_three = by_name(results, "top_three").adapter_response
        assert top_three["notes"] == [global_top_k.READ_AGAIN], top_three


STAGED = """
{{ config(materialized='view') }}
select id, k, v * 2 as v2 from {{ source('raw', 'src') }} where k is not null
"""

STAGED_AGAIN = """
{{ config(materialized='view') }}
select * from {{ ref('staged') }} where v2 > 0
"""

OVER_A_VIEW = """
{{ config(materialized='incremental_view') }}
select k, count(*) as n, sum(v2) as total from {{ ref('staged') }} group by k
"""

OVER_TWO_VIEWS = """
{{ config(materialized='incremental_view') }}
select s.id, s.v2, t.n from {{ ref('staged_again') }} s join {{ ref('over_a_view') }} t
  on s.k = t.k
"""


class TestViewInputs:
    """dbt `view` models as inputs: the step plans with each view's query in its place and
    reads the change of the view's table."""

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "staged.sql": STAGED,
            "staged_again.sql": STAGED_AGAIN,
            "over_a_view.sql": OVER_A_VIEW,
            "over_two_views.sql": OVER_TWO_VIEWS,
            "sources.yml": SOURCES_YML,
        }

    def test_models_over_views_equal_their_queries_after_every_step(self, project):
        schema = project.test_schema
        src = create_src(project)
        project.run_sql(f"insert into {src} values (1, 1, 10), (2, 1, -3), (3, 2, 5), (4, null, 1)")
        changes = [
            f"insert into {src} values (5, 2, 7), (6, 3, 1)",
            f"update {src} set v = -10 where id = 3",
            f"delete from {src} where id in (1, 6)",
        ]
        for step in range(1, len(changes) + 2):
            if step > 1:
                project.run_sql(changes[step - 2])
            results = run_dbt(["run"])
            for name in ("over_a_view", "over_two_views"):
                response = by_name(results, name).adapter_response
                assert response["step"] == step, response
                assert response["computed"] == response["plan"] != "recompute", response
                body = by_name(results, name).node.compiled_code
                assert rows(project, f"{schema}.{name}") == Counter(
                    tuple(r) for r in project.run_sql(f"select * from ({body}) q", fetch="all")
                ), (name, step)
        # the steps read the view's table: its change, not the whole of it
        last = by_name(results, "over_a_view").adapter_response
        assert last["changes_read"] == 2, last  # the two deleted rows
        # a run with no change in the view's table is not a step
        for result in run_dbt(["run"]):
            if result.node.name.startswith("over_"):
                assert result.adapter_response["_message"] == "unchanged"


class TestStepReportOverConnect(OverConnect, TestStepReport):
    """The same steps through a Spark Connect server (`method: connect`)."""


class TestViewInputsOverConnect(OverConnect, TestViewInputs):
    """The same steps through a Spark Connect server (`method: connect`)."""
