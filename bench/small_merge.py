"""What a MERGE by key costs with and without persistent deletion vectors, by table size.

A keyed Delta table (change feed and deletion vectors on, as a model's table is) of `--sizes`
rows; each round MERGEs 30 keys into it (updates, with literal key bounds, the source a VALUES
list, `merge.materializeSource=none`), alternating
`spark.databricks.delta.merge.deletionVectors.persistent` between true (Delta's default: mark
the replaced rows in a deletion vector) and false (rewrite each touched file). The first two
rounds per table warm up and are not counted. Prints per size and setting the sorted seconds
and the Spark jobs of each MERGE.

    python bench/small_merge.py                     # about 2 minutes on 2 cores
"""

from __future__ import annotations

import time

from benchlib import table_bench_args


def main() -> int:
    args, spark = table_bench_args(__doc__.splitlines()[0], 12, "/tmp/small_merge")
    context = spark.sparkContext
    spark.sql("SET spark.databricks.delta.merge.materializeSource=none")
    results = {}
    for size in (int(s) for s in args.sizes.split(",")):
        table = f"merge_{size}"
        spark.sql(f"DROP TABLE IF EXISTS {table}")
        spark.sql(
            f"CREATE TABLE {table} (k INT, n BIGINT) USING delta TBLPROPERTIES "
            "('delta.enableChangeDataFeed'='true', 'delta.enableDeletionVectors'='true', "
            "'delta.checkpointInterval'='1000')"
        )  # no checkpoint commit in the rounds
        # n varies with k (as a model's values do), so the files are not all run-length
        spark.sql(f"INSERT INTO {table} SELECT id, xxhash64(id) FROM range({size})")
        for number in range(args.rounds):
            keys = [(number * 7 + i * 3) % size for i in range(30)]
            values = ", ".join(f"({k}, {number})" for k in keys)
            spark.sql(
                f"CREATE OR REPLACE TEMP VIEW change AS SELECT * FROM VALUES {values} AS v(k, n)"
            )
            persistent = ("true", "false")[number % 2]
            spark.sql(f"SET spark.databricks.delta.merge.deletionVectors.persistent={persistent}")
            group = f"merge_{size}_{number}"
            context.setJobGroup(group, group)
            started = time.perf_counter()
            spark.sql(
                f"MERGE INTO {table} t USING change s ON t.k = s.k AND t.k >= 0 AND "
                f"t.k <= {size} WHEN MATCHED THEN UPDATE SET n = s.n "
                "WHEN NOT MATCHED THEN INSERT (k, n) VALUES (s.k, s.n)"
            ).collect()
            seconds = time.perf_counter() - started
            jobs = len(context.statusTracker().getJobIdsForGroup(group))
            if number >= 2:
                results.setdefault((size, persistent), []).append((round(seconds, 2), jobs))
    for (size, persistent), runs in results.items():
        detail = spark.sql(f"DESCRIBE DETAIL merge_{size}").collect()[0]
        print(
            f"{size} rows ({detail['sizeInBytes'] / 2**20:.1f} MiB in {detail['numFiles']} "
            f"files), deletion vectors persistent={persistent}: "
            f"seconds {sorted(s for s, _ in runs)}, jobs {[j for _, j in runs]}"
        )
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
