import gc
import os

from dbt.adapters.base import AdapterPlugin

from dbt.adapters.streamsql.connections import StreamSQLConnectionManager, StreamSQLCredentials  # noqa
from dbt.adapters.streamsql.impl import StreamSQLAdapter
from dbt.include import streamsql

Plugin = AdapterPlugin(
    adapter=StreamSQLAdapter,  # type: ignore[arg-type]
    credentials=StreamSQLCredentials,
    include_path=streamsql.PACKAGE_PATH,
    dependencies=["spark"],
)

# Every object alive now (dbt's, dbt-spark's, PySpark's and this adapter's modules) lives until
# the process ends. Python's full collections walk all of them again and again as a new dbt
# process grows, and once more as it exits: 0.8 s of a 3.7 s `dbt run` with nothing to do, 0.65 s
# of a 13 s step of 16 models (bench/results/nexmark_findings.md, "gc.freeze"). Frozen, they are
# left out of every later collection. Once per process (a module runs once); STREAMSQL_GC_FREEZE=0
# leaves the collector as it is.
if os.environ.get("STREAMSQL_GC_FREEZE", "1") != "0":
    gc.freeze()
