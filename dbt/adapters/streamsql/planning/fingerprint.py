"""A model's query in canonical form: what its fingerprint is taken of, clause by clause.

A step refuses to continue a model whose query changed (its table would no longer match it).
What counts as a change is the query's meaning, not its text: the query is parsed and printed
again, without comments, line breaks or indentation and with keywords in one case, so adding a
comment or re-indenting a model needs no `--full-refresh`. Names keep their case, literals and
every clause their text. A query the parser cannot read is compared as text, whitespace
collapsed (what every version before this one did).

`clause_texts` splits the canonical query into its top-level clauses, so that the error for a
changed query can say which clause changed.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import sqlglot
from sqlglot import exp

from dbt.adapters.streamsql.planning.plan import DIALECT

# How the clauses of a SELECT are named in messages (sqlglot's argument names, with and without
# the trailing underscore some versions use).
CLAUSE_NAMES = {
    "with": "WITH clause",
    "expressions": "SELECT list",
    "distinct": "DISTINCT",
    "from": "FROM clause",
    "joins": "joins",
    "laterals": "LATERAL VIEWs",
    "where": "WHERE clause",
    "group": "GROUP BY clause",
    "having": "HAVING clause",
    "qualify": "QUALIFY clause",
    "windows": "WINDOW clause",
    "order": "ORDER BY clause",
    "sort": "SORT BY clause",
    "cluster": "CLUSTER BY clause",
    "distribute": "DISTRIBUTE BY clause",
    "limit": "LIMIT",
    "offset": "OFFSET",
    "this": "first query of the set operation",
    "expression": "second query of the set operation",
}


def parsed(sql: str) -> Optional[exp.Expression]:
    """The query as sqlglot reads it, or None when it cannot (or reads it only as a command)."""
    try:
        tree = sqlglot.parse_one(sql, read=DIALECT)
    except Exception:
        return None
    if tree is None or isinstance(tree, exp.Command):
        return None
    return tree


def whitespace_collapsed(sql: str) -> str:
    return " ".join(sql.split())


def canonical_sql(sql: str) -> str:
    """The query printed again without comments or layout; the text, whitespace collapsed,
    when it cannot be parsed."""
    tree = parsed(sql)
    if tree is None:
        return whitespace_collapsed(sql)
    return tree.sql(dialect=DIALECT, comments=False)


def clause_texts(sql: str) -> Dict[str, str]:
    """The canonical text of each top-level clause, by its name in messages (empty when the
    query cannot be parsed)."""
    tree = parsed(sql)
    return {} if tree is None else _clauses(tree)


def canonical_form(sql: str) -> Tuple[str, Dict[str, str]]:
    """`canonical_sql` and `clause_texts` of `sql`, from one parse (a step records both; a
    run that only compares the query prints no clause)."""
    tree = parsed(sql)
    if tree is None:
        return whitespace_collapsed(sql), {}
    return tree.sql(dialect=DIALECT, comments=False), _clauses(tree)


def _clauses(tree: exp.Expression) -> Dict[str, str]:
    clauses: Dict[str, str] = {}
    for key, value in tree.args.items():
        if value is None or value is False or value == []:
            continue
        name = CLAUSE_NAMES.get(key.rstrip("_"), key.rstrip("_"))
        if isinstance(value, list):
            text = ", ".join(v.sql(dialect=DIALECT, comments=False) for v in value)
        elif isinstance(value, exp.Expression):
            text = value.sql(dialect=DIALECT, comments=False)
        else:
            text = str(value)
        clauses[name] = text
    return clauses
