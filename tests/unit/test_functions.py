"""The names of Spark's functions the planner knows (planning/functions.py), read from
planning/functions.json: the file loads, holds the expected categories, and ships with the
package."""

import json
from importlib import resources
from pathlib import Path

import pytest

from dbt.adapters.streamsql.planning import functions
from dbt.adapters.streamsql.planning.binding import parse_query
from dbt.adapters.streamsql.planning.constructs import nonlinear_construct

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "dbt.adapters.streamsql.planning"
CATEGORIES = {"aggregate", "window_only", "nondeterministic", "non_per_row_grouping", "builtin"}


def data():
    text = resources.files(PACKAGE).joinpath("functions.json").read_text(encoding="utf-8")
    return json.loads(text)


def test_the_data_file_has_each_category_as_a_list_of_distinct_lower_case_names():
    categories = data()
    assert set(categories) == CATEGORIES
    for category, names in categories.items():
        assert names, category
        assert all(isinstance(n, str) and n == n.strip().lower() and n for n in names), category
        assert len(set(names)) == len(names), f"{category} names a function twice"


@pytest.mark.parametrize(
    "name, category",
    [
        ("count", functions.AGGREGATE_FUNCTIONS),
        ("collect_list", functions.AGGREGATE_FUNCTIONS),
        ("row_number", functions.WINDOW_ONLY_FUNCTIONS),
        ("lag", functions.WINDOW_ONLY_FUNCTIONS),
        ("rand", functions.NONDETERMINISTIC_FUNCTIONS),
        ("current_timestamp", functions.NONDETERMINISTIC_FUNCTIONS),
        ("session_window", functions.NON_PER_ROW_GROUPINGS),
        ("upper", functions.BUILTIN_FUNCTIONS),
        ("<=>", functions.BUILTIN_FUNCTIONS),
        ("sum", functions.BUILTIN_FUNCTIONS),  # the aggregates are built in too
    ],
)
def test_known_functions_are_in_their_category(name, category):
    assert name in category


def test_the_sets_are_what_the_planner_checks_against():
    sets = (
        functions.AGGREGATE_FUNCTIONS,
        functions.WINDOW_ONLY_FUNCTIONS,
        functions.NONDETERMINISTIC_FUNCTIONS,
        functions.NON_PER_ROW_GROUPINGS,
        functions.BUILTIN_FUNCTIONS,
    )
    assert all(isinstance(s, frozenset) for s in sets)
    assert functions.AGGREGATE_FUNCTIONS <= functions.BUILTIN_FUNCTIONS
    assert functions.NONDETERMINISTIC_FUNCTIONS <= functions.BUILTIN_FUNCTIONS
    assert "upper" not in functions.AGGREGATE_FUNCTIONS
    assert "my_udf" not in functions.BUILTIN_FUNCTIONS
    # through the planner: a name from the file is built in, one that is not is a UDF
    assert nonlinear_construct(parse_query("select upper(a) from t")) is None
    reason = nonlinear_construct(parse_query("select my_udf(a) from t"))
    assert reason and "user-defined function my_udf()" in reason


def test_the_data_file_is_package_data():
    tomllib = pytest.importorskip("tomllib")
    with open(ROOT / "pyproject.toml", "rb") as f:
        package_data = tomllib.load(f)["tool"]["setuptools"]["package-data"]
    assert "functions.json" in package_data.get(PACKAGE, [])
