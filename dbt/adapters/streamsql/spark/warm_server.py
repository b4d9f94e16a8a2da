"""The warm server: one long-lived Spark Connect server per warehouse that `dbt` processes reuse.

A cron `dbt run` is one process per step. Starting a JVM with Delta and booting the Derby
metastore costs a new process 20-30 s before its first model; with `method: session` and
`keep_warm: true` (the default) the first `dbt` command on a warehouse starts this server instead,
detached from dbt, and every later command connects to it over Spark Connect in milliseconds.

The server is a Python process (`python -m dbt.adapters.streamsql.spark.warm_server serve ...`) that
starts the same embedded SparkSession `method: session` starts in-process (Delta, the warehouse's
Derby metastore, the profile's `server_side_parameters`, the warehouse lock) with Spark's Connect
plugin, listening on the loopback address only and requiring a token. Its JVM is its child and
exits with it, so killing the server's pid stops everything.

Files, all under the warehouse directory:
- `.streamsql-server/server.json`: the running server (pid, port, versions, settings), written
  once it accepts clients, removed when it stops.
- `.streamsql-server/token`: the token clients present, readable by the owner only (0600).
- `.streamsql-server/last_used`: touched by every dbt process while it is connected (every 30 s);
  the server stops itself after `idle_timeout` seconds without a touch and without a running job.
- `.streamsql-server/start.lock`: taken while a process checks, starts or replaces the server.
- `.streamsql-server/config.json`: the settings the last server was started with; it stays.
- `logs/spark-connect-server.log`: the server's output.

Between runs the server reads the tables whose Delta log changed, so that the next run finds
their new versions loaded (table_warmer.py).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Optional, Tuple

from dbt.adapters.events.logging import AdapterLogger
from dbt_common.exceptions import DbtRuntimeError
from filelock import FileLock, Timeout

from dbt.adapters.streamsql.__version__ import version as ADAPTER_VERSION
from dbt.adapters.streamsql.spark import writer_claim
from dbt.adapters.streamsql.spark.embedded_spark import SessionSettings, output_tail
from dbt.adapters.streamsql.spark.log_store import LOG_STORE_SETTING, share_metastore_state
from dbt.adapters.streamsql.spark.table_warmer import report_warming, server_warmer

logger = AdapterLogger("StreamSQL")

LOOPBACK = "127.0.0.1"
SERVER_MODULE = "dbt.adapters.streamsql.spark.warm_server"
FORMER_SERVER_MODULE = "dbt.adapters.streamsql.warm_server"  # before spark/: still a server
DEFAULT_IDLE_TIMEOUT = 1800
# A client touches the heartbeat this often while connected; a server replaced for other
# settings is "in use" if touched within twice that.
HEARTBEAT_SECONDS = 30
START_TIMEOUT = 600  # the first start on a machine resolves Delta's jars from Maven Central
CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"


@dataclass(frozen=True)
class ServerPaths:
    warehouse_dir: str

    @property
    def root(self) -> str:
        return os.path.join(self.warehouse_dir, ".streamsql-server")

    @property
    def state(self) -> str:
        return os.path.join(self.root, "server.json")

    @property
    def token(self) -> str:
        return os.path.join(self.root, "token")

    @property
    def heartbeat(self) -> str:
        return os.path.join(self.root, "last_used")

    @property
    def start_lock(self) -> str:
        return os.path.join(self.root, "start.lock")

    @property
    def config(self) -> str:
        return os.path.join(self.root, "config.json")

    @property
    def log(self) -> str:
        return os.path.join(self.warehouse_dir, "logs", "spark-connect-server.log")


@dataclass(frozen=True)
class ServerState:
    pid: int
    port: int
    warehouse_dir: str
    adapter_version: str
    fingerprint: str
    started_at: float
    idle_timeout: int
    ui_url: Optional[str] = None

    @classmethod
    def read(cls, paths: ServerPaths) -> Optional["ServerState"]:
        try:
            with open(paths.state) as handle:
                return cls(**json.load(handle))
        except (OSError, ValueError, TypeError):
            return None


def settings_fingerprint(settings: SessionSettings) -> str:
    """What a server must have been started with to serve these settings."""
    import pyspark

    described = {
        "master": settings.master,
        "server_side_parameters": dict(sorted(settings.server_side_parameters.items())),
        "adapter": ADAPTER_VERSION,
        "pyspark": pyspark.__version__,
        # as written, not resolved: a venv's python is a link to the one it was made from
        "python": os.path.normpath(os.path.abspath(sys.executable)),
    }
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:16]


def read_token(paths: ServerPaths) -> str:
    """The warehouse's server token, created (owner-only) on first use."""
    os.makedirs(paths.root, mode=0o700, exist_ok=True)
    try:
        descriptor = os.open(paths.token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        with open(paths.token) as handle:
            token = handle.read().strip()
        if token:
            return token
        os.unlink(paths.token)  # an empty file a crash left: make a new one
        return read_token(paths)
    with os.fdopen(descriptor, "w") as handle:
        token = secrets.token_urlsafe(32)
        handle.write(token)
    return token


def touch(paths: ServerPaths) -> None:
    try:
        with open(paths.heartbeat, "a"):
            pass
        os.utime(paths.heartbeat)
    except OSError:
        pass


def last_used(paths: ServerPaths, state: ServerState) -> float:
    try:
        return max(os.path.getmtime(paths.heartbeat), state.started_at)
    except OSError:
        return state.started_at


def pid_alive(pid: int) -> bool:
    """Whether process `pid` still runs. A process that has exited but is not yet reaped (a
    zombie) does not: a server this process started and then stopped is its own child, which
    stays a zombie until waited for (stop_server would otherwise wait its whole grace period)."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False  # our child, exited: reaped now
    except ChildProcessError:
        pass  # not our child
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            # pid (comm) state ...: the state follows the last ')'
            return handle.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def is_server_process(pid: int) -> bool:
    """Whether `pid` runs this module's server (where /proc tells; assumed elsewhere)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            command = handle.read()
        return SERVER_MODULE.encode() in command or FORMER_SERVER_MODULE.encode() in command
    except FileNotFoundError:
        return not os.path.isdir("/proc") and pid_alive(pid)
    except OSError:
        return pid_alive(pid)


def port_open(port: int, host: str = LOOPBACK) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(1)
        return probe.connect_ex((host, port)) == 0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


def log_tail(paths: ServerPaths, lines: int = 25) -> str:
    return output_tail(paths.log, lines) or f"(no log at {paths.log})"


def running_server(paths: ServerPaths) -> Optional[ServerState]:
    """The server of this warehouse if its process is alive and serves its port."""
    state = ServerState.read(paths)
    if state is None or not is_server_process(state.pid) or not port_open(state.port):
        return None
    return state


# -- the client side ---------------------------------------------------------------------------


def ensure_server(
    settings: SessionSettings, idle_timeout: int, port: Optional[int] = None
) -> ServerState:
    """The warm server for `settings`' warehouse: the running one, or one started now.

    A server that died or was killed is replaced; one started by another adapter version or with
    other settings is stopped and replaced, unless a dbt process used it in the last minute (then
    this fails, saying how to stop it).
    """
    from dbt.adapters.streamsql.spark.embedded_spark import check_java

    check_java()  # said here, not in the log of a server that could not start
    paths = ServerPaths(settings.warehouse_dir)
    os.makedirs(paths.root, mode=0o700, exist_ok=True)
    wanted = settings_fingerprint(settings)
    lock = FileLock(paths.start_lock, thread_local=False)
    try:
        lock.acquire(timeout=START_TIMEOUT)
    except Timeout:
        raise DbtRuntimeError(
            f"Another process has been starting the Spark server of {settings.warehouse_dir} "
            f"for {START_TIMEOUT} s. See {paths.log}, or stop it: streamsql server stop "
            f"--warehouse {settings.warehouse_dir}"
        ) from None
    try:
        state = ServerState.read(paths)
        if state is not None:
            problem = _replace_reason(paths, state, wanted)
            if problem is None:
                touch(paths)
                return state
            logger.info(f"{problem}: starting a new one")
            stop_server(paths)
        return _start(paths, settings, idle_timeout, port, wanted)
    finally:
        lock.release()


def _replace_reason(paths: ServerPaths, state: ServerState, wanted: str) -> Optional[str]:
    """Why the recorded server cannot serve this run (None: it can)."""
    where = f"The Spark server of {state.warehouse_dir} (pid {state.pid}, port {state.port})"
    if not is_server_process(state.pid):
        return f"{where} is gone"
    if not port_open(state.port):
        return f"{where} does not answer on its port"
    if state.fingerprint == wanted and state.adapter_version == ADAPTER_VERSION:
        return None
    why = (
        f"was started by dbt-streamsql {state.adapter_version}"
        if state.adapter_version != ADAPTER_VERSION
        else "runs with other settings (master or server_side_parameters)"
    )
    try:
        touched = os.path.getmtime(paths.heartbeat)
    except OSError:
        touched = 0.0
    if time.time() - touched < 2 * HEARTBEAT_SECONDS:  # a connected process touches it
        raise DbtRuntimeError(
            f"{where} {why}, and another dbt process is using it. Wait for that run to end, or "
            f"stop the server (streamsql server stop --warehouse {state.warehouse_dir}); the "
            "next dbt command starts one with this profile's settings."
        )
    return f"{where} {why}"


def _start(
    paths: ServerPaths,
    settings: SessionSettings,
    idle_timeout: int,
    port: Optional[int],
    fingerprint: str,
) -> ServerState:
    if port is not None and port_open(port):
        raise DbtRuntimeError(
            f"The profile's server port {port} is in use by another program. Set another "
            "`port`, or leave it out: the server then takes a free one."
        )
    read_token(paths)
    config = {
        "warehouse_dir": settings.warehouse_dir,
        "master": settings.master,
        "server_side_parameters": settings.server_side_parameters,
        "lock_timeout": settings.lock_timeout,
        "writer_claim": settings.writer_claim,
        "idle_timeout": idle_timeout,
        "port": port,
        "fingerprint": fingerprint,
    }
    with open(paths.config, "w") as handle:
        json.dump(config, handle)
    if os.path.exists(paths.state):
        os.unlink(paths.state)
    os.makedirs(os.path.dirname(paths.log), exist_ok=True)
    logger.info(
        f"Starting a warm Spark server for {settings.warehouse_dir} (once; later dbt commands "
        f"reuse it, and it stops after {idle_timeout} s unused). Log: {paths.log}"
    )
    started = time.monotonic()
    with open(paths.log, "ab") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", SERVER_MODULE, "serve", paths.config],
            stdout=output,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # not stopped by a Ctrl-C of the dbt that started it
            close_fds=True,
        )
    next_note = started + 15
    while True:
        state = ServerState.read(paths)
        if state is not None and state.pid == process.pid:
            took = time.monotonic() - started
            logger.info(f"Spark server ready on port {state.port} in {took:.0f} s")
            return state
        code = process.poll()
        if code == writer_claim.REFUSED_EXIT:  # another machine's driver writes the warehouse
            raise DbtRuntimeError(writer_claim.refusal_in(log_tail(paths), paths.log))
        if code is not None:
            raise DbtRuntimeError(
                f"The Spark server for {settings.warehouse_dir} exited (code {code}) before "
                f"accepting clients. Last lines of {paths.log}:\n{log_tail(paths)}"
            )
        if time.monotonic() - started > START_TIMEOUT:
            process.kill()
            raise DbtRuntimeError(
                f"The Spark server for {settings.warehouse_dir} did not start within "
                f"{START_TIMEOUT} s. Last lines of {paths.log}:\n{log_tail(paths)}"
            )
        if time.monotonic() > next_note:
            logger.info(f"Still starting the Spark server ({time.monotonic() - started:.0f} s)")
            next_note += 15
        time.sleep(0.2)


def last_started_with(paths: ServerPaths) -> Optional[Tuple[SessionSettings, int, Optional[int]]]:
    """The settings, idle timeout and pinned port the warehouse's last server was started with
    (config.json: each start writes it, a stop leaves it), at this path; None if none started."""
    try:
        with open(paths.config) as handle:
            config = json.load(handle)
        parameters = dict(config["server_side_parameters"])
        settings = SessionSettings(
            paths.warehouse_dir,
            config["master"],
            parameters,
            int(config["lock_timeout"]),
            bool(config.get("writer_claim", True)),
        )
        port = None if config["port"] is None else int(config["port"])
        return settings, int(config["idle_timeout"]), port
    except (OSError, ValueError, TypeError, KeyError):
        return None


def stop_server(paths: ServerPaths, grace: float = 60.0) -> Optional[ServerState]:
    """Stop the warehouse's server (SIGTERM, then SIGKILL after `grace` s); None if none ran."""
    state = ServerState.read(paths)
    if state is None:
        return None
    if is_server_process(state.pid):
        try:
            os.kill(state.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + grace
        while pid_alive(state.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if pid_alive(state.pid):
            try:
                os.kill(state.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    try:
        os.unlink(paths.state)
    except FileNotFoundError:
        pass
    return state


def status(paths: ServerPaths) -> Dict[str, Any]:
    state = ServerState.read(paths)
    if state is None:
        return {"running": False, "warehouse": paths.warehouse_dir}
    now = time.time()
    return {
        "running": is_server_process(state.pid) and port_open(state.port),
        "pid": state.pid,
        "port": state.port,
        "warehouse": state.warehouse_dir,
        "uptime_s": round(now - state.started_at),
        "idle_s": round(now - last_used(paths, state)),
        "idle_timeout_s": state.idle_timeout,
        "adapter_version": state.adapter_version,
        "spark_ui": state.ui_url,
        "log": paths.log,
    }


class Heartbeat:
    """Touches a server's heartbeat file while this process is connected to it."""

    _started: Dict[str, threading.Thread] = {}
    _guard = threading.Lock()

    @classmethod
    def keep(cls, paths: ServerPaths, idle_timeout: float) -> None:
        """Touch now and then often enough that a server stopping after `idle_timeout` s
        unused never stops under this process."""
        touch(paths)
        interval = max(0.5, min(HEARTBEAT_SECONDS, idle_timeout / 3))
        with cls._guard:
            if paths.heartbeat in cls._started:
                return

            def beat() -> None:
                while True:
                    time.sleep(interval)
                    touch(paths)

            thread = threading.Thread(target=beat, name="streamsql-heartbeat", daemon=True)
            thread.start()
            cls._started[paths.heartbeat] = thread


def connect_url(host: str, port: int, token: Optional[str], use_ssl: bool) -> str:
    url = f"sc://{host}:{port}/;user_agent=dbt-streamsql-{ADAPTER_VERSION}"
    if use_ssl:
        url += ";use_ssl=true"
    if token:
        url += f";token={token}"
    return url


# -- the server side ---------------------------------------------------------------------------


def server_parameters(config: Dict[str, Any], port: int, token: str) -> Dict[str, str]:
    """The profile's settings plus Spark Connect's: loopback only, this port, this token."""
    params = {str(k): str(v) for k, v in config["server_side_parameters"].items()}
    params.update(
        {
            "spark.plugins": CONNECT_PLUGIN,
            "spark.connect.grpc.binding.address": LOOPBACK,
            "spark.connect.grpc.binding.port": str(port),
            "spark.connect.authenticate.token": token,
            "spark.app.name": "dbt-streamsql warm server",
        }
    )
    if str(config["master"]).startswith("local"):  # nothing else needs to reach the driver
        params.setdefault("spark.driver.host", LOOPBACK)
        params.setdefault("spark.driver.bindAddress", LOOPBACK)
    return params


def serve(config_path: str) -> int:
    """The server's main: start Spark with Connect, publish server.json, stop when idle."""
    from dbt.adapters.streamsql.spark.embedded_spark import get_spark_session

    with open(config_path) as handle:
        config = json.load(handle)
    paths = ServerPaths(config["warehouse_dir"])
    port = int(config["port"] or free_port())
    token = read_token(paths)
    settings = SessionSettings(
        warehouse_dir=config["warehouse_dir"],
        master=config["master"],
        server_side_parameters=server_parameters(config, port, token),
        lock_timeout=int(config["lock_timeout"]),
        writer_claim=bool(config.get("writer_claim", True)),
    )
    stopping = threading.Event()
    for name in ("SIGTERM", "SIGINT", "SIGHUP"):  # SIGHUP: not on Windows
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), lambda *_: stopping.set())
    print(f"{time.strftime('%H:%M:%S')} starting (pid {os.getpid()}, port {port})", flush=True)
    try:
        spark = get_spark_session(settings, on_claim_lost=writer_claim.stops(stopping))
    except writer_claim.ClaimRefused as refused:
        print(writer_claim.REFUSED_MARK + refused.msg, flush=True)
        return writer_claim.REFUSED_EXIT
    # A client's failed statement is the client's to report (dbt does); the server would log
    # each one again, with the errors of executions a client released after its session ended.
    jvm = spark.sparkContext._jvm
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
        "org.apache.spark.sql.connect.utils.ErrorUtils", jvm.org.apache.logging.log4j.Level.OFF
    )
    if settings.uses_embedded_metastore:
        print(f"{time.strftime('%H:%M:%S')} {share_metastore_state(spark)}", flush=True)
    ui = (
        spark.sparkContext.uiWebUrl
        if settings.server_side_parameters.get("spark.ui.enabled", "false") == "true"
        else None
    )
    state = ServerState(
        pid=os.getpid(),
        port=port,
        warehouse_dir=config["warehouse_dir"],
        adapter_version=ADAPTER_VERSION,
        fingerprint=config["fingerprint"],
        started_at=time.time(),
        idle_timeout=int(config["idle_timeout"]),
        ui_url=ui,
    )
    touch(paths)
    with open(paths.state + ".tmp", "w") as handle:
        json.dump(asdict(state), handle)
    os.replace(paths.state + ".tmp", paths.state)
    store = spark.sparkContext.getConf().get(LOG_STORE_SETTING, "Delta's own")
    print(
        f"{time.strftime('%H:%M:%S')} accepting clients on {LOOPBACK}:{port} "
        f"(Delta log store for file: tables: {store})",
        flush=True,
    )
    warmer, said = server_warmer(spark, stopping)
    print(f"{time.strftime('%H:%M:%S')} {said}", flush=True)
    tracker = spark.sparkContext.statusTracker()
    jvm_process = getattr(spark.sparkContext._gateway, "proc", None)
    jvm_ended: Optional[int] = None
    try:
        while not stopping.wait(1):
            jvm_ended = jvm_process.poll() if jvm_process is not None else None
            if jvm_ended is not None:
                break
            idle = time.time() - last_used(paths, state)
            if idle >= state.idle_timeout and not tracker.getActiveJobsIds():
                print(f"{time.strftime('%H:%M:%S')} unused for {idle:.0f} s: stopping", flush=True)
                break
            if warmer is not None:
                report_warming(*warmer.warm())
    finally:
        # Asked to stop by a client that found the port closed, the JVM may have died since the
        # last look: stopping Spark on a dead JVM would hang until this process is killed.
        if jvm_ended is None and jvm_process is not None:
            try:
                jvm_ended = jvm_process.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                pass
        if jvm_ended is not None:  # killed (out of memory?) or crashed: nothing to serve
            print(
                f"{time.strftime('%H:%M:%S')} Spark's JVM ended (exit code {jvm_ended}; "
                "killed, out of memory, or crashed: see above, and any hs_err_pid*.log "
                "beside this log): stopping",
                flush=True,
            )
        if (ServerState.read(paths) or state).pid == state.pid:
            try:
                os.unlink(paths.state)
            except FileNotFoundError:
                pass
        if jvm_ended is None:
            writer_claim.release()
            spark.stop()
        print(f"{time.strftime('%H:%M:%S')} stopped", flush=True)
    return 0 if jvm_ended is None else 1


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {SERVER_MODULE}")
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("config")
    args = parser.parse_args(argv)
    return serve(args.config)


if __name__ == "__main__":
    sys.exit(main())
