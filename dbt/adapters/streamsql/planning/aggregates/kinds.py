"""Which rule keeps an aggregate call, chosen once per call when the block is taken apart.

The rule modules that maintain partials (count.py, sums.py, extrema.py) each claim the calls they
can keep; whatever none of them claims, and every aggregate with FILTER (WHERE ...), is
recomputed (recomputed.py). Past this point nothing looks at an aggregate's function again: the
planner asks the call's rule.
"""

from __future__ import annotations

from sqlglot import exp

from dbt.adapters.streamsql.planning.aggregates import count, extrema, recomputed, sums
from dbt.adapters.streamsql.planning.aggregates.block import AggregateCall
from dbt.adapters.streamsql.planning.types import TypeOracle

# Every rule, in the order the plan's reason lists the kinds a query uses.
RULES = (
    count.ROWS_RULE,
    count.VALUES_RULE,
    sums.SUM_RULE,
    sums.AVG_RULE,
    extrema.MIN_RULE,
    extrema.MAX_RULE,
    recomputed.RECOMPUTED_RULE,
)
_CLAIMS = (count.claim, extrema.claim, sums.claim)


def classify(
    index: int, call: exp.Expression, oracle: TypeOracle, output_type: str
) -> AggregateCall:
    """Aggregate call number `index` of a query with the rule that keeps it.

    `output_type` is the type of the model column the call is, when it is one ("" if not).
    """
    if not isinstance(call, exp.Filter):
        for claim in _CLAIMS:
            claimed = claim(index, call, oracle, output_type)
            if claimed is not None:
                return claimed
    return recomputed.claim(index, call, output_type)
