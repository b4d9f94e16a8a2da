"""A long step says what it is doing every few seconds; a short one says nothing."""

from __future__ import annotations

import threading
import time

from dbt.adapters.streamsql.execution.engine.trace import StatementTrace
from dbt.adapters.streamsql.progress import (
    PROGRESS_ENV,
    PROGRESS_EVERY_S,
    ROLE_CHARACTERS,
    StepProgress,
    progress_every,
    progress_line,
)


def test_the_line_names_the_statement_running_now():
    trace = StatementTrace()
    assert progress_line("m", 12.4, trace) == "m: step running for 12 s, reading what changed"
    trace.record("DESCRIBE HISTORY demo.src LIMIT 1")
    with trace.role("MERGE the change into the model `demo`.`m`"):
        trace.record("MERGE INTO `demo`.`m` t USING $net n ON t.id = n.id WHEN MATCHED THEN DELETE")
    assert progress_line("m", 31.0, trace) == (
        "m: step running for 31 s, statement 2: MERGE the change into the model `demo`.`m`"
    )
    trace.record(
        "RESET a;\nRESET b;\n" + ";\n".join(f"DROP VIEW IF EXISTS v{i}" for i in range(40))
    )
    long = progress_line("m", 40.0, trace)
    assert long.startswith("m: step running for 40 s, statement 3: the settings unset: a, b; ")
    assert long.endswith("...") and len(long.split(": ", 2)[2]) <= ROLE_CHARACTERS


def test_a_long_step_logs_every_interval_and_stops_with_the_step():
    trace, said, lock = StatementTrace(), [], threading.Lock()

    def log(line):
        with lock:
            said.append(line)

    with StepProgress("m", trace, log, every=0.05):
        trace.record("INSERT INTO `demo`.`m` SELECT 1")
        time.sleep(0.5)
    count = len(said)
    assert count >= 3, said
    assert all(line.startswith("m: step running for ") for line in said)
    assert said[-1].endswith("statement 1: insert into `demo`.`m`"), said
    time.sleep(0.2)
    assert len(said) == count  # nothing after the step ended


def test_a_short_step_logs_nothing_and_a_failing_log_does_not_reach_the_step():
    said = []
    with StepProgress("m", StatementTrace(), said.append, every=5.0):
        pass
    assert said == []

    def broken(line):
        raise RuntimeError("the console is gone")

    with StepProgress("m", StatementTrace(), broken, every=0.02):
        time.sleep(0.1)  # the reporting thread's errors stay in it


def test_the_interval_comes_from_the_environment_when_it_is_a_positive_number():
    assert progress_every({}) == PROGRESS_EVERY_S
    assert progress_every({PROGRESS_ENV: "2.5"}) == 2.5
    for wrong in ("0", "-1", "soon", ""):
        assert progress_every({PROGRESS_ENV: wrong}) == PROGRESS_EVERY_S
