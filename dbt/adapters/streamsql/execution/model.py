"""The model as a step sees it: its tables' names and the configs the step obeys.

`impl.model_settings` builds it from dbt's relation and config (the configs are declared in
configs.py); every room reads it, none changes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Sequence

from dbt.adapters.streamsql.execution.engine import statements as sql

# The Delta table properties that say how a table is stored and how long its history is kept, not
# what it holds: those of a model's `tblproperties` apply to its state and side tables too
# (docs/configuration.md, "Table properties"). Delta matches them without regard to case.
STORAGE_PROPERTIES = (
    "delta.logRetentionDuration",
    "delta.deletedFileRetentionDuration",
    "delta.setTransactionRetentionDuration",
    "delta.checkpointInterval",
    "delta.checkpointPolicy",
    "delta.checkpoint.writeStatsAsJson",
    "delta.checkpoint.writeStatsAsStruct",
    "delta.targetFileSize",
    "delta.tuneFileSizesForRewrites",
    "delta.autoOptimize.optimizeWrite",
    "delta.autoOptimize.autoCompact",
    "delta.randomizeFilePrefixes",
    "delta.randomPrefixLength",
)
_STORAGE = {name.lower() for name in STORAGE_PROPERTIES}


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
    # How far below the waterline an aggregate keeps final groups' state, per lateness column
    # ("*": every column; lateness.lateness_rules); a column not named: its lateness
    final_state_retention: Mapping[str, Any] = field(default_factory=dict)
    # an aggregate holds only final groups, each inserted once (emit_final.py)
    emit_final: bool = False
    # dbt's on_schema_change (schema.py) and unique_key (keys.py)
    on_schema_change: str = "ignore"
    unique_key: Sequence[str] = ()
    # "auto": the planner's plan, and for a plan without state, a recompute in a step whose
    # change is as large as its inputs (pipeline/plan_choice.py); "incremental": never that;
    # "recompute": always recompute and diff.
    strategy: str = "auto"
    # How long rows stay in `__waterline`, in seconds; None: for ever (cleanup.py)
    waterline_retention: Optional[float] = 30 * 86400.0
    # How long `__pending` keeps the rows a step released, in seconds; None: for ever
    pending_retention: Optional[float] = 30 * 86400.0
    # Whether a step compacts the model's table and side tables when small files pile up
    # (small_files.py)
    compact_files: bool = True
    # Whether a step that removes rows from a small model writes it whole instead of a MERGE
    # (commit/protocol.py)
    rewrite_when_small: bool = True

    @property
    def storage_properties(self) -> Dict[str, str]:
        """The model's `tblproperties` that its state and side tables get too."""
        return {str(k): str(v) for k, v in self.tblproperties.items() if str(k).lower() in _STORAGE}

    def table(self, suffix: str = "") -> str:
        """The quoted name of the model's table, or of one of its side tables."""
        return f"{sql.quote(self.schema)}.{sql.quote(self.identifier + suffix)}"

    def location_of(self, suffix: str = "") -> Optional[str]:
        """Where the model's table, or one of its side or state tables, is created: under the
        model's `location_root` (configs.py) beside the model's own; None: the warehouse's."""
        return f"{self.location}{suffix}" if self.location else None

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
