"""LATENESS (docs/lateness-and-watermark.md) on real Spark + Delta: seed 001's reference example
and friends."""

import json
import re

import pytest
from dbt.tests.util import run_dbt

from dbt.adapters.streamsql.execution.event_time.lateness import BEHIND_LADDERS
from tests.over_connect import OverConnect

SEED_001_ROWS = [
    ("2020-01-01 00:00:00", "home"),
    ("2020-01-01 01:00:00", "office"),
    ("2020-01-01 00:10:00", "shop"),  # late, but not too late
    ("2020-01-01 02:00:00", "home"),
    ("2020-01-01 00:20:00", "friend"),  # too late when the inserts are five steps
]

PICKUPS = """
{{ config(materialized='incremental_view', lateness={'ts': 'INTERVAL 1 HOUR'}) }}
select ts, location from {{ var('source') }}
"""


def _insert(project, table, rows):
    values = ", ".join(f"(timestamp'{ts}', '{loc}')" for ts, loc in rows)
    project.run_sql(f"insert into {table} values {values}")


def _rows(project, sql):
    return [tuple(row) for row in project.run_sql(sql, fetch="all")]


class LatenessProject:
    @pytest.fixture(scope="class")
    def source(self, project):
        table = f"{project.test_schema}.order_pickup"
        project.run_sql(f"create or replace table {table} (ts timestamp, location string)")
        return table

    @pytest.fixture(scope="class")
    def models(self):
        return {"pickups.sql": PICKUPS}

    def step(self, project, source):
        results = run_dbt(["run", "--vars", f"{{source: {source}}}"])
        return results[0].adapter_response


class TestSeed001AsFiveSteps(LatenessProject):
    def test_fifth_row_is_quarantined(self, project, source, capsys):
        responses = []
        for row in SEED_001_ROWS:
            _insert(project, source, [row])
            responses.append(self.step(project, source))
        schema = project.test_schema
        applied = _rows(project, f"select location from {schema}.pickups order by ts")
        assert applied == [("home",), ("shop",), ("office",), ("home",)]
        late = _rows(
            project,
            f"select location, _streamsql_step, _streamsql_change, "
            f"_streamsql_column, _streamsql_waterline, _streamsql_reason "
            f"from {schema}.pickups__late",
        )
        assert late == [("friend", 5, "insert", "ts", "2020-01-01 01:00:00", "late")]
        assert [r["late"] for r in responses] == [0, 0, 0, 0, 1]
        # W(n) = max(W(n-1), max(ts of step n) - 1 hour), one row per step.
        waterlines = _rows(
            project,
            f"select step, column_name, waterline, max_seen "
            f"from {schema}.pickups__waterline order by step",
        )
        assert waterlines == [
            (1, "ts", "2019-12-31 23:00:00", "2020-01-01 00:00:00"),
            (2, "ts", "2020-01-01 00:00:00", "2020-01-01 01:00:00"),
            (3, "ts", "2020-01-01 00:00:00", "2020-01-01 01:00:00"),
            (4, "ts", "2020-01-01 01:00:00", "2020-01-01 02:00:00"),
            (5, "ts", "2020-01-01 01:00:00", "2020-01-01 02:00:00"),
        ]
        assert responses[-1]["waterline"] == {"ts": "2020-01-01 01:00:00"}
        self.check_lateness_counts(project, capsys)

    def check_lateness_counts(self, project, capsys):
        """How far behind the largest value seen before its step each row arrived: step 2's
        01:00 and step 4's 02:00 ahead of it (at most 0 s), step 3's 00:10 50 minutes behind,
        step 5's 00:20 100 minutes behind, the one a LATENESS of 1 hour set aside."""
        ladder = list(BEHIND_LADDERS["seconds"])
        counted = {
            step: behind
            for step, behind in _rows(
                project,
                f"select step, behind from {project.test_schema}.pickups__waterline",
            )
        }
        assert counted[1] is None  # nothing seen before the first step
        bands = {2: 0, 3: ladder.index(3600), 4: 0, 5: ladder.index(7200)}
        for step, band in bands.items():
            behind = json.loads(counted[step])
            assert behind["unit"] == "seconds" and behind["le"] == ladder, behind
            expected = [0] * (len(ladder) + 1)
            expected[band] = 1
            assert behind["counts"] == expected, (step, behind)
        capsys.readouterr()
        run_dbt(["run-operation", "streamsql_lateness_report", "--args", "{model: pickups}"])
        out = capsys.readouterr().out
        assert "ts (LATENESS INTERVAL 1 HOUR): 4 changes over steps 2-5" in out, out
        assert re.search(r"\n\s*30 min\s+50\.00%\s+\(2 changes\)", out), out
        assert re.search(r"\n\s*1 hour\s+75\.00%\s+\(3 changes\)", out), out
        assert re.search(r"\n\s*2 hours\s+100\.00%\s+\(4 changes\)", out), out


class TestSeed001AsOneStep(LatenessProject):
    def test_all_five_rows_are_applied(self, project, source):
        _insert(project, source, SEED_001_ROWS)
        response = self.step(project, source)
        schema = project.test_schema
        assert response["late"] == 0 and response["inserted"] == 5
        assert len(_rows(project, f"select * from {schema}.pickups")) == 5
        assert _rows(project, f"select count(*) from {schema}.pickups__late") == [(0,)]


class TestLateDeletesAndNulls(LatenessProject):
    def test_late_delete_and_null_are_quarantined(self, project, source):
        _insert(project, source, [("2020-01-01 00:00:00", "a"), ("2020-01-01 05:00:00", "b")])
        self.step(project, source)  # waterline 04:00
        project.run_sql(f"delete from {source} where location = 'a'")  # a delete below it
        project.run_sql(f"insert into {source} values (null, 'nowhere')")
        response = self.step(project, source)
        schema = project.test_schema
        assert response["late"] == 2 and response["applied"] == 0
        assert sorted(_rows(project, f"select location from {schema}.pickups")) == [("a",), ("b",)]
        late = sorted(
            _rows(
                project,
                f"select location, _streamsql_change, _streamsql_reason "
                f"from {schema}.pickups__late",
            )
        )
        assert late == [("a", "delete", "late"), ("nowhere", "insert", "null")]


KEPT = """
{{ config(materialized='incremental_view', lateness={'ts': 'INTERVAL 1 HOUR'}) }}
select ts, location from {{ var('source') }}
"""
KEPT_BRIEFLY = """
{{ config(materialized='incremental_view', lateness={'ts': 'INTERVAL 1 HOUR'},
          waterline_retention='0 seconds') }}
select ts, location from {{ var('source') }}
"""


class TestWaterlineRetention(LatenessProject):
    """waterline_retention: `__waterline` rows older than it are deleted (by default after 30
    days); the model and its quarantine are the same either way."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"kept.sql": KEPT, "kept_briefly.sql": KEPT_BRIEFLY}

    def test_rows_beyond_the_retention_go_and_the_rest_stay(self, project, source):
        schema = project.test_schema
        steps = [
            [("2020-01-01 02:00:00", "a")],  # waterline 01:00
            [("2020-01-01 00:00:00", "late"), ("2020-01-01 03:00:00", "b")],
            [("2020-01-01 04:00:00", "c")],
        ]
        for rows in steps:
            _insert(project, source, rows)
            results = run_dbt(["run", "--vars", f"{{source: {source}}}"])
            responses = {r.node.name: r.adapter_response for r in results}
        for name in ("kept", "kept_briefly"):
            applied = _rows(project, f"select location from {schema}.{name} order by ts")
            assert applied == [("a",), ("b",), ("c",)], name
            late = _rows(project, f"select location from {schema}.{name}__late")
            assert late == [("late",)], name  # never deleted: a recompute needs it
        assert _rows(project, f"select step from {schema}.kept__waterline order by step") == [
            (1,),
            (2,),
            (3,),
        ]
        # the short retention: each step first deleted what the ones before wrote
        assert _rows(project, f"select step, waterline from {schema}.kept_briefly__waterline") == [
            (3, "2020-01-01 03:00:00")
        ]
        notes = responses["kept_briefly"]["notes"]
        assert f"removed 1 row(s) of {schema}.kept_briefly__waterline older than 0 seconds" in notes
        assert not any("removed" in note for note in responses["kept"]["notes"] or [])


BY_PLACE = """
{{ config(materialized='incremental_view') }}
select location, count(*) as n from {{ ref('kept') }} group by location
"""
KEPT_UNCOMPACTED = """
{{ config(materialized='incremental_view', lateness={'ts': 'INTERVAL 1 HOUR'},
          compact_files=false) }}
select ts, location from {{ var('source') }}
"""


class TestSmallFiles(LatenessProject):
    """compact_files: a step OPTIMIZEs the model's table and its side tables once they hold too
    many small files (small_files.py; here at every step and above 2 files, so that a few steps
    show it). What readers see stays the same: the table's rows, its change feed, and the model
    that reads it. The same steps warn where a table's files not in use call for a VACUUM (here
    from any size on): by_place's MERGEs leave one behind every step; what the warning counts is
    what its current version does not read."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"kept.sql": KEPT, "by_place.sql": BY_PLACE, "uncompacted.sql": KEPT_UNCOMPACTED}

    def test_compaction_changes_no_row_and_no_change_feed(self, project, source, monkeypatch):
        from dbt.adapters.streamsql.execution.commit import small_files

        monkeypatch.setattr(small_files, "COMPACT_CHECK_EVERY", 1)
        monkeypatch.setattr(small_files, "COMPACT_ABOVE_FILES", 2)
        monkeypatch.setattr(small_files, "UNUSED_MIN_BYTES", 0)
        schema = project.test_schema
        notes = []
        steps = [
            [("2020-01-01 02:00:00", "a"), ("2020-01-01 02:10:00", "b")],
            [("2020-01-01 00:00:00", "late"), ("2020-01-01 03:00:00", "b")],
            [("2020-01-01 04:00:00", "c")],
            [("2020-01-01 05:00:00", "a")],
        ]
        for rows in steps:
            _insert(project, source, rows)
            results = run_dbt(["run", "--vars", f"{{source: {source}}}"])
            notes += [n for r in results for n in r.adapter_response["notes"] or []]
            for name in ("kept", "uncompacted"):
                table = _rows(project, f"select ts, location from {schema}.{name}")
                query = _rows(
                    project, f"select ts, location from {source} where location != 'late'"
                )
                assert sorted(table) == sorted(query), name
            counted = _rows(project, f"select location, n from {schema}.by_place")
            query = _rows(project, f"select location, count(*) from {schema}.kept group by 1")
            assert sorted(counted) == sorted(query)
        for table in ("kept", "kept__waterline"):
            assert any(n.startswith(f"compacted {schema}.{table}: ") for n in notes), (table, notes)
        assert not any(f"{schema}.uncompacted" in n for n in notes), notes
        history = _rows(project, f"describe history {schema}.kept")
        optimized = [row[0] for row in history if row[4] == "OPTIMIZE"]
        assert optimized, history
        for version in optimized:  # nothing in the change feed
            changes = f"select count(*) from table_changes('{schema}.kept', {version}, {version})"
            assert _rows(project, changes) == [(0,)]
        uncompacted = _rows(project, f"describe history {schema}.uncompacted")
        assert not [row for row in uncompacted if row[4] == "OPTIMIZE"]
        assert _rows(project, f"select location from {schema}.kept__late") == [("late",)]

        # by_place's MERGEs replaced a file each step: the warning names the command
        warned = [n for n in notes if n.startswith(f"{schema}.by_place holds ")]
        assert warned and f"VACUUM {schema}.by_place deletes" in warned[-1], notes
        # and what it counts as not in use is every file its current version does not read
        self.check_unused_files(project, f"{schema}.by_place")

    @staticmethod
    def check_unused_files(project, table):
        """What the warning counts as not in use: every data file under the table's folder but
        those its rows are read from (the scan's own file list, not the log's size)."""
        import os
        from urllib.parse import unquote, urlparse

        from dbt.adapters.streamsql.execution.commit import small_files

        detail = project.run_sql(f"describe detail {table}", fetch="one").asDict()
        read = project.run_sql(
            f"select distinct _metadata.file_path, _metadata.file_size from {table}", fetch="all"
        )
        root = unquote(urlparse(detail["location"]).path)
        on_disk = {}
        for folder, subfolders, files in os.walk(root):
            subfolders[:] = [name for name in subfolders if name != "_delta_log"]
            for name in files:
                if name.endswith(".parquet") and not name.startswith("."):
                    on_disk[os.path.join(folder, name)] = os.path.getsize(
                        os.path.join(folder, name)
                    )
        live = {unquote(urlparse(path).path): int(size) for path, size in read}
        assert set(live) < set(on_disk)
        expected = sum(on_disk.values()) - sum(live.values())
        assert small_files.unused_bytes(detail["location"], int(detail["sizeInBytes"])) == expected


HOURLY = """
{{{{ config(materialized='incremental_view', lateness={{'window_start': 'INTERVAL 1 HOUR'}},
            final_state_retention={retention}) }}}}
select window(ts, '1 hour').start as window_start, count(*) as n, sum(length(location)) as size
from {{{{ var('source') }}}} group by window(ts, '1 hour')
"""


class TestFinalStateDropped(LatenessProject):
    """final_state_retention: a compaction of an aggregate's state drops the groups that are
    final and further below the waterline than the retention (here after three appends, and
    once a line is drawn whenever the waterline has moved a retention past it); a late change
    to one of them recomputes the model, and writes to `__late` what the state would have
    given. (The LATENESS differential test holds the same against its oracle.)"""

    @pytest.fixture(scope="class")
    def models(self):
        return {"hourly.sql": HOURLY.format(retention="{'window_start': 'INTERVAL 1 HOUR'}")}

    def test_dropped_state_changes_no_row_and_no_quarantined_change(
        self, project, source, monkeypatch
    ):
        from dbt.adapters.streamsql.execution.commit import tables

        monkeypatch.setattr(tables, "COMPACT_AFTER_STEPS", 3)
        schema = project.test_schema
        hour = "2024-01-01 {:02d}:{:02d}:00".format

        def step(*rows):
            _insert(project, source, rows)
            return run_dbt(["run", "--vars", f"{{source: {source}}}"])[0].adapter_response

        def groups():
            state = f"{schema}.hourly__streamsql_state"
            rows = _rows(project, f"select _streamsql_g0.start from {state}")
            return sorted({str(row[0])[11:16] for row in rows})

        # the waterline is on window_start: the largest window's start minus an hour
        step(*[(hour(h, 10), "a") for h in range(5)], (hour(5, 10), "bb"), (hour(6, 30), "c"))
        step((hour(6, 40), "d"))  # W = 05:00 from the first step on
        step((hour(6, 35), "e"))
        step((hour(6, 45), "f"))  # the state's third append since its first write
        # compacted first: the state of groups below 05:00 - 1 hour goes; a late row of a
        # final group whose state is kept (the group at that line) takes the fast path
        fifth = step((hour(4, 20), "late"))
        assert groups() == ["04:00", "05:00", "06:00"]
        assert any(
            n.startswith(f"dropped the state of final groups (window_start below {hour(4, 0)})")
            for n in fifth["notes"]
        ), fifth["notes"]
        assert (fifth["computed"], fifth["late"]) == ("aggregate", 2), fifth
        # a late row of a group whose state went: the step recomputes, exactly
        sixth = step((hour(1, 20), "later"))
        assert (sixth["computed"], sixth["late"]) == ("recompute", 2), sixth
        assert any("whose state was dropped (window_start below" in n for n in sixth["notes"])
        # the recompute rebuilt every group's state: the next late row needs no recompute
        seventh = step((hour(2, 20), "latest"))
        assert (seventh["computed"], seventh["late"]) == ("aggregate", 2), seventh
        quarantined = _rows(
            project,
            f"select window_start, n, size, _streamsql_step, _streamsql_change "
            f"from {schema}.hourly__late",
        )
        assert sorted((str(w)[11:16], n, z, s, c) for w, n, z, s, c in quarantined) == [
            ("01:00", 1, 1, 6, "delete"),
            ("01:00", 2, 6, 6, "insert"),
            ("02:00", 1, 1, 7, "delete"),
            ("02:00", 2, 7, 7, "insert"),
            ("04:00", 1, 1, 5, "delete"),
            ("04:00", 2, 5, 5, "insert"),
        ]
        model = _rows(project, f"select window_start, n, size from {schema}.hourly")
        assert sorted((str(w)[11:16], n, z) for w, n, z in model) == [
            ("00:00", 1, 1),
            ("01:00", 1, 1),
            ("02:00", 1, 1),
            ("03:00", 1, 1),
            ("04:00", 1, 1),
            ("05:00", 1, 2),
            ("06:00", 4, 4),
        ]

        # Once a line is drawn, the state is also rewritten as soon as the waterline has moved
        # a retention past it, without waiting for more appends (ordinary compactions off here)
        def dropped(response):
            return [n.split("below ")[1][11:16] for n in response["notes"] if "dropped the" in n]

        assert dropped(step((hour(6, 50), "g"))) == ["04:00"]  # the third append since 6
        monkeypatch.setattr(tables, "COMPACT_AFTER_STEPS", 1000)
        assert dropped(step((hour(7, 10), "j"))) == []  # W = 05:00: the line's own hour plus 1
        assert dropped(step((hour(7, 20), "k"))) == ["05:00"]  # W = 06:00, a retention more
        assert groups() == ["05:00", "06:00", "07:00"]
        assert dropped(step((hour(8, 10), "l"))) == []
        assert dropped(step((hour(8, 20), "m"))) == ["06:00"]  # W = 07:00
        assert groups() == ["06:00", "07:00", "08:00"]
        model = _rows(project, f"select window_start, n, size from {schema}.hourly")
        assert sorted((str(w)[11:16], n, z) for w, n, z in model)[5:] == [
            ("05:00", 1, 2),
            ("06:00", 5, 5),
            ("07:00", 2, 2),
            ("08:00", 2, 2),
        ]
        assert len(_rows(project, f"select * from {schema}.hourly__late")) == 6


DECODED_PURCHASE = """
{{ config(materialized='incremental_view', lateness={'date_time': 'INTERVAL 1 HOUR'}) }}
select cast(date_time as timestamp) as date_time, credit_card, amount from {{ var('source') }}
"""

HOURLY_SPEND = """
{{ config(materialized='incremental_view') }}
select credit_card, window(date_time, '1 hour').start as hour, sum(amount) as spend, count(*) as n
from {{ ref('decoded_purchase') }}
group by credit_card, window(date_time, '1 hour')
"""


class TestSeed000Purchase:
    """Seed 000: date_time arrives as a string; LATENESS is declared on the decoded view."""

    @pytest.fixture(scope="class")
    def source(self, project):
        table = f"{project.test_schema}.purchase"
        project.run_sql(
            f"create or replace table {table} "
            "(date_time string, credit_card bigint, amount decimal(10,2))"
        )
        return table

    @pytest.fixture(scope="class")
    def models(self):
        return {"decoded_purchase.sql": DECODED_PURCHASE, "hourly_spend.sql": HOURLY_SPEND}

    def test_late_purchase_never_reaches_the_aggregate(self, project, source):
        schema = project.test_schema

        def buy(*rows):
            values = ", ".join(f"('{ts}', {card}, {amount})" for ts, card, amount in rows)
            project.run_sql(f"insert into {source} values {values}")
            return run_dbt(["run", "--vars", f"{{source: {source}}}"])

        buy(("2024-01-01 10:00:00", 1, "10.00"), ("2024-01-01 10:30:00", 2, "5.50"))
        buy(("2024-01-01 12:10:00", 1, "7.25"))  # waterline -> 11:10
        results = buy(
            ("2024-01-01 10:59:00", 1, "99.99"),  # below 11:10: late
            ("2024-01-01 11:30:00", 2, "1.00"),
        )  # out of order, but in time
        decoded = next(r for r in results if r.node.name == "decoded_purchase")
        assert decoded.adapter_response["late"] == 1
        spend = _rows(
            project,
            f"select credit_card, cast(hour as string), spend, n "
            f"from {schema}.hourly_spend order by credit_card, hour",
        )
        assert [(c, h, str(s), n) for c, h, s, n in spend] == [
            (1, "2024-01-01 10:00:00", "10.00", 1),
            (1, "2024-01-01 12:00:00", "7.25", 1),
            (2, "2024-01-01 10:00:00", "5.50", 1),
            (2, "2024-01-01 11:00:00", "1.00", 1),
        ]
        late = _rows(
            project,
            f"select cast(date_time as string), amount, _streamsql_reason "
            f"from {schema}.decoded_purchase__late",
        )
        assert [(t, str(a), r) for t, a, r in late] == [("2024-01-01 10:59:00", "99.99", "late")]


SENSOR = """
{{ config(materialized='incremental_view',
          lateness={'ts': 'INTERVAL 1 HOUR', 'seq': '100'},
          max_future={'ts': 'INTERVAL 1 DAY'}) }}
select ts, seq, reading from {{ var('source') }}
"""


class TestSeed000PurchaseOverConnect(OverConnect, TestSeed000Purchase):
    """The same steps through a Spark Connect server (`method: connect`)."""


class TestFutureAndTwoColumns:
    @pytest.fixture(scope="class")
    def source(self, project):
        table = f"{project.test_schema}.sensor_raw"
        project.run_sql(f"create or replace table {table} (ts timestamp, seq bigint, reading int)")
        return table

    @pytest.fixture(scope="class")
    def models(self):
        return {"sensor.sql": SENSOR}

    def test_future_rows_do_not_move_the_waterline_and_either_column_makes_late(
        self, project, source
    ):
        schema = project.test_schema

        def step(values):
            project.run_sql(f"insert into {source} values {values}")
            return run_dbt(["run", "--vars", f"{{source: {source}}}"])[0].adapter_response

        first = step(
            "(timestamp'2024-01-01 10:00:00', 1000, 1), (timestamp'2999-01-01 00:00:00', 1001, 2)"
        )  # far in the future
        assert first["late"] == 1
        # The future row did not move the ts waterline; BIGINT lateness on seq: 1001 - 100.
        assert first["waterline"] == {"ts": "2024-01-01 09:00:00", "seq": "901"}
        second = step(
            "(timestamp'2024-01-01 09:30:00', 950, 3), "  # in time in both
            "(timestamp'2024-01-01 10:30:00', 800, 4), "  # late in seq only
            "(timestamp'2024-01-01 08:00:00', 990, 5)"
        )  # late in ts only
        assert second["late"] == 2 and second["inserted"] == 1
        late = _rows(
            project,
            f"select reading, _streamsql_column, _streamsql_waterline, "
            f"_streamsql_reason, _streamsql_step from {schema}.sensor__late "
            f"order by reading",
        )
        assert late == [
            (2, "ts", None, "future", 1),
            (4, "seq", "901", "late", 2),
            (5, "ts", "2024-01-01 09:00:00", "late", 2),
        ]
        assert _rows(project, f"select reading from {schema}.sensor order by reading") == [
            (1,),
            (3,),
        ]


BAD_CONFIGS = {
    "unknown_column.sql": """
{{ config(materialized='incremental_view', lateness={'when': 'INTERVAL 1 HOUR'}) }}
select current_date() as day, id from {{ var('source') }}""",
    "not_constant.sql": """
{{ config(materialized='incremental_view', lateness={'id': 'id + 1'}) }}
select id from {{ var('source') }}""",
    "state_wrong_type.sql": """
{{ config(materialized='incremental_view', lateness={'id': '10'},
          final_state_retention={'id': 'INTERVAL 1 HOUR'}) }}
select id, count(*) as n from {{ var('source') }} group by id""",
    "wrong_type.sql": """
{{ config(materialized='incremental_view', lateness={'label': 'INTERVAL 1 HOUR'}) }}
select id, label from {{ var('source') }}""",
}


class TestBadLatenessConfig:
    @pytest.fixture(scope="class")
    def source(self, project):
        table = f"{project.test_schema}.things"
        project.run_sql(f"create or replace table {table} (id bigint, label string)")
        project.run_sql(f"insert into {table} values (1, 'x')")
        return table

    @pytest.fixture(scope="class")
    def models(self):
        return BAD_CONFIGS

    @pytest.mark.parametrize(
        "model, message",
        [
            (
                "unknown_column",
                "config lateness names column 'when', which the model does not have",
            ),
            ("not_constant", "is not a constant expression"),
            ("wrong_type", "cannot be subtracted from column label of type string"),
            (
                "state_wrong_type",
                "config final_state_retention[id] = 'INTERVAL 1 HOUR' cannot be subtracted "
                "from column id of type bigint",
            ),
        ],
    )
    def test_fails_before_writing_anything(self, project, source, model, message):
        results = run_dbt(
            ["run", "--select", model, "--vars", f"{{source: {source}}}"], expect_pass=False
        )
        assert f"Model {model}" in results[0].message and message in results[0].message
        tables = [
            row[1] for row in project.run_sql(f"show tables in {project.test_schema}", fetch="all")
        ]
        assert not any(t.startswith(model) for t in tables)
