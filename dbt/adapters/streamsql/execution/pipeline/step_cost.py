"""What a model's steps cost, as its step records keep it, and what `auto` estimates from it.

A step's cost is its wall time from the start of its change phase (`StepRecord.started_at`, set
after the model's tables exist) to the Delta commit of its model's change (the commit's
timestamp): reading the inputs' changes, the state, computing and writing the model. The side
tables written after the model's commit are not in it; a stateful step's state append is one
INSERT of its changed groups.

A step cannot know its own commit's time, so each step records the cost of the one before it
(`costs_after`): a step that read its inputs in full (a recompute, a recovery, the first step
of a model without state) is a sample of what rebuilding the model costs, kept with the inputs'
bytes it read; any other but a first step is a sample of an incremental step. `estimates`
takes the median of the recent rebuild samples, each scaled to the inputs' bytes now (a rebuild
reads all of them), and the median of the recent incremental samples (their cost follows the
change, not the inputs): one slow step (a process's first, its JVM still compiling) does not
swing the choice, which for a model with state costs a rebuild of its state to undo. Both are
None until a sample exists.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass
from typing import Dict, List, Optional

from dbt.adapters.streamsql.execution.commit.record import StepRecord

INCREMENTAL = "incremental"
REBUILD = "rebuild"
FIRST = "first"  # the first step of a model with state: [seconds, bytes] (no rebuild's price)
KEPT_SAMPLES = 5  # samples kept of each kind: the median of these is the estimate
RECOMPUTED = "recompute"  # StepRecord.computed of a step that recomputed the model
# Test-only: "<incremental seconds>,<rebuild seconds>" replaces the estimates (and the inputs'
# size `auto` requires), so that a test on small tables can make `auto` take either side.
TEST_COSTS_ENV = "STREAMSQL_TEST_STEP_COSTS"


@dataclass(frozen=True)
class Estimates:
    """What the next step would cost each way, in seconds (None: no sample yet)."""

    incremental: Optional[float]
    rebuild: Optional[float]
    forced: bool = False  # a test's figures (TEST_COSTS_ENV)
    # What the first step of a model with state cost, scaled to the inputs now: about what
    # rebuilding its state costs (a recovery), which a recompute leaves to the step after it
    first: Optional[float] = None


def sampled(record: StepRecord) -> Optional[str]:
    """What the cost of the step of `record` is a sample of: REBUILD when it read every input
    in full and wrote what a rebuild writes, INCREMENTAL when it read the inputs' changes; None
    for a first step of a model with state, which also built its state tables."""
    if record.computed == RECOMPUTED or record.recovered:
        return REBUILD
    if record.step == 1:
        return None if record.state_tables else REBUILD
    return INCREMENTAL


def costs_after(previous: StepRecord, committed_at: Optional[float]) -> Dict[str, List[float]]:
    """The costs the next record keeps: `previous`'s, with `previous`'s own step added when
    its model commit's time (`committed_at`, seconds since the epoch) and its start are known.
    A flush reads no input and says nothing of either cost."""
    costs = {name: list(values) for name, values in previous.costs.items()}
    if (
        committed_at is None
        or previous.started_at is None
        or previous.step == 0
        or previous.flush
        or not previous.computed
    ):
        return costs
    seconds = round(max(0.0, committed_at - previous.started_at), 3)
    kind = sampled(previous)
    if previous.step == 1 and kind is None and previous.input_bytes is not None:
        costs[FIRST] = [seconds, float(previous.input_bytes)]
    if kind == REBUILD and previous.input_bytes is not None:
        # [seconds, bytes] pairs, flat, the newest last
        kept = costs.get(REBUILD, []) + [seconds, float(previous.input_bytes)]
        costs[REBUILD] = kept[-2 * KEPT_SAMPLES :]
    elif kind == INCREMENTAL:
        costs[INCREMENTAL] = (costs.get(INCREMENTAL, []) + [seconds])[-KEPT_SAMPLES:]
    return costs


def estimates(costs: Dict[str, List[float]], input_bytes: Optional[int]) -> Estimates:
    """The next step's cost each way, from the recorded samples (see the module docstring)."""
    forced = os.environ.get(TEST_COSTS_ENV)
    if forced:
        incremental_text, rebuild_text = forced.split(",")
        return Estimates(float(incremental_text), float(rebuild_text), forced=True)
    samples = costs.get(INCREMENTAL) or []
    incremental = statistics.median(samples) if samples else None
    rebuild = None
    kept = costs.get(REBUILD) or []
    pairs = list(zip(kept[0::2], kept[1::2]))
    if input_bytes is not None:
        scaled = [seconds * input_bytes / read for seconds, read in pairs if read > 0]
    else:
        scaled = []
    if scaled:
        rebuild = statistics.median(scaled)
    first = None
    seconds_read = costs.get(FIRST)
    if seconds_read and input_bytes is not None and seconds_read[1] > 0:
        first = seconds_read[0] * input_bytes / seconds_read[1]
    return Estimates(incremental, rebuild, first=first)
