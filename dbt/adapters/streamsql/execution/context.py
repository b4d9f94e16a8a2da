"""Where a step runs: the model, the SQL session, its views and bindings, the Delta log.

A step's phases (`step.py` lists them) pass one `StepContext` along: where the step runs (the
model, the SQL session, its views and bindings, the Delta log) and the model table's version its
reads are pinned to. What one step learns and decides as it goes is its `StepState`
(step_state.py), passed beside it.
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, ContextManager, List, Optional

from dbt.adapters.streamsql.execution.engine.bindings import Bindings
from dbt.adapters.streamsql.execution.engine.delta_log import DeltaLogReader
from dbt.adapters.streamsql.execution.engine.side_tables import SideTableSql, default_side_table_sql
from dbt.adapters.streamsql.execution.engine.sql_session import SqlSession
from dbt.adapters.streamsql.execution.engine.views import StepViews
from dbt.adapters.streamsql.execution.shared.errors import (
    FAULT_INJECTION_ENV,
    PAUSE_ENV,
    InjectedFault,
)
from dbt.adapters.streamsql.execution.shared.model import ModelSettings


@dataclass
class StepContext:
    """One run of a step of one model."""

    session: SqlSession
    model: ModelSettings
    log: Callable[[str], None] = lambda line: None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    # The model table's version when the step began (read with its last step record).
    target_version: Optional[int] = None
    # When the model's commit of that step record was made, in seconds since the epoch (None:
    # not known): the end of that step's cost (pipeline/step_cost.py).
    last_committed_at: Optional[float] = None
    # The statements that create and write the side tables: macros (side_tables.py).
    side_sql: SideTableSql = field(default_factory=default_side_table_sql)
    # The step runs with pipeline/small_step.py's settings: its tables are all small.
    small: bool = False
    # The views the model reads, whose queries the step plans with (input_views.py).
    views_read: List[str] = field(default_factory=list)
    # What on_schema_change altered in the model's tables this step (recovery/schema.py), for a
    # refusal after it to say: the next step finds the tables altered and goes on from there.
    altered: str = ""
    views: StepViews = field(init=False)
    bindings: Bindings = field(init=False)
    delta_log: DeltaLogReader = field(init=False)

    def __post_init__(self) -> None:
        self.views = StepViews(self.session, self.view_prefix)
        self.bindings = Bindings(self.views)
        self.delta_log = self.session.delta_log()

    @property
    def view_prefix(self) -> str:
        """The same names every step of this model: each step replaces the last one's plain
        views instead of dropping them (a statement each). Temporary views belong to a
        connection's Spark session, and a model runs in one connection at a time."""
        token = "".join(ch if ch.isalnum() else "_" for ch in self.model.target_name)
        digest = hashlib.sha1(self.model.target_name.encode()).hexdigest()[:8]
        return f"_streamsql_{token}_{digest}"

    def role(self, text: str) -> ContextManager[None]:
        """The role of the statements sent inside, in the statement log (trace.py): what
        `target/run/` shows before each."""
        return self.session.trace.role(text)

    def checkpoint(self, point: str) -> None:
        """Test-only fault injection: fail here if STREAMSQL_TEST_FAIL_AT names this point, or
        wait here to be killed if STREAMSQL_TEST_PAUSE_AT does."""
        wanted = os.environ.get(FAULT_INJECTION_ENV)
        if wanted and wanted == point:
            raise InjectedFault(f"injected fault at {point} (step of {self.model.name})")
        paused, _, marker = os.environ.get(PAUSE_ENV, "").partition(":")
        if paused == point and marker:  # to be killed here
            with open(marker, "w") as written:
                written.write(str(os.getpid()))
            time.sleep(600)
            raise InjectedFault(f"paused at {point} and not killed (step of {self.model.name})")

    def nothing_changed(self) -> str:
        """The sentence of a refusal that says what the refused step left behind."""
        if not self.altered:
            return "Nothing was changed."
        return (
            f"Nothing was changed but the model's columns: {self.altered}, and the next step "
            "keeps that."
        )

    def latest_version(self, table: str) -> int:
        return self.delta_log.version(table)
