"""Benchmark: one incremental_view step vs. a full rebuild of the same model, by history size.

For each history size (rows already in the source) this script, in ONE process (one JVM, dbt
in-process through `dbtRunner`):

1. creates the source Delta table `bench_src.events` with that many rows (Spark SQL `range()` and
   seeded hash expressions, no Python row loops);
2. runs the first step (full load) of two incremental views, and builds their `table` twins once
   (warm-up, not measured);
3. N times: appends `--step-rows` new rows, runs `dbt run --select <incremental views>` (one step
   each) and then `dbt run --select <table twins>` (full rebuild), recording per-model times;
4. runs steps with no new input (the fixed floor of a step);
5. checks that each incremental view equals its table twin as a multiset (EXCEPT ALL both ways).

Writes bench/results/step_vs_rebuild.md, .png, .json (the summary) and .raw.json.gz (every
step). See bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from benchlib import (
    BENCH_DIR,
    Dbt,
    fmt,
    machine_info,
    machine_lines,
    median,
    multiset_difference,
    save_plot,
    scalar,
    start_session,
    statement_label,
    statement_shape,
    write_project_skeleton,
    write_run_json,
)

SOURCE_SCHEMA = "bench_src"
TARGET_SCHEMA = "bench"
DEVICES = 100
BASE_EPOCH = 1704067200  # 2024-01-01 00:00:00 UTC; row `id` is about `id` seconds later
DISORDER_SECONDS = 300  # a row's timestamp is up to this much earlier than its id says

FILTER_SQL = "select id, device, ts, value from {src} where kind = 'a' and value > 10"
GROUP_SQL = (
    "select device, date_trunc('hour', ts) as hour, count(*) as n, sum(value) as total, "
    "max(value) as peak from {src} group by device, date_trunc('hour', ts)"
)
# A moving average per device over the last hour of readings (a bounded RANGE frame): a step
# reads each touched device from its first new reading minus the hour (every device is touched).
MOVING_SQL = (
    "select id, device, ts, avg(value) over (partition by device order by ts range between "
    "interval 1 hour preceding and current row) as avg_1h from {src}"
)
# A moving average over each device's last 10 readings and the change from the previous reading
# (a ROWS frame and LAG): a step reads each touched device from the 10th reading before its first
# new one (window_reach.rows_reach).
MOVING_ROWS_SQL = (
    "select id, device, ts, avg(value) over (partition by device order by ts rows between 9 "
    "preceding and current row) as avg_10, value - lag(value) over (partition by device order by "
    "ts) as since_last from {src}"
)
# Each device's running total and count of readings (running windows): a step reads each
# touched device's readings below its first new one as one aggregate (window_reach.running_reach).
RUNNING_SQL = (
    "select id, device, ts, sum(value) over (partition by device order by ts) as total, "
    "count(*) over (partition by device order by ts) as readings from {src}"
)
# Each device's readings numbered in time and its running average (ranks and a running AVG of a
# decimal): read like RUNNING_SQL, the ranks adding the count of the readings below the change.
RANKS_SQL = (
    "select id, device, ts, row_number() over (partition by device order by ts, id) as nth, "
    "dense_rank() over (partition by device order by ts) as nth_time, avg(value) over "
    "(partition by device order by ts) as running_avg from {src}"
)
# kind -> (view model, table twin, query); `--pairs` picks some
ALL_PAIRS = {
    "filter": ("filter_view", "filter_rebuild", FILTER_SQL),
    "group by": ("group_view", "group_rebuild", GROUP_SQL),
    "moving window": ("moving_view", "moving_rebuild", MOVING_SQL),
    "moving rows": ("moving_rows_view", "moving_rows_rebuild", MOVING_ROWS_SQL),
    "running": ("running_view", "running_rebuild", RUNNING_SQL),
    "ranks": ("ranks_view", "ranks_rebuild", RANKS_SQL),
}
DEFAULT_PAIRS = "filter,group by"
# model name -> (materialization, query); each incremental view has a `table` twin.
MODELS: Dict[str, Tuple[str, str]] = {}
PAIRS: List[Tuple[str, str, str]] = []
INCREMENTAL: List[str] = []
REBUILD: List[str] = []


def choose_pairs(kinds: Sequence[str]) -> None:
    """Sets the module's model lists to the pairs of `kinds` (names of ALL_PAIRS)."""
    MODELS.clear()
    PAIRS[:] = [(kind, *ALL_PAIRS[kind][:2]) for kind in kinds]
    for kind, view, table in PAIRS:
        MODELS[view] = ("incremental_view", ALL_PAIRS[kind][2])
        MODELS[table] = ("table", ALL_PAIRS[kind][2])
    INCREMENTAL[:] = [view for _, view, _ in PAIRS]
    REBUILD[:] = [table for _, _, table in PAIRS]


choose_pairs(DEFAULT_PAIRS.split(","))


# -- the dbt project ----------------------------------------------------------------------------


def write_project(work: Path, driver_memory: str) -> Dict[str, Any]:
    """A dbt project in `work`: profile, source and the four models. Returns the profile target."""
    target = write_project_skeleton(
        work, "streamsql_bench", TARGET_SCHEMA, driver_memory, {SOURCE_SCHEMA: ["events"]}
    )
    src = "{{ source('%s', 'events') }}" % SOURCE_SCHEMA
    for name, (materialized, query) in MODELS.items():
        (work / "models" / f"{name}.sql").write_text(
            "{{ config(materialized='%s') }}\n%s\n" % (materialized, query.format(src=src))
        )
    return target


# -- the source ---------------------------------------------------------------------------------


def events_select(start: int, end: int, partitions: int, seed: int) -> str:
    """Rows id in [start, end), each a deterministic function of (id, seed)."""
    return (
        "SELECT id, "
        f"CAST(pmod(xxhash64(id, {seed}), {DEVICES}) AS INT) AS device, "
        f"timestamp_seconds({BASE_EPOCH} + id - pmod(xxhash64(id, {seed + 1}), "
        f"{DISORDER_SECONDS})) AS ts, "
        f"CAST(pmod(xxhash64(id, {seed + 2}), 100000) / 100 AS DECIMAL(10,2)) AS value, "
        f"element_at(array('a', 'b', 'c', 'd'), "
        f"CAST(pmod(xxhash64(id, {seed + 3}), 4) AS INT) + 1) AS kind "
        f"FROM range({start}, {end}, 1, {partitions})"
    )


def create_source(spark: Any, rows: int, seed: int) -> None:
    for schema in (TARGET_SCHEMA, SOURCE_SCHEMA):
        spark.sql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    spark.catalog.clearCache()
    spark.sql(f"CREATE SCHEMA {SOURCE_SCHEMA}")
    spark.sql(f"CREATE SCHEMA {TARGET_SCHEMA}")
    spark.sql(
        f"CREATE TABLE {SOURCE_SCHEMA}.events (id BIGINT, device INT, ts TIMESTAMP, "
        "value DECIMAL(10,2), kind STRING) USING delta "
        "TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')"
    )
    partitions = max(2, -(-rows // 1_000_000))  # about 1M rows per file
    spark.sql(f"INSERT INTO {SOURCE_SCHEMA}.events {events_select(0, rows, partitions, seed)}")


def append_rows(spark: Any, start: int, count: int, seed: int) -> None:
    spark.sql(f"INSERT INTO {SOURCE_SCHEMA}.events {events_select(start, start + count, 1, seed)}")


WRITE_METRICS = (
    "numTargetFilesRemoved",
    "numTargetFilesAdded",
    "numTargetRowsCopied",
    "numTargetRowsDeleted",
    "numTargetRowsUpdated",
    "numTargetRowsInserted",
    "numOutputRows",
    "numFiles",
    "rewriteTimeMs",
    "executionTimeMs",
)


def last_writes(spark: Any) -> Dict[str, Dict[str, Any]]:
    """The latest Delta commit of each view's table and state table: what the step wrote."""
    tables = {row["tableName"] for row in spark.sql(f"SHOW TABLES IN {TARGET_SCHEMA}").collect()}
    writes = {}
    for view in INCREMENTAL:
        for table in (view, f"{view}__streamsql_state"):
            if table not in tables:
                continue
            row = spark.sql(f"DESCRIBE HISTORY {TARGET_SCHEMA}.{table} LIMIT 1").collect()[0]
            metrics = row["operationMetrics"] or {}
            writes[table] = {
                "operation": row["operation"],
                **{k: int(metrics[k]) for k in WRITE_METRICS if k in metrics},
            }
    return writes


def verify(spark: Any) -> List[Dict[str, Any]]:
    checks = []
    for kind, view, table in PAIRS:
        columns = ", ".join(f"`{c}`" for c in spark.table(f"{TARGET_SCHEMA}.{table}").columns)
        left = f"SELECT {columns} FROM {TARGET_SCHEMA}.{view}"
        right = f"SELECT {columns} FROM {TARGET_SCHEMA}.{table}"
        only_view, only_table = multiset_difference(spark, left, right)
        rows = scalar(spark, f"SELECT COUNT(*) FROM {TARGET_SCHEMA}.{view}")
        checks.append(
            {
                "model": kind,
                "view": view,
                "table": table,
                "rows": int(rows),
                "only_in_view": only_view,
                "only_in_table": only_table,
                "equal": only_view == 0 and only_table == 0,
            }
        )
    return checks


def run_size(spark: Any, dbt: Dbt, rows: int, args: argparse.Namespace) -> Dict[str, Any]:
    out: Dict[str, Any] = {"rows": rows, "steps": [], "floor": [], "setup": {}}
    say = lambda text: print(f"[{rows:>11,}] {text}", flush=True)  # noqa: E731

    started = time.monotonic()
    create_source(spark, rows, args.seed)
    out["setup"]["create_source_s"] = time.monotonic() - started
    say(f"source created in {out['setup']['create_source_s']:.1f} s")

    wall, nodes = dbt.run(INCREMENTAL)
    out["setup"]["first_step"] = {
        n: {"execution_time": r.execution_time, **r.adapter} for n, r in nodes.items()
    }
    say(
        "first step (full load): "
        + ", ".join(f"{n} {r.execution_time:.1f} s" for n, r in nodes.items())
    )
    wall, nodes = dbt.run(REBUILD)
    out["setup"]["first_rebuild"] = {n: r.execution_time for n, r in nodes.items()}
    say(
        "first table build (warm-up): "
        + ", ".join(f"{n} {r.execution_time:.1f} s" for n, r in nodes.items())
    )

    next_id = rows
    for number in range(1, args.steps + 1):
        append_started = time.monotonic()
        append_rows(spark, next_id, args.step_rows, args.seed)
        append_s = time.monotonic() - append_started
        next_id += args.step_rows
        step_wall, step_nodes = dbt.run(INCREMENTAL)
        writes = last_writes(spark)
        rebuild_wall, rebuild_nodes = dbt.run(REBUILD)
        record = {
            "writes": writes,
            "step": number,
            "append_s": append_s,
            "load_average": os.getloadavg()[0],
            "step_wall_s": step_wall,
            "rebuild_wall_s": rebuild_wall,
            "incremental": {
                n: {
                    "execution_time": r.execution_time,
                    "cpu_s": r.cpu_s,
                    "adapter": r.adapter,
                    "statements": [s.__dict__ for s in r.statements],
                }
                for n, r in step_nodes.items()
            },
            "rebuild": {
                n: {"execution_time": r.execution_time, "cpu_s": r.cpu_s}
                for n, r in rebuild_nodes.items()
            },
        }
        out["steps"].append(record)
        say(
            f"step {number}: "
            + ", ".join(
                f"{n} {r.execution_time:.2f} s (adapter {r.adapter.get('seconds')} s, read "
                f"{r.adapter.get('changes_read')}, applied {r.adapter.get('applied')}, "
                f"{r.adapter.get('plan')})"
                for n, r in step_nodes.items()
            )
            + " | rebuild: "
            + ", ".join(f"{n} {r.execution_time:.2f} s" for n, r in rebuild_nodes.items())
        )

    for number in range(1, args.floor_runs + 1):
        wall, nodes = dbt.run(INCREMENTAL)
        out["floor"].append(
            {
                n: {
                    "execution_time": r.execution_time,
                    "cpu_s": r.cpu_s,
                    "adapter": r.adapter,
                    "statements": [s.__dict__ for s in r.statements],
                }
                for n, r in nodes.items()
            }
        )
        say(
            f"no-change step {number}: "
            + ", ".join(
                f"{n} {r.execution_time:.2f} s (adapter {r.adapter.get('seconds')} s)"
                for n, r in nodes.items()
            )
        )

    out["verification"] = verify(spark)
    out["final_rows"] = {
        "events": int(scalar(spark, f"SELECT COUNT(*) FROM {SOURCE_SCHEMA}.events")),
        **{view: check["rows"] for check, (_, view, _) in zip(out["verification"], PAIRS)},
    }
    for check in out["verification"]:
        say(
            f"verify {check['view']} vs {check['table']}: {check['rows']} rows, "
            f"only in view {check['only_in_view']}, only in table {check['only_in_table']} -> "
            f"{'EQUAL' if check['equal'] else 'DIFFERENT'}"
        )
    out["summary"] = summarize_size(out)
    return out


def summarize_size(out: Dict[str, Any]) -> Dict[str, Any]:
    summary = {}
    for kind, view, table in PAIRS:
        step_times = [s["incremental"][view]["execution_time"] for s in out["steps"]]
        adapter_times = [
            s["incremental"][view]["adapter"].get("seconds", float("nan")) for s in out["steps"]
        ]
        rebuild_times = [s["rebuild"][table]["execution_time"] for s in out["steps"]]
        floor_times = [f[view]["execution_time"] for f in out["floor"]]
        step_cpu = [s["incremental"][view].get("cpu_s") for s in out["steps"]]
        rebuild_cpu = [s["rebuild"][table].get("cpu_s") for s in out["steps"]]
        floor_cpu = [f[view].get("cpu_s") for f in out["floor"]]
        floor_adapter = [f[view]["adapter"].get("seconds", float("nan")) for f in out["floor"]]
        step = median(step_times)
        summary[kind] = {
            "step_s": step,
            "step_adapter_s": median(adapter_times),
            "floor_s": median(floor_times),
            "floor_adapter_s": median(floor_adapter),
            "rebuild_s": median(rebuild_times),
            "step_cpu_s": median([c for c in step_cpu if c is not None]),
            "rebuild_cpu_s": median([c for c in rebuild_cpu if c is not None]),
            "floor_cpu_s": median([c for c in floor_cpu if c is not None]),
            "ratio": median(rebuild_times) / step if step else float("nan"),
            "step_min_s": min(step_times),
            "step_max_s": max(step_times),
            "rebuild_min_s": min(rebuild_times),
            "rebuild_max_s": max(rebuild_times),
            "changes_read": median(
                [s["incremental"][view]["adapter"].get("changes_read", 0) for s in out["steps"]]
            ),
            "applied": median(
                [s["incremental"][view]["adapter"].get("applied", 0) for s in out["steps"]]
            ),
            "plan": out["steps"][0]["incremental"][view]["adapter"].get("plan", ""),
        }
    return summary


def statement_breakdown(out: Dict[str, Any], view: str) -> List[Tuple[str, float, float]]:
    """Per statement of a step of `view`: (sql, median span s, median SQL-status s) over steps."""
    sequences = [s["incremental"][view]["statements"] for s in out["steps"]]
    labels = [tuple(statement_shape(st["sql"]) for st in seq) for seq in sequences]
    if len(set(labels)) != 1:  # steps ran different statements: use the last step alone
        sequences = sequences[-1:]
    rows = []
    for index, first in enumerate(sequences[0]):
        spans = [seq[index]["span"] or 0.0 for seq in sequences]
        statuses = [seq[index]["status_seconds"] or 0.0 for seq in sequences]
        rows.append((first["sql"], median(spans), median(statuses)))
    return rows


# -- report -------------------------------------------------------------------------------------


def write_report(results: Dict[str, Any], path: Path) -> None:
    info, sizes = results["machine"], results["sizes"]
    lines = [
        "# incremental_view step vs. full rebuild",
        "",
        f"Command: `{results['command']}`  ",
        f"Run: {results['started']}, {results['elapsed_s'] / 60:.1f} min in total.",
        "",
        f"Source `{SOURCE_SCHEMA}.events(id bigint, device int, ts timestamp, value decimal(10,2), "
        f"kind string)`: {DEVICES} devices, about one row per second with up to "
        f"{DISORDER_SECONDS} s of disorder, kind 'a' in 1/4 of rows. Each step appends "
        f"{results['step_rows']:,} new rows and runs one `dbt run` of both incremental views; "
        "then `dbt run` of both `table` twins is the full rebuild. Medians over "
        f"{results['steps']} steps; the floor is the median of {results['floor_runs']} steps "
        "with no new input.",
        "",
        "Times are the node's `execution_time` in `run_results` (wall time `dbt run` spends on "
        "the model); 'adapter' is the step's own `seconds` from the adapter response. CPU is the "
        "CPU time (user + system) this process and its JVM used while the node ran: less "
        "sensitive than wall time to other processes sharing the machine.",
        "",
        "| history rows | model | plan | step s (median) | step s (adapter) | floor s | "
        "full rebuild s (median) | rebuild / step | step CPU s | rebuild CPU s |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size in sizes:
        for kind, _, _ in PAIRS:
            s = size["summary"][kind]
            lines.append(
                f"| {size['rows']:,} | {kind} | {s['plan']} | {fmt(s['step_s'])} | "
                f"{fmt(s['step_adapter_s'])} | {fmt(s['floor_s'])} | {fmt(s['rebuild_s'])} | "
                f"{s['ratio']:.1f}x | {fmt(s.get('step_cpu_s', float('nan')))} | "
                f"{fmt(s.get('rebuild_cpu_s', float('nan')))} |"
            )
    if len(sizes) >= 2:
        first, last = sizes[0], sizes[-1]
        growth = last["rows"] / first["rows"]
        lines += [
            "",
            f"## Scaling from {first['rows']:,} to {last['rows']:,} rows ({growth:g}x history)",
            "",
            f"| model | measure | {first['rows']:,} | {last['rows']:,} | growth |",
            "|---|---|---:|---:|---:|",
        ]
        for kind, _, _ in PAIRS:
            a, b = first["summary"][kind], last["summary"][kind]
            for key, label in (
                ("step_s", "step s"),
                ("rebuild_s", "full rebuild s"),
                ("step_cpu_s", "step CPU s"),
                ("rebuild_cpu_s", "rebuild CPU s"),
                ("floor_s", "floor s"),
            ):
                x, y = a.get(key, float("nan")), b.get(key, float("nan"))
                lines.append(
                    f"| {kind} | {label} | {fmt(x)} | {fmt(y)} | "
                    f"{y / x if x else float('nan'):.2f}x |"
                )
        lines += [
            "",
            "Step time ranges (min-max over steps): "
            + "; ".join(
                f"{size['rows']:,} {kind}: {fmt(size['summary'][kind]['step_min_s'])}-"
                f"{fmt(size['summary'][kind]['step_max_s'])} s"
                for size in sizes
                for kind, _, _ in PAIRS
            )
            + ".",
        ]

    lines += [
        "",
        "## Every step",
        "",
        "Per-model node times of each measured step, wall s (CPU s), and the machine's "
        "1-minute load "
        f"average then (the machine has {info['cores']} cores; other processes share it).",
        "",
        "| history rows | step | "
        + " | ".join(f"{kind} step | {kind} rebuild" for kind, _, _ in PAIRS)
        + " | dbt run wall (step / rebuild) | load |",
        "|---:|---:|" + "---:|---:|" * len(PAIRS) + "---|---:|",
    ]
    for size in sizes:
        for step in size["steps"]:
            cells = " | ".join(
                f"{fmt(step['incremental'][view]['execution_time'])} "
                f"({fmt(step['incremental'][view].get('cpu_s') or float('nan'))}) | "
                f"{fmt(step['rebuild'][table]['execution_time'])} "
                f"({fmt(step['rebuild'][table].get('cpu_s') or float('nan'))})"
                for _, view, table in PAIRS
            )
            lines.append(
                f"| {size['rows']:,} | {step['step']} | {cells} | "
                f"{fmt(step['step_wall_s'])} / {fmt(step['rebuild_wall_s'])} | "
                f"{step['load_average']:.1f} |"
            )

    lines += [
        "",
        "What each step wrote (Delta's operation metrics of the step's commit; median "
        "over the steps). A MERGE rewrites every file holding a matched row: 'rows copied' "
        "are unchanged rows rewritten with them.",
        "",
        "| history rows | table | operation | files removed / added | rows copied | "
        "rows deleted / updated / inserted | rows written | rewrite ms |",
        "|---:|---|---|---|---:|---|---:|---:|",
    ]
    for size in sizes:
        tables = size["steps"][0].get("writes", {}) if size["steps"] else {}
        for table, first in tables.items():

            def med(key: str) -> str:
                values = [
                    s["writes"][table][key]
                    for s in size["steps"]
                    if key in s.get("writes", {}).get(table, {})
                ]
                return f"{median(values):,.0f}" if values else "-"

            lines.append(
                f"| {size['rows']:,} | {table} | {first['operation']} | "
                f"{med('numTargetFilesRemoved')} / {med('numTargetFilesAdded')} | "
                f"{med('numTargetRowsCopied')} | {med('numTargetRowsDeleted')} / "
                f"{med('numTargetRowsUpdated')} / {med('numTargetRowsInserted')} | "
                f"{med('numOutputRows')} | {med('rewriteTimeMs')} |"
            )

    lines += [
        "",
        "## Correctness",
        "",
        "Each incremental view vs. its table twin after the last step (EXCEPT ALL both ways):",
        "",
        "| history rows | view | rows | only in view | only in table | equal |",
        "|---:|---|---:|---:|---:|---|",
    ]
    for size in sizes:
        for check in size["verification"]:
            lines.append(
                f"| {size['rows']:,} | {check['view']} | {check['rows']:,} | "
                f"{check['only_in_view']} | {check['only_in_table']} | "
                f"{'yes' if check['equal'] else '**NO**'} |"
            )

    lines += [
        "",
        "## Setup per size (not part of the comparison)",
        "",
        "| history rows | create source s | first step (full load) s | first table build s |",
        "|---:|---:|---|---|",
    ]
    for size in sizes:
        setup = size["setup"]
        lines.append(
            f"| {size['rows']:,} | {setup['create_source_s']:.1f} | "
            + ", ".join(f"{n} {v['execution_time']:.1f}" for n, v in setup["first_step"].items())
            + " | "
            + ", ".join(f"{n} {v:.1f}" for n, v in setup["first_rebuild"].items())
            + " |"
        )

    lines += [
        "",
        "## Where a step's time goes",
        "",
        "Per statement the step runs (median over the steps), in order. 'span' is from the "
        "statement's start to the next statement's start (or the node's end), so it includes "
        "fetching a query's rows and the adapter's Python work in between; 'SQL status' is "
        "what dbt.log prints ('SQL status: OK in X seconds'), which for a plain SELECT "
        "excludes fetching its rows (Spark runs a SELECT lazily). `$x` is the step's "
        "temporary view `x`.",
    ]
    for kind, view, _ in PAIRS:
        breakdowns = [statement_breakdown(size, view) for size in sizes]
        header = (
            "| # | statement | "
            + " | ".join(f"{size['rows']:,} span s | status s" for size in sizes)
            + " |"
        )
        lines += ["", f"### {kind} ({view})", "", header, "|---:|---|" + "---:|---:|" * len(sizes)]
        count = max(len(b) for b in breakdowns)
        totals = [0.0] * len(sizes)
        for index in range(count):
            label = next((b[index][0] for b in breakdowns if index < len(b)), "")
            cells = []
            for position, breakdown in enumerate(breakdowns):
                if index < len(breakdown):
                    cells.append(f"{breakdown[index][1]:.3f} | {breakdown[index][2]:.3f}")
                    totals[position] += breakdown[index][1]
                else:
                    cells.append(" | ")
            escaped = statement_label(label).replace("|", "\\|")
            lines.append(f"| {index + 1} | `{escaped}` | " + " | ".join(cells) + " |")
        lines.append("| | sum of spans | " + " | ".join(f"{t:.3f} | " for t in totals) + " |")
        mismatch = [
            size["rows"]
            for size, b in zip(sizes, breakdowns)
            if [statement_shape(r[0]) for r in b] != [statement_shape(r[0]) for r in breakdowns[0]]
        ]
        if mismatch:
            lines.append(
                f"\nNote: the statements differ between sizes ({mismatch}); rows are "
                "matched by position."
            )

    lines += ["", "## Machine", ""]
    lines += machine_lines(info)
    name = path.stem
    lines += [
        "",
        f"Numbers: `{name}.json` (summary), `{name}.raw.json.gz` (every step). Plot: `{name}.png`.",
        "",
    ]
    path.write_text("\n".join(lines))


def write_plot(results: Dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FormatStrFormatter

    sizes = results["sizes"]
    rows = [size["rows"] for size in sizes]
    figure, axes = plt.subplots(1, len(PAIRS), figsize=(5.5 * len(PAIRS), 4.2), squeeze=False)
    for axis, (kind, _, _) in zip(axes[0], PAIRS):
        summary = [size["summary"][kind] for size in sizes]
        axis.plot(
            rows,
            [s["rebuild_s"] for s in summary],
            "o-",
            color="tab:red",
            label="full rebuild (table)",
        )
        axis.plot(
            rows,
            [s["step_s"] for s in summary],
            "o-",
            color="tab:blue",
            label=f"step, {results['step_rows']:,} new rows",
        )
        axis.plot(
            rows,
            [s["floor_s"] for s in summary],
            "o--",
            color="tab:gray",
            label="step, no new rows (floor)",
        )
        for size, s in zip(sizes, summary):
            axis.annotate(
                f"{s['rebuild_s']:.1f}s",
                (size["rows"], s["rebuild_s"]),
                textcoords="offset points",
                xytext=(4, 4),
                fontsize=8,
            )
            axis.annotate(
                f"{s['step_s']:.1f}s",
                (size["rows"], s["step_s"]),
                textcoords="offset points",
                xytext=(4, -12),
                fontsize=8,
            )
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.yaxis.set_major_formatter(FormatStrFormatter("%g"))
        axis.yaxis.set_minor_formatter(FormatStrFormatter("%g"))
        axis.tick_params(axis="y", which="minor", labelsize=7)
        axis.set_xticks(rows)
        axis.set_xticklabels([f"{r / 1e6:g}M" if r >= 1e6 else f"{r / 1e3:g}K" for r in rows])
        axis.set_xlabel("rows in the source (history)")
        axis.set_ylabel("seconds (median)")
        axis.set_title(f"{kind} view")
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=8)
    figure.suptitle("dbt-streamsql: incremental_view step vs. full rebuild", fontsize=11)
    figure.tight_layout()
    save_plot(figure, path, dpi=120)
    plt.close(figure)


# -- main ---------------------------------------------------------------------------------------


def summary_of(results: Dict[str, Any]) -> Dict[str, Any]:
    """A run without its steps: each size's setup, medians (`summary`) and checks."""
    sizes = [
        {key: value for key, value in size.items() if key not in ("steps", "floor")}
        for size in results["sizes"]
    ]
    return dict(results, sizes=sizes)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes",
        default="1000000,10000000",
        help="history sizes (rows in the source), comma-separated",
    )
    parser.add_argument("--step-rows", type=int, default=10_000, help="new rows per step")
    parser.add_argument("--steps", type=int, default=5, help="measured steps per size")
    parser.add_argument("--floor-runs", type=int, default=3, help="steps with no new rows")
    parser.add_argument("--seed", type=int, default=7, help="seed of the generated data")
    parser.add_argument("--driver-memory", default="6g", help="spark.driver.memory")
    parser.add_argument(
        "--work-dir",
        default=str(BENCH_DIR / "work"),
        help="dbt project, warehouse and logs (deleted at start)",
    )
    parser.add_argument("--results-dir", default=str(BENCH_DIR / "results"))
    parser.add_argument(
        "--pairs",
        default=DEFAULT_PAIRS,
        help=f"model kinds, comma-separated, of: {', '.join(ALL_PAIRS)}",
    )
    parser.add_argument(
        "--output-name", default="step_vs_rebuild", help="results file name, without suffix"
    )
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    choose_pairs([kind.strip() for kind in args.pairs.split(",") if kind.strip()])
    sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()]
    work, results_dir = Path(args.work_dir).resolve(), Path(args.results_dir).resolve()
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    results_dir.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("DBT_SEND_ANONYMOUS_USAGE_STATS", "false")
    os.chdir(work)  # derby.log and spark-warehouse strays land here, not in the repo

    target = write_project(work, args.driver_memory)
    spark = start_session(target)  # the adapter's own session: dbt reuses it
    dbt = Dbt(work)
    results: Dict[str, Any] = {
        "command": "python bench/step_vs_rebuild.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "step_rows": args.step_rows,
        "steps": args.steps,
        "floor_runs": args.floor_runs,
        "seed": args.seed,
        "machine": machine_info(spark, args),
        "sizes": [],
    }
    started = time.monotonic()
    failed = []
    for rows in sizes:
        size = run_size(spark, dbt, rows, args)
        results["sizes"].append(size)
        failed += [
            f"{rows:,} rows: {c['view']} != {c['table']} ({c['only_in_view']} rows only "
            f"in the view, {c['only_in_table']} only in the table)"
            for c in size["verification"]
            if not c["equal"]
        ]
        # Written after every size, so a long run that is stopped still leaves its results.
        results["elapsed_s"] = time.monotonic() - started
        results["machine"]["load_average_at_end"] = os.getloadavg()
        name = args.output_name
        write_run_json(results_dir, name, results, summary_of(results))
        write_report(results, results_dir / f"{name}.md")
        write_plot(results, results_dir / f"{name}.png")
        print(f"wrote {results_dir / name}.md and .png/.json/.raw.json.gz", flush=True)
    if failed:
        print(
            "VERIFICATION FAILED: the incremental views differ from a full rebuild:\n  "
            + "\n  ".join(failed),
            file=sys.stderr,
            flush=True,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
