"""A step over small tables runs without the parts of Spark's planning made for large data.

A step's statements mostly move a few rows, and on small tables its cost is the number of
Spark jobs and compilations it triggers, not the bytes it reads. Two of Spark's defaults add to
both: adaptive query execution runs each stage of a query as a job of its own, planned after
the one before has run (a GROUP BY is two jobs, Delta's MERGE nine instead of four), and
code generation compiles Java for every query plan it has not seen (a step's queries carry
literal key bounds and view names, so most plans are new to it). What they buy (stages
re-planned for skewed or large shuffles, tight loops over millions of rows) a step over tables
of a few MiB cannot use.

So when every input and the model's table are known to be small (their sizes from the Delta
checksum files the reader gets without a statement: `DeltaLogReader.free_snapshots`), the step
runs with `SMALL_STEP_SETTINGS` in its own session and resets them when it ends
(bench/fixed_cost.py measures it). A step that reads its inputs in full moves every row, not a
few: it keeps them only over inputs of at most SMALL_FULL_READ_BYTES (`reads_in_full`). Over a
Thrift Server, where sizes cost a statement, steps run with the server's settings.
"""

from __future__ import annotations

from typing import Optional, Sequence

from dbt.adapters.streamsql.execution.context import StepContext
from dbt.adapters.streamsql.execution.engine.delta_log import TableMissing
from dbt.adapters.streamsql.execution.shared.input_state import InputState

# A step is small when its inputs and its model's table hold at most this many bytes together.
SMALL_STEP_BYTES = 64 * 2**20
# ... and a step that reads its inputs in full (a first step, a recompute, a recovery) only when
# they hold at most this many: such a step moves every row, and over more rows than this
# interpreted plans cost more than compiling them.
SMALL_FULL_READ_BYTES = 8 * 2**20
SMALL_STEP_SETTINGS = (
    ("spark.sql.adaptive.enabled", "false"),
    ("spark.sql.codegen.wholeStage", "false"),
    ("spark.sql.codegen.factoryMode", "NO_CODEGEN"),
)


def small_step(ctx: StepContext, read: Sequence[InputState]) -> bool:
    """Whether the inputs `read` and the model's table are known to be small, for free."""
    if not ctx.delta_log.free_snapshots:
        return False
    sizes = [item.size_bytes for item in read]
    try:
        sizes.append(ctx.delta_log.snapshot(ctx.model.target_name).size_bytes)
    except TableMissing:  # a first step: the model is created empty
        pass
    return all(size is not None for size in sizes) and sum(sizes) <= SMALL_STEP_BYTES


def enter(ctx: StepContext, read: Sequence[InputState]) -> None:
    """Switch the step's session to `SMALL_STEP_SETTINGS` if the step is small; `leave` resets
    them."""
    if small_step(ctx, read):
        ctx.session.set_confs(SMALL_STEP_SETTINGS)
        ctx.small = True


def reads_in_full(ctx: StepContext, input_bytes: Optional[int]) -> None:
    """The step reads its inputs in full (`input_bytes` of them; None: not known): back to
    Spark's own planning unless they are at most SMALL_FULL_READ_BYTES."""
    if ctx.small and (input_bytes is None or input_bytes > SMALL_FULL_READ_BYTES):
        leave(ctx)


def leave(ctx: StepContext) -> None:
    if ctx.small:
        ctx.small = False
        ctx.session.unset_confs([key for key, _ in SMALL_STEP_SETTINGS])
