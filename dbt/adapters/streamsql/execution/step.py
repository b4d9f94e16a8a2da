"""One step of an incremental view: read input changes, compute the model's change, apply it.

Commit order is what makes a step exactly-once:

1. Undo what a crashed attempt of this step left in side tables (the aggregate state table is
   restored to the version the last completed step recorded).
2. Write side tables (aggregate state).
3. Commit the model's change together with the step record (`progress.StepRecord`) in one Delta
   commit, made idempotent with Delta's `txnAppId`/`txnVersion`: a second commit for the same step
   number is skipped by Delta itself.

A step killed before 3 has changed nothing a reader of the model can see, and its re-run redoes it;
a step killed after 3 is complete.
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple

from dbt.adapters.streamsql.execution import lateness as late
from dbt.adapters.streamsql.execution import statements as sql
from dbt.adapters.streamsql.execution import watermark as wm
from dbt.adapters.streamsql.execution.progress import (
    CREATING_OPERATIONS,
    StepRecord,
    last_record,
    sql_fingerprint,
)
from dbt.adapters.streamsql.planning.errors import PlanningError
from dbt.adapters.streamsql.planning.plan import (
    GROUP_ALIAS,
    GROUP_DELTA,
    GROUPS,
    STATE,
    TARGET,
    WEIGHT,
    Column,
    AggregatePlan,
    InputTable,
    KeyBound,
    StagePlan,
    StepPlan,
    delta_input,
    new_input,
    old_input,
)

FAULT_INJECTION_ENV = "STREAMSQL_TEST_FAIL_AT"
# How Spark/Delta say that DESCRIBE HISTORY met a table that is not a Delta table.
NOT_DELTA_MARKERS = ("DELTA_MISSING_DELTA_TABLE", "DELTA_ONLY_OPERATION", "not a Delta table",
                     "only supported for Delta tables")
USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
HISTORY_PAGE = 50  # commits of the model's history read to find its last step record
# Late changes touching final groups of at most this many lateness values (say, old windows)
# still let a step skip the state of the other final groups.
MAX_FINAL_GROUP_VALUES = 100
TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
MAX_RECORDS_PER_FILE = "spark.sql.files.maxRecordsPerFile"
# Rows per file of a first step's sorted bulk write: small enough files that a later step's key
# ranges skip most of them.
BULK_FILE_ROWS = 250_000
TXN_VERSION = "spark.databricks.delta.write.txnVersion"


class StepError(Exception):
    """A step cannot run; the message names the model and says what to do."""


class InjectedFault(Exception):
    """Raised at a named point of a step when the test-only fault switch asks for it."""


# The planner as the executor calls it: (model SQL, inputs, output columns, describe) -> plan.
Planner = Callable[[str, Sequence[InputTable], Sequence[Column], Callable[[str], Sequence[Column]]],
                   StepPlan]


class SqlSession(Protocol):
    def query(self, statement: str) -> List[Dict[str, Any]]: ...

    def run(self, statement: str) -> None: ...

    def materialize(self, name: str, select: str) -> None: ...  # see AdapterSqlSession

    def release(self, name: str) -> None: ...


@dataclass
class InputState:
    table: InputTable
    relation: str  # quoted name to use in SQL
    version: int


@dataclass
class StepResult:
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

    @property
    def applied(self) -> int:
        return self.inserted + self.deleted

    def log_line(self) -> str:
        if self.skipped:
            return (f"{self.model}: step {self.step}: inputs unchanged, nothing to do "
                    f"({self.seconds:.1f} s)")
        waterline = ", ".join(f"{k}={v}" for k, v in self.waterline.items()) or "none"
        return (
            f"{self.model}: step {self.step}: read {self.changes_read} changes, applied "
            f"{self.applied} (+{self.inserted} -{self.deleted}), late {self.late}, held "
            f"{self.held}, waterline {waterline}; {self.plan} ({self.reason}); "
            f"{self.seconds:.1f} s"
        )


@dataclass
class ModelSettings:
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

    def table(self, suffix: str = "") -> str:
        """The quoted name of the model's table, or of one of its side tables."""
        return f"{sql.quote(self.schema)}.{sql.quote(self.identifier + suffix)}"

    @property
    def target(self) -> str:
        return self.table()

    @property
    def target_name(self) -> str:  # unquoted, for table_changes() and idempotency keys
        return f"{self.schema}.{self.identifier}"

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
class ChangedGroups:
    """The groups of an aggregate that a step changes, as step-local views (see `_changed_groups`)."""

    state: str  # the state table before the step, as far as the changed groups' keys reach
    new: str  # cached: the new state of every changed group (count 0 for a group that is gone)
    old: str  # the state of the changed groups before the step
    bounds: List[str]  # predicates over a state row (GROUP_ALIAS) every changed group meets


@dataclass
class EventTimeRules:
    lateness: List[late.LatenessRule]
    watermark: List[wm.WatermarkRule]


class StepRunner:
    """Runs one step of one model against a SQL session."""

    def __init__(
        self,
        session: SqlSession,
        model: ModelSettings,
        planner: Planner,
        log: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.session = session
        self.model = model
        self.planner = planner
        self.log = log
        self.run_id = uuid.uuid4().hex
        token = "".join(ch if ch.isalnum() else "_" for ch in model.target_name)
        # The same names every step of this model: each step replaces the last one's plain views
        # instead of dropping them (a statement each). Temporary views belong to a connection's
        # Spark session, and a model runs in one connection at a time.
        digest = hashlib.sha1(model.target_name.encode()).hexdigest()[:8]
        self.view_prefix = f"_streamsql_{token}_{digest}"
        self._cached: List[str] = []
        self._target_version: Optional[int] = None  # the model table's version when the step began
        # A first step reads every input in full: no key bounds (they would skip nothing), and
        # delta rules in the form that reads older versions (those are empty).
        self._first_step = False
        # Whether the changes read so far in this step (inputs, then stages) are inserts only.
        self._inserts_only = True

    # -- entry point ------------------------------------------------------------------------------

    def run(self, compiled_sql: str) -> StepResult:
        started = time.monotonic()
        try:
            result = self._run(compiled_sql)
        except PlanningError as error:
            raise StepError(f"Model {self.model.name}: {error}") from error
        finally:
            self._drop_views()
        result.seconds = time.monotonic() - started
        return result

    def _run(self, compiled_sql: str) -> StepResult:
        from dbt.adapters.streamsql.planning.references import referenced_tables

        inputs = [self._describe_input(name) for name in referenced_tables(compiled_sql)]
        output_columns = self._describe_query(compiled_sql)
        plan = self.planner(compiled_sql, [i.table for i in inputs], output_columns,
                            self._describer(inputs))
        fingerprint = sql_fingerprint(compiled_sql)
        rules = self._event_time_rules(output_columns)  # fails before anything is written

        previous = self._prepare_target(plan, inputs, output_columns, fingerprint, rules)
        step = previous.step + 1
        versions = {i.table.name: i.version for i in inputs}
        if previous.step > 0 and versions == previous.input_versions:
            return StepResult(self.model.name, previous.step, plan.strategy, plan.reason,
                              waterline=dict(previous.waterline), skipped=True)

        self._checkpoint("start")
        result = StepResult(self.model.name, step, plan.strategy, plan.reason)
        first_step = all(previous.input_versions.get(i.table.name) is None for i in inputs)
        self._first_step = first_step
        # A monotonic linear query over inserts only changes by inserts: its change needs no
        # netting, and on the first step the inputs' snapshots need not be copied into memory.
        # A first step's change is each input's whole snapshot: read it again where needed
        # rather than copy it into memory.
        views, removals = self._bind_inputs(
            inputs, previous, result,
            cache_snapshots=not (first_step or (plan.strategy == "linear" and plan.monotonic)))
        self._inserts_only = removals == 0
        record = previous.next(self.run_id, versions)

        # Everything a step reads is pinned to a version: this step itself changes the state and
        # target tables, and over Thrift Spark re-computes cached views when a table under them
        # changes (the embedded session materializes them without lineage: `materialize`).
        writes: List[Callable[[], None]] = []
        for stage in plan.stages:
            removals += self._stage_change(stage, views, previous, record, writes)
            self._inserts_only = removals == 0
        if plan.strategy == "aggregate":
            net = self._aggregate_change(plan, views, rules, previous, record, writes)
        else:
            target_version = self._target_version
            if target_version is None:
                target_version = self._latest_version(self.model.target)
            views[TARGET] = self._view("target", sql.input_as_of(self.model.target,
                                                                 target_version))
            change_sql, monotonic = plan.change_sql or "", plan.monotonic
            # The form that reads no input's older version has negative terms even for inserts:
            # used where the change is netted anyway (something was removed), so that inserts
            # keep their append without netting.
            if not (first_step or (monotonic and removals == 0)) and plan.later_change_sql:
                change_sql, monotonic = plan.later_change_sql, plan.later_monotonic
            insert_path = monotonic
            self._bind_bounds(plan.bounds, change_sql, views)
            # Used once, by `net`: a plain view, so Spark plans both as one query.
            change = self._view("change", sql.bind_placeholders(change_sql, views))
            if insert_path and removals == 0 and first_step:
                # Every row has weight +1. Evaluated twice (counted, then inserted), which costs
                # less than copying a whole snapshot's result into memory.
                net = change
            elif insert_path and removals == 0:
                net = self._cache("net", f"SELECT * FROM {change}")
            else:
                net = self._cache("net", sql.consolidate(change, plan.output_columns))
        return self._finish(net, plan.output_columns, rules, previous, record, result, writes,
                            key=self._merge_key(plan, rules))

    def flush(self) -> StepResult:
        """Release every held change (`streamsql_flush`): a step that reads no input."""
        started = time.monotonic()
        try:
            columns = [Column(r["col_name"], r["data_type"])
                       for r in self._describe_rows(f"DESCRIBE TABLE {self.model.target}")]
            rules = self._event_time_rules(columns)
            previous = self._last_record()
            if previous is None:
                raise StepError(f"Model {self.model.name} has not run as an incremental_view "
                                "yet: nothing is held.")
            if not rules.watermark:
                raise StepError(f"Model {self.model.name} declares no watermark: nothing is held.")
            record = previous.next(self.run_id, dict(previous.input_versions))
            result = StepResult(self.model.name, record.step, "flush",
                                "release every held change")
            empty = self._view("nothing", f"SELECT {sql.column_list(columns)}, CAST(0 AS BIGINT) "
                                          f"AS {WEIGHT} FROM {self.model.target} WHERE false")
            result = self._finish(empty, columns, rules, previous, record, result, [],
                                  release_all=True)
        finally:
            self._drop_views()
        result.seconds = time.monotonic() - started
        return result

    def _finish(self, net: str, columns: Sequence[Column], rules: "EventTimeRules",
                previous: StepRecord, record: StepRecord, result: StepResult,
                writes: List[Callable[[], None]], release_all: bool = False,
                key: Optional[Sequence[str]] = None) -> StepResult:
        """WATERMARK, then LATENESS, then the model's commit: the end of every step.

        Everything is computed (into cached views) before anything is written, so a step refused
        here (append_only) leaves no trace; `writes` then run in order: the aggregate state, held
        rows, the quarantine and waterline, and last the model's own commit. `key`: columns the
        model holds at most one row per (see `_merge_key`).
        """
        if rules.watermark:
            net = self._apply_watermark(net, columns, rules.watermark, previous, record, result,
                                        release_all, writes)
        if rules.lateness:
            net = self._apply_lateness(net, columns, rules.lateness, previous, record, result,
                                       writes)
        counts = self.session.query(sql.change_counts(net))[0]
        result.inserted, result.deleted = int(counts["inserts"]), int(counts["deletes"])
        if int(counts["widest"]) > 1:  # several copies of one row: not one row per key
            key = None
        if self.model.append_only and result.deleted:
            raise StepError(
                f"Model {self.model.name} is configured append_only, but step {record.step} "
                f"would delete or update {result.deleted} row(s) of it. Nothing was changed. "
                "Remove `append_only` from the model's config if its result can shrink, or find "
                "the input update/delete that caused this."
            )
        # Every side table's commit carries the step record: the next step tells from it whether
        # an attempt that never committed wrote there (`_interrupted`).
        self._with_record(record, lambda: [write() for write in writes], idempotent=False)
        self._checkpoint("before_commit")
        bounds = late.target_bounds(rules.lateness, previous.waterline)
        self._commit(net, columns, result, record, bounds, key, first=previous.step == 0)
        self._checkpoint("after_commit")
        result.waterline = dict(record.waterline)
        return result

    # -- inputs -----------------------------------------------------------------------------------

    def _describe_input(self, name: str) -> InputState:
        relation = ".".join(sql.quote(part) for part in name.split("."))
        try:
            history = self.session.query(f"DESCRIBE HISTORY {relation} LIMIT 1")
        except Exception as exc:
            message = str(exc)
            if any(marker in message for marker in NOT_DELTA_MARKERS):
                raise StepError(
                    f"Model {self.model.name} reads {name}, which is not a Delta table, so its "
                    "changes cannot be read. Make it a Delta table (materialized='table' or "
                    "'incremental_view' on this adapter, or CONVERT TO DELTA for a source)."
                ) from exc
            if "TABLE_OR_VIEW_NOT_FOUND" in message or "not found" in message.lower():
                raise StepError(
                    f"Model {self.model.name} reads {name}, which does not exist (or is a view; "
                    "incremental views read tables: materialize it as a table or incremental_view)."
                ) from exc
            raise
        properties = {
            row["key"]: row["value"]
            for row in self.session.query(f"SHOW TBLPROPERTIES {relation}")
        }
        if properties.get("delta.enableChangeDataFeed", "false").lower() != "true":
            raise StepError(
                f"Model {self.model.name} reads {name}, whose Delta change data feed is off, so "
                "the step cannot tell what changed. Enable it with: ALTER TABLE "
                f"{name} SET TBLPROPERTIES (delta.enableChangeDataFeed = true)"
            )
        columns = tuple(
            Column(row["col_name"], row["data_type"])
            for row in self._describe_rows(f"DESCRIBE TABLE {relation}")
        )
        return InputState(InputTable(name, columns), relation, int(history[0]["version"]))

    def _describe_query(self, compiled_sql: str) -> List[Column]:
        body = compiled_sql.strip().rstrip(";")
        return [Column(row["col_name"], row["data_type"])
                for row in self._describe_rows(f"DESCRIBE QUERY {body}")]

    def _describe_rows(self, statement: str) -> List[Dict[str, Any]]:
        rows = []
        for row in self.session.query(statement):
            name = (row.get("col_name") or "").strip()
            if not name or name.startswith("#"):
                break  # partition and detail sections follow a blank or '#' line
            rows.append(row)
        return rows

    def _bind_inputs(self, inputs: Sequence[InputState], previous: StepRecord,
                     result: StepResult, cache_snapshots: bool = True) -> Tuple[Dict[str, str], int]:
        """Views of each input's new, old and delta; and how many delta rows are removals."""
        views: Dict[str, str] = {}
        removals = 0
        for i, item in enumerate(inputs):
            name, cols, now = item.table.name, item.table.columns, item.version
            before = previous.input_versions.get(name)
            views[new_input(i)] = self._view(f"new_{i}", sql.input_as_of(item.relation, now))
            if before is None:
                views[old_input(i)] = self._view(f"old_{i}", sql.empty_input(item.relation, now))
                change = sql.input_snapshot_as_change(item.relation, cols, now)
                if not cache_snapshots:
                    views[delta_input(i)] = self._view(f"delta_{i}", change)
                    result.changes_read += int(self.session.query(
                        sql.count_rows(f"{item.relation} VERSION AS OF {now}"))[0]["n"])
                    continue
            else:
                views[old_input(i)] = self._view(f"old_{i}",
                                                 sql.input_as_of(item.relation, before))
                if before == now:
                    change = sql.input_snapshot_as_change(item.relation, cols, now) + " WHERE false"
                else:
                    change = sql.input_changes(name, cols, before, now)
            views[delta_input(i)] = self._cache(f"delta_{i}", change)
            counts = self.session.query(sql.count_changes(views[delta_input(i)]))[0]
            result.changes_read += int(counts["n"])
            removals += int(counts["removals"])
        return views, removals

    # -- the model's table ------------------------------------------------------------------------

    def _prepare_target(self, plan: StepPlan, inputs: Sequence[InputState],
                        output_columns: Sequence[Column], fingerprint: str,
                        rules: "EventTimeRules") -> StepRecord:
        """The last completed step; (re)creates the model's tables on the first or a full-refresh run."""
        model = self.model
        previous: Optional[StepRecord] = None
        exists = self._target_exists()
        self._target_version = None
        if exists and not model.full_refresh:
            previous = self._last_record()
            if previous is None:
                raise StepError(
                    f"Model {model.name}: the table {model.target_name} exists but was not built "
                    "by incremental_view (no step record in its Delta history). Run `dbt run "
                    f"--full-refresh --select {model.name}` to rebuild it as an incremental view."
                )
            if previous.sql_fingerprint != fingerprint:
                raise StepError(
                    f"Model {model.name}: its SQL changed since step {previous.step}, so its "
                    "table no longer matches its query. Run `dbt run --full-refresh --select "
                    f"{model.name}` to rebuild it from its inputs."
                )
            self._require_bookkeeping(plan, previous)
            # LATENESS or WATERMARK may have been added to the config since the last step.
            self._create_event_time_tables(output_columns, rules, replace=False)
            return self._recover(plan, previous)
        # Step 0: empty tables; the first step then reads every input in full.
        self._create_event_time_tables(output_columns, rules, replace=True)
        record = StepRecord(step=0, run_id=self.run_id, sql_fingerprint=fingerprint,
                            incarnation=self.run_id)
        describe_views = self._describe_views(inputs, plan.stages)
        for stage in plan.stages:
            record.stage_versions[stage.name] = self._create_state_table(
                self.model.stage_table(stage.name), stage.aggregate, describe_views)
        if plan.aggregate is not None:
            record.state_version = self._create_state_table(
                self.model.state_table, plan.aggregate, describe_views)
        self._with_record(record, lambda: self.session.run(sql.create_table(
            model.target, output_columns, model.tblproperties, model.partition_by,
            model.cluster_by, model.location)), idempotent=False)
        return record

    def _last_record(self) -> Optional[StepRecord]:
        """The model's last step record, reading only as much history as needed."""
        target = self.model.target
        history = self.session.query(f"DESCRIBE HISTORY {target} LIMIT {HISTORY_PAGE}")
        if history:
            self._target_version = int(history[0]["version"])
        previous = last_record(history)
        if previous is None and len(history) >= HISTORY_PAGE:  # many commits by others since
            previous = last_record(self.session.query(f"DESCRIBE HISTORY {target}"))
        return previous

    def _create_event_time_tables(self, output_columns: Sequence[Column],
                                  rules: "EventTimeRules", replace: bool) -> None:
        tables = []
        if rules.lateness:
            tables += [
                (self.model.late_table, list(output_columns) + list(late.QUARANTINE_COLUMNS)),
                (self.model.waterline_table, list(late.WATERLINE_COLUMNS)),
            ]
        if rules.watermark:
            tables.append((self.model.pending_table,
                           list(output_columns) + list(wm.PENDING_COLUMNS)))
        for table, columns in tables:
            statement = sql.create_table(table, columns)
            if not replace:
                statement = statement.replace("CREATE OR REPLACE TABLE", "CREATE TABLE IF NOT EXISTS", 1)
            self.session.run(statement)

    def _describer(self, inputs: Sequence[InputState]) -> Callable[[str], List[Column]]:
        """DESCRIBE QUERY of a SELECT over the inputs' `new` placeholders (for the planner)."""
        views = {new_input(i): f"(SELECT * FROM {item.relation})" for i, item in enumerate(inputs)}
        return lambda select: self._describe_query(sql.bind_placeholders(select, views))

    @staticmethod
    def _describe_views(inputs: Sequence[InputState],
                        stages: Sequence[StagePlan]) -> Dict[str, str]:
        """Relations with the columns of every placeholder, to DESCRIBE a plan's SQL with."""
        views: Dict[str, str] = {}
        for i, item in enumerate(inputs):
            views[new_input(i)] = views[old_input(i)] = f"(SELECT * FROM {item.relation})"
            views[delta_input(i)] = (f"(SELECT *, CAST(1 AS BIGINT) AS {WEIGHT} "
                                     f"FROM {item.relation})")
        for stage in stages:
            views[new_input(stage.position)] = views[old_input(stage.position)] = (
                f"({sql.typed_nothing(stage.columns)})")
            views[delta_input(stage.position)] = (
                f"({sql.typed_nothing(list(stage.columns) + [Column(WEIGHT, 'bigint')])})")
        return views

    def _create_state_table(self, table: str, aggregate: AggregatePlan,
                            describe_views: Mapping[str, str]) -> int:
        """An empty state table for `aggregate`; returns its version."""
        declared = list(aggregate.state_columns)
        if not all(c.data_type for c in declared):  # types the planner could not infer
            unbounded = {bound.name: "true" for bound in aggregate.bounds}
            described = {c.name: c.data_type for c in self._describe_query(
                sql.bind_placeholders(aggregate.delta_sql, {**describe_views, **unbounded}))}
            declared = [Column(c.name, c.data_type or described[c.name]) for c in declared]
        # Internal: nobody reads its change feed, so its MERGEs need not write one.
        self.session.run(sql.create_table(table, declared, {"delta.enableChangeDataFeed": "false"}))
        return self._latest_version(table)

    def _state_tables(self, plan: StepPlan, record: StepRecord) -> List[Tuple[str, Optional[int]]]:
        """(state table, its version in `record`) for the plan's stages and top aggregate."""
        tables = [(self.model.stage_table(stage.name), record.stage_versions.get(stage.name))
                  for stage in plan.stages]
        if plan.aggregate is not None:
            tables.append((self.model.state_table, record.state_version))
        return tables

    def _require_bookkeeping(self, plan: StepPlan, previous: StepRecord) -> None:
        """A table built when the model was planned another way lacks this plan's state tables."""
        if any(version is None for _, version in self._state_tables(plan, previous)):
            raise StepError(
                f"Model {self.model.name} is now maintained by a {plan.strategy} plan "
                f"({plan.reason}) that keeps per-group state its table was not built with (it "
                f"was last stepped by another plan, e.g. under an earlier dbt-streamsql). Run "
                f"`dbt run --full-refresh --select {self.model.name}` once to rebuild it."
            )

    def _recover(self, plan: StepPlan, previous: StepRecord) -> StepRecord:
        """Undo what a failed attempt of the next step left in side tables."""
        for table, version in self._state_tables(plan, previous):
            current = self._latest_version(table)
            if current != version:
                self.log(f"{self.model.name}: undoing an interrupted step in {table} "
                         f"(version {current} -> {version})")
                self.session.run(sql.restore(table, version))
        return previous

    def _target_exists(self) -> bool:
        """Asked of the catalog: a failing DESCRIBE would log a stack trace on the console."""
        rows = self.session.query(
            f"SHOW TABLES IN {sql.quote(self.model.schema)} LIKE '{self.model.identifier}'")
        return any(str(row.get("tableName", "")).lower() == self.model.identifier.lower()
                   for row in rows)

    def _interrupted(self, table: str, previous: StepRecord) -> bool:
        """Whether an attempt after the last completed step wrote to a side table.

        Side-table commits carry the step record of the attempt that made them, so the table's
        last commit tells; one that carries none (the table's creation aside) is treated as such
        an attempt, and undoing it is harmless when it is not.
        """
        commit = self.session.query(f"DESCRIBE HISTORY {table} LIMIT 1")[0]
        written_by = StepRecord.from_json(commit.get("userMetadata"))
        if written_by is not None:
            return written_by.step > previous.step
        return str(commit.get("operation", "")).upper() not in CREATING_OPERATIONS

    def _latest_version(self, relation: str) -> int:
        return int(self.session.query(f"DESCRIBE HISTORY {relation} LIMIT 1")[0]["version"])

    # -- aggregates -------------------------------------------------------------------------------

    def _aggregate_change(self, plan: StepPlan, views: Dict[str, str], rules: "EventTimeRules",
                          previous: StepRecord, record: StepRecord,
                          writes: List[Callable[[], None]]) -> str:
        """The top aggregate's change to the model (its state is written by `writes`)."""
        aggregate = plan.aggregate
        assert aggregate is not None and previous.state_version is not None
        state = sql.input_as_of(self.model.state_table, previous.state_version)
        groups = self._changed_groups("", aggregate, views, state, lambda group_delta: (
            self._state_bounds(aggregate, group_delta, rules, previous)))
        # The table starts empty, even where the query's old output is not (a global aggregate
        # has one row over no input): on the first step there is nothing to delete.
        net = self._output_net("", aggregate, groups, plan.output_columns,
                               nothing_before=previous.step == 0)

        def remember(version: int) -> None:
            record.state_version = version

        writes.append(self._state_write(self.model.state_table, aggregate, groups, remember,
                                        fresh=previous.step == 0))
        return net

    def _stage_change(self, stage: StagePlan, views: Dict[str, str], previous: StepRecord,
                      record: StepRecord, writes: List[Callable[[], None]]) -> int:
        """Bind a stage's placeholders (its result before and after the step, and the change).

        Returns how many rows of the change are removals.
        """
        aggregate, label, position = stage.aggregate, f"{stage.name}_", stage.position
        table = self.model.stage_table(stage.name)
        state = sql.input_as_of(table, previous.stage_versions[stage.name])
        groups = self._changed_groups(label, aggregate, views, state)
        net = self._output_net(label, aggregate, groups, stage.columns)
        # The stage's whole result, before and after the step: what reads it may need any group.
        whole_state = self._view(f"{label}whole_state", state)
        state_after = self._view(f"{label}state_after", sql.state_after(
            whole_state, groups.new, self._group_columns(aggregate)))
        columns = sql.column_list(stage.columns)
        for version, placeholder, state_view in (("old", old_input(position), whole_state),
                                                 ("new", new_input(position), state_after)):
            output = sql.bind_placeholders(aggregate.output_sql, {GROUPS: state_view})
            views[placeholder] = self._view(f"{label}{version}", f"SELECT {columns} FROM ({output})")
        views[delta_input(position)] = net

        def remember(version: int) -> None:
            record.stage_versions[stage.name] = version

        writes.append(self._state_write(table, aggregate, groups, remember,
                                        fresh=previous.step == 0))
        return int(self.session.query(sql.count_changes(net))[0]["removals"])

    def _bind_bounds(self, bounds: Sequence[KeyBound], used_by: str, views: Dict[str, str]) -> None:
        """Put the predicate of each key bound `used_by` holds into `views`, with the change's
        MIN/MAX as literals."""
        bounds = [bound for bound in bounds if bound.name in used_by]
        if not bounds:
            return
        if self._first_step:
            views.update({bound.name: "true" for bound in bounds})
            return
        views.update(zip((bound.name for bound in bounds), self._bound_predicates(bounds, views)))

    def _bound_predicates(self, bounds: Sequence[KeyBound], views: Mapping[str, str]) -> List[str]:
        """Each bound's predicate with its value computed now, as a literal (one query)."""
        values = sql.bind_placeholders(sql.bound_values(bounds), views)
        types = [row["data_type"] for row in self._describe_rows(f"DESCRIBE QUERY {values}")]
        texts = self.session.query(sql.bound_texts(values, types))[0]
        return [sql.bound_predicate(bound, texts[f"v{i}"], types[i])
                for i, bound in enumerate(bounds)]

    def _key_ranges(self, columns: Sequence[Column], change: str, alias: str) -> List[str]:
        """Predicates over rows aliased `alias` holding every key a change holds (NULLs too).

        For each key column with an orderable part (`statements.orderable_part`): its range over
        `change`, as literals, so that Delta skips the files of keys the change does not touch.
        """
        parts = [(sql.orderable_part(c, alias), sql.orderable_part(c)) for c in columns]
        parts = [(outer, inner) for outer, inner in parts if outer is not None]
        if self._first_step or not parts:
            return []
        bounds = []
        for outer, inner in parts:
            bounds += [KeyBound("", outer, ">=", f"(SELECT MIN({inner}) FROM {change})"),
                       KeyBound("", outer, "<=", f"(SELECT MAX({inner}) FROM {change})")]
        predicates = self._bound_predicates(bounds, {})
        return [sql.key_range(outer, predicates[2 * i], predicates[2 * i + 1])
                for i, (outer, _) in enumerate(parts)]

    @staticmethod
    def _group_columns(aggregate: AggregatePlan) -> List[Column]:
        return [c for c in aggregate.state_columns if c.name in aggregate.group_columns]

    def _changed_groups(self, label: str, aggregate: AggregatePlan, views: Mapping[str, str],
                        state: str, bounds_of: Callable[[str], List[str]] = lambda _: []
                        ) -> ChangedGroups:
        """Group delta, state before the step, and the old and new state of changed groups.

        `state` is the SELECT of the whole state before the step; only the part the changed
        groups' key ranges reach is read (and, by the state's MERGE, written), narrowed further
        by `bounds_of(group delta view)`.
        """
        delta_sql = aggregate.delta_sql
        # The form without older versions has negative terms even for inserts, which a MIN/MAX
        # takes for deletions of its extreme (and recomputes the group from the inputs): with
        # MIN/MAX, only where something was removed anyway.
        if not self._first_step and aggregate.later_delta_sql is not None and not (
                aggregate.recompute_check_sql and self._inserts_only):
            delta_sql = aggregate.later_delta_sql
        self._bind_bounds(aggregate.bounds, delta_sql, views)
        group_delta = self._cache(f"{label}group_delta", sql.bind_placeholders(delta_sql, views))
        bounds = bounds_of(group_delta) + self._key_ranges(
            self._group_columns(aggregate), group_delta, GROUP_ALIAS)
        if bounds:
            state = f"SELECT * FROM ({state}) AS {GROUP_ALIAS} WHERE {' AND '.join(bounds)}"
        state = self._view(f"{label}state", state)
        local = {**views, GROUP_DELTA: group_delta, STATE: state}
        combine = aggregate.combine_sql
        if aggregate.recompute_check_sql and aggregate.combine_without_recompute_sql:
            check = sql.bind_placeholders(aggregate.recompute_check_sql, local)
            if int(self.session.query(check)[0]["n"]) == 0:
                # No deleted value can have been a MIN/MAX: skip re-reading the inputs' history.
                combine = aggregate.combine_without_recompute_sql
        new = self._cache(f"{label}groups_new", sql.bind_placeholders(combine, local))
        # Read once, by the output change: a plain view, planned together with it.
        old = self._view(f"{label}groups_old", sql.previous_groups(
            state, group_delta, self._group_columns(aggregate)))
        return ChangedGroups(state, new, old, bounds)

    def _output_net(self, label: str, aggregate: AggregatePlan, groups: ChangedGroups,
                    columns: Sequence[Column], nothing_before: bool = False) -> str:
        """The consolidated change of the aggregate's output rows (cached view)."""
        output_new = sql.bind_placeholders(aggregate.output_sql, {GROUPS: groups.new})
        output_old = sql.bind_placeholders(aggregate.output_sql, {GROUPS: groups.old})
        if nothing_before:
            output_old = f"SELECT * FROM ({output_old}) WHERE false"
        change = self._view(f"{label}change", sql.output_change(output_new, output_old, columns))
        return self._cache(f"{label}net", sql.consolidate(change, columns))

    def _state_write(self, table: str, aggregate: AggregatePlan, groups: ChangedGroups,
                     remember: Callable[[int], None], fresh: bool) -> Callable[[], None]:
        """The write of a state table's changed groups; `remember` gets its new version.

        A `fresh` (empty) table gets its groups sorted by key, time first, into files of at most
        BULK_FILE_ROWS rows: later steps' key ranges then skip all but a few.
        """
        group_columns = self._group_columns(aggregate)

        def write_state() -> None:
            self._checkpoint("before_state")
            if fresh:
                self._with_settings([(MAX_RECORDS_PER_FILE, str(BULK_FILE_ROWS))],
                                    lambda: self.session.run(sql.insert_state(
                                        table, groups.new, aggregate.state_columns,
                                        sql.time_first(group_columns))))
            else:
                self.session.run(sql.merge_state(table, groups.new, group_columns,
                                                 aggregate.state_columns, groups.bounds))
            remember(self._latest_version(table))
            self._checkpoint("after_state")

        return write_state

    def _state_bounds(self, aggregate: Any, group_delta: str, rules: "EventTimeRules",
                      previous: StepRecord) -> List[str]:
        """Predicates that leave out the state of final groups this step does not touch.

        A group whose LATENESS column (a window start, a truncated hour) is below the previous
        waterline is final: any change to it is late. The step reads and merges the state of the
        other groups, plus that of the few final groups its late changes touch (needed to
        describe the quarantined change), named by value so that Delta can still skip files.
        """
        bounds = []
        for rule, expression, waterline in late.final_group_columns(
                rules.lateness, previous.waterline, aggregate.group_outputs):
            touched = self.session.query(
                f"SELECT DISTINCT CAST({expression} AS STRING) AS v FROM {group_delta} AS "
                f"{GROUP_ALIAS} WHERE NOT {late.open_groups(rule, expression, waterline)} "
                f"LIMIT {MAX_FINAL_GROUP_VALUES + 1}")
            if len(touched) > MAX_FINAL_GROUP_VALUES:
                return []  # late changes all over history: read the whole state
            bounds.append(late.open_groups(rule, expression, waterline,
                                           [row["v"] for row in touched]))
        return bounds

    @staticmethod
    def _merge_key(plan: StepPlan, rules: "EventTimeRules") -> Optional[Sequence[str]]:
        """The model's key when a change may be applied by key: an aggregate naming its groups.

        Only when every LATENESS and WATERMARK column is part of the key: otherwise a group's old
        row may be late (not deleted) while its new row is on time (inserted), and the model
        then rightly holds both.
        """
        if plan.aggregate is None or plan.aggregate.key_columns is None:
            return None
        key = {name.lower() for name in plan.aggregate.key_columns}
        timed = [rule.column.name for rule in list(rules.lateness) + list(rules.watermark)]
        if any(name.lower() not in key for name in timed):
            return None
        return plan.aggregate.key_columns

    # -- lateness ---------------------------------------------------------------------------------

    def _event_time_rules(self, output_columns: Sequence[Column]) -> "EventTimeRules":
        """The model's LATENESS and WATERMARK, checked before the step writes anything."""
        try:
            rules = late.lateness_rules(self.model.name, output_columns, self.model.lateness,
                                        self.model.max_future)
            held = wm.watermark_rules(self.model.name, output_columns, self.model.watermark)
        except late.LatenessConfigError as exc:
            raise StepError(str(exc)) from exc
        for hold_rule in held:
            try:
                self.session.query(wm.addition_check(hold_rule))
            except Exception as exc:
                raise StepError(
                    f"Model {self.model.name}: config watermark[{hold_rule.column.name}] = "
                    f"{hold_rule.delay!r} cannot be added to column {hold_rule.column.name} of "
                    f"type {hold_rule.column.data_type}. Use an INTERVAL for timestamps and "
                    f"dates and a number for numeric columns. Spark said: "
                    f"{str(exc).splitlines()[0][:300]}"
                ) from exc
        for rule in rules:
            try:
                described = self.session.query(late.subtraction_check(rule))
                problem = late.subtraction_error(rule, described[0]["data_type"])
            except Exception as exc:
                problem = str(exc).splitlines()[0][:300]
            if problem:
                raise StepError(
                    f"Model {self.model.name}: config lateness[{rule.column.name}] = "
                    f"{rule.lateness!r} cannot be subtracted from column {rule.column.name} of "
                    f"type {rule.column.data_type}: {problem}. Use an INTERVAL for timestamps "
                    f"and dates (e.g. \"INTERVAL 1 HOUR\") and a number for numeric columns."
                )
        return EventTimeRules(rules, held)

    def _apply_watermark(self, net: str, columns: Sequence[Column],
                         rules: Sequence[wm.WatermarkRule], previous: StepRecord,
                         record: StepRecord, result: StepResult, release_all: bool,
                         writes: List[Callable[[], None]]) -> str:
        """Hold back changes the watermark does not allow yet; release those it now allows."""
        pending, step = self.model.pending_table, record.step
        if self._interrupted(pending, previous):
            for statement in wm.forget_attempt(pending, step):
                self.session.run(statement)
        held_before = self._view("pending", sql.input_as_of(pending,
                                                             self._latest_version(pending)))
        row = self.session.query(wm.seen_query(net, rules, previous.watermark_seen))[0]
        for i, rule in enumerate(rules):
            record.watermark_seen[rule.column.name] = row[f"s_{i}"]
        condition = wm.release_condition(rules, record.watermark_seen, release_all)
        candidates = self._cache("candidates", wm.candidates(net, held_before, columns, step))
        released = self._cache("released", sql.consolidate(
            f"({wm.released(candidates, columns, condition)})", columns))

        def write_held() -> None:
            self._checkpoint("before_hold")
            self.session.run(wm.mark_released(pending, condition, step))
            self.session.run(wm.hold(pending, candidates, columns, condition, step))
            result.held = int(self.session.query(wm.held_count(pending))[0]["n"])

        writes.append(write_held)
        return released

    def _apply_lateness(self, net: str, columns: Sequence[Column],
                        rules: Sequence[late.LatenessRule], previous: StepRecord,
                        record: StepRecord, result: StepResult,
                        writes: List[Callable[[], None]]) -> str:
        """Quarantine late changes, log the waterline, and return the changes to apply."""
        classified = self._cache("classified", late.classify(net, columns, rules,
                                                             previous.waterline))
        result.late = int(self.session.query(late.late_count(classified))[0]["n"])
        row = self.session.query(late.waterline_query(classified, rules, previous.waterline,
                                                      previous.max_seen))[0]
        for i, rule in enumerate(rules):
            record.waterline[rule.column.name] = row[f"w_{i}"]
            record.max_seen[rule.column.name] = row[f"m_{i}"]
        step = record.step

        def write_quarantine() -> None:
            self._checkpoint("before_quarantine")
            for table, step_column in ((self.model.late_table, "_streamsql_step"),
                                       (self.model.waterline_table, "step")):
                if self._interrupted(table, previous):
                    self.session.run(late.forget_attempt(table, step_column, step))
            if result.late:
                self.session.run(late.quarantine_insert(self.model.late_table, classified,
                                                        columns, step, previous.waterline))
            self.session.run(late.waterline_insert(self.model.waterline_table, step, rules,
                                                   record.waterline, record.max_seen))

        writes.append(write_quarantine)
        # A plain view over the cached `classified`: counted and applied, never recomputed far.
        return self._view("on_time", late.on_time(classified, columns))

    # -- commit -----------------------------------------------------------------------------------

    def _commit(self, net: str, columns: Sequence[Column], result: StepResult,
                record: StepRecord, target_bounds: Sequence[str] = (),
                key: Optional[Sequence[str]] = None, first: bool = False) -> None:
        target = self.model.target
        key_columns = [c for c in columns if key is not None
                       and c.name.lower() in {name.lower() for name in key}]
        settings: List[Tuple[str, str]] = []
        if result.deleted and key is not None:
            bounds = list(target_bounds) + self._key_ranges(key_columns, net, "t")
            statement = sql.merge_by_key(target, net, columns, key, bounds)
        elif result.deleted:
            statement = sql.merge_change(target, net, columns, target_bounds)
        elif result.inserted and first and key_columns:
            # An aggregate's first rows, sorted by key like its state: later MERGEs by key skip
            # the files of keys they do not touch.
            statement = sql.insert_copies(target, net, columns, sql.time_first(key_columns))
            settings.append((MAX_RECORDS_PER_FILE, str(BULK_FILE_ROWS)))
        elif result.inserted:
            statement = sql.insert_copies(target, net, columns)
        else:
            statement = sql.mark_step(target, record.step)
        self._with_record(record, lambda: self._with_settings(
            settings, lambda: self.session.run(statement)), idempotent=True)
        committed = last_record(self.session.query(f"DESCRIBE HISTORY {target} LIMIT 20"))
        if committed is None or (committed.step, committed.run_id) != (record.step, self.run_id):
            raise StepError(
                f"Model {self.model.name}: another run completed step {record.step} at the same "
                "time; this run applied nothing. The model is consistent; run again to continue."
            )

    def _with_record(self, record: StepRecord, write: Callable[[], None], idempotent: bool) -> None:
        """Run writing statements whose Delta commits carry the step record."""
        settings = [(USER_METADATA, record.to_json())]
        if idempotent:
            settings += [(TXN_APP_ID, f"streamsql:{self.model.target_name}:{record.incarnation}"),
                         (TXN_VERSION, str(record.step))]
        self._with_settings(settings, write)

    def _with_settings(self, settings: Sequence[Tuple[str, str]], run: Callable[[], Any]) -> None:
        """Run with session settings that are reset afterwards, whatever happens."""
        for key, value in settings:
            self.session.run(sql.set_conf(key, value))
        try:
            run()
        finally:
            for key, _ in settings:
                self.session.run(sql.reset_conf(key))

    # -- views and faults -------------------------------------------------------------------------

    def _view(self, label: str, select: str) -> str:
        """A plain view: read once, planned with what reads it."""
        name = f"{self.view_prefix}_{label}"
        self.session.run(sql.temp_view(name, select))
        return name

    def _cache(self, label: str, select: str) -> str:
        """A view computed once, now: read several times, or across the step's writes."""
        name = f"{self.view_prefix}_{label}"
        self.session.materialize(name, select)
        self._cached.append(name)
        return name

    def _drop_views(self) -> None:
        """Free the data of the step's materialized views (plain views are replaced next step)."""
        for name in reversed(self._cached):
            try:
                self.session.release(name)
            except Exception:  # cleanup must not hide the step's own error
                pass

    def _checkpoint(self, point: str) -> None:
        """Test-only fault injection: fail here if STREAMSQL_TEST_FAIL_AT names this point."""
        wanted = os.environ.get(FAULT_INJECTION_ENV)
        if wanted and wanted == point:
            raise InjectedFault(f"injected fault at {point} (step of {self.model.name})")
