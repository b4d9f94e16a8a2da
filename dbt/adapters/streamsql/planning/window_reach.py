"""How far back from a touched partition's first change a window block must read.

A window per partition (windows.py) is evaluated again over each partition the step touches,
old and new. Most frames reach only part of it: a bounded RANGE frame the rows within its width
of the change (`range_reach`), a bounded ROWS frame or LAG/LEAD the N rows before it
(`rows_reach`), and a running aggregate or a rank none of the rows before it, which it reads as
one aggregate (`running_reach`). DeltaBuilder.window_delta (linear.py) turns each into a
restriction of the block's rows and a key bound Delta skips files by.
"""

from __future__ import annotations

from typing import List, NamedTuple, Optional, Tuple

from sqlglot import exp

from dbt.adapters.streamsql.planning.types import (
    DECIMAL,
    INTEGRAL,
    TypeOracle,
    decimal_average,
    decimal_precision_scale,
    numeric_kind_of_type,
    sum_type,
)
from dbt.adapters.streamsql.planning.windows import (
    RANKS,
    VALUES_OF_ROWS,
    WHOLE_PARTITION_AGGREGATES,
    is_integer,
    rows_frame,
    window_name,
    windows_of,
)

# The lowest non-NULL ORDER BY value among a touched partition's changed rows (NULL when all are
# NULL: only the NULL-ordered rows are read), as `range_reach` and linear.py's restriction name it.
LOWEST = "_streamsql_lo"


def range_reach(select: exp.Select) -> Optional[Tuple[exp.Expression, exp.Expression]]:
    """How far back from a partition's first change a step must read, for a block whose every
    window is COUNT/SUM/AVG/MIN/MAX over a RANGE frame with bounded ends (`RANGE BETWEEN
    INTERVAL 1 HOUR PRECEDING AND CURRENT ROW`) on one ascending ORDER BY expression o.

    Returns o and the lowest o the step must read, as an expression over column `LOWEST` (the
    partition's lowest changed non-NULL o): that minus the widest frame. A row whose frame
    reaches no changed row (o below LOWEST minus the frame's FOLLOWING end) keeps its value; one
    that reaches one reads rows down to its frame's start at most. Rows read below those are
    evaluated with a cut frame, the same before and after the step, so they net out. Rows with
    a NULL o are only in each other's frames (Spark's RANGE frames): they are read too
    (`reach_predicate`). None when the block's windows are other than that (a running or
    whole-partition frame, ROWS, LAG).
    """
    order: Optional[exp.Expression] = None
    cuts: List[exp.Expression] = []
    for window in windows_of(select):
        spec = window.args.get("spec")
        ordering = window.args.get("order")
        if (
            window_name(window) not in WHOLE_PARTITION_AGGREGATES
            or spec is None
            or str(spec.args.get("kind") or "").lower() != "range"
            or spec.args.get("exclude")
            or ordering is None
            or len(ordering.expressions) != 1
            or ordering.expressions[0].args.get("desc")
        ):
            return None
        this = ordering.expressions[0].this
        if order is None:
            order = this
        elif this != order:
            return None
        ends = _bounded_ends(spec)
        if ends is None:
            return None
        cut: exp.Expression = exp.column(LOWEST)
        for (value, direction), sign in zip(ends, (1, -1)):
            if value is None:
                continue
            # start n PRECEDING: cut - n; start n FOLLOWING: + n; end: the opposite
            if (direction == "preceding") == (sign == 1):
                cut = exp.Sub(this=cut, expression=value.copy())
            else:
                cut = exp.Add(this=cut, expression=value.copy())
        cuts.append(cut)
    if order is None:
        return None
    return order, cuts[0] if len(cuts) == 1 else exp.func("least", *cuts)


def rows_reach(select: exp.Select) -> Optional[Tuple[exp.Column, int]]:
    """How many rows back from a partition's first change a step must read, for a block whose
    every window is LAG/LEAD with a constant offset, or COUNT/SUM/AVG/MIN/MAX/FIRST_VALUE/
    LAST_VALUE/NTH_VALUE over a ROWS frame with bounded ends (`ROWS BETWEEN 9 PRECEDING AND
    CURRENT ROW`), all partitioned alike and ordered by one column c first, ascending with NULLs
    first (Spark's default).

    Returns c and N, the widest FOLLOWING reach plus the widest PRECEDING reach (at least 1).
    Below the partition's lowest changed c, no row changes, and only the last FOLLOWING-reach
    rows before the change can get another value; they read PRECEDING-reach rows further back.
    So the rows with c at least the Nth highest c below the change (counting rows, not values;
    ties on it all included), and every row above, are what a step must read. A row read that
    changes sees its whole frame; one that does not is evaluated the same way before and after
    the step (a frame cut at the same place, over rows that did not change), so it nets out.
    A changed row with a NULL c (NULLs come first), or fewer than N rows below the change,
    means the whole partition. None for any other block (ranks and NTILE count rows from the
    partition's start; a running or UNBOUNDED frame).
    """
    order = _ordered_alike(select)
    following = preceding = 0
    for window in windows_of(select):
        reach = _rows_of(window)
        if reach is None:
            return None
        following, preceding = max(following, reach[0]), max(preceding, reach[1])
    if order is None:
        return None
    return order, max(following + preceding, 1)


def _ordered_alike(select: exp.Select) -> Optional[exp.Column]:
    """The column c every window of the block is first ordered by, ascending with NULLs first,
    all partitioned alike (the reach of `rows_reach`); None if none."""
    found = _ordered_one_way(select)
    return found[0] if found is not None and not found[1] else None


def _ordered_one_way(select: exp.Select) -> Optional[Tuple[exp.Column, bool]]:
    """The column c every window of the block is first ordered by, all in one direction with
    Spark's NULL order (ascending NULLs first, or descending NULLs last), and whether it is
    descending; all partitioned alike. None if none."""
    order: Optional[exp.Expression] = None
    descending: Optional[bool] = None
    partition: Optional[List[str]] = None
    for window in windows_of(select):
        ordering = window.args.get("order")
        if ordering is None or not ordering.expressions:
            return None
        first = ordering.expressions[0]
        desc = bool(first.args.get("desc"))
        if desc == bool(first.args.get("nulls_first")):
            return None
        if order is None:
            order, descending = first.this, desc
        elif first.this != order or desc != descending:
            return None
        keys = sorted(key.sql() for key in window.args.get("partition_by") or [])
        if partition is None:
            partition = keys
        elif keys != partition:
            return None
    return (order, bool(descending)) if isinstance(order, exp.Column) else None


class RunningWindow(NamedTuple):
    """One window of a running block: what the rows before the change aggregate to (`call`:
    COUNT(*), SUM(x), MIN(x), MAX(x), COUNT(DISTINCT <ORDER BY>) or AVG(x)), the type of the
    window's value ("" when no CAST is needed) and, for AVG, the type of the decimal it
    averages."""

    window: exp.Window
    call: exp.Expression
    cast: str = ""
    average_of: str = ""  # AVG: the decimal type it averages

    def argument(self) -> Optional[exp.Expression]:
        """What the rows before the change give the prefix's aggregate (None: COUNT(*))."""
        argument = self.call.this
        if isinstance(argument, exp.Distinct):
            return argument.expressions[0]
        return None if isinstance(argument, exp.Star) else argument

    def prefix(self, column: exp.Column) -> exp.Expression:
        """The prefix's aggregate over `column`, the projected argument (AVG: its sum and its
        count, as one struct)."""
        call = self.call.copy()
        if isinstance(call, exp.Avg):
            return exp.Anonymous(
                this="named_struct",
                expressions=[
                    exp.Literal.string("s"),
                    exp.Sum(this=column.copy()),
                    exp.Literal.string("c"),
                    exp.Count(this=column.copy()),
                ],
            )
        if isinstance(call.this, exp.Distinct):
            call.this.set("expressions", [column])
        elif not isinstance(call.this, exp.Star):
            call.set("this", column)
        return call


class Running(NamedTuple):
    """What `running_reach` finds: the column c, whether the windows order it descending, and
    each window's prefix."""

    order: exp.Column
    descending: bool
    windows: List[RunningWindow]


# Decimals whose AVG's sum (precision + 10) and result (+ 4) keep their exact types
_AVG_PRECISION = 27


def running_reach(select: exp.Select, oracle: Optional[TypeOracle]) -> Optional[Running]:
    """For a block whose every window is a running COUNT, SUM (of integers or decimals), AVG (of
    decimals), MIN or MAX (a frame from UNBOUNDED PRECEDING to the current row, the default with
    an ORDER BY), or ROW_NUMBER, RANK or DENSE_RANK, all partitioned alike and first ordered by
    one column c in one direction with Spark's NULL order (ascending with NULLs first,
    descending with NULLs last).

    Ascending, no row before the partition's lowest changed c changes (rows with a lower or a
    NULL c), and a row from it on is the prefix's aggregate (the rows before) combined with
    the window over the rows from the lowest changed c on (`combine_running`): a step reads the
    prefix once, as an aggregate, and evaluates the window over the rest. Descending, the same
    with the highest changed c: the rows before are those with a higher c, and the rows with a
    NULL c come last, among the rest. A rank is a count: every row before the change orders
    strictly before every row from it on, so ROW_NUMBER and RANK add the prefix's rows
    (COUNT(*)), and DENSE_RANK the prefix's distinct ORDER BY values (COUNT(DISTINCT) of them
    as one struct, whose NULL fields compare equal as the window's peers do). AVG of a decimal
    is its exact sum over its count, turned into AVG's value as Spark does
    (types.decimal_average), so it rounds the same. Fractional SUMs and AVGs are left out (a
    sum split in two may round differently), and so are AVGs of integers.
    """
    ordered = _ordered_one_way(select)
    found: List[RunningWindow] = []
    for window in windows_of(select):
        call = window.this
        if not _running_frame(window.args.get("spec")):
            return None
        if window_name(window) in RANKS:
            found.append(RunningWindow(window, _rank_prefix(window), "INT"))
            continue
        if not isinstance(call, (exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max)):
            return None
        if isinstance(call.this, exp.Distinct) or call.args.get("expressions"):
            return None
        entry = RunningWindow(window, call)
        if isinstance(call, (exp.Sum, exp.Avg)):
            entry = _summed(entry, oracle)
            if entry is None:
                return None
        found.append(entry)
    if ordered is None:
        return None
    return Running(ordered[0], ordered[1], found)


def _summed(entry: RunningWindow, oracle: Optional[TypeOracle]) -> Optional[RunningWindow]:
    """A SUM of integers (BIGINT) or of decimals of a known type, or an AVG of the latter, with
    the types its value is cast to; None for the others."""
    argument = entry.call.this
    data_type = oracle.type_of(argument) if oracle is not None else None
    kind = numeric_kind_of_type(data_type)
    if kind is None and oracle is not None:
        kind = oracle.numeric_kind(argument)
    if isinstance(entry.call, exp.Sum):
        if kind == DECIMAL and data_type:
            return entry._replace(cast=sum_type(data_type, DECIMAL))
        return entry if kind == INTEGRAL else None
    if kind != DECIMAL or not data_type:
        return None
    if decimal_precision_scale(data_type)[0] > _AVG_PRECISION:
        return None
    return entry._replace(average_of=data_type)


def _rank_prefix(window: exp.Window) -> exp.Expression:
    """What a rank adds for the rows below the change: their number, or for DENSE_RANK the
    number of distinct ORDER BY values among them."""
    if not isinstance(window.this, exp.DenseRank):
        return exp.Count(this=exp.Star())
    fields: List[exp.Expression] = []
    for i, ordered in enumerate(window.args["order"].expressions):
        fields += [exp.Literal.string(f"o{i}"), ordered.this.copy()]
    struct = exp.Anonymous(this="named_struct", expressions=fields)
    return exp.Count(this=exp.Distinct(expressions=[struct]))


def _running_frame(spec: Optional[exp.WindowSpec]) -> bool:
    """No frame (with an ORDER BY: RANGE from UNBOUNDED PRECEDING to the current row), or that
    frame written out, as ROWS or RANGE."""
    if spec is None:
        return True
    start, end = spec.args.get("start"), spec.args.get("end")
    return (
        not spec.args.get("exclude")
        and isinstance(start, str)
        and start.upper() == "UNBOUNDED"
        and str(spec.args.get("start_side") or "").lower() == "preceding"
        and (end is None or (isinstance(end, str) and end.upper() == "CURRENT ROW"))
    )


def _typed(value: exp.Expression, data_type: str) -> exp.Expression:
    return exp.Cast(this=value, to=exp.DataType.build(data_type, dialect="spark"))


def combine_running(
    entry: RunningWindow, prefix: exp.Expression, window: exp.Window
) -> exp.Expression:
    """A running window's value from its prefix's aggregate and the window over the rest."""
    call = entry.call
    if isinstance(call, exp.Count):  # also the ranks
        value: exp.Expression = exp.Add(
            this=exp.func("coalesce", prefix, exp.Literal.number(0)), expression=window
        )
    elif isinstance(call, exp.Sum):  # NULL only when both are: no value in the frame
        both = exp.Add(this=prefix.copy(), expression=window.copy())
        value = exp.func("coalesce", both, prefix, window)
    elif isinstance(call, exp.Avg):  # as Spark's AVG of a decimal, NULL without a value
        total = combine_running(
            RunningWindow(window, exp.Sum(), sum_type(entry.average_of, DECIMAL)),
            exp.Dot(this=prefix.copy(), expression=exp.to_identifier("s")),
            _as(window, exp.Sum),
        )
        count = combine_running(
            RunningWindow(window, exp.Count()),
            exp.Dot(this=prefix.copy(), expression=exp.to_identifier("c")),
            _as(window, exp.Count),
        )
        mean = decimal_average(total, count.copy(), entry.average_of)
        some = exp.GT(this=count, expression=exp.Literal.number(0))
        value = exp.Case(ifs=[exp.If(this=some, true=mean)])
    else:  # LEAST and GREATEST skip NULLs
        value = exp.func("least" if isinstance(call, exp.Min) else "greatest", prefix, window)
    if entry.cast:
        value = _typed(value, entry.cast)
    return exp.paren(value, copy=False)


def _as(window: exp.Window, function: type) -> exp.Window:
    """The window with its function replaced by `function` over the same argument."""
    other = window.copy()
    other.set("this", function(this=window.this.this.copy()))
    return other


def _rows_of(window: exp.Window) -> Optional[Tuple[int, int]]:
    """The rows a window's frame reaches after and before the current one (LAG/LEAD: offset)."""
    name = window_name(window)
    call = window.this
    if name in ("lag", "lead"):
        offset = call.args.get("offset")
        if offset is not None and not is_integer(offset):
            return None
        rows = 1 if offset is None else int(offset.name)
        return (rows, 0) if name == "lead" else (0, rows)
    spec = window.args.get("spec")
    if (
        name not in WHOLE_PARTITION_AGGREGATES + VALUES_OF_ROWS
        or not rows_frame(window)
        or spec.args.get("exclude")
    ):
        return None
    ends = _bounded_ends(spec)
    if ends is None or any(v is not None and not is_integer(v) for v, _ in ends):
        return None
    start, end = [
        0 if value is None else int(value.name) * (-1 if direction == "preceding" else 1)
        for value, direction in ends
    ]
    return max(end, 0), max(-start, 0)


def _bounded_ends(
    spec: exp.WindowSpec,
) -> Optional[List[Tuple[Optional[exp.Expression], str]]]:
    """The frame's start and end as (offset, "preceding" or "following"), the offset None for
    CURRENT ROW (also an end left out: `ROWS 2 PRECEDING`); None when an end is UNBOUNDED."""
    ends: List[Tuple[Optional[exp.Expression], str]] = []
    for bound, side in (("start", "start_side"), ("end", "end_side")):
        value, direction = spec.args.get(bound), str(spec.args.get(side) or "").lower()
        if isinstance(value, str):
            if value.upper() != "CURRENT ROW":
                return None
            value = None
        ends.append((value, direction))
    return ends


def reach_predicate(order: exp.Expression, at_least: exp.Expression) -> exp.Expression:
    """`(at_least OR o IS NULL)`, `at_least` being `o >= ...` (or a key bound standing for one):
    a row a bounded RANGE frame's re-evaluation reads. Rows whose ORDER BY value is NULL are
    each other's frame and nobody else's: they are read whole (unchanged ones give the same
    values before and after the step)."""
    return exp.paren(
        exp.or_(at_least, exp.Is(this=order.copy(), expression=exp.Null())), copy=False
    )
