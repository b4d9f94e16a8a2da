"""The Spark host: starting a Spark driver on this machine and keeping it warm.

embedded_spark.py starts the process-wide SparkSession `method: session` runs on (Delta, the
warehouse's Derby metastore and its lock, Delta's jars through Ivy with ivysettings.xml);
warm_server.py keeps that session alive as a Spark Connect server that later `dbt` processes
reuse; table_warmer.py is the server's reader of tables that changed between runs; log_store.py
compiles and installs the Delta log store of jvm/ (its Java sources, built with `javac` on first
use and shipped as package data).

The dbt-facing modules (impl.py, connections.py, cli.py) use this room; nothing here imports
them, execution/ or planning/ (tests/unit/test_architecture.py).
"""
