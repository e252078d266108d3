"""Copy-on-write upsert on the Spark engine (local[2]) against the Spark floor and the peers.

One run, one SparkSession, the same seeded data as ``upsert_and_read.py``:

* ``lakeward-spark`` -- ``Table.create`` + ``bulk_insert(df)`` then ``upsert(df)`` with
  Spark DataFrames (the Spark engine: keys, dedup, tagging join, one task per file group).
* ``spark-floor``    -- a plain Spark job: read the affected Parquet files of a
  hive-partitioned dataset, drop the upserted keys with a left-anti join, union the
  batch, write Parquet with Spark's native writer (no table format, no index, no
  metadata): the least any Spark copy-on-write upsert can cost.
* ``deltalake`` / ``pyarrow`` -- the single-process peers, from ``upsert_and_read.py``.

Two sizes are reported separately: the fixed overhead (a 1,000-row upsert into the
table: mostly job scheduling, planning and commit) and the throughput (the standard
upsert batch, which rewrites every file of the 2,000,000-row table). Each upsert's
result is verified against the expected aggregates. Run ``--help`` for flags.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parent))

from upsert_and_read import (  # noqa: E402 -- the sibling benchmark's data and peers
    SEED,
    Ctx,
    EngineUnavailable,
    make_dataset,
    run_deltalake,
    run_pyarrow,
    timed,
    verify,
)


def spark_session(cores: int, memory: str) -> Any:
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName("lakeward-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", memory)
        .config("spark.sql.shuffle.partitions", str(cores * 4))
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def cached(spark: Any, table: pa.Table) -> Any:
    """The batch as an in-memory DataFrame (built outside the timings, for every Spark row)."""
    df = spark.createDataFrame(table).cache()
    df.count()
    return df


def small_batch(data: Any, rows: int) -> pa.Table:
    """`rows` updates of keys the table holds after the throughput upsert (newer `ts`)."""
    head = data.upsert.slice(0, rows)
    return head.set_column(head.schema.get_field_index("ts"), "ts", pc.add(head["ts"], 1))


def run_lakeward_spark(spark: Any, root: Path, data: Any, small: pa.Table) -> dict[str, float]:
    from lakeward import Table
    from lakeward.spark import SparkEngine

    uri = str(root / "lakeward-spark")
    engine = SparkEngine(spark)
    initial, batch, tiny = cached(spark, data.initial), cached(spark, data.upsert), cached(spark, small)

    def load() -> None:
        table = Table.create(uri, record_key="id", partition_by="part", ordering_field="ts", engine=engine)
        table.bulk_insert(initial)

    t_load, _ = timed(load)
    t_up, _ = timed(lambda: Table.open(uri, engine=engine).upsert(batch))
    verify("lakeward-spark", Table.open(uri).read(), data.expected)
    t_read, _ = timed(lambda: Table.open(uri, engine=engine).read().selectExpr("sum(qty)").collect())
    t_small, _ = timed(lambda: Table.open(uri, engine=engine).upsert(tiny))
    after = Table.open(uri).read(columns=["id"]).num_rows
    if after != data.expected["rows"]:
        raise AssertionError(f"lakeward-spark small upsert: {after} rows, expected {data.expected['rows']}")
    for df in (initial, batch, tiny):
        df.unpersist()
    return {"load": t_load, "upsert": t_up, "upsert_1k": t_small, "read_sum": t_read}


def run_spark_floor(spark: Any, root: Path, data: Any, small: pa.Table) -> dict[str, float]:
    from pyspark.sql import functions as F

    initial, batch, tiny = cached(spark, data.initial), cached(spark, data.upsert), cached(spark, small)
    versions = iter(range(1_000))

    def load() -> Path:
        dest = root / "spark-floor" / f"v{next(versions)}"
        initial.write.partitionBy("part").parquet(str(dest))
        return dest

    def upsert(current: Path, incoming: Any) -> Path:
        """Read the affected partitions' files, replace the upserted keys by a join, write Parquet."""
        parts = [r[0] for r in incoming.select("part").distinct().collect()]
        base = spark.read.parquet(str(current)).filter(F.col("part").isin(parts))
        kept = base.join(incoming.select("id"), "id", "left_anti")
        dest = root / "spark-floor" / f"v{next(versions)}"
        kept.unionByName(incoming).write.partitionBy("part").parquet(str(dest))
        return dest

    t_load, first = timed(load)
    t_up, second = timed(lambda: upsert(first, batch))
    result = spark.read.parquet(str(second)).toArrow()
    verify("spark-floor", result, data.expected)
    t_read, _ = timed(lambda: spark.read.parquet(str(second)).selectExpr("sum(qty)").collect())
    t_small, _ = timed(lambda: upsert(second, tiny))
    for df in (initial, batch, tiny):
        df.unpersist()
    return {"load": t_load, "upsert": t_up, "upsert_1k": t_small, "read_sum": t_read}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=2_000_000, help="rows in the table")
    p.add_argument("--upsert-rows", type=int, default=200_000, help="rows of the throughput upsert batch")
    p.add_argument("--small-rows", type=int, default=1_000, help="rows of the fixed-overhead upsert")
    p.add_argument("--cores", type=int, default=2, help="Spark local[N]")
    p.add_argument("--memory", default="6g", help="spark.driver.memory")
    p.add_argument("--no-peers", action="store_true", help="skip deltalake and pyarrow")
    p.add_argument("--out", type=Path, help="write the figures as JSON")
    args = p.parse_args(argv)

    print(f"data: rows={args.rows:,} upsert={args.upsert_rows:,} small={args.small_rows:,}", flush=True)
    data = make_dataset(args.rows, args.upsert_rows, SEED)
    small = small_batch(data, args.small_rows)
    spark = spark_session(args.cores, args.memory)
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="lakeward-spark-bench-") as tmp:
        root = Path(tmp)
        warm = make_dataset(2_000, 200, SEED + 2)
        run_lakeward_spark(spark, root / "warm", warm, small_batch(warm, 20))  # JIT, imports, Python workers
        run_spark_floor(spark, root / "warm", warm, small_batch(warm, 20))
        shutil.rmtree(root / "warm", ignore_errors=True)
        results["lakeward-spark"] = run_lakeward_spark(spark, root, data, small)
        results["spark-floor"] = run_spark_floor(spark, root, data, small)
        if not args.no_peers:
            ctx = Ctx(root, data, "snappy", {"deltalake", "pyarrow"}, 1)
            for runner in (run_deltalake, run_pyarrow):
                try:
                    for name, row in runner(ctx).items():
                        results[name] = {k: v for k, v in row.items() if k in ("load", "upsert", "read")}
                except EngineUnavailable as exc:
                    print(f"{runner.__name__}: unavailable: {exc}")
    spark.stop()

    floor = results["spark-floor"]
    print(f"\n{'engine':<16}{'load s':>10}{'upsert s':>10}{'1k-upsert s':>13}{'ratio/floor':>13}")
    for name, row in results.items():
        ratio = row["upsert"] / floor["upsert"]
        small_s = f"{row['upsert_1k']:13.3f}" if "upsert_1k" in row else f"{'-':>13}"
        print(f"{name:<16}{row['load']:10.3f}{row['upsert']:10.3f}{small_s}{ratio:13.2f}x")
    lw = results["lakeward-spark"]
    print(
        f"\nlakeward-spark throughput upsert ({args.upsert_rows:,} rows into {args.rows:,}): "
        f"{lw['upsert']:.2f}s = {lw['upsert'] / floor['upsert']:.2f}x the Spark floor (target <= 1.5x)"
    )
    print(
        f"lakeward-spark fixed overhead ({args.small_rows:,}-row upsert): {lw['upsert_1k']:.2f}s "
        f"(Spark floor {floor['upsert_1k']:.2f}s)"
    )
    if "deltalake" in results:
        print(f"lakeward-spark upsert / deltalake merge: {lw['upsert'] / results['deltalake']['upsert']:.2f}x")
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
