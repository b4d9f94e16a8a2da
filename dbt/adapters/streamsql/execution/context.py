"""What every phase of a step shares: the model, the SQL session, and what the step learned so far.

A step's phases (`step.py` lists them) pass one `StepContext` along. It carries the facts one phase
establishes and a later one needs (is this the first step, were the changes read so far inserts
only, the model table's version), as named fields set in one place each, instead of flags hidden
in a class.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Dict, List, Mapping, Optional, Sequence

from dbt.adapters.streamsql.execution import statements as sql
from dbt.adapters.streamsql.execution.bindings import Bindings
from dbt.adapters.streamsql.execution.delta_log import DeltaLogReader
from dbt.adapters.streamsql.execution.side_tables import SideTableSql, default_side_table_sql
from dbt.adapters.streamsql.execution.sql_session import SqlSession
from dbt.adapters.streamsql.execution.views import StepViews

FAULT_INJECTION_ENV = "STREAMSQL_TEST_FAIL_AT"


class StepError(Exception):
    """A step cannot run; the message names the model and says what to do."""


class InjectedFault(Exception):
    """Raised at a named point of a step when the test-only fault switch asks for it."""


@dataclass
class ModelSettings:
    """The model as a step sees it: its table's name and the configs the step obeys."""

    name: str  # the model's name for messages
    schema: str
    identifier: str
    full_refresh: bool = False
    append_only: bool = False
    partition_by: Sequence[str] = ()
    cluster_by: Sequence[str] = ()
    tblproperties: Mapping[str, str] = field(default_factory=dict)
    location: Optional[str] = None
    lateness: Mapping[str, Any] = field(default_factory=dict)
    max_future: Mapping[str, Any] = field(default_factory=dict)
    watermark: Mapping[str, Any] = field(default_factory=dict)
    # an aggregate holds only final groups, each inserted once (emit_final.py)
    emit_final: bool = False
    # dbt's on_schema_change (schema.py) and unique_key (keys.py)
    on_schema_change: str = "ignore"
    unique_key: Sequence[str] = ()
    # "auto": the planner's plan, and for a plan without state, a recompute in a step whose
    # change is as large as its inputs (step.choose_plan); "incremental": never that;
    # "recompute": always recompute and diff.
    strategy: str = "auto"

    def table(self, suffix: str = "") -> str:
        """The quoted name of the model's table, or of one of its side tables."""
        return f"{sql.quote(self.schema)}.{sql.quote(self.identifier + suffix)}"

    def table_name(self, suffix: str = "") -> str:
        """The unquoted name of the model's table, or of one of its side tables."""
        return f"{self.schema}.{self.identifier + suffix}"

    @property
    def target(self) -> str:
        return self.table()

    @property
    def target_name(self) -> str:  # unquoted, for table_changes() and idempotency keys
        return self.table_name()

    @property
    def state_table(self) -> str:  # internal: per-group partial aggregates
        return self.table("__streamsql_state")

    @property
    def late_table(self) -> str:
        return self.table("__late")

    @property
    def waterline_table(self) -> str:
        return self.table("__waterline")

    @property
    def pending_table(self) -> str:
        return self.table("__pending")

    def stage_table(self, stage: str) -> str:  # internal: a stage's per-group partial aggregates
        return self.table(f"__streamsql_{stage}")


@dataclass
class StepResult:
    """What one step did: the step log line and run_results.json's adapter response."""

    model: str
    step: int
    plan: str
    reason: str
    changes_read: int = 0
    inserted: int = 0
    deleted: int = 0
    late: int = 0
    held: int = 0
    waterline: Dict[str, Optional[str]] = field(default_factory=dict)
    seconds: float = 0.0
    skipped: bool = False  # nothing changed in the inputs since the last step
    # What the step line adds: a recovery, a retention warning, an ignored column.
    notes: List[str] = field(default_factory=list)

    @property
    def applied(self) -> int:
        return self.inserted + self.deleted

    def log_line(self) -> str:
        if self.skipped:
            return (
                f"{self.model}: step {self.step}: inputs unchanged, nothing to do "
                f"({self.seconds:.1f} s)"
            )
        waterline = ", ".join(f"{k}={v}" for k, v in self.waterline.items()) or "none"
        return (
            f"{self.model}: step {self.step}: read {self.changes_read} changes, applied "
            f"{self.applied} (+{self.inserted} -{self.deleted}), late {self.late}, held "
            f"{self.held}, waterline {waterline}; {self.plan} ({self.reason}); "
            f"{self.seconds:.1f} s" + "".join(f"; {note}" for note in self.notes)
        )


@dataclass
class StepContext:
    """One run of a step of one model."""

    session: SqlSession
    model: ModelSettings
    log: Callable[[str], None] = lambda line: None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    # The model table's version when the step began (read with its last step record).
    target_version: Optional[int] = None
    # A first step reads every input in full: no key bounds (they would skip nothing), and
    # delta rules in the form that reads older versions (those are empty).
    first_step: bool = False
    # Whether the changes read so far in this step (inputs, then stages) are inserts only.
    inserts_only: bool = True
    # The model's compiled SQL (noted by inputs.describe_inputs): a recovery recomputes it.
    compiled_sql: str = ""
    # The model's columns next to its query's (schema.check); None on a first step.
    schema: Optional[Any] = None
    # Set when the step is taken again because reading an input's history failed (recovery.py).
    recover_reason: Optional[str] = None
    # The statements that create and write the side tables: macros (side_tables.py).
    side_sql: SideTableSql = field(default_factory=default_side_table_sql)
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
        """Test-only fault injection: fail here if STREAMSQL_TEST_FAIL_AT names this point."""
        wanted = os.environ.get(FAULT_INJECTION_ENV)
        if wanted and wanted == point:
            raise InjectedFault(f"injected fault at {point} (step of {self.model.name})")

    def latest_version(self, table: str) -> int:
        return self.delta_log.version(table)
