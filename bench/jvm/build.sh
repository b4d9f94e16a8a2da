#!/usr/bin/env bash
# Builds the log store prototype bench/delta_resolve.py measures against Delta's own
# (bench/results/delta_resolve_list_from.md) into bench/work-jvm/list_from.jar, and prints the
# settings that use it. Needs a JDK (javac) and the Delta jars an embedded start resolved into
# ~/.ivy2.5.2/jars (run the demo or any bench once first).
set -euo pipefail
cd "$(dirname "$0")/.."
jars="${IVY_JARS:-$HOME/.ivy2.5.2/jars}"
storage=$(ls "$jars"/io.delta_delta-storage-*.jar | head -1)
hadoop=$(ls "$jars"/org.apache.hadoop_hadoop-client-api-*.jar | head -1)
out=work-jvm
rm -rf "$out" && mkdir -p "$out/classes"
javac -cp "$storage:$hadoop" -d "$out/classes" jvm/ListFromLogStore.java
jar cf "$out/list_from.jar" -C "$out/classes" .
# Delta's storage jar beside it on the driver's class path: the store extends one of its classes,
# and the jars Spark adds at start (spark.jars) are loaded by a class loader below this one.
echo "--spark-conf spark.driver.extraClassPath=$storage:$PWD/$out/list_from.jar" \
  "--spark-conf spark.delta.logStore.file.impl=io.streamsql.ListFromLogStore"
