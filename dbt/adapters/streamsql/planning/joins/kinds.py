"""Which delta rule a join takes, the name a plan's reason gives it, and its equi-join keys."""

from __future__ import annotations

from typing import List, Optional, Set, Tuple

from sqlglot import exp

from dbt.adapters.streamsql.planning.bounds import aliases_of, conjuncts
from dbt.adapters.streamsql.planning.subqueries import is_scalar_join, null_aware_pair, origin

INNER, LEFT, RIGHT, FULL = "inner", "left", "right", "full"
SEMI, ANTI, NOT_IN = "semi", "anti", "not in"
# Constructs an aggregate plan's reason names too (what the aggregate's delta reads through).
KEYED_CONSTRUCTS = (
    "right join",
    "full join",
    "semi join",
    "anti join",
    "in (subquery)",
    "exists",
    "not in (subquery)",
    "not exists",
)


SCALAR = "scalar subquery"  # a one-row stage joined in its place (scalar_subqueries.py)


def join_rule(join: Optional[exp.Join]) -> str:
    """Which delta rule a join takes (INNER: telescoping; the others: key restriction)."""
    if join is None:
        return INNER
    side, kind = join.side.upper(), join.kind.upper()
    if kind == "SEMI":
        return SEMI
    if kind == "ANTI":
        return NOT_IN if null_aware_pair(join) is not None else ANTI
    return {"LEFT": LEFT, "RIGHT": RIGHT, "FULL": FULL}.get(side, INNER)


def join_text(join: exp.Join) -> str:
    """The join as SQL spells it (`LEFT OUTER JOIN`), for messages."""
    return " ".join(part for part in (join.side.upper(), join.kind.upper(), "JOIN") if part)


def join_construct(join: exp.Join) -> str:
    """The name of a join in a plan's reason."""
    rule = join_rule(join)
    if is_scalar_join(join):
        return SCALAR
    if rule in (SEMI, ANTI, NOT_IN):
        return origin(join) or f"{rule} join"
    return f"{rule} join"


def equi_join_keys(
    condition: Optional[exp.Expression], left_aliases: Set[str], right_alias: str
) -> List[Tuple[exp.Expression, exp.Expression]]:
    """(left expression, right expression) pairs of the `=`/`<=>` conjuncts relating the two
    sides."""
    pairs = []
    for conjunct in conjuncts(condition):
        if not isinstance(conjunct, (exp.EQ, exp.NullSafeEQ)):
            continue
        first, second = conjunct.this, conjunct.expression
        first_tables, second_tables = aliases_of(first), aliases_of(second)
        if first_tables and first_tables <= left_aliases and second_tables == {right_alias}:
            pairs.append((first, second))
        elif second_tables and second_tables <= left_aliases and first_tables == {right_alias}:
            pairs.append((second, first))
    return pairs
