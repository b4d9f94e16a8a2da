"""The SQL dialect the planner reads and writes: sqlglot's Spark, where it reads as Spark 4 does.

The planner parses the model's SQL, transforms the tree and renders Spark SQL from it, so every
place where sqlglot's reading of a literal differs from Spark's own parser changes what a query
means without an error. This dialect overrides only those places (tests/functional/
test_literal_meaning.py asks Spark for the value of each form both ways):

- a quote doubled inside a string of the same quotes is one quote (`'O''Brien'` is O'Brien,
  `"a""b"` is a"b); sqlglot's Spark read it as two adjacent literals (`'O' 'Brien'`, OBrien);
- `0x1F` is a name, as Spark reads it (identifiers may start with a digit); sqlglot's Spark
  read it as the binary literal X'1F'.

The planner also checks, for each model, that Spark gives the literals of the rendered SQL the
values it gives those of the model's own text (`literal_regions`, checked in
execution/pipeline/meaning.py), so a difference not listed here sends the model to a recompute
instead of a wrong result.
"""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Sequence

import sqlglot
from sqlglot.dialects.spark import Spark
from sqlglot.errors import SqlglotError
from sqlglot.tokenizer_core import TokenizerCore
from sqlglot.tokens import Token, TokenType


def string_literal(text: str) -> str:
    """`text` as a Spark SQL string literal that Spark reads back as `text`: a backslash escapes
    the next character in Spark's literals, so backslashes are escaped as well as quotes."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


class _SparkTokenizerCore(TokenizerCore):
    __slots__ = ()

    def _scan_hex(self) -> None:
        # `0x1F`: Spark's lexer has no hexadecimal numbers; it reads a name that starts with a
        # digit. Binary literals are `X'1F'` (HEX_STRINGS, scanned as strings).
        self._advance()
        self._extract_value()
        self._add(TokenType.IDENTIFIER, self.sql[self._start : self._current])


class StreamSQLSpark(Spark):
    """Spark 4 SQL as Spark's parser reads it (see the module docstring)."""

    class Tokenizer(Spark.Tokenizer):
        # A backslash escapes the next character; a doubled quote is the quote itself (Spark 4's
        # lexer, in strings of either quote). The backslash comes first: the generator escapes
        # with it.
        STRING_ESCAPES = ["\\", "'", '"']

        def _init_core(self) -> TokenizerCore:
            core = super()._init_core()
            core.__class__ = _SparkTokenizerCore
            return core


# The name sqlglot registers the dialect under (its class name, lower case).
NAME = "streamsqlspark"

# Tokens whose text is a literal value: a run of them next to each other is one value in Spark
# (adjacent strings are concatenated).
_LITERAL_TOKENS = {
    TokenType.STRING,
    TokenType.RAW_STRING,
    TokenType.NATIONAL_STRING,
    TokenType.HEX_STRING,
    TokenType.BIT_STRING,
    TokenType.BYTE_STRING,
    TokenType.NUMBER,
}
_STRING_TOKENS = _LITERAL_TOKENS - {TokenType.NUMBER}


class LiteralRegion(NamedTuple):
    """A stretch of the model's SQL text that Spark reads as one literal value."""

    text: str  # the model's text, exactly as written
    start: int  # its position in the SQL


def literal_regions(sql: str) -> List[LiteralRegion]:
    """The literals of `sql` as its text has them: each string or number, adjacent strings
    (`'a' 'b'`, `'O''Brien'` as another reader might split it) taken together as the one value
    Spark makes of them. A number's type suffix (`1L`, `1.5BD`)
    belongs to the number.

    Raises:
        sqlglot.errors.TokenError: the text cannot be tokenized.
    """
    tokens = StreamSQLSpark().tokenize(sql)
    regions: List[LiteralRegion] = []
    run: List[Token] = []

    def close() -> None:
        if run:
            start, end = run[0].start, run[-1].end
            regions.append(LiteralRegion(sql[start : end + 1], start))
            run.clear()

    for token in tokens:
        if token.token_type in _STRING_TOKENS and run and run[-1].token_type in _STRING_TOKENS:
            run.append(token)
        elif token.token_type in _LITERAL_TOKENS:
            close()
            run.append(token)
        elif run and token.start == run[-1].start:
            # the cast sqlglot makes of a number's suffix (`1L`: 1 :: BIGINT) has its span
            continue
        else:
            close()
    close()
    return regions


class LiteralReading(NamedTuple):
    """A literal of the model's text and what the planner writes for it."""

    text: str  # as the model's SQL has it
    rendered: str  # as the planner's SQL has it (sqlglot's reading, written back)


def changed_readings(sql: str) -> List[LiteralReading]:
    """The literals of `sql` that the planner writes differently from the model's text (`1L` as
    `CAST(1 AS BIGINT)`, `"x"` as `'x'`), once each: Spark must give both the same value. A
    literal written back as it was needs no check, and one sqlglot cannot read alone comes back
    with `rendered` empty (it cannot be checked, so it counts as a difference).

    Raises:
        sqlglot.errors.TokenError: the text cannot be tokenized.
    """
    readings: Dict[str, LiteralReading] = {}
    for region in literal_regions(sql):
        if region.text in readings:
            continue
        try:
            rendered = sqlglot.parse_one(f"SELECT {region.text}", read=NAME).selects[0].sql(NAME)
        except SqlglotError:
            rendered = ""
        if rendered != region.text:
            readings[region.text] = LiteralReading(region.text, rendered)
    return list(readings.values())


def readings_probe(readings: Sequence[LiteralReading]) -> str:
    """One SELECT of a boolean per reading: whether Spark gives the text and its rendering the
    same type and value (`<=>`: NULL and NaN equal themselves). Runs no Spark job."""
    checks = [
        f"typeof({r.text}) = typeof({r.rendered}) AND ({r.text}) <=> ({r.rendered}) AS `r{i}`"
        for i, r in enumerate(readings)
    ]
    return "SELECT " + ", ".join(checks)
