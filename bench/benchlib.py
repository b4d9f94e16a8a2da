"""Helpers shared by the benchmarks in bench/: dbt in-process, CPU time, machine record.

Used by step_vs_rebuild.py and nexmark.py (both run as scripts from bench/, so this module is
importable as `benchlib`).
"""

from __future__ import annotations

import gzip
import json
import os
import platform
import re
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import yaml

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent


# -- running dbt in-process ---------------------------------------------------------------------


@dataclass
class Statement:
    sql: str
    started: float
    status_seconds: Optional[float] = None
    span: Optional[float] = None  # from this statement's start to the next one's (or node end)


@dataclass
class NodeRun:
    name: str
    status: str
    execution_time: float
    adapter: Dict[str, Any]
    statements: List[Statement] = field(default_factory=list)
    cpu_s: Optional[float] = None  # CPU time of this process and the JVM while the node ran
    message: Optional[str] = None  # dbt's message when the node did not succeed
    started: Optional[float] = None  # time.monotonic() at the node's start and end
    finished: Optional[float] = None


class ProcessCpu:
    """CPU seconds (user + system) used so far by this process and its descendants (the JVM).

    Wall times depend on what else the machine runs; CPU time much less so.
    """

    def __init__(self) -> None:
        self.tick = os.sysconf("SC_CLK_TCK")
        self.pids = self._descendants(os.getpid())

    @staticmethod
    def _stat(pid: int) -> List[str]:
        text = Path(f"/proc/{pid}/stat").read_text()
        return text[text.rindex(")") + 2 :].split()  # fields after "pid (comm)"

    def _descendants(self, root: int) -> List[int]:
        parents: Dict[int, int] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    parents[int(entry.name)] = int(self._stat(int(entry.name))[1])
                except (OSError, ValueError, IndexError):
                    pass
        found, frontier = [root], [root]
        while frontier:
            frontier = [pid for pid, parent in parents.items() if parent in frontier]
            found += frontier
        return found

    def seconds(self) -> float:
        total = 0
        for pid in self.pids:
            try:
                fields = self._stat(pid)
            except OSError:
                continue
            total += int(fields[11]) + int(fields[12])  # utime, stime
        return total / self.tick


class Dbt:
    """dbt in this process; collects each node's SQL statements from dbt's events."""

    def __init__(self, work: Path) -> None:
        from dbt.cli.main import dbtRunner

        self.work = work
        self.cpu = ProcessCpu()
        self._events: List[Tuple[float, str, str, Any]] = []
        self._cpu_at: Dict[Tuple[str, str], float] = {}
        self._time_at: Dict[Tuple[str, str], float] = {}
        self.runner = dbtRunner(callbacks=[self._on_event])

    def _on_event(self, msg: Any) -> None:
        name = msg.info.name
        if name in ("SQLQuery", "SQLQueryStatus", "NodeStart", "NodeFinished"):
            node = getattr(getattr(msg.data, "node_info", None), "unique_id", "") or ""
            self._events.append((time.monotonic(), name, node.split(".")[-1], msg.data))
            if name in ("NodeStart", "NodeFinished"):
                self._cpu_at[(name, node.split(".")[-1])] = self.cpu.seconds()
                self._time_at[(name, node.split(".")[-1])] = time.monotonic()

    def parse(self, extra: Sequence[str] = ()) -> None:
        """`dbt parse` (untimed): the next runs with the same `extra` (say, --vars) reuse it."""
        args = ["parse", *extra, "--project-dir", str(self.work), "--profiles-dir", str(self.work)]
        result = self.runner.invoke([*args, "--quiet"])
        if not result.success:
            raise RuntimeError(f"dbt {' '.join(args)} failed: {result.exception}")

    def run(
        self, select: Sequence[str], extra: Sequence[str] = (), check: bool = True
    ) -> Tuple[float, Dict[str, NodeRun]]:
        """One `dbt run` of `select`; with check=False a failed node is returned, not raised."""
        self._events = []
        self._cpu_at = {}
        self._time_at = {}
        args = [
            "run",
            "--select",
            *select,
            *extra,
            "--project-dir",
            str(self.work),
            "--profiles-dir",
            str(self.work),
            "--quiet",
            "--log-file-max-bytes",
            "0",
        ]
        started = time.monotonic()
        result = self.runner.invoke(args)
        wall = time.monotonic() - started
        if not result.success and (check or result.result is None):
            raise RuntimeError(f"dbt {' '.join(args)} failed: {result.exception or result.result}")
        nodes: Dict[str, NodeRun] = {}
        for item in result.result.results:
            nodes[item.node.name] = NodeRun(
                item.node.name,
                str(item.status),
                float(item.execution_time),
                dict(item.adapter_response or {}),
            )
            if item.message and str(item.status) not in ("success", "RunStatus.Success"):
                nodes[item.node.name].message = str(item.message)
            start = self._cpu_at.get(("NodeStart", item.node.name))
            end = self._cpu_at.get(("NodeFinished", item.node.name))
            if start is not None and end is not None:
                nodes[item.node.name].cpu_s = end - start
            nodes[item.node.name].started = self._time_at.get(("NodeStart", item.node.name))
            nodes[item.node.name].finished = self._time_at.get(("NodeFinished", item.node.name))
        self._attach_statements(nodes)
        return wall, nodes

    def _attach_statements(self, nodes: Dict[str, NodeRun]) -> None:
        current: Dict[str, Statement] = {}
        for at, name, node, data in self._events:
            if node not in nodes:
                continue
            previous = current.get(node)
            ends_previous = name in ("SQLQuery", "NodeFinished")
            if ends_previous and previous is not None and previous.span is None:
                previous.span = at - previous.started
            if name == "SQLQuery":
                statement = Statement(clean_sql(data.sql), at)
                nodes[node].statements.append(statement)
                current[node] = statement
            elif name == "SQLQueryStatus" and previous is not None:
                previous.status_seconds = float(data.elapsed)


def clean_sql(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)  # dbt's query comment
    text = re.sub(r"_streamsql_[A-Za-z0-9_]*?_[0-9a-f]{8}_", "$", text)  # step-local view names
    text = re.sub(r"(userMetadata=).*", r"\1<step record>", text, flags=re.S)
    text = re.sub(r"(txnAppId=)\S+", r"\1<id>", text)
    return re.sub(r"\s+", " ", text).strip()


def statement_shape(sql_text: str) -> str:
    """What stays the same from step to step (numbers, ids and the step record vary)."""
    return re.sub(r"\d+", "N", sql_text)


def statement_label(sql_text: str, width: int = 110) -> str:
    return sql_text if len(sql_text) <= width else sql_text[: width - 3] + "..."


# -- measuring ----------------------------------------------------------------------------------


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def scalar(spark: Any, query: str) -> Any:
    return spark.sql(query).collect()[0][0]


def multiset_fingerprint(spark: Any, query: str, columns: Sequence[str]) -> Tuple[Any, ...]:
    """One pass over `query`: its row count and two sums of 64-bit hashes of its rows (in a
    DECIMAL, so no sum overflows). Equal multisets give equal fingerprints; different ones
    give different fingerprints but with a negligible chance (a cheap check after every step;
    `multiset_difference` is the exact one)."""
    cols = ", ".join(columns)
    row = spark.sql(
        f"SELECT COUNT(*) AS n, SUM(CAST(xxhash64({cols}) AS DECIMAL(38, 0))) AS a, "
        f"SUM(CAST(hash({cols}) AS DECIMAL(38, 0))) AS b FROM ({query})"
    ).collect()[0]
    return (int(row["n"]), row["a"], row["b"])


def multiset_difference(spark: Any, left: str, right: str) -> Tuple[int, int]:
    """(rows only in `left`, rows only in `right`) of two queries compared as multisets
    (EXCEPT ALL both ways: a row twice in one and once in the other counts once)."""
    only_left = int(scalar(spark, f"SELECT COUNT(*) FROM ({left} EXCEPT ALL {right})"))
    only_right = int(scalar(spark, f"SELECT COUNT(*) FROM ({right} EXCEPT ALL {left})"))
    return only_left, only_right


# -- machine and versions -----------------------------------------------------------------------


def git(*args: str) -> str:
    """`git <args>` in this repository: its output, stripped."""
    return subprocess.run(
        ["git", *args], cwd=REPO_DIR, capture_output=True, text=True
    ).stdout.strip()


def dbt_tree() -> str:
    """The git tree of the adapter code at HEAD (`dbt/`), '' when `dbt/` has uncommitted
    changes: what a result measured on this checkout was measured on."""
    dirty = git("status", "--short", "--untracked-files=no", "--", "dbt")
    return "" if dirty else git("rev-parse", "HEAD:dbt")


def machine_info(spark: Any, args: Any = None) -> Dict[str, Any]:
    from importlib.metadata import version

    # imported here, not with this module: `--adapter-rev` must act before the adapter's import
    from dbt.adapters.streamsql.spark.log_store import LOG_STORE_SETTING

    memory = ""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    conf = spark.sparkContext.getConf()
    return {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "memory": memory,
        "os": platform.platform(),
        "python": platform.python_version(),
        "java": java[0] if java else "?",
        "pyspark": version("pyspark"),
        "delta-spark": version("delta-spark"),
        "dbt-core": version("dbt-core"),
        "dbt-spark": version("dbt-spark"),
        "dbt-streamsql": version("dbt-streamsql"),
        "spark.master": conf.get("spark.master"),
        "spark.driver.memory": conf.get("spark.driver.memory"),
        "spark.sql.shuffle.partitions": spark.conf.get("spark.sql.shuffle.partitions"),
        # which store lists a file: table's Delta log (the adapter's unless a setting says so)
        "delta log store": conf.get(LOG_STORE_SETTING, "io.delta.storage.LocalLogStore"),
        "git_head": git("rev-parse", "--short", "HEAD"),
        "git_dirty": git("status", "--short", "--untracked-files=no", "--", "dbt"),
        "load_average_at_start": os.getloadavg(),
    }


def add_output_arguments(parser: Any, name: str) -> None:
    """`--work-dir` (bench/work-<name>), `--results-dir` and `--output-name` (`name`)."""
    parser.add_argument("--work-dir", default=str(BENCH_DIR / f"work-{name.replace('_', '-')}"))
    parser.add_argument("--results-dir", default=str(BENCH_DIR / "results"))
    parser.add_argument("--output-name", default=name)


def add_spark_conf_argument(parser: Any, help_text: str) -> None:
    """`--spark-conf KEY=VALUE`, repeatable (`spark_settings` reads them)."""
    parser.add_argument(
        "--spark-conf", action="append", default=[], metavar="KEY=VALUE", help=help_text
    )


def spark_settings(settings: Sequence[str]) -> Dict[str, str]:
    """`--spark-conf` values as a dict of Spark settings."""
    return dict(setting.split("=", 1) for setting in settings)


def write_project_skeleton(
    work: Path,
    name: str,
    schema: str,
    driver_memory: str,
    sources: Dict[str, Sequence[str]],
    threads: int = 1,
    settings: Optional[Dict[str, str]] = None,
    warehouse_dir: Optional[Path] = None,
) -> Dict[str, Any]:
    """dbt_project.yml, profiles.yml (embedded session, `threads` dbt threads) and sources.yml
    in `work`.

    `sources` maps a source schema to its tables. `warehouse_dir`: another project's warehouse
    to share (default: `work / "warehouse"`). Returns the profile target; the caller writes
    the models under `work / "models"`.
    """
    (work / "models").mkdir(parents=True, exist_ok=True)
    (work / "dbt_project.yml").write_text(
        yaml.safe_dump(
            {
                "name": name,
                "version": "1.0",
                "config-version": 2,
                "profile": name,
                "model-paths": ["models"],
            }
        )
    )
    target = {
        "type": "streamsql",
        "method": "session",
        "keep_warm": False,  # dbt runs in this process, on the session the bench started
        "schema": schema,
        "warehouse_dir": str(warehouse_dir or work / "warehouse"),
        "master": "local[2]",
        "threads": threads,
        "server_side_parameters": {"spark.driver.memory": driver_memory, **(settings or {})},
    }
    (work / "profiles.yml").write_text(
        yaml.safe_dump({name: {"target": "local", "outputs": {"local": target}}})
    )
    (work / "models" / "sources.yml").write_text(
        yaml.safe_dump(
            {
                "version": 2,
                "sources": [
                    {"name": source, "schema": source, "tables": [{"name": t} for t in tables]}
                    for source, tables in sources.items()
                ],
            }
        )
    )
    return target


def machine_lines(info: Dict[str, Any]) -> List[str]:
    """The machine record as markdown list items (the working tree's state in words)."""
    lines = []
    for key, value in info.items():
        if key == "git_dirty":
            value = (
                "clean"
                if not value
                else "modified: " + ", ".join(line.split()[-1] for line in value.splitlines())
            )
            key = "dbt/ in the working tree"
        lines.append(f"- {key}: {value}")
    return lines


def fmt(seconds: float) -> str:
    return f"{seconds:.2f}"


# -- results files ------------------------------------------------------------------------------


def write_run_json(
    results_dir: Path, name: str, run: Dict[str, Any], summary: Dict[str, Any]
) -> None:
    """Writes a run's numbers as two files: `<name>.json`, its summary (arguments, machine,
    medians, checks; small enough to diff), and `<name>.raw.json.gz`, the whole run with every
    step, which reports and `--combine` read back (`read_run_json`)."""
    (results_dir / f"{name}.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    # mtime=0: the same run compresses to the same bytes
    with gzip.GzipFile(results_dir / f"{name}.raw.json.gz", "wb", mtime=0) as raw:
        raw.write(json.dumps(run, default=str).encode())


def read_run_json(path: Path) -> Dict[str, Any]:
    """The whole run `write_run_json` wrote for `<name>.json` (from its `.raw.json.gz`); a
    `<name>.json` with no raw file beside it (runs written before the split) is the whole run."""
    raw = path.with_name(f"{path.name.removesuffix('.json')}.raw.json.gz")
    if raw.exists():
        with gzip.open(raw, "rt") as text:
            return json.load(text)
    return json.loads(path.read_text())


def save_plot(figure: Any, path: Path, dpi: int) -> None:
    """Saves a matplotlib figure as a PNG of at most 256 colours: a plot's lines and text take a
    few dozen, and the palette makes the file a third of matplotlib's RGBA one."""
    import io

    from PIL import Image

    rendered = io.BytesIO()
    figure.savefig(rendered, format="png", dpi=dpi)
    image = Image.open(rendered).convert("RGB")
    image.quantize(colors=256, dither=Image.Dither.NONE).save(path, optimize=True)


def loopback_s3(root: Path, bucket: str) -> Tuple[Any, Dict[str, str]]:
    """moto's S3 server on loopback (scripts/s3_server.py, its log in `root`) with `bucket`
    made, and the Spark settings that reach it through S3A. The caller stops the server."""
    import sys

    if str(REPO_DIR) not in sys.path:
        sys.path.insert(0, str(REPO_DIR))
    from scripts.s3_server import S3Server, s3a_settings

    server = S3Server(root).start()
    server.create_bucket(bucket)
    return server, s3a_settings(server.endpoint)


def on_object_store(work: Path, project: str, target: Dict[str, Any], warehouse: str) -> Dict:
    """Points the profile target `write_project_skeleton` wrote for `project` at `warehouse`
    (`s3a://bucket/prefix`), the metastore in `work / "local"`, and writes profiles.yml again.
    Returns the target `start_session` takes for the same place: the local folder as its
    warehouse, the tables' URI as `spark.sql.warehouse.dir`."""
    local = str(work / "local")
    target.update(warehouse_dir=warehouse, local_dir=local)
    profile = {project: {"target": "local", "outputs": {"local": target}}}
    (work / "profiles.yml").write_text(yaml.safe_dump(profile))
    parameters = dict(target["server_side_parameters"])
    parameters["spark.sql.warehouse.dir"] = warehouse.rstrip("/") + "/tables"
    return dict(target, warehouse_dir=local, server_side_parameters=parameters)


def start_session(target: Dict[str, Any]) -> Any:
    """The adapter's own process-wide SparkSession, with a profile target's settings.

    dbt, run in-process afterwards, finds and reuses it (one JVM for everything).
    """
    import logging

    from dbt.adapters.streamsql.spark.embedded_spark import SessionSettings, get_spark_session

    spark = get_spark_session(
        SessionSettings(
            warehouse_dir=target["warehouse_dir"],
            master=target["master"],
            server_side_parameters=dict(target["server_side_parameters"]),
            lock_timeout=600,
        )
    )
    # PySpark logs every SQL error with its JVM stack; the adapter expects some (table exists?).
    from pyspark.logger import PySparkLogger

    PySparkLogger.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    return spark


def table_bench_args(description: str, rounds: int, work_dir: str) -> Any:
    """The arguments of a bench that writes keyed tables of `--sizes` rows for `--rounds`
    rounds (small_merge.py, write_paths.py), and the session it runs in: (args, spark)."""
    import argparse

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--sizes", default="100,200000", help="rows of the table, comma-separated")
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--work-dir", default=work_dir)
    args = parser.parse_args()
    spark = start_session(
        {
            "warehouse_dir": args.work_dir,
            "master": "local[2]",
            "server_side_parameters": {"spark.driver.memory": "4g"},
        }
    )
    return args, spark


class MemorySampler:
    """Samples the JVM's heap in use and resident set size a few times a second, in a thread.

    `peak(start, end)` is the largest sample taken between two time.monotonic() instants. Heap in
    use (MemoryMXBean, garbage not yet collected included) is what the work made the JVM hold;
    the RSS of the java process (from /proc) only grows once the heap has grown, so it is
    reported for the whole run (`rss_peak_mib`, the kernel's VmHWM).
    """

    def __init__(self, spark: Any, interval: float = 0.25) -> None:
        import threading

        self.interval = interval
        self.samples: List[Tuple[float, float, float]] = []  # (monotonic, heap MiB, rss MiB)
        self._bean = spark._jvm.java.lang.management.ManagementFactory.getMemoryMXBean()
        self.jvm_pid = next((pid for pid in ProcessCpu().pids if _comm(pid) == "java"), None)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="memory-sampler", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                heap = self._bean.getHeapMemoryUsage().getUsed() / 2**20
            except Exception:  # noqa: BLE001 - the JVM is going away
                return
            self.samples.append((time.monotonic(), heap, self._status_mib("VmRSS")))

    def _status_mib(self, key: str) -> float:
        if self.jvm_pid is None:
            return float("nan")
        try:
            for line in Path(f"/proc/{self.jvm_pid}/status").read_text().splitlines():
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return float("nan")

    def peak(self, start: Optional[float], end: Optional[float]) -> Optional[float]:
        if start is None or end is None:
            return None
        heaps = [heap for at, heap, _ in self.samples if start <= at <= end]
        return max(heaps) if heaps else None

    def rss_peak_mib(self) -> float:
        return self._status_mib("VmHWM")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def use_adapter_revision(revision: str, dest: Path) -> str:
    """Loads dbt-streamsql from git revision `revision` instead of the working tree.

    Others may be editing dbt/ while a benchmark runs: this extracts `git archive <revision> dbt`
    into `dest` and points the editable install's import mapping there. Must run before anything
    imports dbt.adapters.streamsql. Returns the full commit id.
    """
    import importlib
    import io
    import tarfile

    commit = subprocess.run(
        ["git", "rev-parse", "--verify", revision + "^{commit}"],
        cwd=REPO_DIR,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    archive = subprocess.run(
        ["git", "archive", commit, "dbt"], cwd=REPO_DIR, capture_output=True, check=True
    ).stdout
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    finders = [
        name
        for name in list(__import__("sys").modules)
        if name.startswith("__editable___dbt_streamsql")
    ]
    if not finders:
        raise RuntimeError("dbt-streamsql is not an editable install; --adapter-rev needs one")
    finder = importlib.import_module(finders[0])
    for name, path in list(finder.MAPPING.items()):
        finder.MAPPING[name] = str(dest / Path(path).relative_to(REPO_DIR))
    for name, paths in finder.NAMESPACES.items():
        finder.NAMESPACES[name] = [str(dest / Path(p).relative_to(REPO_DIR)) for p in paths]
    if any(name.startswith("dbt.adapters.streamsql") for name in __import__("sys").modules):
        raise RuntimeError("dbt.adapters.streamsql was imported before --adapter-rev took effect")
    return commit
