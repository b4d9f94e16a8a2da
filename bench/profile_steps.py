"""Where the time of an incremental_view step goes, on a Nexmark warehouse kept between runs.

The first run generates `--history-bids` bids into `--work-dir` and builds the chosen queries'
incremental views (and their `table` twins) once; later runs reuse that warehouse, so one can
change the adapter and look again within a minute. Each run appends `--step-events` events
`--steps` times, runs one step of every chosen view (and, with `--with-table`, the rebuild),
and prints per view the statements of the last step with their times, slowest first.

    python bench/profile_steps.py --queries q3,q7 --step-events 10000 --steps 2
    python bench/profile_steps.py --queries q5 --rebuild-views   # after a change of plan shape

`--check` compares each view with its `table` twin after the last step (EXCEPT ALL both ways).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

from benchlib import (
    BENCH_DIR,
    Dbt,
    NodeRun,
    multiset_difference,
    start_session,
    write_project_skeleton,
)
from nexmark import generator
from nexmark.queries import QUERIES, render

SCHEMA = "bench"
STATE_FILE = "profile_state.json"


def print_python_profile(profiler: Any, top: int) -> None:
    """The adapter's own functions by cumulative time, then the callers' view of py4j.

    Cumulative time of a function that sends a statement includes Spark's work on it; compare
    with the statement table to see what is Python's.
    """
    import pstats

    stats = pstats.Stats(profiler)
    stats.sort_stats("cumulative")
    print("\n### Python profile of the last step (cumulative s, adapter functions)")
    stats.print_stats(r"streamsql", top)
    print("### ... and py4j round trips, by caller")
    stats.print_callers(r"java_gateway.py.*\(__call__\)")


def write_models(work: Path, queries: List[str]) -> None:
    refs = {t: "{{ source('%s', '%s') }}" % (generator.SCHEMA, t) for t in generator.DDL}
    for name in queries:
        query = QUERIES[name]
        for suffix, config in (
            ("view", {"materialized": "incremental_view", **query.view_config}),
            ("table", {"materialized": "table"}),
        ):
            text = "{{ config(%s) }}\n%s\n" % (
                ", ".join(f"{k}={v!r}" for k, v in config.items()),
                render(query.sql, refs),
            )
            (work / "models" / f"{name}_{suffix}.sql").write_text(text)


def print_breakdown(node: NodeRun, top: int) -> None:
    adapter = node.adapter or {}
    print(
        f"\n## {node.name}: {node.execution_time:.2f} s, {len(node.statements)} statements; "
        f"{adapter.get('plan')} ({adapter.get('reason')}); read {adapter.get('changes_read')} "
        f"applied {adapter.get('applied')}"
    )
    statements = sorted(node.statements, key=lambda s: -(s.span or 0))
    accounted = sum(s.span or 0 for s in node.statements)
    for statement in statements[:top]:
        print(f"  {statement.span or 0:6.2f} s  {statement.sql[:160]}")
    rest = statements[top:]
    if rest:
        print(f"  {sum(s.span or 0 for s in rest):6.2f} s  ({len(rest)} more statements)")
    print(f"  {node.execution_time - accounted:6.2f} s  outside statements")


def main(argv: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-dir", default=str(BENCH_DIR / "work-profile"))
    parser.add_argument("--history-bids", type=int, default=10_000_000)
    parser.add_argument("--queries", default=",".join(QUERIES))
    parser.add_argument("--step-events", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--with-table", action="store_true", help="also time the rebuilds")
    parser.add_argument(
        "--rebuild-views",
        action="store_true",
        help="--full-refresh the views first (after a change of plan shape)",
    )
    parser.add_argument("--check", action="store_true", help="compare views with tables at the end")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument(
        "--python-profile",
        action="store_true",
        help="profile the last step's Python (cProfile): where the time between "
        "statements goes (planning, Delta log reads through py4j, dbt)",
    )
    parser.add_argument("--driver-memory", default="8g")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)

    work = Path(args.work_dir)
    queries = [q.strip() for q in args.queries.split(",") if q.strip()]
    target = write_project_skeleton(
        work, "nexmark_profile", SCHEMA, args.driver_memory, {generator.SCHEMA: list(generator.DDL)}
    )
    write_models(work, queries)
    spark = start_session(target)
    dbt = Dbt(work)
    state_path = work / STATE_FILE
    state: Dict[str, Any] = json.loads(state_path.read_text()) if state_path.exists() else {}
    if not state:
        spark.sql(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        spark.sql(f"DROP SCHEMA IF EXISTS {generator.SCHEMA} CASCADE")
        spark.sql(f"CREATE SCHEMA {SCHEMA}")
        generator.create_tables(spark)
        started = time.monotonic()
        events = generator.events_for_bids(args.history_bids)
        print(
            "generated",
            generator.append_events(spark, 0, events, args.seed),
            f"in {time.monotonic() - started:.1f} s",
            flush=True,
        )
        state = {"next_event": events, "built": []}
        state_path.write_text(json.dumps(state))
    views = [f"{q}_view" for q in queries]
    tables = [f"{q}_table" for q in queries]
    missing = [q for q in queries if q not in state["built"]]
    if missing or args.rebuild_views:
        chosen = queries if args.rebuild_views else missing
        started = time.monotonic()
        _, nodes = dbt.run(
            [f"{q}_view" for q in chosen] + [f"{q}_table" for q in chosen], extra=["--full-refresh"]
        )
        print(
            f"built {chosen} in {time.monotonic() - started:.1f} s: "
            + ", ".join(f"{n.name} {n.execution_time:.1f}" for n in nodes.values()),
            flush=True,
        )
        state["built"] = sorted(set(state["built"]) | set(chosen))
        state_path.write_text(json.dumps(state))

    last: Dict[str, NodeRun] = {}
    for number in range(1, args.steps + 1):
        start = state["next_event"]
        generator.append_events(spark, start, start + args.step_events, args.seed)
        state["next_event"] = start + args.step_events
        state_path.write_text(json.dumps(state))
        profiler = None
        if args.python_profile and number == args.steps:
            import cProfile

            profiler = cProfile.Profile()
            profiler.enable()
        _, last = dbt.run(views)
        if profiler is not None:
            profiler.disable()
            print_python_profile(profiler, args.top * 3)
        line = " ".join(f"{n.name}={n.execution_time:.2f}" for n in last.values())
        if args.with_table:
            _, rebuilt = dbt.run(tables)
            line += " | " + " ".join(f"{n.name}={n.execution_time:.2f}" for n in rebuilt.values())
        print(f"step {number}: {line}", flush=True)
    for node in last.values():
        print_breakdown(node, args.top)
    failed = 0
    if args.check:
        if not args.with_table:
            dbt.run(tables)
        for q in queries:
            view, table = f"{SCHEMA}.{q}_view", f"{SCHEMA}.{q}_table"
            columns = ", ".join(f"`{c}`" for c in spark.table(table).columns)
            extra, lost = multiset_difference(
                spark, f"SELECT {columns} FROM {view}", f"SELECT {columns} FROM {table}"
            )
            verdict = "EQUAL" if extra == lost == 0 else f"DIFFERENT (+{extra} -{lost})"
            failed += verdict != "EQUAL"
            print(f"check {q}: {verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
