"""What each way of writing a small change into a keyed Delta table costs, in seconds and jobs.

A keyed table (change feed and deletion vectors on, as a model's table is) of `--sizes` rows,
one per way; each round applies the same change to every table (20 updated keys, 5 deleted, 5
new; the change a checkpointed DataFrame of signed rows, as a step's netted change is), the ways
taking turns going first:

- `merge`: the MERGE by key a step writes (statements.merge_by_key's form, literal key bounds,
  deletion vectors not persistent, `merge.materializeSource=none`), adaptive execution on;
- `merge_noaqe`: the same with `spark.sql.adaptive.enabled=false`;
- `overwrite`: `INSERT OVERWRITE` of the whole table (its rows outside the change's keys, and
  the change's new rows);
- `replace`: `INSERT INTO ... REPLACE WHERE key IN (<the change's keys>)`.

After each write, the first read of the table (a filtered count, as a step's first read of a
table after a commit) is timed too. The first round warms up and is not counted. Prints per
size and way the sorted seconds and the Spark jobs of each write and read, and checks that every
way left the same table.

    python bench/write_paths.py                        # about 3 minutes on 2 cores
    python bench/write_paths.py --sizes 100 --rounds 8
"""

from __future__ import annotations

import time

from benchlib import table_bench_args

WAYS = ("merge", "merge_noaqe", "overwrite", "replace")
NO_COPY = {
    "spark.databricks.delta.merge.deletionVectors.persistent": "false",
    "spark.databricks.delta.merge.materializeSource": "none",
}


def statement(way: str, table: str, low: int, high: int, keys: str) -> str:
    if way.startswith("merge"):
        return (
            f"MERGE INTO {table} t USING (SELECT k, max_by(struct(n), w) AS row, "
            "MAX(w) > 0 AS keep FROM change GROUP BY k) s "
            f"ON t.k = s.k AND t.k >= {low} AND t.k <= {high} "
            "WHEN MATCHED AND NOT s.keep THEN DELETE "
            "WHEN MATCHED THEN UPDATE SET n = s.row.n "
            "WHEN NOT MATCHED AND s.keep THEN INSERT (k, n) VALUES (s.k, s.row.n)"
        )
    if way == "overwrite":
        return (
            f"INSERT OVERWRITE {table} SELECT k, n FROM {table} WHERE k NOT IN ({keys}) "
            "UNION ALL SELECT k, n FROM change WHERE w > 0"
        )
    return f"INSERT INTO {table} REPLACE WHERE k IN ({keys}) SELECT k, n FROM change WHERE w > 0"


def main() -> int:
    args, spark = table_bench_args(__doc__.splitlines()[0], 6, "/tmp/write_paths")
    context = spark.sparkContext

    def timed(group: str, run) -> tuple:
        context.setJobGroup(group, group)
        started = time.perf_counter()
        run()
        seconds = time.perf_counter() - started
        return round(seconds, 2), len(context.statusTracker().getJobIdsForGroup(group))

    results: dict = {}
    for size in (int(s) for s in args.sizes.split(",")):
        for way in WAYS:
            table = f"{way}_{size}"
            spark.sql(f"DROP TABLE IF EXISTS {table}")
            spark.sql(
                f"CREATE TABLE {table} (k INT, n BIGINT) USING delta TBLPROPERTIES "
                "('delta.enableChangeDataFeed'='true', 'delta.enableDeletionVectors'='true')"
            )
            spark.sql(f"INSERT INTO {table} SELECT id, 10 FROM range({size})")
        for number in range(args.rounds):
            base = (number * 37) % max(size - 40, 1)
            rows = [(k, 10 + number, 1) for k in range(base, base + 20)]
            rows += [(k, 0, -1) for k in range(base + 20, base + 25)]
            fresh = size + 1000 + number * 5
            rows += [(k, 7, 1) for k in range(fresh, fresh + 5)]
            change = spark.createDataFrame(rows, "k INT, n BIGINT, w BIGINT").localCheckpoint()
            change.createOrReplaceTempView("change")
            keys = ", ".join(str(k) for k, _, _ in rows)
            low, high = min(r[0] for r in rows), max(r[0] for r in rows)
            turn = number % len(WAYS)
            for way in WAYS[turn:] + WAYS[:turn]:
                table = f"{way}_{size}"
                settings = dict(NO_COPY) if way.startswith("merge") else {}
                if way == "merge_noaqe":
                    settings["spark.sql.adaptive.enabled"] = "false"
                for key, value in settings.items():
                    spark.conf.set(key, value)
                text = statement(way, table, low, high, keys)
                write = timed(f"{table}_{number}", lambda: spark.sql(text).collect())
                for key in settings:
                    spark.conf.unset(key)
                read = timed(
                    f"{table}_{number}_read",
                    lambda: spark.sql(
                        f"SELECT count(*), sum(n) FROM {table} WHERE k IN ({keys})"
                    ).collect(),
                )
                if number >= 1:
                    results.setdefault((size, way), []).append((write, read))
        contents = {
            way: tuple(spark.sql(f"SELECT count(*), sum(n), sum(k) FROM {way}_{size}").first())
            for way in WAYS
        }
        assert len(set(contents.values())) == 1, f"{size} rows: the ways differ: {contents}"
    for (size, way), runs in results.items():
        writes = sorted(w[0] for w, _ in runs)
        reads = sorted(r[0] for _, r in runs)
        print(
            f"{size:>8} rows {way:<12} write median {writes[len(writes) // 2]:.2f} s "
            f"{writes} jobs {[w[1] for w, _ in runs]}; first read after it median "
            f"{reads[len(reads) // 2]:.2f} s jobs {[r[1] for _, r in runs]}"
        )
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
