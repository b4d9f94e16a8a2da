"""What a long step is doing, on the console while it runs.

A step of a large change can take minutes, and dbt prints nothing between a model's start line
and its result line. While a step runs, `StepProgress` logs a line every `PROGRESS_EVERY_S`
seconds with how long it has run and what it is doing now: the role of the statement it sent
last (trace.py), the same words `target/run/` shows before that statement. A step shorter than
the interval logs nothing. STREAMSQL_PROGRESS_SECONDS in the environment sets the interval.
"""

from __future__ import annotations

import os
import threading
import time
from types import TracebackType
from typing import Callable, Mapping, Optional, Type

from dbt.adapters.streamsql.execution.engine.trace import StatementTrace

PROGRESS_EVERY_S = 10.0
# A role longer than this (a batch of settings and views freed) is cut, to fit a console line.
ROLE_CHARACTERS = 120
PROGRESS_ENV = "STREAMSQL_PROGRESS_SECONDS"


def progress_every(environ: Mapping[str, str]) -> float:
    """The interval of progress lines: PROGRESS_ENV's seconds, when a positive number."""
    try:
        every = float(environ.get(PROGRESS_ENV, ""))
    except ValueError:
        return PROGRESS_EVERY_S
    return every if every > 0 else PROGRESS_EVERY_S


def progress_line(model: str, elapsed_s: float, trace: StatementTrace) -> str:
    """The line for a step of `model` running `elapsed_s` seconds, at the trace's last statement."""
    entries = list(trace.entries)  # a copy: the step's thread appends meanwhile
    if not entries:
        return f"{model}: step running for {elapsed_s:.0f} s, reading what changed"
    role = entries[-1][0]
    if len(role) > ROLE_CHARACTERS:
        role = role[: ROLE_CHARACTERS - 3].rstrip() + "..."
    return f"{model}: step running for {elapsed_s:.0f} s, statement {len(entries)}: {role}"


class StepProgress:
    """A context that logs `progress_line` every `every` seconds until the block ends."""

    def __init__(
        self,
        model: str,
        trace: StatementTrace,
        log: Callable[[str], None],
        every: Optional[float] = None,
    ) -> None:
        self.model, self.trace, self.log = model, trace, log
        self.every = progress_every(os.environ) if every is None else every
        self._done = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._started = 0.0

    def __enter__(self) -> "StepProgress":
        self._started = time.monotonic()
        self._thread = threading.Thread(
            target=self._report, name=f"streamsql-progress-{self.model}", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: Optional[Type[BaseException]],
        error: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()

    def _report(self) -> None:
        while not self._done.wait(self.every):
            try:
                self.log(progress_line(self.model, time.monotonic() - self._started, self.trace))
            except Exception:  # a line not logged must not touch the step
                pass
