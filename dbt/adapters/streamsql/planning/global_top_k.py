"""ORDER BY ... LIMIT k at the top of a query (a global top-K), kept from the model's own rows.

    select player, score from scores order by score desc limit 10
    select seller, count(*) as sold from auctions group by seller order by sold desc limit 5

Let R be the query without its ORDER BY and LIMIT, T the model (the first k rows of R's old
result in the ORDER BY, ties broken below), b the last row of T, and D the change of R (its
delta rules, an aggregate below as a stage). Every row of R's old result that ranks before b
is in T, so the rows of R's new result up to b are known without reading R:

    P = (T + D) restricted to the rows ranked up to b       (all of T + D when T holds fewer
                                                            than k rows: T was all of R)

and when P holds at least k rows (or T was all of R), the new model is the first k rows of P.
Inserts, and updates that keep a row above the cut (a leaderboard's changed scores), stay on
that path; only a step whose deletions leave fewer than k known rows evaluates R over the new
inputs (its first k rows, one read of what R reads). The step decides which before reading
anything: a key bound gates the two (`GATE`, bounds.py in the executor), so Spark never plans
the read it does not need.

Rows below the cut. So that deletions do not send every step to R, the step record keeps B, the
m rows of R's result ranked right after T (`buffer_rows`: max(k, 10), at most 100, where every
output column has a type whose text form reads back as the same value), and whether T and B
were all of R (`COMPLETE`). T + B then stands where T stood above: P holds the rows ranked up to
the last row of T + B, and the gate opens only when P holds fewer than k rows. Each step works
out the next B from the same rows (`buffer_sql`: the rows ranked k+1 to k+m+1 of P, the
(m+1)-th only to say that B does not end R; D's inserted rows are cut at k+m+1 for that); a
step whose gate opened takes both its change and B from R's first k+m+1 rows, computed once
(`NEW_TOP`). Deletions shrink B, and a read of R fills it again. A step without a record's B
(the first with it, after a recompute, under LATENESS or WATERMARK, which may set some of the
change aside) reads with an empty one, as before.

Ties. Which of the rows tied on the ORDER BY a LIMIT keeps is Spark's choice; evaluating the
old result again may choose differently from the step that wrote the model. So the order is
extended by every output column (ascending, NULLs first): rows that still tie are equal, and
which of them is kept does not matter. That is one of the answers Spark may give. Output
columns that cannot be ordered (MAP, VARIANT, or an array or struct holding one) leave the
query a recompute.

What stays a recompute, with a reason: LIMIT without ORDER BY (any k rows), OFFSET, a LIMIT
that is not a positive integer literal, an ORDER BY on something the query does not select,
LIMIT below the top of the query.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from sqlglot import exp

from dbt.adapters.streamsql.planning.dialect import string_literal
from dbt.adapters.streamsql.planning.errors import RecomputeRequired
from dbt.adapters.streamsql.planning.plan import (
    DIALECT,
    TARGET,
    WEIGHT,
    Column,
    KeyBound,
    bound_placeholder,
)
from dbt.adapters.streamsql.planning.types import compared_as_is

CONSTRUCT = "global top-k"
ALIAS = "_streamsql_topk"
# 1 when the step must evaluate the query over the new inputs, NULL when the model's rows and
# the change decide the new top-K (bound to `true` / `false` before the change is computed).
GATE = bound_placeholder("topk", 0)
# B: the rows ranked after the model's in the query's old result, from the last step's record
# (an inline SELECT of literals), and whether the model and B were all of it (`true`/`false`).
BUFFER = "__streamsql_topk_buffer__"
COMPLETE = "__streamsql_topk_complete__"
# With B: the first k+m+1 rows of the query over the new inputs (`new_top_sql`), read once by
# the change and the next B on a step whose gate opened, and an empty relation on the others
# (the executor binds it after the gate).
NEW_TOP = "__streamsql_topk_new__"
MAX_BUFFER = 100
# The types whose text form (`CAST(x AS STRING)`; a timestamp's microseconds since the epoch,
# whatever the session's time zone) reads back as the same value. Not floating point, CHAR
# (padded), binary or nested types: a model with one keeps no rows below its cut.
_TEXT_EXACT_WHOLE = (
    "string",
    "tinyint",
    "smallint",
    "int",
    "integer",
    "bigint",
    "date",
    "boolean",
    "timestamp",
    "timestamp_ntz",
)
# The largest step record B may take up (its rows' text as JSON): beyond, the step keeps none.
MAX_BUFFER_BYTES = 32 * 1024
# What the step line adds when the gate opens.
READ_AGAIN = (
    "global top-k: its first rows read again from the query over its new inputs (the step's "
    "deletions left fewer of the model's rows known than its LIMIT)"
)


@dataclass(frozen=True)
class GlobalLimit:
    count: int
    # (output column position, descending, NULLs first), in the ORDER BY's order
    order: Tuple[Tuple[int, bool, bool], ...]
    # m: the rows below the cut a step record keeps (0: none, a column's type forbids)
    buffer: int = 0

    @property
    def construct(self) -> str:
        return f"{CONSTRUCT} (limit {self.count})"


def split(tree: exp.Query, output_columns: Sequence[Column]) -> Optional[GlobalLimit]:
    """Takes a top-level ORDER BY ... LIMIT off `tree` (in place) and returns it; None when
    the top has no LIMIT. Raises RecomputeRequired for the forms kept as recomputes."""
    limit = tree.args.get("limit")
    if limit is None or not isinstance(tree, (exp.Select, exp.SetOperation)):
        return None
    if tree.args.get("offset") is not None:
        raise RecomputeRequired(
            "LIMIT with OFFSET is not maintained incrementally (the rows above the offset are "
            "not kept)"
        )
    order = tree.args.get("order")
    if order is None:
        raise RecomputeRequired(
            "LIMIT without ORDER BY (any k rows) is not maintained incrementally: an ORDER BY "
            "that decides which rows are kept puts it on the fast path"
        )
    count = _positive_integer(limit.args.get("expression"))
    if count is None:
        raise RecomputeRequired(
            "LIMIT other than a positive integer literal is not maintained incrementally"
        )
    for column in output_columns:
        if not compared_as_is(column.data_type):  # a map, or an array or struct holding one
            raise RecomputeRequired(
                f"ORDER BY ... LIMIT over a {column.data_type.upper()} column ({column.name}) "
                "is not maintained incrementally: its rows cannot be ordered to break ties"
            )
    terms = tuple(
        (_output_position(tree, o.this, output_columns), bool(o.args.get("desc")), _nulls(o))
        for o in order.expressions
    )
    tree.set("order", None)
    tree.set("limit", None)
    exact = all(text_exact(c.data_type) for c in output_columns)
    return GlobalLimit(count, terms, min(max(count, 10), MAX_BUFFER) if exact else 0)


def text_exact(data_type: str) -> bool:
    """Whether a value of `data_type` is kept exactly as text (`as_text`, `literal`)."""
    kind = data_type.replace(" ", "").lower()
    return kind in _TEXT_EXACT_WHOLE or kind.startswith(("decimal(", "varchar("))


def _positive_integer(node: Optional[exp.Expression]) -> Optional[int]:
    if isinstance(node, exp.Literal) and not node.is_string and node.this.isdigit():
        value = int(node.this)
        return value if value > 0 else None
    return None


def _nulls(ordered: exp.Ordered) -> bool:
    nulls_first = ordered.args.get("nulls_first")
    if nulls_first is None:  # Spark's default: NULLs are the smallest values
        return not ordered.args.get("desc")
    return bool(nulls_first)


def _output_position(tree: exp.Query, term: exp.Expression, columns: Sequence[Column]) -> int:
    """The output column an ORDER BY term orders by: a position, a column's name, or a
    projection's expression."""
    if isinstance(term, exp.Literal) and not term.is_string and term.this.isdigit():
        position = int(term.this) - 1
        if 0 <= position < len(columns):
            return position
    if isinstance(term, exp.Column) and not term.table:
        named = [i for i, c in enumerate(columns) if c.name.lower() == term.name.lower()]
        if len(named) == 1:
            return named[0]
    if isinstance(tree, exp.Select) and not any(
        isinstance(p, exp.Star) or (isinstance(p, exp.Column) and p.is_star)
        for p in tree.expressions
    ):
        same = [i for i, p in enumerate(tree.expressions) if p.unalias() == term]
        if same and len(tree.expressions) == len(columns):
            return same[0]
    raise RecomputeRequired(
        f"ORDER BY {term.sql(DIALECT)} ... LIMIT orders by something the query does not "
        "select, which is not maintained incrementally: order by a selected column (or its "
        "position)"
    )


def wrap(tree: exp.Query, columns: Sequence[Column]) -> exp.Select:
    """`SELECT <columns> FROM (tree) AS _streamsql_topk(<columns>)`: the query the delta rules
    maintain below the LIMIT, an aggregate in it lifted as a stage."""
    names = [exp.to_identifier(c.name, quoted=True) for c in columns]
    alias = exp.TableAlias(this=exp.to_identifier(ALIAS), columns=names)
    return exp.Select(
        expressions=[exp.column(n.copy(), table=ALIAS) for n in names],
        from_=exp.From(this=exp.Subquery(this=tree, alias=alias)),
    )


def _quoted(name: str) -> str:
    return exp.to_identifier(name, quoted=True).sql(DIALECT)


def _ordering(limit: GlobalLimit, columns: Sequence[Column], tag: Optional[str] = None) -> str:
    """The ORDER BY's terms, then every output column (ties), then `tag` if given."""
    terms = [
        f"{_quoted(columns[p].name)} {'DESC' if desc else 'ASC'} "
        f"NULLS {'FIRST' if first else 'LAST'}"
        for p, desc, first in limit.order
    ]
    terms += [f"{_quoted(c.name)} ASC NULLS FIRST" for c in columns]
    return ", ".join(terms + ([tag] if tag else []))


def _known_prefix(limit: GlobalLimit, delta: str, columns: Sequence[Column]) -> str:
    """P: the rows of the query's new result ranked up to the last row of the model (T) and
    the rows below its cut (B), with their counts (`_streamsql_n`), from T, B and the query's
    change (D); all of T + B + D when T held fewer than k rows or T + B was all of the query."""
    cols = ", ".join(_quoted(c.name) for c in columns)
    k, m = limit.count, limit.buffer
    net = f"SELECT {cols}, SUM({WEIGHT}) AS {WEIGHT} FROM ({delta}) GROUP BY {cols}"
    # Of the rows D inserts, only the first k (as distinct rows) can be among the first k of
    # P, and with B the first k + m + 1: one more than B keeps says that B is not the end.
    inserted = (
        f"SELECT * FROM (SELECT {cols}, {WEIGHT} FROM ({net}) WHERE {WEIGHT} > 0 "
        f"ORDER BY {_ordering(limit, columns)} LIMIT {k + m + 1 if m else k})"
    )
    deleted = f"SELECT {cols}, {WEIGHT} FROM ({net}) WHERE {WEIGHT} < 0"
    known = [TARGET] + ([BUFFER] if m else [])
    rows = (
        f"SELECT {cols}, {WEIGHT}, 0 AS _streamsql_tag FROM ({inserted}) "
        f"UNION ALL SELECT {cols}, {WEIGHT}, 0 AS _streamsql_tag FROM ({deleted}) "
        + "".join(
            f"UNION ALL SELECT {cols}, CAST(1 AS BIGINT) AS {WEIGHT}, 1 AS _streamsql_tag "
            f"FROM {relation} "
            for relation in known
        ).rstrip()
    )
    # A change's row equal to the last known row ranks before it (tag 0 < 1): a deletion of
    # that value counts against the known copies.
    ranked = (
        f"SELECT *, row_number() OVER (ORDER BY {_ordering(limit, columns, '_streamsql_tag')}) "
        f"AS _streamsql_rn FROM ({rows})"
    )
    marked = (
        "SELECT *, MAX(CASE WHEN _streamsql_tag = 1 THEN _streamsql_rn END) OVER () "
        "AS _streamsql_last, SUM(_streamsql_tag) OVER () AS _streamsql_kept "
        f"FROM ({ranked})"
    )
    everything = f"_streamsql_kept < {k}" + (f" OR {COMPLETE}" if m else "")
    return (
        f"SELECT {cols}, SUM({WEIGHT}) AS _streamsql_n FROM ({marked}) "
        f"WHERE {everything} OR _streamsql_tag = 1 OR _streamsql_rn < _streamsql_last "
        f"GROUP BY {cols} HAVING SUM({WEIGHT}) > 0"
    )


def gate(limit: GlobalLimit, delta: str, columns: Sequence[Column]) -> KeyBound:
    """The bound that says whether the step reads the query over the new inputs: NULL (it
    does not) when the model (and B) held all of the query's rows or P holds at least k
    rows."""
    k = limit.count
    everything = f"kept < {k}" + (f" OR {COMPLETE}" if limit.buffer else "")
    value = (
        f"(SELECT CASE WHEN {everything} OR COALESCE(known, 0) >= {k} THEN CAST(NULL AS INT) "
        f"ELSE 1 END FROM (SELECT COUNT(*) AS kept FROM {TARGET}) CROSS JOIN "
        f"(SELECT SUM(_streamsql_n) AS known FROM ({_known_prefix(limit, delta, columns)})))"
    )
    return KeyBound(GATE, "1", ">=", value)


def _copies(limit: GlobalLimit, delta: str, columns: Sequence[Column]) -> str:
    """P's rows, each as many times as it counts."""
    cols = ", ".join(_quoted(c.name) for c in columns)
    return (
        f"SELECT {cols} FROM ({_known_prefix(limit, delta, columns)}) AS _streamsql_prefix "
        "LATERAL VIEW explode(sequence(CAST(1 AS BIGINT), _streamsql_prefix._streamsql_n)) "
        "_streamsql_copies AS _streamsql_copy"
    )


def change_sql(limit: GlobalLimit, delta: str, new: str, columns: Sequence[Column]) -> str:
    """The model's change: its new first k rows (from P, or from the query over the new
    inputs, as `GATE` says), +1, and its rows before the step, -1."""
    cols = ", ".join(_quoted(c.name) for c in columns)
    k, order = limit.count, _ordering(limit, columns)
    first_rows = NEW_TOP if limit.buffer else f"({new})"
    parts: List[str] = [
        f"SELECT {cols}, CAST(1 AS BIGINT) AS {WEIGHT} FROM (SELECT * FROM "
        f"({_copies(limit, delta, columns)}) ORDER BY {order} LIMIT {k}) WHERE NOT {GATE}",
        f"SELECT {cols}, CAST(1 AS BIGINT) AS {WEIGHT} FROM (SELECT * FROM {first_rows} "
        f"ORDER BY {order} LIMIT {k}) WHERE {GATE}",
        f"SELECT {cols}, CAST(-1 AS BIGINT) AS {WEIGHT} FROM {TARGET}",
    ]
    return "\nUNION ALL\n".join(parts)


def new_top_sql(limit: GlobalLimit, new: str, columns: Sequence[Column]) -> str:
    """`NEW_TOP`: the first k+m+1 rows of the query over the new inputs."""
    order = _ordering(limit, columns)
    return f"SELECT * FROM ({new}) ORDER BY {order} LIMIT {limit.count + limit.buffer + 1}"


def buffer_sql(limit: GlobalLimit, delta: str, columns: Sequence[Column]) -> str:
    """The next step's B: the rows ranked k+1 to k+m+1 of P (or of `NEW_TOP`, as `GATE`
    says), each column as text (`as_text`), in their order (`_streamsql_rank`; a row
    beyond the m-th says that they are not the last of the query's rows), beside whether what
    they are ranked from is all of the query's new result (`_streamsql_all`). Always a row:
    with a NULL rank when there is none below the cut."""
    k, m, order = limit.count, limit.buffer, _ordering(limit, columns)
    texts = ", ".join(f"{as_text(c)} AS {_quoted(c.name)}" for c in columns)
    sources = (
        f"SELECT * FROM ({_copies(limit, delta, columns)}) WHERE NOT {GATE}",
        f"SELECT * FROM {NEW_TOP} WHERE {GATE}",
    )
    ranked = " UNION ALL ".join(
        f"SELECT * FROM (SELECT *, row_number() OVER (ORDER BY {order}) AS _streamsql_rank "
        f"FROM (SELECT * FROM ({source}) ORDER BY {order} LIMIT {k + m + 1}))"
        for source in sources
    )
    everything = f"{GATE} OR (SELECT COUNT(*) FROM {TARGET}) < {k} OR {COMPLETE}"
    return (
        f"SELECT {texts}, _streamsql_rank, _streamsql_all FROM "
        f"(SELECT ({everything}) AS _streamsql_all) LEFT JOIN "
        f"(SELECT * FROM ({ranked}) WHERE _streamsql_rank > {k}) ON true "
        "ORDER BY _streamsql_rank"
    )


def as_text(column: Column) -> str:
    """A column's value as text that `literal` reads back as the same value."""
    name = _quoted(column.name)
    if column.data_type.replace(" ", "").lower() == "timestamp":
        return f"CAST(unix_micros({name}) AS STRING)"
    return f"CAST({name} AS STRING)"


def literal(column: Column, text: Optional[str]) -> str:
    """The value `as_text` gave as `text`, as a SQL expression of the column's type."""
    data_type = column.data_type
    if text is None:
        return f"CAST(NULL AS {data_type})"
    quoted = string_literal(text)
    if data_type.replace(" ", "").lower() == "timestamp":
        return f"timestamp_micros(CAST({quoted} AS BIGINT))"
    return f"CAST({quoted} AS {data_type})"


def buffer_relation(columns: Sequence[Column], rows: Sequence[Sequence[Optional[str]]]) -> str:
    """B as a SELECT of literals (no row: an empty SELECT of the columns' types)."""
    names = [_quoted(c.name) for c in columns]
    if not rows:
        nulls = ", ".join(f"{literal(c, None)} AS {n}" for c, n in zip(columns, names))
        return f"SELECT {nulls} WHERE false"
    return " UNION ALL ".join(
        "SELECT " + ", ".join(f"{literal(c, v)} AS {n}" for c, v, n in zip(columns, row, names))
        for row in rows
    )


def buffer_record(
    buffer_rows: int, columns: Sequence[Column], rows: Sequence[Any]
) -> Optional[Dict[str, Any]]:
    """What the step record keeps of B, from the rows of `buffer_sql`: the first `buffer_rows`
    rows' texts, the columns they are of, and whether they end the query's result. None when
    that would take more than `MAX_BUFFER_BYTES`."""
    ranked = [row for row in rows if row["_streamsql_rank"] is not None]
    everything = bool(rows) and bool(rows[0]["_streamsql_all"])
    record = {
        "columns": [[c.name, c.data_type] for c in columns],
        "rows": [[row[c.name] for c in columns] for row in ranked[:buffer_rows]],
        "complete": everything and len(ranked) <= buffer_rows,
    }
    return record if len(json.dumps(record)) <= MAX_BUFFER_BYTES else None


def buffer_kept(
    record: Optional[Dict[str, Any]], columns: Sequence[Column]
) -> Tuple[List[List[Optional[str]]], bool]:
    """(B's rows, complete) from a step record's buffer: none, and not complete, when there
    is none or it is of other columns."""
    if not record or record.get("columns") != [[c.name, c.data_type] for c in columns]:
        return [], False
    return list(record.get("rows") or []), bool(record.get("complete"))
