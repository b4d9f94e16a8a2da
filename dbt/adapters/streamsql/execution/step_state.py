"""One step in flight: the record it builds on, the record it writes, and what it learned.

`StepChoice` is the plan the step runs and why, as pipeline/plan_choice.decide chose it.

`StepContext` (context.py) is where a step runs: the model, the SQL session, the views and
bindings, the Delta log. `StepState` is what one step knows and decides as it goes: the step it
follows (`previous`), the record it will commit (`record`), what it reports (`result`), what it
writes besides the model (`writes`), and the facts one phase learns and a later one needs. The
step (pipeline/step.py) creates it once it knows where the model stands and passes it to every
phase after; each field below says which phase sets it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from dbt.adapters.streamsql.execution.commit.record import StepRecord
from dbt.adapters.streamsql.execution.shared.result import StepResult
from dbt.adapters.streamsql.execution.shared.writes import StepWrites
from dbt.adapters.streamsql.planning.plan import StepPlan


@dataclass
class StepState:
    """What one step of one model knows so far."""

    # The model's compiled query: a recovery (recovery/lost_history.py) recomputes it.
    compiled_sql: str
    # The last completed step's record: where this step starts from (step 0: none yet).
    previous: StepRecord
    # This step's record, committed with the model's change; the phases fill it in (the
    # waterlines: event_time/; why it recomputed: recovery/).
    record: StepRecord
    # What the step reports (the step line, run_results.json).
    result: StepResult
    # The side-table and state writes the phases describe, for the commit (commit/protocol.py).
    writes: StepWrites = field(default_factory=StepWrites)
    # The model's columns next to its query's (recovery/schema.check); None on a first step.
    schema: Optional[Any] = None
    # Set when the step is taken again because reading an input's history failed.
    recover_reason: Optional[str] = None
    # A first step reads every input in full: no key bounds (they would skip nothing), and
    # delta rules in the form that reads older versions (those are empty). Set when the
    # inputs' changes are read (pipeline/step.py), and by a recovery (it reads in full).
    first_step: bool = False
    # Whether the changes read so far in this step (inputs, then stages) are inserts only.
    inserts_only: bool = True
    # What the commit measures over the model's netted change (commit/bounds.change_measures),
    # known once the inputs' changes are read: the pass that computes the change measures them
    # too. Empty: the commit queries them (commit/protocol.py).
    change_measures: Dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class StepChoice:
    """The plan one step runs, and why: what pipeline/plan_choice.decide returns."""

    plan: StepPlan  # what the step computes its change with
    # The model's own plan (plan_choice.ModelPlan.plan), which its tables follow.
    model_plan: StepPlan
    # Why the step runs a recompute instead of the model's plan, as a clause ("its inputs
    # changed by ..."); "" when it runs the model's plan.
    because: str = ""
    # A recovery's reasons (recovery/lost_history.py): the step reads every input in full.
    recovered: Tuple[str, ...] = ()
    # What `auto` weighs, in bytes: the inputs' change and the inputs' size (None: not known).
    change_bytes: Optional[int] = None
    input_bytes: Optional[int] = None
    # The costs the step's record keeps (pipeline/step_cost.costs_after), and what they make
    # of the step each way, in seconds (None: no sample yet).
    costs: Dict[str, List[float]] = field(default_factory=dict)
    incremental_seconds: Optional[float] = None
    rebuild_seconds: Optional[float] = None
    # The recompute writes the query's rows as the whole table instead of their difference
    # with it (plan_choice.writes_whole).
    whole: bool = False

    @property
    def note(self) -> str:
        """The step line's note on the choice; "" when the step runs the model's plan."""
        if self.recovered:
            return (
                f"recovered ({self.because}): recomputed the model from its inputs and applied "
                "the difference"
            )
        if not self.because:
            return ""
        return f"recomputed this step: {self.because}" + (
            "; wrote the model whole" if self.whole else ""
        )
