"""A step's errors: the one users see (`StepError`) and the test-only injected fault."""

from __future__ import annotations

FAULT_INJECTION_ENV = "STREAMSQL_TEST_FAIL_AT"
# Test-only: `<point>:<file>` makes a step stop at that point, write its pid to the file and
# wait there, for a test to kill the process at that exact moment (kill -9).
PAUSE_ENV = "STREAMSQL_TEST_PAUSE_AT"


class StepError(Exception):
    """A step cannot run; the message names the model and says what to do."""


class InjectedFault(Exception):
    """Raised at a named point of a step when the test-only fault switch asks for it."""


class DroppedStateReached(Exception):
    """A late change reached final groups whose state a compaction dropped: the step is taken
    again as a recompute (lost_history.py), which needs no state. The message is the reason."""
