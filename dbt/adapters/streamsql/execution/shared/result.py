"""What one step did: the step log line and the numbers of run_results.json's adapter response."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

# What the step line and adapter_response say of a model written whole (commit/protocol.py).
WRITE_REWRITE = "rewrite"
# ... and of a recompute's rows written as the whole table (pipeline/plan_choice.writes_whole).
WRITE_WHOLE = "whole"


@dataclass
class StepResult:
    """What one step did: the step log line and run_results.json's adapter response."""

    model: str
    step: int
    plan: str
    reason: str
    changes_read: int = 0
    inserted: int = 0
    deleted: int = 0
    late: int = 0
    held: int = 0
    waterline: Dict[str, Optional[str]] = field(default_factory=dict)
    seconds: float = 0.0
    skipped: bool = False  # nothing changed in the inputs since the last step
    # How this step computed the model's change: the plan's kind ("linear", "aggregate"),
    # or "recompute" where the step recomputed instead (strategy: auto, a recovery); "" for a
    # run that was not a step.
    computed: str = ""
    # How the step wrote the model when not the usual way (an append or a MERGE):
    # WRITE_REWRITE (commit/protocol.py: a small model written whole), WRITE_WHOLE (a
    # recompute's rows written as the table); "" otherwise.
    write: str = ""
    # What the step line adds: a recovery, a retention warning, an ignored column.
    notes: List[str] = field(default_factory=list)

    @property
    def applied(self) -> int:
        return self.inserted + self.deleted

    def log_line(self) -> str:
        if self.skipped:
            # a readmit that took no step: what it found (nothing left, or a dry run)
            said = "; ".join(self.notes) if self.plan == "readmit" else ""
            return (
                f"{self.model}: step {self.step}: {said or 'inputs unchanged, nothing to do'} "
                f"({self.seconds:.1f} s)"
            )
        waterline = ", ".join(f"{k}={v}" for k, v in self.waterline.items()) or "none"
        return (
            f"{self.model}: step {self.step}: read {self.changes_read} changes, applied "
            f"{self.applied} (+{self.inserted} -{self.deleted}), late {self.late}, held "
            f"{self.held}, waterline {waterline}; {self.plan} ({self.reason}); "
            f"{self.seconds:.1f} s"
            + ("; the model written whole (small)" if self.write == WRITE_REWRITE else "")
            + "".join(f"; {note}" for note in self.notes)
        )

    def status(self) -> str:
        """The short status in dbt's result line, `[<status> in 1.23s]`: the rows inserted and
        deleted, then what else happened (late, held, a recompute, a recovery)."""
        if self.skipped:
            return "unchanged" if self.plan != "readmit" else "nothing readmitted"
        said = [f"+{self.inserted} -{self.deleted}"]
        said += [f"{n} {what}" for n, what in ((self.late, "late"), (self.held, "held")) if n]
        if any(note.startswith("recovered") for note in self.notes):
            said.append("recovered")
        elif self.computed == "recompute" and self.plan != "recompute":
            said.append("recomputed")
        said += {"flush": ["flushed"], "readmit": ["readmitted"]}.get(self.plan, [])
        return ", ".join(said)


def human_size(size: float) -> str:
    """A byte count as the step line shows it: 812 B, 3.4 MiB."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size} B"
