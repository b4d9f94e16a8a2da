"""The adapter: dbt-spark's, plus Delta defaults and incremental views."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, make_dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional

from dbt.adapters.base import BaseRelation, available
from dbt.adapters.capability import Capability, CapabilityDict, CapabilitySupport, Support
from dbt.adapters.contracts.connection import AdapterResponse
from dbt.adapters.events.logging import AdapterLogger
from dbt.adapters.spark.column import SparkColumn
from dbt.adapters.spark.impl import SparkAdapter, SparkConfig
from dbt_common.exceptions import DbtRuntimeError
from dbt_common.utils import AttrDict
from typing_extensions import TypeAlias

from dbt.adapters.streamsql.connections import StreamSQLConnectionManager
from dbt.adapters.streamsql.execution.commit import history
from dbt.adapters.streamsql.execution.engine import side_tables
from dbt.adapters.streamsql.execution.engine.delta_log import NotDeltaTable, TableMissing
from dbt.adapters.streamsql.execution.engine.side_tables import SideTableSql
from dbt.adapters.streamsql.execution.engine.sql_session import AdapterSqlSession
from dbt.adapters.streamsql.execution.pipeline.step import (
    ModelSettings,
    StepError,
    StepResult,
    flush_step,
    run_step,
)
from dbt.adapters.streamsql.execution.shared import configs
from dbt.adapters.streamsql.planning.binding import pinned_text
from dbt.adapters.streamsql.planning.errors import PlanningError, RecomputeRequired
from dbt.adapters.streamsql.planning.types import comparable
from dbt.adapters.streamsql.progress import StepProgress

logger = AdapterLogger("StreamSQL")

DEFAULT_FILE_FORMAT = "delta"

# Spark's schema tree (`SHOW TABLE EXTENDED`) names some types differently from SQL and DESCRIBE.
TREE_TYPE_TO_SQL = {"long": "bigint", "integer": "int", "short": "smallint", "byte": "tinyint"}
NESTED_TREE_TYPES = {"array", "map", "struct"}


# The configs dbt learns of from the adapter: dbt-spark's, with Delta as the file format, plus a
# field for each setting declared in execution/shared/model.py that dbt-spark does not have.
StreamSQLConfig = make_dataclass(
    "StreamSQLConfig",
    [
        ("file_format", str, field(default=DEFAULT_FILE_FORMAT)),
        *configs.dbt_config_fields(SparkConfig),
    ],
    bases=(SparkConfig,),
    namespace={"__module__": __name__, "__doc__": "dbt-spark's configs and incremental_view's."},
)


@dataclass
class StepResponse(AdapterResponse):
    """What one incremental_view step did; lands in run_results.json's adapter_response."""

    # `_message`, what dbt's result line shows, is the short status (StepResult.status); the
    # step line, also logged, is `step_line`
    step_line: str = ""
    step: int = 0
    plan: str = ""
    reason: str = ""
    computed: str = ""  # how this step computed its change (StepResult.computed)
    changes_read: int = 0
    applied: int = 0
    inserted: int = 0
    deleted: int = 0
    late: int = 0
    held: int = 0
    waterline: Optional[Dict[str, Optional[str]]] = None
    seconds: float = 0.0
    notes: Optional[List[str]] = None  # a recovery, a retention warning, an ignored column
    # "rewrite": a small model written whole; "whole": a recompute's rows written as the
    # table (StepResult.write); "" the usual way
    write: str = ""


def model_settings(
    relation: BaseRelation, config: Dict[str, Any], full_refresh: bool
) -> ModelSettings:
    """What a step needs to know of a model: its table and the configs it obeys, read as
    configs.py declares them.

    Raises:
        StepError: a config has a value the step cannot obey.
    """
    return configs.model_settings(
        str(relation.identifier), str(relation.schema), config, full_refresh
    )


@contextmanager
def errors_as_dbt_errors() -> Iterator[None]:
    """A step's own errors (they name the model and the fix) as dbt reports runtime errors."""
    try:
        yield
    except (StepError, side_tables.SideTableError) as exc:
        raise DbtRuntimeError(str(exc)) from exc


def utc_time(epoch_seconds: Optional[float]) -> Optional[datetime]:
    """Seconds since the epoch as a UTC datetime (None stays None: dbt reads it as never)."""
    if epoch_seconds is None:
        return None
    return datetime.fromtimestamp(epoch_seconds, tz=timezone.utc)


def write_statements(
    write: Optional[Callable[[str], Any]],
    session: AdapterSqlSession,
    relation: BaseRelation,
    outcome: str,
) -> None:
    """The statements a step sent, for `target/run/` (dbt's `write`); a failure to write them is
    a warning: it must not hide what the step did or why it failed."""
    if write is None:
        return
    header = [
        f"dbt-streamsql: incremental_view {relation}: {outcome}",
        f"The {len(session.trace.entries)} statements this run sent to Spark, in order, "
        "as dbt.log logs them,",
        "each after a comment of its role. The model's SELECT is in target/compiled/.",
    ]
    try:
        write(session.trace.script(header))
    except Exception as error:  # a file not written is not the step's failure
        logger.warning(f"{relation}: could not write the step's statements to target/run/: {error}")


def step_response(result: StepResult) -> StepResponse:
    """The step's log line, logged, and its numbers as run_results.json's adapter response."""
    line = result.log_line()
    logger.info(line)
    return StepResponse(
        _message=result.status(),
        step_line=line,
        rows_affected=result.applied,
        step=result.step,
        plan=result.plan,
        reason=result.reason,
        computed=result.computed,
        changes_read=result.changes_read,
        applied=result.applied,
        inserted=result.inserted,
        deleted=result.deleted,
        late=result.late,
        held=result.held,
        waterline=result.waterline,
        seconds=round(result.seconds, 3),
        notes=list(result.notes),
        write=result.write,
    )


class StreamSQLAdapter(SparkAdapter):
    ConnectionManager: TypeAlias = StreamSQLConnectionManager  # type: ignore[assignment]
    AdapterSpecificConfigs: TypeAlias = StreamSQLConfig  # type: ignore[assignment]
    # `dbt source freshness` of a source without `loaded_at_field`: its Delta table's last
    # commit (the `get_relation_last_modified` macro, `streamsql_last_modified`)
    _capabilities = CapabilityDict(
        {Capability.TableLastModifiedMetadata: CapabilitySupport(support=Support.Full)}
    )

    def pre_model_hook(self, config: Any) -> Any:
        """Make Delta the file format of every model, seed and snapshot that names none.

        dbt-spark's macros read `config.get('file_format')` in many places and fall back to
        parquet; setting the default on the node once keeps all of them consistent.
        """
        node_config = getattr(getattr(config, "model", None), "config", None)
        if node_config is not None and node_config.get("file_format") is None:
            node_config["file_format"] = DEFAULT_FILE_FORMAT
        return super().pre_model_hook(config)

    def parse_columns_from_information(self, relation: BaseRelation) -> List[SparkColumn]:
        """Columns from the schema tree, with the type names DESCRIBE and SQL use.

        Without this the catalog says `long` for a table listed with its schema tree and `bigint`
        for one described column by column. Nested types print as a bare `array`/`struct` in the
        tree, so for those the caller's DESCRIBE fallback is used instead (returns []).
        """
        columns = super().parse_columns_from_information(relation)
        if any(column.dtype in NESTED_TREE_TYPES for column in columns):
            return []
        for column in columns:
            column.dtype = TREE_TYPE_TO_SQL.get(column.dtype, column.dtype)
        return columns

    @available
    def streamsql_step(
        self,
        relation: BaseRelation,
        compiled_sql: str,
        config: Any,
        full_refresh: bool,
        side_table_macros: Optional[Mapping[str, Any]] = None,
        write: Optional[Callable[[str], Any]] = None,
    ) -> StepResponse:
        """Run one step of the incremental view `relation` (called by the materialization).

        `side_table_macros`: the macros that make the side tables' statements
        (`streamsql_side_table_macros()`, side_tables.py); without them, the package's own.
        `write`: dbt's `write` of the node: it gets the statements the step sent, each after a
        comment of its role (trace.py), for `target/run/`, also when the step fails.
        """
        config = dict(config or {})
        for warning in configs.config_warnings(str(relation.identifier), config):
            logger.warning(warning)  # no config is ignored silently
        session = AdapterSqlSession(self)
        try:
            with errors_as_dbt_errors():
                model = model_settings(relation, config, bool(full_refresh))
                with StepProgress(model.name, session.trace, logger.info):
                    result = run_step(
                        session,
                        model,
                        compiled_sql,
                        log=logger.info,
                        side_sql=self._side_table_sql(side_table_macros),
                    )
        except Exception as error:
            message = getattr(error, "msg", None) or str(error)  # dbt's errors: without a title
            lines = str(message).strip().splitlines() or [type(error).__name__]
            write_statements(write, session, relation, f"the step failed: {lines[0][:300]}")
            raise
        write_statements(write, session, relation, result.log_line())
        return step_response(result)

    @available
    def streamsql_flush(
        self,
        relation: BaseRelation,
        config: Any,
        side_table_macros: Optional[Mapping[str, Any]] = None,
    ) -> StepResponse:
        """Release everything the model's WATERMARK holds (the `streamsql_flush` operation)."""
        with errors_as_dbt_errors():
            model = model_settings(relation, dict(config or {}), full_refresh=False)
            result = flush_step(
                AdapterSqlSession(self),
                model,
                log=logger.info,
                side_sql=self._side_table_sql(side_table_macros),
            )
        return step_response(result)

    @available
    def streamsql_readmit(
        self,
        relation: BaseRelation,
        config: Any,
        where: str,
        dry_run: bool = False,
        side_table_macros: Optional[Mapping[str, Any]] = None,
    ) -> StepResponse:
        """Apply the quarantined changes of `relation` that `where` selects, as a step of their
        own (the `streamsql_readmit` operation, execution/readmit.py)."""
        from dbt.adapters.streamsql.execution.readmit import readmit_step

        with errors_as_dbt_errors():
            model = model_settings(relation, dict(config or {}), full_refresh=False)
            result = readmit_step(
                AdapterSqlSession(self),
                model,
                str(where) if where is not None else "",
                log=logger.info,
                side_sql=self._side_table_sql(side_table_macros),
                dry_run=bool(dry_run),
            )
        return step_response(result)

    def _side_table_sql(self, macros: Optional[Mapping[str, Any]]) -> Optional[SideTableSql]:
        """The side tables' statements from the macros dbt handed over, called with relations
        quoted as the step quotes names (so that the default statements are the same text)."""
        if macros is None:
            return None
        with errors_as_dbt_errors():
            call = side_tables.dbt_macros(macros)
        return SideTableSql(
            call,
            lambda schema, identifier: self.Relation.create(
                schema=schema, identifier=identifier, type="table"
            ).quote(schema=True, identifier=True),
        )

    @available
    def streamsql_explain(self, relation: BaseRelation, compiled_sql: str, config: Any) -> str:
        """What the next step of `relation` would do, without taking it (`streamsql_explain`)."""
        from dbt.adapters.streamsql.execution.explain import explain_model

        with errors_as_dbt_errors():
            model = model_settings(relation, dict(config or {}), full_refresh=False)
            return explain_model(AdapterSqlSession(self), model, compiled_sql)

    @available
    def streamsql_lateness_report(self, relation: BaseRelation, config: Any, steps: int) -> str:
        """What share of its changes each LATENESS would have accepted, over the model's last
        `steps` steps (`streamsql_lateness_report`, execution/lateness_report.py)."""
        from dbt.adapters.streamsql.execution import lateness_report

        with errors_as_dbt_errors():
            model = model_settings(relation, dict(config or {}), full_refresh=False)
            return lateness_report.model_report(AdapterSqlSession(self), model, steps)

    @available
    def streamsql_completed_steps(self, relation: BaseRelation, count: int) -> List[Dict[str, Any]]:
        """The step records of the incremental view `relation`, newest first, from its last
        completed step on (`history.completed_steps`: a step whose side-table writes have not
        all landed is not completed yet), at most `count`: each the record's fields and
        `model_version`, the model's version to read for what the step left (its commit, and
        commits without a step record since: `RecordedStep.last_version`). [] when the table is
        not there, is not a Delta table or holds no step record (the generic tests)."""
        name = f"{relation.schema}.{relation.identifier}"
        try:
            found = history.completed_steps(AdapterSqlSession(self).delta_log(), name, int(count))
        except (TableMissing, NotDeltaTable):
            return []
        return [dict(asdict(step.record), model_version=step.last_version) for step in found]

    @available
    def streamsql_last_modified(self, relations: List[BaseRelation]) -> AttrDict:
        """When each of `relations` (sources' Delta tables) last committed, as dbt's metadata
        freshness reads the `get_relation_last_modified` macro's result: a table of (schema,
        identifier, last_modified, snapshotted_at), both times in UTC, `snapshotted_at` Spark's
        clock now (the clock that stamped the commits). One `DESCRIBE HISTORY ... LIMIT 1` a
        table where Delta's log is not read in the JVM.

        Raises:
            DbtRuntimeError: a table is missing or is not a Delta table (no commits to date it).
        """
        from dbt_common.clients.agate_helper import table_from_rows

        session = AdapterSqlSession(self)
        log = session.delta_log()
        rows = []
        for relation in relations:
            name = f"{relation.schema}.{relation.identifier}"
            try:
                commits = log.recent_commits(name, 1)
            except (TableMissing, NotDeltaTable) as error:
                missing = isinstance(error, TableMissing)
                kind = "does not exist (or is a view)" if missing else "is not a Delta table"
                raise DbtRuntimeError(
                    f"Source table {name} {kind}: its freshness from metadata is the time of "
                    "its last Delta commit. Create it as a Delta table, or give the source a "
                    "loaded_at_field."
                ) from error
            stamp = commits[0].timestamp if commits else None
            rows.append([relation.schema, relation.identifier, utc_time(stamp)])
        now = session.query("SELECT unix_millis(current_timestamp()) AS now")[0]["now"]
        snapshotted_at = utc_time(float(now) / 1000.0)
        table = table_from_rows(
            [row + [snapshotted_at] for row in rows],
            ["schema", "identifier", "last_modified", "snapshotted_at"],
        )
        return AttrDict(response=AdapterResponse(_message="OK"), table=table)

    @available
    def streamsql_comparable(self, expression: str, data_type: str) -> str:
        """SQL for a form of `expression` (of type `data_type`, as DESCRIBE prints it) that
        Spark can GROUP BY and compare with `<=>` (`types.comparable`: a map as its sorted
        entries, ...): the generic tests group a model's rows by every column."""
        try:
            return comparable(expression, data_type)
        except ValueError as error:  # UncomparableType among them
            raise DbtRuntimeError(
                f"cannot compare the column {expression} of type {data_type}: {error}"
            ) from error

    @available
    def streamsql_pinned_query(self, sql: str, input_versions: Mapping[str, int]) -> str:
        """`sql` with each table of `input_versions` (a step record's) read at its version there
        (`binding.pinned_text`): the model's query as its step read its inputs."""
        try:
            return pinned_text(sql, dict(input_versions or {}))
        except (PlanningError, RecomputeRequired) as error:
            raise DbtRuntimeError(
                f"cannot read the inputs of this query at the versions its last step read: {error}"
            ) from error
