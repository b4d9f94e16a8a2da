"""What a step reads, with and without a waterline: a windowed aggregate over growing history.

Two incremental views with the same SQL over one source, a spend per card per 1-hour window:

    select card, window(ts, '1 hour').start as hour_start, count(*) as n, sum(amount) as spend,
           max(amount) as peak
    from events group by card, window(ts, '1 hour')

`with_lateness` declares `lateness: {hour_start: INTERVAL 1 HOUR}`; `no_lateness` declares none.
Every step appends the next hour of events (a little out of order, plus a few rows hours late
that the first model quarantines). After each step the script reads, from Spark's own SQL
metrics (the status store behind the SQL tab of the Spark UI), what the step's queries scanned,
per table: files read, bytes read, rows output by the scan. Without a waterline the step reads
the model's whole aggregate state, which grows with every hour of history; with one it reads only
the state of windows that are not final yet (and of the few old windows late rows touch).

    python bench/waterline_scan.py [--history-hours 48] [--cards 500] [--rows-per-hour 20000]

Writes bench/results/waterline_scan.{md,json}. See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

from benchlib import (
    BENCH_DIR,
    Dbt,
    machine_info,
    machine_lines,
    start_session,
    write_project_skeleton,
)

SOURCE_SCHEMA, TARGET_SCHEMA = "scan_src", "scan"
BASE_EPOCH = 1704067200  # 2024-01-01 00:00:00 UTC
QUERY = (
    "select card, window(ts, '1 hour').start as hour_start, count(*) as n, "
    "sum(amount) as spend, max(amount) as peak from {src} group by card, window(ts, '1 hour')"
)
MODELS = {"with_lateness": {"lateness": {"hour_start": "INTERVAL 1 HOUR"}}, "no_lateness": {}}
SCAN_METRICS = {
    "number of files read": "files",
    "size of files read": "bytes",
    "number of output rows": "rows",
}


def write_project(work: Path) -> Dict[str, Any]:
    target = write_project_skeleton(
        work, "streamsql_scan", TARGET_SCHEMA, "4g", {SOURCE_SCHEMA: ["events"]}
    )
    src = "{{ source('%s', 'events') }}" % SOURCE_SCHEMA
    for name, config in MODELS.items():
        settings = ", ".join(
            ["materialized='incremental_view'"] + [f"{k}={v!r}" for k, v in config.items()]
        )
        (work / "models" / f"{name}.sql").write_text(
            "{{ config(%s) }}\n%s\n" % (settings, QUERY.format(src=src))
        )
    return target


def events(first_hour: int, hours: int, args: argparse.Namespace, late: bool) -> str:
    """`rows_per_hour` rows per hour in [first_hour, first_hour + hours), up to 10 min early.

    With `late`, a share `--late-share` of the rows is stamped 3-12 hours earlier (late).
    """
    n = hours * args.rows_per_hour
    offset = first_hour * args.rows_per_hour
    seconds_per_row = 3600.0 / args.rows_per_hour
    late_by = (
        f"CASE WHEN pmod(xxhash64(id, {args.seed + 3}), 100000) < "
        f"{int(args.late_share * 100000)} "
        f"THEN 3600 * (3 + pmod(xxhash64(id, {args.seed + 4}), 10)) ELSE 0 END"
        if late and args.late_share > 0
        else "0"
    )
    return (
        f"SELECT CAST(pmod(xxhash64(id, {args.seed}), {args.cards}) AS BIGINT) AS card, "
        f"timestamp_seconds(CAST({BASE_EPOCH} + id * {seconds_per_row} "
        f"- pmod(xxhash64(id, {args.seed + 1}), 600) - {late_by} AS BIGINT)) AS ts, "
        f"CAST(pmod(xxhash64(id, {args.seed + 2}), 100000) / 100 AS DECIMAL(10,2)) AS amount "
        f"FROM range({offset}, {offset + n}, 1, {max(1, n // 1_000_000)})"
    )


class ScanMetrics:
    """Per-table scan metrics of the SQL executions that ran since `mark()`, from Spark."""

    def __init__(self, spark: Any) -> None:
        self.store = spark._jsparkSession.sharedState().statusStore()
        self.seen = self._ids()

    def _ids(self) -> set:
        executions = self.store.executionsList()
        return {executions.apply(i).executionId() for i in range(executions.size())}

    def mark(self) -> None:
        self.seen = self._ids()

    def since_mark(self) -> Dict[str, Dict[str, int]]:
        totals: Dict[str, Dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for execution_id in sorted(self._ids() - self.seen):
            values = self.store.executionMetrics(execution_id)
            nodes = self.store.planGraph(execution_id).allNodes()
            for i in range(nodes.size()):
                node = nodes.apply(i)
                name = node.name()
                if not name.startswith("Scan"):
                    continue
                table = name.split(".")[-1] if "." in name else name
                metrics = node.metrics()
                for j in range(metrics.size()):
                    metric = metrics.apply(j)
                    key = SCAN_METRICS.get(metric.name())
                    value = values.get(metric.accumulatorId())
                    if key and value.isDefined():
                        totals[table][key] += parse_metric(value.get())
        return {table: dict(v) for table, v in totals.items()}


def parse_metric(text: str) -> int:
    """Spark's rendered metric ('12', '1,234', '3.4 MiB', or 'total (min, med, max)\\n...')."""
    first = text.strip().splitlines()[-1] if "\n" in text else text.strip()
    first = first.split("(")[0].strip()
    units = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4}
    parts = first.replace(",", "").split()
    if len(parts) == 2 and parts[1] in units:
        return int(float(parts[0]) * units[parts[1]])
    try:
        return int(float(parts[0]))
    except (ValueError, IndexError):
        return 0


def state_rows(spark: Any, model: str) -> int:
    return spark.sql(
        f"SELECT COUNT(*) AS n FROM {TARGET_SCHEMA}.{model}__streamsql_state"
    ).collect()[0]["n"]


def run(args: argparse.Namespace) -> Dict[str, Any]:
    work = Path(args.work_dir).resolve()
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    os.environ.setdefault("DBT_SEND_ANONYMOUS_USAGE_STATS", "false")
    os.chdir(work)
    target = write_project(work)
    spark = start_session(target)
    metrics = ScanMetrics(spark)
    dbt = Dbt(work)
    for schema in (TARGET_SCHEMA, SOURCE_SCHEMA):
        spark.sql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        spark.sql(f"CREATE SCHEMA {schema}")
    spark.sql(
        f"CREATE TABLE {SOURCE_SCHEMA}.events (card BIGINT, ts TIMESTAMP, "
        "amount DECIMAL(10,2)) USING delta "
        "TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')"
    )
    spark.sql(
        f"INSERT INTO {SOURCE_SCHEMA}.events {events(0, args.history_hours, args, late=False)}"
    )
    print(
        f"history: {args.history_hours} hours x {args.rows_per_hour} rows, {args.cards} cards",
        flush=True,
    )
    dbt.run(list(MODELS))  # first step: the whole history
    result: Dict[str, Any] = {"steps": []}
    for step in range(1, args.steps + 1):
        hour = args.history_hours + step - 1
        spark.sql(f"INSERT INTO {SOURCE_SCHEMA}.events {events(hour, 1, args, late=True)}")
        for model in MODELS:
            metrics.mark()
            _, nodes = dbt.run([model])
            scans = metrics.since_mark()
            response = nodes[model].adapter
            row = {
                "step": step,
                "model": model,
                "seconds": nodes[model].execution_time,
                "changes_read": response.get("changes_read"),
                "late": response.get("late"),
                "state_rows": state_rows(spark, model),
                "scans": scans,
            }
            result["steps"].append(row)
            state = scans.get(f"{model}__streamsql_state", {})
            print(
                f"step {step} {model:<14} {row['seconds']:6.1f} s  late {row['late']:>4}  "
                f"state rows {row['state_rows']:>7}  state scanned: "
                f"{state.get('files', 0)} files, {state.get('bytes', 0) / 1024:.0f} KiB, "
                f"{state.get('rows', 0)} rows",
                flush=True,
            )
    difference = spark.sql(
        f"SELECT COUNT(*) AS n FROM (SELECT * FROM {TARGET_SCHEMA}.no_lateness EXCEPT ALL "
        f"SELECT * FROM {TARGET_SCHEMA}.with_lateness)"
    ).collect()[0]["n"]
    late_rows = spark.sql(
        f"SELECT COUNT(*) AS n FROM {TARGET_SCHEMA}.with_lateness__late"
    ).collect()[0]["n"]
    result.update(
        machine=machine_info(spark, args),
        rows_only_without_lateness=difference,
        quarantined_rows=late_rows,
    )
    return result


def write_report(result: Dict[str, Any], args: argparse.Namespace, path: Path) -> None:
    lines = [
        "# What a step reads: a tumbling-window aggregate with and without LATENESS",
        "",
        f"Command: `{result['command']}`  ",
        f"Run: {result['started']}, git {result['machine'].get('git_head', '?')}.",
        "",
        f"Source: {args.history_hours} hours of history, {args.rows_per_hour:,} rows per hour, "
        f"{args.cards} cards; each step appends the next hour (up to 10 min out of order; "
        f"{args.late_share:.1%} of its rows 3-12 hours late). Both models: `"
        + QUERY.format(src="events")
        + "`; "
        "`with_lateness` declares `lateness: {hour_start: INTERVAL 1 HOUR}`.",
        "",
        "Scanned = Spark's SQL metrics of the step's queries (`number of files read`, `size of "
        "files read`, `number of output rows` of each Scan node, summed over the step's "
        "queries, several of which read the same table).",
        "",
        "| step | model | state rows (after) | state: files read | state: KiB read | "
        "state: rows read | model table: rows read | source: rows read | late | step s |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["steps"]:
        scans = row["scans"]
        state = scans.get(f"{row['model']}__streamsql_state", {})
        model = scans.get(row["model"], {})
        source = scans.get("events", {})
        lines.append(
            f"| {row['step']} | {row['model']} | {row['state_rows']:,} | {state.get('files', 0)} "
            f"| {state.get('bytes', 0) / 1024:,.0f} | {state.get('rows', 0):,} | "
            f"{model.get('rows', 0):,} | {source.get('rows', 0):,} | {row['late']} | "
            f"{row['seconds']:.1f} |"
        )
    lines += [
        "",
        f"After the last step the two models differ by {result['rows_only_without_lateness']} "
        f"rows (the windows late rows changed, which `with_lateness` quarantined: "
        f"{result['quarantined_rows']} rows in `with_lateness__late`).",
        "",
        "## Machine",
        "",
        *machine_lines(result["machine"]),
        "",
    ]
    path.write_text("\n".join(lines))


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history-hours", type=int, default=48)
    parser.add_argument("--rows-per-hour", type=int, default=20_000)
    parser.add_argument("--cards", type=int, default=500)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument(
        "--late-share",
        type=float,
        default=0.005,
        help="share of each step's rows stamped 3-12 hours late",
    )
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--work-dir", default=str(BENCH_DIR / "work-scan"))
    parser.add_argument("--results-dir", default=str(BENCH_DIR / "results"))
    parser.add_argument("--output-name", default="waterline_scan")
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    results_dir = Path(args.results_dir).resolve()
    results_dir.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    result = run(args)
    result.update(
        command="python bench/waterline_scan.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        started=started,
        args=vars(args),
    )
    name = args.output_name
    (results_dir / f"{name}.json").write_text(json.dumps(result, indent=1, default=str))
    write_report(result, args, results_dir / f"{name}.md")
    print(f"wrote {results_dir / name}.md", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
