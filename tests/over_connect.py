"""A mixin that runs a functional test class through a Spark Connect server (`method: connect`).

`class TestXOverConnect(OverConnect, TestX)` runs TestX's cases unchanged against the session's
`connect_server` (tests/conftest.py): the same steps, asserted the same way, through the client
path a `method: connect` profile and the warm server use.
"""

from __future__ import annotations

import pytest


class OverConnect:
    @pytest.fixture(scope="class")
    def dbt_profile_target(self, connect_server):
        return connect_server
