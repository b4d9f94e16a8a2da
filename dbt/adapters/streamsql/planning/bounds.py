"""Key bounds: range predicates that let a join term skip the history of the sources it joins.

A term of an inner join's delta joins one source's change with the other sources' whole contents
(`delta(L) join R_new`). Its rows can only match where the join condition holds, so where the
condition relates a column of R to the change (`R.id = L.seller`, `R.ts BETWEEN L.start AND
L.end`), R's rows outside the change's range of values cannot contribute. The term gets a
predicate `R.id >= <smallest L.seller in the change> AND R.id <= <largest>`: it changes nothing
the term returns, and with literal values in place Delta skips every file of R whose statistics
lie outside the range. On data that arrives roughly in key or time order (event streams, growing
ids) that is all but the newest files.

The planner emits each predicate as a placeholder (`KeyBound`); the executor computes the change's
MIN/MAX, puts the predicate with literal values in its place, or `true` when bounding is not worth
a query (a first step, whose change is every row).

The evaluations the key-restriction rules of linear.py re-run (LEFT/RIGHT/FULL/SEMI/ANTI joins,
IN/EXISTS subqueries, top-K windows) are bounded the same way: their rows are restricted to the
keys found in a change, so a column equal to such a key lies within the range of the expressions
it equals over the changes of the inputs the change's rows come from (`LEAST`/`GREATEST` over
several). Those predicates keep NULLs (`key_range_predicate`): the restriction is null-safe.
"""

from __future__ import annotations

from typing import Iterator, List, Optional, Set, Tuple

from sqlglot import exp

from dbt.adapters.streamsql.planning.plan import DIALECT

AT_LEAST, AT_MOST = ">=", "<="


def conjuncts(condition: Optional[exp.Expression]) -> List[exp.Expression]:
    """The AND-ed parts of a condition (parentheses removed)."""
    if condition is None:
        return []
    if isinstance(condition, exp.Paren):
        return conjuncts(condition.this)
    if isinstance(condition, exp.And):
        return conjuncts(condition.this) + conjuncts(condition.expression)
    return [condition]


def aliases_of(node: exp.Expression) -> Set[str]:
    """The relation aliases the columns of `node` are qualified with."""
    return {column.table for column in node.find_all(exp.Column)}


def range_facts(
    condition: exp.Expression, bounded: str, changed: str
) -> Iterator[Tuple[exp.Column, str, exp.Expression]]:
    """(column of `bounded`, AT_LEAST or AT_MOST, expression over `changed`) implied by a conjunct.

    `column AT_LEAST expression` means: every row satisfying the conjunct has the column at least
    the expression's value for some row of `changed` (so at least its MIN over `changed`).
    """

    def is_bounded_column(node: exp.Expression) -> bool:
        return isinstance(node, exp.Column) and node.table == bounded

    def over_changed(node: exp.Expression) -> bool:
        return aliases_of(node) == {changed} and not node.find(exp.Subquery, exp.AggFunc)

    def compare(left: exp.Expression, right: exp.Expression, left_side: str):
        """`left <op> right` where `left_side` is what the op says of left (AT_LEAST/AT_MOST)."""
        if is_bounded_column(left) and over_changed(right):
            yield left, left_side, right
        elif is_bounded_column(right) and over_changed(left):
            yield right, (AT_MOST if left_side == AT_LEAST else AT_LEAST), left

    if isinstance(condition, exp.Paren):
        yield from range_facts(condition.this, bounded, changed)
    elif isinstance(condition, exp.EQ):
        yield from compare(condition.this, condition.expression, AT_LEAST)
        yield from compare(condition.this, condition.expression, AT_MOST)
    elif isinstance(condition, (exp.GT, exp.GTE)):
        yield from compare(condition.this, condition.expression, AT_LEAST)
    elif isinstance(condition, (exp.LT, exp.LTE)):
        yield from compare(condition.this, condition.expression, AT_MOST)
    elif isinstance(condition, exp.Between):
        value, low, high = condition.this, condition.args["low"], condition.args["high"]
        yield from compare(value, low, AT_LEAST)
        yield from compare(value, high, AT_MOST)


def extreme_of(expression: exp.Expression, side: str, placeholder: str, alias: str) -> str:
    """The scalar SELECT of the MIN (AT_LEAST) or MAX (AT_MOST) of `expression` over a change."""
    function = exp.Min if side == AT_LEAST else exp.Max
    select = exp.Select(
        expressions=[function(this=expression.copy())],
        from_=exp.From(
            this=exp.Table(
                this=exp.to_identifier(placeholder),
                alias=exp.TableAlias(this=exp.to_identifier(alias)),
            )
        ),
    )
    return exp.Subquery(this=select).sql(DIALECT)


def key_range_predicate(column: exp.Column, low: str, high: str) -> exp.Expression:
    """`(low AND high) OR column IS NULL`: a key-range bound on a column that restricted rows'
    keys equal (NULL keys are kept: a null-safe restriction keeps a NULL key when it changed).

    `low` and `high` are the names of the two `KeyBound` placeholders.
    """
    in_range = exp.Paren(this=exp.and_(exp.column(low), exp.column(high)))
    return exp.Paren(this=exp.or_(in_range, exp.Is(this=column.copy(), expression=exp.Null())))
