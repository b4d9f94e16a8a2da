"""What the planner can tell about the Spark type of an expression without asking Spark.

Only what is certain: column references (through derived tables that pass a column through),
CASTs and numeric literals. Anything else is unknown (None); callers then fall back to a type the
executor reads with DESCRIBE QUERY, or to recomputing.
"""

from __future__ import annotations

import re
from typing import Optional, Sequence

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
