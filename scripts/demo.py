#!/usr/bin/env python
"""The dbt-streamsql demo: the sample project as a stream, one `dbt run` per step.

    python scripts/demo.py [--steps 4] [--rate 200] [--disorder 45] [--late-share 0.03] ...

Starts from an empty warehouse, creates the source tables (Delta, change data feed on), and then
for every step: appends a seeded batch of out-of-order events (with a share of too-late rows,
some updates and deletes) with `dbt run-operation generate_step`, runs the models (`dbt run`:
one incremental step per model) and their tests (`dbt test`). It prints one row per step with
the numbers every incremental_view reported in target/run_results.json, a per-model table of the
last step, the queries to run next, and writes a chart of waterlines and late rows per step.

dbt runs in this process (dbtRunner), so the whole demo shares one JVM and one Spark session.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, List, Optional

from dbt.adapters.streamsql.spark import warm_server

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ROOT / "sample_project"


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--steps", type=int, default=4, help="number of steps")
    p.add_argument("--rate", type=int, default=200, help="new events per source table per step")
    p.add_argument(
        "--disorder",
        type=int,
        default=45,
        help="events are stamped up to this many minutes before the step's clock",
    )
    p.add_argument(
        "--late-share",
        type=float,
        default=0.03,
        help="share of events stamped below the waterline (too late)",
    )
    p.add_argument(
        "--bad-share",
        type=float,
        default=0.01,
        help="share of purchases with an undecodable or far-future date_time",
    )
    p.add_argument(
        "--update-share", type=float, default=0.05, help="share of the previous step's rows updated"
    )
    p.add_argument(
        "--delete-share", type=float, default=0.02, help="share of the previous step's rows deleted"
    )
    p.add_argument(
        "--step-minutes",
        type=int,
        default=30,
        help="how far the simulated event clock moves per step",
    )
    p.add_argument("--seed", type=int, default=42, help="random seed of the generator")
    p.add_argument("--target", default="local", help="profile target (local or cluster)")
    p.add_argument(
        "--warehouse-dir",
        default=None,
        help="embedded warehouse (default: sample_project/warehouse)",
    )
    p.add_argument(
        "--target-path",
        default=None,
        help="dbt's target directory (default: sample_project/target)",
    )
    p.add_argument(
        "--chart", default=None, help="PNG to write (default: <target-path>/streamsql_demo.png)"
    )
    p.add_argument("--summary", default=None, help="also write the step table as JSON here")
    p.add_argument(
        "--keep",
        action="store_true",
        help="keep the existing warehouse instead of starting from an empty one",
    )
    p.add_argument("--skip-tests", action="store_true", help="do not run `dbt test` per step")
    return p.parse_args(argv)


def say(message: str) -> None:
    print(f"   .. {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def jvm_output_to(path: Path):
    """Start the JVM with its stdout/stderr (Ivy's resolution report, Spark's warnings) in `path`.

    The JVM inherits the process's file descriptors when Spark starts, so pointing fds 1 and 2 at
    the log while the first dbt command opens the session sends its output there for good.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.dup2(log, 1)
        os.dup2(log, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (log, *saved):
            os.close(fd)


class Demo:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.target_path = Path(args.target_path or PROJECT / "target").resolve()
        self.log_path = self.target_path.parent / "logs" if args.target_path else PROJECT / "logs"
        self.chart = Path(args.chart or self.target_path / "streamsql_demo.png").resolve()
        self.runner: Any = None
        self.rows: List[Dict[str, Any]] = []
        self.failures: List[str] = []

    # -- dbt, in process ---------------------------------------------------------------------

    def common(self) -> List[str]:
        return [
            "--project-dir",
            str(PROJECT),
            "--profiles-dir",
            str(PROJECT),
            "--target",
            self.args.target,
            "--target-path",
            str(self.target_path),
            "--log-path",
            str(self.log_path),
            "--quiet",
            "--no-use-colors",
        ]

    def dbt(self, *command: str) -> Any:
        result = self.runner.invoke([*command, *self.common()])
        if result.exception is not None:
            raise SystemExit(f"dbt {command[0]} failed: {result.exception}")
        return result

    def run_results(self) -> List[Dict[str, Any]]:
        with open(self.target_path / "run_results.json") as handle:
            return json.load(handle)["results"]

    # -- the demo ----------------------------------------------------------------------------

    def setup(self) -> None:
        from dbt.cli.main import dbtRunner

        os.environ.setdefault("DBT_SEND_ANONYMOUS_USAGE_STATS", "false")
        if self.args.warehouse_dir:
            os.environ["STREAMSQL_WAREHOUSE_DIR"] = str(Path(self.args.warehouse_dir).resolve())
        warehouse = Path(os.environ.get("STREAMSQL_WAREHOUSE_DIR") or PROJECT / "warehouse")
        if not warehouse.is_absolute():
            warehouse = PROJECT / warehouse
        if self.args.target in ("local", "in_process") and not self.args.keep:
            # a warm server of an earlier demo would go on serving the removed tables
            stopped = warm_server.stop_server(warm_server.ServerPaths(str(warehouse)))
            if stopped is not None:
                say(f"stopped the warm Spark server of the earlier demo (pid {stopped.pid})")
            if warehouse.exists():
                say(f"starting from an empty warehouse: removing {warehouse}")
                shutil.rmtree(warehouse)
        say("parsing the sample project")
        parsed = dbtRunner().invoke(["parse", *self.common()])
        if not parsed.success:
            raise SystemExit(f"dbt parse failed: {parsed.exception}")
        self.runner = dbtRunner(manifest=parsed.result)
        jvm_log = self.log_path / "spark.log"
        server_log = warm_server.ServerPaths(str(warehouse)).log
        say(
            f"starting Spark and creating the source tables (Delta, change data feed on); "
            f"Spark's own log: {server_log} (the warm server), or {jvm_log} (in process)"
        )
        started = time.monotonic()
        with jvm_output_to(jvm_log):
            result = self.runner.invoke(["run-operation", "create_demo_sources", *self.common()])
        if not result.success:
            raise SystemExit(
                f"could not create the source tables: {result.exception} "
                f"(see {jvm_log} and {self.log_path / 'dbt.log'})"
            )
        say(f"ready in {time.monotonic() - started:.0f} s")

    def step(self, n: int) -> Dict[str, Any]:
        a = self.args
        generator = {
            "step": n,
            "rate": a.rate,
            "disorder": a.disorder,
            "late_share": a.late_share,
            "bad_share": a.bad_share,
            "update_share": a.update_share,
            "delete_share": a.delete_share,
            "seed": a.seed,
            "step_minutes": a.step_minutes,
        }
        say(f"step {n}/{a.steps}: generating events")
        started = time.monotonic()
        if not self.dbt("run-operation", "generate_step", "--args", json.dumps(generator)).success:
            raise SystemExit(f"step {n}: the generator failed (see the error above)")
        generated = time.monotonic()

        say(f"step {n}/{a.steps}: dbt run")
        run = self.dbt("run", *(["--full-refresh"] if n == 1 else []))
        ran = time.monotonic()
        models = []
        for result in self.run_results():
            response = result.get("adapter_response") or {}
            if "step" not in response:
                continue  # not an incremental_view
            models.append(
                {
                    "model": result["unique_id"].split(".")[-1],
                    **response,
                    "status": result["status"],
                }
            )
        if not run.success:
            for result in self.run_results():
                if result["status"] not in ("success", "pass"):
                    print(f"   !! {result['unique_id']}: {result.get('message')}", file=sys.stderr)
            raise SystemExit(f"step {n}: dbt run failed")

        tests_passed = tests_total = 0
        if not a.skip_tests:
            say(f"step {n}/{a.steps}: dbt test")
            self.dbt("test")
            for result in self.run_results():
                tests_total += 1
                if result["status"] == "pass":
                    tests_passed += 1
                else:
                    message = (
                        f"step {n}: {result['unique_id']}: {result['status']} "
                        f"({result.get('message') or result.get('failures')})"
                    )
                    self.failures.append(message)
                    print(f"   !! {message}", file=sys.stderr)
        tested = time.monotonic()

        waterlines = {
            f"{m['model']}.{col}": value
            for m in models
            for col, value in (m.get("waterline") or {}).items()
            if value
        }
        row = {
            "step": n,
            "changes_read": sum(m.get("changes_read", 0) for m in models),
            "applied": sum(m.get("applied", 0) for m in models),
            "late": sum(m.get("late", 0) for m in models),
            "held": sum(m.get("held", 0) for m in models),
            "waterline": min(waterlines.values()) if waterlines else None,
            "waterlines": waterlines,
            "seconds": round(sum(m.get("seconds", 0.0) for m in models), 1),
            "generate_s": round(generated - started, 1),
            "run_s": round(ran - generated, 1),
            "test_s": round(tested - ran, 1),
            "tests_passed": tests_passed,
            "tests_total": tests_total,
            "models": models,
        }
        self.rows.append(row)
        return row

    # -- output ------------------------------------------------------------------------------

    HEADER = (
        f"{'step':>4} {'read':>6} {'applied':>7} {'late':>5} {'held':>5}  "
        f"{'waterline (min)':<19} {'seconds':>7} {'run s':>6} {'tests':>7}"
    )

    def print_row(self, row: Dict[str, Any]) -> None:
        tests = "skipped" if self.args.skip_tests else f"{row['tests_passed']}/{row['tests_total']}"
        print(
            f"{row['step']:>4} {row['changes_read']:>6} {row['applied']:>7} {row['late']:>5} "
            f"{row['held']:>5}  {row['waterline'] or 'none':<19} {row['seconds']:>7.1f} "
            f"{row['run_s']:>6.1f} {tests:>7}",
            flush=True,
        )

    def print_models(self) -> None:
        last = self.rows[-1]
        print(f"\nStep {last['step']} per model (run_results.json adapter_response):")
        print(
            f"  {'model':<28} {'read':>5} {'applied':>7} {'late':>5} {'held':>5}  "
            f"{'waterline':<32} plan"
        )
        for m in last["models"]:
            waterline = ", ".join(f"{k}={v}" for k, v in (m.get("waterline") or {}).items())
            print(
                f"  {m['model']:<28} {m.get('changes_read', 0):>5} {m.get('applied', 0):>7} "
                f"{m.get('late', 0):>5} {m.get('held', 0):>5}  {waterline or '-':<32} "
                f"{m.get('plan')} ({m.get('reason')})"
            )
        notes = sorted({note for m in last["models"] for note in m.get("notes") or []})
        if notes:  # recoveries and retention warnings (docs/steps.md)
            print("\nNotes of the step lines:")
            for note in notes:
                print(f"  {note}")

    def chart_png(self) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.dates as mdates
        import matplotlib.pyplot as plt

        steps = [r["step"] for r in self.rows]
        fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
        for name in sorted({k for r in self.rows for k in r["waterlines"]}):
            points = [
                (r["step"], datetime.fromisoformat(r["waterlines"][name]))
                for r in self.rows
                if name in r["waterlines"]
            ]
            top.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=name)
        top.yaxis.set_major_formatter(mdates.DateFormatter("%m-%d %H:%M"))
        top.set_ylabel("waterline (event time)")
        top.set_title("dbt-streamsql demo: waterline and late rows per step")
        top.legend(fontsize="small")
        top.grid(True, alpha=0.3)
        models = sorted({m["model"] for r in self.rows for m in r["models"] if m.get("late")})
        bottoms = [0] * len(steps)
        for model in models or ["(none)"]:
            late = [
                sum(m.get("late", 0) for m in r["models"] if m["model"] == model) for r in self.rows
            ]
            bottom.bar(steps, late, bottom=bottoms, label=f"{model} late")
            bottoms = [b + v for b, v in zip(bottoms, late)]
        bottom.plot(
            steps,
            [r["held"] for r in self.rows],
            color="black",
            marker="s",
            linestyle="--",
            label="held (WATERMARK)",
        )
        bottom.set_xlabel("step")
        bottom.set_ylabel("rows")
        bottom.set_xticks(steps)
        bottom.legend(fontsize="small")
        bottom.grid(True, axis="y", alpha=0.3)
        fig.tight_layout()
        self.chart.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(self.chart, dpi=100)
        plt.close(fig)

    def print_lateness(self) -> None:
        """What share of stg_purchases's changes each LATENESS would have accepted."""
        print("\nHow late stg_purchases's changes arrived (streamsql_lateness_report):")
        sys.stdout.flush()
        self.dbt("run-operation", "streamsql_lateness_report", "--args", "{model: stg_purchases}")

    def print_next(self) -> None:
        schema = "demo"
        shows = [
            (
                "select _streamsql_step, _streamsql_reason, _streamsql_change, count(*) as n "
                f"from {schema}.stg_purchases__late group by all order by 1, 2, 3",
                "",
            ),
            (f"select * from {schema}.stg_purchases__late order by _streamsql_step", " --limit 20"),
            (
                "select step, column_name, waterline, max_seen "
                f"from {schema}.stg_purchases__waterline order by step",
                "",
            ),
            (
                f"select * from {schema}.stg_sensors__pending "
                "where _streamsql_released_step is null",
                "",
            ),
        ]
        commands = "\n".join(f'  dbt show --inline "{query}"{options}' for query, options in shows)
        print(f"""
Next: see what LATENESS quarantined and how the waterlines moved. From sample_project/:

{commands}

stg_sensors has the same __late and __waterline tables, and __pending for WATERMARK.
Chart of waterlines and late rows per step: {self.chart}""")

    def run(self) -> int:
        wall = time.monotonic()
        self.setup()
        print(self.HEADER)
        for n in range(1, self.args.steps + 1):
            self.print_row(self.step(n))
        self.print_models()
        self.print_lateness()
        self.chart_png()
        passed = sum(r["tests_passed"] for r in self.rows)
        total = sum(r["tests_total"] for r in self.rows)
        seconds = time.monotonic() - wall
        if self.args.summary:
            with open(self.args.summary, "w") as handle:
                json.dump(
                    {
                        "steps": self.rows,
                        "tests_passed": passed,
                        "tests_total": total,
                        "failures": self.failures,
                        "chart": str(self.chart),
                        "seconds": round(seconds, 1),
                    },
                    handle,
                    indent=2,
                    default=str,
                )
        self.print_next()
        if self.args.skip_tests:
            print(f"\n{len(self.rows)} steps in {seconds:.0f} s (tests skipped).")
        else:
            print(
                f"\n{len(self.rows)} steps in {seconds:.0f} s; dbt tests: {passed}/{total} "
                "passed" + ("." if not self.failures else ", failures above.")
            )
        return 1 if self.failures else 0


def main(argv: Optional[List[str]] = None) -> int:
    return Demo(parse_args(argv)).run()


if __name__ == "__main__":
    sys.exit(main())
