"""The writer claim's decisions (spark/writer_claim.py): which warehouses get one, who may take
it, and what a driver does when it finds another's. The claim's file is a string in memory
here; tests/functional/test_object_store.py keeps it on S3 through S3A."""

from __future__ import annotations

import json
from typing import Optional

import pytest

from dbt.adapters.streamsql.spark import writer_claim
from dbt.adapters.streamsql.spark.writer_claim import (
    STALE_SECONDS,
    Claim,
    ClaimRefused,
    WriterClaim,
    claim_location,
    verdict,
)

WAREHOUSE = {"spark.sql.warehouse.dir": "s3a://lake/wh/tables"}


class TextFile:
    def __init__(self, text: Optional[str] = None) -> None:
        self.text = text

    def read(self) -> Optional[str]:
        return self.text

    def write(self, text: str) -> None:
        self.text = text

    def delete(self) -> None:
        self.text = None


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def claim_of(host: str, local_dir: str, renewed_at: float, token: str = "theirs") -> str:
    return json.dumps(
        {
            "host": host,
            "local_dir": local_dir,
            "pid": 42,
            "token": token,
            "claimed_at": renewed_at,
            "renewed_at": renewed_at,
        }
    )


def test_only_s3a_warehouses_with_the_single_driver_store_are_claimed():
    assert claim_location(WAREHOUSE) == "s3a://lake/wh/tables/_streamsql_writer.json"
    assert claim_location({"spark.sql.warehouse.dir": "s3a://lake/wh/tables/"}).endswith(
        "/tables/_streamsql_writer.json"
    )
    assert claim_location({"spark.sql.warehouse.dir": "/srv/wh/tables"}) is None
    assert claim_location({"spark.sql.warehouse.dir": "abfss://c@a.dfs.core.windows.net/w"}) is None
    assert claim_location({}) is None
    store = "spark.delta.logStore.s3a.impl"
    dynamo = {**WAREHOUSE, store: "io.delta.storage.S3DynamoDBLogStore"}
    assert claim_location(dynamo) is None
    named = {**WAREHOUSE, store: "io.delta.storage.S3SingleDriverLogStore"}
    assert claim_location(named) is not None
    # the scheme's own setting wins over the general one, as in Delta
    both = {**dynamo, "spark.delta.logStore.class": "io.delta.storage.S3SingleDriverLogStore"}
    assert claim_location(both) is None


def test_a_fresh_claim_of_another_writer_refuses_and_says_when_it_goes_stale():
    now = 5000.0
    theirs = Claim.parse(claim_of("etl-1", "/srv/a", now - 40))
    said = verdict(theirs, "etl-2:/srv/a", now)
    assert said is not None
    assert "'etl-1'" in said and "/srv/a" in said and "renewed 40 s ago" in said
    assert f"goes stale in {STALE_SECONDS - 40:.0f} s" in said
    # the same host and local_dir (this machine's last driver, killed), a stale one, none
    assert verdict(theirs, "etl-1:/srv/a", now) is None
    assert verdict(theirs, "etl-2:/srv/a", now - 40 + STALE_SECONDS + 1) is None
    assert verdict(None, "etl-2:/srv/a", now) is None
    # another local_dir on the same host is another driver
    assert verdict(theirs, "etl-1:/srv/b", now) is not None


def test_acquire_writes_a_claim_and_a_clean_release_deletes_it():
    file, clock = TextFile(), Clock()
    claim = WriterClaim(file, "s3a://lake/wh/tables/_streamsql_writer.json", "/srv/a", clock)
    claim.acquire(settle=0)
    written = Claim.parse(file.text or "")
    assert written is not None and written.token == claim.mine.token
    assert written.local_dir == "/srv/a" and written.renewed_at == clock.now
    clock.now += 30
    assert claim.renew()
    assert Claim.parse(file.text or "").renewed_at == clock.now
    claim.release()
    assert file.text is None


def test_a_fresh_claim_of_another_machine_is_refused_naming_it(monkeypatch):
    clock = Clock()
    file = TextFile(claim_of("etl-1", "/srv/a", clock.now - 10))
    monkeypatch.setattr(writer_claim.socket, "gethostname", lambda: "etl-2")
    claim = WriterClaim(file, "s3a://lake/wh/tables/_streamsql_writer.json", "/srv/a", clock)
    with pytest.raises(ClaimRefused) as refused:
        claim.acquire(settle=0)
    said = str(refused.value)
    assert "s3a://lake/wh/tables is being written by another Spark driver" in said
    assert "'etl-1'" in said and "streamsql server stop" in said and "'Writers'" in said
    assert Claim.parse(file.text or "").host == "etl-1"  # left as it was


def test_a_stale_claim_is_taken_over_saying_whose_it_was(monkeypatch):
    clock = Clock()
    file = TextFile(claim_of("etl-1", "/srv/a", clock.now - STALE_SECONDS - 5))
    monkeypatch.setattr(writer_claim.socket, "gethostname", lambda: "etl-2")
    claim = WriterClaim(file, "s3a://lake/wh/tables/_streamsql_writer.json", "/srv/a", clock)
    claim.acquire(settle=0)
    assert Claim.parse(file.text or "").host == "etl-2"
    assert claim.took_over is not None and "'etl-1'" in claim.took_over


def test_a_file_that_is_no_claim_is_taken_over():
    file = TextFile("not json {")
    claim = WriterClaim(file, "s3a://lake/wh/tables/_streamsql_writer.json", "/srv/a", Clock())
    claim.acquire(settle=0)
    assert Claim.parse(file.text or "").token == claim.mine.token


def test_a_claim_replaced_during_the_settle_is_refused():
    class Racing(TextFile):
        def write(self, text: str) -> None:  # another driver writes right after this one
            self.text = claim_of("etl-9", "/srv/z", Clock().now)

    claim = WriterClaim(Racing(), "s3a://lake/wh/tables/_streamsql_writer.json", "/srv/a", Clock())
    with pytest.raises(ClaimRefused, match="at the same moment as this one"):
        claim.acquire(settle=0)


def test_a_renewal_that_finds_another_claim_loses_it_and_release_leaves_theirs():
    file, clock = TextFile(), Clock()
    claim = WriterClaim(file, "s3a://lake/wh/tables/_streamsql_writer.json", "/srv/a", clock)
    claim.acquire(settle=0)
    file.text = claim_of("etl-9", "/srv/z", clock.now)
    assert not claim.renew()
    assert claim.lost is not None and "'etl-9'" in claim.lost and "stops writing" in claim.lost
    claim.release()
    assert Claim.parse(file.text or "").host == "etl-9"
