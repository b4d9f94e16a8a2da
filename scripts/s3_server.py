#!/usr/bin/env python
"""An S3-compatible server on loopback, for trying (and testing) the warehouse on an object store.

    python scripts/s3_server.py start [--dir DIR] [--port 9000] [--bucket lake]
    python scripts/s3_server.py status [--dir DIR]
    python scripts/s3_server.py stop [--dir DIR]
    python scripts/s3_server.py run [--port 9000] [--bucket lake]     # in the foreground

The server is moto's (`pip install "moto[server]"`, a test dependency of dbt-streamsql): it
speaks the S3 HTTP API (buckets, GET, PUT, HEAD, DELETE, LIST, multipart uploads) on
127.0.0.1 and keeps every object in its process's memory, so stopping it drops every bucket: a
place to try things, not to keep tables. `start` runs it in the background (its pid, port and
request log in DIR, default `./s3_server`), creates the bucket, and prints the profile settings
that point the embedded Spark at it (S3A's endpoint, path-style access and the credentials the
server accepts: any). Every request the server answers is a line of its log
(`DIR/s3_server.log`), which the cost measurements count.

The tests (`tests/functional/test_object_store.py`) start one `S3Server` for all their cases.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Dict, Optional

LOOPBACK = "127.0.0.1"
# moto accepts any key pair; these are what the printed profile names.
ACCESS_KEY = "streamsql"
SECRET_KEY = "streamsql-secret"
REGION = "us-east-1"
STATE_FILE = "s3_server.json"
LOG_FILE = "s3_server.log"


class S3ServerError(RuntimeError):
    """The server did not start; the message carries the tail of its log."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


def answers(endpoint: str) -> bool:
    try:
        with urllib.request.urlopen(endpoint + "/", timeout=2) as response:
            return response.status == 200
    except (OSError, urllib.error.URLError):
        return False


def s3a_settings(endpoint: str) -> Dict[str, str]:
    """The Spark settings (a profile's `server_side_parameters`) that reach `endpoint` by S3A."""
    return {
        "spark.hadoop.fs.s3a.endpoint": endpoint,
        "spark.hadoop.fs.s3a.endpoint.region": REGION,
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.access.key": ACCESS_KEY,
        "spark.hadoop.fs.s3a.secret.key": SECRET_KEY,
    }


class S3Server:
    """moto's S3 server on loopback, in a process group of its own, its requests in `log`."""

    def __init__(self, root: Path, port: Optional[int] = None) -> None:
        self.root = Path(root)
        self.port = port or free_port()
        self.process: Optional[subprocess.Popen] = None

    @property
    def endpoint(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def log(self) -> Path:
        return self.root / LOG_FILE

    def start(self, timeout: float = 60) -> "S3Server":
        self.root.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "moto.server", "-H", LOOPBACK, "-p", str(self.port)]
        with open(self.log, "ab") as output:
            self.process = subprocess.Popen(
                command,
                stdout=output,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=str(self.root),
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while not answers(self.endpoint):
            code = self.process.poll()
            if code is not None or time.monotonic() > deadline:
                self.stop()
                said = (
                    "exited (code %s)" % code if code is not None else f"no answer in {timeout} s"
                )
                raise S3ServerError(
                    f"The S3 server (moto, {' '.join(command)}) {said}. Is moto[server] "
                    f"installed? The end of {self.log}:\n{tail(self.log)}"
                )
            time.sleep(0.2)
        return self

    def create_bucket(self, bucket: str) -> None:
        request = urllib.request.Request(f"{self.endpoint}/{bucket}", method="PUT")
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()

    def client(self) -> Any:
        """A boto3 S3 client of this server (boto3 comes with moto)."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
        )

    def requests_logged(self) -> int:
        """How many requests the server has answered so far (its log's request lines)."""
        try:
            return sum(
                'HTTP/1.1"' in line for line in self.log.read_text(errors="replace").split("\n")
            )
        except OSError:
            return 0

    def stop(self, grace: float = 10) -> None:
        if self.process is None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if self.process.poll() is not None:
                break
            try:
                os.killpg(self.process.pid, sig)
            except (ProcessLookupError, PermissionError):
                break
            try:
                self.process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                continue


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"


def profile_hint(endpoint: str, bucket: str) -> str:
    settings = s3a_settings(endpoint)
    lines = [
        "A profile target with its tables on this server (the metastore stays on local disk):",
        "    type: streamsql",
        "    method: session",
        "    schema: demo",
        f"    warehouse_dir: s3a://{bucket}/warehouse",
        "    server_side_parameters:",
        *(f"      {key}: {json.dumps(value)}" for key, value in settings.items()),
    ]
    return "\n".join(lines)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_state(root: Path) -> Optional[Dict[str, object]]:
    try:
        state = json.loads((root / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return state if pid_alive(int(state["pid"])) else None


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("start", "status", "stop", "run"))
    parser.add_argument("--dir", default="s3_server", help="its pid file and request log")
    parser.add_argument("--port", type=int, default=None, help="default: a free port")
    parser.add_argument("--bucket", default="lake", help="the bucket to create")
    args = parser.parse_args(argv)
    root = Path(args.dir).resolve()

    if args.command in ("status", "stop"):
        state = read_state(root)
        if state is None:
            print(f"no S3 server runs from {root}")
            return 0 if args.command == "stop" else 1
        if args.command == "status":
            print(json.dumps(state, indent=1))
            return 0
        os.killpg(int(state["pid"]), signal.SIGTERM)
        for _ in range(50):
            if not pid_alive(int(state["pid"])):
                break
            time.sleep(0.2)
        (root / STATE_FILE).unlink(missing_ok=True)
        print(f"stopped the S3 server on {state['endpoint']} (its objects are gone)")
        return 0

    if args.command == "start" and read_state(root) is not None:
        print(f"an S3 server runs from {root} already: {json.dumps(read_state(root))}")
        return 1
    server = S3Server(root, args.port).start()
    server.create_bucket(args.bucket)
    if args.command == "start":
        state = {"pid": server.process.pid, "endpoint": server.endpoint, "bucket": args.bucket}
        (root / STATE_FILE).write_text(json.dumps(state))
        print(f"S3 server (moto) on {server.endpoint}, bucket {args.bucket}; log {server.log}")
        print(profile_hint(server.endpoint, args.bucket))
        print(f"Stop it with: python scripts/s3_server.py stop --dir {root}")
        return 0
    print(f"S3 server (moto) on {server.endpoint}, bucket {args.bucket}; Ctrl-C stops it")
    print(profile_hint(server.endpoint, args.bucket))
    try:
        server.process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
