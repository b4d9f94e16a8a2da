"""The model as a step sees it: its tables' names and the configs the step obeys.

Each config is declared here, once, as a field of `ModelSettings`; `impl.model_settings` builds
it from dbt's relation and config (configs.model_settings). Every room reads it, none changes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Sequence

from dbt.adapters.streamsql.execution.engine import statements as sql
from dbt.adapters.streamsql.execution.shared.config_kinds import (
    BOOLEAN,
    COLUMN_MAP,
    COLUMNS,
    FINAL_STATE,
    LOCATION,
    NEXT_STEP,
    RETENTION,
    SCHEMA_CHANGE,
    STRING_MAP,
    TABLE_BUILT,
    TABLE_CREATED,
    one_of,
    setting,
)

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


@dataclass(frozen=True)
class ModelSettings:
    """The model as a step sees it: its table's name and the configs the step obeys.

    Each config field is that config's one declaration (`setting`, config_kinds.py): its kind of
    value, when a change takes effect, what it does in the docs' words, and its default as a
    user writes it, read as the step reads it. configs.py derives the rest from these fields,
    which are in the order of docs/configuration.md's table.
    """

    name: str  # the model's name for messages
    schema: str
    identifier: str
    full_refresh: bool = False  # the run rebuilds the model (`dbt run --full-refresh`)

    lateness: Mapping[str, Any] = setting(
        COLUMN_MAP,
        NEXT_STEP,
        "LATENESS on the model's output column: changes below the waterline go to `<model>__late`.",
    )
    max_future: Mapping[str, Any] = setting(
        COLUMN_MAP,
        NEXT_STEP,
        "A change whose value is more than this after the current time is quarantined",
    )
    # per lateness column ("*": every column; lateness.lateness_rules); a column not named: its
    # lateness
    final_state_retention: Mapping[str, Any] = setting(
        FINAL_STATE,
        NEXT_STEP,
        "how far below the waterline the state of final groups is kept",
        docs_default="the column's `lateness`",
    )
    watermark: Mapping[str, Any] = setting(
        COLUMN_MAP,
        NEXT_STEP,
        "WATERMARK: a change is held in `<model>__pending` until the data has moved this far "
        "past it.",
    )
    # event_time/emit_final.py
    emit_final: bool = setting(
        BOOLEAN,
        TABLE_BUILT,
        "the model holds only final groups (below the waterline), each inserted once with its "
        "final values, never updated",
        default=False,
    )
    # "auto": the planner's plan, and for a plan without state, a recompute in a step whose
    # change is as large as its inputs (pipeline/plan_choice.py); "incremental": never that;
    # "recompute": always recompute and diff.
    strategy: str = setting(
        one_of(("auto", "incremental", "recompute")),
        NEXT_STEP,
        "How steps compute the model's change.",
        default="auto",
    )
    append_only: bool = setting(
        BOOLEAN,
        NEXT_STEP,
        "a step that would delete or update a row of the model fails",
        default=False,
    )
    partition_by: Sequence[str] = setting(
        COLUMNS, TABLE_CREATED, "`PARTITIONED BY` of the model's table."
    )
    cluster_by: Sequence[str] = setting(
        COLUMNS, TABLE_CREATED, "`CLUSTER BY` of the model's table.", config="liquid_clustered_by"
    )
    tblproperties: Mapping[str, str] = setting(
        STRING_MAP, TABLE_CREATED, "Extra Delta table properties of the model's table"
    )
    # `<location_root>/<model>`; None: the warehouse's
    location: Optional[str] = setting(
        LOCATION,
        TABLE_CREATED,
        "Every table of the model is created under it instead of under the warehouse",
        config="location_root",
    )
    # dbt's on_schema_change (recovery/schema.py); `ignore` is dbt's default for incremental
    # models, and the value dbt gives the config when it is not set
    on_schema_change: str = setting(
        one_of(("ignore", "fail", "append_new_columns", "sync_all_columns"), " (dbt's values)"),
        SCHEMA_CHANGE,
        "what a step does when the query's output columns no longer match the model's table",
        default="ignore",
    )
    # pipeline/keys.py
    unique_key: Sequence[str] = setting(COLUMNS, NEXT_STEP, "The model's key")
    # in seconds; None: for ever (commit/cleanup.py)
    waterline_retention: Optional[float] = setting(
        RETENTION,
        NEXT_STEP,
        "How long the rows of `<model>__waterline` are kept",
        default="30 days",
    )
    # in seconds; None: for ever
    pending_retention: Optional[float] = setting(
        RETENTION,
        NEXT_STEP,
        "How long `<model>__pending` keeps the changes WATERMARK held and a step has since "
        "released.",
        default="30 days",
    )
    # commit/small_files.py
    compact_files: bool = setting(
        BOOLEAN,
        NEXT_STEP,
        "Compacts the model's table and side tables when small files pile up",
        default=True,
    )
    # for a step that removes rows of a model under 1 MiB (commit/protocol.py)
    rewrite_when_small: bool = setting(
        BOOLEAN,
        NEXT_STEP,
        "writes the table whole, in one `INSERT OVERWRITE` into one file, instead of a `MERGE`",
        default=True,
    )
    # for a step `strategy: auto` recomputes (pipeline/plan_choice.py `writes_whole`)
    rewrite_on_recompute: bool = setting(
        BOOLEAN,
        NEXT_STEP,
        "writes the query's rows as the whole table, in one `INSERT OVERWRITE`, instead of "
        "their difference with it",
        default=True,
    )

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
