"""Small files compacted (execution/commit/small_files.py): which step checks, which tables get
an OPTIMIZE, where it runs in the step, and what the step line says; without Spark."""

from __future__ import annotations

from dbt.adapters.streamsql.execution.commit import small_files
from tests.unit.test_cleanup import PROJECTED, last_record, stepped
from tests.unit.test_step import run_step

MB = 1024 * 1024


def optimizes(session, since: int = 0):
    return [s for s in session.statements[since:] if s.startswith("OPTIMIZE")]


def step_until(session, settings, number: int):
    """Steps the model until its step `number` is next; the last step's result."""
    result = None
    while last_record(session).step < number - 1:
        session.append_to("demo.events")
        result = run_step(session, settings, PROJECTED)
    return result


def test_every_tenth_step_compacts_each_table_past_the_limit_before_the_steps_writes():
    session, settings = stepped()
    many = small_files.COMPACT_ABOVE_FILES + 1
    step_until(session, settings, 9)
    for name in ("demo.lw", "demo.lw__waterline"):
        session.tables[name].num_files = many
    session.tables["demo.lw__late"].num_files = small_files.COMPACT_ABOVE_FILES  # at the limit
    start = len(session.statements)
    session.append_to("demo.events")
    run_step(session, settings, PROJECTED)  # step 9: not a checking step
    assert optimizes(session, start) == []

    start = len(session.statements)
    result = step_until(session, settings, 11)  # step 10
    assert optimizes(session, start) == ["OPTIMIZE `demo`.`lw`", "OPTIMIZE `demo`.`lw__waterline`"]
    # before the model's own write, and without a step record (the history reading skips it)
    model_write = next(
        i
        for i, s in enumerate(session.statements)
        if i > start and s.startswith("INSERT INTO `demo`.`lw`")
    )
    assert session.statements.index("OPTIMIZE `demo`.`lw`", start) < model_write
    optimized = [c for c in session.commits("demo.lw") if c["operation"] == "OPTIMIZE"]
    assert [c["userMetadata"] for c in optimized] == [None]
    # packed small files only, into files of a bounded size, under settings reset afterwards
    sent = "\n".join(session.statements[start:model_write])
    assert f"SET spark.databricks.delta.optimize.minFileSize={32 * MB}" in sent
    assert f"SET spark.databricks.delta.optimize.maxFileSize={128 * MB}" in sent
    assert "spark.databricks.delta.optimize.minFileSize" not in session.conf
    assert [n for n in result.notes if n.startswith("compacted")] == [
        f"compacted demo.lw: {many + 1} files into 1 in 0.0 s",
        f"compacted demo.lw__waterline: {many + 1} files into 1 in 0.0 s",
    ]


def test_large_files_the_config_off_and_other_steps_leave_the_files_alone():
    for configs, size in (({}, 40 * 32 * MB), ({"compact_files": False}, 1000)):
        session, settings = stepped(**configs)
        step_until(session, settings, 10)
        session.tables["demo.lw"].num_files = 40
        session.tables["demo.lw"].size_bytes = size
        start = len(session.statements)
        step_until(session, settings, 11)
        assert optimizes(session, start) == [], configs


def test_a_failed_compaction_is_reported_and_the_step_goes_on():
    session, settings = stepped()
    step_until(session, settings, 10)
    session.tables["demo.lw"].num_files = 40
    session.fail_on = ("OPTIMIZE", "ConcurrentAppendException: files were added\nat ...")
    result = step_until(session, settings, 11)
    assert result.step == 10
    assert (
        "compacting demo.lw failed, left for later: ConcurrentAppendException: files were "
        "added" in result.notes
    )
    assert "spark.databricks.delta.optimize.minFileSize" not in session.conf
