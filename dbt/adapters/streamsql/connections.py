"""Profile fields and connections: dbt-spark's, with `method: session` as the zero-setup default."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

from dbt.adapters.contracts.connection import Connection, ConnectionState
from dbt.adapters.events.logging import AdapterLogger
from dbt.adapters.exceptions import FailedToConnectError
from dbt.adapters.spark.connections import (
    PyhiveConnectionWrapper,
    SparkConnectionManager,
    SparkCredentials,
)
from dbt.adapters.spark.session import Cursor, SessionConnectionWrapper
from dbt_common.dataclass_schema import StrEnum
from dbt_common.exceptions import DbtDatabaseError, DbtRuntimeError

from dbt.adapters.streamsql import object_store
from dbt.adapters.streamsql.execution.engine.sql_session import is_connect_session
from dbt.adapters.streamsql.spark import warm_server
from dbt.adapters.streamsql.spark.embedded_spark import SessionSettings, get_spark_session

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


class SparkConnectionMethod(StrEnum):
    """dbt-spark's methods (equal to its enum's members), and Spark Connect."""

    THRIFT = "thrift"
    HTTP = "http"
    ODBC = "odbc"
    SESSION = "session"
    CONNECT = "connect"


DEFAULT_CONNECT_PORT = 15002
DEFAULT_SPARK_PORT = 443  # dbt-spark's default (Thrift over HTTP)


@dataclass
class StreamSQLCredentials(SparkCredentials):
    method: SparkConnectionMethod = SparkConnectionMethod.SESSION  # type: ignore[assignment]
    port: Optional[int] = None  # type: ignore[assignment]
    warehouse_dir: Optional[str] = None
    # With warehouse_dir on an object store: where the metastore and the server's files stay.
    local_dir: Optional[str] = None
    master: Optional[str] = None
    lock_timeout: int = 600
    # warehouse_dir on s3a://: refuse to start while another machine's driver writes it
    writer_claim: bool = True
    # method: session. True: the first dbt command starts a Spark Connect server for the
    # warehouse that later commands reuse (spark/warm_server.py); False: Spark in the dbt process.
    keep_warm: bool = True
    idle_timeout: int = warm_server.DEFAULT_IDLE_TIMEOUT

    def __post_init__(self) -> None:
        if self.method == SparkConnectionMethod.SESSION and self.host is None:
            # The embedded session has no server to name; dbt-spark insists on a host.
            self.host = "embedded"
        if self.port is None and self.method != SparkConnectionMethod.SESSION:
            connect = self.method == SparkConnectionMethod.CONNECT
            self.port = DEFAULT_CONNECT_PORT if connect else DEFAULT_SPARK_PORT
        if self.method == SparkConnectionMethod.CONNECT:
            try:
                import grpc  # noqa: F401
                import pyarrow  # noqa: F401
            except ImportError as exc:
                raise DbtRuntimeError(
                    "method: connect needs Spark Connect's client libraries: "
                    'pip install "dbt-streamsql[connect]"'
                ) from exc
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
        """The warehouse's directory on this machine: `warehouse_dir`, or for one on an object
        store the directory its metastore and server files keep to (`local_dir`)."""
        return self._warehouse()[0]

    def _warehouse(self) -> Tuple[str, Optional[str]]:
        """(the local directory, the tables' URI when they are on an object store)."""
        configured = os.path.expanduser(self.warehouse_dir or DEFAULT_WAREHOUSE_DIR)
        if "://" not in configured:
            return os.path.abspath(os.path.join(project_dir(), configured)), None
        local, tables = object_store.warehouse_location(configured, project_dir())
        if self.local_dir:
            local = os.path.join(project_dir(), os.path.expanduser(self.local_dir))
        return os.path.abspath(local), tables

    def session_settings(self) -> SessionSettings:
        local, tables = self._warehouse()
        parameters = dict(self.server_side_parameters)
        if tables is not None:  # the profile's own spark.sql.warehouse.dir wins, as any setting
            parameters.setdefault(object_store.WAREHOUSE_SETTING, tables)
        return SessionSettings(
            warehouse_dir=local,
            master=self.master or DEFAULT_MASTER,
            server_side_parameters=parameters,
            lock_timeout=self.lock_timeout,
            writer_claim=self.writer_claim,
        )

    def _connection_keys(self) -> Tuple[str, ...]:
        if self.method == SparkConnectionMethod.SESSION:
            return ("method", "schema", "master", "warehouse_dir", "local_dir", "keep_warm")
        if self.method == SparkConnectionMethod.CONNECT:
            return ("method", "host", "port", "schema", "use_ssl")
        return ("method",) + super()._connection_keys()


LOST_CONNECTION_MARKERS = (
    "UNAVAILABLE",
    "Connection refused",
    "failed to connect to all",
    # the server stopping under a statement (its Spark stopped, its jobs cancelled)
    "Cannot call methods on a stopped SparkContext",
    "because SparkContext was shut down",
)


def server_lost(connection: Connection, message: str) -> Optional[str]:
    """What to say when a statement failed because its Spark Connect server is gone."""
    if not any(marker in message for marker in LOST_CONNECTION_MARKERS):
        return None
    creds = connection.credentials
    if creds.method == SparkConnectionMethod.SESSION:
        warehouse = creds.resolved_warehouse_dir()
        log = warm_server.ServerPaths(warehouse).log
        return (
            f"The warm Spark server of {warehouse} stopped during this command (stopped, "
            f"killed, or out of memory: see {log}). A new one starts when a dbt command next needs "
            "one (this one's models that still run included), and a "
            "model's next step completes any step this one left unfinished."
        )
    return (
        f"The Spark Connect server at {creds.host}:{creds.port} cannot be reached. A model's "
        "next step completes any step this command left unfinished."
    )


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
        if is_connect_session(self.handle.spark):
            self.handle.spark.interruptAll()
        else:
            self.handle.spark.sparkContext.cancelAllJobs()

    def close(self) -> None:
        super().close()
        spark = self.handle.spark
        if is_connect_session(spark):
            # Frees the session's views and cached data on the server. It waits for the server
            # (0.2-0.6 s), which no model needs to wait for: a process that ends first leaves
            # the session to the server's idle timeout.
            threading.Thread(target=stop_quietly, args=(spark,), daemon=True).start()


def stop_quietly(spark: Any) -> None:
    try:
        spark.stop()
    except Exception as exc:  # the server is gone already: nothing to free
        logger.debug(f"Closing a Spark Connect session: {exc}")


def connect_session(url: str, parameters: Mapping[str, str], local: bool = False) -> Any:
    """A new Spark Connect session at `url`, with the profile's runtime settings.

    `local`: the server is on this machine. Then results are not fetched through reattachable
    executions (which let a query outlive a dropped network connection, at 2 round trips more
    per statement: 70 against 40 ms for `SELECT 1` here)."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    # PySpark warns on the terminal when it gives up on a server; the failed statement's error
    # says so, naming the server and what to do (server_lost).
    warnings.filterwarnings("ignore", message=r"\[RETRIES_EXCEEDED\]", category=UserWarning)
    spark = ConnectSession.builder.remote(url).create()
    if local:
        from pyspark.sql.connect.client.retries import DefaultPolicy

        spark._client.disable_reattachable_execute()
        # A server on this machine that does not answer is gone: fail within seconds, where
        # the default retries (for networks) keep trying for 10 minutes.
        spark._client.set_retry_policies([DefaultPolicy(max_retries=3, max_backoff=1000)])
    for key, value in parameters.items():
        try:
            spark.conf.set(key, value)
        except Exception as exc:  # a static setting: only the server's own configuration sets it
            logger.warning(
                f"server_side_parameters: {key} cannot be set by a Spark Connect client "
                f"({str(exc).splitlines()[0][:160]}); set it where the server is started."
            )
    return spark


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

    def close(self) -> None:
        """dbt-spark's, except that a session the server fails to close does not end the run.

        The Spark Thrift Server sometimes answers CloseSession with an error of its own (a
        missing Hive class, `LlapSigner$Signable`, seen after two runs at once); pyhive has
        closed the socket by then, and dbt closes connections after the models, so raising would
        replace the run's summary with that stack trace. The server drops the session itself."""
        try:
            super().close()
        except Exception as exc:
            text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            logger.debug(f"The Thrift Server did not close the session cleanly: {text[:300]}")


def with_runtime_settings(session: Any, parameters: Mapping[str, str]) -> Any:
    """`session` with the profile's runtime settings. A new session of a process's Spark takes
    its settings from the SparkContext, which holds the profile's only when this profile
    started it: in a process whose Spark something else started (a test suite, a notebook),
    the profile's settings would otherwise not reach the session. Static settings stay as the
    running Spark has them."""
    conf = session.conf
    for key, value in parameters.items():
        if conf.isModifiable(key) and conf.get(key, None) != str(value):
            conf.set(key, str(value))
    return session


class StreamSQLConnectionManager(SparkConnectionManager):
    TYPE = "streamsql"

    @contextmanager
    def exception_handler(self, sql: str) -> Iterator[None]:
        """dbt-spark's, saying so when the Spark Connect server went away mid-run.

        gRPC's own errors carry no arguments, which dbt-spark's handler passes on as they are:
        a server killed during a statement would end the model in a raw stack trace."""
        try:
            with super().exception_handler(sql):
                yield
        except Exception as error:
            lost = server_lost(self.get_thread_connection(), str(error))
            if lost:
                raise DbtRuntimeError(f"{lost}\n{error}") from error
            raise

    @classmethod
    def open(cls, connection: Connection) -> Connection:
        if connection.state == ConnectionState.OPEN:
            return connection
        creds = connection.credentials
        if creds.method == SparkConnectionMethod.THRIFT:
            return cls._open_thrift(connection)
        if creds.method not in (SparkConnectionMethod.SESSION, SparkConnectionMethod.CONNECT):
            return super().open(connection)
        try:
            spark = cls._spark_session(creds)
        except DbtRuntimeError as exc:
            connection.state = ConnectionState.FAIL
            raise FailedToConnectError(str(exc)) from exc
        handle = EmbeddedHandle(spark)
        connection.handle = EmbeddedConnectionWrapper(handle)  # type: ignore
        connection.state = ConnectionState.OPEN
        return connection

    @classmethod
    def _spark_session(cls, creds: StreamSQLCredentials) -> Any:
        """A session of this connection's own (each dbt thread has one, so session settings,
        such as a step's commit metadata, and temporary views never leak across threads)."""
        if creds.method == SparkConnectionMethod.CONNECT:
            url = warm_server.connect_url(creds.host, creds.port, creds.token, creds.use_ssl)
            where = f"the Spark Connect server at {creds.host}:{creds.port}"
            return cls._connect(url, creds.server_side_parameters, where)
        settings = creds.session_settings()
        if not creds.keep_warm:
            return with_runtime_settings(
                get_spark_session(settings).newSession(), creds.server_side_parameters
            )
        port = creds.port  # None unless the profile pins the warm server's port
        state = warm_server.ensure_server(settings, creds.idle_timeout, port)
        paths = warm_server.ServerPaths(settings.warehouse_dir)
        warm_server.Heartbeat.keep(paths, state.idle_timeout)
        url = warm_server.connect_url("localhost", state.port, warm_server.read_token(paths), False)
        # The server runs with the profile's settings already.
        return cls._connect(url, {}, f"the warm Spark server on port {state.port}", local=True)

    @staticmethod
    def _connect(url: str, parameters: Mapping[str, str], where: str, local: bool = False) -> Any:
        try:
            return connect_session(url, parameters, local)
        except ImportError as exc:
            raise DbtRuntimeError(
                f"Spark Connect's client libraries are missing ({exc}): "
                'pip install "dbt-streamsql[connect]", or set keep_warm: false'
            ) from exc
        except Exception as exc:
            raise DbtRuntimeError(f"Could not connect to {where}: {exc}") from exc

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
