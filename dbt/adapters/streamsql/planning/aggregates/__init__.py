"""GROUP BY, DISTINCT, UNION (distinct) and global aggregates through per-group partial aggregates.

The state keeps, per group, `_streamsql_g<k>` (group values), `_streamsql_count` (sum of weights)
and partials `_streamsql_a<j>...` per aggregate call j. What a call keeps, and how, is the
business of one rule per kind of aggregate:

| aggregate      | partials                               | maintained by                      |
|----------------|----------------------------------------|------------------------------------|
| COUNT(*)       | (the group count)                      | adding the delta's weights         |
| COUNT(x, ...)  | a<j>: rows with x non-null             | adding                             |
| SUM(x), AVG(x) | a<j>: sum of x, a<j>_n: non-null count | adding                             |
| MIN(x), MAX(x) | a<j>: the value                        | least/greatest with inserted rows; |
|                |                                        | recomputed when a deleted value    |
|                |                                        | could have been the extreme        |
| anything else  | a<j>: the value                        | recomputed for every changed group |

Weights are +1/-1 (plan.py). The rules, in the order of the table, are count.py, sums.py,
extrema.py and recomputed.py. The other modules:

- planner.py   `AggregatePlanner`: finds the aggregate block and puts its plan together
- analysis.py  takes the block apart into groups, calls and outputs (`AggregateQuery`)
- kinds.py     chooses the rule of each aggregate call, once
- block.py     the block's parts and the rule interface (`AggregateRule`) every rule implements
- delta.py     the group delta of a step; combine.py the new state of the changed groups;
               output.py the model's rows read from the state
- expressions.py  small SQL builders the rules share
"""
