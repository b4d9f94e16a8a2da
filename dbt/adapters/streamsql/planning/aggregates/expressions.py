"""Small SQL expression builders the aggregate rules share: sums, casts, CASE and NULL tests."""

from __future__ import annotations

from typing import Optional

from sqlglot import exp

from dbt.adapters.streamsql.planning.plan import DIALECT


def if_(condition: exp.Expression, then: exp.Expression, otherwise: exp.Expression) -> exp.Case:
    return exp.Case(ifs=[exp.If(this=condition, true=then.copy())], default=otherwise)


def plus(left: exp.Expression, right: exp.Expression) -> exp.Expression:
    return exp.Add(this=left.copy(), expression=right.copy())


def zero() -> exp.Literal:
    return exp.Literal.number(0)


def or_zero(value: exp.Expression) -> exp.Expression:
    return exp.Coalesce(this=value, expressions=[zero()])


def is_not_null(value: exp.Expression) -> exp.Expression:
    return exp.Not(this=exp.Is(this=value, expression=exp.Null()))


def bigint(value: exp.Expression) -> exp.Expression:
    return exp.cast(value, exp.DataType.build("bigint"))


def data_type(spark_type: str) -> exp.DataType:
    try:
        return exp.DataType.build(spark_type, dialect=DIALECT)
    except Exception:  # a type sqlglot cannot parse: pass it through verbatim
        return exp.DataType.build(spark_type, dialect=DIALECT, udt=True)


def typed(value: exp.Expression, spark_type: Optional[str]) -> exp.Expression:
    """`value` cast to `spark_type`, or as it is when the type is unknown ("")."""
    return exp.cast(value, data_type(spark_type)) if spark_type else value
