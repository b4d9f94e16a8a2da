"""Shared fixtures: one embedded Spark session and one warehouse for the whole test run."""

import os

import pytest

# dbt-tests-adapter's fixtures (project, unique_schema, ...)
pytest_plugins = ["dbt.tests.fixtures.project"]


@pytest.fixture(scope="session")
def warehouse_dir(tmp_path_factory):
    """All in-process dbt runs share one warehouse: a JVM holds one Spark session."""
    configured = os.environ.get("STREAMSQL_TEST_WAREHOUSE")
    if configured:
        return os.path.abspath(configured)
    return str(tmp_path_factory.mktemp("warehouse"))


@pytest.fixture(scope="class")
def dbt_profile_target(warehouse_dir):
    return {
        "type": "streamsql",
        "method": "session",
        "keep_warm": False,  # in the test process: one JVM for the whole run
        "warehouse_dir": warehouse_dir,
        "threads": 1,
        # Tests move a few rows per query: compiling code and adaptive planning would cost more
        # than they save (about 3x on a 2-core machine). Results are the same either way.
        "server_side_parameters": {
            "spark.sql.codegen.wholeStage": "false",
            "spark.sql.codegen.factoryMode": "NO_CODEGEN",
            "spark.sql.shuffle.partitions": "1",
            "spark.sql.adaptive.enabled": "false",
        },
    }
