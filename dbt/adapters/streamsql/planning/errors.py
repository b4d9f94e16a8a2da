"""Why planning stopped."""

from __future__ import annotations


class PlanningError(Exception):
    """The model cannot be planned at all (e.g. it reads a table that is not among its inputs)."""


class RecomputeRequired(Exception):
    """No fast path maintains this model; the message names the construct, e.g.

    "window function row_number() is not maintained incrementally". Internal to the planner: it
    turns into a recompute plan whose `reason` is "recompute: <message>".
    """
