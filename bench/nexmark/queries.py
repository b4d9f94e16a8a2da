"""The Nexmark queries in Spark SQL, each with all its variants in one place.

Per query:

- `sql`: the query (ported from Flink's nexmark SQL). It is the `incremental_view` model, the
  dbt-spark `table` model (the full rebuild, and the reference the others are compared with) and,
  over streaming views of the same tables, the Structured Streaming query.
- `incremental`: the dbt-spark `incremental` model (merge on `unique_key`, hand-written
  `is_incremental()` filter), or None with `no_incremental` saying why no correct filter exists.
- `stream_mode`: the Structured Streaming output mode; `stream_key`: the MERGE key of the
  foreachBatch writer in update mode (append mode appends idempotently, txnAppId/txnVersion).
  Whether Spark accepts the streaming query is decided by Spark itself at run time: the benchmark
  starts it and reports Spark's error when it refuses.

Placeholders: `@bid`, `@auction`, `@person` (the source tables), `@this` (the incremental model's
own table). The incremental filters rely on two facts of the generator (see generator.py): an
event arrives less than 5 s late in event time (every event of a later step has date_time >
(max date_time of the earlier steps) - 5 s), and auction ids grow in arrival order, with a seller
at most 10 persons ahead of the latest person. The filters use a margin over those bounds.

Event-time bounds used by the streaming and LATENESS variants: sources carry
`withWatermark('date_time', '10 seconds')` (more than the 5 s disorder, so no row is dropped), and
the LATENESS query declares 20 s on its window start (a bid up to 5 s late lands in a window
starting up to 15 s before the newest data, so 20 s drops nothing on this data either).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

STREAM_WATERMARK = "10 seconds"
LOOKBACK = "INTERVAL 6 SECONDS"  # > the generator's 5 s disorder


@dataclass(frozen=True)
class Query:
    name: str
    title: str
    sql: str
    inputs: List[str]
    incremental: Optional[str] = None
    unique_key: List[str] = field(default_factory=list)
    no_incremental: str = ""
    # The incremental model's `incremental_predicates`, so that its MERGE skips the target's
    # files: `merge_predicate` with {bound} replaced by what `merge_bound` (a query over @this,
    # one string) returns before the step. It is the filter's own bound, on a unique_key column:
    # every target row a source row can match satisfies it.
    merge_predicate: str = ""
    merge_bound: str = ""
    view_config: Dict[str, object] = field(default_factory=dict)
    stream_mode: str = "append"
    stream_key: List[str] = field(default_factory=list)
    # Append mode emits a window only once the watermark has passed its end: the streaming result
    # is compared with the others on the rows this predicate keeps (@watermark: the stream's
    # watermark at its last batch), the windows that are closed for sure.
    stream_closed: str = ""


def _latest_minus(this_column: str, lookback: str) -> str:
    """The bound an incremental filter reads from @this: its latest value minus `lookback`."""
    return f"coalesce(max({this_column}), timestamp'1970-01-01 00:00:00') - {lookback}"


def _bound(value: str) -> str:
    """`merge_bound` of a filter bound `value` (an expression over @this)."""
    return f"select cast({value} as string) from @this"


def _since(column: str, lookback: str, this_column: str = "date_time") -> str:
    return f"{column} > (select {_latest_minus(this_column, lookback)} from @this)"


Q0 = "select auction, bidder, price, date_time, extra from @bid"
Q1 = "select auction, bidder, 0.908 * price as price, date_time, extra from @bid"
Q2 = "select auction, price from @bid where auction % 123 = 0"
Q3 = """select P.name, P.city, P.state, A.id
from @auction A join @person P on A.seller = P.id
where A.category = 10 and (P.state = 'OR' or P.state = 'ID' or P.state = 'CA')"""
Q4 = """select Q.category, avg(Q.final) as avg_final
from (
  select A.id, A.category, max(cast(B.price as decimal(20, 0))) as final
  from @auction A join @bid B on A.id = B.auction
  where B.date_time between A.date_time and A.expires
  group by A.id, A.category
) Q
group by Q.category"""
Q5 = """with auction_bids as (
  select auction, window(date_time, '10 seconds', '2 seconds').start as starttime,
         window(date_time, '10 seconds', '2 seconds').end as endtime, count(*) as num
  from @bid
  group by auction, window(date_time, '10 seconds', '2 seconds')
), max_bids as (
  select starttime, endtime, max(num) as maxn from auction_bids group by starttime, endtime
)
select a.auction, a.num, a.starttime
from auction_bids a join max_bids m
  on a.starttime = m.starttime and a.endtime = m.endtime and a.num >= m.maxn"""
Q7 = """select B.auction, B.price, B.bidder, B.date_time, B.extra
from @bid B join (
  select max(price) as maxprice, window(date_time, '10 seconds').end as window_end
  from @bid group by window(date_time, '10 seconds')
) B1 on B.price = B1.maxprice
where B.date_time between B1.window_end - interval 10 seconds and B1.window_end"""
Q8 = """select P.id, P.name, P.starttime
from (
  select id, name, window(date_time, '10 seconds').start as starttime,
         window(date_time, '10 seconds').end as endtime
  from @person{person_filter}
  group by id, name, window(date_time, '10 seconds')
) P join (
  select seller, window(date_time, '10 seconds').start as starttime,
         window(date_time, '10 seconds').end as endtime
  from @auction{auction_filter}
  group by seller, window(date_time, '10 seconds')
) A on P.id = A.seller and P.starttime = A.starttime and P.endtime = A.endtime"""
# q6 as Flink's nexmark writes it groups by the auction but selects a bid's time; here an
# auction's close is its last bid's time, and the order is total (ties by auction id), so every
# approach gives the same rows. The average is decimal: exact whatever the order of the sum.
Q6 = """select Q.seller, Q.id as auction, avg(Q.final) over (
    partition by Q.seller order by Q.date_time, Q.id rows between 9 preceding and current row
  ) as avg_price
from (
  select A.id, A.seller, max(cast(B.price as decimal(20, 0))) as final,
         max(B.date_time) as date_time
  from @auction A join @bid B on A.id = B.auction
  where B.date_time between A.date_time and A.expires
  group by A.id, A.seller
) Q"""
# The winning bid of each auction: top-1 over a join; ties broken by every bid column.
Q9 = """select id, item_name, description, initial_bid, reserve, date_time, expires, seller,
       category, extra, auction, bidder, price, bid_date_time, bid_extra
from (
  select A.id, A.item_name, A.description, A.initial_bid, A.reserve, A.date_time, A.expires,
         A.seller, A.category, A.extra, B.auction, B.bidder, B.price,
         B.date_time as bid_date_time, B.extra as bid_extra,
         row_number() over (partition by A.id
                            order by B.price desc, B.date_time, B.bidder, B.extra) as rownum
  from @auction A join @bid B on A.id = B.auction
  where B.date_time between A.date_time and A.expires
) W
where rownum <= 1"""
QLATE = """select auction, window(date_time, '10 seconds').start as date_time, count(*) as num,
       max(price) as max_price
from @bid{bid_filter}
group by auction, window(date_time, '10 seconds')"""

# Windows of 10 s: a bid of the next step lands in a window starting after
# max(window start in the model) - 5 s - 10 s; recompute windows from 20 s before it, completely.
WINDOW_LOOKBACK = "INTERVAL 20 SECONDS"
_WINDOW_CUTOFF = "(select " + _latest_minus("{col}", WINDOW_LOOKBACK) + " from @this)"

_MERGE_CANNOT_DELETE = (
    "a new bid can take the top spot of a window from rows already written, which must then be "
    "deleted; dbt-spark's merge strategy only inserts and updates by unique_key (and "
    "insert_overwrite would need a partition column per window), so no correct incremental "
    "model can be written with it"
)

QUERIES: Dict[str, Query] = {
    q.name: q
    for q in [
        Query(
            "q0",
            "pass-through",
            Q0,
            ["bid"],
            incremental=Q0
            + "\n{% if is_incremental() %}where "
            + _since("date_time", LOOKBACK)
            + "{% endif %}",
            unique_key=["auction", "bidder", "date_time"],
            merge_predicate="DBT_INTERNAL_DEST.date_time > timestamp'{bound}'",
            merge_bound=_bound(_latest_minus("date_time", LOOKBACK)),
        ),
        Query(
            "q1",
            "currency conversion",
            Q1,
            ["bid"],
            incremental=Q1
            + "\n{% if is_incremental() %}where "
            + _since("date_time", LOOKBACK)
            + "{% endif %}",
            unique_key=["auction", "bidder", "date_time"],
            merge_predicate="DBT_INTERNAL_DEST.date_time > timestamp'{bound}'",
            merge_bound=_bound(_latest_minus("date_time", LOOKBACK)),
        ),
        Query(
            "q2",
            "selection",
            Q2,
            ["bid"],
            no_incremental=(
                "the result (auction, price) has no key and no event time: merge needs a "
                "unique_key, and append needs to know from the model's table which bids it has "
                "already seen; neither is in the result"
            ),
        ),
        Query(
            "q3",
            "local item suggestion (join)",
            Q3,
            ["auction", "person"],
            # New auctions have ids above every id written; an older auction can only gain a match
            # from a new person (its seller was up to 10 persons ahead), and such an auction is at
            # most ~30 auction ids before the newest auction id. 60 is the margin.
            incremental=Q3 + "\n{% if is_incremental() %}and A.id > "
            "(select coalesce(max(id), 0) - 60 from @this){% endif %}",
            unique_key=["id"],
            merge_predicate="DBT_INTERNAL_DEST.id > {bound}",
            merge_bound=_bound("coalesce(max(id), 0) - 60"),
        ),
        Query(
            "q4",
            "average price per category (join, nested aggregate)",
            Q4,
            ["auction", "bid"],
            no_incremental=(
                "each category's average is over the maximum bid of every auction in it, and every "
                "step's bids touch all 5 categories: a correct filter re-reads every auction's "
                "bids, i.e. it is the full rebuild plus a merge"
            ),
            stream_mode="update",
            stream_key=["category"],
        ),
        Query(
            "q5",
            "hot items (hopping window, aggregate of aggregate, join)",
            Q5,
            ["bid"],
            no_incremental=_MERGE_CANNOT_DELETE,
            stream_mode="append",
            stream_closed="starttime < @watermark - INTERVAL 20 SECONDS",
        ),
        Query(
            "q7",
            "highest bid (tumbling window max, join)",
            Q7,
            ["bid"],
            no_incremental=_MERGE_CANNOT_DELETE,
            stream_mode="append",
            stream_closed="date_time < @watermark - INTERVAL 20 SECONDS",
        ),
        Query(
            "q8",
            "monitor new users (two windowed aggregates, join)",
            Q8.format(person_filter="", auction_filter=""),
            ["auction", "person"],
            incremental="select * from (\n"
            + Q8.format(
                person_filter="\n{% if is_incremental() %}  where date_time >= "
                + _WINDOW_CUTOFF.format(col="starttime")
                + "{% endif %}",
                auction_filter="\n{% if is_incremental() %}  where date_time >= "
                + _WINDOW_CUTOFF.format(col="starttime")
                + "{% endif %}",
            )
            + "\n) w\n{% if is_incremental() %}where starttime >= "
            + _WINDOW_CUTOFF.format(col="starttime")
            + "{% endif %}",
            unique_key=["id", "starttime"],
            merge_predicate="DBT_INTERNAL_DEST.starttime >= timestamp'{bound}'",
            merge_bound=_bound(_latest_minus("starttime", WINDOW_LOOKBACK)),
            stream_mode="append",
            stream_closed="starttime < @watermark - INTERVAL 20 SECONDS",
        ),
        Query(
            "q6",
            "average selling price per seller, last 10 auctions (aggregate, window)",
            Q6,
            ["auction", "bid"],
            no_incremental=(
                "each seller's average runs over their last 10 closed auctions, and a bid can "
                "change an auction's final price and close time, hence the averages of every "
                "later auction of the seller: merge by key cannot delete or re-rank those rows "
                "from a filtered read"
            ),
        ),
        Query(
            "q9",
            "winning bid per auction (top-1 over a join)",
            Q9,
            ["auction", "bid"],
            no_incremental=(
                "a new bid can take the top spot of an auction already written and its old winner "
                "must go; a filter on new bids does not see the auction's earlier bids"
            ),
            stream_mode="update",
            stream_key=["id"],
        ),
        Query(
            "qlate",
            "bids per auction per 10 s window, LATENESS 20 s on the window start",
            QLATE.format(bid_filter=""),
            ["bid"],
            incremental="select * from (\n"
            + QLATE.format(
                bid_filter="\n{% if is_incremental() %}where date_time >= "
                + _WINDOW_CUTOFF.format(col="date_time")
                + "{% endif %}"
            )
            + "\n) w\n{% if is_incremental() %}where date_time >= "
            + _WINDOW_CUTOFF.format(col="date_time")
            + "{% endif %}",
            unique_key=["auction", "date_time"],
            merge_predicate="DBT_INTERNAL_DEST.date_time >= timestamp'{bound}'",
            merge_bound=_bound(_latest_minus("date_time", WINDOW_LOOKBACK)),
            view_config={"lateness": {"date_time": "INTERVAL 20 SECONDS"}},
            stream_mode="update",
            stream_key=["auction", "date_time"],
        ),
    ]
}


def render(sql: str, tables: Dict[str, str], this: str = "") -> str:
    """`sql` with @bid/@auction/@person (and @this) replaced."""
    out = sql.replace("@this", this)
    for name, ref in tables.items():
        out = out.replace(f"@{name}", ref)
    return out
