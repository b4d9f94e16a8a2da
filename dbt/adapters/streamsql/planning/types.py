"""What the planner can tell about the Spark type of an expression without asking Spark.

Only what is certain: column references (through derived tables that pass a column through),
CASTs and numeric literals. Anything else is unknown (None); callers then fall back to a type the
executor reads with DESCRIBE QUERY, or to recomputing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from sqlglot import exp

from dbt.adapters.streamsql.planning.binding import bound_input
from dbt.adapters.streamsql.planning.plan import DIALECT, InputTable

INTEGRAL, FRACTIONAL, DECIMAL = "integral", "fractional", "decimal"

_INTEGRAL_TYPES = {"tinyint", "byte", "smallint", "short", "int", "integer", "bigint", "long"}
_FRACTIONAL_TYPES = {"float", "real", "double"}
_DECIMAL = re.compile(r"^(?:decimal|dec|numeric)\s*(?:\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?$")


def numeric_kind_of_type(data_type: Optional[str]) -> Optional[str]:
    if data_type is None:
        return None
    normalized = data_type.strip().lower()
    if normalized in _INTEGRAL_TYPES:
        return INTEGRAL
    if normalized in _FRACTIONAL_TYPES:
        return FRACTIONAL
    if _DECIMAL.match(normalized):
        return DECIMAL
    return None


def decimal_precision_scale(data_type: str) -> Optional[tuple]:
    """(precision, scale) of a decimal type string; Spark's default decimal is (10, 0)."""
    match = _DECIMAL.match(data_type.strip().lower())
    if not match:
        return None
    precision = int(match.group(1) or 10)
    scale = int(match.group(2) or 0)
    return precision, scale


def sum_type(data_type: Optional[str], kind: Optional[str]) -> str:
    """The type of Spark's SUM over a value of `data_type` (or only of a numeric kind); "" if
    unknown."""
    kind = numeric_kind_of_type(data_type) or kind
    if kind == INTEGRAL:
        return "bigint"
    if kind == FRACTIONAL:
        return "double"
    if kind == DECIMAL and data_type:
        precision, scale = decimal_precision_scale(data_type)
        return f"decimal({min(38, precision + 10)},{scale})"
    return ""


# Spark's optimizer (its DecimalAggregates rule) averages a decimal of at most this many digits
# once 4 are added (the AVG's type) through DOUBLE: the mean of its unscaled values, divided by
# 10^scale, cast to the AVG's type. Wider decimals are divided exactly.
_MAX_DOUBLE_DIGITS = 15


def decimal_average(total: exp.Expression, count: exp.Expression, data_type: str) -> exp.Expression:
    """Spark's AVG of a `data_type` decimal whose non-NULL values sum to `total` (in SUM's type,
    exact) and number `count` (> 0), rounded as Spark rounds it.

    Over few digits (precision + 4 <= 15) Spark averages the unscaled values as DOUBLE: their
    sum as a DOUBLE (exact below 2^53, as `total` turned into its unscaled BIGINT is), divided
    by the count, then by 10^scale, cast to DECIMAL(p + 4, s + 4); over more it divides the
    exact sum by the count as DECIMAL(20,0). An exact division rounds some means the other way
    (510.9794375 is 510.979438 exactly, 510.979437 through a DOUBLE): the view must round as
    the query does.
    """
    precision, scale = decimal_precision_scale(data_type)
    result = exp.DataType.build(
        f"decimal({min(38, precision + 4)},{min(38, scale + 4)})", dialect=DIALECT
    )
    if precision + 4 <= _MAX_DOUBLE_DIGITS:
        double = exp.DataType.build("double")
        power = exp.Literal.number(10**scale)
        unscaled = exp.cast(exp.Mul(this=exp.paren(total), expression=power), "bigint")
        mean = exp.Div(this=exp.cast(unscaled, double), expression=exp.cast(count, double))
        quotient: exp.Expression = exp.Div(
            this=exp.paren(mean), expression=exp.cast(power.copy(), double)
        )
    else:
        quotient = exp.Div(
            this=total,
            expression=exp.cast(count, exp.DataType.build("decimal(20,0)", dialect=DIALECT)),
        )
    return exp.cast(quotient, result)


class TypeOracle:
    """Answers type questions about the expressions of one query tree bound to `inputs`."""

    def __init__(self, inputs: Sequence[InputTable]):
        self._inputs = inputs

    def type_of(self, node: exp.Expression) -> Optional[str]:
        """The exact Spark type of `node`, or None."""
        if isinstance(node, exp.Paren):
            return self.type_of(node.this)
        if isinstance(node, exp.Column):
            return self._column_type(node)
        if isinstance(node, exp.Cast) and not isinstance(node, exp.TryCast):
            return node.to.sql(DIALECT).lower()
        if isinstance(node, exp.Anonymous) and node.name.lower() == "window" and node.expressions:
            # Spark's tumbling/hopping window: a struct of the bounds, in the time column's type
            time_type = self.type_of(node.expressions[0])
            if time_type in ("timestamp", "timestamp_ntz"):
                return f"struct<start:{time_type},end:{time_type}>"
        return None

    def numeric_kind(self, node: exp.Expression) -> Optional[str]:
        """INTEGRAL, FRACTIONAL or DECIMAL when `node` is certainly numeric, else None."""
        if isinstance(node, (exp.Paren, exp.Neg)):
            return self.numeric_kind(node.this)
        if isinstance(node, exp.Literal) and not node.is_string:
            text = node.this.lower()
            return FRACTIONAL if "e" in text else DECIMAL if "." in text else INTEGRAL
        if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div)):
            kinds = {self.numeric_kind(node.this), self.numeric_kind(node.expression)}
            if None in kinds:
                return None
            if DECIMAL in kinds:
                return DECIMAL
            if FRACTIONAL in kinds or isinstance(node, exp.Div):
                return FRACTIONAL
            return INTEGRAL
        return numeric_kind_of_type(self.type_of(node))

    def _column_type(self, column: exp.Column) -> Optional[str]:
        select = column.find_ancestor(exp.Select)
        while select is not None:
            source = _source_named(select, column.table)
            if source is not None:
                return self._source_column_type(source, column.name)
            select = select.find_ancestor(exp.Select)
        return None

    def _source_column_type(self, source: exp.Expression, name: str) -> Optional[str]:
        index = bound_input(source)
        if index is not None:
            for input_column in self._inputs[index].columns:
                if input_column.name.lower() == name.lower():
                    return input_column.data_type
            return None
        if isinstance(source, exp.Subquery) and isinstance(source.this, exp.Select):
            alias = source.args.get("alias")
            if alias is not None and alias.columns:
                return None
            for projection in source.this.expressions:
                if projection.alias_or_name.lower() == name.lower():
                    inner = projection.unalias()
                    return (
                        self.type_of(inner) if isinstance(inner, (exp.Column, exp.Cast)) else None
                    )
        return None


def _source_named(select: exp.Select, alias: str) -> Optional[exp.Expression]:
    from_ = select.args.get("from_")
    candidates = ([from_.this] if from_ is not None else []) + [
        j.this for j in select.args.get("joins") or []
    ]
    for candidate in candidates:
        if candidate.alias_or_name == alias:
            return candidate
    return None


# -- comparing values of any type -----------------------------------------------------------------
#
# A step matches rows and groups by their values: `<=>` in joins and MERGEs, GROUP BY to net a
# change. Spark compares neither maps nor VARIANT that way (nor arrays or structs holding one),
# so such a value is compared by a form of it Spark can compare, equal for two values exactly
# when the values are equal (`comparable`).


@dataclass(frozen=True)
class SparkType:
    """A Spark type as `DESCRIBE` prints it, taken apart (`parse_type`)."""

    # "map", "array", "struct", or an atomic type as printed, in lower case ("decimal(10,2)")
    name: str
    # a map's key and value types, an array's element type, a struct's field types
    children: Tuple["SparkType", ...] = ()
    fields: Tuple[str, ...] = ()  # a struct's field names, as printed


class UncomparableType(ValueError):
    """A type (or a part of it) that Spark cannot compare and that has no comparable form."""

    def __init__(self, data_type: str, part: str):
        super().__init__(f"{data_type} holds {part}, which Spark cannot compare")
        self.data_type, self.part = data_type, part


# Atomic types Spark compares with `<=>` (by their first word). "interval" alone is the legacy
# CALENDAR INTERVAL, which it does not; ANSI intervals ("interval day to second") it does.
_COMPARED_ATOMS = {
    "boolean", "tinyint", "byte", "smallint", "short", "int", "integer", "bigint", "long",
    "float", "real", "double", "decimal", "dec", "numeric", "string", "char", "varchar",
    "binary", "date", "timestamp", "timestamp_ntz", "timestamp_ltz", "time", "void",
}  # fmt: skip
_ATOM_WORD = re.compile(r"[a-z_]+")
_FIELD_OPTIONS = re.compile(r"(\s+not\s+null|\s+comment\s+'.*')+$", re.DOTALL)


def parse_type(data_type: str) -> SparkType:
    """`data_type` (as DESCRIBE prints it: `map<string,array<struct<a:int,b:map<string,int>>>>`)
    taken apart. Struct field names are read as printed (up to the `:`), or between backticks.

    Raises:
        ValueError: the text is not a type.
    """
    parsed, end = _parse_type(data_type, 0)
    if data_type[end:].strip():
        raise ValueError(f"unexpected {data_type[end:]!r} after the type in {data_type!r}")
    return parsed


def _parse_type(text: str, at: int) -> Tuple[SparkType, int]:
    at = _skip_spaces(text, at)
    lowered = text.lower()
    for name in ("map", "array", "struct"):
        opening = _skip_spaces(text, at + len(name))
        if lowered.startswith(name, at) and text[opening : opening + 1] == "<":
            at = opening + 1
            if name == "struct":
                return _parse_struct(text, at)
            children = []
            while True:
                child, at = _parse_type(text, at)
                children.append(child)
                at = _skip_spaces(text, at)
                if text[at : at + 1] == ",":
                    at += 1
                    continue
                return SparkType(name, tuple(children)), _expect(text, at, ">")
    # an atomic type: up to the next `,` or `>` outside parentheses and quotes
    depth, quoted, start = 0, False, at
    while at < len(text) and (depth or quoted or text[at] not in ",>"):
        if text[at] == "'":
            quoted = not quoted
        elif not quoted:
            depth += {"(": 1, ")": -1}.get(text[at], 0)
        at += 1
    # what DDL may add to a struct's field (NOT NULL, COMMENT '...') says nothing of its values
    atom = _FIELD_OPTIONS.sub("", text[start:at].strip().lower())
    if not atom or depth:
        raise ValueError(f"no type at position {start} of {text!r}")
    return SparkType(atom), at


def _parse_struct(text: str, at: int) -> Tuple[SparkType, int]:
    names: List[str] = []
    children: List[SparkType] = []
    at = _skip_spaces(text, at)
    while text[at : at + 1] != ">":
        if text[at : at + 1] == "`":
            close = at + 1
            while True:
                close = text.index("`", close)
                if text[close + 1 : close + 2] != "`":
                    break
                close += 2
            name, at = text[at + 1 : close].replace("``", "`"), close + 1
            at = _expect(text, _skip_spaces(text, at), ":")
        else:
            colon = text.find(":", at)
            if colon < 0:
                raise ValueError(f"a struct field without a type in {text!r}")
            name, at = text[at:colon].strip(), colon + 1
        child, at = _parse_type(text, at)
        at = _skip_field_options(text, at)
        names.append(name)
        children.append(child)
        at = _skip_spaces(text, at)
        if text[at : at + 1] == ",":
            at = _skip_spaces(text, at + 1)
        elif text[at : at + 1] != ">":
            raise ValueError(f"expected ',' or '>' at position {at} of {text!r}")
    return SparkType("struct", tuple(children), tuple(names)), at + 1


def _skip_field_options(text: str, at: int) -> int:
    """Past a field's NOT NULL and COMMENT '...' after a map, array or struct type."""
    quoted = False
    while at < len(text) and (quoted or text[at] not in ",>"):
        if text[at] == "'":
            quoted = not quoted
        at += 1
    return at


def _skip_spaces(text: str, at: int) -> int:
    while at < len(text) and text[at].isspace():
        at += 1
    return at


def _expect(text: str, at: int, char: str) -> int:
    if text[at : at + 1] != char:
        raise ValueError(f"expected {char!r} at position {at} of {text!r}")
    return at + 1


def compared_as_is(data_type: str) -> bool:
    """Whether Spark compares values of `data_type` as they are (`<=>`, EXCEPT, DISTINCT);
    True for an unknown type ("") or text `parse_type` cannot read, which nothing here can
    compare better than Spark does."""
    if not data_type:
        return True
    try:
        return _as_is(parse_type(data_type))
    except ValueError:
        return True


def _as_is(spark_type: SparkType) -> bool:
    if spark_type.name in ("map", "array", "struct"):
        return spark_type.name != "map" and all(_as_is(c) for c in spark_type.children)
    return _atom_compared(spark_type.name)


def _atom_compared(atom: str) -> bool:
    word = _ATOM_WORD.match(atom)
    if word is None:
        return False
    if word.group(0) == "interval":
        return atom != "interval"  # the legacy CALENDAR INTERVAL has no order
    return word.group(0) in _COMPARED_ATOMS


def comparable(value: str, data_type: str) -> str:
    """SQL for a form of `value` (SQL of type `data_type`) that Spark compares with `<=>`,
    GROUP BY, DISTINCT and EXCEPT, equal for two values exactly when they are equal: `value`
    itself where Spark compares the type already (or the type is unknown, "").

    A map is the array of its entries, sorted, so that two maps with the same entries are equal
    in whatever order they were built; an array of such values is compared element by element,
    a struct field by field (NULL stays NULL); a VARIANT by its JSON text (objects' fields in
    order of name), two VARIANTs equal when their JSON is.

    Raises:
        UncomparableType: a part of the type has no comparable form (GEOMETRY, CALENDAR
            INTERVAL, a type this function does not know).
    """
    if compared_as_is(data_type):
        return value
    return _comparable(value, parse_type(data_type), data_type, 0)


def _comparable(value: str, spark_type: SparkType, data_type: str, depth: int) -> str:
    if _as_is(spark_type):
        return value
    name, children = spark_type.name, spark_type.children
    # lambda variables are named by depth: an inner lambda's never hides an outer one's
    element = f"_streamsql_e{depth}"
    if name == "map":
        key, item = (
            _comparable(f"{element}.{part}", child, data_type, depth + 1)
            for part, child in zip(("key", "value"), children)
        )
        entries = f"map_entries({value})"
        if not all(_as_is(c) for c in children):
            entries = (
                f"transform({entries}, {element} -> named_struct('key', {key}, 'value', {item}))"
            )
        return f"array_sort({entries})"
    if name == "array":
        inner = _comparable(element, children[0], data_type, depth + 1)
        return f"transform({value}, {element} -> {inner})"
    if name == "struct":
        fields = ", ".join(
            f"'f{i}', {_comparable(f'{value}.{_quote(field)}', child, data_type, depth)}"
            for i, (field, child) in enumerate(zip(spark_type.fields, children))
        )
        return f"if({value} IS NULL, NULL, named_struct({fields}))"
    if name == "variant":
        return f"to_json({value})"
    raise UncomparableType(data_type, name)


def uncomparable_part(data_type: str) -> Optional[str]:
    """The part of `data_type` that has no comparable form (`comparable`), or None."""
    try:
        comparable("v", data_type)
    except UncomparableType as error:
        return error.part
    return None


def _quote(identifier: str) -> str:
    return "`" + identifier.replace("`", "``") + "`"
