"""A soak: many small steps of a small project, and what each step leaves behind (issue 27).

A pipeline scheduled every 5 minutes takes 100,000 steps a year; a view must not get slower, nor
its tables grow in files or state, with the age of the pipeline. This runs `--steps` steps of a
project of five incremental views in one warm process (dbt in-process, one JVM, on `--threads`
dbt threads), each after
`--rows` events appended to the source with event time moving on by `--minutes` per step, some
rows out of order and some too late for the LATENESS model:

- `p_filter`: a filter (projection);
- `j_dims`: the events joined with a small dimension table;
- `s_events`: the events with LATENESS 1 HOUR on their event time (late ones quarantined);
- `w_hourly`: 1-hour windows per key over `s_events`, with LATENESS 1 HOUR on the window's
  start and `final_state_retention` of a minute (`--retention`): windows start on the hour, so
  every window below the waterline (final: any change to it is late) has its state dropped at
  the next rewrite of the state table, which comes as soon as the waterline has moved. The
  default retention (the lateness) keeps another hour of final windows for late changes; see
  docs/tables.md.
- `w_busiest`: per hour, how many keys had events and the most events of one key: an aggregate
  over an aggregate per key and hour (a stage), LATENESS and retention as `w_hourly`'s on the
  hour, which the top groups by: the stage's state of final hours is dropped too.

After every step it records the step's wall time and each model's, and for every table of the
schema (models, state tables, `__late`, `__waterline`) its files and bytes (from the checksum
Delta writes with each version; `DESCRIBE DETAIL` where there is none), and for each state
table its rows and its distinct groups. Every `--check-every` steps and after the last, `dbt test`
runs `matches_recompute` on every model (LATENESS applied): the soak stops at the first failure.

    python bench/soak.py --steps 1000         # hours on 2 cores
    python bench/soak.py --steps 60 --check-every 20 --output-name soak_short

A soak longer than one sitting can be paused (`--pause-after-minutes`: it stops cleanly after a
step, its progress kept in the work dir) and carried on in a new process with `--resume`, on the
same adapter code only. The report then names the processes and the step each started cold on.
`--report` writes the report of a soak stopped before its last step from its progress, and says
where it stopped.

This machine's speed moves by up to 1.7x within minutes (a fixed Python loop, idle machine,
2026-11-29), which a median over 100 steps does not always even out. So every step also times
a fixed Python loop and a fixed Spark job that names no table (`probe`: neither grows with the
soak), and `--control N`, on a soak that has taken all its steps, runs N more steps of it
alternating with the first N steps of a fresh copy of the project (its own schemas, the same
warehouse and process): the aged pipeline's steps against the fresh one's, in the same minutes.

    python bench/soak.py --control 150 --work-dir bench/work-soak

Writes bench/results/<output-name>.md, .png, .json (the summary) and .raw.json.gz (every step).
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import yaml
from benchlib import (
    BENCH_DIR,
    Dbt,
    add_spark_conf_argument,
    dbt_tree,
    machine_info,
    machine_lines,
    median,
    save_plot,
    spark_settings,
    start_session,
    write_project_skeleton,
    write_run_json,
)

SCHEMA = "soak"
SOURCE = "soak_src"
START = 1704067200  # 2024-01-01 00:00:00 UTC, the event clock's origin
KEYS = 20

MODELS = {
    "p_filter": "select id, k, v, ts from {events} where v % 3 = 0",
    "j_dims": "select e.id, e.k, d.label, e.v from {events} e join {dims} d on e.k = d.k",
    "s_events": (
        "{{{{ config(lateness={{'ts': 'INTERVAL 1 HOUR'}}) }}}}\nselect id, k, v, ts from {events}"
    ),
    "w_hourly": (
        "{{{{ config(lateness={{'hour_start': 'INTERVAL 1 HOUR'}}, "
        "final_state_retention={{'hour_start': '{retention}'}}) }}}}\n"
        "select k, window(ts, '1 hour').start as hour_start, count(*) as n, sum(v) as total "
        "from {{{{ ref('s_events') }}}} group by k, window(ts, '1 hour')"
    ),
    "w_busiest": (
        "{{{{ config(lateness={{'hour_start': 'INTERVAL 1 HOUR'}}, "
        "final_state_retention={{'hour_start': '{retention}'}}) }}}}\n"
        "select hour_start, count(*) as active_keys, max(n) as busiest from "
        "(select k, window(ts, '1 hour').start as hour_start, count(*) as n "
        "from {{{{ ref('s_events') }}}} group by k, window(ts, '1 hour')) per_key "
        "group by hour_start"
    ),
}
# The state tables of the LATENESS aggregates, and how many groups each may hold: the windows
# within the lateness (the current hour and the one before) plus the one a step may open, per
# key for the tables kept per key and hour, once for w_busiest's top (per hour).
WINDOW_STATES = {
    "w_hourly__streamsql_state": KEYS * 3,
    "w_busiest__streamsql_stage0": KEYS * 3,
    "w_busiest__streamsql_state": 3,
}


def source_ref(source: str, table: str) -> str:
    return "{{ source('" + source + "', '" + table + "') }}"


def write_models(work: Path, retention: str, source: str = SOURCE) -> None:
    events, dims = source_ref(source, "events"), source_ref(source, "dims")
    for name, sql in MODELS.items():
        body = sql.format(events=events, dims=dims, retention=retention)
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


def write_project(
    work: Path, name: str, schema: str, source: str, args: Any, **options: Any
) -> Dict[str, Any]:
    """The soak's dbt project in `work` (models in `schema` over the tables of `source`); its
    profile target. `options`: write_project_skeleton's `settings` or `warehouse_dir`."""
    target = write_project_skeleton(
        work, name, schema, "4g", {source: ["events", "dims"]}, threads=args.threads, **options
    )
    write_models(work, args.retention, source)
    return target


def create_sources(spark: Any, source: str = SOURCE) -> None:
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {source}")
    spark.sql(f"DROP TABLE IF EXISTS {source}.events")
    spark.sql(f"DROP TABLE IF EXISTS {source}.dims")
    spark.sql(
        f"CREATE TABLE {source}.events (id BIGINT, k INT, v BIGINT, ts TIMESTAMP) USING delta "
        "TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')"
    )
    spark.sql(
        f"CREATE TABLE {source}.dims (k INT, label STRING) USING delta "
        "TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')"
    )
    spark.sql(
        f"INSERT INTO {source}.dims SELECT CAST(id AS INT), concat('label_', id) FROM range({KEYS})"
    )


def append(spark: Any, step: int, rows: int, minutes: int, source: str = SOURCE) -> None:
    """`rows` events of step `step`: event time in the step's `minutes`, one in ten up to 20
    minutes behind it (out of order, not late) and one in a hundred 3 hours behind (late)."""
    first = step * rows
    window = minutes * 60
    spark.sql(
        f"INSERT INTO {source}.events SELECT id, CAST(id * 7 % {KEYS} AS INT), id % 1000, "
        f"timestamp_seconds({START} + {step * window} + (id * 37) % {window} "
        "- CASE WHEN id % 100 = 0 THEN 10800 WHEN id % 10 = 0 THEN 1200 ELSE 0 END) "
        f"FROM range({first}, {first + rows})"
    )


def probe(spark: Any) -> Dict[str, float]:
    """The machine's speed now: seconds of a fixed Python loop and of a fixed Spark job that
    names no table (neither grows with the soak), each the median of three runs."""

    def loop() -> None:
        total = 0
        for number in range(1_000_000):
            total += number

    def job() -> None:
        spark.sql("SELECT sum(id % 7) FROM range(0, 3000000, 1, 2)").collect()

    timed = {}
    for name, action in (("python_s", loop), ("spark_s", job)):
        runs = []
        for _ in range(3):
            started = time.perf_counter()
            action()
            runs.append(time.perf_counter() - started)
        timed[name] = round(sorted(runs)[1], 4)
    return timed


def latest_checksum(log: Path) -> Dict[str, Any]:
    """The checksum file of the table's latest version ({} when that version has none)."""
    versions = sorted(p for p in log.glob("*.json") if p.stem.isdigit())
    crc = log / f"{versions[-1].stem}.crc" if versions else None
    return json.loads(crc.read_text()) if crc and crc.exists() else {}


def table_sizes(
    spark: Any, work: Path, group_columns: Dict[str, List[str]]
) -> Dict[str, Dict[str, int]]:
    """Files and bytes of every table of the schema (no Spark job where Delta wrote a checksum
    for the latest version); rows and distinct groups of every state table. `group_columns`:
    each state table's group columns, looked up once per soak (a lookup loads the table, which
    costs more as its log grows)."""
    logs = {p.parent.name: p for p in work.glob(f"warehouse/**/{SCHEMA}.db/*/_delta_log")}
    sizes = {}
    counts = []
    for row in spark.sql(f"SHOW TABLES IN {SCHEMA}").collect():
        name = row["tableName"]
        if row["isTemporary"]:
            continue
        checksum = latest_checksum(logs[name]) if name in logs else {}
        if "numFiles" in checksum:
            entry = {"files": int(checksum["numFiles"]), "bytes": int(checksum["tableSizeBytes"])}
        else:
            detail = spark.sql(f"DESCRIBE DETAIL {SCHEMA}.{name}").collect()[0]
            entry = {"files": int(detail["numFiles"]), "bytes": int(detail["sizeInBytes"])}
        if "__streamsql_" in name:
            if name not in group_columns:
                columns = spark.table(f"{SCHEMA}.{name}").columns
                group_columns[name] = [c for c in columns if c.startswith("_streamsql_g")]
            groups = group_columns[name]
            distinct = f"COUNT(DISTINCT {', '.join(groups)})" if groups else "1"
            counts.append(
                f"SELECT '{name}' AS t, COUNT(*) AS n, {distinct} AS g FROM {SCHEMA}.{name}"
            )
        sizes[name] = entry
    if counts:  # one statement for every state table
        for counted in spark.sql(" UNION ALL ".join(counts)).collect():
            sizes[counted["t"]]["rows"] = int(counted["n"])
            sizes[counted["t"]]["groups"] = int(counted["g"])
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
    early_steps = steps[49:150] if len(steps) >= 150 else steps[len(steps) // 4 : len(steps) // 2]
    late_steps = steps[-100:] if len(steps) >= 200 else steps[-max(1, len(steps) // 4) :]
    early = [s["wall_s"] for s in early_steps]
    late = [s["wall_s"] for s in late_steps]
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
    windows = {
        state: {
            "groups_max": max(
                (s["tables"][state]["groups"] for s in after if state in s["tables"]), default=None
            ),
            "rows_max": max(
                (s["tables"][state]["rows"] for s in after if state in s["tables"]), default=None
            ),
            "bound": bound,
        }
        for state, bound in WINDOW_STATES.items()
    }
    return {
        "window_states": windows,
        "recomputed": recomputed,
        "state_dropped": dropped,
        "early_steps": "50-150" if len(steps) >= 150 else "the second quarter",
        "late_steps": "the last 100" if len(steps) >= 200 else "the last quarter",
        "early_median_s": median(early),
        "late_median_s": median(late),
        "late_over_early": median(late) / median(early),
        # the fixed Spark job's median over each window's steps that timed it (nan: none did)
        "early_probe_spark_s": median([s["probe"]["spark_s"] for s in early_steps if "probe" in s]),
        "late_probe_spark_s": median([s["probe"]["spark_s"] for s in late_steps if "probe" in s]),
        "most_files_after": "step 100" if len(steps) > 100 else "half the steps",
        "most_files": most_files,
    }


def chart(steps: List[Dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    numbers = [s["step"] for s in steps]
    probed = [s for s in steps if "probe" in s]
    fig, axes = plt.subplots(4 if probed else 3, 1, figsize=(9, 13 if probed else 10), sharex=True)
    axes[0].plot(numbers, [s["wall_s"] for s in steps], lw=0.8)
    axes[0].set_ylabel("dbt run, s")
    if probed:
        axes[3].plot([s["step"] for s in probed], [s["probe"]["spark_s"] for s in probed], lw=0.8)
        axes[3].set_ylabel("fixed Spark job, s")
        axes[3].set_xlabel("step")
    names = sorted(steps[-1]["tables"])
    for name in names:
        axes[1].plot(numbers, [s["tables"].get(name, {}).get("files", 0) for s in steps], lw=0.8)
    axes[1].set_ylabel("files per table")
    axes[1].legend(names, fontsize=6, ncol=2)
    for name in [n for n in names if "__streamsql_" in n]:
        counted = [s for s in steps if "rows" in s["tables"].get(name, {})]
        axes[2].plot(
            [s["step"] for s in counted], [s["tables"][name]["rows"] for s in counted], lw=0.8
        )
    axes[2].set_ylabel("state rows")
    axes[-1].set_xlabel("step")
    axes[2].legend([n for n in names if "__streamsql_" in n], fontsize=6)
    fig.tight_layout()
    save_plot(fig, path, dpi=110)


def dropped_line(dropped: List[str]) -> str:
    """When final groups' state was dropped: all of it for a short run, else how often."""
    if len(dropped) <= 12:
        return ", ".join(dropped) or "never"
    return f"{len(dropped)} times ({', '.join(dropped[:3])}, ..., {dropped[-1]})"


def command(args: Any) -> str:
    """The soak's arguments as a command line (a resumed soak reports the one it started with)."""
    parts = []
    for name in ("steps", "rows", "minutes", "check_every", "threads", "retention"):
        parts.append(f"--{name.replace('_', '-')} {json.dumps(getattr(args, name))}")
    parts += [f"--work-dir {args.work_dir}", f"--output-name {args.output_name}"]
    return " ".join(parts).replace('"', "'")


def log_store_of(process: Dict[str, Any]) -> str:
    """The Delta log store a soak process's session used ('?' in records older than that)."""
    return process["machine"].get("delta log store", "?")


def processes_line(processes: List[Dict[str, Any]], steps: List[Dict[str, Any]]) -> str:
    """Which processes ran the soak: one warm process, or where it was paused and resumed."""
    tree = processes[0]["dbt_tree"]
    if len(processes) == 1:
        return (
            f"One warm process ran every step (adapter code: dbt/ tree `{tree[:12]}`; Delta log "
            f"store `{log_store_of(processes[0])}`)."
        )
    walls = {s["step"]: s["wall_s"] for s in steps}
    resumed = ", ".join(
        f"step {p['first_step']} ({walls.get(p['first_step'], float('nan')):.2f} s, "
        f"{p['started_at'][:16]} UTC, head {p['machine']['git_head']}"
        + (f", with {' '.join(p['spark_conf'])}" if p.get("spark_conf") else "")
        + f", Delta log store `{log_store_of(p)}`"
        + ")"
        for p in processes[1:]
    )
    return (
        f"{len(processes)} processes ran the steps, all on the same adapter code (dbt/ tree "
        f"`{tree[:12]}`; the first process's Delta log store "
        f"`{log_store_of(processes[0])}`): the soak outlasts one "
        "working session on this machine, so it was "
        "stopped (paused with `--pause-after-minutes`, or its process ended with the session) "
        f"and carried on with `--resume` on the same warehouse "
        f"from {resumed}. A resumed process starts cold (a new JVM, every table's first Delta "
        "load), so its first step is slower; it is one step among the hundred of a median."
    )


def write_results(args: Any, report: Dict[str, Any]) -> None:
    results = Path(args.results_dir)
    results.mkdir(parents=True, exist_ok=True)
    summary = {key: value for key, value in report.items() if key != "steps"}
    write_run_json(results, args.output_name, report, summary)
    chart(report["steps"], results / f"{args.output_name}.png")
    steps, figures = report["steps"], report["summary"]
    lines = [
        f"# Soak: {len(steps)} steps of a small project ({args.rows} events per step, "
        f"{args.minutes} minutes of event time each)",
        "",
        f"Command: `python bench/soak.py {command(args)}`  ",
        f"Run: {report['run_at']}",
        "",
        *(
            [
                f"**Stopped after step {len(steps)} of {args.steps}**: the report was written "
                "from the soak's progress (`--report`), and the figures below are those of the "
                "steps it took.",
                "",
            ]
            if len(steps) < args.steps
            else []
        ),
        processes_line(report["processes"], steps),
        "",
        *[
            f"Started as a soak of {e['from_steps']} steps; after step {e['after_step']} it was "
            f"extended to {args.steps} (`--resume --steps {args.steps}`: the same project, "
            "warehouse and arguments, only a later last step).\n"
            for e in report.get("extended", [])
        ],
        f"Median `dbt run` of {figures['early_steps']} steps {figures['early_median_s']:.2f} s, "
        f"of {figures['late_steps']} {figures['late_median_s']:.2f} s "
        f"({figures['late_over_early']:.2f}x). `dbt test` (matches_recompute on every model): "
        f"{report['checks']}.",
        "",
        *probe_lines(figures),
        *control_lines(report.get("control")),
        f"State of the LATENESS aggregates after {figures['most_files_after']} "
        f"(final_state_retention `{args.retention}`), against the groups within the lateness "
        "(the current hour and the one before) plus the hour a step may open:",
        "",
        "| state table | most distinct groups | bound | most rows (with the states appended "
        "since its last rewrite) |",
        "|---|---:|---:|---:|",
        *[
            f"| {state} | {w['groups_max']} | {w['bound']} | {w['rows_max']} |"
            for state, w in figures["window_states"].items()
        ],
        "",
        "Final groups' state dropped (final_state_retention): "
        + dropped_line(figures.get("state_dropped", []))
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
            + (f" ({e['groups']} groups)" if "groups" in e else "")
            for n, e in sorted(record["tables"].items())
            if "rows" in e
        )
        files = " | ".join(str(record["tables"].get(n, {}).get("files", "")) for n in names)
        lines.append(f"| {record['step']} | {record['wall_s']:.2f} | {files} | {state} |")
    name = args.output_name
    lines += ["", f"![per step]({name}.png)", ""]
    lines += [f"Numbers: `{name}.json` (summary), `{name}.raw.json.gz` (every step).", ""]
    lines += ["## Machine", ""]
    lines += machine_lines(report["machine"])
    (results / f"{args.output_name}.md").write_text("\n".join(lines) + "\n")


def probe_lines(figures: Dict[str, Any]) -> List[str]:
    """What the fixed Spark job took in each window: the machine's own speed beside the steps'."""
    early, late = figures.get("early_probe_spark_s"), figures.get("late_probe_spark_s")
    if early is None or late is None or early != early or late != late:  # nan: not timed
        return []
    return [
        f"The fixed Spark job timed after every step (`probe`, it names no table) took "
        f"{early:.3f} s over {figures['early_steps']} steps and {late:.3f} s over "
        f"{figures['late_steps']} ({late / early:.2f}x): how much of the steps' change is the "
        "machine's.",
        "",
    ]


def control_lines(control: Optional[Dict[str, Any]]) -> List[str]:
    """The side-by-side run (`--control`) in words: the aged pipeline against a fresh one."""
    if not control:
        return []
    return [
        f"Side by side (`--control {len(control['pairs'])}`, {control['started_at'][:16]} UTC): "
        f"steps {control['pairs'][0]['aged_step']}-{control['pairs'][-1]['aged_step']} of this "
        f"pipeline alternated with steps 1-{len(control['pairs'])} of a fresh copy of the project "
        "(its own schemas, the same warehouse and process), so both met the same machine. Over "
        f"the fresh copy's steps {control['window']}: this pipeline's median `dbt run` "
        f"{control['aged_median_s']:.2f} s, the fresh copy's {control['fresh_median_s']:.2f} s "
        f"({control['aged_median_s'] / control['fresh_median_s']:.2f}x; the median of the pairs' "
        f"ratios {control['median_pair_ratio']:.2f}x). The fixed Spark job over those pairs: "
        f"{control['probe_min_s']:.3f}-{control['probe_max_s']:.3f} s.",
        "",
    ]


def control_pairs(
    spark: Any, work: Path, meta: Dict[str, Any], aged_dbt: Dbt, pairs: int
) -> Dict[str, Any]:
    """`pairs` more steps of the soak alternating with the first `pairs` steps of a fresh copy
    of its project (schemas `<schema>_control`, in the same warehouse, run by this process);
    which of the two goes first alternates too. Returns the record for the report."""
    import shutil

    args = argparse.Namespace(**meta["args"])
    schema, source = f"{SCHEMA}_control", f"{SOURCE}_control"
    fresh = work / "control"
    if fresh.exists():
        shutil.rmtree(fresh)
    write_project(fresh, "soak_control", schema, source, args, warehouse_dir=work / "warehouse")
    spark.sql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    create_sources(spark, source)
    fresh_dbt = Dbt(fresh)
    names = list(MODELS)
    fresh_dbt.run(names)  # its first build, over empty events: step 0
    started_at = datetime.now(timezone.utc).isoformat()
    aged_last = meta.get("control", {}).get("aged_last_step", args.steps)
    records = []
    for number in range(1, pairs + 1):
        aged_step = aged_last + number
        runs = [("aged", aged_dbt, aged_step, SOURCE), ("fresh", fresh_dbt, number, source)]
        record: Dict[str, Any] = {"pair": number, "aged_step": aged_step}
        for label, dbt, step, events_of in runs if number % 2 else runs[::-1]:
            append(spark, step, args.rows, args.minutes, events_of)
            record[f"{label}_s"] = round(dbt.run(names)[0], 3)
        record["probe"] = probe(spark)
        records.append(record)
        if number % 10 == 0:
            print(
                f"pair {number}: this pipeline {record['aged_s']:.2f} s, "
                f"the fresh copy {record['fresh_s']:.2f} s",
                flush=True,
            )
    # the fresh copy's steps 50-150 where there are that many (the soak's early window), else
    # from its 21st on (its first steps run on nearly empty tables)
    first, last = (50, min(150, pairs)) if pairs >= 100 else (min(21, pairs), pairs)
    window = records[first - 1 : last]
    return {
        "started_at": started_at,
        "aged_last_step": aged_last + pairs,
        "window": f"{first}-{last}",
        "aged_median_s": median([r["aged_s"] for r in window]),
        "fresh_median_s": median([r["fresh_s"] for r in window]),
        "median_pair_ratio": median([r["aged_s"] / r["fresh_s"] for r in window]),
        "probe_min_s": min(r["probe"]["spark_s"] for r in window),
        "probe_max_s": max(r["probe"]["spark_s"] for r in window),
        "pairs": records,
    }


def require_same_code(meta: Dict[str, Any], tree: Optional[str], flag: str) -> None:
    """Stop `flag` (--resume, --control) unless this checkout's dbt/ tree is the soak's."""
    ran_on = meta["processes"][0]["dbt_tree"]
    if tree != ran_on:
        raise SystemExit(
            f"{flag}: this soak ran on adapter code (dbt/ tree) {ran_on}; this checkout has "
            f"{tree or 'uncommitted changes in dbt/'}. Carry on on the same code."
        )


def run_control(args: Any) -> int:
    """`--control N`: the side-by-side run on a soak that took all its steps, then its report."""
    work = Path(args.work_dir)
    progress = Progress(work)
    meta, steps = progress.load()
    if len(steps) < meta["args"]["steps"]:
        raise SystemExit(
            f"--control: the soak in {work} took {len(steps)} of its {meta['args']['steps']} "
            "steps; finish it first (--resume)"
        )
    require_same_code(meta, dbt_tree(), "--control")
    profile = yaml.safe_load((work / "profiles.yml").read_text())
    spark = start_session(profile["soak"]["outputs"]["local"])
    control = control_pairs(spark, work, meta, Dbt(work), args.control)
    control["machine"] = machine_info(spark)
    meta["control"] = control
    progress.save(meta)
    spark.stop()
    return report_progress(progress)


def report_progress(progress: "Progress", output_name: Optional[str] = None) -> int:
    """The report of a soak from its progress (`--report`), with its own arguments (and
    `output_name`, when given, for the report's name)."""
    meta, steps = progress.load()
    if output_name:
        meta["args"]["output_name"] = output_name
    if not steps:
        raise SystemExit(f"--report: no step in {progress.steps_path}")
    report = {
        "run_at": datetime.now(timezone.utc).isoformat(),
        "args": meta["args"],
        "processes": meta["processes"],
        "extended": meta.get("extended", []),
        "machine": meta["processes"][-1]["machine"],
        "checks": meta["checks"],
        "steps": steps,
        "summary": summary(steps),
        "control": meta.get("control"),
    }
    every = meta["args"]["check_every"]
    if len(steps) < meta["args"]["steps"] and meta["checks"].startswith("passed"):
        report["checks"] = f"passed every {every} steps up to step {len(steps) // every * every}"
    write_results(argparse.Namespace(**meta["args"]), report)
    print(f"wrote the report of {len(steps)} steps of {meta['args']['steps']}")
    return 0


class Progress:
    """What a soak has done so far, in its work dir: the arguments and the processes that ran
    it (`soak.json`) and one line per step (`steps.jsonl`), so that `--resume` carries on where
    a paused or killed process stopped."""

    def __init__(self, work: Path) -> None:
        self.meta_path = work / "soak.json"
        self.steps_path = work / "steps.jsonl"

    def start(self, args: Any) -> Dict[str, Any]:
        meta = {"args": vars(args), "processes": [], "checks": "not run"}
        self.steps_path.write_text("")
        return meta

    def load(self) -> Tuple[Dict[str, Any], List[Dict[str, Any]]]:
        if not self.meta_path.exists():
            raise SystemExit(f"--resume: no soak to resume in {self.meta_path.parent}")
        meta = json.loads(self.meta_path.read_text())
        lines = self.steps_path.read_text().splitlines()
        return meta, [json.loads(line) for line in lines if line.strip()]

    def save(self, meta: Dict[str, Any]) -> None:
        self.meta_path.write_text(json.dumps(meta, indent=1))

    def add_step(self, record: Dict[str, Any]) -> None:
        with self.steps_path.open("a") as out:
            out.write(json.dumps(record) + "\n")


def appended(spark: Any, step: int, rows: int) -> bool:
    """Whether step `step`'s events are in the source already (a process killed after it
    appended them, before it recorded the step)."""
    first = step * rows
    return bool(
        spark.sql(
            f"SELECT COUNT(*) AS n FROM {SOURCE}.events WHERE id >= {first} AND id < {first + rows}"
        ).first()["n"]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help="steps to take in all (default 1000); with --resume, a larger number extends the soak",
    )
    parser.add_argument("--rows", type=int, default=300, help="events appended per step")
    parser.add_argument("--minutes", type=int, default=5, help="event time per step")
    parser.add_argument("--check-every", type=int, default=100)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="dbt threads (three models of five are independent, but 2 cores are busy with one)",
    )
    parser.add_argument(
        "--retention",
        default="INTERVAL 1 MINUTE",
        help="w_hourly's final_state_retention (a constant expression, or `forever`)",
    )
    parser.add_argument("--work-dir", default=str(BENCH_DIR / "work-soak"))
    parser.add_argument("--results-dir", default=str(BENCH_DIR / "results"))
    parser.add_argument(
        "--output-name", default=None, help="results name (default soak; with --resume, a new one)"
    )
    parser.add_argument(
        "--pause-after-minutes",
        type=float,
        default=None,
        help="stop after the step that ends past this many minutes, to carry on with --resume",
    )
    add_spark_conf_argument(
        parser,
        "a Spark setting for this process's session (server_side_parameters), repeatable; "
        "the report names the process that ran with it",
    )
    parser.add_argument(
        "--report",
        action="store_true",
        help="write the report of the soak in --work-dir from its progress as it stands (one "
        "stopped before its last step: killed, or paused and not resumed), and run nothing",
    )
    parser.add_argument(
        "--control",
        type=int,
        default=None,
        metavar="N",
        help="on a soak that took all its steps: N more of its steps alternating with the first "
        "N of a fresh copy of the project, in one process; adds them to the report",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="carry on the soak in --work-dir with its own arguments, in a new process, on the "
        "same adapter code (a new process starts cold: its first step is reported as such)",
    )
    args = parser.parse_args()
    spark_conf = list(args.spark_conf)  # this process's, also on --resume
    if args.report:
        return report_progress(Progress(Path(args.work_dir)), args.output_name)
    if args.control:
        return run_control(args)
    started = time.monotonic()

    work = Path(args.work_dir)
    progress = Progress(work)
    tree = dbt_tree()
    resuming = args.resume
    if resuming:
        meta, steps = progress.load()
        overrides = {"pause_after_minutes": args.pause_after_minutes}
        if args.steps is not None:  # an extended soak: its report says from how many steps
            if args.steps < len(steps):
                raise SystemExit(f"--resume --steps {args.steps}: {len(steps)} steps are done")
            if args.steps != meta["args"]["steps"]:
                meta.setdefault("extended", []).append(
                    {"from_steps": meta["args"]["steps"], "after_step": len(steps)}
                )
            overrides["steps"] = args.steps
        if args.output_name is not None:
            overrides["output_name"] = args.output_name
        args = argparse.Namespace(**{**meta["args"], **overrides})
        meta["args"] = vars(args)
        require_same_code(meta, tree, "--resume")
    else:
        args.steps = 1000 if args.steps is None else args.steps
        args.output_name = args.output_name or "soak"
        if work.exists():
            import shutil

            shutil.rmtree(work)
        steps = []
    settings = spark_settings(spark_conf)
    target = write_project(work, "soak", SCHEMA, SOURCE, args, settings=settings)
    spark = start_session(target)
    info = machine_info(spark)
    dbt = Dbt(work)
    names = list(MODELS)
    if not resuming:
        meta = progress.start(args)
        create_sources(spark)
        dbt.run(names)  # the first build, over empty events: step 0
    first = len(steps) + 1
    meta["processes"].append(
        {
            "first_step": first,
            "started_at": datetime.now(timezone.utc).isoformat(),
            "dbt_tree": tree,
            "machine": info,
            "spark_conf": spark_conf,
        }
    )
    progress.save(meta)

    paused = False
    group_columns: Dict[str, List[str]] = {}
    for number in range(first, args.steps + 1):
        if number > first or not appended(spark, number, args.rows):
            append(spark, number, args.rows, args.minutes)
        wall, nodes = dbt.run(names)
        record = {
            "step": number,
            "wall_s": round(wall, 3),
            "models": {n: round(node.execution_time, 3) for n, node in nodes.items()},
            # what a step did besides its change: compactions, dropped state, recomputes
            "notes": {n: node.adapter.get("notes") or [] for n, node in nodes.items()},
            "computed": {n: node.adapter.get("computed", "") for n, node in nodes.items()},
            "tables": table_sizes(spark, work, group_columns),
            "probe": probe(spark),
        }
        if number == first and number > 1:
            record["first_in_process"] = True
        steps.append(record)
        progress.add_step(record)
        if number % args.check_every == 0 or number == args.steps:
            failed = dbt_test(dbt, work)
            if failed:
                meta["checks"] = f"failed at step {number}: {', '.join(failed)}"
                print(meta["checks"], flush=True)
                break
            meta["checks"] = f"passed every {args.check_every} steps and after the last"
            progress.save(meta)
        if number % 10 == 0 or number == args.steps:
            print(f"step {number}: dbt run {wall:.2f} s", flush=True)
        minutes = (time.monotonic() - started) / 60
        if args.pause_after_minutes and minutes > args.pause_after_minutes and number < args.steps:
            paused = True
            print(
                f"paused after step {number} ({minutes:.0f} minutes); carry on with: "
                f"python bench/soak.py --resume --work-dir {work}",
                flush=True,
            )
            break
    progress.save(meta)
    if not paused:
        report = {
            "run_at": datetime.now(timezone.utc).isoformat(),
            "args": meta["args"],
            "processes": meta["processes"],
            "extended": meta.get("extended", []),
            "machine": info,
            "checks": meta["checks"],
            "steps": steps,
            "summary": summary(steps),
        }
        write_results(args, report)
    spark.stop()
    return 0 if paused or meta["checks"].startswith("passed") else 1


if __name__ == "__main__":
    raise SystemExit(main())
