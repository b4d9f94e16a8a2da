"""The adapter installs into any dbt project, as a user installs it: a wheel built from this
repository, installed with pip into a fresh virtualenv, a project made by `streamsql init` (dbt
init from the adapter's profile template, with the adapter's starter, which `dbt build` builds),
and a day of dbt commands on it (steps, `dbt build`, `dbt retry`
after a failed step, `dbt test --store-failures`), each a process of its own on the warm default.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]

MODEL = """
{{ config(materialized='incremental_view') }}
select k, count(*) as n, sum(v) as total from {{ target.schema }}.src group by k
"""
SCHEMA_YML = """
version: 2
models:
  - name: totals
    data_tests:
      - matches_recompute
    columns:
      - name: n
        data_tests:
          - accepted_values:
              arguments: {values: [1, 2]}
"""
MACROS = """
{% macro create_src() %}
  {% do run_query("create schema if not exists " ~ target.schema) %}
  {% do run_query("create or replace table " ~ target.schema ~ ".src (k int, v int)") %}
  {% do run_query("insert into " ~ target.schema ~ ".src values (1, 10), (2, 20)") %}
{% endmacro %}
{% macro add_rows(rows) %}
  {% do run_query("insert into " ~ target.schema ~ ".src values " ~ rows) %}
{% endmacro %}
"""


# The adapters `dbt init` offers, in its order (dbt-spark is installed beside this one).
LIST_ADAPTERS = (
    "import json; from dbt.version import _get_adapter_plugin_names as names; "
    "print(json.dumps(list(names())))"
)


def run(command, cwd: Path, env: dict, stdin: str = "", timeout: int = 900):
    completed = subprocess.run(
        [str(c) for c in command],
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return completed


def results(project: Path):
    return {
        r["unique_id"].split(".")[-1]: r
        for r in json.loads((project / "target" / "run_results.json").read_text())["results"]
    }


@pytest.mark.timeout(1800)
def test_a_wheel_in_a_fresh_virtualenv_runs_steps_in_a_project_made_by_dbt_init(tmp_path):
    dist = tmp_path / "dist"
    built = run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", dist, ROOT],
        ROOT,
        dict(os.environ),
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = dist.glob("dbt_streamsql-*.whl")
    with zipfile.ZipFile(wheel) as archive:  # the log store's source, compiled at first start
        names = set(archive.namelist())
    assert {
        "dbt/adapters/streamsql/spark/jvm/ListFromLogStore.java",
        "dbt/adapters/streamsql/spark/jvm/stub/io/delta/storage/LocalLogStore.java",
    } <= names

    env_dir = tmp_path / "fresh"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bin_dir = env_dir / "bin"
    installed = run(
        # without compiling every installed module ahead (pyspark's thousands): what dbt
        # imports is compiled when first imported
        [bin_dir / "python", "-m", "pip", "install", "--no-compile", wheel],
        tmp_path,
        dict(os.environ),
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    # pip fetched one pyspark, the pinned one (dbt-spark[session] once made it fetch a newer
    # one first, 450 MB more, and throw it away)
    fetched = set(re.findall(r"\bpyspark-(\d+\.\d+\.\d+)", installed.stdout))
    assert fetched == {"4.2.0"}, installed.stdout[-3000:]

    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH"))}
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", DBT_SEND_ANONYMOUS_USAGE_STATS="false"
    )
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    dbt = [bin_dir / "dbt"]

    # streamsql init (dbt init, then the starter): which adapter (dbt-spark is installed beside
    # it), then the template's prompts
    listed = run([bin_dir / "python", "-c", LIST_ADAPTERS], tmp_path, env)
    assert listed.returncode == 0, listed.stderr[-3000:]
    adapters = json.loads(listed.stdout)
    assert "streamsql" in adapters, adapters
    choice = adapters.index("streamsql") + 1
    answers = f"{choice}\n1\nwarehouse\nanalytics\n1\n"
    streamsql = [bin_dir / "streamsql"]
    init = run(
        streamsql + ["init", "user_project", "--profiles-dir", profiles], tmp_path, env, answers
    )
    assert init.returncode == 0, init.stdout[-3000:] + init.stderr[-3000:]
    assert "Next: cd user_project && dbt build" in init.stdout, init.stdout[-3000:]
    profile = yaml.safe_load((profiles / "profiles.yml").read_text())["user_project"]
    target = profile["outputs"][profile["target"]]
    assert (target["type"], target["method"], target["schema"]) == (
        "streamsql",
        "session",
        "analytics",
    )

    project = tmp_path / "user_project"
    warehouse = project / "warehouse"
    try:
        # the starter builds on the first try: the seed, the view's first step, its tests
        built = run(dbt + ["build", "--profiles-dir", profiles], project, env)
        assert built.returncode == 0, built.stdout[-3000:]
        assert "PASS=5 WARN=0 ERROR=0" in built.stdout, built.stdout[-3000:]
    except BaseException:
        run([bin_dir / "streamsql", "server", "stop", "--warehouse", warehouse], project, env)
        raise
    for example in (project / "models").rglob("*"):
        if example.is_file():
            example.unlink()
    (project / "models" / "totals.sql").write_text(MODEL)
    (project / "models" / "schema.yml").write_text(SCHEMA_YML)
    (project / "macros" / "src.sql").write_text(MACROS)

    def dbt_command(*args, fail_at: str = "", expect: int = 0):
        extra = {"STREAMSQL_TEST_FAIL_AT": fail_at} if fail_at else {}
        done = run(dbt + list(args) + ["--profiles-dir", profiles], project, {**env, **extra})
        said = f"{done.stdout[:2000]}\n...\n{done.stdout[-3000:]}"
        assert done.returncode == expect, f"dbt {' '.join(args)}:\n{said}"
        return done

    try:
        dbt_command("run-operation", "create_src")
        dbt_command("build")  # step 1 of the view, then its tests
        assert results(project)["totals"]["adapter_response"]["step"] == 1
        dbt_command("run-operation", "add_rows", "--args", "{rows: '(1, 5)'}")
        # a step that fails (the test-only switch), then `dbt retry` takes it
        dbt_command("run", fail_at="before_commit", expect=1)
        dbt_command("retry")
        response = results(project)["totals"]["adapter_response"]
        assert (response["step"], response["computed"]) == (2, "aggregate"), response
        dbt_command("test")  # matches_recompute and accepted_values pass
        # a third row of k 1 breaks accepted_values: its failures are stored
        dbt_command("run-operation", "add_rows", "--args", "{rows: '(1, 7)'}")
        dbt_command("run")
        stored = dbt_command("test", "--store-failures", expect=1)
        assert "accepted_values" in stored.stdout
        assert "matches_recompute" not in [
            name for name, r in results(project).items() if r["status"] == "fail"
        ]
    finally:
        run([bin_dir / "streamsql", "server", "stop", "--warehouse", warehouse], project, env)
