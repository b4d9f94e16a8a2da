"""`streamsql server start|status|stop`: the warm Spark server of a dbt project's warehouse.

The warehouse and the server's settings come from the project's profile, as `dbt` reads them
(`--project-dir`, `--profiles-dir`, `--target`, with dbt's defaults and DBT_* variables), or,
for `status` and `stop`, from `--warehouse DIR` alone.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, List, Optional

from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.streamsql import warm_server


def profile_credentials(args: argparse.Namespace) -> Any:
    """The credentials of the project's profile target, rendered as dbt renders them."""
    from dbt.config.runtime import load_profile
    from dbt.flags import set_from_args
    from dbt_common.context import set_invocation_context

    project_dir = os.path.abspath(args.project_dir or os.getcwd())
    profiles_dir = args.profiles_dir or os.environ.get("DBT_PROFILES_DIR")
    if profiles_dir is None:
        local = os.path.join(project_dir, "profiles.yml")
        profiles_dir = project_dir if os.path.exists(local) else os.path.expanduser("~/.dbt")
    set_from_args(argparse.Namespace(project_dir=project_dir, profiles_dir=profiles_dir), None)
    set_invocation_context(os.environ)  # env_var() in the profile reads it
    profile = load_profile(project_dir, {}, target_override=args.target)
    credentials = profile.credentials
    if credentials.type != "streamsql":
        raise DbtRuntimeError(f"The profile's target is type {credentials.type}, not streamsql")
    return credentials


def server_paths(args: argparse.Namespace) -> warm_server.ServerPaths:
    if args.warehouse:
        return warm_server.ServerPaths(os.path.abspath(args.warehouse))
    credentials = profile_credentials(args)
    if credentials.method != "session":
        raise DbtRuntimeError(
            f"The profile's target uses method: {credentials.method}; only method: session has "
            "a warm server on this machine."
        )
    return warm_server.ServerPaths(credentials.resolved_warehouse_dir())


def start(args: argparse.Namespace) -> int:
    credentials = profile_credentials(args)
    if credentials.method != "session":
        raise DbtRuntimeError(
            f"The profile's target uses method: {credentials.method}; `streamsql server start` "
            "starts the warm server of method: session."
        )
    state = warm_server.ensure_server(
        credentials.session_settings(), credentials.idle_timeout, credentials.port
    )
    print(f"running: pid {state.pid}, port {state.port}, warehouse {state.warehouse_dir}")
    return 0


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
    return 0 if found["running"] else 3


def stop(args: argparse.Namespace) -> int:
    paths = server_paths(args)
    started = time.monotonic()
    stopped = warm_server.stop_server(paths)
    if stopped is None:
        print(f"no server running for {paths.warehouse_dir}")
    else:
        print(f"stopped pid {stopped.pid} in {time.monotonic() - started:.1f} s")
    return 0


def duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="streamsql", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="group", required=True)
    server = commands.add_parser("server", help="the warm Spark server of a warehouse")
    server.add_argument("action", choices=["start", "status", "stop"])
    server.add_argument("--project-dir", help="the dbt project (default: this directory)")
    server.add_argument("--profiles-dir", help="where profiles.yml is (dbt's default rules)")
    server.add_argument("--target", help="the profile target (default: the profile's)")
    server.add_argument("--warehouse", help="status/stop: the warehouse directory itself")
    server.add_argument("--json", action="store_true", help="status as JSON")
    args = parser.parse_args(argv)
    try:
        return {"start": start, "status": show_status, "stop": stop}[args.action](args)
    except DbtRuntimeError as error:
        print(f"streamsql: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
