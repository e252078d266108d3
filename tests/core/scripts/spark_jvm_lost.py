"""Kill the JVM of this process's own SparkSession, then ask for a Spark-engine upsert and compaction.

Usage: python spark_jvm_lost.py <merge-on-read table path> <pending compaction instant>

Prints one JSON line per call: the error's class and message (or "ok"). The table is the parent
test's; a session of its own keeps the test session's JVM alive.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import pyarrow as pa
from pyspark.sql import SparkSession

from lakeward.core.engine.spark import SparkEngine
from lakeward.core.table import Table


def attempt(name: str, call) -> None:  # type: ignore[no-untyped-def]
    try:
        call()
        print(json.dumps({"call": name, "error": None}), flush=True)
    except Exception as exc:  # noqa: BLE001 - reported to the parent test
        print(json.dumps({"call": name, "error": type(exc).__name__, "message": str(exc)}), flush=True)


def main() -> None:
    path, compaction = sys.argv[1:3]
    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "512m")
        .getOrCreate()
    )
    engine = SparkEngine(spark)
    table = Table.open(path, engine=engine)
    java = spark.sparkContext._gateway.proc  # type: ignore[union-attr]
    os.kill(java.pid, signal.SIGKILL)
    while java.poll() is None:
        time.sleep(0.05)
    attempt("upsert", lambda: table.upsert(pa.table({"id": [1, 99], "p": ["a", "a"], "v": ["new", "new"]})))
    attempt("compaction", lambda: table.run_compaction(compaction))


if __name__ == "__main__":
    main()
