"""Run dbt in a separate process against a small project written to a temporary directory.

In-process dbt runs share one JVM and one warehouse; tests about what happens across processes
(persistence, locking, start-up failures) need real separate `dbt` processes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Mapping, Optional

import yaml

from dbt.adapters.streamsql.execution.shared.errors import PAUSE_ENV
from tests.conftest import SMALL_DATA_SETTINGS

DBT = str(Path(sys.executable).with_name("dbt"))


@dataclass
class DbtProject:
    root: Path
    target: Dict[str, object]

    @classmethod
    def create(
        cls,
        root: Path,
        models: Mapping[str, str],
        target: Optional[Dict[str, object]] = None,
        project_extra: Optional[Dict[str, object]] = None,
    ) -> "DbtProject":
        root.mkdir(parents=True, exist_ok=True)
        project = {
            "name": "proc_test",
            "version": "1.0",
            "config-version": 2,
            "profile": "proc_test",
        }
        project.update(project_extra or {})
        (root / "dbt_project.yml").write_text(yaml.safe_dump(project))
        (root / "models").mkdir(exist_ok=True)
        for name, text in models.items():
            (root / "models" / name).write_text(text)
        target = dict(target or {"type": "streamsql", "schema": "proc_test"})
        if target.get("method", "session") == "session":
            # Spark in the dbt process, as these tests mean; the warm server's tests say so.
            target.setdefault("keep_warm", False)
            # tiny data, as in every in-process run of the suite (tests/conftest.py)
            target.setdefault("server_side_parameters", dict(SMALL_DATA_SETTINGS))
        created = cls(root, target)
        created.write_profile()
        return created

    def write_profile(self) -> None:
        profiles = {"proc_test": {"target": "t", "outputs": {"t": self.target}}}
        (self.root / "profiles.yml").write_text(yaml.safe_dump(profiles))

    def dbt(
        self, *args: str, env: Optional[Dict[str, str]] = None, timeout: int = 600
    ) -> subprocess.CompletedProcess:
        run_env = dict(os.environ)
        run_env.update(env or {})
        run_env.setdefault("DBT_SEND_ANONYMOUS_USAGE_STATS", "false")
        return subprocess.run(
            [DBT, *args, "--project-dir", str(self.root), "--profiles-dir", str(self.root)],
            cwd=self.root,
            env=run_env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def dbt_held_at(self, point: str, marker: Path, *args: str) -> subprocess.Popen:
        """`dbt_popen(*args)`, returned once its step waits at the checkpoint `point` (the
        test-only STREAMSQL_TEST_PAUSE_AT, which writes `marker`), to be killed there."""
        os.environ[PAUSE_ENV] = f"{point}:{marker}"
        try:
            process = self.dbt_popen(*args)
        finally:
            del os.environ[PAUSE_ENV]
        deadline = time.monotonic() + 600
        while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        if not marker.exists():
            process.kill()
            said = process.communicate(timeout=60)[0]
            raise AssertionError(f"dbt {' '.join(args)} never reached {point}:\n{said[-3000:]}")
        marker.unlink()
        return process

    def dbt_popen(self, *args: str) -> subprocess.Popen:
        """dbt in a process of its own, in a process group of its own (its JVM included), so
        that `os.killpg(process.pid, ...)` stops all of it."""
        run_env = dict(os.environ, DBT_SEND_ANONYMOUS_USAGE_STATS="false")
        return subprocess.Popen(
            [DBT, *args, "--project-dir", str(self.root), "--profiles-dir", str(self.root)],
            cwd=self.root,
            env=run_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
