"""Profile fields and connections: dbt-spark's, with `method: session` as the zero-setup default."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Optional, Tuple

from dbt.adapters.contracts.connection import Connection, ConnectionState
from dbt.adapters.events.logging import AdapterLogger
from dbt.adapters.exceptions import FailedToConnectError
from dbt.adapters.spark.connections import (
    SparkConnectionManager,
    SparkConnectionMethod,
    SparkCredentials,
)
from dbt.adapters.spark.session import Cursor, SessionConnectionWrapper
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.streamsql.session import SessionSettings, get_spark_session

logger = AdapterLogger("StreamSQL")

DEFAULT_MASTER = "local[2]"
DEFAULT_WAREHOUSE_DIR = "warehouse"


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


class StreamSQLConnectionManager(SparkConnectionManager):
    TYPE = "streamsql"

    @classmethod
    def open(cls, connection: Connection) -> Connection:
        if connection.state == ConnectionState.OPEN:
            return connection
        creds = connection.credentials
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
