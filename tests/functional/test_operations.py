"""The operational generic tests and streamsql_explain on real Spark + Delta, in one project.

Two LATENESS models over two sources take the same two steps: `fresh` gets rows stamped a few
minutes before now and none of them late; `stale` gets rows from 2020 and, in its second step,
ten rows below its waterline. late_rows_at_most and waterline_within pass on the first and fail
on the second. Three more models read them, one per plan (aggregate, stages, recompute), and
streamsql_explain describes each. A versioned model (two versions) and two models that read one
version each: the operations and matches_recompute find the version they are asked for.
"""

import re

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

SOURCES = """
version: 2
sources:
  - name: ops
    schema: "{{ target.schema }}"
    tables: [{name: fresh_events}, {name: stale_events}]
"""

EVENTS = """
{{ config(materialized='incremental_view', lateness={'ts': 'INTERVAL 1 HOUR'}) }}
select id, ts, v from {{ source('ops', '%s') }} where v >= 0
"""

MODELS = {
    "sources.yml": SOURCES,
    "fresh.sql": EVENTS % "fresh_events",
    "stale.sql": EVENTS % "stale_events",
    "fresh_hourly.sql": """
{{ config(materialized='incremental_view') }}
select date_trunc('hour', ts) as hour, count(*) as n, sum(v) as total
from {{ ref('fresh') }}
group by date_trunc('hour', ts)
""",
    "fresh_with_stale_counts.sql": """
{{ config(materialized='incremental_view') }}
select f.id, f.v, s.n
from {{ ref('fresh') }} as f
join (select id, count(*) as n from {{ ref('stale') }} group by id) as s on f.id = s.id
""",
    "top_values.sql": """
{{ config(materialized='incremental_view') }}
select id, v from {{ ref('fresh') }} order by v desc, id limit 3 offset 1
""",
    "versioned_v1.sql": """
{{ config(materialized='incremental_view') }}
select id, v from {{ ref('fresh') }}
""",
    "versioned_v2.sql": """
{{ config(materialized='incremental_view') }}
select id, v * 2 as v2 from {{ ref('fresh') }}
""",
    "reads_v1.sql": """
{{ config(materialized='incremental_view') }}
select id, v from {{ ref('versioned', v=1) }} where v > 5
""",
    "reads_v2.sql": """
{{ config(materialized='incremental_view') }}
select id, v2 from {{ ref('versioned', version=2) }} where v2 > 5
""",
    # never built: for streamsql_explain's errors and its "not run yet"
    "never_run.sql": EVENTS % "fresh_events",
    "plain.sql": "{{ config(materialized='view') }} select 1 as x",
    "tests.yml": """
version: 2
models:
  - name: fresh
    data_tests: &operational
      - late_rows_at_most:
          arguments: {max_share: 0.1, last_steps: 2}
      - late_rows_at_most:
          arguments: {max_rows: 0}
      - waterline_within:
          arguments: {column: ts, interval: "INTERVAL 1 DAY"}
      - waterline_within:
          arguments: {column: ts, interval: "INTERVAL 2 HOURS", behind: max}
  - name: versioned
    latest_version: 2
    versions: [{v: 1}, {v: 2}]
  - name: reads_v1
    data_tests: [matches_recompute]
  - name: reads_v2
    data_tests: [matches_recompute]
  - name: stale
    data_tests:
      - late_rows_at_most:
          arguments: {max_share: 0.1, last_steps: 2}
      - late_rows_at_most:
          arguments: {max_rows: 0}
      - waterline_within:
          arguments: {column: ts, interval: "INTERVAL 1 DAY"}
      # the waterline trails the newest row by the lateness (1 hour)
      - waterline_within:
          arguments: {column: ts, interval: "INTERVAL 30 MINUTES", behind: max}
""",
}

NOT_BUILT = "plain never_run"
STALE_START = "2020-01-01 10:00:00"


def fresh_rows(ids, minutes_ago):
    return ", ".join(
        f"({i}, current_timestamp() - make_dt_interval(0, 0, {m}), {i})"
        for i, m in zip(ids, minutes_ago)
    )


def stale_rows(ids, start):
    return ", ".join(f"({i}, timestamp'{start}' + make_dt_interval(0, 0, {i}), {i})" for i in ids)


def flat(text):
    return " ".join(text.split())


def contains(text, expected):
    for line in expected:
        assert flat(line) in text, line


class TestOperations:
    @pytest.fixture(scope="class")
    def models(self):
        return MODELS

    @pytest.fixture(scope="class")
    def steps(self, project):
        """Two steps of every built model; their adapter responses, by model, step by step."""
        schema = project.test_schema
        fresh, stale = f"{schema}.fresh_events", f"{schema}.stale_events"
        for table in (fresh, stale):
            project.run_sql(f"create or replace table {table} (id bigint, ts timestamp, v int)")
        responses = {}

        def step():
            for result in run_dbt(["run", "--exclude", NOT_BUILT]):
                responses.setdefault(result.node.name, []).append(result.adapter_response)

        project.run_sql(f"insert into {fresh} values {fresh_rows(range(1, 11), range(3, 33, 3))}")
        project.run_sql(f"insert into {stale} values {stale_rows(range(1, 11), STALE_START)}")
        step()  # fresh: waterline about now - 1 hour 3 minutes; stale: 2020-01-01 09:10
        project.run_sql(f"insert into {fresh} values {fresh_rows(range(11, 21), range(1, 11))}")
        project.run_sql(f"update {fresh} set v = v + 100 where id = 1")  # two changes
        project.run_sql(f"delete from {fresh} where id = 2")
        project.run_sql(
            f"insert into {stale} values "  # ten late rows, two on time
            f"{stale_rows(range(11, 21), '2020-01-01 08:00:00')}, "
            f"{stale_rows(range(21, 23), '2020-01-01 10:00:00')}"
        )
        step()
        return responses

    def test_the_steps_quarantined_only_stale_rows(self, project, steps):
        assert [r["late"] for r in steps["fresh"]] == [0, 0]
        assert [r["late"] for r in steps["stale"]] == [0, 10]
        assert [r["changes_read"] for r in steps["fresh"]] == [10, 13]
        assert [r["changes_read"] for r in steps["stale"]] == [10, 12]

    def test_operational_tests_pass_on_a_healthy_model(self, project, steps):
        results = run_dbt(["test", "--select", "fresh"])
        assert len(results) == 4
        assert {r.status for r in results} == {"pass"}

    def test_operational_tests_fail_on_late_rows_and_a_waterline_behind(self, project, steps):
        results = run_dbt(["test", "--select", "stale"], expect_pass=False)
        assert len(results) == 4
        assert {r.status for r in results} == {"fail"}
        assert {r.failures for r in results} == {1}
        rows = {}
        for result in results:
            args = result.node.test_metadata.kwargs
            key = (result.node.test_metadata.name, args.get("max_share") or args.get("behind"))
            found = project.run_sql(result.node.compiled_code, fetch="all")
            assert len(found) == 1, result.node.compiled_code
            rows[key] = found[0]

        # The share: the rows of the last two steps' __late over the changes they read, which
        # are exactly the steps' own counts.
        share = rows[("late_rows_at_most", 0.1)]
        late = sum(r["late"] for r in steps["stale"])
        read = sum(r["changes_read"] for r in steps["stale"])
        assert (share[0], share[1], share[2], share[3]) == (1, 2, late, read) == (1, 2, 10, 22)
        assert share[4] == pytest.approx(10 / 22)
        assert tuple(rows[("late_rows_at_most", None)][:4]) == (2, 2, 10, None)  # last step only

        # waterline_within: the waterline after step 2, compared with now and with the newest row
        behind_now = rows[("waterline_within", None)]
        assert (behind_now[0], behind_now[1]) == ("ts", 2)
        assert str(behind_now[2]) == "2020-01-01 09:22:00"
        behind_max = rows[("waterline_within", "max")]
        assert (str(behind_max[2]), str(behind_max[3])) == (
            "2020-01-01 09:22:00",
            "2020-01-01 10:22:00",
        )

    def explain(self, capsys, model, args=""):
        """The operation's text, white space collapsed (long lines are wrapped)."""
        capsys.readouterr()
        run_dbt(["run-operation", "streamsql_explain", "--args", f"{{model: {model}{args}}}"])
        return flat(capsys.readouterr().out)

    def test_a_versioned_model_is_named_with_its_version(self, project, steps, capsys):
        schema = project.test_schema
        for model, args, table in [
            ("versioned", ", v: 2", "versioned_v2"),
            ("versioned", ", v: 1", "versioned_v1"),
            ("versioned_v1", "", "versioned_v1"),
        ]:
            text = self.explain(capsys, model, args)
            assert f"streamsql_explain: {table} ({schema}.{table})" in text, (model, args)
        _, log = run_dbt_and_capture(
            ["run-operation", "streamsql_explain", "--args", "{model: versioned}"],
            expect_pass=False,
        )
        assert (
            "streamsql_explain: 2 models are named 'versioned': test.versioned v1, "
            "test.versioned v2. Name one: for a version, --args '{model: versioned, v: <version>}'"
        ) in flat(log), log
        _, log = run_dbt_and_capture(
            ["run-operation", "streamsql_flush", "--args", "{model: versioned, v: 1}"],
            expect_pass=False,
        )
        assert "Model versioned_v1 declares no watermark: nothing is held." in log, log

    def test_matches_recompute_reads_the_version_a_ref_names(self, project, steps):
        results = run_dbt(["test", "--select", "reads_v1", "reads_v2"])
        assert len(results) == 2 and all(r.status == "pass" for r in results)

    def test_explain_a_linear_model_with_lateness(self, project, steps, capsys):
        schema = project.test_schema
        contains(
            self.explain(capsys, "fresh"),
            [
                f"streamsql_explain: fresh ({schema}.fresh)",
                "Plan: linear",
                "fast path filter, projection",
                "recomputed nothing: a step costs its inputs' change",
                f"{schema}.fresh__late LATENESS quarantine",
                f"{schema}.fresh__waterline the waterline of each step",
                "Merge key: none: a step that only adds rows appends them",
                "ts (timestamp): lateness INTERVAL 1 HOUR",
                "waterline after step 2: ",
                f"{schema}.fresh_events step 2 read version 4; unchanged since",
                # the SQL the operation renders is the SQL `dbt run` compiled
                "SQL: the same as step 2's (fingerprint ",
                "no input changed since step 2: the next run is not a step",
            ],
        )
        project.run_sql(f"insert into {schema}.fresh_events values {fresh_rows([30], [0])}")
        contains(
            self.explain(capsys, "fresh"),
            [
                f"{schema}.fresh_events step 2 read version 4; the next step reads 5..5 (1 commit)",
                "step 3 reads the inputs' changes listed above",
            ],
        )

    def test_explain_an_aggregate(self, project, steps, capsys):
        contains(
            self.explain(capsys, "fresh_hourly"),
            [
                "Plan: aggregate",
                "fast path group by (count(*), sum)",
                f"{project.test_schema}.fresh_hourly__streamsql_state per-group partial aggregates",
                "Merge key: (hour): a changed group's row is updated in place",
            ],
        )

    def test_explain_stages(self, project, steps, capsys):
        contains(
            self.explain(capsys, "fresh_with_stale_counts"),
            [
                "Plan: linear",
                "fast path projection, inner join",
                "stage0 group by (count(*)) (an aggregate below the top, columns id, n)",
                f"{project.test_schema}.fresh_with_stale_counts__streamsql_stage0 per-group state",
                f"{project.test_schema}.stale step 2 read version 2; unchanged since",
            ],
        )

    def test_explain_a_recompute(self, project, steps, capsys):
        contains(
            self.explain(capsys, "top_values"),
            [
                "Plan: recompute",
                "recomputed the whole query, because LIMIT with OFFSET is not maintained "
                "incrementally (the rows above the offset are not kept)",
                "to avoid it drop the OFFSET (ORDER BY ... LIMIT k at the top of the model is "
                "maintained)",
            ],
        )

    def test_explain_a_model_not_run_yet_and_the_errors(self, project, steps, capsys):
        text = self.explain(capsys, "never_run")
        assert re.search(
            rf"{project.test_schema}\.fresh_events not read yet; the next step "
            r"reads version \d+ in full",
            text,
        )
        assert "not run yet: the first `dbt run` creates the model's tables" in text

        for model, message in [
            ("nope", "streamsql_explain: no model named 'nope' in this project"),
            ("plain", "model 'plain' is materialized as view, not incremental_view"),
        ]:
            _, log = run_dbt_and_capture(
                ["run-operation", "streamsql_explain", "--args", f"{{model: {model}}}"],
                expect_pass=False,
            )
            assert message in log, log
