"""Which tables the warm server reads between runs, and when (table_warmer.py), without Spark.

The reads themselves through a real server: tests/functional/test_warm_server.py."""

from __future__ import annotations

import os
from pathlib import Path
from typing import List

from dbt.adapters.streamsql.spark.table_warmer import TableWarmer, delta_tables, local_tables_dir


def make_table(root: Path, *parts: str) -> Path:
    table = root.joinpath(*parts)
    (table / "_delta_log").mkdir(parents=True)
    commit(table, 0)
    return table


def commit(table: Path, version: int) -> None:
    log = table / "_delta_log"
    (log / f"{version:020d}.json").write_text("{}")
    # the log directory's change time moves with each new file; make the move visible at once
    # (a file system may keep coarse times)
    stamp = os.stat(log).st_mtime_ns + 1_000_000 * (version + 1)
    os.utime(log, ns=(stamp, stamp))


class Warmer:
    def __init__(self, root: Path) -> None:
        self.reads: List[str] = []
        self.idle = True
        self.failing: set = set()
        self.warmer = TableWarmer(str(root), self.read, lambda: self.idle)

    def read(self, path: str) -> None:
        if path in self.failing:
            raise RuntimeError("[DELTA_TABLE_NOT_FOUND] gone\nat ...")
        self.reads.append(os.path.basename(path))

    def warm(self) -> List[str]:
        self.reads.clear()
        read, _, _ = self.warmer.warm()
        assert [os.path.basename(p) for p in read] == self.reads
        return list(self.reads)


def test_tables_are_found_in_the_default_database_and_in_each_db_directory(tmp_path):
    make_table(tmp_path, "top")
    make_table(tmp_path, "sales.db", "orders")
    make_table(tmp_path, "sales.db", "orders__streamsql_state")
    (tmp_path / "sales.db" / "not_delta").mkdir()
    (tmp_path / "parquet_only").mkdir()
    make_table(tmp_path, "_hidden")
    make_table(tmp_path, "sales.db", "orders", "nested")  # inside a table: not a table
    found = {os.path.relpath(p, tmp_path) for p in delta_tables(str(tmp_path))}
    assert found == {"top", "sales.db/orders", "sales.db/orders__streamsql_state"}
    assert delta_tables(str(tmp_path / "missing")) == {}


def test_only_tables_changed_since_their_last_read_are_read_the_latest_first(tmp_path):
    a = make_table(tmp_path, "s.db", "a")
    b = make_table(tmp_path, "s.db", "b")
    warmer = Warmer(tmp_path)
    assert warmer.warm() == []  # present at the start: the server's first run loads them
    commit(a, 1)
    commit(b, 5)
    assert warmer.warm() == ["b", "a"]
    assert warmer.warm() == []
    commit(a, 2)
    make_table(tmp_path, "s.db", "c")  # created since: read too
    assert sorted(warmer.warm()) == ["a", "c"]


def test_nothing_is_read_while_a_client_is_on_the_server_and_the_rest_waits(tmp_path):
    a = make_table(tmp_path, "s.db", "a")
    warmer = Warmer(tmp_path)
    commit(a, 1)
    warmer.idle = False
    assert warmer.warm() == []
    warmer.idle = True
    assert warmer.warm() == ["a"]


def test_a_pass_stops_when_a_client_arrives_and_goes_on_in_the_next(tmp_path):
    tables = [make_table(tmp_path, "s.db", name) for name in ("a", "b", "c")]
    answers = iter([True, False])
    warmer = TableWarmer(str(tmp_path), lambda path: None, lambda: next(answers, True))
    for number, table in enumerate(tables):
        commit(table, number + 1)
    read, _, _ = warmer.warm()
    assert len(read) == 1
    read, _, _ = warmer.warm()
    assert len(read) == 2


def test_an_idle_check_that_fails_ends_the_pass_without_raising(tmp_path):
    a = make_table(tmp_path, "s.db", "a")

    def jvm_gone() -> bool:
        raise ConnectionError("py4j: the JVM is gone")

    warmer = TableWarmer(str(tmp_path), lambda path: None, jvm_gone)
    commit(a, 1)
    assert warmer.warm()[:2] == ([], [])


def test_a_table_that_fails_is_named_once_and_read_again_after_its_next_commit(tmp_path):
    a = make_table(tmp_path, "s.db", "a")
    warmer = Warmer(tmp_path)
    commit(a, 1)
    warmer.failing.add(str(a))
    read, failed, _ = warmer.warmer.warm()
    assert read == [] and failed == [(str(a), "[DELTA_TABLE_NOT_FOUND] gone")]
    assert warmer.warmer.warm()[:2] == ([], [])
    warmer.failing.clear()
    commit(a, 2)
    assert warmer.warm() == ["a"]


def test_a_dropped_table_is_forgotten_and_not_named(tmp_path):
    a = make_table(tmp_path, "s.db", "a")
    warmer = Warmer(tmp_path)
    commit(a, 1)
    for entry in (a / "_delta_log").iterdir():
        entry.unlink()
    (a / "_delta_log").rmdir()
    a.rmdir()
    assert warmer.warmer.warm()[:2] == ([], [])


class Conf:
    def __init__(self, location: str) -> None:
        self.location = location

    def get(self, key: str) -> str:
        assert key == "spark.sql.warehouse.dir"
        return self.location


class Session:
    def __init__(self, location: str) -> None:
        self.conf = Conf(location)


def test_only_a_warehouse_on_this_machine_is_watched(tmp_path):
    assert local_tables_dir(Session(f"file:{tmp_path}")) == str(tmp_path)
    assert local_tables_dir(Session(f"file://{tmp_path}")) == str(tmp_path)
    assert local_tables_dir(Session(str(tmp_path))) == str(tmp_path)
    assert local_tables_dir(Session("s3a://bucket/warehouse")) is None
    assert local_tables_dir(Session(f"file:{tmp_path}/not-yet")) == f"{tmp_path}/not-yet"
    assert local_tables_dir(Session("relative/tables")) is None


def test_a_warehouse_on_an_object_store_is_not_watched_and_the_log_says_why():
    from dbt.adapters.streamsql.spark.table_warmer import server_warmer

    warmer, said = server_warmer(Session("s3a://lake/wh/tables"), stopping=None)
    assert warmer is None
    assert "the warehouse (s3a://lake/wh/tables) is not on this machine" in said
    assert "requests" in said
