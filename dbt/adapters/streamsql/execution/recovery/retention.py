"""The retention guard: warn before an input's history runs out of what the next step needs.

The next step reads each input's commits after the version this step read. Delta keeps a commit
in its log for `delta.logRetentionDuration` (30 days by default) and, once a later commit removes
a file, keeps the file for `delta.deletedFileRetentionDuration` (7 days by default) before VACUUM
may delete it; change-data files too. The next step's commits are all made after now, so it is
safe if it runs within the shorter of the two from now. When that window is short next to how
often the model runs (shorter than twice the time since its previous step, or than a day), the
step line says which input, which property, and by when the next step must run: after that date
the step may find the history gone and recompute the model from its inputs (lost_history.py).
"""

from __future__ import annotations

import datetime
import re
from typing import List, Mapping, Optional, Sequence, Tuple

LOG_RETENTION = "delta.logRetentionDuration"
FILE_RETENTION = "delta.deletedFileRetentionDuration"
# Delta's defaults, used when a table does not set the property.
DEFAULTS = {LOG_RETENTION: "interval 30 days", FILE_RETENTION: "interval 1 week"}
# However often a model runs, a retention shorter than this is worth a warning.
MIN_WINDOW = 24 * 3600.0

UNIT_SECONDS = {
    "microsecond": 1e-6,
    "millisecond": 1e-3,
    "second": 1.0,
    "minute": 60.0,
    "hour": 3600.0,
    "day": 86400.0,
    "week": 7 * 86400.0,
}
UNIT_ALIASES = {
    "us": "microsecond",
    "ms": "millisecond",
    "s": "second",
    "sec": "second",
    "min": "minute",
    "h": "hour",
    "d": "day",
}


def interval_seconds(text: Optional[str]) -> Optional[float]:
    """Seconds of a Delta interval property ("interval 7 days", "1 hour", "interval 2 h 30 m");
    None when it does not parse (months and years, whose length varies, do not)."""
    if text is None:
        return None
    words = str(text).strip().lower()
    words = re.sub(r"^interval\s+", "", words)
    parts = re.findall(r"(-?\d+(?:\.\d+)?)\s*([a-z]+)", words)
    if not parts or re.sub(r"(-?\d+(?:\.\d+)?)\s*([a-z]+)", "", words).strip():
        return None
    total = 0.0
    for number, unit in parts:
        unit = UNIT_ALIASES.get(unit, unit)
        if unit not in UNIT_SECONDS and unit.endswith("s"):
            unit = UNIT_ALIASES.get(unit[:-1], unit[:-1])
        if unit not in UNIT_SECONDS:
            return None
        total += float(number) * UNIT_SECONDS[unit]
    return total


def shortest_retention(properties: Mapping[str, str]) -> Optional[Tuple[float, str]]:
    """(seconds, property) of the shorter of an input's two retentions."""
    found = []
    for name, default in DEFAULTS.items():
        seconds = interval_seconds(properties.get(name, default))
        if seconds is not None:
            found.append((seconds, name))
    return min(found) if found else None


def human(seconds: float) -> str:
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds:g} seconds"


def retention_notes(
    inputs: Sequence[Tuple[str, Mapping[str, str]]], now: float, previous_at: Optional[float]
) -> List[str]:
    """The step line's warnings: inputs whose retained history may not reach the next step.

    `inputs`: (name, table properties) of each input; `now`: the step's start (epoch seconds);
    `previous_at`: when the model's previous step started, if known.
    """
    since = max(now - previous_at, 0.0) if previous_at is not None else 0.0
    window = max(2 * since, MIN_WINDOW)
    notes = []
    for name, properties in inputs:
        shortest = shortest_retention(properties)
        if shortest is None or shortest[0] >= window:
            continue
        seconds, prop = shortest
        deadline = datetime.datetime.fromtimestamp(now + seconds, datetime.timezone.utc)
        notes.append(
            f"retention: {name} keeps {human(seconds)} of history ({prop}): run the next step "
            f"before {deadline:%Y-%m-%d %H:%M} UTC, or it may have to recompute the model from "
            "its inputs"
        )
    return notes
