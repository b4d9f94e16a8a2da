"""Spark Connect requests a step makes in fewer round trips than PySpark's client makes them.

Through the warm server every call is a round trip to another process (10-70 ms here), and a
step makes dozens. PySpark's Connect client spends more of them than a step needs:

- `spark.sql(query)` runs the statement on the server at once (so that a command takes effect)
  and returns a relation that `collect()` then executes: two round trips for a query. A relation
  of the SQL text built here is executed once, by the request that fetches its rows.
- `spark.conf.set` and `unset` send a request per key: a write's settings (step record,
  idempotent-write id, its options) go in one request here, and come back in one.
- `DataFrame.localCheckpoint()` does not ask for the relation's observed metrics, which a step
  computes in the same pass as a checkpoint (sql_session.py); without them, each measured
  checkpoint cost one more query. The checkpoint command sent here carries them.

Both use PySpark's own classes for the requests (`pyspark.sql.connect.plan`), which are not a
public API: the pinned pyspark is what they are tested with (test_differential.py,
test_crash_recovery.py and test_warm_server.py run steps through a server), and when a call does
not answer as expected the public one is used instead.
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

from dbt.adapters.events.logging import AdapterLogger

logger = AdapterLogger("StreamSQL")


def query_rows(spark: Any, text: str) -> List[Dict[str, Any]]:
    """The rows of `text` (a query, or a DESCRIBE/SHOW), in one request."""
    from pyspark.sql.connect.dataframe import DataFrame
    from pyspark.sql.connect.plan import SQL

    frame = DataFrame(SQL(text), spark)
    return [row.asDict() for row in frame.collect()]


def relation(spark: Any, text: str) -> Any:
    """A relation of the query `text`, not yet sent to the server."""
    from pyspark.sql.connect.dataframe import DataFrame
    from pyspark.sql.connect.plan import SQL

    return DataFrame(SQL(text), spark)


def local_checkpoint(frame: Any) -> Any:
    """`frame.localCheckpoint(eager=True)`, asking the server for its observed metrics too."""
    from pyspark.sql.connect.plan import Checkpoint

    client = frame._session.client
    command = Checkpoint(child=frame._plan, local=True, eager=True).command(client)
    try:
        _, properties, _ = client.execute_command(command, frame._plan.observations)
        return properties["checkpoint_command_result"]
    except (AttributeError, KeyError, TypeError) as error:  # another client: the public call
        logger.debug(f"Checkpoint with observed metrics failed ({error}); without them")
        return frame.localCheckpoint(eager=True)


def write_confs(spark: Any, settings: Sequence[Tuple[str, str]], unset: Sequence[str]) -> None:
    """Set `settings` in one request and unset `unset` in one."""
    from pyspark.sql.connect.proto import base_pb2 as proto

    if settings:
        spark.conf._set_all(dict(settings), silent=False)
    if unset:
        operation = proto.ConfigRequest.Operation(unset=proto.ConfigRequest.Unset(keys=list(unset)))
        spark.conf._client.config(operation)
