"""A soak: many small steps of a small project, and what each step leaves behind (issue 27).

A pipeline scheduled every 5 minutes takes 100,000 steps a year; a view must not get slower, nor
its tables grow in files or state, with the age of the pipeline. This runs `--steps` steps of a
project of five incremental views in one warm process (dbt in-process, one JVM), each after
`--rows` events appended to the source with event time moving on by `--minutes` per step, some
rows out of order and some too late for the LATENESS model:

- `p_filter`: a filter (projection);
- `j_dims`: the events joined with a small dimension table;
- `g_k`: a GROUP BY over a key with few values (state bounded by the key);
- `s_events`: the events with LATENESS 1 HOUR on their event time (late ones quarantined);
- `w_hourly`: 1-hour windows per key over `s_events`, with LATENESS 1 HOUR on the window's
  start: the state of windows more than `final_state_retention` (by default that hour) below its
  waterline is dropped whenever its state table is rewritten.

After every step it records the step's wall time and each model's, and for every table of the
schema (models, state tables, `__late`, `__waterline`) its files and bytes (`DESCRIBE DETAIL`)
and, for state tables, their rows. Every `--check-every` steps and after the last, `dbt test`
runs `matches_recompute` on every model (LATENESS applied): the soak stops at the first failure.

    python bench/soak.py --steps 1000         # hours on 2 cores
    python bench/soak.py --steps 60 --check-every 20 --output-name soak_short

Writes bench/results/<output-name>.md, .json and .png.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict, List

import yaml
from benchlib import (
    BENCH_DIR,
    Dbt,
    machine_info,
    machine_lines,
    median,
    start_session,
    write_project_skeleton,
)

SCHEMA = "soak"
SOURCE = "soak_src"
EVENTS = f"{{{{ source('{SOURCE}', 'events') }}}}"
DIMS = f"{{{{ source('{SOURCE}', 'dims') }}}}"
START = 1704067200  # 2024-01-01 00:00:00 UTC, the event clock's origin
KEYS = 20

MODELS = {
    "p_filter": "select id, k, v, ts from {events} where v % 3 = 0",
    "j_dims": "select e.id, e.k, d.label, e.v from {events} e join {dims} d on e.k = d.k",
    "g_k": "select k, count(*) as n, sum(v) as total from {events} group by k",
    "s_events": (
        "{{{{ config(lateness={{'ts': 'INTERVAL 1 HOUR'}}) }}}}\nselect id, k, v, ts from {events}"
    ),
    "w_hourly": (
        "{{{{ config(lateness={{'hour_start': 'INTERVAL 1 HOUR'}}) }}}}\n"
        "select k, window(ts, '1 hour').start as hour_start, count(*) as n, sum(v) as total "
        "from {{{{ ref('s_events') }}}} group by k, window(ts, '1 hour')"
    ),
}


def write_models(work: Path) -> None:
    for name, sql in MODELS.items():
        body = sql.format(events=EVENTS, dims=DIMS)
        (work / "models" / f"{name}.sql").write_text(
            "{{ config(materialized='incremental_view') }}\n" + body + "\n"
        )
    (work / "models" / "tests.yml").write_text(
        yaml.safe_dump(
            {
                "version": 2,
                "models": [{"name": name, "data_tests": ["matches_recompute"]} for name in MODELS],
            }
        )
    )


def create_sources(spark: Any) -> None:
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {SOURCE}")
    spark.sql(f"DROP TABLE IF EXISTS {SOURCE}.events")
    spark.sql(f"DROP TABLE IF EXISTS {SOURCE}.dims")
    spark.sql(
        f"CREATE TABLE {SOURCE}.events (id BIGINT, k INT, v BIGINT, ts TIMESTAMP) USING delta "
        "TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')"
    )
    spark.sql(
        f"CREATE TABLE {SOURCE}.dims (k INT, label STRING) USING delta "
        "TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')"
    )
    spark.sql(
        f"INSERT INTO {SOURCE}.dims SELECT CAST(id AS INT), concat('label_', id) FROM range({KEYS})"
    )


def append(spark: Any, step: int, rows: int, minutes: int) -> None:
    """`rows` events of step `step`: event time in the step's `minutes`, one in ten up to 20
    minutes behind it (out of order, not late) and one in a hundred 3 hours behind (late)."""
    first = step * rows
    window = minutes * 60
    spark.sql(
        f"INSERT INTO {SOURCE}.events SELECT id, CAST(id * 7 % {KEYS} AS INT), id % 1000, "
        f"timestamp_seconds({START} + {step * window} + (id * 37) % {window} "
        "- CASE WHEN id % 100 = 0 THEN 10800 WHEN id % 10 = 0 THEN 1200 ELSE 0 END) "
        f"FROM range({first}, {first + rows})"
    )


def table_sizes(spark: Any) -> Dict[str, Dict[str, int]]:
    """Files and bytes of every table of the schema; rows of the state tables."""
    sizes = {}
    for row in spark.sql(f"SHOW TABLES IN {SCHEMA}").collect():
        name = row["tableName"]
        if row["isTemporary"]:
            continue
        detail = spark.sql(f"DESCRIBE DETAIL {SCHEMA}.{name}").collect()[0]
        entry = {"files": int(detail["numFiles"]), "bytes": int(detail["sizeInBytes"])}
        if "__streamsql_" in name:
            entry["rows"] = int(spark.sql(f"SELECT COUNT(*) FROM {SCHEMA}.{name}").first()[0])
        sizes[name] = entry
    return sizes


def dbt_test(dbt: Dbt, work: Path) -> List[str]:
    """`dbt test` of the project: the names of the tests that did not pass."""
    result = dbt.runner.invoke(
        ["test", "--project-dir", str(work), "--profiles-dir", str(work), "--quiet"]
    )
    if result.result is None:
        raise RuntimeError(f"dbt test did not run: {result.exception}")
    return [item.node.name for item in result.result.results if str(item.status) != "pass"]


def summary(steps: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The figures issue 27 asks for, from the per-step records."""
    walls = [s["wall_s"] for s in steps]
    early = walls[49:150] if len(walls) >= 150 else walls[len(walls) // 4 : len(walls) // 2]
    late = walls[-100:] if len(walls) >= 200 else walls[-max(1, len(walls) // 4) :]
    after = steps[100:] if len(steps) > 100 else steps[len(steps) // 2 :]
    most_files = {}
    for record in after:
        for name, entry in record["tables"].items():
            most_files[name] = max(most_files.get(name, 0), entry["files"])
    recomputed = [
        f"{name} at step {s['step']}"
        for s in steps
        for name, computed in s.get("computed", {}).items()
        if computed == "recompute"
    ]
    dropped = [
        f"{name} at step {s['step']}"
        for s in steps
        for name, notes in s.get("notes", {}).items()
        if any(note.startswith("dropped the state of final groups") for note in notes)
    ]
    return {
        "recomputed": recomputed,
        "state_dropped": dropped,
        "early_steps": "50-150" if len(walls) >= 150 else "the second quarter",
        "late_steps": "the last 100" if len(walls) >= 200 else "the last quarter",
        "early_median_s": median(early),
        "late_median_s": median(late),
        "late_over_early": median(late) / median(early),
        "most_files_after": "step 100" if len(steps) > 100 else "half the steps",
        "most_files": most_files,
    }


def chart(steps: List[Dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    numbers = [s["step"] for s in steps]
    fig, axes = plt.subplots(3, 1, figsize=(9, 10), sharex=True)
    axes[0].plot(numbers, [s["wall_s"] for s in steps], lw=0.8)
    axes[0].set_ylabel("dbt run, s")
    names = sorted(steps[-1]["tables"])
    for name in names:
        axes[1].plot(numbers, [s["tables"].get(name, {}).get("files", 0) for s in steps], lw=0.8)
    axes[1].set_ylabel("files per table")
    axes[1].legend(names, fontsize=6, ncol=2)
    for name in [n for n in names if "__streamsql_" in n]:
        axes[2].plot(numbers, [s["tables"].get(name, {}).get("rows", 0) for s in steps], lw=0.8)
    axes[2].set_ylabel("state rows")
    axes[2].set_xlabel("step")
    axes[2].legend([n for n in names if "__streamsql_" in n], fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def write_results(args: Any, report: Dict[str, Any]) -> None:
    results = Path(args.results_dir)
    results.mkdir(parents=True, exist_ok=True)
    (results / f"{args.output_name}.json").write_text(json.dumps(report, indent=1))
    chart(report["steps"], results / f"{args.output_name}.png")
    steps, figures = report["steps"], report["summary"]
    lines = [
        f"# Soak: {len(steps)} steps of a small project ({args.rows} events per step, "
        f"{args.minutes} minutes of event time each)",
        "",
        f"Command: `python bench/soak.py {' '.join(sys.argv[1:])}`  ",
        f"Run: {report['run_at']}",
        "",
        f"Median `dbt run` of {figures['early_steps']} steps {figures['early_median_s']:.2f} s, "
        f"of {figures['late_steps']} {figures['late_median_s']:.2f} s "
        f"({figures['late_over_early']:.2f}x). `dbt test` (matches_recompute on every model): "
        f"{report['checks']}.",
        "",
        "Final groups' state dropped (final_state_retention): "
        + (", ".join(figures.get("state_dropped", [])) or "never")
        + ". Steps that recomputed a model: "
        + (", ".join(figures.get("recomputed", [])) or "none")
        + ".",
        "",
        f"Most files a table held after {figures['most_files_after']}:",
        "",
        "| table | files |",
        "|---|---:|",
        *[f"| {name} | {files} |" for name, files in sorted(figures["most_files"].items())],
        "",
        "Every tenth of the run:",
        "",
    ]
    names = sorted(steps[-1]["tables"])
    lines.append("| step | run s | " + " | ".join(f"{n} files" for n in names) + " | state rows |")
    lines.append("|---:|---:|" + "---:|" * len(names) + "---|")
    stride = max(1, len(steps) // 10)
    for record in steps[stride - 1 :: stride]:
        state = ", ".join(
            f"{n.split('__streamsql_')[0]}/{n.split('__streamsql_')[1]} {e['rows']}"
            for n, e in sorted(record["tables"].items())
            if "rows" in e
        )
        files = " | ".join(str(record["tables"].get(n, {}).get("files", "")) for n in names)
        lines.append(f"| {record['step']} | {record['wall_s']:.2f} | {files} | {state} |")
    lines += ["", f"![per step]({args.output_name}.png)", "", "## Machine", ""]
    lines += machine_lines(report["machine"])
    (results / f"{args.output_name}.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=300, help="events appended per step")
    parser.add_argument("--minutes", type=int, default=5, help="event time per step")
    parser.add_argument("--check-every", type=int, default=100)
    parser.add_argument("--work-dir", default=str(BENCH_DIR / "work-soak"))
    parser.add_argument("--results-dir", default=str(BENCH_DIR / "results"))
    parser.add_argument("--output-name", default="soak")
    args = parser.parse_args()

    work = Path(args.work_dir)
    if work.exists():
        import shutil

        shutil.rmtree(work)
    target = write_project_skeleton(work, "soak", SCHEMA, "4g", {SOURCE: ["events", "dims"]})
    write_models(work)
    spark = start_session(target)
    info = machine_info(spark)
    create_sources(spark)
    dbt = Dbt(work)
    names = list(MODELS)
    dbt.run(names)  # the first build, over empty events: step 0

    steps: List[Dict[str, Any]] = []
    checks = "not run"
    for number in range(1, args.steps + 1):
        append(spark, number, args.rows, args.minutes)
        wall, nodes = dbt.run(names)
        steps.append(
            {
                "step": number,
                "wall_s": round(wall, 3),
                "models": {n: round(node.execution_time, 3) for n, node in nodes.items()},
                # what a step did besides its change: compactions, dropped state, recomputes
                "notes": {n: node.adapter.get("notes") or [] for n, node in nodes.items()},
                "computed": {n: node.adapter.get("computed", "") for n, node in nodes.items()},
                "tables": table_sizes(spark),
            }
        )
        if number % args.check_every == 0 or number == args.steps:
            failed = dbt_test(dbt, work)
            if failed:
                checks = f"failed at step {number}: {', '.join(failed)}"
                print(checks, flush=True)
                break
            checks = f"passed every {args.check_every} steps and after the last"
        if number % 10 == 0 or number == args.steps:
            print(f"step {number}: dbt run {wall:.2f} s", flush=True)
    report = {
        "run_at": datetime.now(timezone.utc).isoformat(),
        "args": vars(args),
        "machine": info,
        "checks": checks,
        "steps": steps,
        "summary": summary(steps),
    }
    write_results(args, report)
    spark.stop()
    return 0 if checks.startswith("passed") else 1


if __name__ == "__main__":
    raise SystemExit(main())
