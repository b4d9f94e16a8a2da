"""What the planner hands to the executor: the Spark SQL of one step, and why.

The planner is pure Python over sqlglot ASTs (Spark dialect). It never talks to Spark. The executor
(`dbt.adapters.streamsql.execution`) binds the placeholders below to real relations and runs the
statements in a crash-safe order.

Placeholders. Plans refer to the inputs of the model only through these identifiers, which the
executor replaces (as whole identifiers) by temporary views:

    __streamsql_new_<i>__    input i as of the version this step reads up to
    __streamsql_old_<i>__    input i as of the version the previous step read up to (empty on the
                             first step)
    __streamsql_delta_<i>__  the change of input i between the two: input i's columns plus
                             `_streamsql_weight` BIGINT (+1 inserted row, -1 deleted row; an
                             update is a -1 of the old row and a +1 of the new one)
    __streamsql_state__      (aggregate plans) the model's state table as of the previous step
    __streamsql_group_delta__ (aggregate plans) the result of `AggregatePlan.delta_sql`
    __streamsql_groups__     (aggregate plans) a relation with the state table's columns
    __streamsql_target__     (recompute plans) the model's table as of the previous step

`<i>` is the position of the input in `StepPlan.inputs`; positions after the last input are the
plan's stages (`StepPlan.stages`, `StagePlan.position`): an aggregate below the top of the query,
read by the rest of the plan like one more input (new, old and delta as above, over the stage's
columns).

Every "change" SQL returns the model's output columns, in order, plus `_streamsql_weight` BIGINT.
A change need not be consolidated (the same row may appear with +1 and -1); the executor
consolidates it before applying it, except for a `monotonic` linear plan whose input changes are all
inserts: every row of its change then has weight +1 and is appended as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from dbt.adapters.streamsql.planning import dialect

# The SQL dialect every plan is parsed and rendered in: Spark's, read as Spark reads it.
DIALECT = dialect.NAME
# How a plan's reason begins when no part of the model is recomputed from scratch.
FAST_PATH = "fast path: "

WEIGHT = "_streamsql_weight"
COUNT = "_streamsql_count"


def new_input(i: int) -> str:
    return f"__streamsql_new_{i}__"


def old_input(i: int) -> str:
    return f"__streamsql_old_{i}__"


def delta_input(i: int) -> str:
    return f"__streamsql_delta_{i}__"


STATE = "__streamsql_state__"
GROUP_DELTA = "__streamsql_group_delta__"
GROUPS = "__streamsql_groups__"
TARGET = "__streamsql_target__"
# The alias under which `AggregatePlan.group_outputs` refer to a state row's group columns.
GROUP_ALIAS = "_streamsql_grp"


@dataclass(frozen=True)
class Column:
    name: str
    data_type: str  # Spark SQL type as `DESCRIBE` prints it, e.g. "bigint", "decimal(10,2)"


@dataclass(frozen=True)
class InputTable:
    """An input of the model as it appears in the compiled SQL."""

    name: str  # normalized: lower case, unquoted, dot-joined, e.g. "demo.sensors"
    columns: Tuple[Column, ...]


@dataclass(frozen=True)
class KeyBound:
    """A range predicate a join term puts on a source other than its change (planning/bounds.py).

    The term's SQL holds `name` where the predicate goes; the executor replaces it by
    `column operator <value as a literal>`, by `false` when the value is NULL, or by `true`.
    Every bound is implied by the rest of its term (it only lets Delta skip files), so `true`
    is always correct.

    A bound may also gate a whole term: column "1" and a value that is 1 when the term is
    needed, NULL when it is not (NOT IN's whole-result terms, linear.py): `false` then lets
    Spark drop the term before reading anything.

    `open_when_null`: a NULL value means `true` instead (a ROWS frame's reach,
    window_reach.rows_reach, is NULL when a touched partition must be read whole).
    """

    name: str  # a placeholder, `__streamsql_bound_...__`
    column: str  # the bounded column as the term names it, e.g. "p.id" (or "1", a gate)
    operator: str  # ">=" or "<="
    # a scalar SQL expression over placeholders: the MIN or MAX the column is held to, e.g. a
    # SELECT over one delta placeholder, or the LEAST/GREATEST of several such SELECTs
    value: str
    open_when_null: bool = False


def bound_placeholder(prefix: str, number: int) -> str:
    return f"__streamsql_bound_{prefix}{number}__"


@dataclass(frozen=True)
class AggregatePlan:
    """Maintains GROUP BY / DISTINCT through a state table of per-group partial aggregates.

    State table columns: `group_columns` (one per GROUP BY expression, `_streamsql_g<k>`), then
    `_streamsql_count` (BIGINT, the group's row count; a group with count 0 is gone), then the
    partial aggregates (`_streamsql_a<j>...`). `state_columns` lists all of them with types.
    """

    group_columns: Tuple[str, ...]
    state_columns: Tuple[Column, ...]
    # SELECT group columns, _streamsql_count and partial-aggregate *changes*, grouped by the group
    # columns, over the delta placeholders (and old/new placeholders below joins).
    delta_sql: str
    # SELECT all state columns: the new state of every group present in
    # `__streamsql_group_delta__` (the result of `delta_sql`), combining it with
    # `__streamsql_state__` (full outer join on the group columns, null-safe). Groups whose new
    # count is 0 are included with count 0 so the executor can delete them. Where a partial cannot
    # be combined (MIN/MAX after a deletion, COUNT(DISTINCT)), this SQL recomputes those groups
    # from the new inputs.
    combine_sql: str
    # SELECT the model's output columns, then the group columns, from `__streamsql_groups__` (a
    # relation with the state columns): HAVING applied, groups with count <= 0 produce no row
    # (except a global aggregate without GROUP BY, which always has exactly one row). The group
    # columns let the executor tie an output change back to its group (LATENESS).
    output_sql: str
    # `combine_sql` without recomputing MIN/MAX from the inputs, to use when `recompute_check`
    # (an aggregate over the rows of `__streamsql_group_delta__`: how many may have lost a MIN or
    # MAX) is 0, i.e. no deleted value can have been a group's MIN/MAX. None when every step
    # must recompute.
    combine_without_recompute_sql: Optional[str] = None
    # (output column, SQL over the group columns of a state row aliased GROUP_ALIAS) for output
    # columns that depend on the group alone, e.g.
    # ("hour_start", "_streamsql_grp._streamsql_g1.start"): a LATENESS waterline on such a column
    # tells which groups are final, so a step can skip their state.
    group_outputs: Tuple[Tuple[str, str], ...] = ()
    recompute_check: Optional[str] = None
    # Key bounds `delta_sql` and `later_delta_sql` hold (joins below the aggregate).
    bounds: Tuple[KeyBound, ...] = ()
    # `delta_sql` for steps after the first, reading no input's older version (linear.py), where
    # that differs (joins); None: `delta_sql` serves every step.
    later_delta_sql: Optional[str] = None
    # Output columns whose values name the row's group (a group's own value, or a window's
    # start or end), when there is such a set: the model then holds at most one row per key, and
    # the executor can apply a change as updates by key. () for a global aggregate (one row);
    # None when the output does not name its groups.
    key_columns: Optional[Tuple[str, ...]] = None

    def delta_form(self, first_step: bool, inserts_only: bool) -> str:
        """The group delta a step computes: `later_delta_sql` after the first step, except where
        the step only inserts and a MIN/MAX is kept. That form has negative terms even for
        inserts, which a MIN/MAX takes for deletions of its extreme (and recomputes the group
        from the inputs): with MIN/MAX, only where something was removed anyway."""
        if (
            not first_step
            and self.later_delta_sql is not None
            and not (self.recompute_check and inserts_only)
        ):
            return self.later_delta_sql
        return self.delta_sql


@dataclass(frozen=True)
class StagePlan:
    """An aggregate block below the top of the query, maintained with a state table of its own.

    The rest of the plan (later stages, the top) reads the stage's result as input `position`.
    Its `aggregate` plan reads the inputs and earlier stages only (planning/stages.py).
    """

    name: str  # "stage0", ...: its state table is `<model>__streamsql_<name>`
    position: int
    columns: Tuple[Column, ...]
    aggregate: AggregatePlan
    reason: str  # e.g. "group by (max)"
    # (model column, stage column): the model columns that hold, on every row the stage's
    # groups feed, the value of one of its columns, where the rest of the plan reads the
    # stage only through its change (stage_lateness.py). A LATENESS on such a model column
    # makes the stage's groups below its waterline final, and their state may be dropped.
    lateness_through: Tuple[Tuple[str, str], ...] = ()


@dataclass(frozen=True)
class GlobalTopKPlan:
    """The rows below an `ORDER BY ... LIMIT k`'s cut a step record keeps (global_top_k.py)."""

    count: int  # k
    buffer_rows: int  # m: the rows kept below the cut
    # The next step's rows below the cut (global_top_k.buffer_sql), over the same change as
    # `change_sql`, and as `later_change_sql` (None: the first serves).
    buffer_sql: str
    # The first k+m+1 rows of the query over the new inputs, which the change and `buffer_sql`
    # read on a step whose gate opened (global_top_k.NEW_TOP).
    new_top_sql: str
    later_buffer_sql: Optional[str] = None


@dataclass(frozen=True)
class StepPlan:
    kind: str  # "linear" | "aggregate" | "recompute": how the plan computes a change
    reason: str  # one line for the step log, e.g. "fast path: filter, projection" or
    # "recompute: window function ROW_NUMBER is not maintained incrementally"
    inputs: Tuple[InputTable, ...]
    output_columns: Tuple[Column, ...]
    # linear: the model's change from the input changes.
    # recompute: the model's full new contents with weight +1 UNION ALL
    #            `__streamsql_target__` with weight -1.
    # aggregate: None (see `aggregate`).
    change_sql: Optional[str] = None
    aggregate: Optional[AggregatePlan] = None
    # True when the model's result can only gain rows given append-only inputs, i.e. every term
    # of the change has a positive weight (no left join). When every input change in a step is an
    # insert, the executor appends the change without netting it.
    monotonic: bool = False
    # Aggregates below the top of the query, in the order the executor maintains them.
    stages: Tuple[StagePlan, ...] = ()
    # Key bounds `change_sql` and `later_change_sql` hold (linear plans).
    bounds: Tuple[KeyBound, ...] = ()
    # linear: `change_sql` for steps after the first, reading no input's older version, where
    # that differs (joins; see linear.py), and whether it is monotonic in the sense above (its
    # inclusion-exclusion has negative terms even for inserts). None: `change_sql` serves.
    later_change_sql: Optional[str] = None
    later_monotonic: bool = False
    # linear: an `ORDER BY ... LIMIT k` at the top whose step record keeps rows below its cut.
    top_k: Optional[GlobalTopKPlan] = None
    # recompute: the model's rows over the new inputs, without weights, for a step that writes
    # the model whole instead of its difference (planner.recompute_plan); None where the change
    # is not the query minus the table (a recovery's).
    rows_sql: Optional[str] = None

    @property
    def keeps_state(self) -> bool:
        """Whether the plan keeps state tables that must follow every step (an aggregate at
        the top, or stages below it)."""
        return self.aggregate is not None or bool(self.stages)
