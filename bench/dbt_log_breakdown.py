"""Where a model's time goes, from a dbt log: every statement of every run of a node, timed.

dbt writes each statement it sends (`On model.x: <sql>`) and its time (`SQL status: OK in N
seconds`) to `logs/dbt.log` at debug level. This script groups them by node run (from `Began
running node` to `Finished running node`), names each statement by its first words with the
adapter's per-run temporary names shortened (`_streamsql_<schema>_<model>_<id>_net` -> `~net`),
and prints, per node, the median over its runs of each statement's time, plus the time between
statements (Python, planning, dbt's own work).

    python bench/dbt_log_breakdown.py bench/work-nexmark/logs/dbt.log --nodes q3_view,qlate_view \
        --runs 2:4

`--runs a:b` keeps runs a..b-1 of each node (0-based, in log order), e.g. to leave out the first
build. Output: markdown, one table per node.
"""

from __future__ import annotations

import argparse
import re
import statistics
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

LINE = re.compile(r"^\S*?(\d\d:\d\d:\d\d\.\d+) \[\w+\s*\] \[([^\]]*)\]: (.*)$")
BEGAN = re.compile(r"Began running node model\.[\w]+\.(\w+)$")
FINISHED = re.compile(r"Finished running node model\.[\w]+\.(\w+)$")
STATEMENT = re.compile(r"On model\.[\w]+\.(\w+): (.*)$")
STATUS = re.compile(r"SQL status: \w+ in ([\d.]+) seconds")
TEMP_NAME = re.compile(r"_streamsql_\w+?_[0-9a-f]{8}_(\w+)")
QUALIFIED = re.compile(r"`?(\w+)`?\.`?(\w+)`?")


@dataclass
class NodeRun:
    node: str
    started: datetime
    finished: Optional[datetime] = None
    statements: List[Tuple[str, float]] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return (self.finished - self.started).total_seconds() if self.finished else 0.0


def statement_name(sql: str) -> str:
    """A short, run-independent name: the first words, temp names shortened."""
    text = re.sub(r"/\*.*?\*/", "", sql).strip()
    text = TEMP_NAME.sub(lambda m: "~" + m.group(1), text)
    text = re.sub(r"'[^']*'", "'…'", text)  # literals (timestamps, step numbers) vary per run
    text = re.sub(r"\b\d+\b", "N", text)
    if text.upper().startswith("SET "):
        return text.split("=", 1)[0]
    words = text.split()
    name = " ".join(words[:6])
    return name[:90]


def parse(log: Path) -> List[NodeRun]:
    runs: List[NodeRun] = []
    open_runs: Dict[str, NodeRun] = {}
    pending: Dict[str, Tuple[str, str]] = {}  # thread -> (node, statement) awaiting its status
    day = datetime(2000, 1, 1)
    for raw in log.read_text(errors="replace").splitlines():
        match = LINE.match(raw.replace("\x1b[0m", ""))
        if not match:
            continue
        at = datetime.combine(day.date(), datetime.strptime(match.group(1), "%H:%M:%S.%f").time())
        thread, text = match.group(2), match.group(3)
        if m := BEGAN.search(text):
            open_runs[m.group(1)] = NodeRun(m.group(1), at)
        elif m := FINISHED.search(text):
            run = open_runs.pop(m.group(1), None)
            if run:
                run.finished = at
                runs.append(run)
        elif m := STATEMENT.match(text):
            pending[thread] = (m.group(1), statement_name(m.group(2)))
        elif (m := STATUS.search(text)) and thread in pending:
            # dbt logs a statement's status on the thread that sent it, right after it
            node, name = pending.pop(thread)
            if node in open_runs:
                open_runs[node].statements.append((name, float(m.group(1))))
    return runs


def breakdown(runs: Sequence[NodeRun]) -> List[str]:
    node = runs[0].node
    per_name: Dict[str, List[float]] = {}
    counts: Dict[str, List[int]] = {}
    order: List[str] = []
    for run in runs:
        seen: Dict[str, float] = {}
        number: Dict[str, int] = {}
        for name, seconds in run.statements:
            if name not in per_name and name not in order:
                order.append(name)
            seen[name] = seen.get(name, 0.0) + seconds
            number[name] = number.get(name, 0) + 1
        for name in seen:
            per_name.setdefault(name, []).append(seen[name])
            counts.setdefault(name, []).append(number[name])
    totals = [run.seconds for run in runs]
    sql = [sum(s for _, s in run.statements) for run in runs]
    lines = [
        f"### {node} ({len(runs)} runs, median {statistics.median(totals):.2f} s; "
        f"statements {statistics.median(sql):.2f} s, between them "
        f"{statistics.median([t - s for t, s in zip(totals, sql)]):.2f} s)",
        "",
        "| statement | times per run | median s |",
        "|---|---:|---:|",
    ]
    ranked = sorted(order, key=lambda n: -statistics.median(per_name[n]))
    for name in ranked:
        lines.append(
            f"| `{name.replace('|', '/')}` | {statistics.median(counts[name]):g} | "
            f"{statistics.median(per_name[name]):.2f} |"
        )
    return lines + [""]


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--nodes", default="", help="comma-separated model names (default all)")
    parser.add_argument("--runs", default="", help="a:b, the runs of each node to keep (0-based)")
    args = parser.parse_args(argv)
    runs = parse(args.log)
    wanted = [n for n in args.nodes.split(",") if n] or sorted({r.node for r in runs})
    start, _, end = args.runs.partition(":")
    for node in wanted:
        mine = [r for r in runs if r.node == node]
        mine = mine[int(start) if start else None : int(end) if end else None]
        if mine:
            print("\n".join(breakdown(mine)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
