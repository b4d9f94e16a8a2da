"""Which step a reader outside a step sees as the model's last completed one
(`step_records`, `completed_steps`: execution/commit/history.py)."""

from typing import Dict, List, Optional

from dbt.adapters.streamsql.execution.commit.history import completed_steps, step_records
from dbt.adapters.streamsql.execution.commit.record import StepRecord
from dbt.adapters.streamsql.execution.engine.delta_log import Commit

MODEL = "demo.m"


class History:
    """Tables' commits, oldest first, as a Delta log reader gives them (newest first)."""

    def __init__(self) -> None:
        self.tables: Dict[str, List[Commit]] = {}
        self.asked: List[int] = []

    def commit(self, table: str, operation: str, record: Optional[StepRecord] = None) -> None:
        commits = self.tables.setdefault(table, [])
        metadata = record.to_json() if record is not None else None
        commits.append(Commit(len(commits), operation, user_metadata=metadata))

    def recent_commits(self, name: str, limit: int) -> List[Commit]:
        self.asked.append(limit)
        return list(reversed(self.tables[name]))[:limit]


def record(step: int, side_writes=(), incarnation: str = "run1") -> StepRecord:
    return StepRecord(
        step=step,
        run_id=f"r{step}",
        sql_fingerprint="f",
        incarnation=incarnation,
        input_versions={"demo.src": 10 + step},
        side_writes=list(side_writes),
    )


def steps(found) -> List[tuple]:
    """(step, the version its commit made, the last version before the next step's)"""
    return [(s.record.step, s.version, s.last_version) for s in found]


def test_records_newest_first_with_the_version_of_their_commit_within_one_incarnation():
    log = History()
    log.commit(MODEL, "CREATE TABLE", record(0, incarnation="old"))
    log.commit(MODEL, "WRITE", record(1, incarnation="old"))
    log.commit(MODEL, "CREATE OR REPLACE TABLE", record(0))  # a full refresh: 2
    log.commit(MODEL, "WRITE", record(1))
    log.commit(MODEL, "OPTIMIZE")
    log.commit(MODEL, "ADD COLUMNS", record(2))  # step 2 changed the schema, then merged: 6
    log.commit(MODEL, "MERGE", record(2))
    log.commit(MODEL, "DELETE")  # not a step's: a reader of step 2 sees it
    assert steps(step_records(log, MODEL, 10)) == [(2, 6, 7), (1, 3, 4), (0, 2, 2)]
    assert steps(step_records(log, MODEL, 2)) == [(2, 6, 7), (1, 3, 4)]


def test_a_long_history_is_read_whole_only_when_the_first_page_holds_too_few():
    log = History()
    log.commit(MODEL, "CREATE TABLE", record(0))
    log.commit(MODEL, "WRITE", record(1))
    for _ in range(5):
        log.commit(MODEL, "OPTIMIZE")
    log.commit(MODEL, "WRITE", record(2))
    assert steps(step_records(log, MODEL, 1)) == [(2, 7, 7)]
    assert log.asked == [11]
    for _ in range(20):
        log.commit(MODEL, "OPTIMIZE")
    log.asked.clear()
    assert steps(step_records(log, MODEL, 5)) == [(2, 7, 27), (1, 1, 6), (0, 0, 0)]
    assert log.asked == [15, 28]


def test_a_step_whose_side_writes_have_not_all_landed_is_not_completed():
    log = History()
    for suffix in ("__waterline", "__late"):
        log.commit(MODEL + suffix, "CREATE TABLE")
    log.commit(MODEL, "CREATE TABLE", record(0))
    log.commit(MODEL, "WRITE", record(1, ["__waterline"]))
    log.commit(MODEL + "__waterline", "WRITE", record(1, ["__waterline"]))
    step2 = record(2, ["__waterline", "__late"])
    log.commit(MODEL, "WRITE", step2)  # version 2
    # no side table has it yet: step 1, read as before step 2's commit
    assert steps(completed_steps(log, MODEL, 1)) == [(1, 1, 1)]
    log.commit(MODEL + "__waterline", "WRITE", step2)
    assert steps(completed_steps(log, MODEL, 2)) == [(1, 1, 1), (0, 0, 0)]  # __late has not
    log.commit(MODEL + "__late", "WRITE", step2)
    assert steps(completed_steps(log, MODEL, 2)) == [(2, 2, 2), (1, 1, 1)]
    # a side table's newest record being another incarnation's is not this step's write
    step3 = record(3, ["__late"])
    log.commit(MODEL, "MERGE", step3)
    log.commit(MODEL + "__late", "WRITE", record(5, incarnation="other"))
    assert steps(completed_steps(log, MODEL, 1)) == [(2, 2, 2)]


def test_a_table_without_records_has_no_step():
    log = History()
    log.commit(MODEL, "CREATE TABLE")
    log.commit(MODEL, "WRITE")
    assert completed_steps(log, MODEL, 3) == []
