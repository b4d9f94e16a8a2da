"""What a recovery step costs next to a normal step and a full rebuild.

A source whose change feed is gone for the versions a step needs (VACUUMed with retention 0
after an UPDATE) makes the step recover: it recomputes the model from the inputs' current
state and writes only the difference (docs/steps.md). This measures that step against an
ordinary step of the same model and against rebuilding it as a `table`, on one source of
`--history-rows` rows, for a projection with a filter and a GROUP BY:

1. first build of both views and their `table` twins;
2. `--steps` ordinary steps: `--step-rows` rows appended and a few rows updated, then the
   views' step and the twins' rebuild;
3. `--steps` recovery steps: the same change, then `VACUUM ... RETAIN 0 HOURS`, then the views'
   step (each must report that it recovered) and the twins' rebuild;
4. every view equals its twin (EXCEPT ALL both ways), or the run fails.

    python bench/recovery_cost.py                    # 1M rows, 3 steps each: about 5 minutes

Writes bench/results/recovery_cost.md and .json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any, Dict, List

from benchlib import (
    BENCH_DIR,
    Dbt,
    fmt,
    machine_info,
    machine_lines,
    median,
    multiset_difference,
    start_session,
    write_project_skeleton,
)

SCHEMA = "recovery_cost"
SOURCE = "rc_src"
EVENTS = f"{{{{ source('{SOURCE}', 'events') }}}}"
QUERIES = {
    "projection": f"select id, k, v * 2 as v2 from {EVENTS} where v > 10",
    "group_by": f"select k, count(*) as n, sum(v) as total, max(v) as top from {EVENTS} group by k",
}
UPDATED_ROWS = 20


def write_models(work: Path) -> None:
    for name, sql in QUERIES.items():
        (work / "models" / f"{name}_view.sql").write_text(
            "{{ config(materialized='incremental_view') }}\n" + sql + "\n"
        )
        (work / "models" / f"{name}_rebuild.sql").write_text(
            "{{ config(materialized='table') }}\n" + sql + "\n"
        )


def append(spark: Any, start: int, rows: int) -> None:
    spark.sql(
        f"INSERT INTO {SOURCE}.events SELECT id, CAST(pmod(xxhash64(id), 1000) AS INT), "
        f"CAST(pmod(xxhash64(id, 1), 100) AS INT) FROM range({start}, {start + rows})"
    )


def change(spark: Any, next_id: int, rows: int, step: int) -> None:
    """Rows appended and a few old rows updated: the UPDATE writes change-data files."""
    append(spark, next_id, rows)
    spark.sql(
        f"UPDATE {SOURCE}.events SET v = v + 1 "
        f"WHERE id >= {step * UPDATED_ROWS} AND id < {(step + 1) * UPDATED_ROWS}"
    )


def vacuum(spark: Any) -> None:
    spark.sql("SET spark.databricks.delta.retentionDurationCheck.enabled = false")
    spark.sql(f"VACUUM {SOURCE}.events RETAIN 0 HOURS")
    spark.sql("SET spark.databricks.delta.retentionDurationCheck.enabled = true")


def differences(spark: Any, name: str) -> int:
    """Rows in one of the view and its twin and not in the other, as multisets."""
    return sum(
        multiset_difference(
            spark, f"SELECT * FROM {SCHEMA}.{name}_view", f"SELECT * FROM {SCHEMA}.{name}_rebuild"
        )
    )


def main(argv: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history-rows", type=int, default=1_000_000)
    parser.add_argument("--step-rows", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--driver-memory", default="6g")
    parser.add_argument("--work-dir", default=str(BENCH_DIR / "work-recovery-cost"))
    parser.add_argument("--results-dir", default=str(BENCH_DIR / "results"))
    parser.add_argument("--output-name", default="recovery_cost")
    args = parser.parse_args(argv)

    work = Path(args.work_dir)
    shutil.rmtree(work, ignore_errors=True)
    target = write_project_skeleton(
        work, "recovery_cost", SCHEMA, args.driver_memory, {SOURCE: ["events"]}
    )
    write_models(work)
    spark = start_session(target)
    info = machine_info(spark)
    spark.sql(f"DROP SCHEMA IF EXISTS {SOURCE} CASCADE")
    spark.sql(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    spark.sql(f"CREATE SCHEMA {SOURCE}")
    spark.sql(
        f"CREATE TABLE {SOURCE}.events (id BIGINT, k INT, v INT) USING delta "
        "TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')"
    )
    append(spark, 0, args.history_rows)
    views = [f"{name}_view" for name in QUERIES]
    twins = [f"{name}_rebuild" for name in QUERIES]
    dbt = Dbt(work)
    dbt.run(views)
    dbt.run(twins)

    next_id = args.history_rows
    times: Dict[str, Dict[str, List[float]]] = {
        name: {"step": [], "recovery": [], "rebuild": []} for name in QUERIES
    }
    notes: List[str] = []
    changes = 0
    for kind in ("step", "recovery"):
        for number in range(args.steps):
            change(spark, next_id, args.step_rows, changes)
            changes += 1
            next_id += args.step_rows
            if kind == "recovery":
                vacuum(spark)
            _, nodes = dbt.run(views)
            for name in QUERIES:
                node = nodes[f"{name}_view"]
                recovered = "recovered" in str(node.adapter.get("step_line", ""))
                if recovered != (kind == "recovery"):
                    raise RuntimeError(
                        f"{name}_view: expected a {kind} step, got: {node.adapter.get('step_line')}"
                    )
                times[name][kind].append(node.execution_time)
                if number == 0:
                    notes.append(f"{name}_view, {kind}: {node.adapter.get('step_line')}")
            _, rebuilt = dbt.run(twins)
            for name in QUERIES:
                times[name]["rebuild"].append(rebuilt[f"{name}_rebuild"].execution_time)
            print(
                f"{kind} {number + 1}: "
                + ", ".join(f"{name} {times[name][kind][-1]:.2f} s" for name in QUERIES),
                flush=True,
            )
    wrong = {name: differences(spark, name) for name in QUERIES}
    spark.stop()

    results = {
        "machine": info,
        "args": vars(args),
        "seconds": times,
        "differences": wrong,
        "step_lines": notes,
    }
    out = Path(args.results_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.output_name}.json").write_text(json.dumps(results, indent=2, default=str))
    lines = [
        "# A recovery step next to a normal step and a rebuild (generated by recovery_cost.py)",
        "",
        f"Source of {args.history_rows:,} rows; each step appends {args.step_rows:,} rows and "
        f"updates {UPDATED_ROWS}; a recovery step follows `VACUUM ... RETAIN 0 HOURS` of the "
        "source. Seconds are dbt's `execution_time` of the node, medians of "
        f"{args.steps} steps.",
        "",
        "| model | normal step s | recovery step s | rebuild (table) s | recovery / step | "
        "recovery / rebuild |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name in QUERIES:
        step, recovery = median(times[name]["step"]), median(times[name]["recovery"])
        rebuild = median(times[name]["rebuild"])
        lines.append(
            f"| {name} | {fmt(step)} | {fmt(recovery)} | {fmt(rebuild)} | "
            f"{recovery / step:.1f}x | {recovery / rebuild:.1f}x |"
        )
    lines += [
        "",
        "Every view equals its rebuild after the last step: "
        + ("yes" if not any(wrong.values()) else f"NO ({wrong})"),
        "",
        "The first step line of each kind:",
        "",
    ]
    lines += [f"- {note}" for note in notes]
    lines += ["", "## Machine", ""] + machine_lines(info)
    (out / f"{args.output_name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if any(wrong.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
