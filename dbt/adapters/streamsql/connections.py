"""Profile fields and connections: dbt-spark's, with `method: session` as the zero-setup default."""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

from dbt.adapters.contracts.connection import Connection, ConnectionState
from dbt.adapters.events.logging import AdapterLogger
from dbt.adapters.exceptions import FailedToConnectError
from dbt.adapters.spark.connections import (
    PyhiveConnectionWrapper,
    SparkConnectionManager,
    SparkConnectionMethod,
    SparkCredentials,
)
from dbt.adapters.spark.session import Cursor, SessionConnectionWrapper
from dbt_common.exceptions import DbtDatabaseError, DbtRuntimeError

from dbt.adapters.streamsql.embedded_spark import SessionSettings, get_spark_session

logger = AdapterLogger("StreamSQL")

DEFAULT_MASTER = "local[2]"
DEFAULT_WAREHOUSE_DIR = "warehouse"
# A Thrift statement is polled after this many seconds, then twice as long each time up to the
# profile's poll_interval: a step runs dozens of sub-second statements.
THRIFT_FIRST_POLL = 0.02


def project_dir() -> str:
    """The dbt project directory of this invocation (the working directory if dbt did not say)."""
    try:
        from dbt.flags import get_flags

        flagged = getattr(get_flags(), "PROJECT_DIR", None)
    except Exception:
        flagged = None
    return os.path.abspath(flagged or os.getcwd())


@dataclass
class StreamSQLCredentials(SparkCredentials):
    method: SparkConnectionMethod = SparkConnectionMethod.SESSION
    warehouse_dir: Optional[str] = None
    master: Optional[str] = None
    lock_timeout: int = 600

    def __post_init__(self) -> None:
        if self.method == SparkConnectionMethod.SESSION and self.host is None:
            # The embedded session has no server to name; dbt-spark insists on a host.
            self.host = "embedded"
        super().__post_init__()

    @property
    def type(self) -> str:
        return "streamsql"

    @property
    def unique_field(self) -> str:
        if self.method == SparkConnectionMethod.SESSION:
            return self.resolved_warehouse_dir()
        return super().unique_field

    def resolved_warehouse_dir(self) -> str:
        configured = os.path.expanduser(self.warehouse_dir or DEFAULT_WAREHOUSE_DIR)
        if "://" in configured:
            raise DbtRuntimeError(
                f"warehouse_dir {configured!r} must be a local directory: the embedded Derby "
                "metastore lives there. To keep the tables on shared storage (a cluster's "
                "executors write them), set server_side_parameters: "
                f"{{spark.sql.warehouse.dir: {configured}}} and keep warehouse_dir local."
            )
        return os.path.abspath(os.path.join(project_dir(), configured))

    def session_settings(self) -> SessionSettings:
        return SessionSettings(
            warehouse_dir=self.resolved_warehouse_dir(),
            master=self.master or DEFAULT_MASTER,
            server_side_parameters=dict(self.server_side_parameters),
            lock_timeout=self.lock_timeout,
        )

    def _connection_keys(self) -> Tuple[str, ...]:
        if self.method == SparkConnectionMethod.SESSION:
            return ("method", "schema", "master", "warehouse_dir")
        return ("method",) + super()._connection_keys()


class EmbeddedCursor(Cursor):
    """dbt-spark's session cursor, bound to the session this adapter configured."""

    def __init__(self, spark: Any) -> None:
        super().__init__()
        self._spark = spark

    def execute(self, sql: str, *parameters: Any) -> None:
        if parameters:
            sql = sql % parameters
        from pyspark.errors import PySparkException

        try:
            self._df = self._spark.sql(sql)
        except PySparkException as exc:
            raise DbtRuntimeError(str(exc)) from exc


class EmbeddedHandle:
    def __init__(self, spark: Any) -> None:
        self.spark = spark

    def cursor(self) -> EmbeddedCursor:
        return EmbeddedCursor(self.spark)


class EmbeddedConnectionWrapper(SessionConnectionWrapper):
    handle: EmbeddedHandle  # type: ignore[assignment]

    def cancel(self) -> None:
        self.handle.spark.sparkContext.cancelAllJobs()


def thrift_session_configuration(parameters: Mapping[str, Any]) -> Dict[str, str]:
    """`server_side_parameters` as a Spark Thrift Server applies them to a new session.

    The server sets only `set:hiveconf:<key>` (and Hive's other `set:`/`use:` keys) on the
    session; a bare `spark.sql.shuffle.partitions` would be accepted and ignored.
    """
    return {
        key if key.startswith(("set:", "use:")) else f"set:hiveconf:{key}": str(value)
        for key, value in parameters.items()
    }


class ThriftConnectionWrapper(PyhiveConnectionWrapper):
    """dbt-spark's Thrift connection, polling a running statement soon and then less often.

    dbt-spark polls every `poll_interval` seconds (5 by default), so every statement that does
    not finish at once costs 5 s; an incremental step runs dozens of statements of well under a
    second each.
    """

    def _execute_with_polling(self, sql: str, bindings: Optional[List[Any]]) -> None:
        from TCLIService.ttypes import TOperationState

        sql = sql.strip()
        if sql.endswith(";"):
            sql = sql[:-1]
        if bindings is not None:
            bindings = [self._fix_binding(binding) for binding in bindings]
        assert self._cursor, "Cursor not available"
        self._cursor.execute(sql, bindings, async_=True)
        started = time.monotonic()
        wait = THRIFT_FIRST_POLL
        status = self._cursor.poll()
        pending = (
            TOperationState.INITIALIZED_STATE,
            TOperationState.PENDING_STATE,
            TOperationState.RUNNING_STATE,
        )
        while status.operationState in pending:
            if self.query_timeout is not None and time.monotonic() - started > self.query_timeout:
                raise DbtRuntimeError(f"Query exceeded timeout of {self.query_timeout} seconds")
            time.sleep(wait)
            wait = min(wait * 2, max(self.poll_interval, THRIFT_FIRST_POLL))
            status = self._cursor.poll()
        if status.errorMessage:
            raise DbtDatabaseError(status.errorMessage)
        if status.operationState != TOperationState.FINISHED_STATE:
            state = TOperationState._VALUES_TO_NAMES.get(
                status.operationState, repr(status.operationState)
            )
            raise DbtDatabaseError(f"Query failed with status: {state}")


class StreamSQLConnectionManager(SparkConnectionManager):
    TYPE = "streamsql"

    @classmethod
    def open(cls, connection: Connection) -> Connection:
        if connection.state == ConnectionState.OPEN:
            return connection
        creds = connection.credentials
        if creds.method == SparkConnectionMethod.THRIFT:
            return cls._open_thrift(connection)
        if creds.method != SparkConnectionMethod.SESSION:
            return super().open(connection)
        try:
            spark = get_spark_session(creds.session_settings())
        except DbtRuntimeError as exc:
            connection.state = ConnectionState.FAIL
            raise FailedToConnectError(str(exc)) from exc
        # Each connection (dbt thread) gets its own SQL session over the shared Spark context, so
        # session settings (a step's commit metadata) and temporary views never leak across.
        handle = EmbeddedHandle(spark.newSession())
        connection.handle = EmbeddedConnectionWrapper(handle)  # type: ignore
        connection.state = ConnectionState.OPEN
        return connection

    @classmethod
    def _open_thrift(cls, connection: Connection) -> Connection:
        """dbt-spark's Thrift connection, with session settings that reach Spark."""
        profile_credentials = connection.credentials
        connection.credentials = dataclasses.replace(
            profile_credentials,
            server_side_parameters=thrift_session_configuration(
                profile_credentials.server_side_parameters
            ),
        )
        try:
            super().open(connection)
        finally:
            connection.credentials = profile_credentials
        opened = connection.handle
        if isinstance(opened, PyhiveConnectionWrapper):
            connection.handle = ThriftConnectionWrapper(
                opened.handle,
                poll_interval=opened.poll_interval,
                query_timeout=opened.query_timeout,
                query_retries=opened.query_retries,
            )
        return connection
