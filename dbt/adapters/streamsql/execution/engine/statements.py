"""The Spark SQL statements of a step, as pure functions of names and columns.

Nothing here runs SQL; `step.py` decides when each statement runs. Every function returns one
statement. Names passed in are already quoted where needed (`quote`).
"""

from __future__ import annotations

import re
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence

from dbt.adapters.streamsql.planning.plan import COUNT, GROUP_ALIAS, WEIGHT, Column, KeyBound
from dbt.adapters.streamsql.planning.types import comparable, compared_as_is, uncomparable_part

COPIES = "_streamsql_copies"
PLACEHOLDER = re.compile(r"`?(?<![A-Za-z0-9_])(__streamsql_[a-z0-9_]+?__)(?![A-Za-z0-9_])`?")


def quote(identifier: str) -> str:
    return "`" + identifier.replace("`", "``") + "`"


def add_columns(table: str, columns: Sequence[Column]) -> str:
    return (
        f"ALTER TABLE {table} ADD COLUMNS ("
        + ", ".join(f"{quote(c.name)} {c.data_type}" for c in columns)
        + ")"
    )


def column_list(columns: Sequence[Column], prefix: str = "") -> str:
    return ", ".join(f"{prefix}{quote(c.name)}" for c in columns)


def compared(column: Column, relation: str = "") -> str:
    """The column (of the rows aliased `relation`) as rows are matched and grouped by it: the
    column itself, or for a map (or a type holding one) a form Spark compares (`comparable`)."""
    name = f"{relation}.{quote(column.name)}" if relation else quote(column.name)
    if not matchable([column]):
        return name  # Spark refuses it then (the model's own columns are checked before)
    return comparable(name, column.data_type)


def matchable(columns: Sequence[Column]) -> bool:
    """Whether rows can be matched and grouped by these columns (`compared`): no GEOMETRY,
    no CALENDAR INTERVAL (recovery/schema.py refuses them in a model)."""
    return all(uncomparable_part(c.data_type) is None for c in columns)


def null_safe_match(columns: Sequence[Column], left: str, right: str) -> str:
    """`left.a <=> right.a AND ...`; `true` for no columns (a global aggregate's one group)."""
    if not columns:
        return "true"
    return " AND ".join(f"{compared(c, left)} <=> {compared(c, right)}" for c in columns)


def grouping(columns: Sequence[Column], relation: str = "") -> str:
    """What to GROUP BY to group rows by `columns` (the GROUP BY list of `grouped_columns`)."""
    return ", ".join(compared(c, relation) for c in columns)


def grouped_columns(columns: Sequence[Column], relation: str = "") -> str:
    """`columns` (of rows aliased `relation`) in a SELECT grouped by `grouping`: each column,
    or where the group is of a comparable form of it, one of its group's values (all equal)."""
    found = []
    for column in columns:
        name = f"{relation}.{quote(column.name)}" if relation else quote(column.name)
        as_is = compared(column, relation) == name
        found.append(name if as_is else f"any_value({name}) AS {quote(column.name)}")
    return ", ".join(found)


def bind_placeholders(sql: str, views: Mapping[str, str]) -> str:
    """Replace the planner's placeholder identifiers by the step's temporary view names."""

    def replace(name: str) -> str:
        if name not in views:
            raise KeyError(f"the plan refers to {name}, which this step did not bind")
        return views[name]

    return replace_placeholders(sql, replace)


def replace_placeholders(sql: str, replacement: Callable[[str], str]) -> str:
    """Replace each placeholder identifier (whole identifiers only) by `replacement(name)`."""
    return PLACEHOLDER.sub(lambda match: replacement(match.group(1)), sql)


def placeholder_occurrences(sql: str) -> List[str]:
    """The placeholders `sql` refers to, once per reference."""
    return [match.group(1) for match in PLACEHOLDER.finditer(sql)]


# -- inputs ---------------------------------------------------------------------------------------


def input_as_of(table: str, version: int) -> str:
    return f"SELECT * FROM {table} VERSION AS OF {version}"


def empty_input(table: str, version: int) -> str:
    return f"SELECT * FROM {table} VERSION AS OF {version} WHERE false"


def input_snapshot_as_change(table: str, columns: Sequence[Column], version: int) -> str:
    """The first step: everything in the input is an insert."""
    return (
        f"SELECT {column_list(columns)}, CAST(1 AS BIGINT) AS {WEIGHT} "
        f"FROM {table} VERSION AS OF {version}"
    )


def input_changes(table_name: str, columns: Sequence[Column], after: int, upto: int) -> str:
    """The change feed between two versions as weighted rows (updates are -pre +post)."""
    return (
        f"SELECT {column_list(columns)}, CAST(CASE WHEN _change_type IN ('insert', "
        f"'update_postimage') THEN 1 ELSE -1 END AS BIGINT) AS {WEIGHT} "
        f"FROM table_changes('{table_name}', {after + 1}, {upto})"
    )


def typed_nothing(columns: Sequence[Column]) -> str:
    """A SELECT of no rows with `columns` (to DESCRIBE SQL that reads them)."""
    nulls = ", ".join(f"CAST(NULL AS {c.data_type}) AS {quote(c.name)}" for c in columns)
    return f"SELECT {nulls} WHERE false"


def temp_view(name: str, select: str) -> str:
    return f"CREATE OR REPLACE TEMPORARY VIEW {name} AS {select}"


def cached_view(name: str, select: str) -> str:
    """Computed once, used several times in the step (eager)."""
    return f"CACHE TABLE {name} AS {select}"


# -- key bounds -----------------------------------------------------------------------------------

# Types whose values print as text that reads back as the same value, whatever the session's
# time zone (timestamps go through epoch microseconds instead). Others get no bound.
_BOUNDED_TYPE = re.compile(
    r"^(tinyint|smallint|int|bigint|float|double|decimal\(\d+,\d+\)|date|"
    r"timestamp_ntz)$"
)


def bound_values(bounds: Sequence[KeyBound]) -> str:
    """One row of each bound's value, `v<i>` (bind placeholders, then DESCRIBE it for types)."""
    return "SELECT " + ", ".join(f"{bound.value} AS v{i}" for i, bound in enumerate(bounds))


def bound_texts(values: str, types: Sequence[str]) -> str:
    """The values of `bound_values` as text a literal can be made of (NULL where none can)."""
    texts = [f"{literal_text(f'v{i}', data_type)} AS v{i}" for i, data_type in enumerate(types)]
    return f"SELECT {', '.join(texts)} FROM ({values})"


def literal_text(value: str, data_type: str) -> str:
    """SQL for `value` (of `data_type`) as text a literal can be made of (`bound_predicate`);
    NULL for a type without such literals."""
    if data_type == "timestamp":
        return f"CAST(unix_micros({value}) AS STRING)"
    if _BOUNDED_TYPE.match(data_type):
        return f"CAST({value} AS STRING)"
    return "CAST(NULL AS STRING)"


def bound_predicate(bound: KeyBound, text: Optional[str], data_type: str) -> str:
    """The predicate that replaces a bound's placeholder.

    `true` for a type without literals (no bound); `false` when the change holds no value (the
    term then has no rows anyway), `true` for a bound open when NULL.
    """
    if data_type != "timestamp" and not _BOUNDED_TYPE.match(data_type):
        return "true"
    if text is None:
        return "true" if bound.open_when_null else "false"
    if data_type == "timestamp":
        literal = f"timestamp_micros({int(text)})"
    else:
        literal = f"CAST('{text}' AS {data_type})"
    return f"({bound.column} {bound.operator} {literal})"


def orderable_part(column: Column, relation: Optional[str] = None) -> Optional[str]:
    """The part of a column whose range Delta's file statistics can skip by, as SQL; None if none.

    The column itself when its values have exact literals; a window's start for a window group
    (a struct of start and end).
    """
    name = f"{relation}.{quote(column.name)}" if relation else quote(column.name)
    data_type = column.data_type.replace(" ", "").lower()
    if data_type == "timestamp" or _BOUNDED_TYPE.match(data_type):
        return name
    if data_type.startswith("struct<start:timestamp"):
        return f"{name}.start"
    return None


def time_first(columns: Sequence[Column]) -> List[Column]:
    """Columns to sort a bulk write by: time-like ones first (events arrive in time order)."""
    timed = [
        c
        for c in columns
        if orderable_part(c) is not None and ("timestamp" in c.data_type or c.data_type == "date")
    ]
    return timed + [c for c in columns if c not in timed and orderable_part(c) is not None]


def order_by(columns: Sequence[Column]) -> str:
    """` ORDER BY` the orderable parts of `columns` (from `time_first`); '' for none."""
    return f" ORDER BY {', '.join(orderable_part(c) for c in columns)}" if columns else ""


def key_range(part: str, lower: str, upper: str) -> str:
    """A row's key part lies in a change's range of it, or is NULL (groups match null-safely)."""
    return f"(({lower} AND {upper}) OR {part} IS NULL)"


def orderable_type(column: Column) -> str:
    """The type of `orderable_part(column)` (a window group's start is a timestamp)."""
    data_type = column.data_type.replace(" ", "").lower()
    return "timestamp" if data_type.startswith("struct<start:timestamp") else data_type


def range_aggregates(
    columns: Sequence[Column], alias: Optional[str] = None, where: str = "", name: str = ""
) -> Dict[str, str]:
    """`<name>lo<i>` and `<name>hi<i>` (name -> aggregate expression): the smallest and largest
    orderable part of each of `columns` with one (`orderable_part`), as literal text
    (`literal_text`), over rows aliased `alias` (those that meet `where`, if given)."""
    found = {}
    for i, column in enumerate(c for c in columns if orderable_part(c) is not None):
        part, data_type = orderable_part(column, alias), orderable_type(column)
        # (not FILTER: Spark refuses it in measures computed with a pass, sql_session.py)
        value = f"CASE WHEN {where} THEN {part} END" if where else part
        found[f"{name}lo{i}"] = literal_text(f"MIN({value})", data_type)
        found[f"{name}hi{i}"] = literal_text(f"MAX({value})", data_type)
    return found


def range_predicates(
    columns: Sequence[Column], alias: str, row: Mapping[str, Any], name: str = ""
) -> List[str]:
    """`key_range` predicates over rows aliased `alias`, from a row of `range_aggregates`."""
    found = []
    for i, column in enumerate(c for c in columns if orderable_part(c) is not None):
        part, data_type = orderable_part(column, alias), orderable_type(column)
        lower = bound_predicate(KeyBound("", part, ">=", ""), row[f"{name}lo{i}"], data_type)
        upper = bound_predicate(KeyBound("", part, "<=", ""), row[f"{name}hi{i}"], data_type)
        found.append(key_range(part, lower, upper))
    return found


# -- the model's change ---------------------------------------------------------------------------


def groupable(columns: Sequence[Column]) -> bool:
    """Whether Spark compares these columns as they are, in EXCEPT ALL too (no map or variant,
    nor one nested: those are grouped and matched by a comparable form, `compared`)."""
    return all(compared_as_is(c.data_type) for c in columns)


def consolidate(change_view: str, columns: Sequence[Column]) -> str:
    """Net weight per distinct row; rows whose changes cancel out disappear."""
    return (
        f"SELECT {grouped_columns(columns)}, SUM({WEIGHT}) AS {WEIGHT} FROM {change_view} "
        f"GROUP BY {grouping(columns)} HAVING SUM({WEIGHT}) <> 0"
    )


def netted_rows(change_view: str, columns: Sequence[Column]) -> str:
    """`consolidate`, then one row per copy (weight +1 or -1), as a change feed gives them: the
    form every plan reads an input's change in (an aggregate's sums take each row once)."""
    cols = column_list(columns)
    return (
        f"SELECT {cols}, CAST(sign({WEIGHT}) AS BIGINT) AS {WEIGHT} "
        f"FROM ({consolidate(change_view, columns)}) "
        f"LATERAL VIEW explode(sequence(1, abs({WEIGHT}))) copies AS {COPIES}"
    )


def change_counts(net_view: str) -> str:
    """Rows the change inserts and deletes, and the largest number of copies of one row."""
    counts = ", ".join(
        f"{expression} AS {name}" for name, expression in change_count_aggregates().items()
    )
    return f"SELECT {counts} FROM {net_view}"


def change_count_aggregates() -> Dict[str, str]:
    """`change_counts` as named aggregate expressions, to compute with others in one query."""
    return {
        "inserts": f"COALESCE(SUM(CASE WHEN {WEIGHT} > 0 THEN {WEIGHT} ELSE 0 END), 0)",
        "deletes": f"COALESCE(SUM(CASE WHEN {WEIGHT} < 0 THEN -{WEIGHT} ELSE 0 END), 0)",
        "widest": f"COALESCE(MAX(ABS({WEIGHT})), 0)",
    }


def count_copies(view: str, condition: str) -> str:
    """How many rows the weighted rows of `view` that meet `condition` stand for."""
    return f"SELECT COALESCE(SUM(abs({WEIGHT})), 0) AS n FROM {view} WHERE {condition}"


def count_rows(view: str) -> str:
    return f"SELECT COUNT(*) AS n FROM {view}"


def count_changes(delta_view: str) -> str:
    """Rows of an input's change, and how many of them remove a row (weight -1)."""
    return (
        f"SELECT COUNT(*) AS n, COALESCE(SUM(CASE WHEN {WEIGHT} < 0 THEN 1 ELSE 0 END), 0) "
        f"AS removals FROM {delta_view}"
    )


def row_copies(source: str, cols: str, count: str = WEIGHT) -> str:
    """`SELECT cols FROM source`, each row `count` times (by default its weight, at least 1)."""
    return (
        f"SELECT {cols} FROM {source} LATERAL VIEW explode(sequence(1, {count})) copies AS {COPIES}"
    )


def insert_copies(
    target: str, net_view: str, columns: Sequence[Column], order: Sequence[Column] = ()
) -> str:
    """A change with only inserts: a blind append, `weight` copies of each row.

    `order`: columns to sort the rows by (`time_first`), so that the files written hold narrow
    ranges of them.
    """
    cols = column_list(columns)
    return f"INSERT INTO {target} ({cols}) {row_copies(net_view, cols)}{order_by(order)}"


def append_change(target: str, change: str, columns: Sequence[Column]) -> str:
    """Append a change that only inserts (every weight at least 1; it need not be netted).

    The weights are checked as the rows are written: a row with any other weight fails the
    statement, and with it the step, rather than being written wrong.
    """
    cols = column_list(columns)
    return (
        f"INSERT INTO {target} ({cols}) {row_copies(change, cols)} "
        f"WHERE CASE WHEN {WEIGHT} >= 1 THEN true ELSE raise_error('dbt-streamsql: a change "
        f"taken for inserts only holds a removal; nothing was written, run the step again') END"
    )


# -- aggregate state ------------------------------------------------------------------------------


def previous_groups(state: str, group_delta: str, group_columns: Sequence[Column]) -> str:
    """The state rows of the groups this step touches, before the step."""
    return (
        f"SELECT st.* FROM {state} st LEFT SEMI JOIN {group_delta} d "
        f"ON {null_safe_match(group_columns, 'st', 'd')}"
    )


def state_after(state: str, new_groups: str, group_columns: Sequence[Column]) -> str:
    """The whole state after a step: unchanged groups, then the changed groups' new state.

    Gone groups (count 0) stay in; an aggregate's output leaves them out.
    """
    return (
        f"SELECT st.* FROM {state} st LEFT ANTI JOIN {new_groups} n "
        f"ON {null_safe_match(group_columns, 'st', 'n')} "
        f"UNION ALL SELECT * FROM {new_groups}"
    )


def output_change(output_new: str, output_old: str, columns: Sequence[Column]) -> str:
    cols = column_list(columns)
    return (
        f"SELECT {cols}, CAST(1 AS BIGINT) AS {WEIGHT} FROM ({output_new}) "
        f"UNION ALL SELECT {cols}, CAST(-1 AS BIGINT) AS {WEIGHT} FROM ({output_old})"
    )


# The step that wrote a row of a state table: a state table is a log of the groups' states, and
# a group's state is the row the latest step wrote for it (`latest_state`).
STEP = "_streamsql_step"


def latest_state(
    table_as_of: str, group_columns: Sequence[Column], state_columns: Sequence[Column]
) -> str:
    """The state of every group as a state table (a log) holds it: the latest row per group.

    A row with a count of 0 or less (a group that is gone) hides the group's older rows. The
    columns are `state_columns`, in order. Predicates on the group columns above this pass
    through the aggregation to the table's scan, so Delta can still skip files by them.
    """
    groups = grouped_columns(group_columns)
    values = [c for c in state_columns if c not in group_columns]
    latest = f"max_by(struct({column_list(values)}), {STEP}) AS _streamsql_latest"
    projection = ", ".join(
        quote(c.name)
        if c in group_columns
        else f"_streamsql_latest.{quote(c.name)} AS {quote(c.name)}"
        for c in state_columns
    )
    grouped = f"SELECT {groups + ', ' if groups else ''}{latest} FROM ({table_as_of})"
    if groups:
        grouped += f" GROUP BY {grouping(group_columns)}"
    return f"SELECT {projection} FROM ({grouped}) WHERE _streamsql_latest.{COUNT} > 0"


def insert_state(
    state: str,
    new_groups: str,
    state_columns: Sequence[Column],
    step: int,
    order: Sequence[Column],
    everything: bool = True,
) -> str:
    """Append the changed groups' new state to a state table, as step `step`'s rows.

    `everything`: gone groups too (count 0), which hide their older rows; a first write, into an
    empty table, leaves them out. `order`: the columns to sort by (`time_first`), so that the
    files written hold narrow key ranges.
    """
    cols = column_list(state_columns)
    condition = "" if everything else f" WHERE {COUNT} > 0"
    return (
        f"INSERT INTO {state} ({cols}, {STEP}) SELECT {cols}, CAST({step} AS BIGINT) "
        f"FROM {new_groups}{condition}{order_by(order)}"
    )


def state_through(state: str, step: int) -> str:
    """The rows of a state table written by steps up to `step` (later ones are not there yet
    for the step after it, or belong to a step whose own writes are being finished)."""
    return f"SELECT * FROM {state} WHERE {STEP} <= {step}"


def compact_state(
    state: str,
    step: int,
    group_columns: Sequence[Column],
    state_columns: Sequence[Column],
    order: Sequence[Column],
    keep: str = "",
) -> str:
    """Rewrite a state table as one row per live group as of `step`, sorted like a first write.

    The state it holds does not change (`latest_state` of its rows up to `step` reads the
    same before and after), so a reader at any moment sees the same state; except, with
    `keep` (a predicate over a state row aliased GROUP_ALIAS), the groups it leaves out.
    """
    cols = column_list(state_columns)
    current = latest_state(state_through(state, step), group_columns, state_columns)
    if keep:
        current = f"SELECT * FROM ({current}) AS {GROUP_ALIAS} WHERE {keep}"
    return (
        f"INSERT OVERWRITE {state} ({cols}, {STEP}) SELECT {cols}, CAST({step} AS BIGINT) "
        f"FROM ({current}){order_by(order)}"
    )


# -- tables ---------------------------------------------------------------------------------------


def table_properties(extra: Optional[Mapping[str, str]] = None) -> str:
    # Deletion vectors let a MERGE mark the rows it replaces instead of rewriting every file that
    # holds one: a step's write then costs what its change costs, not what the table holds.
    properties: Dict[str, str] = {
        "delta.enableChangeDataFeed": "true",
        "delta.enableDeletionVectors": "true",
    }
    properties.update({str(k): str(v) for k, v in (extra or {}).items()})
    return ", ".join(f"'{k}' = '{v}'" for k, v in properties.items())


def create_table(
    name: str,
    columns: Sequence[Column],
    properties: Optional[Mapping[str, str]] = None,
    partition_by: Iterable[str] = (),
    cluster_by: Iterable[str] = (),
    location: Optional[str] = None,
    replace: bool = True,
) -> str:
    """CREATE OR REPLACE TABLE, or with `replace=False` a CREATE TABLE that fails when the table
    exists (TABLE_OR_VIEW_ALREADY_EXISTS)."""
    definition = ", ".join(f"{quote(c.name)} {c.data_type}" for c in columns)
    create = "CREATE OR REPLACE TABLE" if replace else "CREATE TABLE"
    clauses: List[str] = [f"{create} {name} ({definition}) USING delta"]
    partitions = list(partition_by)
    if partitions:
        clauses.append(f"PARTITIONED BY ({', '.join(quote(p) for p in partitions)})")
    clustering = list(cluster_by)
    if clustering:
        clauses.append(f"CLUSTER BY ({', '.join(quote(c) for c in clustering)})")
    if location:
        clauses.append(f"LOCATION '{location}'")
    clauses.append(f"TBLPROPERTIES ({table_properties(properties)})")
    return " ".join(clauses)


def set_properties(table: str, properties: Mapping[str, str]) -> str:
    listed = ", ".join(f"'{k}' = '{v}'" for k, v in properties.items())
    return f"ALTER TABLE {table} SET TBLPROPERTIES ({listed})"


def set_conf(key: str, value: str) -> str:
    return f"SET {key}={value}"


def reset_conf(key: str) -> str:
    return f"RESET {key}"


def mark_step(table: str, step: int) -> str:
    """A metadata-only commit: how a step that changes no row still records its progress."""
    return f"ALTER TABLE {table} SET TBLPROPERTIES ('streamsql.step' = '{step}')"
