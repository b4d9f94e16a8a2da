"""What the planner knows about Spark SQL's built-in functions.

The name lists were taken from Spark 4.2's function registry (`FunctionRegistry.builtin`, grouped
by `ExpressionInfo.getGroup`). A function that is not built in is a user-defined function: the
planner cannot know whether it is deterministic or an aggregate, so it keeps such models on the
recompute path.

The names themselves are data, in functions.json next to this module (shipped with the package,
pyproject.toml's package-data): one list per category below, read once when the module is
imported.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Dict, FrozenSet

_DATA = "functions.json"


def _load_names() -> Dict[str, FrozenSet[str]]:
    """The categories of functions.json, each a set of lower-case function names."""
    text = resources.files(__package__).joinpath(_DATA).read_text(encoding="utf-8")
    return {category: frozenset(names) for category, names in json.loads(text).items()}


_NAMES = _load_names()

# Aggregate functions.
AGGREGATE_FUNCTIONS = _NAMES["aggregate"]

# Window functions that are not aggregates (ranking, offsets): valid only with OVER.
WINDOW_ONLY_FUNCTIONS = _NAMES["window_only"]

# Functions whose result differs between two evaluations over the same rows, or depends on where
# and when the query runs rather than on the rows: the delta of a query using them is not the
# difference of two evaluations. `unix_timestamp` is not listed: sqlglot reads its zero-argument
# form as `unix_timestamp(current_timestamp())`, which the check of `current_timestamp` catches
# (constructs.py), and its other forms are deterministic.
NONDETERMINISTIC_FUNCTIONS = _NAMES["nondeterministic"]

# Grouping by these merges rows depending on other rows, so a group of the delta is not a group of
# the whole input.
NON_PER_ROW_GROUPINGS = _NAMES["non_per_row_grouping"]

# Every built-in function: the registry's other groups (operators included), and the aggregates.
BUILTIN_FUNCTIONS = _NAMES["builtin"] | AGGREGATE_FUNCTIONS
