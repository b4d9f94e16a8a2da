"""Fetch Delta's jars, compile the adapter's log store and write Java's class archive once,
before test workers start.

`scripts/test.sh` runs the suite in several pytest processes, each with its own embedded Spark.
On a machine that never started one, each would ask Ivy for Delta's jars at the same moment and
download them into the same cache, and the first pytest process, whose JVM lives as long as the
suite, would hold the claim to write the class archive (class_archive.py) until the suite ends,
so no JVM of the suite would map it. This starts one embedded session first, in a scratch
warehouse, runs the statements a step runs (so the archive holds their classes too), and exits,
when the adapter has no list of resolved jars or no class archive yet; otherwise it does nothing.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile


def main() -> int:
    from dbt.adapters.streamsql.spark.embedded_spark import (
        SessionSettings,
        cached_jars,
        class_archive_file,
        delta_maven_coordinate,
        get_spark_session,
    )

    warehouse = tempfile.mkdtemp(prefix="streamsql-warm-")
    settings = SessionSettings(
        warehouse_dir=warehouse, master="local[1]", server_side_parameters={}, lock_timeout=60
    )
    archive = class_archive_file(settings)
    if cached_jars(delta_maven_coordinate()) and (archive is None or os.path.exists(archive)):
        shutil.rmtree(warehouse)
        return 0
    print("==> fetching Delta's jars, writing Java's class archive, once", flush=True)
    # the scratch warehouse goes after the JVM's exit, when its class archive is written
    atexit.register(shutil.rmtree, warehouse, True)
    spark = get_spark_session(settings)
    for statement in (
        "CREATE TABLE warm (id BIGINT, name STRING) USING delta",
        "INSERT INTO warm VALUES (1, 'a'), (2, 'b')",
        "MERGE INTO warm t USING (SELECT 2 AS id, 'c' AS name) s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
        "SELECT name, count(*) FROM warm GROUP BY name",
        "SELECT * FROM table_changes('warm', 0)",
    ):
        spark.sql(statement).collect()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
