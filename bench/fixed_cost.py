"""The fixed cost of a step: what a `dbt run` costs per model when almost nothing changed.

A project of 16 incremental views (projections and filters, GROUP BYs, joins, chains) over two
small sources. First the sources and the first build, in a process of their own; a copy of the
warehouse it leaves is where both the warm process's steps and the warm server's start. In one
warm process (dbt in-process through `dbtRunner`, one JVM):

1. `--warmup-steps` steps, timed and reported apart, then `--steps` measured steps: a few dozen
   rows appended to `events` (every model changes), then `dbt run` of the views and a `dbt run`
   of their `table` twins (the same queries rebuilt from scratch, the floor a view's step is
   measured against), taking turns going first; after each step every view must equal its
   twin. A JVM's statements get faster over its first steps as it compiles its hot code (the
   in-process step went 31, 25, 23, 21, 22 s here); the warm server's measured runs follow
   `--server-warmup` steps of its own, so both are measured after warm-up steps, and with the
   same number of them both meet the same tables, files and rows (a server may still be
   getting faster after 3: its steps levelled off after about 5 here);
2. `--floor-runs` runs with no new rows (no model is a step).

Then `--cold-runs` separate `dbt run` processes (a cron job's run), once with no new rows and
once after an append, timed from the process's start, with the part before the first model
started (Python and dbt start-up, the JVM and Delta's jars, the metastore) split out from dbt's
own log: first with Spark in each process (`keep_warm: false`, a new JVM each), then through the
warm server (the default: the first command starts it, the others connect to it), each beside
`dbt ls` (dbt's own start-up, no Spark) and a `dbt run-operation streamsql_explain` process.

    python bench/fixed_cost.py                      # about 25 minutes on 2 cores
    python bench/fixed_cost.py --steps 3 --floor-runs 3 --cold-runs 1

Writes bench/results/fixed_cost.md and .json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Dict, List

import yaml
from benchlib import (
    BENCH_DIR,
    Dbt,
    NodeRun,
    add_output_arguments,
    add_spark_conf_argument,
    fmt,
    machine_info,
    machine_lines,
    median,
    multiset_difference,
    spark_settings,
    start_session,
    statement_label,
    write_project_skeleton,
)

from dbt.adapters.streamsql.spark import warm_server

SCHEMA = "fixed_cost"
SOURCE = "fc_src"
EVENTS = f"{{{{ source('{SOURCE}', 'events') }}}}"
DIMS = f"{{{{ source('{SOURCE}', 'dims') }}}}"
IV = "{{ config(materialized='incremental_view') }}\n"
TABLE = "{{ config(materialized='table') }}\n"
TWIN = "t_"  # a view's `table` twin: the same query, rebuilt by every run

# model -> (kind, SQL)
MODELS: Dict[str, tuple] = {
    "p_all": ("projection", f"select id, k, v, ts from {EVENTS}"),
    "p_scaled": ("projection", f"select id, v * 2 as v2, ts from {EVENTS}"),
    "p_filter": ("projection", f"select id, k, v from {EVENTS} where v > 50"),
    "p_hour": ("projection", f"select id, date_trunc('hour', ts) as hour from {EVENTS}"),
    "p_union": (
        "projection",
        f"select id, k from {EVENTS} where k < 5 union all select id, k from {EVENTS} where k > 90",
    ),
    "p_case": (
        "projection",
        f"select id, case when v > 50 then 'hi' else 'lo' end as band from {EVENTS}",
    ),
    "g_count": ("group by", f"select k, count(*) as n from {EVENTS} group by k"),
    "g_sum": ("group by", f"select k, sum(v) as total, avg(v) as mean from {EVENTS} group by k"),
    "g_max": ("group by", f"select k, max(v) as top, min(v) as low from {EVENTS} group by k"),
    "g_hour": (
        "group by",
        f"select date_trunc('hour', ts) as hour, count(*) as n "
        f"from {EVENTS} group by date_trunc('hour', ts)",
    ),
    "g_window": (
        "group by",
        f"select window(ts, '10 minutes').start as w, k, count(*) as n "
        f"from {EVENTS} group by window(ts, '10 minutes'), k",
    ),
    "g_global": ("group by", f"select count(*) as n, sum(v) as total from {EVENTS}"),
    "j_dims": ("join", f"select e.id, e.v, d.label from {EVENTS} e join {DIMS} d on e.k = d.k"),
    "j_left": ("join", f"select e.id, d.label from {EVENTS} e left join {DIMS} d on e.k = d.k"),
    "c_of_projection": ("chain", "select id, v2 from {{ ref('p_scaled') }} where v2 > 100"),
    "c_of_group": ("chain", "select k, top from {{ ref('g_max') }} where top > 90"),
}
HISTORY_ROWS = 100_000
START = "warehouse-at-first-step"  # a copy of the warehouse as the first build left it
BREAKDOWN = ("p_all", "g_count")  # models whose step is shown statement by statement


def write_models(work: Path, view_config: str = "") -> None:
    """Each view, and its `table` twin (a chain's twin reads the twins). `view_config`: more
    config() arguments of every view (`strategy='recompute'`)."""
    header = IV.replace(")", f", {view_config})", 1) if view_config else IV
    for name, (_, sql) in MODELS.items():
        (work / "models" / f"{name}.sql").write_text(header + sql + "\n")
        twin = re.sub(r"ref\('(\w+)'\)", lambda m: f"ref('{TWIN}{m.group(1)}')", sql)
        (work / "models" / f"{TWIN}{name}.sql").write_text(TABLE + twin + "\n")


def differing_views(spark: Any) -> List[str]:
    """The views whose rows are not their `table` twin's (as multisets)."""
    return [
        name
        for name in MODELS
        if multiset_difference(
            spark, f"SELECT * FROM {SCHEMA}.{name}", f"SELECT * FROM {SCHEMA}.{TWIN}{name}"
        )
        != (0, 0)
    ]


def create_sources(spark: Any) -> None:
    spark.sql(f"DROP SCHEMA IF EXISTS {SOURCE} CASCADE")
    spark.sql(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    spark.sql(f"CREATE SCHEMA {SOURCE}")
    spark.sql(f"CREATE SCHEMA {SCHEMA}")
    spark.sql(f"CREATE TABLE {SOURCE}.events (id BIGINT, k INT, v INT, ts TIMESTAMP) USING delta")
    spark.sql(f"CREATE TABLE {SOURCE}.dims (k INT, label STRING) USING delta")
    spark.sql(f"INSERT INTO {SOURCE}.dims SELECT id, concat('label-', id) FROM range(100)")
    append(spark, 0, HISTORY_ROWS)


def append(spark: Any, start: int, rows: int) -> None:
    spark.sql(
        f"INSERT INTO {SOURCE}.events SELECT id, CAST(pmod(xxhash64(id), 100) AS INT), "
        f"CAST(pmod(xxhash64(id, 1), 100) AS INT), "
        f"timestamp_seconds(1704067200 + id) FROM range({start}, {start + rows})"
    )


def by_kind(runs: List[Dict[str, NodeRun]]) -> Dict[str, float]:
    """Median node time per model kind over the runs."""
    times: Dict[str, List[float]] = {}
    for nodes in runs:
        for name, node in nodes.items():
            times.setdefault(MODELS[name][0], []).append(node.execution_time)
    return {kind: median(values) for kind, values in times.items()}


def dbt_process(work: Path, target: str, *args: str) -> float:
    """Wall seconds of `dbt <args>` in a new process on profile target `target`."""
    dbt = str(Path(sys.executable).with_name("dbt"))
    started = time.time()
    result = subprocess.run(
        [dbt, *args, "--project-dir", str(work), "--profiles-dir", str(work), "--target", target],
        cwd=work,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise RuntimeError(f"dbt {' '.join(args)} failed:\n{result.stdout[-3000:]}")
    return time.time() - started


def cold_run(work: Path, target: str) -> Dict[str, Any]:
    """One `dbt run` in a new process: wall time, and when the first model started."""
    log = work / "logs" / "dbt.log"
    if log.exists():
        log.unlink()
    started = time.time()
    # the views, not their `table` twins
    wall = dbt_process(work, target, "run", "--select", *MODELS)
    text = log.read_text()
    compacted = set(re.findall(r"compacted (\S+): \d+ files", text))
    first_model = _log_time(text, r"1 of \d+ START")
    spark_start = _log_time(text, r"Starting embedded Spark")
    spark_ready = _log_time(text, r"Embedded Spark started in")
    return {
        "wall_s": wall,
        "before_first_model_s": first_model - started if first_model else None,
        "embedded_spark_start_s": (
            spark_ready - spark_start if spark_ready and spark_start else None
        ),
        "models_s": started + wall - first_model if first_model else None,
        # tables the run OPTIMIZEd (every 10th step, once over 25 small files): a step that
        # compacts pays for the ten before it, and the warm phase's steps had none
        "compacted": len(compacted),
    }


def _log_time(text: str, pattern: str) -> Any:
    for line in text.splitlines():
        if re.search(pattern, line):
            match = re.search(r"(\d\d):(\d\d):(\d\d)\.(\d+)", line)
            if match:
                now = datetime.now()
                clock = now.replace(
                    hour=int(match.group(1)),
                    minute=int(match.group(2)),
                    second=int(match.group(3)),
                    microsecond=int(match.group(4)[:6].ljust(6, "0")),
                )
                # the line was written before now: a clock time after it is yesterday's (a
                # run across midnight)
                return (clock - timedelta(days=1) if clock > now else clock).timestamp()
    return None


def build_phase(args: Any, work: Path) -> Dict[str, Any]:
    """The project, its sources and the first build of the views and their twins, in this
    process; the steps of both phases start from the warehouse it leaves."""
    # --spark-conf: the profile's server_side_parameters, for every session of the run
    target = write_project_skeleton(
        work,
        "fixed_cost",
        SCHEMA,
        "4g",
        {SOURCE: ["events", "dims"]},
        settings=spark_settings(args.spark_conf),
    )
    write_models(work, args.view_config)
    spark = start_session(target)
    create_sources(spark)
    dbt = Dbt(work)
    started = time.monotonic()
    dbt.run(list(MODELS))
    first_build = time.monotonic() - started
    print(f"first build in {first_build:.1f} s", flush=True)
    dbt.run([f"{TWIN}{name}" for name in MODELS])
    spark.stop()
    return {"first_build_s": first_build}


def restore_start(work: Path) -> None:
    """The warehouse as the first build left it (no process may hold it)."""
    shutil.rmtree(work / "warehouse")
    shutil.copytree(work / START, work / "warehouse")


def warm_phase(args: Any, work: Path) -> Dict[str, Any]:
    """The steps and the no-change runs in this process (one JVM), from the first build on."""
    target = yaml.safe_load((work / "profiles.yml").read_text())["fixed_cost"]["outputs"]["local"]
    spark = start_session(target)
    info = machine_info(spark)
    dbt = Dbt(work)
    names = list(MODELS)
    twins = [f"{TWIN}{name}" for name in names]

    next_id = HISTORY_ROWS
    steps: List[Dict[str, NodeRun]] = []
    step_walls: List[float] = []
    rebuilds: List[Dict[str, NodeRun]] = []
    rebuild_walls: List[float] = []
    warmup_walls: List[List[float]] = []  # [view step, table rebuild] of each warm-up step
    for number in range(args.warmup_steps + args.steps):
        append(spark, next_id, args.step_rows)
        next_id += args.step_rows
        warming = number < args.warmup_steps
        walls: Dict[str, float] = {}
        runs: Dict[str, Dict[str, NodeRun]] = {}
        # the views' step and the tables' rebuild, in turns first (caches, JIT)
        for which in (names, twins) if number % 2 == 0 else (twins, names):
            kind = "views" if which is names else "tables"
            walls[kind], runs[kind] = dbt.run(which)
        assert all(node.adapter.get("applied") is not None for node in runs["views"].values())
        if warming:
            warmup_walls.append([walls["views"], walls["tables"]])
        else:
            steps.append(runs["views"])
            step_walls.append(walls["views"])
            rebuilds.append(runs["tables"])
            rebuild_walls.append(walls["tables"])
        differing = differing_views(spark)
        assert not differing, f"step {number + 1}: views differ from their tables: {differing}"
        print(
            f"step {number + 1}{' (warm-up)' if warming else ''}: views {walls['views']:.1f} s, "
            f"the same queries as tables {walls['tables']:.1f} s, for {len(names)} models; "
            "every view equals its table",
            flush=True,
        )
    floors: List[Dict[str, NodeRun]] = []
    floor_walls: List[float] = []
    for number in range(args.floor_runs):
        wall, nodes = dbt.run(names)
        skipped = [
            n for n in nodes.values() if "inputs unchanged" in str(n.adapter.get("step_line"))
        ]
        floors.append(nodes)
        floor_walls.append(wall)
        print(
            f"no-change run {number + 1}: {wall:.1f} s ({len(skipped)} of {len(nodes)} "
            "models skipped)",
            flush=True,
        )
    spark.stop()
    return {
        "machine": info,
        "next_id": next_id,
        "warmup_walls_s": warmup_walls,
        "step_by_kind_s": by_kind(steps),
        "no_change_by_kind_s": by_kind(floors),
        "step_wall_s": step_walls,
        "rebuild_wall_s": rebuild_walls,
        "rebuild_by_kind_s": by_kind(
            [{name[len(TWIN) :]: node for name, node in nodes.items()} for nodes in rebuilds]
        ),
        "no_change_wall_s": floor_walls,
        # per model, in how many steps it was written whole (a small model whose step removed
        # rows: `rewrite_when_small`) instead of appended or MERGEd
        "rewrites": {
            n: sum(1 for nodes in steps if nodes[n].adapter.get("write") == "rewrite")
            for n in steps[-1]
        },
        "statements_per_step": {n: len(node.statements) for n, node in steps[-1].items()},
        "statements_per_no_change": {n: len(node.statements) for n, node in floors[-1].items()},
        "steps": [{n: node.execution_time for n, node in nodes.items()} for nodes in steps],
        "no_change": [{n: node.execution_time for n, node in nodes.items()} for nodes in floors],
        # where one step's time goes, statement by statement, for one model of each kind
        "step_statements": {
            name: [
                [round(st.span or 0.0, 3), statement_label(st.sql, 160)]
                for st in steps[-1][name].statements
            ]
            for name in BREAKDOWN
        },
    }


def main(argv: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument(
        "--warmup-steps",
        type=int,
        default=3,
        help="steps in the warm process before its measured ones, timed and reported apart "
        "(as --server-warmup for the warm server: both JVMs measured after warm-up steps)",
    )
    parser.add_argument("--step-rows", type=int, default=40, help="rows appended per step")
    parser.add_argument("--floor-runs", type=int, default=5)
    parser.add_argument("--cold-runs", type=int, default=2)
    add_output_arguments(parser, "fixed_cost")
    add_spark_conf_argument(
        parser, "a Spark setting for every process's session (server_side_parameters), repeatable"
    )
    parser.add_argument(
        "--view-config",
        default="",
        help="more config() arguments of every view, e.g. \"strategy='recompute'\"",
    )
    parser.add_argument(
        "--server-warmup",
        type=int,
        default=3,
        help="steps through a freshly started warm server before its measured runs, each "
        "followed by a rebuild of the `table` twins, as in the warm phase (the steps are timed "
        "and reported apart: a new server's JVM compiles its hot code during its first runs)",
    )
    parser.add_argument(
        "--server-pause",
        type=float,
        default=10.0,
        help="seconds the warm server is left idle before each of its steps, after the rows are "
        "appended (cron runs steps minutes apart; the server reads the changed tables then)",
    )
    # internal: run one phase (build or warm) in this process, its results to a json file
    parser.add_argument("--phase", nargs=2, metavar=("NAME", "JSON"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    work = Path(args.work_dir)
    if args.phase:
        name, path = args.phase
        phase = build_phase if name == "build" else warm_phase
        Path(path).write_text(json.dumps(phase(args, work), default=str))
        return 0
    shutil.rmtree(work, ignore_errors=True)
    # Each phase runs in a process of its own: its JVM holds the embedded Derby metastore until
    # it exits, and the copy of the warehouse and the `dbt run` processes below need it free.
    forwarded = sys.argv[1:] if argv is None else list(argv)
    warm: Dict[str, Any] = {}
    for phase in ("build", "warm"):
        phase_json = work.parent / f"{work.name}-{phase}.json"
        subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), *forwarded]
            + ["--phase", phase, str(phase_json)],
            check=True,
        )
        warm.update(json.loads(phase_json.read_text()))
        phase_json.unlink()
        if phase == "build":  # the warehouse as both phases' steps find it
            shutil.copytree(work / "warehouse", work / START)

    next_id = warm.pop("next_id")
    profiles = yaml.safe_load((work / "profiles.yml").read_text())
    outputs = profiles["fixed_cost"]["outputs"]
    outputs["server"] = dict(outputs["local"], keep_warm=True)
    (work / "profiles.yml").write_text(yaml.safe_dump(profiles))
    cold: Dict[str, List[Dict[str, Any]]] = {}
    explain = ["run-operation", "streamsql_explain", "--args", "{model: g_count}"]
    twins = [TWIN + n for n in MODELS]
    for target, mode in (("local", "in process"), ("server", "warm server")):
        server = target == "server"
        if server:
            # The server's steps start from the warehouse the warm phase's steps started from,
            # with the same rows appended in the same order: its measured steps meet the same
            # tables, files and rows as the warm process's (otherwise they would come after all
            # of the warm and in-process steps, on tables with more small files each).
            restore_start(work)
            next_id = HISTORY_ROWS
            started = time.time()
            dbt_process(work, target, *explain)
            cold[f"{mode}: the server's first start (a run-operation)"] = [
                {"wall_s": time.time() - started}
            ]
            cold[f"{mode}: step, the server's first steps"] = []
            for number in range(args.server_warmup):
                # after the first, each step follows the check of the one before, as in the warm
                # phase (its reads leave every view's snapshot loaded in the server's JVM)
                _append_in_process(
                    work, next_id, args.step_rows, through_server=True, check=number > 0
                )
                next_id += args.step_rows
                time.sleep(args.server_pause)
                cold[f"{mode}: step, the server's first steps"].append(cold_run(work, target))
                # and the `table` twins, as the warm phase's JVM ran them beside every step
                dbt_process(work, target, "run", "--select", *twins)
        cold[f"{mode}: dbt ls (no Spark)"] = [
            {"wall_s": dbt_process(work, target, "ls")} for _ in range(args.cold_runs)
        ]
        cold[f"{mode}: no change"] = [cold_run(work, target) for _ in range(args.cold_runs)]
        cold[f"{mode}: step"] = []
        for _ in range(args.cold_runs):  # new rows, appended by a short process of their own
            _append_in_process(work, next_id, args.step_rows, server, check=server)
            next_id += args.step_rows
            if server:
                time.sleep(args.server_pause)
            cold[f"{mode}: step"].append(cold_run(work, target))
            if server:
                dbt_process(work, target, "run", "--select", *twins)
        if server:  # the last step's views against their tables
            _append_in_process(work, next_id, 0, through_server=True, check=True)
        cold[f"{mode}: streamsql_explain"] = [
            {"wall_s": dbt_process(work, target, *explain)} for _ in range(args.cold_runs)
        ]
        for kind, runs in cold.items():
            if kind.startswith(mode):
                print(f"cold {kind}: " + ", ".join(f"{r['wall_s']:.1f} s" for r in runs))
    warm_server.stop_server(warm_server.ServerPaths(str(work / "warehouse")))

    results = {
        "command": "python bench/fixed_cost.py " + " ".join(forwarded),
        "started": datetime.now(timezone.utc).isoformat(),
        "models": {name: kind for name, (kind, _) in MODELS.items()},
        "server_pause": args.server_pause,
        # both phases' steps start from the first build; measured after this many steps each
        "warmup_steps": args.warmup_steps,
        "server_warmup": args.server_warmup,
        **warm,
        "cold": cold,
    }
    out = Path(args.results_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.output_name}.json").write_text(json.dumps(results, indent=1, default=str))
    (out / f"{args.output_name}.md").write_text(report(results))
    print(report(results))
    return 0


def _append_in_process(
    work: Path, start: int, rows: int, through_server: bool = False, check: bool = False
) -> None:
    """Appends rows through a short-lived session of its own (the warehouse's lock is free), or
    through the warm server that holds it. `check`: first, every view must equal its `table`
    twin (`differing_views`, the warm phase's check between steps; through the server it also
    gives the server's JVM what the warm phase's check gives its JVM: each view's table read
    since its last commit, which makes the next write to it about 3 s a step cheaper here).
    With `rows` 0 it only checks."""
    if through_server:
        session = (
            "from dbt.adapters.streamsql.spark import warm_server as w\n"
            "from pyspark.sql.connect.session import SparkSession\n"
            "paths = w.ServerPaths(%r)\nstate = w.ServerState.read(paths)\n"
            "spark = SparkSession.builder.remote("
            "w.connect_url('localhost', state.port, w.read_token(paths), False)).create()\n"
        ) % str(work / "warehouse")
    else:
        session = (
            "from benchlib import start_session\n"
            "target = yaml.safe_load(open(%r))['fixed_cost']['outputs']['local']\n"
            "spark = start_session(target)\n"
        ) % str(work / "profiles.yml")
    code = (
        "import sys; sys.path.insert(0, %r)\nimport fixed_cost, yaml\n%s"
        "differing = fixed_cost.differing_views(spark) if %r else []\n"
        "assert not differing, f'views differ from their tables: {differing}'\n"
        "if %d:\n    fixed_cost.append(spark, %d, %d)\nspark.stop()\n"
    ) % (str(BENCH_DIR), session, check, rows, start, rows)
    subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        capture_output=True,
        cwd=work,
        env=dict(os.environ),
    )


def cold_summary(results: Dict[str, Any]) -> List[str]:
    """The warm server's figures against dbt's own start-up and the warm in-process runs."""
    cold = results["cold"]

    def wall(kind: str) -> float:
        return median([run["wall_s"] for run in cold.get(kind, [])] or [float("nan")])

    floor = wall("warm server: dbt ls (no Spark)")
    no_change = wall("warm server: no change")
    lines = [
        f"Through the warm server: a `dbt run` with no new data {fmt(no_change)} s against "
        f"`dbt ls` {fmt(floor)} s ({fmt(no_change / floor)}x; in process "
        f"{fmt(wall('in process: no change'))} s), a `dbt run` that steps the 16 models "
        f"{fmt(wall('warm server: step'))} s (in process {fmt(wall('in process: step'))} s), "
        f"`streamsql_explain` {fmt(wall('warm server: streamsql_explain'))} s "
        f"({fmt(wall('warm server: streamsql_explain') / floor)}x `dbt ls`; in process "
        f"{fmt(wall('in process: streamsql_explain'))} s).",
    ]
    warm_step, warm_floor = results.get("step_wall_s"), results.get("no_change_wall_s")
    if warm_step and warm_floor:
        models = median(
            [run["models_s"] for run in cold.get("warm server: step", []) if run.get("models_s")]
            or [float("nan")]
        )
        lines.append(
            f"Against the warm in-process `dbt run` (dbtRunner, one JVM, above): no change "
            f"{fmt(wall('warm server: no change') / median(warm_floor))}x, step "
            f"{fmt(wall('warm server: step') / median(warm_step))}x (the step's models alone, "
            f"from the first model's start to the process's end: "
            f"{fmt(models / median(warm_step))}x). A new process cannot go below `dbt ls`: "
            f"{fmt(floor / median(warm_floor))}x the warm no-change run."
        )
    for mode in ("in process", "warm server"):
        runs = cold.get(f"{mode}: step", [])
        plain = [run["wall_s"] for run in runs if not run.get("compacted")]
        if warm_step and 0 < len(plain) < len(runs):
            lines.append(
                f"{mode.capitalize()}: {len(runs) - len(plain)} of the {len(runs)} steps also "
                f"compacted tables (every 10th step's check, due once over 25 files); the "
                f"others {fmt(median(plain))} s, "
                f"{fmt(median(plain) / median(warm_step))}x the warm in-process step."
            )
    first = cold.get("warm server: step, the server's first steps")
    if first:
        lines.append(
            "The server's first steps, before the measured ones (its JVM still compiling hot "
            "code): " + ", ".join(f"{fmt(run['wall_s'])} s" for run in first) + "."
        )
    return lines


def report(results: Dict[str, Any]) -> str:
    steps, floors = results["step_by_kind_s"], results["no_change_by_kind_s"]
    count = {kind: sum(1 for k in results["models"].values() if k == kind) for kind in steps}
    lines = [
        "# Fixed cost of a step: 16 incremental views, a few dozen new rows per step",
        "",
        f"Command: `{results['command']}`  ",
        f"Run: {results['started']}",
        "",
        "One warm process (dbt in-process, one JVM): seconds per model (dbt's `execution_time`, "
        "median over the runs and the models of a kind).",
        "",
        "| model kind | models | step (new rows) s | no-change run s |",
        "|---|---:|---:|---:|",
    ]
    for kind in steps:
        lines.append(f"| {kind} | {count[kind]} | {fmt(steps[kind])} | {fmt(floors[kind])} |")
    lines += [
        "",
        f"Whole `dbt run` of the 16 models: step {fmt(median(results['step_wall_s']))} s, "
        f"no-change {fmt(median(results['no_change_wall_s']))} s (medians). First build "
        f"{fmt(results['first_build_s'])} s.",
        "",
    ]
    warmup = results.get("warmup_walls_s")
    if warmup:
        lines += [
            f"The {len(warmup)} warm-up steps before the measured ones (views / tables, the JVM "
            "still compiling hot code): "
            + ", ".join(f"{fmt(views)} / {fmt(tables)} s" for views, tables in warmup)
            + ". The measured steps: "
            + ", ".join(f"{fmt(wall)} s" for wall in results["step_wall_s"])
            + ".",
            "",
        ]
    rebuilt = results.get("rebuild_by_kind_s")
    if rebuilt:
        lines += [
            "The same 16 queries as dbt `table` models, rebuilt by a `dbt run` in the same "
            "process after the same appends (the two runs take turns going first; after every "
            "step each view equals its table):",
            "",
            "| model kind | view step s | table rebuild s | view / table |",
            "|---|---:|---:|---:|",
        ]
        for kind in steps:
            lines.append(
                f"| {kind} | {fmt(steps[kind])} | {fmt(rebuilt[kind])} | "
                f"{fmt(steps[kind] / rebuilt[kind])} |"
            )
        view_wall, table_wall = median(results["step_wall_s"]), median(results["rebuild_wall_s"])
        lines += [
            "",
            f"Whole `dbt run`: views {fmt(view_wall)} s, tables {fmt(table_wall)} s "
            f"(views / tables {fmt(view_wall / table_wall)}; medians over "
            f"{len(results['rebuild_wall_s'])} steps).",
            "",
        ]
    lines += [
        "Statements a model runs (last step / last no-change run): "
        + ", ".join(
            f"{name} {results['statements_per_step'][name]} / "
            f"{results['statements_per_no_change'][name]}"
            for name in results["models"]
        )
        + ".",
        "",
    ]
    if "rewrites" in results:
        written = [f"{n} {c}" for n, c in results["rewrites"].items() if c]
        lines += [
            f"Models written whole (`rewrite_when_small`), in how many of the "
            f"{len(results['steps'])} steps: " + (", ".join(written) or "none") + ".",
            "",
        ]
    for name, statements in results.get("step_statements", {}).items():
        total = sum(span for span, _ in statements)
        lines += [
            f"### Where the last step of `{name}` ({results['models'][name]}) went: "
            f"{fmt(total)} s over {len(statements)} statements",
            "",
            "| s | statement (until the next one starts) |",
            "|---:|---|",
        ]
        lines += [f"| {fmt(span)} | `{sql.replace('|', '/')}` |" for span, sql in statements]
        lines.append("")
    lines += [
        "## A new `dbt` process (as from cron)",
        "",
        "Each row is one process. `in process`: Spark starts inside it (`keep_warm: false`); "
        "`warm server`: it connects to the warehouse's warm server (the default), started by the "
        "first command of the phase. The in-process rows come after the warm phase's steps. "
        "The warm server starts from a copy of the warehouse as the first build left it, where "
        "the warm phase's steps started, and its steps append the same rows in the same order: "
        f"its measured steps (after {results.get('server_warmup', '?')} steps of its own) meet "
        "the same tables, files and rows as the warm process's measured steps (after "
        f"{results.get('warmup_steps', '?')}). The server's first steps are timed apart; its "
        "other rows come after them, as the runs of a pipeline's long-lived server do. "
        "As in the warm process, the `table` twins are rebuilt after each of the server's steps "
        "and every view is compared with its twin before the next one (through the server): "
        "those reads load each view's new snapshot in the server's JVM, as the warm phase's "
        "check does in its JVM, which makes the next step's writes cheaper. "
        f"Before each of its steps the server is left idle {results.get('server_pause', 0):g} s "
        "(cron runs a pipeline's steps minutes apart): between runs it reads the tables that "
        "changed (the state tables a step wrote, the source just appended to; its log says "
        "which), which a process of its own pays for in its step.",
        "",
        "| run | wall s | before the first model s | of which the embedded Spark start s | "
        "models s | tables compacted |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    nan = float("nan")
    for kind, runs in results["cold"].items():
        for run in runs:
            lines.append(
                f"| {kind} | {fmt(run['wall_s'])} | "
                f"{fmt(run.get('before_first_model_s') or nan)} | "
                f"{fmt(run.get('embedded_spark_start_s') or nan)} | "
                f"{fmt(run.get('models_s') or nan)} | {run.get('compacted', '')} |"
            )
    lines += ["", *cold_summary(results), ""]
    lines += ["", "## Machine", ""] + machine_lines(results["machine"]) + [""]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
