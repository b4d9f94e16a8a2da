#!/usr/bin/env python
"""Start Spark servers on this machine from the pyspark installation, configured for dbt-streamsql.

    python scripts/spark_servers.py cluster --dir /tmp/spark            # standalone master + worker
    python scripts/spark_servers.py thrift --dir /tmp/spark [--master spark://127.0.0.1:7077]

Each command starts its servers on 127.0.0.1, prints how to point a profile at them, and stops them
on Ctrl-C. The Thrift Server gets the same Delta settings as the embedded session
(`dbt/adapters/streamsql/spark/embedded_spark.py`): Delta's SQL extensions and catalog, Delta's jars
from Maven Central, a Derby metastore and the tables under its own warehouse directory, the change
data feed on for new tables, Delta as the default format.

`pip install pyspark` ships Spark's jars (including the Thrift Server's) and `bin/spark-class` and
`bin/spark-submit`, but not `sbin/start-master.sh` and friends: the servers are started here with
`spark-class` / `spark-submit` directly. The tests (`tests/functional/test_cluster.py`) use the
classes below the same way.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Dict, List, Optional, Sequence

LOOPBACK = "127.0.0.1"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
THRIFT_SERVER_CLASS = "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2"


class ServerError(RuntimeError):
    """A server did not start; the message carries the tail of its log."""


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


def port_open(port: int, host: str = LOOPBACK) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(1)
        return probe.connect_ex((host, port)) == 0


def tail(path: Path, lines: int = 60) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])


def server_env(log_dir: Path) -> Dict[str, str]:
    env = dict(os.environ)
    home = spark_home()
    env.update(
        {
            "SPARK_HOME": str(home),
            "SPARK_LOCAL_IP": LOOPBACK,
            "SPARK_LOCAL_HOSTNAME": LOOPBACK,
            "SPARK_MASTER_HOST": LOOPBACK,
            "SPARK_LOG_DIR": str(log_dir),
            "SPARK_NO_DAEMONIZE": "1",
        }
    )
    # A pyspark installation has no conf/ directory; Spark's defaults are fine without one.
    env.pop("SPARK_CONF_DIR", None)
    return env


class SparkProcess:
    """One JVM started in its own process group, its output in `log`."""

    def __init__(self, name: str, command: Sequence[str], log: Path, env: Dict[str, str]) -> None:
        self.name = name
        self.command = list(command)
        self.log = log
        self.env = env
        self.process: Optional[subprocess.Popen] = None

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as output:
            self.process = subprocess.Popen(
                self.command,
                stdout=output,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=str(self.log.parent),
                start_new_session=True,
            )

    @property
    def pid(self) -> Optional[int]:
        return self.process.pid if self.process else None

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def fail(self, why: str) -> "ServerError":
        return ServerError(
            f"{self.name} {why}. Command: {' '.join(self.command)}\n"
            f"Last lines of {self.log}:\n{tail(self.log)}"
        )

    def stop(self, grace: float = 20.0) -> None:
        """Stop the process and everything it started (its process group)."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        self._signal(signal.SIGKILL)  # whatever is left in the group (a JVM's children)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def _signal(self, sig: int) -> None:
        assert self.process is not None
        try:
            os.killpg(self.process.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def wait_until(check, process: SparkProcess, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not process.running():
            raise process.fail(f"exited (code {process.process.returncode}) before {what}")
        if check():
            return
        time.sleep(1)
    raise process.fail(f"did not get to {what} within {timeout:.0f} s")


class StandaloneCluster:
    """A standalone master and one worker on loopback.

    Args:
        root: directory for the servers' logs and the worker's scratch space.
        worker_cores / worker_memory: what the worker offers to applications.
    """

    def __init__(self, root: Path, worker_cores: int = 2, worker_memory: str = "2g") -> None:
        self.root = Path(root)
        self.worker_cores = worker_cores
        self.worker_memory = worker_memory
        self.port = free_port()
        self.ui_port = free_port()
        self.master: Optional[SparkProcess] = None
        self.worker: Optional[SparkProcess] = None

    @property
    def url(self) -> str:
        return f"spark://{LOOPBACK}:{self.port}"

    def start(self, timeout: float = 180) -> "StandaloneCluster":
        env = server_env(self.root / "logs")
        spark_class = str(spark_home() / "bin" / "spark-class")
        self.master = SparkProcess(
            "Spark standalone master",
            [
                spark_class,
                MASTER_CLASS,
                "--host",
                LOOPBACK,
                "--port",
                str(self.port),
                "--webui-port",
                str(self.ui_port),
            ],
            self.root / "logs" / "master.log",
            env,
        )
        try:
            self._start_servers(env, spark_class, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_servers(self, env: Dict[str, str], spark_class: str, timeout: float) -> None:
        assert self.master is not None
        self.master.start()
        wait_until(lambda: self.status() is not None, self.master, timeout, "serving")
        work_dir = self.root / "work"
        work_dir.mkdir(parents=True, exist_ok=True)
        self.worker = SparkProcess(
            "Spark standalone worker",
            [
                spark_class,
                WORKER_CLASS,
                "--host",
                LOOPBACK,
                "--port",
                str(free_port()),
                "--webui-port",
                str(free_port()),
                "--cores",
                str(self.worker_cores),
                "--memory",
                self.worker_memory,
                "--work-dir",
                str(work_dir),
                self.url,
            ],
            self.root / "logs" / "worker.log",
            env,
        )
        self.worker.start()
        wait_until(
            lambda: (self.status() or {}).get("aliveworkers", 0) >= 1,
            self.worker,
            timeout,
            f"registering with the master at {self.url}",
        )

    def status(self) -> Optional[dict]:
        """The master's JSON status page, or None while it does not answer."""
        try:
            with urllib.request.urlopen(
                f"http://{LOOPBACK}:{self.ui_port}/json/", timeout=2
            ) as response:
                return json.loads(response.read().decode())
        except (OSError, ValueError):
            return None

    def stop(self) -> None:
        for process in (self.worker, self.master):
            if process is not None:
                process.stop()

    def __enter__(self) -> "StandaloneCluster":
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


def resolve_jars(packages: str, ivy_settings: Optional[str], log: Path) -> List[str]:
    """The local paths of Maven `packages` and their dependencies, resolved as spark-submit does.

    Runs Spark's own resolver (Ivy, with the embedded session's ivysettings.xml) in a short-lived
    JVM that starts no SparkContext, its output in `log`; the jars land in Ivy's cache.
    """
    from pyspark import SparkConf
    from pyspark.java_gateway import launch_gateway

    conf = SparkConf(loadDefaults=False).set("spark.jars.packages", packages)
    if ivy_settings:
        conf.set("spark.jars.ivySettings", ivy_settings)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as output:
        try:
            gateway = launch_gateway(
                conf, popen_kwargs={"stdout": output, "stderr": subprocess.STDOUT}
            )
        except Exception as exc:
            raise ServerError(
                f"Could not resolve {packages} (Ivy, Maven Central): {exc}\n"
                f"Last lines of {log}:\n{tail(log)}"
            ) from exc
    try:
        jars = gateway.jvm.System.getProperty("spark.jars") or ""
    finally:
        gateway.shutdown()
        gateway.proc.stdin.close()  # the gateway JVM exits when its stdin closes
        gateway.proc.wait(timeout=60)
    return [
        urllib.parse.urlparse(jar).path if jar.startswith("file:") else jar
        for jar in jars.split(",")
        if jar
    ]


def artifact_name(jar: str, ivy: bool = False) -> str:
    """A jar's artifact without version: `delta-storage` for Spark's `delta-storage-4.4.0.jar`
    and (`ivy`) for Ivy's `io.delta_delta-storage-4.4.0.jar` (`<organization>_` first)."""
    name = Path(jar).name
    if ivy:
        name = name.split("_", 1)[-1]
    return re.sub(r"-\d[\w.]*(-\d+)?\.jar$", "", name)


def driver_class_path(jars: Sequence[str]) -> List[str]:
    """The jars Spark does not ship itself (Delta's own), for the driver's system classpath.

    A jar on the driver's classpath comes before Spark's own, so a dependency Spark already has
    (Jackson, Parquet, Hadoop) stays out: Spark's version wins, as it does in the embedded
    session where the package jars sit in a child class loader.
    """
    shipped = {artifact_name(j.name) for j in (spark_home() / "jars").glob("*.jar")}
    if "jcl-over-slf4j" in shipped:  # Spark's stand-in for commons-logging's classes
        shipped.add("commons-logging")
    return [jar for jar in jars if artifact_name(jar, ivy=True) not in shipped]


def thrift_server_conf(
    warehouse_dir: Path, overrides: Optional[Dict[str, str]] = None
) -> Dict[str, str]:
    """The embedded session's settings (Delta, metastore, warehouse), for a Thrift Server."""
    from dbt.adapters.streamsql.spark.embedded_spark import SessionSettings

    settings = SessionSettings(
        warehouse_dir=str(warehouse_dir),
        master="",
        lock_timeout=0,
        server_side_parameters=dict(overrides or {}),
    )
    conf = settings.spark_conf()
    conf["spark.app.name"] = "dbt-streamsql Thrift Server"
    return conf


class ThriftServer:
    """A Spark Thrift Server (HiveThriftServer2) with Delta Lake, on loopback.

    Args:
        root: directory for the log; the warehouse (Derby metastore + tables) is `root/warehouse`
            unless `warehouse_dir` says otherwise. Derby admits one JVM: nothing else may open
            this warehouse while the server runs.
        master: `local[2]` or a standalone cluster's `spark://` URL.
        conf: Spark settings that override the defaults (e.g. executor memory).
    """

    def __init__(
        self,
        root: Path,
        master: str = "local[2]",
        conf: Optional[Dict[str, str]] = None,
        warehouse_dir: Optional[Path] = None,
    ) -> None:
        self.root = Path(root)
        self.master = master
        self.warehouse_dir = Path(warehouse_dir or self.root / "warehouse").resolve()
        self.port = free_port()
        defaults = {"spark.driver.memory": "2g", "spark.executor.memory": "1g"}
        self.conf = thrift_server_conf(self.warehouse_dir, {**defaults, **(conf or {})})
        self.process: Optional[SparkProcess] = None

    @property
    def log(self) -> Path:
        return self.root / "logs" / "thrift-server.log"

    def command(self) -> List[str]:
        """The spark-submit command line.

        Delta's jars go on the driver's system classpath, not only `spark.jars.packages`: the
        Thrift Server closes a client session's Hive session state, and with it the class loader
        that --packages jars live in, so the next client would fail with NoClassDefFoundError /
        "Failed to find the data source: delta". `spark.jars` still ships them to executors.
        """
        conf = dict(self.conf)
        packages = conf.pop("spark.jars.packages", None)
        ivy_settings = conf.pop("spark.jars.ivySettings", None)
        if packages:
            conf["spark.jars"] = ",".join(resolve_jars(packages, ivy_settings, self.log))
        jars = [jar for jar in conf.get("spark.jars", "").split(",") if jar]
        command = [
            str(spark_home() / "bin" / "spark-submit"),
            "--master",
            self.master,
            "--class",
            THRIFT_SERVER_CLASS,
            "--name",
            conf.pop("spark.app.name"),
            "--driver-memory",
            conf.pop("spark.driver.memory"),
            "--driver-class-path",
            ":".join(driver_class_path(jars)),
        ]
        # spark-submit applies the driver's JVM options before the JVM starts only when given
        # as its own flag (a --conf would be too late for Derby's home directory).
        command += ["--driver-java-options", conf.pop("spark.driver.extraJavaOptions")]
        for key, value in conf.items():
            command += ["--conf", f"{key}={value}"]
        command += [
            "spark-internal",
            "--hiveconf",
            f"hive.server2.thrift.port={self.port}",
            "--hiveconf",
            f"hive.server2.thrift.bind.host={LOOPBACK}",
            "--hiveconf",
            f"hive.server2.logging.operation.log.location={self.root / 'logs' / 'operations'}",
        ]
        return command

    def start(self, timeout: float = 300) -> "ThriftServer":
        self.warehouse_dir.mkdir(parents=True, exist_ok=True)
        self.process = SparkProcess(
            "Spark Thrift Server", self.command(), self.log, server_env(self.root / "logs")
        )
        self.process.start()
        try:
            wait_until(
                lambda: port_open(self.port),
                self.process,
                timeout,
                f"listening on {LOOPBACK}:{self.port}",
            )
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def __enter__(self) -> "ThriftServer":
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=["cluster", "thrift"])
    parser.add_argument("--dir", default="spark-servers", help="logs, scratch and warehouse")
    parser.add_argument("--master", default="local[2]", help="the Thrift Server's master")
    parser.add_argument("--worker-cores", type=int, default=2)
    parser.add_argument("--worker-memory", default="2g")
    args = parser.parse_args(argv)
    root = Path(args.dir).resolve()
    if args.kind == "cluster":
        server = StandaloneCluster(root, args.worker_cores, args.worker_memory)
        server.start()
        print(
            f"standalone master {server.url} (web UI http://{LOOPBACK}:{server.ui_port}); "
            f"in profiles.yml: method: session, master: {server.url}"
        )
    else:
        server = ThriftServer(root, master=args.master)  # type: ignore[assignment]
        server.start()
        print(
            f"Thrift Server on {LOOPBACK}:{server.port} (warehouse {server.warehouse_dir}); "
            f"in profiles.yml: method: thrift, host: {LOOPBACK}, port: {server.port}, user: dbt"
        )
    print(f"logs in {root / 'logs'}; Ctrl-C stops", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
