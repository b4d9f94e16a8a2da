"""Old `__waterline` rows deleted (execution/commit/cleanup.py): when a step cleans, what it
deletes, and that the first step only starts the clock; without Spark."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from dbt.adapters.streamsql.execution.commit import cleanup
from dbt.adapters.streamsql.execution.commit.record import StepRecord
from tests.unit.test_step import EVENTS, model, new_session, run_step

PROJECTED = "select id, k, ts from demo.events"


def deletes(session, since: int = 0):
    return [s for s in session.statements[since:] if s.startswith("DELETE FROM")]


def stepped(name: str = "lw", event_time=None, **configs):
    """The first step of model `name` (LATENESS on `ts`, unless `event_time` says otherwise)."""
    session = new_session(("demo.events", EVENTS))
    session.column_types["ts"] = "timestamp"
    rules = event_time or {"lateness": {"ts": "INTERVAL 1 HOUR"}}
    settings = model(name, **rules, **configs)
    run_step(session, settings, PROJECTED)
    return session, settings


def last_record(session, table: str = "demo.lw") -> StepRecord:
    records = [StepRecord.from_json(c["userMetadata"]) for c in session.commits(table)]
    return [r for r in records if r is not None][-1]


def test_the_first_step_starts_the_clock_and_deletes_nothing():
    session, _ = stepped(waterline_retention=0.0)
    assert deletes(session) == []
    assert last_record(session).cleaned_at is not None


def test_a_retention_under_a_day_cleans_as_often_before_the_steps_writes(monkeypatch):
    clock = [1_000_000.0]
    monkeypatch.setattr(cleanup, "time", SimpleNamespace(time=lambda: clock[0]))
    session, settings = stepped(waterline_retention=3600.0)
    clock[0] += 3599.0
    session.append_to("demo.events")
    run_step(session, settings, PROJECTED)
    assert deletes(session) == []  # not an hour yet
    clock[0] += 1.0
    session.append_to("demo.events")
    start = len(session.statements)
    run_step(session, settings, PROJECTED)
    assert deletes(session, start) == [
        "DELETE FROM `demo`.`lw__waterline` WHERE at < timestamp_seconds(1000000.000000)"
    ]
    # before the model's commit (no step reads what it deletes); `__late` is never cleaned
    model_write = next(
        i
        for i, s in enumerate(session.statements)
        if i > start and s.startswith("INSERT INTO `demo`.`lw`")
    )
    assert session.statements.index(deletes(session, start)[0], start) < model_write
    assert last_record(session).cleaned_at == 1_003_600.0


def test_a_retention_of_zero_cleans_at_every_step():
    session, settings = stepped(waterline_retention=0.0)
    for _ in range(2):
        session.append_to("demo.events")
        start = len(session.statements)
        run_step(session, settings, PROJECTED)
        (waterline,) = deletes(session, start)
        cutoff = re.fullmatch(
            r"DELETE FROM `demo`.`lw__waterline` WHERE at < timestamp_seconds\(([\d.]+)\)",
            waterline,
        )
        assert float(cutoff.group(1)) == pytest.approx(last_record(session).cleaned_at, abs=1e-5)


def test_the_default_cleans_once_a_day(monkeypatch):
    clock = [1_000_000.0]
    monkeypatch.setattr(cleanup, "time", SimpleNamespace(time=lambda: clock[0]))
    session, settings = stepped()  # waterline_retention 30 days
    assert last_record(session).cleaned_at == 1_000_000.0
    clock[0] += 86399.0
    session.append_to("demo.events")
    run_step(session, settings, PROJECTED)
    assert deletes(session) == []  # not a day yet
    assert last_record(session).cleaned_at == 1_000_000.0
    clock[0] += 1.0
    session.append_to("demo.events")
    run_step(session, settings, PROJECTED)
    cutoff = 1_086_400.0 - 30 * 86400.0
    assert deletes(session) == [
        f"DELETE FROM `demo`.`lw__waterline` WHERE at < timestamp_seconds({cutoff:.6f})"
    ]
    assert last_record(session).cleaned_at == 1_086_400.0


@pytest.mark.parametrize("lateness, retention", [({}, 0.0), ({"ts": "INTERVAL 1 HOUR"}, None)])
def test_nothing_to_clean_without_lateness_or_with_forever(lateness, retention):
    session = new_session(("demo.events", EVENTS))
    session.column_types["ts"] = "timestamp"
    settings = model("p", lateness=lateness, waterline_retention=retention)
    run_step(session, settings, PROJECTED)
    session.append_to("demo.events")
    run_step(session, settings, PROJECTED)
    assert deletes(session) == []


def watermarked(**configs):
    return stepped("wm", {"watermark": {"ts": "INTERVAL 10 MINUTES"}}, **configs)


def wm_record(session) -> StepRecord:
    return last_record(session, "demo.wm")


def test_released_pending_rows_go_once_their_release_is_beyond_the_retention(monkeypatch):
    """Without LATENESS too. `__pending` has no release time: the record's `cleanups` say which
    steps had completed by when, and rows released by steps completed beyond the retention go."""
    clock = [1_000_000.0]
    monkeypatch.setattr(cleanup, "time", SimpleNamespace(time=lambda: clock[0]))
    session, settings = watermarked(pending_retention=3600.0)
    assert wm_record(session).cleanups == [[0, 1_000_000.0]]  # the clock starts
    expected = []
    for release in (0, 1):  # steps 2 and 3, an hour apart
        clock[0] += 3600.0
        session.append_to("demo.events")
        start = len(session.statements)
        run_step(session, settings, PROJECTED)
        delete = f"DELETE FROM `demo`.`wm__pending` WHERE _streamsql_released_step <= {release}"
        assert deletes(session, start) == [delete]
        expected.append(delete)
        # before the model's write
        write = next(
            i
            for i, s in enumerate(session.statements)
            if i > start and s.startswith(("INSERT INTO `demo`.`wm`", "MERGE INTO `demo`.`wm`"))
        )
        assert session.statements.index(delete, start) < write
    # the older clean-up beyond the retention is dropped: the newer one stands for it
    assert wm_record(session).cleanups == [[1, 1_003_600.0], [2, 1_007_200.0]]
    assert deletes(session) == expected


def test_forever_keeps_released_rows_and_starts_no_clean_up_clock(monkeypatch):
    clock = [1_000_000.0]
    monkeypatch.setattr(cleanup, "time", SimpleNamespace(time=lambda: clock[0]))
    session, settings = watermarked(pending_retention=None)
    assert wm_record(session).cleanups == []
    for _ in range(2):
        clock[0] += 2 * 86400.0
        session.append_to("demo.events")
        run_step(session, settings, PROJECTED)
    assert deletes(session) == []
    assert wm_record(session).cleaned_at == 1_000_000.0  # nothing to clean: the clock stays
