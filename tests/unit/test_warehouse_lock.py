"""The warehouse lock between processes: a real lock held by a real second process, no Spark.

The embedded Derby metastore serves one process at a time, so a process that finds the warehouse
locked waits up to `lock_timeout` seconds and then fails with a message naming the holder.
"""

import contextlib
import os
import subprocess
import sys
import time

import pytest
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.streamsql.spark.embedded_spark import acquire_warehouse_lock

# Takes the lock as the adapter does, says so, and keeps it until its stdin closes, then `linger`
# seconds more.
HOLDER = """
import sys, time
from dbt.adapters.streamsql.spark.embedded_spark import acquire_warehouse_lock
lock = acquire_warehouse_lock(sys.argv[1], 0)
print("held", flush=True)
sys.stdin.read()
time.sleep(float(sys.argv[2]))
"""


@contextlib.contextmanager
def process_holding_the_lock(warehouse_dir, linger=0.0):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(warehouse_dir), str(linger)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = holder.stdout.readline()
        assert line == "held\n", f"the holder did not take the lock: {holder.stderr.read()}"
        yield holder
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.wait(timeout=60)
        for pipe in (holder.stdin, holder.stdout, holder.stderr):
            pipe.close()


def test_a_second_process_times_out_with_a_message_naming_the_holder(tmp_path):
    with process_holding_the_lock(tmp_path) as holder:
        with pytest.raises(DbtRuntimeError) as at_once:
            acquire_warehouse_lock(str(tmp_path), 0)
        started = time.monotonic()
        with pytest.raises(DbtRuntimeError) as after_waiting:
            acquire_warehouse_lock(str(tmp_path), 1)
        waited = time.monotonic() - started

    assert f"(pid {holder.pid}) and stayed locked for 0 s." in str(at_once.value)
    assert 1 <= waited < 30
    assert str(after_waiting.value) == (
        f"Runtime Error\n  The warehouse {tmp_path} is in use by another process "
        f"(pid {holder.pid}) and stayed locked for 1 s. The embedded metastore serves one process "
        "at a time: wait for that run to finish, raise `lock_timeout` in the profile, or run "
        "concurrent jobs against a shared metastore (method: thrift, or hive.metastore.uris)."
    )
    # the same file as the fcntl lock before it, so older versions of the adapter exclude it too
    assert (tmp_path / ".streamsql.lock").exists()


def test_a_second_process_gets_the_warehouse_once_the_holder_exits(tmp_path):
    with process_holding_the_lock(tmp_path, linger=1.0) as holder:
        holder.stdin.close()  # the holder exits about 1 s from now, still holding the lock
        started = time.monotonic()
        lock = acquire_warehouse_lock(str(tmp_path), 60)
        waited = time.monotonic() - started
    try:
        assert lock.is_locked
        assert waited >= 0.5
        assert (tmp_path / ".streamsql.lock.holder").read_text() == f"pid {os.getpid()}"
    finally:
        lock.release()
