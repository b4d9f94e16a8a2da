"""The repository passes `ruff check` and `ruff format --check` with the settings in
pyproject.toml (ruff is a dev extra): one code style, checked, not argued about."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["check", "format"])
def test_ruff_passes(command):
    result = subprocess.run(
        [sys.executable, "-m", "ruff", *command, str(ROOT)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, (
        f"ruff {' '.join(command)} failed (run `ruff format .` to fix formatting):\n"
        f"{result.stdout}{result.stderr}"
    )
