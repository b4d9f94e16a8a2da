"""LATENESS on random histories, against an oracle that applies the rule itself (the rule:
docs/lateness-and-watermark.md).

The differential test of `test_differential.py`, extended with lateness. A seeded generator moves
event time forward step by step with disorder: most new rows are a little behind the clock, some
far behind, some have a NULL event time, some are far in the future; rows from several steps ago
are updated and deleted (late deletes), exact duplicates arrive (changes of weight 2), and a
dimension table changes under a stream-table join. Each step is one `dbt run`.

The oracle follows the rule of docs/lateness-and-watermark.md literally, in Python, for every
model with `lateness`:

- the step's changes D(n) = Q(inputs after step n) - Q(inputs after step n-1), a signed multiset,
  where Q is the model's SELECT evaluated from scratch by Spark on the inputs (Q before the first
  step is empty) and the difference is taken here;
- a change is late when its lateness column is NULL (reason `null`), more than `max_future` after
  now (`future`), or below W(n-1) (`late`); late changes go to `<model>__late`, one row per copy,
  with the step, `insert`/`delete`, the column and W(n-1) as a string;
- W(n) = max(W(n-1), max(c over D(n), NULLs and future values excepted) - L), and each step
  appends (step, column, W(n), largest c seen so far) to `<model>__waterline`;
- the model after step n = the model after step n-1 + the on-time changes of D(n).

A step whose inputs did not change (no new Delta version) is skipped by the adapter and consumes
no step number; the oracle derives that from the inputs' versions, not from the adapter. A model
without lateness downstream of one with lateness must equal its SELECT over the upstream model's
actual contents. After every step the model, its `__late` (without `_streamsql_at`) and its
`__waterline` (without `at`) are compared with the oracle as multisets.

A model with `emit_final` has the same `__late` and `__waterline` as without it, and holds the
oracle's model restricted to the final groups (lateness column not NULL and below W(n)); at the
end its change feed must hold inserts only, and an `append_only` model over it must have run.

    STREAMSQL_LATE_DIFF_SEED=7 STREAMSQL_LATE_DIFF_STEPS=30 \
        pytest tests/functional/test_differential_lateness.py
"""

from __future__ import annotations

import datetime
import os
import random
import time
from collections import Counter
from typing import Dict, List, Optional, Sequence

import pytest
from dbt.tests.util import run_dbt

from tests.differential import as_bag, bag_diff, model_columns, sql_literal, values_clause

SEED = int(os.environ.get("STREAMSQL_LATE_DIFF_SEED", "20240404"))
# CI runs 6 steps (late deletes start from step 3); run longer histories locally.
STEPS = int(os.environ.get("STREAMSQL_LATE_DIFF_STEPS", "6"))
COMPACT_AFTER = int(os.environ.get("STREAMSQL_LATE_DIFF_COMPACT_AFTER", "2"))

SOURCES_YML = """
version: 2
sources:
  - name: raw
    schema: "{{ target.schema }}"
    tables:
      - name: events
      - name: dims
      - name: readings
"""

EVENTS = "{{ source('raw', 'events') }}"
DIMS = "{{ source('raw', 'dims') }}"
READINGS = "{{ source('raw', 'readings') }}"

HOUR = datetime.timedelta(hours=1)


def iv(
    lateness: Dict[str, str], max_future: Optional[Dict[str, str]] = None, emit_final: bool = False
) -> str:
    extra = f", max_future={max_future!r}" if max_future else ""
    extra += ", emit_final=true" if emit_final else ""
    return f"{{{{ config(materialized='incremental_view', lateness={lateness!r}{extra}) }}}}\n"


class Rule:
    """One model's LATENESS as the oracle sees it: column, L and max_future in Python."""

    def __init__(self, column: str, lateness, max_future=None) -> None:
        self.column, self.lateness, self.max_future = column, lateness, max_future


# model name -> (SQL, plan it must use, the oracle's rule; None: no lateness, checked against its
# SELECT over its inputs' actual contents)
MODELS: Dict[str, tuple] = {
    "late_project_filter": (
        iv({"ts": "INTERVAL 1 HOUR"})
        + f"select eid, k, ts, v * 2 as v2 from {EVENTS} where v is null or v <> 3",
        "linear",
        Rule("ts", HOUR),
    ),
    "late_seq": (  # BIGINT lateness
        iv({"seq": "5"}) + f"select eid, seq, v from {EVENTS} where k is not null or v > 0",
        "linear",
        Rule("seq", 5),
    ),
    "late_join": (  # a stream (events) joined with a table (dims) that changes under it
        iv({"ts": "INTERVAL 1 HOUR"})
        + f"select e.eid, e.ts, e.v, d.label from {EVENTS} e join {DIMS} d on e.k = d.k",
        "linear",
        Rule("ts", HOUR),
    ),
    "late_tumbling": (
        iv({"window_start": "INTERVAL 1 HOUR"})
        + f"select window(ts, '1 hour').start as window_start, count(*) as c, sum(v) as sum_v, "
        f"max(seq) as max_seq from {EVENTS} group by window(ts, '1 hour')",
        "aggregate",
        Rule("window_start", HOUR),
    ),
    "late_hourly": (  # NULL ts makes a NULL group key: a change with reason `null`
        iv({"hour": "INTERVAL 2 HOURS"})
        + f"select date_trunc('hour', ts) as hour, k, count(*) as c, min(v) as min_v "
        f"from {EVENTS} group by date_trunc('hour', ts), k",
        "aggregate",
        Rule("hour", 2 * HOUR),
    ),
    "late_future": (
        iv({"ts": "INTERVAL 30 MINUTES"}, {"ts": "INTERVAL 1 DAY"})
        + f"select rid, ts, val from {READINGS}",
        "linear",
        Rule("ts", datetime.timedelta(minutes=30), datetime.timedelta(days=1)),
    ),
    # emit_final twins of the two aggregates: the same __late and __waterline as a model without
    # it, and the model holds the oracle's model restricted to the final groups (EMIT_FINAL)
    "final_tumbling": (
        iv({"window_start": "INTERVAL 1 HOUR"}, emit_final=True)
        + f"select window(ts, '1 hour').start as window_start, count(*) as c, sum(v) as sum_v, "
        f"max(seq) as max_seq from {EVENTS} group by window(ts, '1 hour')",
        "aggregate, emit final",
        Rule("window_start", HOUR),
    ),
    "final_hourly": (
        iv({"hour": "INTERVAL 2 HOURS"}, emit_final=True)
        + f"select date_trunc('hour', ts) as hour, k, count(*) as c, min(v) as min_v "
        f"from {EVENTS} group by date_trunc('hour', ts), k",
        "aggregate, emit final",
        Rule("hour", 2 * HOUR),
    ),
    "final_downstream": (  # append_only over an emit_final model: fails on any delete
        "{{ config(materialized='incremental_view', append_only=true) }}\n"
        "select window_start, c, sum_v from {{ ref('final_tumbling') }} where c > 1",
        "linear",
        None,
    ),
    # stages whose window a LATENESS column carries: their final groups' state is dropped too
    "stage_windows": (  # an aggregate over an aggregate, grouped by the window it carries
        iv({"window_start": "INTERVAL 1 HOUR"})
        + "select window_start, count(*) as keys, sum(c) as c, max(c) as busiest from "
        f"(select window(ts, '1 hour').start as window_start, k, count(*) as c from {EVENTS} "
        "group by window(ts, '1 hour'), k) w group by window_start",
        "aggregate",
        Rule("window_start", HOUR),
    ),
    "stage_union": (  # UNION ALL branches, each an aggregate (a stage) of its own
        iv({"window_start": "INTERVAL 1 HOUR"})
        + f"select window(ts, '1 hour').start as window_start, 'hour' as span, count(*) as c, "
        f"min(v) as min_v from {EVENTS} group by window(ts, '1 hour') union all "
        f"select window(ts, '30 minutes').start as window_start, 'half' as span, count(*) as c, "
        f"min(v) as min_v from {EVENTS} group by window(ts, '30 minutes')",
        "linear",
        Rule("window_start", HOUR),
    ),
    "chain_of_late": (  # no lateness: equals its SELECT over late_project_filter's contents
        "{{ config(materialized='incremental_view') }}\n"
        "select k, count(*) as c, sum(v2) as sum_v2, max(ts) as last_ts "
        "from {{ ref('late_project_filter') }} group by k",
        "aggregate",
        None,
    ),
}

# the tables each model reads: its step is skipped when none of them has a new version
INPUTS = {
    "late_project_filter": ["events"],
    "late_seq": ["events"],
    "late_join": ["events", "dims"],
    "late_tumbling": ["events"],
    "late_hourly": ["events"],
    "late_future": ["readings"],
    "chain_of_late": ["late_project_filter"],
    "final_tumbling": ["events"],
    "final_hourly": ["events"],
    "final_downstream": ["final_tumbling"],
    "stage_windows": ["events"],
    "stage_union": ["events"],
}
# Models with emit_final: they hold the groups of the oracle's model that are final, i.e. whose
# lateness column is below the waterline after the step (docs/lateness-and-watermark.md).
EMIT_FINAL = {"final_tumbling", "final_hourly"}

QUARANTINE = (
    "_streamsql_step",
    "_streamsql_change",
    "_streamsql_column",
    "_streamsql_waterline",
    "_streamsql_reason",
)

BASE_TIME = datetime.datetime(2024, 3, 1, 0, 0)
MINUTES_PER_STEP = 40
SEQ_PER_STEP = 10
FAR_FUTURE = datetime.datetime(2999, 1, 1, 0, 0)


# -- the random history ---------------------------------------------------------------------------


class LateHistory:
    """Events whose time moves forward with disorder, a dimension table, and readings."""

    def __init__(self, seed: int, schema: str) -> None:
        self.rng = random.Random(seed)
        self.schema = schema
        self.step = 1
        self.next_id = 0
        self.events: Dict[int, int] = {}  # eid -> step it was inserted in
        self.readings: Dict[int, int] = {}
        self.dim_keys = [0, 1, 2, 3]

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def clock(self) -> datetime.datetime:
        return BASE_TIME + datetime.timedelta(minutes=MINUTES_PER_STEP * self.step)

    def event_time(self) -> Optional[datetime.datetime]:
        """Mostly a little behind the clock, sometimes far behind, sometimes NULL."""
        rng = self.rng
        roll = rng.random()
        if roll < 0.06:
            return None
        if roll < 0.66:
            lag = rng.randint(0, 50)
        elif roll < 0.86:
            lag = rng.randint(51, 150)
        else:
            lag = rng.randint(180, 600)  # far behind
        return self.clock() - datetime.timedelta(minutes=lag)

    def sequence(self) -> Optional[int]:
        rng = self.rng
        roll = rng.random()
        if roll < 0.06:
            return None
        now = SEQ_PER_STEP * self.step
        if roll < 0.7:
            return now - rng.randint(0, 4)
        if roll < 0.88:
            return now - rng.randint(5, 14)
        return now - rng.randint(20, 60)

    def event_row(self, eid: int) -> tuple:
        rng = self.rng
        return (
            eid,
            rng.choice([0, 1, 2, 3, 5, None]),
            self.event_time(),
            self.sequence(),
            rng.choice([rng.randint(-5, 20), 3, None]),
        )

    def reading_row(self, rid: int) -> tuple:
        rng = self.rng
        roll = rng.random()
        if roll < 0.1:
            ts = FAR_FUTURE + datetime.timedelta(hours=rng.randint(0, 99))
        elif roll < 0.18:
            ts = None
        elif roll < 0.3:
            ts = self.clock() - datetime.timedelta(minutes=rng.randint(60, 300))
        else:
            ts = self.clock() - datetime.timedelta(minutes=rng.randint(0, 40))
        return (rid, ts, rng.randint(0, 99))

    def table(self, name: str) -> str:
        return f"{self.schema}.{name}"

    def insert_events(self, count: int) -> List[str]:
        rows = []
        for _ in range(count):
            eid = self.new_id()
            row = self.event_row(eid)
            rows.append(row)
            self.events[eid] = self.step
            if self.rng.random() < 0.15:
                rows.append(row)  # an exact duplicate: a change of weight 2
        return [f"insert into {self.table('events')} values {values_clause(rows)}"]

    def insert_readings(self, count: int) -> List[str]:
        rows = []
        for _ in range(count):
            rid = self.new_id()
            rows.append(self.reading_row(rid))
            self.readings[rid] = self.step
        return [f"insert into {self.table('readings')} values {values_clause(rows)}"]

    def old(self, ids: Dict[int, int], most: int, age: int = 2) -> List[int]:
        """Ids inserted at least `age` steps ago (their rows are likely below the waterline)."""
        known = sorted(i for i, born in ids.items() if self.step - born >= age)
        if not known:
            known = sorted(ids)
        return self.rng.sample(known, min(len(known), self.rng.randint(1, most))) if known else []

    def initial(self) -> List[str]:
        statements = self.insert_events(8)
        rows = [(k, self.rng.choice(["x", "y"])) for k in self.dim_keys]
        statements.append(f"insert into {self.table('dims')} values {values_clause(rows)}")
        statements += self.insert_readings(4)
        return statements

    def batch(self) -> List[str]:
        """One step's DML: a few rows on every table the dice pick."""
        self.step += 1
        rng, events = self.rng, self.table("events")
        statements = self.insert_events(rng.randint(1, 4))
        if rng.random() < 0.7 and self.events:  # an update of rows from several steps ago
            ids = self.old(self.events, 2)
            where = f"eid in ({', '.join(map(str, ids))})"
            column, value = rng.choice(
                [
                    ("v", sql_literal(rng.choice([rng.randint(-5, 20), None]))),
                    ("k", sql_literal(rng.choice([0, 1, 2, 3, None]))),
                    ("seq", sql_literal(self.sequence())),
                    ("ts", sql_literal(self.event_time())),  # moves the row (forward, usually)
                    ("ts", "ts + interval 20 minutes"),
                ]
            )
            statements.append(f"update {events} set {column} = {value} where {where}")
        if rng.random() < 0.5 and self.events:  # late deletes
            ids = self.old(self.events, 2)
            for eid in ids:
                del self.events[eid]
            statements.append(f"delete from {events} where eid in ({', '.join(map(str, ids))})")
        if rng.random() < 0.15 and self.events:  # an old row again, as an exact duplicate
            ids = self.old(self.events, 1, age=3)
            statements.append(
                f"insert into {events} select * from {events} "
                f"where eid in ({', '.join(map(str, ids))})"
            )
        if rng.random() < 0.3:  # the table side of the join changes under old events
            key = rng.choice(self.dim_keys)
            statements.append(
                f"update {self.table('dims')} set label = "
                f"{sql_literal(rng.choice(['x', 'y', 'z']))} where k = {key}"
            )
        if rng.random() < 0.55:
            statements += self.insert_readings(rng.randint(1, 2))
        if rng.random() < 0.25 and self.readings:
            ids = self.old(self.readings, 1)
            for rid in ids:
                del self.readings[rid]
            statements.append(
                f"delete from {self.table('readings')} where rid in ({', '.join(map(str, ids))})"
            )
        return statements


# -- the oracle -----------------------------------------------------------------------------------


def spark_string(value) -> Optional[str]:
    """A value as Spark's CAST(... AS STRING) writes it (how waterlines are stored)."""
    if value is None:
        return None
    if isinstance(value, datetime.datetime):
        text = f"{value:%Y-%m-%d %H:%M:%S}"
        if value.microsecond:
            text += f".{value.microsecond:06d}".rstrip("0")
        return text
    return str(value)


def signed_difference(now: Counter, before: Counter) -> Dict[tuple, int]:
    """now - before as a signed multiset: row -> weight (never 0)."""
    weights = {}
    for row in set(now) | set(before):
        weight = now[row] - before[row]
        if weight:
            weights[row] = weight
    return weights


class LatenessOracle:
    """The LATENESS rule for one model with one lateness column, step by step."""

    def __init__(self, name: str, rule: Rule, columns: Sequence[str]) -> None:
        self.name, self.rule, self.columns = name, rule, list(columns)
        self.index = [c.lower() for c in self.columns].index(rule.column.lower())
        self.query_before: Counter = Counter()  # Q over the inputs after the previous step
        self.model: Counter = Counter()
        self.late: Counter = Counter()
        self.waterlines: Counter = Counter()
        self.waterline = None  # W(n-1); None before the first step
        self.waterline_before = None
        self.max_seen = None
        self.step = 0
        self.last_decisions: List[str] = []

    def reason(self, value, wall_clock: datetime.datetime) -> Optional[str]:
        if value is None:
            return "null"
        if self.rule.max_future is not None and value > wall_clock + self.rule.max_future:
            return "future"
        if self.waterline is not None and value < self.waterline:
            return "late"
        return None

    def final_groups(self) -> Counter:
        """emit_final: the rows of the model whose lateness column is below the waterline."""
        return Counter(
            {
                row: n
                for row, n in self.model.items()
                if row[self.index] is not None
                and self.waterline is not None
                and row[self.index] < self.waterline
            }
        )

    def advance(self, query_now: Counter, wall_clock: datetime.datetime) -> None:
        """One step of the model: D(n) = Q(n) - Q(n-1), classified against W(n-1)."""
        self.step += 1
        change = signed_difference(query_now, self.query_before)
        self.query_before = query_now
        self.waterline_before = self.waterline
        previous = spark_string(self.waterline)
        seen = []
        self.last_decisions = []
        for row, weight in sorted(change.items(), key=repr):
            value = row[self.index]
            reason = self.reason(value, wall_clock)
            kind = "insert" if weight > 0 else "delete"
            self.last_decisions.append(f"{kind} x{abs(weight)} {row}: {reason or 'on time'}")
            if reason != "future" and value is not None:
                seen.append(value)
            if reason is None:
                self.model[row] += weight
                assert self.model[row] >= 0, (
                    f"oracle: {self.name} step {self.step} deletes {row}, which it does not hold"
                )
            else:
                self.late[row + (self.step, kind, self.rule.column, previous, reason)] += abs(
                    weight
                )
        self.model = +self.model
        if seen:
            candidate = max(seen) - self.rule.lateness
            self.waterline = candidate if self.waterline is None else max(self.waterline, candidate)
            self.max_seen = max(seen) if self.max_seen is None else max(self.max_seen, max(seen))
        self.waterlines[
            (self.step, self.rule.column, spark_string(self.waterline), spark_string(self.max_seen))
        ] += 1


# -- the check ------------------------------------------------------------------------------------


def table_versions(project, schema: str, tables: Sequence[str]) -> Dict[str, int]:
    return {
        t: int(project.run_sql(f"describe history {schema}.{t} limit 1", fetch="one")[0])
        for t in tables
    }


class TestDifferentialLateness:
    @pytest.fixture(scope="class")
    def dbt_profile_target(self, dbt_profile_target):
        return {**dbt_profile_target, "threads": 4}  # as test_differential.py

    @pytest.fixture(scope="class")
    def models(self):
        files = {f"{name}.sql": sql for name, (sql, _, _) in MODELS.items()}
        files["sources.yml"] = SOURCES_YML
        return files

    @pytest.fixture(scope="class")
    def sources(self, project):
        schema = project.test_schema
        project.run_sql(
            f"create table {schema}.events (eid int, k int, ts timestamp, seq bigint, v int)"
        )
        project.run_sql(f"create table {schema}.dims (k int, label string)")
        project.run_sql(f"create table {schema}.readings (rid int, ts timestamp, val int)")
        return schema

    @pytest.mark.timeout(3600)  # several steps of many models: minutes, more on a loaded machine
    def test_models_late_and_waterline_tables_match_the_oracle(self, project, sources, monkeypatch):
        from dbt.adapters.streamsql.execution.commit import tables as state_tables

        # State tables compacted every COMPACT_AFTER-th append instead of every 20th: within the
        # run the aggregates drop the state of final groups, and a late change that reaches one
        # recomputes the model; the oracle holds all the same.
        monkeypatch.setattr(state_tables, "COMPACT_AFTER_STEPS", COMPACT_AFTER)
        schema = sources
        # The oracle computes waterlines from the datetimes Spark hands to Python: they must be
        # the session's (UTC) wall time for its strings to be Spark's.
        probe = project.run_sql("select timestamp'2024-03-01 10:00:00'", fetch="one")[0]
        assert probe == datetime.datetime(2024, 3, 1, 10, 0), (
            f"Python sees Spark's UTC timestamps shifted ({probe}); run with TZ=UTC"
        )

        history = LateHistory(SEED, schema)
        applied = history.initial()
        for statement in applied:
            project.run_sql(statement)

        oracles: Dict[str, LatenessOracle] = {}
        compiled: Dict[str, str] = {}
        columns: Dict[str, List[str]] = {}
        steps: Dict[str, int] = {}
        tables = sorted({t for names in INPUTS.values() for t in names})
        versions: Dict[str, int] = {}
        notes: List[str] = []
        for number in range(1, STEPS + 1):
            if number > 1:
                applied = history.batch()
                for statement in applied:
                    project.run_sql(statement)
            started = time.monotonic()
            results = run_dbt(["run"])
            ran = time.monotonic() - started
            wall_clock = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
            dml = "\n  ".join(applied)
            context = f"seed {SEED}, step {number} (of {STEPS}); this step's DML:\n  {dml}"
            assert len(results) == len(MODELS), context

            # Which models took a step: exactly those whose inputs have a new version.
            now_versions = table_versions(project, schema, tables)
            for result in results:
                name, response = result.node.name, result.adapter_response
                notes += [f"{name}: {note}" for note in response.get("notes") or []]
                intended = MODELS[name][1]
                assert response.get("plan") == intended, (
                    f"{name}: expected plan {intended!r}, got {response.get('plan')!r} "
                    f"({response.get('reason')}); {context}"
                )
                moved = not versions or any(now_versions[t] != versions[t] for t in INPUTS[name])
                expected_step = steps.get(name, 0) + (1 if moved else 0)
                assert response["step"] == expected_step, (
                    f"{name}: step {response['step']}, expected {expected_step} (inputs "
                    f"{'changed' if moved else 'unchanged'}); {response}; {context}"
                )
                steps[name] = response["step"]
                compiled.setdefault(name, result.node.compiled_code.strip().rstrip(";"))
            versions = now_versions

            for name, (_, plan, rule) in MODELS.items():
                relation = f"{schema}.{name}"
                if name not in columns:
                    columns[name] = model_columns(project, relation)
                    if rule is not None:
                        oracles[name] = LatenessOracle(name, rule, columns[name])
                select = ", ".join(f"`{c}`" for c in columns[name])
                query = as_bag(
                    project.run_sql(f"select {select} from ({compiled[name]}) q", fetch="all")
                )
                oracle = oracles.get(name)
                if oracle is not None and oracle.step < steps[name]:
                    oracle.advance(query, wall_clock)
                elif oracle is not None:  # skipped: the inputs, hence Q, did not change
                    assert query == oracle.query_before, (
                        f"{name} skipped step {number} but its query changed; {context}"
                    )
                expected = query if oracle is None else oracle.model
                if name in EMIT_FINAL:
                    expected = oracle.final_groups()
                actual = as_bag(project.run_sql(f"select {select} from {relation}", fetch="all"))
                decisions = ""
                if oracle is not None:
                    decisions = (
                        f"\noracle's step {oracle.step} (W "
                        f"{spark_string(oracle.waterline_before)} -> "
                        f"{spark_string(oracle.waterline)}), its changes:\n  "
                        + "\n  ".join(oracle.last_decisions[:30])
                    )
                assert actual == expected, (
                    f"{bag_diff(f'model {name} ({plan})', expected, actual)}{decisions}\n"
                    f"{context}\nSQL: {compiled[name]}"
                )
                if oracle is None:
                    continue

                late_columns = select + ", " + ", ".join(QUARANTINE)
                late = as_bag(
                    project.run_sql(f"select {late_columns} from {relation}__late", fetch="all")
                )
                assert late == oracle.late, (
                    f"{bag_diff(f'{name}__late', oracle.late, late)}{decisions}\n{context}"
                )
                waterlines = as_bag(
                    project.run_sql(
                        f"select step, column_name, waterline, max_seen from {relation}__waterline",
                        fetch="all",
                    )
                )
                assert waterlines == oracle.waterlines, (
                    f"{bag_diff(f'{name}__waterline', oracle.waterlines, waterlines)}"
                    f"{decisions}\n{context}"
                )
            # visible with -s: where a step's time goes
            print(
                f"step {number}: dbt run {ran:.1f} s, checks "
                f"{time.monotonic() - started - ran:.1f} s"
            )

        # emit_final models only ever inserted: their change feeds hold nothing else (and
        # final_downstream, append_only, ran every step over final_tumbling)
        for name in sorted(EMIT_FINAL):
            kinds = project.run_sql(
                f"select _change_type, count(*) from table_changes("
                f"'{schema}.{name}', 0) group by _change_type",
                fetch="all",
            )
            assert {kind for kind, _ in kinds} <= {"insert"}, (name, kinds)
        assert steps["final_downstream"] == steps["final_tumbling"]
        # what the run went through, with -s: the state of final groups dropped, steps that
        # recomputed because a late change reached it
        print("\n".join(n for n in notes if "state" in n))
        if STEPS > COMPACT_AFTER + 1:  # a state table was rewritten, and dropped final groups
            assert any("dropped the state of final groups" in note for note in notes), notes
            # so were the stages' (planning/stage_lateness.py), each of them
            for stage in ("stage_windows__streamsql_stage0", "stage_union__streamsql_stage0"):
                assert any(
                    "dropped the state of final groups" in note and stage in note for note in notes
                ), (stage, notes)
