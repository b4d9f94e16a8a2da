"""The statements that write a step's change into the model: a MERGE of whole rows, a MERGE by
key, for a small model the whole table written again, or a recompute's rows written as the
whole table (commit/protocol.py chooses)."""

from __future__ import annotations

from typing import List, Sequence, Tuple

from dbt.adapters.streamsql.execution.engine.statements import (
    COPIES,
    column_list,
    grouped_columns,
    grouping,
    null_safe_match,
    quote,
    row_copies,
)
from dbt.adapters.streamsql.planning.plan import WEIGHT, Column

ACTION = "_streamsql_action"
EXISTING = "_streamsql_existing"
PRESENT = "_streamsql_present"
ROW = "_streamsql_row"
KEEP = "_streamsql_keep"


def merge_change(
    target: str, net_view: str, columns: Sequence[Column], target_bounds: Sequence[str] = ()
) -> str:
    """Apply a multiset change in one atomic MERGE.

    A row r with net weight w > 0 gains w copies. A row with w < 0 loses |w| copies: all copies of
    r are deleted and max(existing + w, 0) copies re-inserted, because a MERGE cannot delete some
    of several identical rows. Delete actions match on every column (null-safe); insert actions
    never match and fall through to WHEN NOT MATCHED.

    The source names `net_view` once: each net row is annotated with its copies in the target
    (a left join that only matches shrinking rows), then exploded into its actions (position 0:
    the delete of a shrinking row; 1..k: k inserts). Spark may miss its cache for the second
    reference of a cached view in one statement (seen when the cached query holds a self-join,
    e.g. Nexmark q5) and evaluate the whole query again.

    `target_bounds` are predicates on the target (alias `t`) that every row the change can delete
    satisfies, e.g. `t.ts >= <waterline>`: Delta then skips files that lie wholly outside them.
    """
    cols = column_list(columns)
    bounds = "".join(f" AND {bound}" for bound in target_bounds)
    annotated = (
        f"SELECT {grouped_columns(columns, 'n')}, n.{WEIGHT}, "
        f"CAST(COUNT(t.{PRESENT}) AS BIGINT) AS {EXISTING} "
        f"FROM {net_view} n LEFT JOIN (SELECT *, 1 AS {PRESENT} FROM {target}) t "
        f"ON n.{WEIGHT} < 0 AND {null_safe_match(columns, 't', 'n')}{bounds} "
        f"GROUP BY {grouping(columns, 'n')}, n.{WEIGHT}"
    )
    first = f"CASE WHEN {WEIGHT} < 0 THEN 0 ELSE 1 END"
    last = f"CASE WHEN {WEIGHT} < 0 THEN greatest({EXISTING} + {WEIGHT}, 0) ELSE {WEIGHT} END"
    source = (
        f"SELECT {cols}, CASE WHEN {COPIES} = 0 THEN 'delete' ELSE 'insert' END AS {ACTION} "
        f"FROM ({annotated}) LATERAL VIEW explode(sequence({first}, {last})) copies AS {COPIES}"
    )
    return (
        f"MERGE INTO {target} AS t USING ({source}) AS s "
        f"ON s.{ACTION} = 'delete' AND {null_safe_match(columns, 't', 's')}{bounds} "
        f"WHEN MATCHED THEN DELETE "
        f"WHEN NOT MATCHED AND s.{ACTION} = 'insert' THEN INSERT ({cols}) "
        f"VALUES ({column_list(columns, 's.')})"
    )


def merge_by_key(
    target: str,
    net_view: str,
    columns: Sequence[Column],
    key: Sequence[str],
    target_bounds: Sequence[str] = (),
) -> str:
    """Apply a change to a table holding at most one row per `key` (an aggregate's groups).

    Per key the change holds its new row (+1), its old row (-1), or both: the row is inserted,
    deleted, or updated in place. Unlike `merge_change` this needs no count of the target's
    copies of each row, so the target is read once, by the MERGE's own join. `key` may be
    empty: a global aggregate's one row.
    """
    keys, values = split_key(columns, key)
    bounds = "".join(f" AND {bound}" for bound in target_bounds)
    update = ", ".join(f"{quote(c.name)} = s.{ROW}.{quote(c.name)}" for c in values)
    return (
        f"MERGE INTO {target} AS t USING ({by_key_source(net_view, keys, values)}) AS s "
        f"ON {null_safe_match(keys, 't', 's')}{bounds} "
        f"WHEN MATCHED AND NOT s.{KEEP} THEN DELETE "
        + (f"WHEN MATCHED THEN UPDATE SET {update} " if values else "")
        + f"WHEN NOT MATCHED AND s.{KEEP} THEN INSERT ({column_list(columns)}) "
        f"VALUES ({new_row(columns, keys)})"
    )


def split_key(columns: Sequence[Column], key: Sequence[str]) -> Tuple[List[Column], List[Column]]:
    """(the key's columns, the others), in the columns' order."""
    wanted = {name.lower() for name in key}
    return [c for c in columns if c.name.lower() in wanted], [
        c for c in columns if c.name.lower() not in wanted
    ]


def new_row(columns: Sequence[Column], keys: Sequence[Column]) -> str:
    """A key's new row from `by_key_source`'s row `s`."""
    return ", ".join(
        f"s.{quote(c.name)}" if c in keys else f"s.{ROW}.{quote(c.name)}" for c in columns
    )


def by_key_source(net_view: str, keys: Sequence[Column], values: Sequence[Column]) -> str:
    """Per key of a change to a table holding one row per key: its new row's values (`ROW`,
    a struct) and whether a row stays (`KEEP`)."""
    groups = f" GROUP BY {grouping(keys)}" if keys else ""
    chosen = f"max_by(struct({column_list(values)}), {WEIGHT}) AS {ROW}, " if values else ""
    return (
        f"SELECT {grouped_columns(keys) + ', ' if keys else ''}{chosen}"
        f"MAX({WEIGHT}) > 0 AS {KEEP} FROM {net_view}{groups}"
    )


def rewrite_by_key(
    target: str, net_view: str, columns: Sequence[Column], key: Sequence[str]
) -> str:
    """`merge_by_key`'s result written as the whole table, in one file: the rows of keys the
    change does not touch, and the touched keys' new rows. One INSERT OVERWRITE, for a table
    small enough that writing it whole is cheaper than a MERGE (commit/protocol.py)."""
    keys, values = split_key(columns, key)
    return rewrite(
        target,
        columns,
        f"SELECT {column_list(columns, 't.')} FROM {target} t LEFT ANTI JOIN {net_view} n "
        f"ON {null_safe_match(keys, 't', 'n')} "
        f"UNION ALL SELECT {new_row(columns, keys)} "
        f"FROM ({by_key_source(net_view, keys, values)}) s WHERE s.{KEEP}",
    )


def rewrite_change(target: str, net_view: str, columns: Sequence[Column]) -> str:
    """`merge_change`'s result written as the whole table, in one file: the table's rows less
    the copies the change removes (EXCEPT ALL: as many as there are, NULLs equal), and the
    copies it adds. For a small table, as `rewrite_by_key`; the columns must be `groupable`."""
    cols = column_list(columns)
    return rewrite(
        target,
        columns,
        f"(SELECT {cols} FROM {target} EXCEPT ALL "
        f"{row_copies(net_view, cols, f'-{WEIGHT}')} WHERE {WEIGHT} < 0) "
        f"UNION ALL {row_copies(net_view, cols)} WHERE {WEIGHT} > 0",
    )


def rewrite(target: str, columns: Sequence[Column], rows: str) -> str:
    cols = column_list(columns)
    return f"INSERT OVERWRITE {target} ({cols}) SELECT /*+ COALESCE(1) */ {cols} FROM ({rows})"


def write_whole(target: str, rows: str, columns: Sequence[Column]) -> str:
    """The model's rows `rows` (no weights) written as its whole table, in as many files as
    the query makes, as dbt's `table` writes them."""
    cols = column_list(columns)
    return f"INSERT OVERWRITE {target} ({cols}) SELECT {cols} FROM {rows}"
