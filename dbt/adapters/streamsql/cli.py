"""`streamsql server start|status|stop`: the warm Spark server of a dbt project's warehouse;
`streamsql init`: `dbt init`, with a starter incremental view (starter.py).

The warehouse and the server's settings come from the project's profile, as `dbt` reads them
(`--project-dir`, `--profiles-dir`, `--profile`, `--target`, their DBT_* variables and dbt's
defaults), or from `--warehouse DIR` alone. The exit codes are pg_ctl's and LSB init scripts'
(`EXIT_*` below). Commands, flags, exit codes and files: docs/cli.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as installed_version
from pathlib import Path
from typing import Any, List, Optional

from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.streamsql.__version__ import version as ADAPTER_VERSION
from dbt.adapters.streamsql.spark import warm_server

EXIT_OK = 0
EXIT_FAILED = 1  # and `stop` when no server was running, as `pg_ctl stop`
EXIT_USAGE = 2  # argparse's
EXIT_NOT_RUNNING = 3  # `status`: LSB's "program is not running", as `pg_ctl status`
EXIT_UNKNOWN = 4  # `status`: LSB's "status is unknown" (no warehouse found from the profile)

ABOUT = """\
The warm server is one Spark Connect server per warehouse, for profile targets with
method: session and keep_warm: true (the defaults). The first dbt command on a warehouse
starts it; later commands connect to it instead of starting a JVM; it stops itself after
idle_timeout seconds unused (default 1800). It listens on 127.0.0.1 only and requires a token.

Its files, under the warehouse directory:
  .streamsql-server/server.json   the running server (pid, port, versions); removed on stop
  .streamsql-server/token         the token clients present (owner only, 0600)
  .streamsql-server/last_used     touched by connected dbt processes: the idle clock
  .streamsql-server/config.json   the settings the last server was started with
  .streamsql-server/start.lock    held while a process starts or replaces the server
  logs/spark-connect-server.log   the server's output

Exit codes: 0 success; 1 failure, or `stop` with no server running; 2 usage error;
3 `status`: no server running; 4 `status`: the profile does not say which warehouse.
Documentation: docs/cli.md of dbt-streamsql."""

WAREHOUSE_CHOICE = (
    "The profile target's warehouse_dir, the profile found as dbt finds it; or DIR with "
    "--warehouse, which then cannot be combined with the profile's flags."
)


def versions() -> str:
    """`streamsql --version`: the adapter's version, then those it runs with."""

    def installed(name: str) -> str:
        try:
            return f"{name} {installed_version(name)}"
        except PackageNotFoundError:
            return f"{name} not installed"

    others = ", ".join(installed(name) for name in ("pyspark", "delta-spark", "dbt-core"))
    return (
        f"streamsql (dbt-streamsql) {ADAPTER_VERSION}\n{others}, python {platform.python_version()}"
    )


def nearest_project(directory: str) -> str:
    """dbt's default project: the nearest of `directory` and its parents with a dbt_project.yml."""
    found = Path(directory)
    for candidate in [found, *found.parents]:
        if (candidate / "dbt_project.yml").is_file():
            return str(candidate)
    return directory


def profile_credentials(args: argparse.Namespace) -> Any:
    """The credentials of the project's profile target, rendered as dbt renders them."""
    from dbt.config.runtime import load_profile
    from dbt.flags import set_from_args
    from dbt_common.context import set_invocation_context

    project_dir = os.path.abspath(
        args.project_dir or os.environ.get("DBT_PROJECT_DIR") or nearest_project(os.getcwd())
    )
    profiles_dir = args.profiles_dir or os.environ.get("DBT_PROFILES_DIR")
    if profiles_dir is None:
        local = os.path.join(project_dir, "profiles.yml")
        profiles_dir = project_dir if os.path.exists(local) else os.path.expanduser("~/.dbt")
    set_from_args(argparse.Namespace(project_dir=project_dir, profiles_dir=profiles_dir), None)
    set_invocation_context(os.environ)  # env_var() in the profile reads it
    profile = load_profile(
        project_dir,
        {},
        profile_name_override=args.profile or os.environ.get("DBT_PROFILE"),
        target_override=args.target or os.environ.get("DBT_TARGET"),
    )
    credentials = profile.credentials
    if credentials.type != "streamsql":
        raise DbtRuntimeError(f"The profile's target is type {credentials.type}, not streamsql")
    if credentials.method != "session":
        raise DbtRuntimeError(
            f"The profile's target uses method: {credentials.method}; only method: session has "
            "a warm server on this machine."
        )
    return credentials


def server_paths(args: argparse.Namespace) -> warm_server.ServerPaths:
    if args.warehouse:
        return warm_server.ServerPaths(os.path.abspath(os.path.expanduser(args.warehouse)))
    return warm_server.ServerPaths(profile_credentials(args).resolved_warehouse_dir())


def start(args: argparse.Namespace) -> int:
    if args.warehouse:
        paths = server_paths(args)
        recorded = warm_server.last_started_with(paths)
        if recorded is None:
            raise DbtRuntimeError(
                f"No server has started for {paths.warehouse_dir} yet, so the settings to start "
                "one with are unknown: start it from its project (streamsql server start "
                "--project-dir DIR) or run a dbt command there."
            )
        settings, idle_timeout, port = recorded
    else:
        credentials = profile_credentials(args)
        if not credentials.keep_warm:
            raise DbtRuntimeError(
                "The profile's target sets keep_warm: false: its dbt commands run Spark in "
                "their own process, use no server, and would wait for the warehouse one holds "
                "(its embedded metastore). Remove keep_warm: false to use a warm server."
            )
        settings = credentials.session_settings()
        idle_timeout, port = credentials.idle_timeout, credentials.port
    before = warm_server.running_server(warm_server.ServerPaths(settings.warehouse_dir))
    state = warm_server.ensure_server(settings, idle_timeout, port)
    said = "already running" if before is not None and before.pid == state.pid else "started"
    print(f"{said}: pid {state.pid}, port {state.port}, warehouse {state.warehouse_dir}")
    return EXIT_OK


def show_status(args: argparse.Namespace) -> int:
    found = warm_server.status(server_paths(args))
    if args.json:
        print(json.dumps(found, indent=2))
    elif not found["running"]:
        stale = " (its record names a process that is gone)" if "pid" in found else ""
        print(f"no server running for {found['warehouse']}{stale}")
    else:
        print(
            "\n".join(
                [
                    f"running     pid {found['pid']}, port {found['port']} (loopback only)",
                    f"warehouse   {found['warehouse']}",
                    f"uptime      {duration(found['uptime_s'])}",
                    f"idle        {duration(found['idle_s'])} "
                    f"(stops after {duration(found['idle_timeout_s'])} unused)",
                    f"spark ui    {found['spark_ui'] or 'off (spark.ui.enabled)'}",
                    f"version     dbt-streamsql {found['adapter_version']}",
                    f"log         {found['log']}",
                ]
            )
        )
    return EXIT_OK if found["running"] else EXIT_NOT_RUNNING


def stop(args: argparse.Namespace) -> int:
    paths = server_paths(args)
    recorded = warm_server.ServerState.read(paths)
    alive = recorded is not None and warm_server.is_server_process(recorded.pid)
    started = time.monotonic()
    warm_server.stop_server(paths)  # a record of a process that is gone is removed too
    if recorded is None or not alive:
        gone = f" (its record named pid {recorded.pid}, which is gone)" if recorded else ""
        print(
            f"streamsql: no server was running for {paths.warehouse_dir}{gone}; nothing stopped",
            file=sys.stderr,
        )
        return EXIT_FAILED
    print(f"stopped pid {recorded.pid} in {time.monotonic() - started:.1f} s")
    return EXIT_OK


def duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


def warehouse_flags() -> argparse.ArgumentParser:
    """The flags that choose the warehouse, shared by every action."""
    shared = argparse.ArgumentParser(add_help=False)
    chosen = shared.add_argument_group("which warehouse", WAREHOUSE_CHOICE)
    chosen.add_argument(
        "--project-dir",
        metavar="DIR",
        help="the dbt project (default: $DBT_PROJECT_DIR, else the nearest directory up from "
        "here with a dbt_project.yml)",
    )
    chosen.add_argument(
        "--profiles-dir",
        metavar="DIR",
        help="where profiles.yml is (default: $DBT_PROFILES_DIR, else the project directory if "
        "it has one, else ~/.dbt)",
    )
    chosen.add_argument(
        "--profile", help="the profile (default: $DBT_PROFILE, else dbt_project.yml's)"
    )
    chosen.add_argument(
        "--target", help="the profile's target (default: $DBT_TARGET, else the profile's)"
    )
    chosen.add_argument(
        "--warehouse", metavar="DIR", help="the warehouse directory itself, without a profile"
    )
    return shared


def parser() -> argparse.ArgumentParser:
    raw = argparse.RawDescriptionHelpFormatter
    top = argparse.ArgumentParser(
        prog="streamsql",
        description="Show and control the warm Spark server of a dbt-streamsql warehouse.",
        epilog=ABOUT,
        formatter_class=raw,
    )
    top.add_argument("--version", action="version", version=versions())
    groups = top.add_subparsers(dest="group", metavar="COMMAND", required=True)
    server = groups.add_parser(
        "server",
        help="the warm Spark server of a warehouse: start, status, stop",
        description="Start, show or stop the warm Spark server of a warehouse.",
        epilog=ABOUT,
        formatter_class=raw,
    )
    actions = server.add_subparsers(dest="action", metavar="ACTION", required=True)
    shared = [warehouse_flags()]
    started = actions.add_parser(
        "start",
        parents=shared,
        help="start the server ahead of the first dbt command",
        description="Start the warehouse's server ahead of the first dbt command, or report the "
        "one that runs. The settings (master, server_side_parameters, idle_timeout, port, "
        "lock_timeout) are the profile target's; with --warehouse, those its last server was "
        "started with. A server with other settings is replaced, unless a dbt process uses it.",
        epilog="exit codes: 0 running (started now or already), 1 it could not start (why: on "
        "stderr), 2 usage error",
    )
    started.set_defaults(run=start, failed=EXIT_FAILED)
    shown = actions.add_parser(
        "status",
        parents=shared,
        help="show the server: pid, port, uptime, idle time, log",
        description="Show the warehouse's server: pid, port, uptime, idle time and when it "
        "stops, Spark UI, adapter version, log.",
        epilog="exit codes: 0 running, 3 not running (also when server.json names a process "
        "that is gone), 4 unknown: the profile does not say which warehouse (why: on stderr), "
        "2 usage error",
    )
    shown.add_argument("--json", action="store_true", help="print the status as JSON")
    shown.set_defaults(run=show_status, failed=EXIT_UNKNOWN)
    stopped = actions.add_parser(
        "stop",
        parents=shared,
        help="stop the server (the next dbt command starts a new one)",
        description="Stop the warehouse's server: SIGTERM, then SIGKILL after 60 s. A dbt "
        "command connected to it fails; the next one starts a new server.",
        epilog="exit codes: 0 stopped, 1 no server was running (a one-line message on stderr) "
        "or it could not be found from the profile, 2 usage error",
    )
    stopped.set_defaults(run=stop, failed=EXIT_FAILED)
    for action in (started, shown, stopped):
        action.set_defaults(action_parser=action)
    made = groups.add_parser(
        "init",
        help="dbt init, with a starter incremental view instead of dbt's example",
        description="Run `dbt init` (its arguments after `init`, e.g. a project name, "
        "--profiles-dir) and put a starter into the new project in place of dbt's example: a "
        "seed (seeds/pickups.csv) and an incremental view over it with LATENESS "
        "(models/pickups_per_hour.sql) and its tests, so that `dbt build` in it passes.",
        epilog="exit codes: 0 the project and its starter were made, 1 dbt init failed or made "
        "no new project (run where no dbt_project.yml is) or a starter file was there already, "
        "2 usage error",
    )
    made.add_argument("dbt_args", nargs=argparse.REMAINDER, help="dbt init's own arguments")
    made.set_defaults(run=init, failed=EXIT_FAILED, warehouse=None, action_parser=made)
    return top


def init(args: argparse.Namespace) -> int:
    """`streamsql init`: `dbt init`, then the starter in the project it made."""
    from dbt.cli.main import dbtRunner

    from dbt.adapters.streamsql.starter import StarterError, write_starter

    start = Path.cwd()

    def projects() -> set:  # dbt init makes its project in a new directory here
        return {p.parent for p in start.glob("*/dbt_project.yml")}

    before = projects()
    try:
        made = dbtRunner().invoke(["init", *args.dbt_args])
    finally:
        os.chdir(start)  # dbt init moves into the project it made
    if not made.success:
        return EXIT_FAILED
    new = sorted(projects() - before)
    project = new[0] if len(new) == 1 else start
    if project == start:
        print(
            "streamsql: dbt init made no new project (it ran inside an existing one), so no "
            "starter was added. Run `streamsql init <name>` where there is no dbt_project.yml.",
            file=sys.stderr,
        )
        return EXIT_FAILED
    try:
        written = write_starter(project)
    except StarterError as error:
        print(f"streamsql: {error}", file=sys.stderr)
        return EXIT_FAILED
    where = os.path.relpath(project, start)
    print(f"Added a starter incremental view to {where}: {', '.join(written)}.")
    print(f"Next: cd {where} && dbt build")
    return EXIT_OK


def main(argv: Optional[List[str]] = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    if given[:1] == ["init"] and not {"-h", "--help"} & set(given[1:]):
        # every argument after `init` is dbt init's, options included
        return init(argparse.Namespace(dbt_args=given[1:]))
    args = parser().parse_args(given)
    if (
        args.group != "init"
        and args.warehouse
        and (args.project_dir or args.profiles_dir or args.profile or args.target)
    ):
        args.action_parser.error(
            "--warehouse names the warehouse without a profile: leave out --project-dir, "
            "--profiles-dir, --profile and --target, or --warehouse"
        )
    try:
        return int(args.run(args))
    except DbtRuntimeError as error:
        print(f"streamsql: {str(error.msg).strip()}", file=sys.stderr)
        return int(args.failed)


if __name__ == "__main__":
    sys.exit(main())
