"""One writing machine per warehouse on S3: the claim a Spark driver keeps beside the tables.

Delta's log store for `s3a://` (S3SingleDriverLogStore) orders commits inside one driver only;
two drivers committing to one table at once can overwrite each other's commit file, a lost write
that no error reports. One machine's dbt processes share one driver (the warm server) or take
turns (the warehouse lock in `local_dir`), but neither can see another machine, or another
`local_dir` on this one. So a driver the adapter starts on a warehouse on `s3a://` claims it:

- it writes `<warehouse>/_streamsql_writer.json` (who it is: the host, `local_dir`, pid, and a
  token of its own), reads it back after SETTLE_SECONDS, and renews it every RENEW_SECONDS while
  it runs; a clean stop (the server's, the dbt process's end) deletes it;
- a driver that finds a claim of another host or `local_dir` renewed within STALE_SECONDS
  refuses to start, naming the holder and when the claim goes stale; an older claim (its holder
  crashed or lost the network) is taken over, with a line saying whose it was;
- a driver whose renewal finds another's claim stops writing: the warm server stops, an embedded
  session is stopped, as if killed, which every step survives (docs/steps.md).

The claim is a fence for the ordinary mistake (a second machine, a second cron host, two
`local_dir`s), not a lock: S3 has no compare-and-swap that Hadoop 3.5's S3A offers, so two
drivers starting within the same fraction of a second may both pass (the read-back after
SETTLE_SECONDS narrows that to the time between one's read and its write). Times compare the
claim's `renewed_at` with this machine's clock: machines must keep their clocks within a fraction
of STALE_SECONDS (NTP does). A log store that orders commits across drivers (S3 with DynamoDB) or
another scheme's (ABFS, GCS: theirs are safe with several writers) needs no claim, and none is
made.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping, Optional

from dbt.adapters.events.logging import AdapterLogger
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.streamsql import object_store

logger = AdapterLogger("StreamSQL")

CLAIM_FILE = "_streamsql_writer.json"
RENEW_SECONDS = 30.0
# A claim not renewed for this long is its holder's no more: ten renewals missed.
STALE_SECONDS = 300.0
SETTLE_SECONDS = 1.0
SINGLE_DRIVER_STORE = "S3SingleDriverLogStore"
# Where Delta takes the log store of s3a:// tables from (the scheme's setting first).
LOG_STORE_KEYS = (
    "spark.delta.logStore.s3a.impl",
    "spark.delta.logStore.s3.impl",
    "spark.delta.logStore.class",
)


# A warm server refused the claim exits with this code, its reason on a log line after the
# mark, for the client that started it to raise as its own error.
REFUSED_EXIT = 3
REFUSED_MARK = "writer claim refused: "


class ClaimRefused(DbtRuntimeError):
    """Another driver holds the warehouse's claim."""


@dataclass(frozen=True)
class Claim:
    host: str
    local_dir: str
    pid: int
    token: str
    claimed_at: float
    renewed_at: float

    @property
    def writer(self) -> str:
        return f"{self.host}:{self.local_dir}"

    def holder(self, now: float) -> str:
        return (
            f"the driver of host {self.host!r}, local_dir {self.local_dir} (pid {self.pid}), "
            f"renewed {max(0.0, now - self.renewed_at):.0f} s ago"
        )

    @classmethod
    def parse(cls, text: str) -> Optional["Claim"]:
        try:
            found = json.loads(text)
            return cls(
                host=str(found["host"]),
                local_dir=str(found["local_dir"]),
                pid=int(found["pid"]),
                token=str(found["token"]),
                claimed_at=float(found["claimed_at"]),
                renewed_at=float(found["renewed_at"]),
            )
        except (ValueError, TypeError, KeyError):
            return None  # not a claim this adapter wrote: taken over like a stale one


def claim_location(conf: Mapping[str, str]) -> Optional[str]:
    """Where a session with these settings keeps its claim; None if it needs none: tables
    not on s3a://, or a log store other than Delta's single-driver one."""
    tables = conf.get(object_store.WAREHOUSE_SETTING, "")
    if object_store.uri_scheme(tables) != "s3a":
        return None
    for key in LOG_STORE_KEYS:
        if key in conf:
            if not conf[key].endswith(SINGLE_DRIVER_STORE):
                return None
            break
    return tables.rstrip("/") + "/" + CLAIM_FILE


def verdict(found: Optional[Claim], writer: str, now: float) -> Optional[str]:
    """Why a driver that is `writer` may not claim a warehouse whose claim is `found`; None if
    it may (no claim, its own writer's, or a stale one)."""
    if found is None or found.writer == writer or now - found.renewed_at > STALE_SECONDS:
        return None
    goes_stale = STALE_SECONDS - (now - found.renewed_at)
    return f"{found.holder(now)}; unrenewed, it goes stale in {goes_stale:.0f} s"


class HadoopFile:
    """One small file through the JVM's Hadoop FileSystem (S3A for s3a://)."""

    def __init__(self, session: Any, location: str) -> None:
        self.path = session.sparkContext._jvm.org.apache.hadoop.fs.Path(location)
        self.fs = self.path.getFileSystem(session.sparkContext._jsc.hadoopConfiguration())

    def read(self) -> Optional[str]:
        if not self.fs.exists(self.path):
            return None
        stream = self.fs.open(self.path)
        try:
            return bytes(stream.readAllBytes()).decode("utf-8", errors="replace")
        finally:
            stream.close()

    def write(self, text: str) -> None:
        out = self.fs.create(self.path, True)
        try:
            out.write(bytearray(text.encode("utf-8")))
        finally:
            out.close()

    def delete(self) -> None:
        self.fs.delete(self.path, False)


class WriterClaim:
    """This driver's claim on its warehouse, renewed by a thread of its own."""

    def __init__(
        self, file: Any, location: str, local_dir: str, clock: Callable[[], float] = time.time
    ) -> None:
        self.file, self.location, self.clock = file, location, clock
        now = clock()
        self.mine = Claim(
            host=socket.gethostname(),
            local_dir=os.path.abspath(local_dir),
            pid=os.getpid(),
            token=uuid.uuid4().hex,
            claimed_at=now,
            renewed_at=now,
        )
        self.lost: Optional[str] = None  # why another driver holds the claim now
        self.took_over: Optional[str] = None  # whose stale claim this one replaced
        self.stopped = threading.Event()

    def found(self) -> Optional[Claim]:
        text = self.file.read()
        return None if text is None else Claim.parse(text)

    def acquire(self, settle: float = SETTLE_SECONDS) -> None:
        found = self.found()
        refused = verdict(found, self.mine.writer, self.clock())
        if refused is not None:
            raise self.refusal(refused)
        if found is not None and found.writer != self.mine.writer:
            self.took_over = (
                f"Took over the warehouse's writer claim ({self.location}) from "
                f"{found.holder(self.clock())}: stale, its holder is gone"
            )
        self.write()
        time.sleep(settle)
        after = self.found()
        if after is None or after.token != self.mine.token:
            raise self.refusal(
                (after.holder(self.clock()) if after else "a driver that deleted it")
                + ", which claimed it at the same moment as this one"
            )

    def refusal(self, holder: str) -> ClaimRefused:
        return ClaimRefused(
            f"The warehouse {self.location.rsplit('/', 1)[0]} is being written by another Spark "
            f"driver: {holder}. Delta's S3 log store keeps one driver's commits safe, not two "
            "drivers' at once (a lost commit, which no error reports). Run dbt on that machine "
            "(every run there shares its driver), or stop that driver there (`streamsql server "
            "stop`) and run again; a driver that crashed leaves a claim that goes stale "
            f"{STALE_SECONDS:.0f} s after its last renewal. If runs take turns by design (one "
            "scheduler starting each on a new host), set writer_claim: false in the profile; "
            "several machines writing at once need a log store that orders their commits "
            "(docs/deployment.md, 'Writers')."
        )

    def write(self) -> None:
        self.mine = Claim(**{**asdict(self.mine), "renewed_at": self.clock()})
        self.file.write(json.dumps(asdict(self.mine)))

    def renew(self) -> bool:
        """Renew the claim; False (and `lost` says why) if another driver holds it now."""
        found = self.found()
        if found is not None and found.token != self.mine.token:
            self.lost = (
                f"The warehouse's writer claim ({self.location}) is now held by "
                f"{found.holder(self.clock())}: this driver stops writing"
            )
            return False
        self.write()
        return True

    def keep(self, on_lost: Callable[[str], None], every: float = RENEW_SECONDS) -> None:
        """Renew every `every` s on a daemon thread; call `on_lost` once if the claim is lost."""

        def renewing() -> None:
            while not self.stopped.wait(every):
                try:
                    if not self.renew():
                        on_lost(self.lost or "")
                        return
                except Exception as error:  # the store unreachable: this driver's writes too
                    logger.warning(f"Could not renew the writer claim {self.location}: {error}")

        threading.Thread(target=renewing, name="streamsql-writer-claim", daemon=True).start()

    def release(self) -> None:
        """Delete the claim if it is still this driver's (a clean stop)."""
        self.stopped.set()
        try:
            found = self.found()
            if found is not None and found.token == self.mine.token:
                self.file.delete()
        except Exception as error:  # stopping anyway: the claim goes stale by itself
            logger.debug(f"Could not release the writer claim {self.location}: {error}")


_claim: Optional[WriterClaim] = None


def claim_warehouse(
    session: Any, conf: Mapping[str, str], local_dir: str, on_lost: Callable[[str], None]
) -> Optional[WriterClaim]:
    """Claim the warehouse of a session just started, if it needs a claim (`claim_location`):
    raises ClaimRefused when another driver holds it. Released at this process's end."""
    global _claim
    location = claim_location(conf)
    if location is None:
        return None
    try:
        claim = WriterClaim(HadoopFile(session, location), location, local_dir)
        claim.acquire()
    except ClaimRefused:
        raise
    except Exception as error:  # the store unreachable, the bucket missing, no credentials
        raise DbtRuntimeError(
            f"Could not claim the warehouse for this driver at {claim_location(conf)}: "
            f"{first_line(error)}. Check that the bucket exists "
            "and the profile's S3 settings and credentials reach it (docs/deployment.md); "
            "writer_claim: false skips the claim."
        ) from error
    if claim.took_over:
        logger.warning(claim.took_over)
    else:
        logger.info(f"Claimed the warehouse for this driver ({location})")
    claim.keep(on_lost)
    atexit.register(claim.release)
    _claim = claim
    return claim


def first_line(error: BaseException) -> str:
    said = str(error).strip().splitlines()
    return said[0][:300] if said else type(error).__name__


def current() -> Optional[WriterClaim]:
    """This process's claim, if its driver made one."""
    return _claim


def release() -> None:
    """Release this process's claim, if it made one (before its session stops)."""
    if _claim is not None:
        _claim.release()


def stops(stopping: threading.Event) -> Callable[[str], None]:
    """A warm server's `on_lost`: say why on its log, and stop it."""

    def lost(said: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {said}: stopping", flush=True)
        stopping.set()

    return lost


def refusal_in(log: str, log_path: str) -> str:
    """The refusal a warm server wrote to its log before exiting with REFUSED_EXIT."""
    said = [line.split(REFUSED_MARK, 1)[1] for line in log.splitlines() if REFUSED_MARK in line]
    return f"{said[-1] if said else log} (the server's log: {log_path})"
