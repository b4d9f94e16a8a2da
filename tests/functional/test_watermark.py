"""WATERMARK (docs/lateness-and-watermark.md): held changes, release, LATENESS after release,
flush; the same with `strategy: recompute`, whose steps recompute the query and must neither hold
nor quarantine again what earlier steps held or quarantined."""

import pytest
from dbt.tests.util import run_dbt

MODEL = """
{{ config(materialized='incremental_view', watermark={'seq': '10'},
          lateness={'seq': '5'}, strategy=var('strategy', 'auto')) }}
select seq, label from {{ var('source') }}
"""


def _rows(project, sql):
    return sorted(tuple(row) for row in project.run_sql(sql, fetch="all"))


class TicksSource:
    @pytest.fixture(scope="class")
    def source(self, project):
        table = f"{project.test_schema}.ticks"
        project.run_sql(f"create or replace table {table} (seq bigint, label string)")
        return table


class TestWatermark(TicksSource):
    @pytest.fixture(scope="class")
    def models(self):
        return {"ticks_view.sql": MODEL}

    strategy = "auto"

    def step(self, project, source):
        variables = f"{{source: {source}, strategy: {self.strategy}}}"
        response = run_dbt(["run", "--vars", variables])[0].adapter_response
        if response["step"] > 0 and not response.get("skipped"):
            wanted = "recompute" if self.strategy == "recompute" else "linear"
            assert response["computed"] == wanted, response
        return response

    def test_hold_release_and_flush(self, project, source):
        schema = project.test_schema
        view = f"{schema}.ticks_view"
        project.run_sql(f"insert into {source} values (100, 'a'), (105, 'b')")
        first = self.step(project, source)
        # Nothing has reached 100 + 10 yet: both are held, nothing applied.
        assert first["held"] == 2 and first["applied"] == 0
        assert _rows(project, f"select * from {view}") == []

        project.run_sql(f"insert into {source} values (112, 'c')")
        second = self.step(project, source)
        # 112 >= 100 + 10 releases 'a' (as if it had just arrived); 'b' and 'c' stay held.
        assert _rows(project, f"select * from {view}") == [(100, "a")]
        assert second["held"] == 2
        assert _rows(
            project,
            f"select seq, _streamsql_held_step, _streamsql_released_step "
            f"from {schema}.ticks_view__pending",
        ) == [(100, 1, 2), (105, 1, None), (112, 2, None)]

        project.run_sql(f"insert into {source} values (130, 'd')")
        third = self.step(project, source)
        # 130 releases 105 and 112 ... and LATENESS judges them as they arrive: the waterline
        # after step 2 is 100 - 5 = 95, so neither is late.
        assert _rows(project, f"select seq from {view}") == [(100,), (105,), (112,)]
        assert third["late"] == 0 and third["held"] == 1

        project.run_sql(f"insert into {source} values (90, 'old')")
        fourth = self.step(project, source)
        # 90 + 10 <= 130 (seen): released at once, and below the waterline max(95, 112 - 5) =
        # 107, so LATENESS quarantines it. 130 is still held: nothing >= 140 has arrived.
        assert fourth["late"] == 1 and fourth["held"] == 1
        assert _rows(
            project,
            f"select seq, _streamsql_step, _streamsql_reason from {schema}.ticks_view__late",
        ) == [(90, 4, "late")]

        run_dbt(["run-operation", "streamsql_flush", "--args", "{model: ticks_view}"])
        # A quiet source must not stall the output: the flush releases 130.
        assert _rows(project, f"select seq from {view}") == [(100,), (105,), (112,), (130,)]
        assert _rows(
            project,
            f"select count(*) from {schema}.ticks_view__pending "
            f"where _streamsql_released_step is null",
        ) == [(0,)]

        # after the flush, a step: 140 is held, nothing that was held or late comes back
        project.run_sql(f"insert into {source} values (140, 'e')")
        fifth = self.step(project, source)
        assert fifth["held"] == 1 and fifth["late"] == 0 and fifth["applied"] == 0, fifth
        assert _rows(project, f"select seq from {view}") == [(100,), (105,), (112,), (130,)]
        assert _rows(project, f"select seq, _streamsql_step from {schema}.ticks_view__late") == [
            (90, 4)
        ]
        assert _rows(
            project,
            f"select seq from {schema}.ticks_view__pending where _streamsql_released_step is null",
        ) == [(140,)]


class TestWatermarkRecompute(TestWatermark):
    """The same steps, each a recompute of the query (`strategy: recompute`)."""

    strategy = "recompute"


HELD = """
{{ config(materialized='incremental_view', watermark={'seq': '10'}) }}
select seq, label from {{ var('source') }}
"""
HELD_BRIEFLY = """
{{ config(materialized='incremental_view', watermark={'seq': '10'},
          pending_retention='0 seconds') }}
select seq, label from {{ var('source') }}
"""


class TestPendingRetention(TicksSource):
    """pending_retention: released `__pending` rows go once released longer ago (at every step
    for 0 seconds; 30 days by default); held ones stay, and the model is the same either way."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"held.sql": HELD, "held_briefly.sql": HELD_BRIEFLY}

    def test_released_rows_go_after_the_retention_and_held_ones_stay(self, project, source):
        schema = project.test_schema
        notes = {}
        for values in ("(100, 'a'), (105, 'b')", "(112, 'c')", "(130, 'd')"):
            project.run_sql(f"insert into {source} values {values}")
            results = run_dbt(["run", "--vars", f"{{source: {source}}}"])
            notes = {r.node.name: r.adapter_response["notes"] or [] for r in results}
        pending = "select seq, _streamsql_held_step, _streamsql_released_step from {}__pending"
        # 'a' released by step 2, 'b' and 'c' by step 3, 'd' held
        assert _rows(project, pending.format(f"{schema}.held")) == [
            (100, 1, 2),
            (105, 1, 3),
            (112, 2, 3),
            (130, 3, None),
        ]
        # step 3 first deleted what step 2 released; what step 3 released waits for step 4
        assert _rows(project, pending.format(f"{schema}.held_briefly")) == [
            (105, 1, 3),
            (112, 2, 3),
            (130, 3, None),
        ]
        removed = f"removed 1 row(s) of {schema}.held_briefly__pending released over 0 seconds ago"
        assert removed in notes["held_briefly"], notes
        assert not any("removed" in note for note in notes["held"]), notes
        for name in ("held", "held_briefly"):
            assert _rows(project, f"select * from {schema}.{name}") == [
                (100, "a"),
                (105, "b"),
                (112, "c"),
            ], name
