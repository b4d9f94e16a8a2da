"""Small files compacted (execution/commit/small_files.py): which step checks, which tables get
an OPTIMIZE, where it runs in the step, and what the step line says; without Spark."""

from __future__ import annotations

from dbt.adapters.streamsql.execution.commit import small_files
from dbt.adapters.streamsql.execution.engine.delta_log import TableSnapshot
from tests.unit.test_cleanup import PROJECTED, last_record, stepped
from tests.unit.test_step import EVENTS, model, new_session, run_step

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


def _file(path, size):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)


def test_unused_bytes_counts_the_data_files_beyond_the_live_ones(tmp_path):
    table = tmp_path / "m"
    _file(table / "part-0.parquet", 100)
    _file(table / "day=1" / "part-1.parquet", 50)  # a partition's folder
    _file(table / "_change_data" / "cdc-0.parquet", 30)  # VACUUM deletes these too
    _file(table / ".part-0.parquet.crc", 500)  # the file system's own checksums: not data
    _file(table / "_delta_log" / "00000000000000000000.json", 700)
    _file(table / "_delta_log" / "00000000000000000010.checkpoint.parquet", 900)
    assert small_files.unused_bytes(str(table), 120) == 60
    assert small_files.unused_bytes(f"file:{table}", 180) == 0
    assert small_files.unused_bytes(f"file://{table}", 400) == 0  # never negative
    # not on this machine's disk, or its size unknown: not checked
    assert small_files.unused_bytes(f"s3a://bucket{table}", 120) is None
    assert small_files.unused_bytes(str(tmp_path / "gone"), 120) is None
    assert small_files.unused_bytes(str(table), None) is None
    assert small_files.unused_bytes(None, 120) is None


def test_the_note_names_the_vacuum_once_unused_files_outweigh_the_data(tmp_path, monkeypatch):
    table = tmp_path / "m"
    _file(table / "part-0.parquet", 3 * MB)
    _file(table / "part-1.parquet", 2 * MB)

    def note(live):
        snapshot = TableSnapshot(7, "id", {}, (), live, 1, str(table))
        return small_files.unused_files_note("s.m", snapshot)

    monkeypatch.setattr(small_files, "UNUSED_MIN_BYTES", 2 * MB)
    assert note(2 * MB) == (
        "s.m holds 3.0 MiB in files its current version no longer uses, beside 2.0 MiB of "
        "data: VACUUM s.m deletes those older than the table's retention "
        "(delta.deletedFileRetentionDuration, 7 days by default)"
    )
    assert note(int(2.5 * MB)) is None  # 2.5 MiB not in use: no more than the data
    assert note(3 * MB + 1) is None  # under 2 MiB not in use
    monkeypatch.setattr(small_files, "UNUSED_MIN_BYTES", 64 * MB)
    assert note(MB) is None  # 4 MiB not in use: too little to mention


def test_every_tenth_step_warns_of_each_table_whose_unused_files_call_for_a_vacuum(tmp_path):
    session = new_session(("demo.events", EVENTS))
    settings = model("ag")
    query = "select k, count(*) as n from demo.events group by k"
    run_step(session, settings, query)
    for name, unused in (("ag", 70 * MB), ("ag__streamsql_state", 90 * MB), ("events", 99 * MB)):
        _file(tmp_path / name / "part-0.parquet", session.tables[f"demo.{name}"].size_bytes)
        _file(tmp_path / name / "part-1.parquet", unused)
        session.tables[f"demo.{name}"].location = str(tmp_path / name)
    notes = []
    while last_record(session, "demo.ag").step < 10:
        session.append_to("demo.events", size_bytes=0)
        notes.append(run_step(session, settings, query).notes)
    assert [n for step in notes[:-1] for n in step if "VACUUM" in n] == []  # steps 2-9
    assert [n.split(" beside")[0] for n in notes[-1] if "VACUUM" in n] == [
        "demo.ag holds 70.0 MiB in files its current version no longer uses,",
        "demo.ag__streamsql_state holds 90.0 MiB in files its current version no longer uses,",
    ]  # the model's tables only: not its input
