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
from typing import List, Mapping, Optional, Sequence, Tuple

from dbt.adapters.streamsql.execution.shared.intervals import human, interval_seconds

LOG_RETENTION = "delta.logRetentionDuration"
FILE_RETENTION = "delta.deletedFileRetentionDuration"
# Delta's defaults, used when a table does not set the property.
DEFAULTS = {LOG_RETENTION: "interval 30 days", FILE_RETENTION: "interval 1 week"}
# However often a model runs, a retention shorter than this is worth a warning.
MIN_WINDOW = 24 * 3600.0


def shortest_retention(properties: Mapping[str, str]) -> Optional[Tuple[float, str]]:
    """(seconds, property) of the shorter of an input's two retentions."""
    found = []
    for name, default in DEFAULTS.items():
        seconds = interval_seconds(properties.get(name, default))
        if seconds is not None:
            found.append((seconds, name))
    return min(found) if found else None


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
