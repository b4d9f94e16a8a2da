"""`streamsql` (cli.py) run through its real `main()`, where no server has to start: the version,
the help of every action, usage errors, and `start`, `status` and `stop` on a warehouse with no
server. Starting, reusing and stopping a real server: tests/functional/test_warm_server.py.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from importlib.metadata import version as installed_version
from pathlib import Path

import dbt.flags
import pytest
import yaml

from dbt.adapters.streamsql import cli
from dbt.adapters.streamsql.__version__ import version as ADAPTER_VERSION
from dbt.adapters.streamsql.spark import warm_server


@pytest.fixture(autouse=True)
def isolated(monkeypatch):
    """dbt's variables unset, and dbt's global flags (the CLI sets them) restored after."""
    for name in ("DBT_PROJECT_DIR", "DBT_PROFILES_DIR", "DBT_PROFILE", "DBT_TARGET"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(dbt.flags, "GLOBAL_FLAGS", dbt.flags.GLOBAL_FLAGS)


def exit_code(argv) -> int:
    """`main(argv)`'s exit code, whether it returns it or argparse exits with it."""
    try:
        return cli.main(argv)
    except SystemExit as exited:
        return int(exited.code or 0)


def project(root: Path, **outputs) -> Path:
    """A dbt project at `root` whose profile has these targets (the first is the default)."""
    (root / "models").mkdir(parents=True)
    (root / "dbt_project.yml").write_text(yaml.safe_dump({"name": "p", "profile": "p"}))
    targets = {
        name: {"type": "streamsql", "schema": "s", **fields} for name, fields in outputs.items()
    }
    profile = {"target": next(iter(outputs)), "outputs": targets}
    (root / "profiles.yml").write_text(yaml.safe_dump({"p": profile}))
    return root


def test_version_names_the_package_then_what_it_runs_with(capsys):
    assert exit_code(["--version"]) == 0
    first, second = capsys.readouterr().out.splitlines()
    assert first == f"streamsql (dbt-streamsql) {ADAPTER_VERSION}"
    for name in ("pyspark", "delta-spark", "dbt-core"):
        assert f"{name} {installed_version(name)}" in second


def test_the_help_says_what_the_server_is_where_its_files_are_and_the_exit_codes(capsys):
    for argv in (["--help"], ["server", "--help"]):
        assert exit_code(argv) == 0
        shown = capsys.readouterr().out
        assert "Spark Connect server per warehouse" in shown
        for file in ("server.json", "token", "last_used", "config.json", "start.lock"):
            assert f".streamsql-server/{file}" in shown
        assert "logs/spark-connect-server.log" in shown
        assert "2 usage error" in shown and "3 `status`: no server running" in shown


@pytest.mark.parametrize("action", ["start", "status", "stop"])
def test_every_action_has_its_help_its_flags_and_its_exit_codes(capsys, action):
    assert exit_code(["server", action, "--help"]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith(f"usage: streamsql server {action} ")
    for flag in ("--project-dir", "--profiles-dir", "--profile", "--target", "--warehouse"):
        assert flag in shown
    assert "exit codes: 0 " in " ".join(shown.split())
    assert ("--json" in shown) == (action == "status")


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["server"],
        ["serve"],
        ["server", "restart"],
        ["server", "stop", "--json"],
        ["server", "start", "--json"],
        ["server", "status", "--bogus"],
    ],
)
def test_a_usage_error_exits_2(capsys, argv):
    assert exit_code(argv) == 2
    assert "usage: streamsql" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--project-dir", "--profiles-dir", "--profile", "--target"])
@pytest.mark.parametrize("action", ["start", "status", "stop"])
def test_warehouse_with_a_profile_flag_is_refused_not_ignored(tmp_path, capsys, action, flag):
    assert exit_code(["server", action, "--warehouse", str(tmp_path), flag, "x"]) == 2
    assert "--warehouse names the warehouse without a profile" in capsys.readouterr().err


def test_status_of_a_warehouse_with_no_server_exits_3(tmp_path, capsys):
    assert exit_code(["server", "status", "--warehouse", str(tmp_path)]) == 3
    assert capsys.readouterr().out == f"no server running for {tmp_path}\n"
    assert exit_code(["server", "status", "--warehouse", str(tmp_path), "--json"]) == 3
    assert json.loads(capsys.readouterr().out) == {"running": False, "warehouse": str(tmp_path)}


def test_stop_with_no_server_exits_1_saying_nothing_was_running(tmp_path, capsys):
    assert exit_code(["server", "stop", "--warehouse", str(tmp_path)]) == 1
    said = capsys.readouterr()
    assert said.out == ""
    assert said.err == f"streamsql: no server was running for {tmp_path}; nothing stopped\n"


def stale_record(warehouse: Path) -> warm_server.ServerPaths:
    """A server.json naming a process that is not the server: this test's own."""
    paths = warm_server.ServerPaths(str(warehouse))
    os.makedirs(paths.root)
    state = warm_server.ServerState(os.getpid(), 1, str(warehouse), ADAPTER_VERSION, "f", 0.0, 60)
    Path(paths.state).write_text(json.dumps(asdict(state)))
    return paths


def test_a_record_of_a_process_that_is_gone_is_not_running(tmp_path, capsys):
    paths = stale_record(tmp_path)
    assert exit_code(["server", "status", "--warehouse", str(tmp_path)]) == 3
    assert "(its record names a process that is gone)" in capsys.readouterr().out
    assert exit_code(["server", "stop", "--warehouse", str(tmp_path)]) == 1
    assert f"(its record named pid {os.getpid()}, which is gone)" in capsys.readouterr().err
    assert not os.path.exists(paths.state)  # the record is removed; this process still runs


def test_start_of_a_warehouse_no_server_has_started_on_is_refused(tmp_path, capsys):
    assert exit_code(["server", "start", "--warehouse", str(tmp_path / "wh")]) == 1
    said = capsys.readouterr().err
    assert said.startswith(f"streamsql: No server has started for {tmp_path / 'wh'} yet")
    assert "streamsql server start --project-dir" in said
    assert not (tmp_path / "wh").exists()


def test_the_profile_names_the_warehouse_as_dbt_finds_it(tmp_path, capsys, monkeypatch):
    root = project(tmp_path / "p", dev={}, other={"warehouse_dir": str(tmp_path / "other")})
    # From a directory inside the project, its profiles.yml and default target.
    monkeypatch.chdir(root / "models")
    assert exit_code(["server", "status"]) == 3
    assert capsys.readouterr().out == f"no server running for {root / 'warehouse'}\n"
    assert exit_code(["server", "stop", "--target", "other"]) == 1
    assert f"no server was running for {tmp_path / 'other'}" in capsys.readouterr().err
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DBT_PROJECT_DIR", str(root))
    monkeypatch.setenv("DBT_TARGET", "other")
    assert exit_code(["server", "status", "--json"]) == 3
    assert json.loads(capsys.readouterr().out)["warehouse"] == str(tmp_path / "other")
    assert exit_code(["server", "status", "--project-dir", str(root), "--profile", "none"]) == 4
    assert "none" in capsys.readouterr().err


def test_status_that_cannot_find_the_warehouse_exits_4_and_the_others_1(tmp_path, capsys):
    missing = ["--project-dir", str(tmp_path / "no_project")]
    assert exit_code(["server", "status", *missing]) == 4
    assert capsys.readouterr().err.startswith("streamsql: No dbt_project.yml found")
    assert exit_code(["server", "stop", *missing]) == 1
    assert exit_code(["server", "start", *missing]) == 1


def test_start_refuses_a_target_whose_dbt_commands_use_no_server(tmp_path, capsys):
    root = project(tmp_path / "p", dev={"keep_warm": False})
    assert exit_code(["server", "start", "--project-dir", str(root)]) == 1
    assert "sets keep_warm: false" in capsys.readouterr().err
    assert not (root / "warehouse").exists()


def test_init_has_its_help_and_exit_codes(capsys):
    assert exit_code(["init", "--help"]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert shown.startswith("usage: streamsql init ")
    assert "dbt init" in shown and "exit codes: 0 the project and its starter were made" in shown


def test_init_inside_a_project_adds_no_starter_and_says_why(tmp_path, capsys, monkeypatch):
    project(tmp_path / "p", t={"method": "session"})
    monkeypatch.chdir(tmp_path / "p")
    assert exit_code(["init", "--skip-profile-setup"]) == 1
    said = capsys.readouterr().err
    assert "dbt init made no new project (it ran inside an existing one)" in said, said
    assert not (tmp_path / "p" / "seeds").exists()
    assert Path.cwd() == tmp_path / "p"


def test_the_starter_replaces_dbts_example_and_overwrites_nothing(tmp_path):
    from dbt.adapters.streamsql.starter import STARTER, StarterError, write_starter

    example = tmp_path / "models" / "example"
    example.mkdir(parents=True)
    for name in ("my_first_dbt_model.sql", "my_second_dbt_model.sql", "schema.yml"):
        (example / name).write_text("-- dbt's")
    assert write_starter(tmp_path) == list(STARTER)
    assert not example.exists()
    model = (tmp_path / "models" / "pickups_per_hour.sql").read_text()
    assert "materialized='incremental_view'" in model and "ref('pickups')" in model
    assert "matches_recompute" in (tmp_path / "models" / "pickups_per_hour.yml").read_text()
    with pytest.raises(StarterError, match="would overwrite it. Nothing was written"):
        write_starter(tmp_path)
    # an example of the user's own is left alone
    other = tmp_path / "other"
    (other / "models" / "example").mkdir(parents=True)
    (other / "models" / "example" / "mine.sql").write_text("select 1")
    write_starter(other)
    assert (other / "models" / "example" / "mine.sql").exists()
