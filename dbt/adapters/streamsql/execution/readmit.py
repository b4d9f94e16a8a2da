"""`streamsql_readmit`: apply quarantined changes of a model after all, as a step of its own.

    dbt run-operation streamsql_readmit --args '{model: pickups, where: "_streamsql_step = 5"}'

The step reads no input and moves no waterline: its record keeps the step before's input
versions and waterlines. Its change is the rows of `<model>__late` that `where` selects and no
readmit took yet (event_time/readmit.py), committed to the model through the commit protocol
like any step's change, so the model's change feed shows it and the models that read it follow
at their next step; then those rows are marked in `__late` with the step. A readmit that a
crash interrupted between the two is finished by the next readmit or `dbt run` of the model;
a second readmit of the same rows finds none left. `dry_run` says what a readmit would do and
writes nothing.
"""

from __future__ import annotations

import time
from typing import Callable, Optional

from dbt.adapters.streamsql.execution.commit import history
from dbt.adapters.streamsql.execution.commit.bounds import CHANGE_ALIAS, change_measures
from dbt.adapters.streamsql.execution.commit.protocol import commit_step, write_side_tables
from dbt.adapters.streamsql.execution.commit.record import StepRecord
from dbt.adapters.streamsql.execution.context import StepContext
from dbt.adapters.streamsql.execution.engine import statements as sql
from dbt.adapters.streamsql.execution.engine.delta_log import TableMissing
from dbt.adapters.streamsql.execution.engine.side_tables import SideTableSql, default_side_table_sql
from dbt.adapters.streamsql.execution.engine.sql_session import SqlSession
from dbt.adapters.streamsql.execution.event_time import readmit
from dbt.adapters.streamsql.execution.event_time import watermark as wm
from dbt.adapters.streamsql.execution.pipeline import keys
from dbt.adapters.streamsql.execution.shared.errors import StepError
from dbt.adapters.streamsql.execution.shared.model import ModelSettings
from dbt.adapters.streamsql.execution.shared.result import StepResult
from dbt.adapters.streamsql.execution.shared.writes import ModelChange, ReadmitWrite, StepWrites
from dbt.adapters.streamsql.execution.step_state import StepState


def readmit_step(
    session: SqlSession,
    model: ModelSettings,
    where: str,
    log: Callable[[str], None] = lambda line: None,
    side_sql: Optional[SideTableSql] = None,
    dry_run: bool = False,
) -> StepResult:
    """Readmits the quarantined changes of `model` that `where` selects; what the step did
    (`skipped` when none was left to readmit, or on a dry run)."""
    ctx = StepContext(session, model, log, side_sql=side_sql or default_side_table_sql())
    started = time.monotonic()
    with session.resets_later():
        try:
            result = _readmit(ctx, where, dry_run)
        finally:
            ctx.views.drop_all()
    result.seconds = time.monotonic() - started
    return result


def _readmit(ctx: StepContext, where: str, dry_run: bool) -> StepResult:
    model = ctx.model
    start = f"streamsql_readmit on model {model.name}:"
    try:
        columns = list(ctx.delta_log.snapshot(model.target_name).columns)
    except TableMissing as missing:
        raise StepError(f"{start} it has not run as an incremental_view yet.") from missing
    previous = history.read_last_record(ctx)
    if previous is None or previous.step == 0:
        raise StepError(f"{start} it has not run as an incremental_view yet.")
    late_name = model.table_name("__late")
    if not ctx.delta_log.exists(late_name):
        raise StepError(
            f"{start} it has no {model.late_table}: without `lateness` (or `max_future`) no "
            "change of it is quarantined."
        )
    if previous.emit_final:
        raise StepError(
            f"{start} it is configured emit_final, which inserts each group once, when final; "
            "a readmitted change would update a final group. Run `dbt run --full-refresh` for "
            "the model (a recompute takes in everything its inputs hold now)."
        )
    late_columns = [c.name for c in ctx.delta_log.snapshot(late_name).columns]
    # (the mark's column may be named before the first readmit adds it)
    named = list(dict.fromkeys([*late_columns, readmit.READMITTED_STEP]))
    checked = readmit.checked_where(model.name, where, model.late_table, named)
    unfinished = history.unfinished_side_writes(ctx, previous)
    if unfinished and previous.readmit is None:
        raise StepError(
            f"{start} its step {previous.step} was interrupted; run `dbt run` for the model "
            "to finish that step, then readmit."
        )
    if unfinished and dry_run:
        raise StepError(
            f"{start} its readmit step {previous.step} was interrupted before it marked its "
            f"rows of {model.late_table}. Run streamsql_readmit without dry_run (it finishes "
            "that step first, then readmits what is left) or `dbt run` for the model."
        )
    if unfinished:
        finish_readmit(ctx, previous)

    marked = readmit.READMITTED_STEP in {name.lower() for name in late_columns}
    if not marked and not dry_run:  # a `__late` made before readmit: once, before its step
        with ctx.role(f"add {readmit.READMITTED_STEP} to {model.late_table}"):
            ctx.session.run(sql.add_columns(model.late_table, [readmit.READMITTED_COLUMN]))
        late_columns.append(readmit.READMITTED_STEP)
        marked = True
    late_version = ctx.latest_version(late_name)
    late_at = f"{model.late_table} VERSION AS OF {late_version}"
    rows = readmit.condition(checked, previous.step, marked)
    with ctx.role(f"the rows of {model.late_table} to readmit"):
        found = ctx.session.query(readmit.selected_rows(late_at, rows))[0]
    selected = int(found["selected"])
    record = previous.next(ctx.run_id, dict(previous.input_versions))
    result = StepResult(
        model.name,
        record.step,
        "readmit",
        f"{selected} change(s) of {model.late_table} where {checked}",
        waterline=dict(previous.waterline),
        computed="readmit",
    )
    if selected == 0:
        result.step, result.skipped = previous.step, True
        result.notes.append(
            f"nothing to readmit: no row of {model.late_table} left where {checked}"
        )
        return result

    measures = change_measures(columns, None, False)
    change, counts = ctx.views.measure(
        "readmit",
        readmit.readmitted_change(late_at, columns, late_columns, rows),
        measures,
        CHANGE_ALIAS,
        f"the readmitted changes, netted, from {late_at}",
    )
    result.inserted, result.deleted = int(counts["inserts"]), int(counts["deletes"])
    if ctx.delta_log.exists(model.table_name("__pending")):  # what WATERMARK holds, as it was
        with ctx.role(f"the changes {model.pending_table} holds"):
            result.held = int(ctx.session.query(wm.held_count(model.pending_table))[0]["n"])
    steps = (int(found["first_step"]), int(found["last_step"]))
    said = f"steps {steps[0]}-{steps[1]}" if steps[0] != steps[1] else f"step {steps[0]}"
    if result.deleted:
        with ctx.role("the rows the readmitted deletes remove: does the model hold them?"):
            short = ctx.session.query(readmit.missing_deletes(change, model.target, columns))[0]
        if int(short["missing"]):
            raise StepError(
                f"{start} {int(short['missing'])} of the {result.deleted} row(s) the selected "
                f"changes delete are not in the model (one: {short['example']}): their rows "
                f"came from changes still in {model.late_table}, quarantined too and not "
                "selected. Widen `where` to readmit those too (for an aggregate, every "
                "quarantined change of the group: e.g. every step from the first one that "
                "quarantined it). Nothing was changed."
            )
    key = keys.key_columns(ctx, columns, ())
    if dry_run:
        result.step, result.skipped = previous.step, True
        result.notes.append(
            f"dry run: would readmit {selected} change(s) of {said} (+{result.inserted} "
            f"-{result.deleted} to the model); nothing was written"
        )
        return result
    keys.check_unique(ctx, ModelChange(change), columns, key, record.step)

    record.readmit = {"where": checked, "condition": rows, "late_version": late_version}
    step = StepState("", previous, record, result, StepWrites(readmit=ReadmitWrite(rows)))
    result.notes.append(f"readmitted {selected} change(s) of {model.late_table}, from {said}")
    # no lateness bounds: the readmitted rows are below the waterline that bounds a step's MERGE
    commit_step(ctx, step, ModelChange(change, reads=model.late_table), columns, ())
    return result


def finish_readmit(ctx: StepContext, last: StepRecord) -> None:
    """Marks the rows a readmit step committed to the model but, interrupted, did not mark in
    `__late` yet: the same UPDATE, which Delta skips if it landed (event_time/readmit.py)."""
    assert last.readmit is not None
    ctx.log(
        f"{ctx.model.name}: finishing readmit step {last.step}, which a crash interrupted "
        f"after its commit: marking its rows of {ctx.model.late_table}"
    )
    writes = StepWrites(readmit=ReadmitWrite(str(last.readmit["condition"])))
    write_side_tables(ctx, writes, last, last)
