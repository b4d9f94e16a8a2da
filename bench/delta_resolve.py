"""What Delta costs a statement to find a table's snapshot, as the table's log grows.

Every statement that names a Delta table asks Delta for the table's snapshot. Unless
`spark.databricks.delta.stalenessLimit` lets it keep the one it has, Delta first lists the
table's `_delta_log` folder for newer versions, and on a local file system that listing reads
the whole folder: a commit file and a checksum file per version, and a checkpoint every ten, kept
for `delta.logRetentionDuration` (30 days by default, and never less than the current day). This
times, on one table at `--versions` versions (one-row INSERTs until it has them), statements that
run no job:

- `DESCRIBE QUERY` of a SELECT of the table, and of the table `VERSION AS OF` its latest version;
- both again with `spark.databricks.delta.stalenessLimit` set (Delta keeps the snapshot it has);
- `table_changes` of the latest version (a Spark job);
- a one-row INSERT (a write asks for the newest snapshot whatever the setting).

    python bench/delta_resolve.py --versions 5,200,400,800

Writes bench/results/<output-name>.md and .json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Dict, List

from benchlib import (
    add_output_arguments,
    add_spark_conf_argument,
    dbt_tree,
    machine_info,
    machine_lines,
    spark_settings,
    start_session,
)

STALE = "spark.databricks.delta.stalenessLimit"


def timed(action: Callable[[], Any], reps: int) -> float:
    """Median seconds of `action` over `reps` runs, after two untimed ones."""
    for _ in range(2):
        action()
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def latest_version(spark: Any, table: str) -> int:
    return int(spark.sql(f"DESCRIBE HISTORY {table} LIMIT 1").first()["version"])


def measure(spark: Any, table: str, reps: int) -> Dict[str, float]:
    latest = latest_version(spark, table)
    log = Path(spark.sql(f"DESCRIBE DETAIL {table}").first()["location"].replace("file:", ""))
    figures: Dict[str, float] = {"files_in_log": len(list((log / "_delta_log").iterdir()))}
    plain = f"DESCRIBE QUERY SELECT * FROM {table}"
    pinned = f"DESCRIBE QUERY SELECT * FROM {table} VERSION AS OF {latest}"
    for stale in ("", "1h"):
        if stale:
            spark.conf.set(STALE, stale)
        else:
            spark.conf.unset(STALE)
        suffix = " (stalenessLimit 1h)" if stale else ""
        figures["read" + suffix] = timed(lambda: spark.sql(plain).collect(), reps)
        figures["read at its version" + suffix] = timed(lambda: spark.sql(pinned).collect(), reps)
    spark.conf.unset(STALE)
    changes = f"SELECT count(*) FROM table_changes('{table}', {latest}, {latest})"
    figures["table_changes of the last version"] = timed(lambda: spark.sql(changes).collect(), reps)
    figures["one-row INSERT"] = timed(lambda: spark.sql(f"INSERT INTO {table} VALUES (0)"), 5)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", default="5,200,400,800")
    parser.add_argument("--reps", type=int, default=30)
    add_output_arguments(parser, "delta_resolve")
    add_spark_conf_argument(
        parser, "a Spark setting for the session, repeatable (e.g. another Delta log store)"
    )
    args = parser.parse_args()
    work = Path(args.work_dir)
    shutil.rmtree(work, ignore_errors=True)
    target = {
        "warehouse_dir": str(work / "warehouse"),
        "master": "local[2]",
        "server_side_parameters": {
            "spark.driver.memory": "2g",
            **spark_settings(args.spark_conf),
        },
    }
    spark = start_session(target)
    info = machine_info(spark)
    table = "resolve.t"
    spark.sql("CREATE SCHEMA IF NOT EXISTS resolve")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT) USING delta "
        "TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')"
    )
    rows: List[Dict[str, Any]] = []
    for wanted in sorted(int(v) for v in args.versions.split(",")):
        for version in range(latest_version(spark, table), wanted):  # measure's INSERTs count
            spark.sql(f"INSERT INTO {table} VALUES ({version})")
        figures = measure(spark, table, args.reps)
        rows.append({"versions": wanted, **figures})
        print(json.dumps(rows[-1]), flush=True)
    spark.stop()

    out = Path(args.results_dir)
    kinds = [k for k in rows[0] if k != "versions" and k != "files_in_log"]
    lines = [
        "# What a statement pays Delta to find a table's snapshot, by the length of its log",
        "",
        f"Command: `python bench/delta_resolve.py --versions {args.versions} --reps {args.reps}"
        + "".join(f" --spark-conf {setting}" for setting in args.spark_conf)
        + "`  ",
        f"Run: {datetime.now(timezone.utc).isoformat()} on adapter code (dbt/ tree) "
        f"`{dbt_tree()[:12]}` (the bench uses the adapter's session only); "
        f"Delta log store for the table: `{info['delta log store']}`",
        "",
        "Median milliseconds per statement (`DESCRIBE QUERY`: no Spark job; `table_changes` and "
        "the INSERT: one or more).",
        "",
        "| versions | files in `_delta_log` | " + " | ".join(kinds) + " |",
        "|---:|---:|" + "---:|" * len(kinds),
    ]
    for row in rows:
        cells = " | ".join(f"{row[k] * 1000:.1f}" for k in kinds)
        lines.append(f"| {row['versions']} | {row['files_in_log']} | {cells} |")
    lines += ["", *machine_lines(info)]
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.output_name}.md").write_text("\n".join(lines) + "\n")
    (out / f"{args.output_name}.json").write_text(
        json.dumps({"args": vars(args), "machine": info, "rows": rows}, indent=1)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
