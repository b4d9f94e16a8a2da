"""Where a model stands between steps: the record each step commits with the model's table.

The record travels in the Delta commit that changes the model (`commitInfo.userMetadata`), so a
step's effect on the model and its bookkeeping are one atomic commit: after a crash the model's
history says exactly which step last completed and which input versions it had read.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional

from dbt.adapters.streamsql.planning.fingerprint import (
    canonical_form,
    canonical_sql,
    clause_texts,
    whitespace_collapsed,
)

RECORD_KEY = "streamsql"
FORMAT_VERSION = 1


def _digest(text: str, length: int = 16) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def sql_fingerprint(sql: str) -> str:
    """The fingerprint of the query's meaning: its canonical form (planning/fingerprint.py)."""
    return _digest(canonical_sql(sql))


def legacy_fingerprint(sql: str) -> str:
    """The fingerprint records made before the canonical form: the text, whitespace collapsed.
    A model whose record carries it continues without a full refresh."""
    return _digest(whitespace_collapsed(sql))


def clause_fingerprints(sql: str) -> Dict[str, str]:
    """A short fingerprint of each top-level clause: what a changed query's error names."""
    return _clause_digests(clause_texts(sql))


def _clause_digests(clauses: Mapping[str, str]) -> Dict[str, str]:
    return {name: _digest(text, 8) for name, text in clauses.items()}


def changed_clauses(recorded: Mapping[str, str], sql: str) -> List[str]:
    """The clauses of `sql` that differ from those `recorded` (empty when nothing was recorded
    or nothing can be named)."""
    if not recorded:
        return []
    now = clause_fingerprints(sql)
    return [
        name for name in dict.fromkeys([*recorded, *now]) if recorded.get(name) != now.get(name)
    ]


@dataclass
class StepRecord:
    step: int
    run_id: str
    sql_fingerprint: str
    # The fingerprint of the query's text, whitespace collapsed (`legacy_fingerprint`): a
    # query whose canonical form changed only because the SQL parser was upgraded still
    # matches by its text. Empty in records made before it was kept.
    sql_text_fingerprint: str = ""
    # A fingerprint per top-level clause of the query (`clause_fingerprints`), to name the
    # clause that changed; empty in records made before it was kept.
    sql_clauses: Dict[str, str] = field(default_factory=dict)
    # The run that (re)created the model's table. Delta remembers idempotent-write versions across
    # CREATE OR REPLACE, so the idempotency key must change when the table is rebuilt.
    incarnation: str = ""
    input_versions: Dict[str, int] = field(default_factory=dict)
    # The model's state tables, by name ("state" for the top aggregate's, a stage's name for
    # its own): a state table holds, per group, the rows the steps wrote, tagged with the step.
    state_tables: List[str] = field(default_factory=list)
    waterline: Dict[str, Optional[str]] = field(default_factory=dict)
    max_seen: Dict[str, Optional[str]] = field(default_factory=dict)
    # Per lateness column, this step's changes counted by how far behind the previous step's
    # max_seen they arrived (lateness.behind_counts), for `__waterline.behind`. Only the step
    # that counts them keeps them (not carried by `next`).
    behind: Dict[str, List[int]] = field(default_factory=dict)
    watermark_seen: Dict[str, Optional[str]] = field(default_factory=dict)
    # The plan's kind and reason, so that a run with nothing to do can say them without
    # planning ("" in records written before they were kept).
    plan: str = ""
    reason: str = ""
    # How the state tables keep their rows: "log" (statements.latest_state); "" for tables
    # built before, which a step refuses (they need a full refresh).
    state_layout: str = ""
    # Per state table ("state" or a stage's name): [live groups at its last compaction, rows
    # appended since, steps since], to tell when to compact it (commit.write_state).
    state_log: Dict[str, List[int]] = field(default_factory=dict)
    # The side tables (their suffixes, e.g. "__late", "__streamsql_state") this step writes
    # after the model's commit; the next run finishes what a crash left unwritten.
    side_writes: List[str] = field(default_factory=list)
    # The model holds only final groups (config emit_final, when its table was built).
    emit_final: bool = False
    # A `streamsql_flush` step (it read no input, and released everything WATERMARK held).
    flush: bool = False
    # A `streamsql_readmit` step (it read no input, and applied rows of `__late`):
    # {"where": the user's condition, "condition": the rows it took (event_time/readmit.py),
    # "late_version": the version of `__late` it read them at}. Not carried by `next`.
    readmit: Optional[Dict[str, Any]] = None
    # Each input's Delta table id when the step read it: another id later means the input was
    # dropped or replaced and created again (lost_history.py).
    input_ids: Dict[str, str] = field(default_factory=dict)
    # The model table's columns after the step, as [name, type] (schema.py).
    columns: List[List[str]] = field(default_factory=list)
    # Why the step recomputed the model instead of reading its inputs' changes (lost_history.py).
    recovered: List[str] = field(default_factory=list)
    # When the step started, in seconds since the epoch (retention.py).
    started_at: Optional[float] = None
    # When the model's side tables were last cleaned of rows beyond their retention, in
    # seconds since the epoch (cleanup.py); None before the first clean-up clock started.
    cleaned_at: Optional[float] = None
    # [step, at] per clean-up within the longest retention of released `__pending` rows: every
    # step up to `step` had completed at `at` (cleanup.py), so what those steps released may go
    # once `at` is beyond the retention.
    cleanups: List[List[float]] = field(default_factory=list)
    # Per lateness column: the top aggregate's state table holds no final group below this
    # value (as a string, like a waterline): a compaction dropped them (tables.py). A step
    # whose change reaches such a group recomputes the model (aggregate_state.py).
    state_dropped_below: Dict[str, str] = field(default_factory=dict)
    # The same per stage ("stage0", ...) whose groups a model column with LATENESS carries
    # (planning/stage_lateness.py): its state table holds no group below these values.
    stage_dropped_below: Dict[str, Dict[str, str]] = field(default_factory=dict)
    # An `ORDER BY ... LIMIT k` model's rows ranked right below its cut after this step
    # (planning/global_top_k.py): {"columns": [[name, type]], "rows": [[text]], "complete":
    # whether the model and these rows were all of the query's}. Only the step that works
    # them out keeps them (not carried by `next`): a step that did not leaves none.
    top_k_buffer: Optional[Dict[str, Any]] = None
    # The digest of the query's texts whose readings Spark found alike, the model's and the
    # planner's (pipeline/meaning.py): the same texts at the next step need no question.
    meaning_checked: str = ""
    # How the step computed the model's change (StepResult.computed: "linear", "aggregate",
    # "recompute"), and the bytes its inputs held (None: not known): what its cost was a sample
    # of (pipeline/step_cost.py).
    computed: str = ""
    input_bytes: Optional[int] = None
    # The recorded costs of earlier steps (step_cost.costs_after): "incremental": the seconds of
    # the last few incremental steps; "rebuild": [seconds, input bytes] of the last step that
    # read its inputs in full.
    costs: Dict[str, List[float]] = field(default_factory=dict)
    # The step since which the model's state tables lack the rows of its steps: `auto`
    # recomputed a model with state (pipeline/plan_choice.py); the next step that reads the
    # inputs' changes rebuilds them first (a recovery). None: they are up to date.
    state_behind_since: Optional[int] = None

    def next(self, run_id: str, input_versions: Dict[str, int]) -> "StepRecord":
        """The record of the step after this one, carrying the event-time state forward."""
        return StepRecord(
            step=self.step + 1,
            run_id=run_id,
            sql_fingerprint=self.sql_fingerprint,
            sql_text_fingerprint=self.sql_text_fingerprint,
            sql_clauses=dict(self.sql_clauses),
            incarnation=self.incarnation,
            input_versions=input_versions,
            state_tables=list(self.state_tables),
            waterline=dict(self.waterline),
            max_seen=dict(self.max_seen),
            watermark_seen=dict(self.watermark_seen),
            plan=self.plan,
            reason=self.reason,
            state_layout=self.state_layout,
            state_log={name: list(counts) for name, counts in self.state_log.items()},
            input_ids=dict(self.input_ids),
            columns=[list(c) for c in self.columns],
            emit_final=self.emit_final,
            cleaned_at=self.cleaned_at,
            cleanups=[list(c) for c in self.cleanups],
            state_dropped_below=dict(self.state_dropped_below),
            stage_dropped_below={k: dict(v) for k, v in self.stage_dropped_below.items()},
            meaning_checked=self.meaning_checked,
            costs={name: list(values) for name, values in self.costs.items()},
            state_behind_since=self.state_behind_since,
        )

    def same_sql(self, sql: str) -> bool:
        """Whether `sql` means the query this record's steps ran (comments and layout aside):
        the same canonical form, or the same text (records made before the canonical form
        hold the text's fingerprint; the text also covers a parser whose output changed)."""
        text = legacy_fingerprint(sql)
        if self.sql_text_fingerprint == text:
            return True
        return self.sql_fingerprint in (sql_fingerprint(sql), text)

    def fingerprint(self, sql: str) -> None:
        """Record `sql` as the query of this record's step (its fingerprints)."""
        canonical, clauses = canonical_form(sql)  # one parse for both
        self.sql_fingerprint = _digest(canonical)
        self.sql_text_fingerprint = legacy_fingerprint(sql)
        self.sql_clauses = _clause_digests(clauses)

    def unchanged(self, sql: str, input_versions: Dict[str, int]) -> bool:
        """Whether a run of the same SQL over inputs at these versions has nothing to do.

        Only for records that say which plan they ran (the run reports it without planning).
        """
        return (
            self.step > 0
            and bool(self.plan)
            and self.input_versions == input_versions
            and self.same_sql(sql)
        )

    def to_json(self) -> str:
        body = asdict(self)
        body["format"] = FORMAT_VERSION
        text = json.dumps({RECORD_KEY: body}, separators=(",", ":"), sort_keys=True)
        # It travels in a SET statement, where a semicolon would end the value and `${...}`
        # would be taken for a variable (a global top-K's rows below its cut are user data).
        return text.replace(";", "\\u003b").replace("$", "\\u0024")

    @classmethod
    def from_json(cls, text: Optional[str]) -> Optional["StepRecord"]:
        if not text:
            return None
        try:
            body = json.loads(text).get(RECORD_KEY)
        except (ValueError, AttributeError):
            return None
        if not isinstance(body, dict):
            return None
        body = {k: v for k, v in body.items() if k in cls.__dataclass_fields__}
        return cls(**body)


CREATING_OPERATIONS = {
    "CREATE TABLE",
    "CREATE OR REPLACE TABLE",
    "REPLACE TABLE",
    "CREATE TABLE AS SELECT",
    "CREATE OR REPLACE TABLE AS SELECT",
    "REPLACE TABLE AS SELECT",
}


def last_record(history: Iterable[Mapping[str, Any]]) -> Optional[StepRecord]:
    """The newest step record in a table's history (newest commit first).

    Commits without a record (OPTIMIZE, a user's ALTER) are skipped. A (re)creation without a record
    ends the search: whatever came before belongs to an earlier table.
    """
    for commit in history:
        record = StepRecord.from_json(commit.get("userMetadata"))
        if record is not None:
            return record
        if str(commit.get("operation", "")).upper() in CREATING_OPERATIONS:
            return None
    return None
