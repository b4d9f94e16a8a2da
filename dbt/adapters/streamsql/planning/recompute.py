"""The always-correct plan: evaluate the model over the new inputs and diff it with the target.

The model's SQL text is kept as the user wrote it (only input references become placeholders), so
what runs is exactly the user's query, whatever sqlglot thinks of it.
"""

from __future__ import annotations

import re
from typing import List, Optional, Sequence, Tuple

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import SqlglotError
from sqlglot.tokens import TokenType

from dbt.adapters.streamsql.planning.binding import bind_text
from dbt.adapters.streamsql.planning.errors import PlanningError
from dbt.adapters.streamsql.planning.plan import (
    DIALECT,
    TARGET,
    WEIGHT,
    Column,
    InputTable,
    new_input,
)


def recompute_change_sql(
    sql: str,
    query: Optional[exp.Query],
    inputs: Sequence[InputTable],
    output_columns: Sequence[Column],
) -> str:
    """(model over the new inputs, weight +1) UNION ALL (`__streamsql_target__`, weight -1).

    `query` is the parsed model, or None when sqlglot could not parse it (input references are
    then found by tokens).
    """
    model, columns = _model_over_new_inputs(sql, query, inputs, output_columns)
    # The model text is embedded verbatim: its own line, so a trailing `--` comment ends there.
    return (
        f"SELECT {columns}, CAST(1 AS BIGINT) AS {WEIGHT}\n"
        f"FROM (\n{model}\n) AS _streamsql_model({columns})\n"
        f"UNION ALL\n"
        f"SELECT {columns}, CAST(-1 AS BIGINT) AS {WEIGHT}\n"
        f"FROM {TARGET}"
    )


def recompute_rows_sql(
    sql: str,
    query: Optional[exp.Query],
    inputs: Sequence[InputTable],
    output_columns: Sequence[Column],
) -> str:
    """The model's rows over the new inputs, without weights: what a step that writes the
    model whole writes (`recompute_change_sql`'s first half)."""
    model, columns = _model_over_new_inputs(sql, query, inputs, output_columns)
    return f"SELECT {columns}\nFROM (\n{model}\n) AS _streamsql_model({columns})"


def _model_over_new_inputs(
    sql: str,
    query: Optional[exp.Query],
    inputs: Sequence[InputTable],
    output_columns: Sequence[Column],
) -> Tuple[str, str]:
    """The model's text with its inputs' new placeholders, and its output column list."""
    if query is not None:
        model = bind_text(sql, query, inputs, new_input)
    else:
        model = _bind_text_by_tokens(sql, inputs)
    columns = ", ".join(exp.to_identifier(c.name).sql(DIALECT) for c in output_columns)
    return model, columns


_NAME_TOKENS = (TokenType.VAR, TokenType.IDENTIFIER)


def _bind_text_by_tokens(sql: str, inputs: Sequence[InputTable]) -> str:
    """Replaces `[catalog.]schema.table` token runs naming an input by its new placeholder."""
    try:
        tokens = Dialect.get_or_raise(DIALECT).tokenize(sql)
    except SqlglotError as error:
        raise PlanningError(f"cannot read the model's SQL: {error}") from error
    wanted = {tuple(t.name.lower().split(".")[-2:]): i for i, t in enumerate(inputs)}
    edits: List[Tuple[int, int, str]] = []
    position = 0
    while position < len(tokens):
        run_end = position
        parts = []
        if tokens[position].token_type in _NAME_TOKENS and (
            position == 0 or tokens[position - 1].token_type != TokenType.DOT
        ):
            parts = [tokens[position].text]
            while (
                run_end + 2 < len(tokens)
                and tokens[run_end + 1].token_type == TokenType.DOT
                and tokens[run_end + 2].token_type in _NAME_TOKENS
            ):
                run_end += 2
                parts.append(tokens[run_end].text)
        key = tuple(p.lower() for p in parts[-2:])
        if 2 <= len(parts) <= 3 and key in wanted:
            following = tokens[run_end + 1] if run_end + 1 < len(tokens) else None
            replacement = new_input(wanted[key])
            has_alias = following is not None and (
                following.token_type in _NAME_TOKENS or following.token_type == TokenType.ALIAS
            )
            if not has_alias and (following is None or following.token_type != TokenType.L_PAREN):
                replacement += f" AS {exp.to_identifier(parts[-1]).sql(DIALECT)}"
            edits.append((tokens[position].start, tokens[run_end].end + 1, replacement))
            position = run_end + 1
            continue
        position = max(run_end, position) + 1
    text = sql
    for start, end, replacement in sorted(edits, reverse=True):
        text = text[:start] + replacement + text[end:]
    return re.sub(r";\s*$", "", text.strip())
