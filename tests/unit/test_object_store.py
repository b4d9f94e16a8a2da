"""A warehouse on an object store, without Spark: where its parts go, S3A's jars and settings."""

import os

import pytest
from dbt.adapters.spark.connections import SparkConnectionMethod
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.streamsql import connections, object_store
from dbt.adapters.streamsql.connections import StreamSQLCredentials
from dbt.adapters.streamsql.spark import embedded_spark
from dbt.adapters.streamsql.spark.embedded_spark import SessionSettings


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.setattr(connections, "project_dir", lambda: str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # no jar list remembered
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def credentials(**fields):
    return StreamSQLCredentials(schema="s", method=SparkConnectionMethod.SESSION, **fields)


def test_object_store_warehouse_puts_tables_there_and_the_metastore_on_local_disk(project):
    settings = credentials(warehouse_dir="s3a://lake/prod/wh").session_settings()
    local = str(project / "warehouse" / "s3a-lake" / "prod" / "wh")
    assert settings.warehouse_dir == local
    conf = settings.spark_conf()
    assert conf["spark.sql.warehouse.dir"] == "s3a://lake/prod/wh/tables"
    assert (
        f"databaseName={local}/metastore_db" in conf["spark.hadoop.javax.jdo.option.ConnectionURL"]
    )
    # the lock, Spark's log and the warm server's files follow the local directory
    assert credentials(warehouse_dir="s3a://lake/prod/wh").unique_field == local
    chosen = credentials(warehouse_dir="s3a://lake/prod/wh", local_dir="state").session_settings()
    assert chosen.warehouse_dir == str(project / "state")


def test_s3a_jars_are_added_only_for_a_session_that_uses_s3a(project):
    delta = embedded_spark.delta_maven_coordinate()
    local = credentials(warehouse_dir="wh").session_settings().spark_conf()
    assert local["spark.jars.packages"] == delta
    assert "spark.jars.excludes" not in local
    assert not any(key.startswith("spark.hadoop.fs.s3a.") for key in local)

    on_s3 = credentials(warehouse_dir="s3a://lake/wh").session_settings().spark_conf()
    packages = on_s3["spark.jars.packages"].split(",")
    assert packages[0] == delta
    assert "org.apache.hadoop:hadoop-aws:3.5.0" in packages
    assert not any(p.startswith("software.amazon.awssdk:bundle") for p in packages)
    assert "software.amazon.awssdk:bundle" in on_s3["spark.jars.excludes"].split(",")

    # a local warehouse with models on S3 (location_root): S3A's settings say so
    beside = SessionSettings(
        str(project / "wh"), "local[2]", {"spark.hadoop.fs.s3a.endpoint": "http://s3:9000"}, 60
    ).spark_conf()
    assert "org.apache.hadoop:hadoop-aws:3.5.0" in beside["spark.jars.packages"]


def test_the_hadoop_version_is_pysparks_own():
    import pyspark

    jars = os.listdir(os.path.join(os.path.dirname(pyspark.__file__), "jars"))
    assert f"hadoop-client-api-{object_store.HADOOP_VERSION}.jar" in jars


def test_endpoint_and_region_come_from_the_environment_unless_the_profile_names_them(
    project, monkeypatch
):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-copied")
    conf = credentials(warehouse_dir="s3a://lake/wh").session_settings().spark_conf()
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-1"
    assert "not-copied" not in conf.values()  # credentials are S3A's to read from the environment

    named = credentials(
        warehouse_dir="s3a://lake/wh",
        server_side_parameters={
            "spark.hadoop.fs.s3a.endpoint": "https://s3.eu-west-1.amazonaws.com"
        },
    )
    conf = named.session_settings().spark_conf()
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "https://s3.eu-west-1.amazonaws.com"
    assert "spark.hadoop.fs.s3a.path.style.access" not in conf
    monkeypatch.setenv("AWS_ENDPOINT_URL", "https://s3.eu-west-1.amazonaws.com")
    assert object_store.s3a_environment({}, os.environ) == {
        "spark.hadoop.fs.s3a.endpoint": "https://s3.eu-west-1.amazonaws.com",
        "spark.hadoop.fs.s3a.endpoint.region": "eu-west-1",
    }


@pytest.mark.parametrize(
    "uri, said",
    [
        ("s3://lake/wh", "begin with s3a://. Write s3a://lake/wh."),
        ("s3a:///wh", "names no bucket"),
        ("ftp://host/wh", "must be a local directory or an object store's URI"),
    ],
)
def test_uris_of_no_object_store_are_refused_saying_what_to_write(project, uri, said):
    with pytest.raises(DbtRuntimeError, match=said.replace(".", r"\.")):
        credentials(warehouse_dir=uri).session_settings()


def test_locations_on_this_machine_are_not_object_stores():
    assert not object_store.is_object_store("/tmp/wh/tables/t")
    assert not object_store.is_object_store("file:/tmp/wh/tables/t")
    assert object_store.is_object_store("s3a://lake/wh/tables/t")
    assert object_store.uri_scheme("ABFSS://c@a.dfs.core.windows.net/x") == "abfss"
