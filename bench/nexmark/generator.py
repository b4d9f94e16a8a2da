"""A seeded Nexmark event generator in Spark SQL (no Python row loops).

Events are numbered 0, 1, 2, ...; event n is a person, an auction or a bid depending on n mod 50
(Nexmark's proportions person:auction:bid = 1:3:46): offset 0 is a person, 1-3 an auction, 4-49 a
bid. Ids and values follow the Nexmark generator of Apache Beam / Flink's nexmark, with its default
configuration:

- person ids are 1000 + the person's ordinal (epoch n div 50), auction ids 1000 + 3 * epoch +
  (offset - 1);
- a bid's auction is, with probability 1/2 (hot auction ratio 2), the latest auction rounded down
  to a multiple of 100, otherwise uniform among the 100 latest auctions and the next 10 (Nexmark
  lets a bid name an auction that does not exist yet); its bidder is, with probability 3/4 (hot
  bidder ratio 4), the latest person rounded down to a multiple of 100 plus 1, otherwise uniform
  among the 1000 latest persons and the next 10; an auction's seller likewise (hot seller ratio 4,
  no +1);
- prices are round(10^(6u) * 100) cents for u uniform in [0, 1) (so 1.00 to 1,000,000.00);
  reserve = initial bid + another such price; category 10 + uniform(5); an auction expires
  1 ms + uniform(2 * 16.66 s) after it starts (Nexmark's horizon: 100 auctions in flight);
- person names, cities and states come from Nexmark's lists; email, credit card, item names and
  `extra` are short seeded strings (Nexmark pads `extra` to an average event size; we do not).

Every random choice is `xxhash64(n, seed + k)` of the event number, so a table is a pure function
of (seed, range of events): appending events [a, b) later gives the same rows as generating them
at once.

Event time: event n happens at BASE + n * 10 ms (100 events per second of event time), minus a
disorder of uniform [0, 5 s) in whole milliseconds, plus (n mod 1000) microseconds. The last term
makes every event's `date_time` unique (two events with equal n mod 1000 are >= 10 s apart
nominally, more than the disorder), so (auction, bidder, date_time) is a key of `bid`. Rows are
appended in event-number order, so an event arrives at most DISORDER_MS late in event time:
every event of a later step has `date_time` > (max `date_time` of earlier steps) - 5 s.
"""

from __future__ import annotations

from typing import Any, Dict

SCHEMA = "nexmark"
BASE_MICROS = 1_704_067_200_000_000  # 2024-01-01 00:00:00 UTC
EVENT_SPACING_MS = 10
DISORDER_MS = 5_000
TOTAL = 50  # person 1 + auction 3 + bid 46
PERSON_PROPORTION, AUCTION_PROPORTION, BID_PROPORTION = 1, 3, 46
FIRST_PERSON_ID, FIRST_AUCTION_ID, FIRST_CATEGORY_ID = 1000, 1000, 10
NUM_CATEGORIES = 5
HOT_AUCTION_RATIO, HOT_BIDDER_RATIO, HOT_SELLER_RATIO = 2, 4, 4  # Nexmark's configuration
HOT_ID_BLOCK = 100  # Nexmark's HOT_AUCTION_RATIO / HOT_BIDDER_RATIO / HOT_SELLER_RATIO constants
IN_FLIGHT_AUCTIONS, AUCTION_ID_LEAD = 100, 10
ACTIVE_PEOPLE, PERSON_ID_LEAD = 1000, 10
# Nexmark's auction length: uniform up to twice the event time of 100 auctions in flight.
AUCTION_HORIZON_MS = IN_FLIGHT_AUCTIONS * TOTAL // AUCTION_PROPORTION * EVENT_SPACING_MS

FIRST_NAMES = [
    "Peter",
    "Paul",
    "Luke",
    "John",
    "Saul",
    "Vicky",
    "Kate",
    "Julie",
    "Sarah",
    "Deiter",
    "Walter",
]
LAST_NAMES = [
    "Shultz",
    "Abrams",
    "Spencer",
    "White",
    "Bartels",
    "Walton",
    "Smith",
    "Jones",
    "Noris",
]
US_STATES = ["AZ", "CA", "ID", "OR", "WA", "WY"]
US_CITIES = [
    "Phoenix",
    "Los Angeles",
    "San Francisco",
    "Boise",
    "Portland",
    "Bend",
    "Redmond",
    "Seattle",
    "Kent",
    "Cheyenne",
]
CHANNELS = ["Google", "Facebook", "Baidu", "Apple"]

DDL = {
    "person": "id BIGINT, name STRING, email_address STRING, credit_card STRING, city STRING, "
    "state STRING, date_time TIMESTAMP, extra STRING",
    "auction": "id BIGINT, item_name STRING, description STRING, initial_bid BIGINT, "
    "reserve BIGINT, date_time TIMESTAMP, expires TIMESTAMP, seller BIGINT, "
    "category BIGINT, extra STRING",
    "bid": "auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING, "
    "date_time TIMESTAMP, extra STRING",
}


def events_for_bids(bids: int) -> int:
    """How many events hold `bids` bids (46 of every 50 events are bids)."""
    return -(-bids * TOTAL // BID_PROPORTION)


def _rand(seed: int, k: int) -> str:
    """A non-negative seeded random BIGINT per event (`id` is the event number)."""
    return f"abs(xxhash64(id, {seed * 100 + k}))"


def _uniform(seed: int, k: int, bound: int) -> str:
    return f"pmod(xxhash64(id, {seed * 100 + k}), {bound})"


def _pick(values: list, seed: int, k: int) -> str:
    items = ", ".join(f"'{v}'" for v in values)
    return f"element_at(array({items}), CAST({_uniform(seed, k, len(values))} AS INT) + 1)"


def _price(seed: int, k: int) -> str:
    u = f"({_uniform(seed, k, 1_000_000_000)} / 1e9D)"
    return f"CAST(round(pow(10D, {u} * 6D) * 100D) AS BIGINT)"


def _string(seed: int, k: int, length: int) -> str:
    return f"lower(substr(hex(xxhash64(id, {seed * 100 + k})), 1, {length}))"


def _micros(seed: int) -> str:
    """Event time of event `id` in microseconds since the epoch."""
    return (
        f"({BASE_MICROS} + id * {EVENT_SPACING_MS * 1000} "
        f"- {_uniform(seed, 0, DISORDER_MS)} * 1000 + pmod(id, 1000))"
    )


def _date_time(seed: int) -> str:
    return f"timestamp_micros({_micros(seed)})"


# Nexmark's lastBase0PersonId / lastBase0AuctionId for event `id`.
EPOCH = f"(id div {TOTAL})"
OFFSET = f"pmod(id, {TOTAL})"
LAST_PERSON = EPOCH
LAST_AUCTION = (
    f"(CASE WHEN {OFFSET} < {PERSON_PROPORTION} "
    f"THEN ({EPOCH} - 1) * {AUCTION_PROPORTION} + {AUCTION_PROPORTION - 1} "
    f"WHEN {OFFSET} >= {PERSON_PROPORTION + AUCTION_PROPORTION}"
    f" THEN {EPOCH} * {AUCTION_PROPORTION} + {AUCTION_PROPORTION - 1}"
    f" ELSE {EPOCH} * {AUCTION_PROPORTION} + {OFFSET} - {PERSON_PROPORTION} END)"
)


def _next_person(seed: int, k: int) -> str:
    """Nexmark's nextBase0PersonId: one of the latest ACTIVE_PEOPLE persons or the next few."""
    people = f"({LAST_PERSON} + 1)"
    active = f"least({people}, {ACTIVE_PEOPLE})"
    spread = f"pmod(xxhash64(id, {seed * 100 + k}), {active} + {PERSON_ID_LEAD})"
    return f"({people} - {active} + {spread})"


def _next_auction(seed: int, k: int) -> str:
    low = f"greatest({LAST_AUCTION} - {IN_FLIGHT_AUCTIONS}, 0)"
    return (
        f"({low} + pmod(xxhash64(id, {seed * 100 + k}), "
        f"{LAST_AUCTION} - {low} + 1 + {AUCTION_ID_LEAD}))"
    )


def _hot(seed: int, k: int, ratio: int) -> str:
    return f"({_uniform(seed, k, ratio)} > 0)"


def select_sql(table: str, start: int, end: int, seed: int, partitions: int = 1) -> str:
    """The rows of `table` among events [start, end)."""
    src = f"range({start}, {end}, 1, {partitions})"
    dt = _date_time(seed)
    if table == "person":
        return (
            f"SELECT {FIRST_PERSON_ID} + {EPOCH} AS id, "
            f"concat({_pick(FIRST_NAMES, seed, 1)}, ' ', {_pick(LAST_NAMES, seed, 2)}) AS name, "
            f"concat({_string(seed, 3, 7)}, '@', {_string(seed, 4, 5)}, '.com') AS email_address, "
            f"concat_ws(' ', lpad(CAST({_uniform(seed, 5, 10000)} AS STRING), 4, '0'), "
            f"lpad(CAST({_uniform(seed, 6, 10000)} AS STRING), 4, '0'), "
            f"lpad(CAST({_uniform(seed, 7, 10000)} AS STRING), 4, '0'), "
            f"lpad(CAST({_uniform(seed, 8, 10000)} AS STRING), 4, '0')) AS credit_card, "
            f"{_pick(US_CITIES, seed, 9)} AS city, {_pick(US_STATES, seed, 10)} AS state, "
            f"{dt} AS date_time, {_string(seed, 11, 8)} AS extra "
            f"FROM {src} WHERE {OFFSET} < {PERSON_PROPORTION}"
        )
    if table == "auction":
        seller = (
            f"{FIRST_PERSON_ID} + CASE WHEN {_hot(seed, 20, HOT_SELLER_RATIO)} "
            f"THEN ({LAST_PERSON} div {HOT_ID_BLOCK}) * {HOT_ID_BLOCK} "
            f"ELSE {_next_person(seed, 21)} END"
        )
        return (
            f"SELECT {FIRST_AUCTION_ID} + {LAST_AUCTION} AS id, "
            f"concat('item-', {_string(seed, 22, 8)}) AS item_name, "
            f"concat('desc-', {_string(seed, 23, 12)}) AS description, "
            f"{_price(seed, 24)} AS initial_bid, "
            f"{_price(seed, 24)} + {_price(seed, 25)} AS reserve, "
            f"{dt} AS date_time, "
            f"timestamp_micros({_micros(seed)} + (1 + {_uniform(seed, 26, 2 * AUCTION_HORIZON_MS)})"
            f" * 1000) AS expires, "
            f"{seller} AS seller, "
            f"{FIRST_CATEGORY_ID} + {_uniform(seed, 27, NUM_CATEGORIES)} AS category, "
            f"{_string(seed, 28, 8)} AS extra "
            f"FROM {src} WHERE {OFFSET} >= {PERSON_PROPORTION} "
            f"AND {OFFSET} < {PERSON_PROPORTION + AUCTION_PROPORTION}"
        )
    if table == "bid":
        auction = (
            f"{FIRST_AUCTION_ID} + CASE WHEN {_hot(seed, 30, HOT_AUCTION_RATIO)} "
            f"THEN ({LAST_AUCTION} div {HOT_ID_BLOCK}) * {HOT_ID_BLOCK} "
            f"ELSE {_next_auction(seed, 31)} END"
        )
        bidder = (
            f"{FIRST_PERSON_ID} + CASE WHEN {_hot(seed, 32, HOT_BIDDER_RATIO)} "
            f"THEN ({LAST_PERSON} div {HOT_ID_BLOCK}) * {HOT_ID_BLOCK} + 1 "
            f"ELSE {_next_person(seed, 33)} END"
        )
        return (
            f"SELECT {auction} AS auction, {bidder} AS bidder, {_price(seed, 34)} AS price, "
            f"{_pick(CHANNELS, seed, 35)} AS channel, "
            f"concat('https://www.nexmark.com/', {_string(seed, 36, 5)}, '/item.htm?query=1') "
            f"AS url, "
            f"{dt} AS date_time, {_string(seed, 37, 8)} AS extra "
            f"FROM {src} WHERE {OFFSET} >= {PERSON_PROPORTION + AUCTION_PROPORTION}"
        )
    raise ValueError(table)


def create_tables(spark: Any) -> None:
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
    for table, columns in DDL.items():
        spark.sql(
            f"CREATE TABLE {SCHEMA}.{table} ({columns}) USING delta "
            "TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')"
        )


def append_events(spark: Any, start: int, end: int, seed: int) -> Dict[str, int]:
    """Appends events [start, end) to the three tables (one Delta commit per table)."""
    partitions = max(1, -(-(end - start) // 2_000_000))
    counts = {}
    for table in DDL:
        spark.sql(f"INSERT INTO {SCHEMA}.{table} {select_sql(table, start, end, seed, partitions)}")
        counts[table] = _count(table, start, end)
    return counts


def _count(table: str, start: int, end: int) -> int:
    def upto(n: int, low: int, high: int) -> int:  # events below n with offset in [low, high)
        full, rest = divmod(n, TOTAL)
        return full * (high - low) + max(0, min(rest, high) - low)

    low, high = {"person": (0, 1), "auction": (1, 4), "bid": (4, 50)}[table]
    return upto(end, low, high) - upto(start, low, high)
