"""The SQL session a step runs in: the `SqlSession` protocol, and the adapter's connection.

Not to be confused with `spark/embedded_spark.py`, which starts the SparkSession that
`method: session` connections run on; this module is how a step sends SQL through whichever
connection dbt holds.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import (
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Optional,
    Protocol,
    Sequence,
    Set,
    Tuple,
)

from dbt.adapters.events.types import SQLQuery, SQLQueryStatus
from dbt_common.events.contextvars import get_node_info
from dbt_common.events.functions import fire_event
from dbt_common.invocation import get_invocation_id

from dbt.adapters.streamsql.execution.engine import connect_client
from dbt.adapters.streamsql.execution.engine.delta_files import (
    FileDeltaLog,
    JvmDeltaLog,
    delta_location,
)
from dbt.adapters.streamsql.execution.engine.delta_log import DeltaLogReader, SqlDeltaLog
from dbt.adapters.streamsql.execution.engine.statements import cached_view, reset_conf, set_conf
from dbt.adapters.streamsql.execution.engine.trace import StatementTrace
from dbt.adapters.streamsql.planning.plan import Column


def is_connect_session(spark: Any) -> bool:
    """Whether `spark` is a Spark Connect client session (not a session in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def spark_api(spark: Any) -> Tuple[Any, Any]:
    """(Observation, functions) of `spark`'s kind: Spark Connect has its own of each."""
    if is_connect_session(spark):
        from pyspark.sql.connect import functions
        from pyspark.sql.connect.observation import Observation
    else:
        from pyspark.sql import Observation, functions  # type: ignore[assignment]
    return Observation, functions


class SqlSession(Protocol):
    """Where a step's statements run. Tests use a fake (tests/unit/fake_sql_session.py).

    `trace` records every statement sent, with its role (trace.py)."""

    trace: StatementTrace

    def query(self, statement: str) -> List[Dict[str, Any]]: ...

    def run(self, statement: str) -> None: ...

    def materialize(
        self, name: str, select: str, measures: Optional[Dict[str, str]] = None, alias: str = ""
    ) -> Dict[str, Any]:
        """`measures`: name -> aggregate expression over the rows (aliased `alias`), whose
        values are returned."""
        ...

    def release(self, names: Sequence[str]) -> None: ...

    def set_confs(self, settings: Sequence[Tuple[str, str]]) -> None:
        """Session settings for the statements that follow (`settings`: key, value)."""
        ...

    def unset_confs(self, keys: Sequence[str]) -> None:
        """Settings back as they were before `set_confs`; inside `resets_later`, possibly sent
        with the session's next call."""
        ...

    def resets_later(self) -> Any:
        """A scope (a step) in which resets may wait for the session's next call
        (`LaterResets`)."""
        ...

    def delta_log(self) -> DeltaLogReader: ...

    def local_checkpoints(self) -> bool:
        """Whether `materialize` checkpoints (no cached plan) rather than `CACHE TABLE`."""
        ...


# How long the measures of a local checkpoint may take to arrive once it is computed (Spark
# reports them through its listener bus, within milliseconds); then they are queried instead.
OBSERVED_WAIT_SECONDS = 10.0


def wait_for(get: Callable[[], Any], seconds: float) -> Optional[Any]:
    """`get()`, or None when it has not returned within `seconds` (it is left to finish)."""
    found: List[Any] = []
    waiting = threading.Thread(target=lambda: found.append(get()), daemon=True)
    waiting.start()
    waiting.join(seconds)
    return found[0] if found else None


def measured(relation: str, measures: Dict[str, str], alias: str = "") -> str:
    """The query of `measures` over `relation` (aliased `alias`)."""
    select = ", ".join(f"{expression} AS {name}" for name, expression in measures.items())
    return f"SELECT {select} FROM {relation}" + (f" AS {alias}" if alias else "")


def describe_query(session: SqlSession, select: str) -> List[Column]:
    body = select.strip().rstrip(";")
    return [
        Column(row["col_name"], row["data_type"])
        for row in describe_rows(session, f"DESCRIBE QUERY {body}")
    ]


def describe_rows(session: SqlSession, statement: str) -> List[Dict[str, Any]]:
    """The column rows of a DESCRIBE, without the partition and detail sections after them."""
    rows = []
    for row in session.query(statement):
        name = (row.get("col_name") or "").strip()
        if not name or name.startswith("#"):
            break  # partition and detail sections follow a blank or '#' line
        rows.append(row)
    return rows


def checkpoint_text(name: str, select: str, measures: Dict[str, str], alias: str) -> str:
    """How a local checkpoint is logged (it is not Spark SQL): what it computes, then, on a
    comment line, the query its measures stand for."""
    text = f"CHECKPOINT {name} AS {select}"
    if measures:
        text += f"\n-- measured in the same pass: {measured(name, measures, alias)}"
    return text


def write_confs(spark: Any, settings: Sequence[Tuple[str, str]], unset: Sequence[str]) -> None:
    """Set `settings` and unset `unset` in `spark`'s conf: over Spark Connect one request each
    (its client sends one per key otherwise), in this process one call per key."""
    if is_connect_session(spark):
        try:
            connect_client.write_confs(spark, settings, unset)
            return
        except AttributeError:  # another client: one request per key
            pass
    for key, value in settings:
        spark.conf.set(key, value)
    for key in unset:
        spark.conf.unset(key)


class LaterResets:
    """Settings resets that travel with a session's next call instead of in one of their own.

    A step sets settings around each write (the step record, Delta's idempotent-write id) and
    resets them after it; the next thing it sends is often the next write's settings, or, at
    its end, the views it frees. Inside `resets_later` (a step), `unset_confs` only notes the
    keys; the session then sends them first thing in its next call: in the same call as the
    next settings or views freed, and in a call of their own before any other statement and
    when the scope ends. So no statement ever runs under a setting a reset was due to remove,
    and a step's settings never outlive it. A GROUP BY step makes three calls fewer in this
    process; over Spark Connect, where one request either sets or unsets, one round trip fewer.
    Outside the scope, a reset is sent at once.
    """

    trace: StatementTrace

    def __init__(self) -> None:
        self._later: List[str] = []  # keys whose reset waits for the next call
        self._later_role: Optional[str] = None  # the role they were reset under
        self._later_depth = 0

    @contextmanager
    def resets_later(self) -> Iterator[None]:
        self._later_depth += 1
        try:
            yield
        finally:
            self._later_depth -= 1
            if not self._later_depth:
                self.settle()

    def settle(self) -> None:
        """Send the resets that wait, now, in a call of their own."""
        role, keys = self._later_role, self._take_resets()
        if keys:
            with self.trace.role(role):  # logged as the write they served
                self._reset_now(keys)

    def _defer_resets(self, keys: Sequence[str]) -> bool:
        """Note `keys` for the next call, inside the scope; False outside it."""
        if not self._later_depth:
            return False
        if not self._later:
            self._later_role = self.trace.current
        self._later += [key for key in keys if key not in self._later]
        return True

    def _take_resets(self) -> List[str]:
        keys, self._later = self._later, []
        return keys

    def _reset_now(self, keys: Sequence[str]) -> None:
        raise NotImplementedError


def conf_statements(unset: Sequence[str], settings: Sequence[Tuple[str, str]]) -> List[str]:
    """How one call that resets `unset` and then sets `settings` is logged: a statement each."""
    return [reset_conf(key) for key in unset] + [set_conf(key, value) for key, value in settings]


class AdapterSqlSession(LaterResets):
    """Runs statements through dbt's connection (logged like every dbt query), raw rows back.

    Rows bypass agate on purpose: agate would turn strings that look like dates into dates.
    Every statement is recorded in `trace` as dbt logs it (an `SQLQuery` event in dbt.log).
    """

    def __init__(self, adapter: Any) -> None:
        super().__init__()
        self.adapter = adapter
        self.trace = StatementTrace()
        self._checkpoints: Dict[str, Any] = {}  # view name -> its checkpointed DataFrame
        self._confs_before: Optional[Dict[str, str]] = None  # _settings_before
        # the keys _confs_before knows, set or not (None: all of them)
        self._confs_read: Optional[Set[str]] = set()

    def query(self, statement: str) -> List[Dict[str, Any]]:
        self.settle()
        spark = self._embedded_spark()
        if spark is not None and is_connect_session(spark):  # one round trip, not two
            rows: List[Dict[str, Any]] = []
            self._embedded(
                statement, lambda: rows.extend(connect_client.query_rows(spark, statement))
            )
            return rows
        self.trace.record(statement)
        _, cursor = self.adapter.connections.add_query(statement, auto_begin=False)
        rows = cursor.fetchall() or []
        names = [column[0] for column in cursor.description]
        return [dict(zip(names, row)) for row in rows]

    def run(self, statement: str) -> None:
        self.settle()
        self.trace.record(statement)
        self.adapter.connections.add_query(statement, auto_begin=False)

    def materialize(
        self, name: str, select: str, measures: Optional[Dict[str, str]] = None, alias: str = ""
    ) -> Dict[str, Any]:
        """Compute `select` now into the temporary view `name`, to be read several times, and
        return the values of `measures` (name -> aggregate expression over its rows, aliased
        `alias`).

        In the embedded session this is a local checkpoint: the view's plan reads no table, so
        a later write to a table it was computed from neither re-plans nor recomputes it. (Delta
        re-caches every cached plan that reads a table it writes, and re-planning a plan pinned
        to an older version rebuilds that version's snapshot: a `CACHE TABLE` over the state a
        step is about to MERGE costs a second evaluation.) Over Thrift, where only SQL reaches
        Spark, it is `CACHE TABLE`.

        The measures are computed in the same pass in the embedded session and through Spark
        Connect (Spark's observed metrics: no second job, no statement of their own), by one
        query after it over Thrift.
        """
        self.settle()
        measures = measures or {}
        spark = self._embedded_spark()
        if spark is None:
            self.run(f"DROP VIEW IF EXISTS {name}")  # one a failed step left behind
            self.run(cached_view(name, select))
            if not measures:
                return {}
            return self.query(measured(name, measures, alias))[0]
        observed: Dict[str, Any] = {}

        def checkpoint() -> None:
            Observation, F = spark_api(spark)
            if is_connect_session(spark):
                # Spark Connect binds a checkpoint's result to the thread's active session, which
                # is the first session this thread made (often a closed one), not this one.
                type(spark)._active_session.session = spark
            connect = is_connect_session(spark)
            frame = connect_client.relation(spark, select) if connect else spark.sql(select)
            observation = Observation(f"{name}_measures")
            if measures:
                frame = frame.alias(alias or name).observe(
                    observation, *[F.expr(e).alias(n) for n, e in measures.items()]
                )
            if connect:  # with its observed metrics, which PySpark's call does not ask for
                frame = connect_client.local_checkpoint(frame)
            else:
                frame = frame.localCheckpoint(eager=True)
            frame.createOrReplaceTempView(name)
            self._checkpoints[name] = frame
            if measures:
                observed.update(wait_for(lambda: observation.get, OBSERVED_WAIT_SECONDS) or {})

        self._embedded(checkpoint_text(name, select, measures, alias), checkpoint)
        if measures and not observed:  # Spark did not report them: ask
            return self.query(measured(name, measures, alias))[0]
        return observed

    def release(self, names: Sequence[str]) -> None:
        """Drop views made by `materialize`, freeing their data: in the embedded session all of
        them in one call to the catalog, with the resets that wait (`LaterResets`), logged as
        one statement; over Thrift one DROP VIEW each (a cached view's data goes with it)."""
        spark = self._embedded_spark()
        if spark is None:
            for name in names:
                self.run(f"DROP VIEW IF EXISTS {name}")
            return
        unset = self._take_resets() if names else []

        def drop() -> None:
            self._write_confs(spark, [], unset)
            for name in names:
                spark.catalog.dropTempView(name)
                frame = self._checkpoints.pop(name, None)
                if frame is not None and not is_connect_session(spark):
                    frame._jdf.queryExecution().logical().rdd().unpersist(False)
                # Over Spark Connect the server frees a checkpoint once no client frame names it.

        if names:
            drops = [f"DROP VIEW IF EXISTS {name}" for name in names]
            self._embedded(";\n".join(conf_statements(unset, []) + drops), drop)

    def set_confs(self, settings: Sequence[Tuple[str, str]]) -> None:
        """In the embedded session all of them in one call to Spark's conf (no SQL to parse;
        over Spark Connect one request), with the resets that wait (`LaterResets`), logged as
        one statement; over Thrift one SET each (only SQL reaches the server)."""
        spark = self._embedded_spark()
        if spark is None:
            for key, value in settings:
                self.run(set_conf(key, value))
        elif settings:
            unset = self._take_resets()
            self._embedded(
                ";\n".join(conf_statements(unset, settings)),
                lambda: self._write_confs(spark, settings, unset),
            )

    def unset_confs(self, keys: Sequence[str]) -> None:
        """Puts settings back as they were before `set_confs` changed them: in the embedded
        session to the session's own value where it had one (a profile's
        `server_side_parameters`), else unset; inside `resets_later` with the session's next
        call. Over Thrift one RESET each, at once."""
        spark = self._embedded_spark()
        if spark is None:
            for key in keys:
                self.run(reset_conf(key))
        elif keys and not self._defer_resets(keys):
            self._reset_now(keys)

    def _reset_now(self, keys: Sequence[str]) -> None:
        spark = self._embedded_spark()
        self._embedded(
            ";\n".join(conf_statements(keys, [])), lambda: self._write_confs(spark, [], keys)
        )

    def _write_confs(
        self, spark: Any, settings: Sequence[Tuple[str, str]], unset: Sequence[str]
    ) -> None:
        """One call: the keys `unset` back to the session's own values, then `settings`."""
        if not settings and not unset:
            return
        new = {key for key, _ in settings}
        restored = [key for key in unset if key not in new]
        before = self._settings_before(spark, [*new, *restored])
        write_confs(
            spark,
            [(key, before[key]) for key in restored if key in before] + list(settings),
            [key for key in restored if key not in before],
        )

    def _settings_before(self, spark: Any, keys: Sequence[str]) -> Dict[str, str]:
        """The session's settings of `keys` before this step changed any (each key read the
        first time the step sets it; a key set in none: absent). In this process one call per
        key: Spark's whole conf crosses py4j an entry at a time (over 150 calls); over Spark
        Connect all of them in one request."""
        if self._confs_before is None:
            self._confs_before = {}
            if is_connect_session(spark):
                self._confs_before = dict(spark.conf.getAll)
                self._confs_read = None  # every key: those absent are not set
        if self._confs_read is not None:
            for key in keys:
                if key not in self._confs_read:
                    self._confs_read.add(key)
                    value = spark.conf.get(key, None)
                    if value is not None:
                        self._confs_before[key] = value
        return self._confs_before

    def _embedded(self, logged: str, action: Callable[[], Any]) -> None:
        """Do `action` on the embedded SparkSession, logged as dbt logs a query (`logged`: the
        SQL it stands for) and recorded in the trace."""
        connections = self.adapter.connections
        self.trace.record(logged)
        with connections.exception_handler(logged):
            fire_event(
                SQLQuery(
                    conn_name=connections.get_thread_connection().name,
                    sql=logged,
                    node_info=get_node_info(),
                )
            )
            started = time.perf_counter()
            action()
            fire_event(
                SQLQueryStatus(
                    status="OK", elapsed=time.perf_counter() - started, node_info=get_node_info()
                )
            )

    def delta_log(self) -> DeltaLogReader:
        """Delta's log read in the JVM in the embedded session, from its files through the
        warm server (on this machine), through SQL elsewhere."""
        spark = self._embedded_spark()
        if spark is None:
            return SqlDeltaLog(self)
        if not is_connect_session(spark):
            return JvmDeltaLog(spark, SqlDeltaLog(self))
        credentials = self.adapter.config.credentials
        if credentials.method == "session":  # the warm server: the same machine's files
            return FileDeltaLog(SqlDeltaLog(self), get_invocation_id(), self.known_location)
        return SqlDeltaLog(self)

    def known_location(self, name: str) -> Optional[str]:
        """Where the Delta table `name` (`schema.table`) is, as dbt's relation cache knows it:
        dbt lists the schemas it builds into when an invocation begins (`SHOW TABLE EXTENDED`,
        which gives each table's provider and location), so a step need not ask again."""
        schema, _, table = name.replace("`", "").rpartition(".")
        cache = getattr(self.adapter, "cache", None)
        if not schema or cache is None:
            return None
        try:
            relations = cache.get_relations(None, schema)
        except Exception:  # a cache dbt could not fill: ask the catalog
            return None
        for relation in relations:
            if str(relation.identifier or "").lower() != table.lower():
                continue
            return delta_location(str(getattr(relation, "information", None) or ""))
        return None

    def local_checkpoints(self) -> bool:
        return self._embedded_spark() is not None

    def _embedded_spark(self) -> Optional[Any]:
        """The SparkSession behind this thread's connection: the embedded one, or a Spark
        Connect session (None over Thrift, where only SQL reaches Spark)."""
        handle = getattr(self.adapter.connections.get_thread_connection().handle, "handle", None)
        return getattr(handle, "spark", None)
