"""Benchmark: Nexmark queries as incremental_view vs. rebuild, incremental merge and streaming.

In ONE process (one JVM, one warehouse; dbt runs in-process through `dbtRunner`, the streaming
jobs use the same SparkSession), for each history size:

1. generates the Nexmark tables `nexmark.person/auction/bid` (Delta, change feed on) holding
   `--history-bids` bids (bench/nexmark/generator.py);
2. builds every approach once over the history (not measured): the first step of each
   incremental_view, the `table` models, the first run of the `incremental` models, the first
   availableNow run of each streaming query;
3. for each step size, `--steps` times: appends that many new events, then runs each approach on
   every query (dbt: one `dbt run` per approach selecting its models; streaming: one
   availableNow run per query) and records per-query time and peak JVM heap;
4. `--floor-runs` times with no new events: the fixed floor of each approach;
5. compares every approach's result with the `table` model's (EXCEPT ALL both ways); a
   difference fails the run (exit 1, after the report is written).

Writes bench/results/<output-name>.md (default `nexmark`), .png, .json (the summary) and
.raw.json.gz (every step). See bench/README.md.
"""

from __future__ import annotations

import argparse
import atexit
import json
import math
import os
import shutil
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from benchlib import (
    BENCH_DIR,
    Dbt,
    MemorySampler,
    fmt,
    loopback_s3,
    machine_info,
    machine_lines,
    median,
    multiset_difference,
    multiset_fingerprint,
    on_object_store,
    read_run_json,
    save_plot,
    scalar,
    start_session,
    use_adapter_revision,
    write_project_skeleton,
    write_run_json,
)
from nexmark import generator
from nexmark.queries import QUERIES, STREAM_WATERMARK, Query, render

TARGET_SCHEMA = "bench"
APPROACHES = ("view", "table", "incremental", "stream")
LABELS = {
    "view": "incremental_view",
    "table": "table (full rebuild)",
    "incremental": "incremental (merge)",
    "stream": "Structured Streaming",
}
MODEL_SUFFIX = {"view": "view", "table": "table", "incremental": "incr"}


def model_name(query: str, approach: str) -> str:
    return f"{query}_{MODEL_SUFFIX.get(approach, 'stream')}"


def merge_var(query: str) -> str:
    """The dbt var holding the incremental model's MERGE predicate for the next run."""
    return f"nexmark_{query}_merge_predicate"


# -- the dbt project ----------------------------------------------------------------------------


def write_project(
    work: Path,
    driver_memory: str,
    queries: Sequence[Query],
    approaches: Sequence[str],
    settings: Optional[Dict[str, str]] = None,
) -> Dict[str, Any]:
    target = write_project_skeleton(
        work,
        "nexmark_bench",
        TARGET_SCHEMA,
        driver_memory,
        {generator.SCHEMA: list(generator.DDL)},
        settings=settings,
    )
    refs = {t: "{{ source('%s', '%s') }}" % (generator.SCHEMA, t) for t in generator.DDL}
    for q in queries:
        models = {}
        if "view" in approaches:
            config = {"materialized": "incremental_view", **q.view_config}
            models["view"] = (config, q.sql)
        if True:  # `table` always: the reference every approach is compared with
            models["table"] = ({"materialized": "table"}, q.sql)
        if "incremental" in approaches and q.incremental:
            models["incremental"] = (
                {
                    "materialized": "incremental",
                    "incremental_strategy": "merge",
                    "unique_key": q.unique_key,
                },
                q.incremental,
            )
        for approach, (config, sql) in models.items():
            settings = [f"{k}={v!r}" for k, v in config.items()]
            if approach == "incremental" and q.merge_predicate:
                # computed before each step (Bench.prepare_step): the MERGE prunes the target
                settings.append(f"incremental_predicates=[var({merge_var(q.name)!r}, 'true')]")
            text = "{{ config(%s) }}\n%s\n" % (
                ", ".join(settings),
                render(sql, refs, this="{{ this }}"),
            )
            (work / "models" / f"{model_name(q.name, approach)}.sql").write_text(text)
    return target


# -- Structured Streaming -----------------------------------------------------------------------


class StreamJob:
    """One query as a Structured Streaming job: Delta sources with a watermark on date_time,
    foreachBatch into a Delta table (idempotent append, or MERGE on the key in update mode),
    trigger(availableNow=True). One `run()` is one step."""

    def __init__(self, spark: Any, query: Query, work: Path) -> None:
        self.spark, self.query = spark, query
        self.table = f"{TARGET_SCHEMA}.{model_name(query.name, 'stream')}"
        self.checkpoint = work / "checkpoints" / query.name
        self.watermark: Optional[str] = None  # event-time watermark of the last batch

    def _write_batch(self, batch: Any, batch_id: int) -> None:
        session = batch.sparkSession
        exists = session.catalog.tableExists(self.table)
        if self.query.stream_mode == "append" or not exists:
            (
                batch.write.format("delta")
                .mode("append")
                .option("txnAppId", f"nexmark-{self.query.name}")
                .option("txnVersion", batch_id)
                .saveAsTable(self.table)
            )
            return
        view = f"nexmark_batch_{self.query.name}"
        batch.createOrReplaceTempView(view)
        on = " AND ".join(f"t.`{k}` <=> s.`{k}`" for k in self.query.stream_key)
        session.sql(
            f"MERGE INTO {self.table} t USING {view} s ON {on} "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        )

    def run(self) -> None:
        names = {}
        for table in self.query.inputs:
            name = f"nexmark_stream_{table}"
            (
                self.spark.readStream.format("delta")
                .table(f"{generator.SCHEMA}.{table}")
                .withWatermark("date_time", STREAM_WATERMARK)
                .createOrReplaceTempView(name)
            )
            names[table] = name
        frame = self.spark.sql(render(self.query.sql, names))
        handle = (
            frame.writeStream.foreachBatch(self._write_batch)
            .outputMode(self.query.stream_mode)
            .option("checkpointLocation", str(self.checkpoint))
            .queryName(f"nexmark_{self.query.name}")
            .trigger(availableNow=True)
            .start()
        )
        handle.awaitTermination()
        if handle.exception() is not None:
            raise RuntimeError(str(handle.exception()))
        progress = handle.lastProgress or {}
        self.watermark = (progress.get("eventTime") or {}).get("watermark") or self.watermark


# -- one history size ---------------------------------------------------------------------------


class Bench:
    def __init__(
        self,
        spark: Any,
        dbt: Dbt,
        memory: MemorySampler,
        work: Path,
        queries: Sequence[Query],
        approaches: Sequence[str],
        args: argparse.Namespace,
    ):
        self.spark, self.dbt, self.memory, self.work = spark, dbt, memory, work
        self.queries, self.approaches, self.args = list(queries), list(approaches), args
        self.unsupported: Dict[Tuple[str, str], str] = {}
        for q in self.queries:
            if "incremental" in approaches and not q.incremental:
                self.unsupported[(q.name, "incremental")] = "no correct filter: " + q.no_incremental
        self.streams = {q.name: StreamJob(spark, q, work) for q in self.queries}
        self.vars: List[str] = []  # dbt's --vars for every run of the current step
        self.wall: Dict[str, float] = {}  # per approach, its last run's wall time

    def prepare_step(self) -> None:
        """Untimed, before a step's runs: each incremental model's MERGE predicate from its
        table as it is now (the bound its own filter computes in the run), passed as dbt vars
        to every approach's run of the step, and parsed once, so that no timed run re-parses."""
        if "incremental" not in self.approaches:
            return
        predicates = {}
        for q in self.active("incremental"):
            if not q.merge_predicate:
                continue
            table = f"{TARGET_SCHEMA}.{model_name(q.name, 'incremental')}"
            bound = self.spark.sql(render(q.merge_bound, {}, this=table)).collect()[0][0]
            predicates[merge_var(q.name)] = q.merge_predicate.format(bound=bound)
        self.vars = ["--vars", json.dumps(predicates)]
        self.dbt.parse(self.vars)

    def active(self, approach: str) -> List[Query]:
        return [q for q in self.queries if (q.name, approach) not in self.unsupported]

    def run_approach(self, approach: str, phase: str) -> Dict[str, Dict[str, Any]]:
        """Runs one approach on every query it supports; per query: seconds, heap peak, extra.
        The whole run's wall time (the `dbt run`, or every streaming query's run) goes to
        `self.wall[approach]`."""
        out: Dict[str, Dict[str, Any]] = {}
        queries = self.active(approach)
        if not queries:
            return out
        run_started = time.monotonic()
        if approach == "stream":
            for q in queries:
                started = time.monotonic()
                try:
                    self.streams[q.name].run()
                except Exception as exc:  # noqa: BLE001 - Spark refused or failed the query
                    self._fail(q.name, approach, phase, f"{type(exc).__name__}: {exc}")
                    continue
                finished = time.monotonic()
                out[q.name] = {
                    "seconds": finished - started,
                    "heap_peak_mib": self.memory.peak(started, finished),
                }
            self.wall[approach] = time.monotonic() - run_started
            return out
        names = {model_name(q.name, approach): q.name for q in queries}
        self.wall[approach], nodes = self.dbt.run(list(names), self.vars, check=False)
        for node_name, node in nodes.items():
            query = names[node_name]
            if node.status != "success":
                self._fail(query, approach, phase, node.message or node.status)
                continue
            out[query] = {
                "seconds": node.execution_time,
                "cpu_s": node.cpu_s,
                "heap_peak_mib": self.memory.peak(node.started, node.finished),
            }
            if approach == "view":
                out[query]["adapter"] = {
                    k: node.adapter.get(k)
                    for k in (
                        "step",
                        "plan",
                        "reason",
                        "changes_read",
                        "applied",
                        "late",
                        "held",
                        "seconds",
                    )
                }
        return out

    def _fail(self, query: str, approach: str, phase: str, message: str) -> None:
        # Spark wraps the cause (e.g. an AnalysisException inside foreachBatch): show the cause.
        causes = [
            line.split("AnalysisException: ", 1)[1]
            for line in message.splitlines()
            if "AnalysisException: " in line
        ]
        first_line = (
            causes[-1]
            if causes
            else (message.strip().splitlines()[0] if message.strip() else message)
        )
        if causes:
            message = f"AnalysisException: {causes[-1]}\n\n{message}"
        print(f"  {query} {approach}: FAILED in {phase}: {first_line[:300]}", flush=True)
        self.unsupported[(query, approach)] = f"failed in {phase}: {message.strip()[:2000]}"

    def run_all(self, phase: str, turn: int = 0) -> Dict[str, Any]:
        """One step of every approach, the order rotated by `turn` (the step's number), so
        that no approach always runs first after the append, or right after another."""
        self.prepare_step()
        self.wall = {}
        shift = turn % len(self.approaches)
        order = self.approaches[shift:] + self.approaches[:shift]
        out: Dict[str, Any] = {a: self.run_approach(a, phase) for a in order}
        out["order"] = order
        out["wall_s"] = dict(self.wall)
        return out


def run_history(
    spark: Any, bench: Bench, history_bids: int, args: argparse.Namespace
) -> Dict[str, Any]:
    out: Dict[str, Any] = {"history_bids": history_bids, "setup": {}, "step_sizes": []}
    say = lambda text: print(f"[{history_bids:>11,} bids] {text}", flush=True)  # noqa: E731
    for schema in (TARGET_SCHEMA, generator.SCHEMA):
        spark.sql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    spark.catalog.clearCache()
    shutil.rmtree(bench.work / "checkpoints", ignore_errors=True)
    spark.sql(f"CREATE SCHEMA {TARGET_SCHEMA}")
    generator.create_tables(spark)
    next_event = generator.events_for_bids(history_bids)
    started = time.monotonic()
    counts = generator.append_events(spark, 0, next_event, args.seed)
    out["setup"]["history_rows"] = counts
    out["setup"]["generate_s"] = time.monotonic() - started
    say(f"history generated in {out['setup']['generate_s']:.1f} s: {counts}")

    for approach in bench.approaches:
        started = time.monotonic()
        out["setup"][approach] = bench.run_approach(approach, "first build")
        say(f"first build, {approach}: {time.monotonic() - started:.1f} s")

    for step_events in args.step_events:
        size: Dict[str, Any] = {"step_events": step_events, "steps": []}
        for number in range(1, args.steps + 1):
            started = time.monotonic()
            appended = generator.append_events(
                spark, next_event, next_event + step_events, args.seed
            )
            next_event += step_events
            record = {
                "step": number,
                "append_s": time.monotonic() - started,
                "appended": appended,
                "load_average": os.getloadavg()[0],
            }
            record.update(bench.run_all(f"step {number} of {step_events:,} events", number))
            started = time.monotonic()
            record["checks"] = verify(spark, bench, exact=False)
            record["check_s"] = time.monotonic() - started
            different = [c for c in record["checks"] if c.get("equal") is False]
            for check in different:
                say(f"step {number}: {check['query']} {check['approach']}: {check['verdict']}")
            size["steps"].append(record)
            say(
                f"{step_events:,} events, step {number}: "
                + "; ".join(
                    f"{a} " + " ".join(f"{q}={r['seconds']:.1f}" for q, r in record[a].items())
                    for a in bench.approaches
                )
            )
        out["step_sizes"].append(size)

    out["floor"] = []
    for number in range(1, args.floor_runs + 1):
        record = bench.run_all(f"no-change step {number}", number)
        out["floor"].append(record)
        say(
            f"no-change step {number}: "
            + "; ".join(
                f"{a} " + " ".join(f"{q}={r['seconds']:.1f}" for q, r in record[a].items())
                for a in bench.approaches
            )
        )
    out["events"] = next_event
    try:
        out["verification"] = verify(spark, bench)
    except Exception as exc:  # noqa: BLE001 - still write the timings
        out["verification"] = [
            {
                "query": "*",
                "approach": "*",
                "equal": False,
                "verdict": f"verification crashed: {type(exc).__name__}: {exc}",
            }
        ]
    for check in out["verification"]:
        say(f"verify {check['query']} {check['approach']}: {check['verdict']}")
    out["summary"] = summarize(out, bench)
    return out


def verify(spark: Any, bench: Bench, exact: bool = True) -> List[Dict[str, Any]]:
    """Each approach's result vs. the `table` model's, as multisets of the query's columns:
    `exact`, EXCEPT ALL both ways (after the last step); else by fingerprint (after every step,
    `multiset_fingerprint`: one pass over each table)."""
    checks = []
    tables = {row["tableName"] for row in spark.sql(f"SHOW TABLES IN {TARGET_SCHEMA}").collect()}
    fingerprints: Dict[str, Tuple[Any, ...]] = {}  # by query: the reference's, read once
    for q in bench.queries:
        reference = model_name(q.name, "table")
        if reference not in tables or (q.name, "table") in bench.unsupported:
            checks.append(
                {"query": q.name, "approach": "table", "verdict": "no reference", "equal": None}
            )
            continue
        names = [f"`{c}`" for c in spark.table(f"{TARGET_SCHEMA}.{reference}").columns]
        columns = ", ".join(names)
        # (the fingerprints count rows themselves)
        rows = (
            int(scalar(spark, f"SELECT COUNT(*) FROM {TARGET_SCHEMA}.{reference}")) if exact else 0
        )
        for approach in bench.approaches:
            if approach == "table" or (q.name, approach) in bench.unsupported:
                continue
            other = model_name(q.name, approach)
            if other not in tables:
                continue
            left = f"SELECT {columns} FROM {TARGET_SCHEMA}.{other}"
            right = f"SELECT {columns} FROM {TARGET_SCHEMA}.{reference}"
            scope, compared = "", rows
            watermark = bench.streams[q.name].watermark
            if approach == "stream" and q.stream_closed:
                if not watermark:
                    checks.append(
                        {
                            "query": q.name,
                            "approach": approach,
                            "equal": False,
                            "verdict": "no watermark reported by the stream",
                        }
                    )
                    continue
                closed = q.stream_closed.replace(
                    "@watermark", f"timestamp'{watermark.replace('T', ' ').rstrip('Z')}'"
                )
                left, right = f"{left} WHERE {closed}", f"{right} WHERE {closed}"
                scope = f" of windows closed by the stream's watermark {watermark} ({closed})"
                if exact:
                    compared = int(scalar(spark, f"SELECT COUNT(*) FROM ({right})"))
                    scope = f" on the {compared:,} of {rows:,} rows{scope}"
            if not exact:
                for query in (left, right):
                    if query not in fingerprints:
                        fingerprints[query] = multiset_fingerprint(spark, query, names)
                mine, theirs = fingerprints[left], fingerprints[right]
                checks.append(
                    {
                        "query": q.name,
                        "approach": approach,
                        "equal": mine == theirs,
                        "verdict": f"{'EQUAL' if mine == theirs else 'DIFFERENT'} by fingerprint "
                        f"({mine[0]:,} rows against {theirs[0]:,}{scope})",
                    }
                )
                continue
            only_other, only_table = multiset_difference(spark, left, right)
            equal = only_other == 0 and only_table == 0
            checks.append(
                {
                    "query": q.name,
                    "approach": approach,
                    "rows": rows,
                    "compared_rows": compared,
                    "only_in_approach": only_other,
                    "only_in_table": only_table,
                    "equal": equal,
                    "verdict": (
                        f"EQUAL ({rows:,} rows{scope})"
                        if equal
                        else f"DIFFERENT ({only_other} rows only in {approach}, "
                        f"{only_table} only in the table{scope})"
                    ),
                }
            )
    return checks


def summarize(out: Dict[str, Any], bench: Bench) -> Dict[str, Any]:
    summary: Dict[str, Any] = {}
    for size in out["step_sizes"]:
        per_query: Dict[str, Any] = {}
        for q in bench.queries:
            row: Dict[str, Any] = {}
            for approach in bench.approaches:
                if (q.name, approach) in bench.unsupported:
                    continue
                steps = [s[approach][q.name] for s in size["steps"] if q.name in s[approach]]
                floors = [f[approach][q.name] for f in out["floor"] if q.name in f[approach]]
                if not steps:
                    continue
                heaps = [
                    s["heap_peak_mib"] for s in steps + floors if s.get("heap_peak_mib") is not None
                ]
                row[approach] = {
                    "step_s": median([s["seconds"] for s in steps]),
                    "step_mean_s": sum(s["seconds"] for s in steps) / len(steps),
                    "steps": len(steps),
                    "step_min_s": min(s["seconds"] for s in steps),
                    "step_max_s": max(s["seconds"] for s in steps),
                    "floor_s": median([f["seconds"] for f in floors]),
                    "heap_peak_mib": max(heaps) if heaps else None,
                }
                if approach == "view":
                    adapter = steps[-1].get("adapter", {})
                    row[approach].update(
                        plan=adapter.get("plan"),
                        reason=adapter.get("reason"),
                        late=sum(int(s.get("adapter", {}).get("late") or 0) for s in steps),
                    )
            per_query[q.name] = row
        summary[str(size["step_events"])] = per_query
    return summary


# -- report -------------------------------------------------------------------------------------


def write_report(results: Dict[str, Any], path: Path) -> None:
    info = results["machine"]
    approaches = results["approaches"]
    lines = [
        "# Nexmark: incremental_view vs. full rebuild, incremental merge and Structured Streaming",
        "",
    ]
    if results.get("label"):
        lines += [f"**{results['label']}**", ""]
    lines += [
        f"Command: `{results['command']}`  ",
        f"Run: {results['started']}, {results['elapsed_s'] / 60:.1f} min in total. "
        f"Warehouse: {results.get('warehouse', 'local disk')}.",
        "",
        "Data: the seeded Nexmark generator of `bench/nexmark/generator.py` (person:auction:bid = "
        f"1:3:46, Nexmark's id, price and hot-item schemes; one event every "
        f"{generator.EVENT_SPACING_MS} ms of event time, each up to "
        f"{generator.DISORDER_MS / 1000:g} s late), seed {results['seed']}. A step appends N new "
        "events (one Delta commit per table) and then runs each approach: `incremental_view` "
        "(one `dbt run` of all its models, one step each), `table` (one `dbt run`: the full "
        "rebuild), `incremental` (one `dbt run`: dbt-spark merge with a hand-written "
        "`is_incremental()` filter) and Structured Streaming (per query: start, "
        "`trigger(availableNow=True)`, foreachBatch into Delta, wait; RocksDB state store). "
        "The dbt-spark `incremental` models carry `incremental_predicates` (their filter's bound "
        "on a unique_key column, computed before each step), so that their MERGE skips the "
        "target's files. The approaches' order rotates from step to step. Queries and variants: "
        "`bench/nexmark/queries.py`.",
        "",
        "Time is the node's `execution_time` from dbt's run results (streaming: start to end of "
        "the availableNow run), median over the steps (mean, min and max under each size); "
        "floor: median of steps with no new events. Peak heap: the largest JVM heap in use "
        "(MemoryMXBean, sampled 4x/s, garbage not yet collected included) while that query "
        "ran, over all its steps and floors. All "
        "approaches share one JVM (`spark.driver.memory` "
        f"{info.get('spark.driver.memory')}); its peak RSS over the whole run was "
        f"{results.get('jvm_rss_peak_mib', float('nan')):,.0f} MiB.",
    ]
    for history in results["histories"]:
        for size_key, per_query in history["summary"].items():
            lines += [
                "",
                f"## {history['history_bids']:,} bids of history, steps of "
                f"{int(size_key):,} events",
                "",
                "| query | view plan | "
                + " | ".join(f"{LABELS[a]} s" for a in approaches)
                + " | "
                + " | ".join(f"{LABELS[a]} / view" for a in approaches if a != "view")
                + " | fastest | floor s ("
                + " / ".join(approaches)
                + ") | peak heap MiB ("
                + " / ".join(approaches)
                + ") |",
                "|---|---|"
                + "---:|" * len(approaches)
                + "---:|" * (len(approaches) - 1)
                + "---|---|---|",
            ]
            for query, row in per_query.items():
                view = row.get("view", {}).get("step_s")
                cells = [fmt(row[a]["step_s"]) if a in row else "-" for a in approaches]
                ratios = [
                    f"{row[a]['step_s'] / view:.2f}x" if a in row and view else "-"
                    for a in approaches
                    if a != "view"
                ]
                floors = " / ".join(fmt(row[a]["floor_s"]) if a in row else "-" for a in approaches)
                heaps = " / ".join(
                    f"{row[a]['heap_peak_mib']:,.0f}"
                    if a in row and row[a]["heap_peak_mib"]
                    else "-"
                    for a in approaches
                )
                plan = row.get("view", {}).get("plan") or "-"
                fastest = fastest_approach(row)
                lines.append(
                    f"| {query} | {plan} | "
                    + " | ".join(cells)
                    + " | "
                    + " | ".join(ratios)
                    + f" | {LABELS[fastest] if fastest else '-'}"
                    f" | {floors} | {heaps} |"
                )
            lines += spread_lines(history, int(size_key), per_query, approaches)
    lines += [
        "",
        "## Plans of the incremental views",
        "",
        "| query | plan | reason | late rows (all steps) |",
        "|---|---|---|---:|",
    ]
    last = results["histories"][-1] if results["histories"] else None
    if last and last["summary"]:
        per_query = next(iter(last["summary"].values()))
        for query, row in per_query.items():
            view = row.get("view", {})
            reason = str(view.get("reason") or "").replace("|", "\\|")
            lines.append(
                f"| {query} | {view.get('plan', '-')} | {reason} | {view.get('late', '-')} |"
            )
    lines += ["", "## Not measured (query, approach) and why", ""]
    for (query, approach), reason in sorted(results["unsupported"].items()):
        reason = reason.replace("\n", " ").replace("|", "\\|")
        if len(reason) > 600:
            reason = reason[:600] + " ..."
        lines.append(f"- **{query}, {LABELS[approach]}**: {reason}")
    lines += [
        "",
        "## Correctness after the last step",
        "",
        "Each approach vs. the `table` model (EXCEPT ALL both ways, the query's columns):",
        "",
        "| history bids | query | approach | verdict |",
        "|---:|---|---|---|",
    ]
    for history in results["histories"]:
        for check in history["verification"]:
            lines.append(
                f"| {history['history_bids']:,} | {check['query']} | "
                f"{check['approach']} | {check['verdict']} |"
            )
    lines += [
        "",
        "After every step (untimed), each approach against the `table` model by fingerprint "
        "(row count and two sums of 64-bit row hashes, one pass over each table):",
        "",
    ]
    for history in results["histories"]:
        tally: Dict[Tuple[str, str], List[int]] = {}
        for size in history["step_sizes"]:
            for step in size["steps"]:
                for check in step.get("checks", []):
                    if check.get("equal") is None:
                        continue
                    seen = tally.setdefault((check["query"], check["approach"]), [0, 0])
                    seen[0] += bool(check["equal"])
                    seen[1] += 1
        if tally:
            lines.append(
                f"- {history['history_bids']:,} bids: "
                + "; ".join(
                    f"{query} {approach} equal after {equal} of {steps} steps"
                    for (query, approach), (equal, steps) in sorted(tally.items())
                )
                + "."
            )
    lines += [
        "",
        "## Every step",
        "",
        "Seconds per query and approach; load = 1-minute load "
        f"average (the machine has {info['cores']} cores).",
        "",
    ]
    for history in results["histories"]:
        for size in history["step_sizes"]:
            lines += [
                f"{history['history_bids']:,} bids, steps of {size['step_events']:,} events:",
                "",
                "| step | load | order | " + " | ".join(approaches) + " |",
                "|---:|---:|---|" + "---|" * len(approaches),
            ]
            for step in size["steps"]:
                lines.append(
                    f"| {step['step']} | {step['load_average']:.1f} | "
                    + ", ".join(step.get("order", approaches))
                    + " | "
                    + " | ".join(
                        " ".join(f"{q} {r['seconds']:.1f}" for q, r in step[a].items())
                        for a in approaches
                    )
                    + " |"
                )
            lines.append("")
        lines += [
            f"Setup at {history['history_bids']:,} bids: generate "
            f"{history['setup']['generate_s']:.1f} s ({history['setup']['history_rows']}); "
            "first build: "
            + "; ".join(
                f"{a} "
                + " ".join(f"{q} {r['seconds']:.1f}" for q, r in history["setup"][a].items())
                for a in approaches
            )
            + ".",
            "",
        ]
    lines += ["## Machine", ""]
    lines += machine_lines(info)
    name = results.get("output_name", "nexmark")
    lines += [
        "",
        f"Numbers: `{name}.json` (summary), `{name}.raw.json.gz` (every step). Plot: `{name}.png`.",
        "",
    ]
    path.write_text("\n".join(lines))


def spread_lines(
    history: Dict[str, Any], step_events: int, per_query: Dict[str, Any], approaches: List[str]
) -> List[str]:
    """Mean / median / min / max per query and approach, and the whole runs' wall time."""
    lines = [
        "",
        "Seconds per step, mean / median / min - max over the steps:",
        "",
        "| query | " + " | ".join(LABELS[a] for a in approaches) + " |",
        "|---|" + "---|" * len(approaches),
    ]
    for query, row in per_query.items():
        cells = [
            f"{row[a]['step_mean_s']:.2f} / {row[a]['step_s']:.2f} / "
            f"{row[a]['step_min_s']:.2f} - {row[a]['step_max_s']:.2f}"
            if a in row and row[a].get("step_mean_s") is not None
            else "-"
            for a in approaches
        ]
        lines.append(f"| {query} | " + " | ".join(cells) + " |")
    size = next((s for s in history["step_sizes"] if s["step_events"] == step_events), None)
    walls = (
        {a: [s["wall_s"][a] for s in size["steps"] if a in s.get("wall_s", {})] for a in approaches}
        if size
        else {}
    )
    if any(walls.values()):
        lines += [
            "",
            "Whole run per step (the `dbt run` of all of an approach's models, dbt's start, parse "
            "check and end included; streaming: every query's run), median (min - max): "
            + "; ".join(
                f"{LABELS[a]} {median(w):.1f} s ({min(w):.1f} - {max(w):.1f})"
                for a, w in walls.items()
                if w
            )
            + ".",
        ]
    return lines


def fastest_approach(row: Dict[str, Any]) -> Optional[str]:
    """The approach with the smallest median step of one query's summary row."""
    timed = [(r["step_s"], a) for a, r in row.items() if r.get("step_s") is not None]
    return min(timed)[1] if timed else None


def write_plot(results: Dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FormatStrFormatter

    panels = [(h, key) for h in results["histories"] for key in h["summary"]]
    if not panels:
        return
    approaches = results["approaches"]
    colors = {
        "view": "tab:blue",
        "table": "tab:red",
        "incremental": "tab:orange",
        "stream": "tab:green",
    }
    figure, axes = plt.subplots(
        len(panels), 1, figsize=(11, 3.6 * len(panels)), squeeze=False, layout="constrained"
    )  # room for a wrapped title
    for axis, (history, key) in zip(axes[:, 0], panels):
        per_query = history["summary"][key]
        queries = list(per_query)
        width = 0.8 / len(approaches)
        smallest, largest = float("inf"), 0.0
        for index, approach in enumerate(approaches):
            xs = [i + (index - (len(approaches) - 1) / 2) * width for i in range(len(queries))]
            ys = [
                per_query[q][approach]["step_s"] if approach in per_query[q] else 0 for q in queries
            ]
            bars = axis.bar(xs, ys, width, label=LABELS[approach], color=colors[approach])
            axis.bar_label(
                bars, labels=[f"{y:.1f}" if y else "" for y in ys], fontsize=6, padding=1
            )
            smallest = min([y for y in ys if y] + [smallest])
            largest = max(ys + [largest])
            for x, q in zip(xs, queries):
                if approach not in per_query[q]:
                    axis.text(
                        x,
                        0.02,
                        "n/a",
                        rotation=90,
                        ha="center",
                        va="bottom",
                        fontsize=7,
                        color=colors[approach],
                        transform=axis.get_xaxis_transform(),
                    )
        axis.set_xticks(range(len(queries)))
        axis.set_xticklabels(queries)
        axis.set_yscale("log")
        if smallest < float("inf"):
            # Bars start at a decade at most half the smallest value (not at it, which would
            # make it look like nothing); room above the tallest for its label and the legend.
            bottom = 10 ** math.floor(math.log10(smallest / 2))
            axis.set_ylim(bottom=bottom, top=largest * 3)
        axis.yaxis.set_major_formatter(FormatStrFormatter("%g"))
        if axis.get_ylim()[1] / axis.get_ylim()[0] < 100:  # more decades: too crowded
            axis.yaxis.set_minor_formatter(FormatStrFormatter("%g"))
        axis.tick_params(axis="y", which="minor", labelsize=7)
        axis.set_ylabel("seconds per step (median)")
        axis.set_title(
            f"{history['history_bids']:,} bids of history, steps of {int(key):,} events",
            fontsize=10,
        )
        axis.grid(True, axis="y", which="both", alpha=0.3)
        axis.legend(fontsize=8, ncol=len(approaches))
    title = "dbt-streamsql on Nexmark: time of one step"
    if results.get("label"):
        title += f" ({results['label']})"
    figure.suptitle(textwrap.fill(title, 110), fontsize=11)  # a long label would be cut off
    save_plot(figure, path, dpi=110)
    plt.close(figure)


# -- main ---------------------------------------------------------------------------------------


def int_list(text: str) -> List[int]:
    values = []
    for part in text.split(","):
        part = part.strip().replace("_", "").upper()
        if part:
            scale = {"K": 1_000, "M": 1_000_000}.get(part[-1], 1)
            values.append(int(float(part.rstrip("KM")) * scale))
    return values


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--history-bids",
        type=int_list,
        default=int_list("1M,10M"),
        help="bids already in the source before the steps, e.g. 1M,10M",
    )
    parser.add_argument(
        "--step-events",
        type=int_list,
        default=int_list("10K,100K"),
        help="new events (all three tables) per step, e.g. 10K,100K",
    )
    parser.add_argument("--steps", type=int, default=5, help="measured steps per step size (>= 5)")
    parser.add_argument("--floor-runs", type=int, default=2, help="steps with no new events")
    parser.add_argument(
        "--queries", default=",".join(QUERIES), help=f"comma-separated, of {','.join(QUERIES)}"
    )
    parser.add_argument(
        "--approaches",
        default=",".join(APPROACHES),
        help=f"comma-separated, of {','.join(APPROACHES)} (table always runs: it is the reference)",
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--driver-memory", default="6g", help="spark.driver.memory")
    parser.add_argument("--label", default="", help="a line printed on top of the report")
    parser.add_argument(
        "--output-name",
        default="nexmark",
        help="results file names: <name>.md/.png/.json/.raw.json.gz",
    )
    parser.add_argument(
        "--work-dir",
        default=str(BENCH_DIR / "work-nexmark"),
        help="dbt project, warehouse and checkpoints (deleted at start)",
    )
    parser.add_argument("--results-dir", default=str(BENCH_DIR / "results"))
    parser.add_argument(
        "--combine",
        default="",
        help="no run: merge the results of earlier runs (comma-separated JSON "
        "files in --results-dir, e.g. nexmark_1m.json,nexmark_10m.json) into one "
        "report <output-name>.md/.png/.json/.raw.json.gz",
    )
    parser.add_argument(
        "--object-store",
        action="store_true",
        help="the warehouse on moto's S3 server on loopback (scripts/s3_server.py), through "
        "S3A; the metastore on local disk",
    )
    parser.add_argument(
        "--adapter-rev",
        default="",
        help="benchmark dbt-streamsql as committed at this git revision (e.g. "
        "HEAD) instead of the working tree, which others may be editing",
    )
    return parser.parse_args(argv)


def summary_of(run: Dict[str, Any]) -> Dict[str, Any]:
    """A run without its steps: each history's setup, medians (`summary`) and checks."""
    histories = [
        dict(
            {key: value for key, value in history.items() if key != "floor"},
            step_sizes=[
                {key: value for key, value in size.items() if key != "steps"}
                for size in history["step_sizes"]
            ],
        )
        for history in run["histories"]
    ]
    return dict(run, histories=histories)


def write_results(
    results: Dict[str, Any], unsupported: Dict[Tuple[str, str], str], results_dir: Path, name: str
) -> None:
    results["output_name"] = name
    run = dict(results, unsupported={f"{q}|{a}": r for (q, a), r in unsupported.items()})
    write_run_json(results_dir, name, run, summary_of(run))
    write_report(dict(results, unsupported=dict(unsupported)), results_dir / f"{name}.md")
    write_plot(results, results_dir / f"{name}.png")
    print(f"wrote {results_dir / name}.md and .png/.json/.raw.json.gz", flush=True)


def combine(args: argparse.Namespace) -> int:
    """One report from several runs' JSON (e.g. one run per history size, run one after the
    other on the same machine): histories in the order given, every run's command and machine
    record kept."""
    results_dir = Path(args.results_dir).resolve()
    runs = [
        read_run_json(results_dir / name.strip())
        for name in args.combine.split(",")
        if name.strip()
    ]
    if not runs:
        raise SystemExit("--combine: no result files named")
    first = runs[0]
    mismatched = [
        key
        for key in ("approaches", "queries", "seed", "steps")
        if any(run.get(key) != first.get(key) for run in runs)
    ]
    if mismatched:
        raise SystemExit(f"--combine: the runs differ in {mismatched}; they cannot share a table")
    unsupported: Dict[Tuple[str, str], str] = {}
    for run in runs:
        for key, reason in run.get("unsupported", {}).items():
            query, approach = key.split("|", 1)
            unsupported.setdefault((query, approach), reason)
    machine = dict(first["machine"])
    for index, run in enumerate(runs[1:], start=2):
        for key, value in run["machine"].items():
            if machine.get(key) != value:
                machine[f"{key} (run {index})"] = value
    combined = dict(
        first,
        histories=[h for run in runs for h in run["histories"]],
        machine=machine,
        command="; ".join(f"`{run['command']}`" for run in runs).strip("`"),
        started=", ".join(run["started"] for run in runs),
        elapsed_s=sum(run["elapsed_s"] for run in runs),
        jvm_rss_peak_mib=max(run.get("jvm_rss_peak_mib") or 0 for run in runs),
        label=args.label or first.get("label", ""),
        combined_from=[name.strip() for name in args.combine.split(",") if name.strip()],
    )
    write_results(combined, unsupported, results_dir, args.output_name)
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    if args.combine:
        return combine(args)
    queries = [QUERIES[name.strip()] for name in args.queries.split(",") if name.strip()]
    approaches = [a.strip() for a in args.approaches.split(",") if a.strip()]
    unknown = [a for a in approaches if a not in APPROACHES]
    if unknown:
        raise SystemExit(f"unknown approaches {unknown}; choose from {APPROACHES}")
    if "table" not in approaches:
        approaches.insert(1 if "view" in approaches else 0, "table")
    approaches = [a for a in APPROACHES if a in approaches]  # a fixed order within a step
    work, results_dir = Path(args.work_dir).resolve(), Path(args.results_dir).resolve()
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    results_dir.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("DBT_SEND_ANONYMOUS_USAGE_STATS", "false")
    os.chdir(work)  # derby.log and spark-warehouse strays land here, not in the repo

    adapter_commit = ""
    if args.adapter_rev:
        adapter_commit = use_adapter_revision(args.adapter_rev, work / "adapter-src")
    s3, settings = loopback_s3(work / "s3", "lake") if args.object_store else (None, None)
    target = write_project(work, args.driver_memory, queries, approaches, settings)
    session_target = target
    if s3 is not None:
        atexit.register(s3.stop)  # its process group, however the run ends
        session_target = on_object_store(work, "nexmark_bench", target, "s3a://lake/nexmark")
    spark = start_session(session_target)
    # What Structured Streaming's users run for stateful queries (a session setting: every
    # streaming query of the run starts with it; the other approaches keep no streaming state).
    spark.conf.set(
        "spark.sql.streaming.stateStore.providerClass",
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    )
    memory = MemorySampler(spark)
    dbt = Dbt(work)
    bench = Bench(spark, dbt, memory, work, queries, approaches, args)
    results: Dict[str, Any] = {
        "command": "python bench/nexmark.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "label": args.label,
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "seed": args.seed,
        "steps": args.steps,
        "floor_runs": args.floor_runs,
        "approaches": approaches,
        "queries": [q.name for q in queries],
        "machine": machine_info(spark, args),
        "warehouse": "s3 (moto on loopback, through S3A)" if s3 else "local disk",
        "histories": [],
    }
    if adapter_commit:
        results["machine"]["adapter"] = f"dbt/ from commit {adapter_commit} (--adapter-rev)"
        results["machine"].pop("git_dirty", None)
    started = time.monotonic()
    failed: List[str] = []
    for history_bids in args.history_bids:
        history = run_history(spark, bench, history_bids, args)
        results["histories"].append(history)
        failed += [
            f"{history_bids:,} bids: {c['query']} {c['approach']}: {c['verdict']}"
            for c in history["verification"]
            if c.get("equal") is False
        ]
        failed += [
            f"{history_bids:,} bids, {size['step_events']:,}-event step {step['step']}: "
            f"{c['query']} {c['approach']}: {c['verdict']}"
            for size in history["step_sizes"]
            for step in size["steps"]
            for c in step.get("checks", [])
            if c.get("equal") is False
        ]
        results["elapsed_s"] = time.monotonic() - started
        results["jvm_rss_peak_mib"] = memory.rss_peak_mib()
        results["machine"]["load_average_at_end"] = os.getloadavg()
        write_results(results, bench.unsupported, results_dir, args.output_name)
    memory.stop()
    print(f"total {(time.monotonic() - started) / 60:.1f} min", flush=True)
    if failed:
        print(
            "VERIFICATION FAILED: approaches differ from the full rebuild:\n  "
            + "\n  ".join(failed),
            file=sys.stderr,
            flush=True,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
