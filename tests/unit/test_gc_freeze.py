"""Loading the adapter freezes the objects alive then out of later garbage collections, unless
STREAMSQL_GC_FREEZE=0 (docs/configuration.md, "The Python process's garbage collector")."""

from __future__ import annotations

import os
import subprocess
import sys

PROBE = "import gc, dbt.adapters.streamsql; print(gc.get_freeze_count())"


def frozen_after_import(**env: str) -> int:
    environment = {k: v for k, v in os.environ.items() if k != "STREAMSQL_GC_FREEZE"}
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        env={**environment, **env},
        check=True,
    )
    return int(result.stdout.strip().splitlines()[-1])


def test_loading_the_adapter_freezes_the_modules_objects():
    # by default; dbt's, dbt-spark's, PySpark's and the adapter's modules: well over 50,000
    assert frozen_after_import() > 50_000


def test_the_environment_variable_turns_it_off():
    assert frozen_after_import(STREAMSQL_GC_FREEZE="0") == 0
