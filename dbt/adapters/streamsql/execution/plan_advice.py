"""How to keep a model on a fast path: the advice `streamsql_explain` gives (explain.py) for
what its plan recomputes. Pure text, no Spark."""

from __future__ import annotations

import re
from typing import Tuple


def is_partial_recompute(note: str) -> bool:
    return "recompute" in note


def avoid_partial_recompute(note: str) -> str:
    if note.startswith("min/max"):
        return (
            "a group whose MIN or MAX a deletion (or an update) may have removed is "
            "recomputed from the inputs; inputs that only gain rows never need it"
        )
    advice = (
        "each group a step touches is recomputed from the inputs for these functions; "
        "COUNT, SUM, AVG, MIN and MAX are kept from the change alone"
    )
    if "count(distinct)" in note:
        advice += (
            "; COUNT(DISTINCT x) can be COUNT(*) over a SELECT DISTINCT of the group's "
            "columns and x in a derived table (a stage)"
        )
    return advice


# (pattern in the recompute reason, how to stay on a fast path), first match wins
RECOMPUTE_ADVICE: Tuple[Tuple[str, str], ...] = (
    (
        r"^strategy: recompute",
        "remove the config strategy: recompute (or set it to auto): the planner's plan is then "
        "used",
    ),
    (
        r"without partition by",
        "partition the window (PARTITION BY): a step then evaluates only the partitions its "
        "change touches",
    ),
    (
        r"over a range frame",
        "give the window a ROWS frame (ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW), whose "
        "ties the step breaks itself",
    ),
    (
        r"window function|named window|window clause|qualify",
        "windows with a PARTITION BY key in common are maintained (ranks, NTILE, LAG, LEAD, "
        "COUNT/SUM/AVG/MIN/MAX over any frame, FIRST_VALUE/LAST_VALUE/NTH_VALUE over ROWS), "
        "written inline in one SELECT without aggregates; compute other window functions in a "
        "model that is a table, or where the view is read",
    ),
    (
        r"^limit with offset",
        "drop the OFFSET (ORDER BY ... LIMIT k at the top of the model is maintained) and skip "
        "the first rows where the view is read",
    ),
    (
        r"^limit without order by",
        "add an ORDER BY that decides which rows are kept: ORDER BY ... LIMIT k at the top of "
        "the model is maintained",
    ),
    (
        r"orders by something the query does not select",
        "select what the ORDER BY orders by too (or order by a selected column's position)",
    ),
    (
        r"^order by .* limit over a",
        "leave the column out of the model (join it in a model that reads this one)",
    ),
    (
        r"^(limit|offset|fetch) ",
        "put ORDER BY ... LIMIT k at the top of a model of its own (maintained), keep the top "
        "rows per partition instead (ROW_NUMBER() OVER (PARTITION BY ... ORDER BY ...) "
        "filtered by <= k in the query above it), or apply the LIMIT where the view is read",
    ),
    (
        r"not in \(subquery\) over several columns|correlated not in",
        "write it as NOT EXISTS correlated by equalities (NOT EXISTS ignores NULLs where NOT IN "
        "does not: check that they cannot occur)",
    ),
    (
        r"without an equality",
        "add an equality (= or <=>) between the two sides: to the join's ON, or to the "
        "subquery's WHERE",
    ),
    (
        r"(in \(subquery\)|exists) other than",
        "AND the condition into the WHERE clause where that keeps its meaning, or write it as a "
        "LEFT SEMI / LEFT ANTI JOIN with an equality",
    ),
    (
        r"scalar subquery",
        "join the subquery instead (a correlated one as a GROUP BY of its correlation keys, "
        "joined on them): an aggregate in a joined derived table is maintained as a stage",
    ),
    (
        r"nondeterministic function",
        "compute the value outside the model: in its source, in a model that reads it, or pass a "
        "constant with var()",
    ),
    (
        r"user-defined function",
        "use Spark's built-in functions, or apply the function where the view is read",
    ),
    (r"parenthesized join", "write the joins one after another, without parentheses"),
    (
        r"^(intersect|except).* repeat a column name",
        "give each column of both sides a name of its own (`select a, a as a2 ...`)",
    ),
    (r"group by all", "list the GROUP BY expressions"),
    (
        r"grouping sets|rollup|cube",
        "move the ROLLUP / CUBE / GROUPING SETS to the top block of the model (a model of its "
        "own), where each grouping set is a stage; or one GROUP BY per grouping, as a UNION ALL",
    ),
    (r"distinct on", "use ROW_NUMBER() OVER (PARTITION BY ...) = 1 in the query above it"),
    (
        r"distinct over an aggregate",
        "drop the DISTINCT (a GROUP BY's rows are distinct already) or apply it in a model that "
        "reads this one",
    ),
    (
        r"merges rows across changes",
        "use window() (tumbling or hopping windows), which are maintained",
    ),
    (
        r"listagg|string_agg",
        "collect_list() (recomputed for changed groups only) with array_join() in a projection "
        "above it",
    ),
    (
        r"below the top of the query",
        "move the block into a derived table or CTE that the rest of the query joins or "
        "aggregates: it is then maintained as a stage",
    ),
    (r"reads no input", "the query reads no table, so no step ever changes it"),
    (r"sqlglot cannot parse", "rewrite the construct that sqlglot's Spark dialect cannot parse"),
    (
        r"tablesample|pivot|time travel|lateral subquery|recursive cte",
        "it has no incremental form: a model that must be rebuilt each run costs less as a table "
        "(no diff)",
    ),
)


def avoid_recompute(why: str) -> str:
    """How to keep a model on a fast path, for the construct a recompute plan names."""
    lowered = why.lower()
    for pattern, advice in RECOMPUTE_ADVICE:
        if re.search(pattern, lowered):
            return advice
    return "see docs/sql-support.md for what the fast paths maintain"
