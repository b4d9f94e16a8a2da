"""Delta transaction settings around a write: the step record and the idempotent-write id.

Every commit of a step carries the step record in its `commitInfo.userMetadata`, and every write
that may be tried again carries Delta's idempotent-write id (`txnAppId`, `txnVersion`): Delta
skips a write whose id and version it has committed before. Both are session settings, set just
before the write and reset after it, together with the write's other settings: one statement
each way in the embedded session (`SqlSession.set_confs`).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence, Tuple

from dbt.adapters.streamsql.execution.commit.record import StepRecord
from dbt.adapters.streamsql.execution.context import StepContext

USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"


def with_record(
    ctx: StepContext,
    record: StepRecord,
    write: Callable[[], Any],
    idempotent: bool,
    table: str = "",
    also: Sequence[Tuple[str, str]] = (),
) -> None:
    """Run writing statements whose Delta commits carry the step record.

    `idempotent`: also Delta's txnAppId/txnVersion, so that a second commit of the same step
    (a re-run after a crash, another process) is skipped by Delta itself; `table` (a side
    table's suffix) makes the id that table's own, so each table takes the step once. `also`:
    the write's other settings, set and reset with these.
    """
    settings = [*also, (USER_METADATA, record.to_json())]
    if idempotent:
        app = f"streamsql:{ctx.model.target_name}:{record.incarnation}{table and ':' + table}"
        settings += [(TXN_APP_ID, app), (TXN_VERSION, str(record.step))]
    with_settings(ctx, settings, write)


def with_settings(
    ctx: StepContext, settings: Sequence[Tuple[str, str]], run: Callable[[], Any]
) -> None:
    """Run with session settings that are reset afterwards, whatever happens."""
    if not settings:
        run()
        return
    ctx.session.set_confs(settings)
    try:
        run()
    finally:
        ctx.session.unset_confs([key for key, _ in settings])
