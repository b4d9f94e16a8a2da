"""Tables on an object store: where a warehouse URI puts them, and S3A for the embedded session.

`warehouse_dir: s3a://bucket/prefix` puts the tables under `s3a://bucket/prefix/tables/` (Spark's
`spark.sql.warehouse.dir`); what must stay on a local disk (the embedded Derby metastore, the
warehouse lock, Spark's log, the warm server's files) goes to the profile's `local_dir`, by
default a folder of the project named after the URI (`warehouse/s3a-bucket/prefix`).

Spark reaches S3 through Hadoop's S3A connector, `hadoop-aws`, which pyspark does not ship. It is
resolved from Maven Central like Delta's jars, at the Hadoop version of pyspark's own client
(`hadoop-client-api-3.5.0.jar`), only when a session uses S3A: its warehouse is on `s3a://`, or
the profile sets one of S3A's settings (`spark.hadoop.fs.s3a.*`, for a model's `location_root`
on S3 beside a local warehouse). hadoop-aws depends on the AWS SDK's `bundle` jar (every AWS
service's client, 686 MB for 2.35.4); what S3A loads is the S3 client, the transfer manager and
what they depend on (about 12 MB), so the bundle is excluded and those modules are named instead.
Their dependencies that Spark ships already in newer versions (Netty, Apache HttpClient, commons-
codec) are excluded too: Spark's own copies serve them.

The endpoint and its region may come from the environment as the AWS tools read it
(`AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL`, `AWS_REGION` or `AWS_DEFAULT_REGION`) when the profile
does not set them; an endpoint that is not AWS's own is then reached path-style (MinIO, Ceph,
moto). Credentials are S3A's to find: the profile's `spark.hadoop.fs.s3a.access.key` and
`secret.key`, else AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN) of the
environment, else an instance's role; none is copied into Spark's settings here.
"""

from __future__ import annotations

import os
import re
from typing import Dict, Mapping, Optional, Tuple
from urllib.parse import urlparse

from dbt_common.exceptions import DbtRuntimeError

# pyspark 4.2's Hadoop client, and the AWS SDK v2 that hadoop-aws of that version is built and
# tested with (hadoop-project 3.5.0's aws-java-sdk-v2.version).
HADOOP_VERSION = "3.5.0"
AWS_SDK_VERSION = "2.35.4"
S3A_PACKAGES = (
    f"org.apache.hadoop:hadoop-aws:{HADOOP_VERSION}",
    f"software.amazon.awssdk:s3:{AWS_SDK_VERSION}",
    f"software.amazon.awssdk:s3-transfer-manager:{AWS_SDK_VERSION}",
)
# `groupId:artifactId` each (spark.jars.excludes takes no wildcard).
S3A_EXCLUDES = (
    "software.amazon.awssdk:bundle",
    *(
        f"io.netty:netty-{name}"
        for name in (
            "buffer",
            "codec",
            "codec-http",
            "codec-http2",
            "common",
            "handler",
            "resolver",
            "transport",
            "transport-classes-epoll",
            "transport-native-unix-common",
        )
    ),
    "org.apache.httpcomponents:httpclient",
    "org.apache.httpcomponents:httpcore",
    "commons-codec:commons-codec",
)
S3A_PREFIX = "spark.hadoop.fs.s3a."
# What the embedded session says at its start when it uses S3A, by the log store s3a:// tables
# have: the adapter's (Delta's S3 store, listing from a version: spark/log_store.py) or another.
S3_LOG_STORE_NOTE = (
    "Tables on s3a:// use {store}: it makes one driver's commits safe, not two drivers' at once "
    "(docs/deployment.md, 'Writers')"
)
ADAPTER_S3_STORE = (
    "the adapter's ListFromS3SingleDriverLogStore (Delta's S3SingleDriverLogStore, its "
    "listings starting at the version asked for)"
)


def s3_log_store_note(conf: Mapping[str, str], adapter_store: str) -> str:
    """The start's line on the log store of s3a:// tables (`adapter_store`: the class name the
    adapter sets when it can)."""
    chosen = conf.get("spark.delta.logStore.s3a.impl") or conf.get("spark.delta.logStore.class")
    if chosen == adapter_store:
        return S3_LOG_STORE_NOTE.format(store=ADAPTER_S3_STORE)
    if chosen:
        return f"Tables on s3a:// use the log store the profile names, {chosen}"
    return S3_LOG_STORE_NOTE.format(
        store="Delta's S3SingleDriverLogStore, which lists each table's whole _delta_log/ "
        "(the adapter's own store could not be compiled)"
    )


WAREHOUSE_SETTING = "spark.sql.warehouse.dir"
# Object stores Hadoop has a FileSystem for, by the scheme of their URIs. Only s3a is tested
# here (docs/deployment.md); the others need their connector's jars named in the profile.
OBJECT_STORE_SCHEMES = ("s3a", "abfs", "abfss", "gs", "wasb", "wasbs", "oss", "cos")
# Schemes with no FileSystem in Hadoop 3 (s3n, s3 outside EMR): s3a is meant.
S3A_MEANT = ("s3", "s3n")


def uri_scheme(location: str) -> str:
    """The scheme of a table location (`s3a`), "" for a local path."""
    match = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)://", location)
    return match.group(1).lower() if match else ""


def is_object_store(location: Optional[str]) -> bool:
    """Whether a location is not on this machine's file system (any URI but `file:`)."""
    return bool(location) and uri_scheme(location or "") not in ("", "file")


def warehouse_location(configured: str, project: str) -> Tuple[str, Optional[str]]:
    """(the local directory, the tables' URI or None) of a profile's `warehouse_dir`.

    A local path is both (its tables are its `tables/` folder, as before): (path, None)."""
    scheme = uri_scheme(configured)
    if scheme in S3A_MEANT:
        raise DbtRuntimeError(
            f"warehouse_dir {configured!r}: Hadoop reaches S3 through its S3A connector, whose "
            f"URIs begin with s3a://. Write s3a://{configured.split('://', 1)[1]}."
        )
    if scheme not in OBJECT_STORE_SCHEMES:
        raise DbtRuntimeError(
            f"warehouse_dir {configured!r} must be a local directory or an object store's URI "
            f"({', '.join(s + '://' for s in OBJECT_STORE_SCHEMES)}). To keep the tables on "
            "another shared file system, set server_side_parameters: "
            f"{{spark.sql.warehouse.dir: {configured}}} and keep warehouse_dir local."
        )
    parsed = urlparse(configured)
    if not parsed.netloc:
        raise DbtRuntimeError(
            f"warehouse_dir {configured!r} names no bucket: write {scheme}://<bucket>/<prefix>."
        )
    parts = [f"{scheme}-{parsed.netloc}", *(p for p in parsed.path.split("/") if p)]
    local = os.path.join(project, "warehouse", *(re.sub(r"[^\w.@-]", "_", p) for p in parts))
    return local, configured.rstrip("/") + "/tables"


def uses_s3a(conf: Mapping[str, str]) -> bool:
    """Whether a session with these settings reads or writes S3 through S3A."""
    return uri_scheme(conf.get(WAREHOUSE_SETTING, "")) == "s3a" or any(
        key.startswith(S3A_PREFIX) for key in conf
    )


def s3a_environment(conf: Mapping[str, str], environ: Mapping[str, str]) -> Dict[str, str]:
    """S3A's endpoint and region from the environment, where the settings do not name them."""
    found: Dict[str, str] = {}
    endpoint = environ.get("AWS_ENDPOINT_URL_S3") or environ.get("AWS_ENDPOINT_URL")
    if endpoint and S3A_PREFIX + "endpoint" not in conf:
        found[S3A_PREFIX + "endpoint"] = endpoint
        host = urlparse(endpoint if "://" in endpoint else "//" + endpoint).hostname or ""
        if not host.endswith(".amazonaws.com") and S3A_PREFIX + "path.style.access" not in conf:
            found[S3A_PREFIX + "path.style.access"] = "true"
    region = environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION")
    if region and S3A_PREFIX + "endpoint.region" not in conf:
        found[S3A_PREFIX + "endpoint.region"] = region
    return found


def s3a_settings(conf: Mapping[str, str], environ: Mapping[str, str]) -> Dict[str, str]:
    """What a session that uses S3A adds to its settings ({} for one that does not): the jars'
    exclusions, and the endpoint and region from the environment."""
    if not uses_s3a(conf):
        return {}
    return {"spark.jars.excludes": ",".join(S3A_EXCLUDES), **s3a_environment(conf, environ)}


def maven_packages(delta: str, conf: Mapping[str, str]) -> str:
    """The `spark.jars.packages` of a session: Delta's, and S3A's when the session uses it."""
    return ",".join([delta, *S3A_PACKAGES]) if uses_s3a(conf) else delta
