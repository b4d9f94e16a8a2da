"""Shared fixtures: one embedded Spark session and one warehouse for the whole test run."""

import os

import pytest

# dbt-tests-adapter's fixtures (project, unique_schema, ...)
pytest_plugins = ["dbt.tests.fixtures.project"]

# Tests move a few rows per query: compiling code and adaptive planning would cost more than they
# save (about 3x on a 2-core machine). Results are the same either way.
SMALL_DATA_SETTINGS = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.sql.shuffle.partitions": "1",
    "spark.sql.adaptive.enabled": "false",
}


@pytest.fixture(scope="session")
def warehouse_dir(tmp_path_factory):
    """All in-process dbt runs share one warehouse: a JVM holds one Spark session."""
    configured = os.environ.get("STREAMSQL_TEST_WAREHOUSE")
    if configured:
        return os.path.abspath(configured)
    return str(tmp_path_factory.mktemp("warehouse"))


@pytest.fixture(scope="module")
def small_spark(warehouse_dir):
    """A session of its own (temp views, settings) on the test run's one Spark, the adapter's,
    whichever test starts it first, with SMALL_DATA_SETTINGS: for the tests that query Spark
    directly rather than through dbt."""
    from dbt.adapters.streamsql.connections import with_runtime_settings
    from dbt.adapters.streamsql.spark.embedded_spark import SessionSettings, get_spark_session

    spark = get_spark_session(SessionSettings(warehouse_dir, "local[2]", SMALL_DATA_SETTINGS, 600))
    return with_runtime_settings(spark.newSession(), SMALL_DATA_SETTINGS)


@pytest.fixture(scope="class")
def dbt_profile_target(warehouse_dir):
    return {
        "type": "streamsql",
        "method": "session",
        "keep_warm": False,  # in the test process: one JVM for the whole run
        "warehouse_dir": warehouse_dir,
        "threads": 1,
        "server_side_parameters": SMALL_DATA_SETTINGS,
    }


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory):
    """A Spark Connect server with Delta for the tests that also run over `method: connect`:
    started the way the warm server is (its own warehouse and metastore, loopback, a token),
    once for the whole run. Yields the profile target that reaches it."""
    from dbt.adapters.streamsql.spark import warm_server
    from dbt.adapters.streamsql.spark.embedded_spark import SessionSettings

    warehouse = str(tmp_path_factory.mktemp("connect_server"))
    settings = SessionSettings(
        warehouse_dir=warehouse,
        master="local[2]",
        server_side_parameters={"spark.driver.memory": "2g", **SMALL_DATA_SETTINGS},
        lock_timeout=600,
    )
    paths = warm_server.ServerPaths(warehouse)
    try:
        state = warm_server.ensure_server(settings, idle_timeout=7200)
        yield {
            "type": "streamsql",
            "method": "connect",
            "host": "localhost",
            "port": state.port,
            "token": warm_server.read_token(paths),
            "threads": 1,
        }
    finally:
        warm_server.stop_server(paths)
