"""Every test under tests/functional runs real Spark and Delta: marked `functional` here, once.

`pytest -m "not functional"` then runs the unit tests alone, without starting Spark.
"""

from pathlib import Path

import pytest

FUNCTIONAL_DIR = Path(__file__).parent


def pytest_collection_modifyitems(items):
    for item in items:
        if FUNCTIONAL_DIR in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.functional)
