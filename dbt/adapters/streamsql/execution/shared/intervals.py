"""Intervals as configs and Delta table properties write them, and seconds as the step line says
them.

`interval_seconds` reads a Delta interval ("interval 7 days", "1 hour"): the retention configs
(config_kinds.py) and the inputs' retention properties (recovery/retention.py) are written so.
A retention config may also be `forever` (KEEP_FOREVER), as final_state_retention may
(event_time/lateness.py). `human` writes seconds back as words ("2 days").
"""

from __future__ import annotations

import re
from typing import Optional

# a retention config's word for keeping every row for ever (final_state_retention: every final
# group's state)
KEEP_FOREVER = "forever"

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


def human(seconds: float) -> str:
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds:g} seconds"
