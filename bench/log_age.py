"""What a step's questions to a Delta table's log cost as the log grows, per reader.

A step asks each table it touches whether it exists, its version, its snapshot and its recent
commits, every step; the 400-step soak (results/soak_400.md) found that time growing with the
tables' log length. This bench commits `--versions` small INSERTs to one table (Delta's default
checkpoint interval) and, each time the log reaches a milestone, times each question
`--repeats` times with:

- `files`: the embedded session's reader (`JvmDeltaLog`): the catalog in the JVM, the rest from
  the log's files from the last checkpoint on;
- `jvm snapshot`: Delta's snapshot in the JVM (`JvmSnapshotLog`, the reader's fallback), whose
  `update` and `getChanges` list the whole `_delta_log` folder.

Writes results/<output-name>.md and .json.

    python bench/log_age.py                          # about 6 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

from benchlib import dbt_tree, machine_info, machine_lines, median, start_session

RESULTS = Path(__file__).parent / "results"


class SparkRows:
    """What SqlDeltaLog needs of a session: a statement's rows as dicts."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark

    def query(self, statement: str) -> List[Dict[str, Any]]:
        return [row.asDict() for row in self.spark.sql(statement).collect()]


def questions(reader: Any, name: str) -> Dict[str, Callable[[], Any]]:
    return {
        "exists": lambda: reader.exists(name),
        "version": lambda: reader.version(name),
        "snapshot": lambda: reader.snapshot(name),
        "recent_commits(1)": lambda: reader.recent_commits(name, 1),
        "commits(last 3)": lambda: reader.commits(name, reader.version(name) - 2, 1 << 40),
    }


def time_ms(ask: Callable[[], Any], repeats: int) -> float:
    ask()  # the first answer may load classes or a DeltaLog
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        ask()
        times.append((time.perf_counter() - started) * 1000)
    return round(median(times), 2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", default="5,100,400,800", help="milestones, ascending")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--work-dir", default="/tmp/log_age")
    parser.add_argument("--output-name", default="log_age")
    args = parser.parse_args()
    spark = start_session(
        {
            "warehouse_dir": args.work_dir,
            "master": "local[2]",
            "server_side_parameters": {"spark.driver.memory": "4g"},
        }
    )
    from dbt.adapters.streamsql.execution.engine.delta_files import JvmDeltaLog
    from dbt.adapters.streamsql.execution.engine.delta_log import SqlDeltaLog

    info = machine_info(spark, args)
    info["dbt_tree"] = dbt_tree()
    name = "default.log_age"
    spark.sql(f"DROP TABLE IF EXISTS {name}")
    spark.sql(f"CREATE TABLE {name} (id BIGINT, at TIMESTAMP) USING delta")
    files = JvmDeltaLog(spark, SqlDeltaLog(SparkRows(spark)))
    readers = {"files": files, "jvm snapshot": files.jvm}
    version, rows = 0, []
    for milestone in (int(v) for v in args.versions.split(",")):
        while version < milestone:
            spark.sql(f"INSERT INTO {name} VALUES ({version}, current_timestamp())")
            version += 1
        log = Path(files.jvm.location(name)[0])
        entries = sum(1 for _ in log.iterdir())
        for reader_name, reader in readers.items():
            assert reader.version(name) == version, (reader_name, version)
            for question, ask in questions(reader, name).items():
                ms = time_ms(ask, args.repeats)
                rows.append(
                    {
                        "versions": version,
                        "log_entries": entries,
                        "reader": reader_name,
                        "question": question,
                        "ms": ms,
                    }
                )
                print(
                    f"{version:5d} versions ({entries} entries) "
                    f"{reader_name:13s} {question:18s} {ms:8.2f} ms"
                )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.output_name}.json").write_text(
        json.dumps({"machine": info, "rows": rows}, indent=1) + "\n"
    )
    milestones = sorted({row["versions"] for row in rows})
    lines = [
        f"# {__doc__.splitlines()[0]}",
        "",
        "Median milliseconds of each question (after one untimed answer), by the table's",
        "versions (and the entries of its `_delta_log` folder: commits, checksums, checkpoints).",
        "The file reader asks the catalog where a table is once per step (a lookup like `exists`),",
        "in the untimed first answer; `exists` is the metastore's answer for both readers.",
        "",
        "| reader | question | " + " | ".join(f"{v} versions" for v in milestones) + " |",
        "|---|---|" + "---:|" * len(milestones),
    ]
    for reader_name in readers:
        for question in questions(files, name):
            cells = [
                next(
                    f"{row['ms']:.2f}"
                    for row in rows
                    if row["versions"] == v
                    and row["reader"] == reader_name
                    and row["question"] == question
                )
                for v in milestones
            ]
            lines.append(f"| {reader_name} | {question} | " + " | ".join(cells) + " |")
    lines += ["", "## Machine", "", *machine_lines(info), ""]
    (RESULTS / f"{args.output_name}.md").write_text("\n".join(lines))
    print(f"wrote {RESULTS / args.output_name}.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
