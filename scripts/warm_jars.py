"""Fetch Delta's jars (and compile the adapter's log store) once, before test workers start.

`scripts/test.sh` runs the suite in several pytest processes, each with its own embedded Spark.
On a machine that never started one, each would ask Ivy for Delta's jars at the same moment and
download them into the same cache. This starts one embedded session first, in a scratch
warehouse, when the adapter has no list of resolved jars yet; otherwise it does nothing.
"""

from __future__ import annotations

import sys
import tempfile


def main() -> int:
    from dbt.adapters.streamsql.spark.embedded_spark import (
        SessionSettings,
        cached_jars,
        delta_maven_coordinate,
        get_spark_session,
    )

    if cached_jars(delta_maven_coordinate()):
        return 0
    print("==> fetching Delta's jars once, before the test workers start", flush=True)
    with tempfile.TemporaryDirectory(prefix="streamsql-warm-") as warehouse:
        spark = get_spark_session(
            SessionSettings(
                warehouse_dir=warehouse,
                master="local[1]",
                server_side_parameters={},
                lock_timeout=60,
            )
        )
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
