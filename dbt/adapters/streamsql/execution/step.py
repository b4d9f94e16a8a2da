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

import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple

from dbt.adapters.streamsql.execution import lateness as late
from dbt.adapters.streamsql.execution import statements as sql
from dbt.adapters.streamsql.execution import watermark as wm
from dbt.adapters.streamsql.execution.progress import StepRecord, last_record, sql_fingerprint
from dbt.adapters.streamsql.planning.errors import PlanningError
from dbt.adapters.streamsql.planning.plan import (
    GROUP_ALIAS,
    GROUP_DELTA,
    GROUPS,
    STATE,
    TARGET,
    WEIGHT,
    Column,
    InputTable,
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
TXN_VERSION = "spark.databricks.delta.write.txnVersion"


class StepError(Exception):
    """A step cannot run; the message names the model and says what to do."""


class InjectedFault(Exception):
    """Raised at a named point of a step when the test-only fault switch asks for it."""


class SqlSession(Protocol):
    def query(self, statement: str) -> List[Dict[str, Any]]: ...

    def run(self, statement: str) -> None: ...


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
        planner: Callable[[str, Sequence[InputTable], Sequence[Column]], StepPlan],
        log: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.session = session
        self.model = model
        self.planner = planner
        self.log = log
        self.run_id = uuid.uuid4().hex
        token = "".join(ch if ch.isalnum() else "_" for ch in model.target_name)
        self.view_prefix = f"_streamsql_{token}_{self.run_id[:8]}"
        self._views: List[str] = []
        self._cached: List[str] = []
        self._target_version: Optional[int] = None  # the model table's version when the step began

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
        plan = self.planner(compiled_sql, [i.table for i in inputs], output_columns)
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
        # A monotonic linear query over inserts only changes by inserts: its change needs no
        # netting, and on the first step the inputs' snapshots need not be copied into memory.
        insert_path = plan.strategy == "linear" and plan.monotonic
        first_step = all(previous.input_versions.get(i.table.name) is None for i in inputs)
        views, removals = self._bind_inputs(inputs, previous, result,
                                            cache_snapshots=not insert_path)
        record = previous.next(self.run_id, versions)

        # Everything a step reads is pinned to a version: Spark re-computes cached views when a
        # table under them changes, and this step itself changes the state and target tables.
        writes: List[Callable[[], None]] = []
        if plan.strategy == "aggregate":
            net = self._aggregate_change(plan, views, rules, previous, record, writes)
        else:
            target_version = self._target_version
            if target_version is None:
                target_version = self._latest_version(self.model.target)
            views[TARGET] = self._view("target", sql.input_as_of(self.model.target,
                                                                 target_version))
            # Used once, by `net`: a plain view, so Spark plans both as one query.
            change = self._view("change", sql.bind_placeholders(plan.change_sql or "", views))
            if insert_path and removals == 0 and first_step:
                # Every row has weight +1. Evaluated twice (counted, then inserted), which costs
                # less than copying a whole snapshot's result into memory.
                net = change
            elif insert_path and removals == 0:
                net = self._cache("net", f"SELECT * FROM {change}")
            else:
                net = self._cache("net", sql.consolidate(change, plan.output_columns))
        return self._finish(net, plan.output_columns, rules, previous, record, result, writes)

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
                writes: List[Callable[[], None]], release_all: bool = False) -> StepResult:
        """WATERMARK, then LATENESS, then the model's commit: the end of every step.

        Everything is computed (into cached views) before anything is written, so a step refused
        here (append_only) leaves no trace; `writes` then run in order: the aggregate state, held
        rows, the quarantine and waterline, and last the model's own commit.
        """
        if rules.watermark:
            net = self._apply_watermark(net, columns, rules.watermark, previous, record, result,
                                        release_all, writes)
        if rules.lateness:
            net = self._apply_lateness(net, columns, rules.lateness, previous, record, result,
                                       writes)
        counts = self.session.query(sql.change_counts(net))[0]
        result.inserted, result.deleted = int(counts["inserts"]), int(counts["deletes"])
        if self.model.append_only and result.deleted:
            raise StepError(
                f"Model {self.model.name} is configured append_only, but step {record.step} "
                f"would delete or update {result.deleted} row(s) of it. Nothing was changed. "
                "Remove `append_only` from the model's config if its result can shrink, or find "
                "the input update/delete that caused this."
            )
        for write in writes:
            write()
        self._checkpoint("before_commit")
        bounds = late.target_bounds(rules.lateness, previous.waterline)
        self._commit(net, columns, result, record, bounds)
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
            # LATENESS or WATERMARK may have been added to the config since the last step.
            self._create_event_time_tables(output_columns, rules, replace=False)
            return self._recover(plan, previous)
        # Step 0: empty tables; the first step then reads every input in full.
        self._create_event_time_tables(output_columns, rules, replace=True)
        record = StepRecord(step=0, run_id=self.run_id, sql_fingerprint=fingerprint,
                            incarnation=self.run_id)
        if plan.aggregate is not None:
            # Internal: nobody reads its change feed, so its MERGEs need not write one.
            self.session.run(sql.create_table(self.model.state_table,
                                              self._state_columns(plan, inputs),
                                              {"delta.enableChangeDataFeed": "false"}))
            record.state_version = self._latest_version(self.model.state_table)
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

    def _state_columns(self, plan: StepPlan, inputs: Sequence[InputState]) -> List[Column]:
        """The state table's columns; types the planner could not infer come from Spark."""
        assert plan.aggregate is not None
        declared = list(plan.aggregate.state_columns)
        if all(c.data_type for c in declared):
            return declared
        views: Dict[str, str] = {}
        for i, item in enumerate(inputs):
            views[new_input(i)] = views[old_input(i)] = f"(SELECT * FROM {item.relation})"
            views[delta_input(i)] = (f"(SELECT *, CAST(1 AS BIGINT) AS {WEIGHT} "
                                     f"FROM {item.relation})")
        described = {c.name: c.data_type for c in self._describe_query(
            sql.bind_placeholders(plan.aggregate.delta_sql, views))}
        return [Column(c.name, c.data_type or described[c.name]) for c in declared]

    def _recover(self, plan: StepPlan, previous: StepRecord) -> StepRecord:
        """Undo what a failed attempt of the next step left in side tables."""
        if plan.aggregate is not None and previous.state_version is not None:
            current = self._latest_version(self.model.state_table)
            if current != previous.state_version:
                self.log(f"{self.model.name}: undoing an interrupted step in its state table "
                         f"(version {current} -> {previous.state_version})")
                self.session.run(sql.restore(self.model.state_table, previous.state_version))
        return previous

    def _target_exists(self) -> bool:
        """Asked of the catalog: a failing DESCRIBE would log a stack trace on the console."""
        rows = self.session.query(
            f"SHOW TABLES IN {sql.quote(self.model.schema)} LIKE '{self.model.identifier}'")
        return any(str(row.get("tableName", "")).lower() == self.model.identifier.lower()
                   for row in rows)

    def _latest_version(self, relation: str) -> int:
        return int(self.session.query(f"DESCRIBE HISTORY {relation} LIMIT 1")[0]["version"])

    # -- aggregates -------------------------------------------------------------------------------

    def _aggregate_change(self, plan: StepPlan, views: Dict[str, str], rules: "EventTimeRules",
                          previous: StepRecord, record: StepRecord,
                          writes: List[Callable[[], None]]) -> str:
        aggregate = plan.aggregate
        assert aggregate is not None
        group_columns = [c for c in aggregate.state_columns if c.name in aggregate.group_columns]
        assert previous.state_version is not None
        views[GROUP_DELTA] = self._cache("group_delta",
                                         sql.bind_placeholders(aggregate.delta_sql, views))
        state = sql.input_as_of(self.model.state_table, previous.state_version)
        bounds = self._state_bounds(aggregate, views[GROUP_DELTA], rules, previous)
        if bounds:
            state = (f"SELECT * FROM ({state}) AS {GROUP_ALIAS} "
                     f"WHERE {' AND '.join(bounds)}")
        views[STATE] = self._view("state", state)
        combine = aggregate.combine_sql
        if aggregate.recompute_check_sql and aggregate.combine_without_recompute_sql:
            check = sql.bind_placeholders(aggregate.recompute_check_sql, views)
            if int(self.session.query(check)[0]["n"]) == 0:
                # No deleted value can have been a MIN/MAX: skip re-reading the inputs' history.
                combine = aggregate.combine_without_recompute_sql
        new_groups = self._cache("groups_new", sql.bind_placeholders(combine, views))
        # Read once each, by `net`: plain views, planned together with it.
        old_groups = self._view("groups_old", sql.previous_groups(
            views[STATE], views[GROUP_DELTA], group_columns))
        output_new = sql.bind_placeholders(aggregate.output_sql, {**views, GROUPS: new_groups})
        output_old = sql.bind_placeholders(aggregate.output_sql, {**views, GROUPS: old_groups})
        if previous.step == 0:
            # The table starts empty, even where the query's old output is not (a global
            # aggregate has one row over no input): there is nothing to delete.
            output_old = f"SELECT * FROM ({output_old}) WHERE false"
        change = self._view("change", sql.output_change(output_new, output_old,
                                                        plan.output_columns))
        net = self._cache("net", sql.consolidate(change, plan.output_columns))

        def write_state() -> None:
            self._checkpoint("before_state")
            self._with_record(record, lambda: self.session.run(sql.merge_state(
                self.model.state_table, new_groups, group_columns, aggregate.state_columns,
                bounds)), idempotent=False)
            record.state_version = self._latest_version(self.model.state_table)
            self._checkpoint("after_state")

        writes.append(write_state)
        return net

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
            self.session.run(late.forget_attempt(self.model.late_table, "_streamsql_step", step))
            self.session.run(late.forget_attempt(self.model.waterline_table, "step", step))
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
                record: StepRecord, target_bounds: Sequence[str] = ()) -> None:
        target = self.model.target
        if result.deleted:
            statement = sql.merge_change(target, net, columns, target_bounds)
        elif result.inserted:
            statement = sql.insert_copies(target, net, columns)
        else:
            statement = sql.mark_step(target, record.step)
        self._with_record(record, lambda: self.session.run(statement), idempotent=True)
        committed = last_record(self.session.query(f"DESCRIBE HISTORY {target} LIMIT 20"))
        if committed is None or (committed.step, committed.run_id) != (record.step, self.run_id):
            raise StepError(
                f"Model {self.model.name}: another run completed step {record.step} at the same "
                "time; this run applied nothing. The model is consistent; run again to continue."
            )

    def _with_record(self, record: StepRecord, write: Callable[[], None], idempotent: bool) -> None:
        """Run one writing statement whose Delta commit carries the step record."""
        settings = [(USER_METADATA, record.to_json())]
        if idempotent:
            settings += [(TXN_APP_ID, f"streamsql:{self.model.target_name}:{record.incarnation}"),
                         (TXN_VERSION, str(record.step))]
        for key, value in settings:
            self.session.run(sql.set_conf(key, value))
        try:
            write()
        finally:
            for key, _ in settings:
                self.session.run(sql.reset_conf(key))

    # -- views and faults -------------------------------------------------------------------------

    def _view(self, label: str, select: str) -> str:
        name = f"{self.view_prefix}_{label}"
        self.session.run(sql.temp_view(name, select))
        self._views.append(name)
        return name

    def _cache(self, label: str, select: str) -> str:
        name = f"{self.view_prefix}_{label}"
        self.session.run(sql.cached_view(name, select))
        self._cached.append(name)
        return name

    def _drop_views(self) -> None:
        # Dropping a cached temporary view also frees its cached data.
        for name in reversed(self._cached):
            try:
                self.session.run(f"DROP VIEW IF EXISTS {name}")
            except Exception:  # cleanup must not hide the step's own error
                pass
        for name in reversed(self._views):
            try:
                self.session.run(f"DROP VIEW IF EXISTS {name}")
            except Exception:
                pass

    def _checkpoint(self, point: str) -> None:
        """Test-only fault injection: fail here if STREAMSQL_TEST_FAIL_AT names this point."""
        wanted = os.environ.get(FAULT_INJECTION_ENV)
        if wanted and wanted == point:
            raise InjectedFault(f"injected fault at {point} (step of {self.model.name})")
