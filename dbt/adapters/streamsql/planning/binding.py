"""From the model's compiled SQL to a query whose tables are bound to the model's inputs.

Two products, and a third for readers outside a step:

- `bind_text` keeps the user's SQL text as written and only swaps each input reference for a
  placeholder (used by recompute plans: what runs is exactly what the user wrote);
- `pinned_text` keeps it too and only pins each input reference to a version (the query as of
  a step, for the generic test `matches_recompute`);
- `bind_tree` builds the AST the fast paths transform: CTEs inlined as derived tables, every input
  reference renamed to `_streamsql_inputs.i<k>` (keeping the alias the query uses), stars expanded
  and every column qualified with its relation's alias (sqlglot's `qualify`).
"""

from __future__ import annotations

from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, SqlglotError
from sqlglot.optimizer.qualify import qualify
from sqlglot.tokens import TokenType

from dbt.adapters.streamsql.planning.errors import PlanningError, RecomputeRequired
from dbt.adapters.streamsql.planning.plan import DIALECT, InputTable

INPUT_DB = "_streamsql_inputs"


def parse_query(sql: str) -> exp.Query:
    """Parses one SELECT statement (leading comments and a trailing semicolon allowed).

    Raises:
        RecomputeRequired: sqlglot cannot parse the SQL.
        PlanningError: the SQL is not exactly one query.
    """
    try:
        dialect = Dialect.get_or_raise(DIALECT)
        tokens = dialect.tokenize(sql)
        for token, following in zip(tokens, tokens[1:]):
            # `GROUP BY window(ts, ...)`: sqlglot reads WINDOW there as a named-window clause.
            if token.token_type == TokenType.WINDOW and following.token_type == TokenType.L_PAREN:
                token.token_type = TokenType.VAR
        statements = [s for s in dialect.parser().parse(tokens, sql) if s is not None]
    except (ParseError, SqlglotError) as error:
        raise RecomputeRequired(f"sqlglot cannot parse the query ({_first_line(error)})") from error
    if len(statements) != 1:
        raise PlanningError(f"expected one SELECT statement, found {len(statements)}")
    query = statements[0]
    if not isinstance(query, exp.Query):
        raise PlanningError(f"expected a SELECT statement, found {query.key.upper()}")
    return query


def input_index(table: exp.Table, inputs: Sequence[InputTable]) -> int:
    """The position in `inputs` of the table a reference names (matched on its last two parts).

    Raises:
        PlanningError: no input, or more than one, matches.
    """
    parts = [p.name.lower() for p in table.parts]
    wanted = parts[-2:]
    matches = [
        i
        for i, table_input in enumerate(inputs)
        if table_input.name.lower().split(".")[-len(wanted) :] == wanted
    ]
    reference = ".".join(parts)
    if not matches:
        known = ", ".join(t.name for t in inputs) or "none"
        raise PlanningError(
            f"the query reads `{reference}`, which is not among the model's inputs ({known})"
        )
    if len(matches) > 1:
        raise PlanningError(
            f"`{reference}` matches several inputs: {', '.join(inputs[i].name for i in matches)}"
        )
    return matches[0]


def _is_cte_reference(table: exp.Table) -> bool:
    if table.args.get("db") or table.args.get("catalog"):
        return False
    name = table.name.lower()
    node = table.parent
    while node is not None:
        with_ = node.args.get("with_") if isinstance(node, exp.Query) else None
        if with_ is not None and any(
            cte.alias_or_name.lower() == name for cte in with_.expressions
        ):
            return True
        node = node.parent
    return False


def input_references(query: exp.Expression) -> List[exp.Table]:
    """Table nodes that name a stored table (not a CTE, not a table-valued function)."""
    return [
        table
        for table in query.find_all(exp.Table)
        if isinstance(table.this, exp.Identifier) and not _is_cte_reference(table)
    ]


def bind_text(
    sql: str, query: exp.Query, inputs: Sequence[InputTable], placeholder: Callable[[int], str]
) -> str:
    """The user's SQL text with every input reference replaced by `placeholder(i)`.

    A reference without an alias keeps its table name as alias (`demo.t` becomes
    `__streamsql_new_0__ AS t`) so qualified columns still resolve. The trailing semicolon is
    removed.
    """
    edits: List[Tuple[int, int, str]] = []
    for table in input_references(query):
        index = input_index(table, inputs)
        parts = table.parts
        start, end = parts[0].meta.get("start"), parts[-1].meta.get("end")
        if start is None or end is None:
            raise PlanningError(f"cannot locate `{table.sql(DIALECT)}` in the model's SQL")
        replacement = placeholder(index)
        if not table.alias:
            replacement += f" AS {exp.to_identifier(table.name).sql(DIALECT)}"
        edits.append((start, end + 1, replacement))
    text = sql
    for start, end, replacement in sorted(set(edits), reverse=True):
        text = text[:start] + replacement + text[end:]
    return text.strip().rstrip(";").rstrip()


def pinned_text(sql: str, versions: Mapping[str, int]) -> str:
    """The user's SQL text with every reference to a table of `versions` (normalized name ->
    Delta version: a step record's `input_versions`) read at that version (`VERSION AS OF n`
    after its name, before its alias). Tables not in `versions`, and references that name a
    version or a time already, are left as written; so is all the rest of the text.

    Raises:
        RecomputeRequired: sqlglot cannot parse the SQL.
        PlanningError: the SQL is not one query, or a reference cannot be located in it.
    """
    wanted = {name.lower(): int(version) for name, version in versions.items()}
    edits: List[Tuple[int, str]] = []
    for table in input_references(parse_query(sql)):
        parts = [part.name.lower() for part in table.parts]
        version = wanted.get(".".join(parts[-2:]))
        if version is None or table.args.get("version") is not None:
            continue
        end = table.parts[-1].meta.get("end")
        if end is None:
            raise PlanningError(f"cannot locate `{table.sql(DIALECT)}` in the model's SQL")
        edits.append((end + 1, f" VERSION AS OF {version}"))
    text = sql
    for position, pin in sorted(set(edits), reverse=True):
        text = text[:position] + pin + text[position:]
    return text


def _depth(node: exp.Expression) -> int:
    depth = 0
    while node.parent is not None:
        node, depth = node.parent, depth + 1
    return depth


def inline_ctes(query: exp.Query) -> exp.Query:
    """Replaces every CTE reference by a derived table holding the CTE's body (innermost first).

    Raises:
        RecomputeRequired: a recursive CTE.
    """
    for with_ in sorted(query.find_all(exp.With), key=_depth, reverse=True):
        if with_.args.get("recursive"):
            raise RecomputeRequired("recursive CTE is not maintained incrementally")
        owner = with_.parent
        ctes = list(with_.expressions)
        with_.pop()
        for position, cte in enumerate(ctes):
            name = cte.alias_or_name.lower()
            cte_alias = cte.args.get("alias")
            column_names = list(cte_alias.columns) if cte_alias is not None else []
            for scope in [later.this for later in ctes[position + 1 :]] + [owner]:
                for table in list(scope.find_all(exp.Table)):
                    if (
                        table.args.get("db")
                        or table.args.get("catalog")
                        or table.name.lower() != name
                    ):
                        continue
                    alias = table.args.get("alias")
                    alias = (
                        alias.copy()
                        if alias is not None
                        else exp.TableAlias(this=exp.to_identifier(cte.alias))
                    )
                    if column_names and not alias.columns:
                        alias.set("columns", [c.copy() for c in column_names])
                    table.replace(exp.Subquery(this=cte.this.copy(), alias=alias))
    return query


def input_table_name(index: int) -> str:
    return f"i{index}"


def bound_input(table: exp.Expression) -> Optional[int]:
    """The input position of a table node of a bound tree, None if it is not an input."""
    if (
        isinstance(table, exp.Table)
        and table.text("db") == INPUT_DB
        and not table.args.get("catalog")
    ):
        return int(table.name[1:])
    return None


def bind_tree(query: exp.Query, inputs: Sequence[InputTable]) -> exp.Query:
    """A copy of `query` ready for the fast paths (see the module docstring).

    Raises:
        PlanningError: the query reads a table that is not an input.
        RecomputeRequired: sqlglot cannot resolve the query's columns.
    """
    tree = inline_ctes(query.copy())
    for table in list(tree.find_all(exp.Table)):
        if not isinstance(table.this, exp.Identifier):
            continue
        index = input_index(table, inputs)
        if not table.alias:
            table.set("alias", exp.TableAlias(this=exp.to_identifier(table.name)))
        table.set("catalog", None)
        table.set("db", exp.to_identifier(INPUT_DB))
        table.set("this", exp.to_identifier(input_table_name(index)))
    schema: Dict[str, Dict[str, Dict[str, str]]] = {
        INPUT_DB: {
            input_table_name(i): {column.name.lower(): "string" for column in table_input.columns}
            for i, table_input in enumerate(inputs)
        }
    }
    try:
        return qualify(
            tree, schema=schema, dialect=DIALECT, quote_identifiers=False, identify=False
        )
    except SqlglotError as error:
        raise RecomputeRequired(
            f"cannot resolve the query's columns ({_first_line(error)})"
        ) from error


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
