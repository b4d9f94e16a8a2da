"""Run the sample project's steps against one profile target; report step times and contents.

    python -m tests.sample_steps --work-dir DIR --target '{"type": "streamsql", ...}' \
        --steps 2 --rate 50 --out DIR/result.json

Copies sample_project/ to DIR/project (the sample is read, never written), writes a profiles.yml
with the given target, and drives dbt in this one process (dbtRunner, so an embedded session
starts its JVM once): create the source tables, then per step append one batch of generated
events (`generate_step`) and `dbt run`. Optionally `dbt test` after the last step. Writes JSON
with each step's wall time, each model's time and counts from the run results, and with
`--contents` every model's rows (and its `__late` quarantine's) as canonical JSON strings, so runs
through different Spark deployments can be compared as multisets (a `dbt show` per table).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import yaml

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_PROJECT = ROOT / "sample_project"
PROFILE = "streamsql_demo"
NOT_COPIED = ("target", "logs", "warehouse", "dbt_packages", "*.png")
# Columns whose values are wall-clock times of the run, not results.
RUN_TIME_COLUMNS = {"_streamsql_at"}

# Every row as one JSON string; doubles rounded so that sums added up in a different order
# (another partitioning of the same data) still compare equal.
CONTENTS_SQL = """
{%- set columns = adapter.get_columns_in_relation(relation) -%}
select to_json(named_struct(
  {%- for column in columns if column.name not in excluded %}
  '{{ column.name }}',
  {% if column.dtype in ('double', 'float') -%}
    round(`{{ column.name }}`, 9)
  {%- else -%}
    `{{ column.name }}`
  {%- endif %}{{ ',' if not loop.last }}
  {%- endfor %})) as row
from {{ relation }}
"""


def copy_project(work_dir: Path) -> Path:
    project = work_dir / "project"
    if project.exists():
        shutil.rmtree(project)
    shutil.copytree(SAMPLE_PROJECT, project, ignore=shutil.ignore_patterns(*NOT_COPIED))
    return project


def write_profile(project: Path, target: Dict[str, Any]) -> None:
    profiles = {PROFILE: {"target": "under_test", "outputs": {"under_test": target}}}
    (project / "profiles.yml").write_text(yaml.safe_dump(profiles))


class Driver:
    def __init__(self, project: Path) -> None:
        from dbt.cli.main import dbtRunner

        self.project = project
        self.common = [
            "--project-dir",
            str(project),
            "--profiles-dir",
            str(project),
            "--target-path",
            str(project / "target"),
            "--log-path",
            str(project / "logs"),
            "--no-use-colors",
            "--quiet",
        ]
        parsed = dbtRunner().invoke(["parse", *self.common])
        if not parsed.success:
            raise SystemExit(f"dbt parse failed: {parsed.exception}")
        self.manifest = parsed.result
        self.runner = dbtRunner(manifest=parsed.result)

    def invoke(self, *command: str, allow_failures: bool = False) -> Any:
        result = self.runner.invoke([*command, *self.common])
        if result.exception is not None or not (result.success or allow_failures):
            failed = [
                f"{r.node.name}: {r.message}"
                for r in getattr(result.result, "results", [])
                if str(r.status) not in ("success", "pass")
            ]
            raise SystemExit(
                f"dbt {' '.join(command)} failed: {result.exception or failed} "
                f"(log: {self.project / 'logs' / 'dbt.log'})"
            )
        return result

    def models(self) -> List[Any]:
        return sorted(
            (
                node
                for node in self.manifest.nodes.values()
                if node.resource_type == "model" and node.config.materialized == "incremental_view"
            ),
            key=lambda node: node.name,
        )

    def contents(self, model: Any, suffix: str = "") -> List[str]:
        relation = f"{model.schema}.{model.alias or model.name}{suffix}"
        sql = (
            "{%- set relation = adapter.get_relation(database=none, schema='"
            + model.schema
            + "', identifier='"
            + (model.alias or model.name)
            + suffix
            + "') -%}"
            + "{%- set excluded = "
            + json.dumps(sorted(RUN_TIME_COLUMNS))
            + " -%}"
            + CONTENTS_SQL
        )
        result = self.invoke("show", "--inline", sql, "--limit", "-1")
        table = result.result.results[0].agate_table
        rows = [str(row[0]) for row in table.rows]
        if not rows and table.column_names != ("row",):
            raise SystemExit(f"unexpected contents of {relation}: {table.column_names}")
        return sorted(rows)


def run(args: argparse.Namespace) -> Dict[str, Any]:
    os.environ.setdefault("DBT_SEND_ANONYMOUS_USAGE_STATS", "false")
    work_dir = Path(args.work_dir).resolve()
    project = copy_project(work_dir)
    write_profile(project, json.loads(args.target))
    started = time.monotonic()
    driver = Driver(project)
    report: Dict[str, Any] = {"target": json.loads(args.target), "steps": []}

    clock = time.monotonic()
    driver.invoke("run-operation", "create_demo_sources")
    report["setup_seconds"] = round(time.monotonic() - clock, 1)
    for step in range(1, args.steps + 1):
        clock = time.monotonic()
        driver.invoke(
            "run-operation",
            "generate_step",
            "--args",
            json.dumps({"step": step, "rate": args.rate}),
        )
        generated = time.monotonic() - clock
        clock = time.monotonic()
        result = driver.invoke("run")
        models = {}
        for item in result.result.results:
            response = item.adapter_response or {}
            models[item.node.name] = {
                "status": str(item.status),
                "execution_time": round(item.execution_time, 2),
                "step_seconds": response.get("seconds"),
                "plan": response.get("plan"),
                "changes_read": response.get("changes_read"),
                "applied": response.get("applied"),
                "late": response.get("late"),
                "held": response.get("held"),
            }
        report["steps"].append(
            {
                "step": step,
                "generate_seconds": round(generated, 1),
                "run_seconds": round(time.monotonic() - clock, 1),
                "models": models,
            }
        )
        print(
            f"step {step}: generated in {generated:.1f} s, ran in {time.monotonic() - clock:.1f} s",
            file=sys.stderr,
            flush=True,
        )
    if args.test:
        clock = time.monotonic()
        result = driver.invoke("test", allow_failures=True)
        report["tests"] = {item.node.name: str(item.status) for item in result.result.results}
        report["test_seconds"] = round(time.monotonic() - clock, 1)

    if args.contents:
        contents: Dict[str, List[str]] = {}
        for model in driver.models():
            contents[model.name] = driver.contents(model)
            if model.config.get("lateness"):
                contents[f"{model.name}__late"] = driver.contents(model, "__late")
        report["contents"] = contents
    report["total_seconds"] = round(time.monotonic() - started, 1)
    return report


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--target", required=True, help="the profile target, as JSON")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--rate", type=int, default=50)
    parser.add_argument("--test", action="store_true", help="run `dbt test` after the last step")
    parser.add_argument(
        "--contents", action="store_true", help="report every model's rows (a dbt show each)"
    )
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    report = run(args)
    Path(args.out).write_text(json.dumps(report, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
