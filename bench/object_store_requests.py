"""The S3 requests a step makes, counted from the object store's own request log, as a source
table ages from 10 to 1,000 versions.

Issue 65 asks that a step's requests not grow with the age of the tables it reads. One project,
its warehouse on moto's S3 server on loopback (scripts/s3_server.py, reached through S3A),
runs two identical pipelines side by side in every `dbt run`:

- `young`: the source `raw.young`, made by 10 commits on S3;
- `old`: the source `raw.old`, made by 1,000 commits (a checkpoint every ten, Delta's default)
  on this machine's disk and then uploaded, object by object, to the warehouse on S3 (the
  same Delta table; only how it got there is quicker than 1,000 commits over S3A);

each read by an aggregate (`agg_*`, with its state table) and a linear model (`lin_*`). Before
each run, outside the counted window, the bench appends one batch to both sources. Every
request the server answers during the run is attributed to the table whose key it names (a
LIST by its prefix) and counted by kind (LIST, GET, HEAD, PUT, POST, DELETE). S3A asks for
1,000 keys a LIST page, as many as AWS's S3 returns (moto would return S3A's default 5,000 in
one). Both pipelines' models are equally young, so the two counts differ by what the sources'
age costs; the steps after the models' tenth commit show them past their first checkpoint too.

`--store local` takes the same steps with the warehouse on this machine's disk (`raw.old` aged
in place, no requests to count) and writes results/<output-name>_local.json; the S3 run's
report puts those seconds beside its own when the file is there, so run it first.

Writes results/<output-name>.md and .json.

    python bench/object_store_requests.py --store local    # about 15 minutes on 2 cores
    python bench/object_store_requests.py                  # about 20 minutes
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import parse_qs, unquote, urlsplit

from benchlib import (
    REPO_DIR,
    Dbt,
    add_output_arguments,
    dbt_tree,
    loopback_s3,
    machine_info,
    machine_lines,
    median,
    on_object_store,
    start_session,
    write_project_skeleton,
)

sys.path.insert(0, str(REPO_DIR))
from scripts.s3_server import S3Server, s3a_settings  # noqa: E402

BUCKET = "lake"
OLD_PREFIX = "wh/tables/raw.db/old"
PIPELINES = ("young", "old")
KINDS = ("LIST", "GET", "HEAD", "PUT", "POST", "DELETE")
SMALL_DATA = {
    "spark.sql.shuffle.partitions": "1",
    "spark.sql.adaptive.enabled": "false",
}
# S3A asks for up to 5,000 keys a LIST (fs.s3a.paging.maximum) and moto returns them all; AWS's
# S3 returns at most 1,000 a page. Asking for 1,000 makes moto page as S3 does, so a listing of
# a long `_delta_log/` takes as many requests here as there.
AS_S3_PAGES = {"spark.hadoop.fs.s3a.paging.maximum": "1000"}


def models() -> Dict[str, str]:
    found = {}
    for name in PIPELINES:
        found[f"agg_{name}.sql"] = (
            "{{ config(materialized='incremental_view') }}\n"
            f"select k, count(*) as n, sum(v) as total from {{{{ source('raw', '{name}') }}}} "
            "group by k"
        )
        found[f"lin_{name}.sql"] = (
            "{{ config(materialized='incremental_view') }}\n"
            f"select id, k, v from {{{{ source('raw', '{name}') }}}} where v % 2 = 0"
        )
    return found


def append(spark: Any, table: str, start: int, rows: int) -> None:
    spark.sql(
        f"INSERT INTO {table} SELECT id, id % 97 AS k, id * 7 % 1000 AS v "
        f"FROM range({start}, {start + rows})"
    )


def attribute(line: str) -> Tuple[str, str]:
    """(kind, table) of one request line of the server's log ("" kind: not a request)."""
    try:
        method, target = line.split('"', 2)[1].split(" ")[:2]
    except (IndexError, ValueError):
        return "", ""
    parts = urlsplit(target)
    path = unquote(parts.path).lstrip("/")
    query = parse_qs(parts.query)
    if method == "GET" and "/" not in path:  # a GET of the bucket: a listing
        kind, key = "LIST", query.get("prefix", [""])[0]
    else:
        kind, key = method, path.split("/", 1)[1] if "/" in path else ""
    segments = key.split("/")
    if key.startswith("wh/tables/_streamsql_writer"):
        return kind, "writer claim"
    if len(segments) >= 4 and segments[:2] == ["wh", "tables"] and segments[2].endswith(".db"):
        return kind, f"{segments[2][: -len('.db')]}.{segments[3]}"
    return kind, "other: " + "/".join(segments[:3])


def requests_since(log: Path, offset: int) -> Tuple[int, List[Tuple[str, str]]]:
    with open(log, "rb") as handle:
        handle.seek(offset)
        text = handle.read().decode("utf-8", errors="replace")
    complete = text[: text.rfind("\n") + 1]
    found = [attribute(line) for line in complete.splitlines() if 'HTTP/1.1"' in line]
    return offset + len(complete.encode()), [item for item in found if item[0]]


def pipeline_of(table: str) -> str:
    for name in PIPELINES:
        if table.endswith(f".{name}") or f"_{name}" in table:
            return name
    return "shared"


def upload(folder: Path, server: S3Server, prefix: str) -> int:
    """Every file of a table's folder to `prefix`, but the local file system's own checksum
    files (`.name.crc`), which S3A neither writes nor reads."""
    client, count = server.client(), 0
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.name.startswith("."):
            key = f"{prefix}/{path.relative_to(folder).as_posix()}"
            client.put_object(Bucket=BUCKET, Key=key, Body=path.read_bytes())
            count += 1
    return count


def get_latency_ms(server: S3Server, key: str, repeats: int = 50) -> float:
    """The median time of a signed GET of a small object (boto3), as S3A makes them."""
    client, times = server.client(), []
    for _ in range(repeats):
        started = time.perf_counter()
        client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        times.append((time.perf_counter() - started) * 1000)
    return round(median(times), 2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=13, help="dbt runs; the first builds")
    parser.add_argument("--batch", type=int, default=100, help="rows appended to each source")
    parser.add_argument("--young", type=int, default=10, help="commits of raw.young")
    parser.add_argument("--old", type=int, default=1000, help="commits of raw.old")
    parser.add_argument(
        "--store",
        choices=("s3", "local"),
        default="s3",
        help="local: the same steps with the warehouse on this disk (no requests to count), "
        "written as <output-name>_local.json, which the S3 run's report shows beside its own",
    )
    parser.add_argument(
        "--report", action="store_true", help="no run: write the .md again from the .json files"
    )
    add_output_arguments(parser, "object_store_requests")
    args = parser.parse_args()
    if args.report:
        write_report(Path(args.results_dir), args.output_name)
        return 0
    work = Path(args.work_dir).resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    if args.store == "local":
        return run(args, work, None)
    server, _ = loopback_s3(work / "s3", BUCKET)
    try:
        return run(args, work, server)
    finally:
        server.stop()


def run(args: Any, work: Path, server: Optional[S3Server]) -> int:
    """The sources, then `--steps` runs; `server` None: the warehouse on local disk."""
    settings = {**(s3a_settings(server.endpoint) if server else {}), **SMALL_DATA}
    if server:
        settings.update(AS_S3_PAGES)
    target = write_project_skeleton(
        work, "object_store_requests", "demo", "3g", {"raw": list(PIPELINES)}, settings=settings
    )
    if server:
        target = on_object_store(work, "object_store_requests", target, f"s3a://{BUCKET}/wh")
    for name, text in models().items():
        (work / "models" / name).write_text(text)
    spark = start_session(target)
    info = machine_info(spark, args)
    info["dbt_tree"] = dbt_tree()
    started = time.monotonic()
    uploaded = make_sources(args, spark, work, server)
    setup_s = time.monotonic() - started
    versions = {
        name: 1 + int(spark.sql(f"DESCRIBE HISTORY raw.{name}").agg({"version": "max"}).first()[0])
        for name in PIPELINES
    }
    print(f"sources at {versions} versions ({setup_s:.0f} s)")
    latency = None
    if server:
        latency = get_latency_ms(server, OLD_PREFIX + "/_delta_log/00000000000000000000.json")

    dbt = Dbt(work)
    dbt.parse()
    offset = server.log.stat().st_size if server else 0
    steps: List[Dict[str, Any]] = []
    next_id = max(args.young, args.old) * args.batch
    for step in range(1, args.steps + 1):
        if step > 1:
            for name in PIPELINES:
                append(spark, f"raw.{name}", next_id, args.batch)
            next_id += args.batch
        if server:  # the appends' requests are not the step's
            offset, _ = requests_since(server.log, offset)
        wall, nodes = dbt.run(["*"])
        record: Dict[str, Any] = {
            "step": step,
            "wall_s": round(wall, 2),
            "model_s": {node: round(run.execution_time, 2) for node, run in nodes.items()},
        }
        if server:
            offset, seen = requests_since(server.log, offset)
            record.update(counted(seen))
        steps.append(record)
        print(f"step {step}: {record.get('requests', '')} requests, {wall:.1f} s", flush=True)

    name = args.output_name + ("_local" if server is None else "")
    result = {
        "benchmark": "object_store_requests",
        "store": "s3 (moto on loopback)" if server else "local disk",
        "adapter": info["dbt_tree"],
        "args": vars(args),
        "machine": info,
        "source_versions": versions,
        "old_source_objects": uploaded,
        "setup_s": round(setup_s, 1),
        "loopback_get_ms": latency,
        "summary": summarize(steps),
        "steps": steps,
    }
    results = Path(args.results_dir)
    results.mkdir(parents=True, exist_ok=True)
    (results / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
    if server:
        write_report(results, name)
    else:
        print(f"wrote {results / name}.json (the S3 run's report shows it beside its own)")
    return 0


def write_report(results: Path, name: str) -> None:
    """<name>.md from <name>.json, with <name>_local.json's seconds beside it if it is there."""
    result = json.loads((results / f"{name}.json").read_text())
    twin = results / f"{name}_local.json"
    beside = json.loads(twin.read_text()) if twin.exists() else None
    (results / f"{name}.md").write_text(report(result, beside))
    print(f"wrote {results / name}.md")


def make_sources(args: Any, spark: Any, work: Path, server: Optional[S3Server]) -> Optional[int]:
    """raw.young and raw.old at their versions; on S3, raw.old is aged on local disk and
    uploaded (returns how many objects)."""
    schema = "id BIGINT, k BIGINT, v BIGINT"
    spark.sql("CREATE SCHEMA IF NOT EXISTS raw")
    spark.sql(f"CREATE TABLE raw.young ({schema}) USING delta")
    for version in range(1, args.young):
        append(spark, "raw.young", version * args.batch, args.batch)
    aged = f"delta.`{work / 'aged' / 'old'}`" if server else "raw.old"
    spark.sql(f"CREATE TABLE {aged} ({schema}) USING delta")
    for version in range(1, args.old):
        append(spark, aged, version * args.batch, args.batch)
        if version % 100 == 0:
            print(f"raw.old aged to {version} versions", flush=True)
    if server is None:
        return None
    uploaded = upload(work / "aged" / "old", server, OLD_PREFIX)
    spark.sql(f"CREATE TABLE raw.old USING delta LOCATION 's3a://{BUCKET}/{OLD_PREFIX}'")
    return uploaded


def counted(seen: List[Tuple[str, str]]) -> Dict[str, Any]:
    """A step's requests by pipeline, by pipeline and kind, and by table."""
    by_kind = {
        name: Counter(kind for kind, table in seen if pipeline_of(table) == name)
        for name in (*PIPELINES, "shared")
    }
    return {
        "requests": {name: sum(counts.values()) for name, counts in by_kind.items()},
        "by_kind": {name: dict(counts) for name, counts in by_kind.items()},
        "by_table": dict(sorted(Counter(table for _, table in seen).items())),
    }


def summarize(steps: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Medians over the early steps (the models under ten commits) and the last five."""
    measured = steps[1:]
    windows = {"early": measured[:5], "late": measured[-5:]}
    found: Dict[str, Any] = {}
    for window, chosen in windows.items():
        entry: Dict[str, Any] = {
            "steps": [s["step"] for s in chosen],
            "wall_s": median([s["wall_s"] for s in chosen]),
            "model_s": {
                node: median([s["model_s"][node] for s in chosen]) for node in chosen[0]["model_s"]
            },
        }
        found[window] = entry
        if "requests" not in chosen[0]:  # the local disk's run
            continue
        for name in (*PIPELINES, "shared"):
            entry[name] = median([s["requests"][name] for s in chosen])
            entry[f"{name}_by_kind"] = {
                kind: median([s["by_kind"][name].get(kind, 0) for s in chosen]) for kind in KINDS
            }
        tables = sorted({table for s in chosen for table in s["by_table"]})
        entry["by_table"] = {
            table: median([s["by_table"].get(table, 0) for s in chosen]) for table in tables
        }
        entry["old_over_young"] = round(entry["old"] / entry["young"], 3)
    return found


def report(result: Dict[str, Any], beside: Optional[Dict[str, Any]]) -> str:
    """The S3 run's markdown; `beside`: the local disk's run of the same steps, if made."""
    summary = result["summary"]
    versions = result["source_versions"]
    lines = [
        f"# {__doc__.splitlines()[0]} {__doc__.splitlines()[1]}",
        "",
        f"Adapter {result['adapter']}. Two pipelines in one project, on moto's S3 server on "
        f"loopback: `raw.young` at {versions['young']} versions and `raw.old` at "
        f"{versions['old']} (uploaded from local disk, {result['old_source_objects']} objects), "
        "each read by an aggregate and a linear model; one batch of "
        f"{result['args']['batch']} rows appended to each source before each `dbt run`. "
        "Requests counted from the server's log during the run, by the table their key names "
        "(S3A asked for 1,000 keys a LIST page, as AWS's S3 pages); medians over the steps named.",
        "",
        "| steps | young pipeline | old pipeline | old / young | shared (claim, other) |",
        "|---|---:|---:|---:|---:|",
    ]
    for window, entry in summary.items():
        lines.append(
            f"| {window} ({entry['steps'][0]}-{entry['steps'][-1]}) | {entry['young']:g} | "
            f"{entry['old']:g} | {entry['old_over_young']:.2f}x | {entry['shared']:g} |"
        )
    lines += ["", "By kind (the last steps):", ""]
    late = summary["late"]
    lines += ["| pipeline | " + " | ".join(KINDS) + " |", "|---|" + "---:|" * len(KINDS)]
    for name in (*PIPELINES, "shared"):
        counts = late[f"{name}_by_kind"]
        lines.append(f"| {name} | " + " | ".join(f"{counts[k]:g}" for k in KINDS) + " |")
    lines += ["", "By table (early steps / last steps):", "", "| table | early | last |"]
    lines.append("|---|---:|---:|")
    early = summary["early"]["by_table"]
    for table in sorted(set(early) | set(late["by_table"])):
        lines.append(f"| {table} | {early.get(table, 0):g} | {late['by_table'].get(table, 0):g} |")
    lines += ["", "Each step's requests (young / old):", ""]
    lines.append(
        ", ".join(
            f"{s['step']}: {s['requests']['young']}/{s['requests']['old']}"
            for s in result["steps"][1:]
        )
    )
    lines += [
        "",
        f"A GET of a small object from the loopback server: {result['loopback_get_ms']} ms "
        "(median of 50, signed, boto3).",
        *seconds(result, beside),
        "## Machine",
        "",
        *machine_lines(result["machine"]),
        "",
    ]
    return "\n".join(lines)


def seconds(result: Dict[str, Any], beside: Optional[Dict[str, Any]]) -> List[str]:
    """A table of the step's and each model's seconds (medians, last steps), beside local disk's."""
    late = result["summary"]["late"]
    other = beside["summary"]["late"] if beside else None
    lines = ["", "Seconds (medians over the last steps; wall: the whole `dbt run`):", ""]
    if other is None:
        lines += ["| | S3 |", "|---|---:|"]
    else:
        lines += [
            f"| | S3 | local disk ({beside['adapter'][:7]}) | S3 / local |",
            "|---|---:|---:|---:|",
        ]
    rows = [("wall", late["wall_s"], other and other["wall_s"])]
    for node in sorted(late["model_s"]):
        rows.append((node, late["model_s"][node], other and other["model_s"].get(node)))
    for label, mine, theirs in rows:
        if other is None:
            lines.append(f"| {label} | {mine:.2f} |")
        else:
            lines.append(f"| {label} | {mine:.2f} | {theirs:.2f} | {mine / theirs:.2f}x |")
    return lines + [""]


if __name__ == "__main__":
    raise SystemExit(main())
