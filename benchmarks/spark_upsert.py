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
table: job scheduling, planning and commit, and the rewrite of the file groups its keys
hit) and the throughput (the standard upsert batch, which rewrites every file of the
2,000,000-row table). Each upsert's result is verified against the expected aggregates.

The 1,000-row upsert runs ``--small-repeat`` times on each side, interleaved, and is
reported as best / median of the wall time and of the CPU time of the whole process tree
(this driver, the Spark JVM and its Python workers, read from /proc): on a shared machine
the CPU ratio is the steadier one. ``--jobs`` prints the Spark jobs of the last repetition
with their durations (the profile of where the fixed overhead goes). Run ``--help`` for flags.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
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


def tree_cpu_seconds() -> float:
    """CPU seconds (user + system, reaped children included) of this process and all its descendants."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        times[int(entry)] = sum(int(x) for x in fields[11:15])
    tree, frontier = {os.getpid()}, [os.getpid()]
    while frontier:
        pid = frontier.pop()
        children = [c for c, parent in parents.items() if parent == pid and c not in tree]
        tree.update(children)
        frontier.extend(children)
    return sum(times.get(pid, 0) for pid in tree) / tick


def measured(spark: Any, fn: Callable[[], Any]) -> dict[str, Any]:
    """Wall and process-tree CPU seconds of fn, and the Spark jobs it ran (ids)."""
    sc = spark.sparkContext
    group = f"bench-{time.monotonic_ns()}"
    sc.setJobGroup(group, group)
    cpu0, t0 = tree_cpu_seconds(), time.perf_counter()
    try:
        fn()
    finally:
        wall, cpu = time.perf_counter() - t0, tree_cpu_seconds() - cpu0
        sc.setLocalProperty("spark.jobGroup.id", None)
    return {"wall": wall, "cpu": cpu, "jobs": sorted(sc.statusTracker().getJobIdsForGroup(group))}


def job_profile(spark: Any, job_ids: list[int]) -> list[str]:
    """One line per Spark job: duration, tasks and where it was called (Spark's own status store)."""
    store = spark.sparkContext._jsc.sc().statusStore()
    lines = []
    for job_id in job_ids:
        job = store.job(job_id)
        start, end = job.submissionTime(), job.completionTime()
        seconds = (end.get().getTime() - start.get().getTime()) / 1000 if start.isDefined() and end.isDefined() else 0
        lines.append(f"  job {job_id:>4} {seconds:7.3f}s {job.numTasks():>4} tasks  {job.name().rsplit('/', 1)[-1]}")
    return lines


def cached(spark: Any, table: pa.Table) -> Any:
    """The batch as an in-memory DataFrame (built outside the timings, for every Spark row)."""
    df = spark.createDataFrame(table).cache()
    df.count()
    return df


def small_batch(data: Any, rows: int) -> pa.Table:
    """`rows` updates of keys the table holds after the throughput upsert (newer `ts`)."""
    head = data.upsert.slice(0, rows)
    return head.set_column(head.schema.get_field_index("ts"), "ts", pc.add(head["ts"], 1))


def run_lakeward_spark(
    spark: Any, root: Path, data: Any, small: pa.Table
) -> tuple[dict[str, float], Callable[[], Any]]:
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
    for df in (initial, batch):
        df.unpersist()

    def small_upsert() -> None:
        """The 1,000-row upsert (the same rows each time: the table keeps the expected rows)."""
        Table.open(uri, engine=engine).upsert(tiny)

    return {"load": t_load, "upsert": t_up, "read_sum": t_read}, small_upsert


def check_lakeward_rows(root: Path, data: Any) -> None:
    """After the 1,000-row upserts (untimed): the table still holds the expected number of rows."""
    from lakeward import Table

    after = Table.open(str(root / "lakeward-spark")).read(columns=["id"]).num_rows
    if after != data.expected["rows"]:
        raise AssertionError(f"lakeward-spark small upserts: {after} rows, expected {data.expected['rows']}")


def run_spark_floor(spark: Any, root: Path, data: Any, small: pa.Table) -> tuple[dict[str, float], Callable[[], Any]]:
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
    for df in (initial, batch):
        df.unpersist()
    return {"load": t_load, "upsert": t_up, "read_sum": t_read}, lambda: upsert(second, tiny)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=2_000_000, help="rows in the table")
    p.add_argument("--upsert-rows", type=int, default=200_000, help="rows of the throughput upsert batch")
    p.add_argument("--small-rows", type=int, default=1_000, help="rows of the fixed-overhead upsert")
    p.add_argument("--cores", type=int, default=2, help="Spark local[N]")
    p.add_argument("--memory", default="6g", help="spark.driver.memory")
    p.add_argument("--small-repeat", type=int, default=5, help="repetitions of the 1,000-row upsert, interleaved")
    p.add_argument("--jobs", action="store_true", help="print the Spark jobs of the last 1,000-row upserts")
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
        for warm_up in (run_lakeward_spark, run_spark_floor):  # JIT, imports, Python workers
            warm_up(spark, root / "warm", warm, small_batch(warm, 20))[1]()
        shutil.rmtree(root / "warm", ignore_errors=True)
        results["lakeward-spark"], lakeward_small = run_lakeward_spark(spark, root, data, small)
        results["spark-floor"], floor_small = run_spark_floor(spark, root, data, small)
        runs: dict[str, list[dict[str, Any]]] = {"lakeward-spark": [], "spark-floor": []}
        for _ in range(args.small_repeat):
            for name, fn in (("lakeward-spark", lakeward_small), ("spark-floor", floor_small)):
                runs[name].append(measured(spark, fn))
        check_lakeward_rows(root, data)
        for name, measures in runs.items():
            walls, cpus = [m["wall"] for m in measures], [m["cpu"] for m in measures]
            results[name].update(
                upsert_1k=min(walls),
                upsert_1k_median=statistics.median(walls),
                upsert_1k_cpu=min(cpus),
                upsert_1k_cpu_median=statistics.median(cpus),
                upsert_1k_jobs=len(measures[-1]["jobs"]),
            )
            if args.jobs:
                print(f"\nSpark jobs of the last 1,000-row upsert, {name}:")
                print("\n".join(job_profile(spark, measures[-1]["jobs"])))
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
        f"lakeward-spark fixed overhead ({args.small_rows:,}-row upsert, best / median of {args.small_repeat}): "
        f"wall {lw['upsert_1k']:.2f} / {lw['upsert_1k_median']:.2f}s against the Spark floor's "
        f"{floor['upsert_1k']:.2f} / {floor['upsert_1k_median']:.2f}s = "
        f"{lw['upsert_1k'] / floor['upsert_1k']:.2f}x / {lw['upsert_1k_median'] / floor['upsert_1k_median']:.2f}x; "
        f"CPU (process tree) {lw['upsert_1k_cpu']:.2f} / {lw['upsert_1k_cpu_median']:.2f}s against "
        f"{floor['upsert_1k_cpu']:.2f} / {floor['upsert_1k_cpu_median']:.2f}s = "
        f"{lw['upsert_1k_cpu'] / floor['upsert_1k_cpu']:.2f}x / "
        f"{lw['upsert_1k_cpu_median'] / floor['upsert_1k_cpu_median']:.2f}x (target <= 1.5x); "
        f"Spark jobs {lw['upsert_1k_jobs']} against {floor['upsert_1k_jobs']}"
    )
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if "deltalake" in results:
        print(f"lakeward-spark upsert / deltalake merge: {lw['upsert'] / results['deltalake']['upsert']:.2f}x")
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
