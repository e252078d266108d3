"""Spark CDC read (issue 19): ``format("lakeward")`` CDC queries against Spark's native Parquet scan.

The tables of ``cdc.py`` (the same seeded load and ``--commits`` upserts with updates,
inserts and deletes; copy-on-write and merge-on-read, per logging mode) are queried on
Spark (``local[--cores]``): ``spark.read.format("lakeward")`` with
``hoodie.datasource.query.incremental.format=cdc`` over the commits, typed images, run to
the end with Spark's ``noop`` sink, against ``spark.read.parquet`` of every Parquet file of
the same table (all base-file versions, a superset of what the CDC query reads), run the
same way. Each is timed ``--repeat`` times, interleaved; the median and best are printed
with the ratio (CDC / native scan). The CDC rows are checked against the workload's count.

    python benchmarks/spark_cdc.py                      # 53,334 rows, ~8,000 changes
    python benchmarks/spark_cdc.py --rows 20000 --commits 3 --modes DATA_BEFORE_AFTER
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cdc import (  # noqa: E402 -- the sibling benchmark's workload and tables
    MODES,
    SMALL_ROWS,
    Variant,
    commit_lakeward,
    create_lakeward,
    make_workload,
)
from spark_upsert import spark_session as upsert_session  # noqa: E402 -- the sibling benchmark's session


def spark_session(cores: int, memory: str) -> Any:
    """`spark_upsert.py`'s local session, its Python workers on this interpreter (they import
    lakeward: `python_worker_conf` sets PYSPARK_PYTHON), with format("lakeward") registered."""
    import lakeward.spark
    from lakeward.core.engine.spark import python_worker_conf

    python_worker_conf({})
    spark = upsert_session(cores, memory)
    lakeward.spark.register(spark)
    return spark


def cdc_frame(spark: Any, v: Variant) -> Any:
    return (
        spark.read.format("lakeward")
        .option("hoodie.datasource.query.type", "incremental")
        .option("hoodie.datasource.query.incremental.format", "cdc")
        .option("hoodie.datasource.read.begin.instanttime", v.begin)
        .option("hoodie.datasource.read.end.instanttime", v.instants[-1])
        .option("lakeward.cdc.images", "struct")
        .load(v.path)
    )


def parquet_frame(spark: Any, v: Variant) -> Any:
    files = sorted(str(p) for p in Path(v.path).rglob("*.parquet") if ".hoodie" not in p.parts)
    return spark.read.parquet(*files)


def run_to_end(frame: Any) -> float:
    """Seconds to compute every row of `frame` (Spark's noop sink: nothing is collected or written)."""
    start = time.perf_counter()
    frame.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=SMALL_ROWS)
    p.add_argument("--commits", type=int, default=10)
    p.add_argument("--table-types", default="cow,mor")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--memory", default="2g")
    args = p.parse_args(argv)

    wl = make_workload(args.rows, args.commits, 0.01, 0.0025, 0.0025)
    expected_rows = sum(sum(e[op]["n"] for op in e) for e in wl.expected)
    root = Path(tempfile.mkdtemp(prefix="lakeward-spark-cdc-"))
    failures = []
    try:
        variants = [
            Variant(f"{tt.upper()} {mode}", str(root / f"{tt}-{mode.lower()}"), "lakeward", tt, mode)
            for tt in args.table_types.split(",")
            for mode in args.modes.split(",")
        ]
        print(f"loading {len(variants)} tables ({args.rows:,} rows, {args.commits} commits)...", flush=True)
        for v in variants:
            create_lakeward(v, wl.initial)
            for batch in wl.commits:
                commit_lakeward(v, batch)
        spark = spark_session(args.cores, args.memory)
        for v in variants:  # warm-up, untimed; checks the CDC row count
            got = cdc_frame(spark, v).count()
            if got != expected_rows:
                failures.append(f"{v.name}: the Spark CDC read gave {got:,} rows, expected {expected_rows:,}")
            run_to_end(parquet_frame(spark, v))
        times: dict[str, dict[str, list[float]]] = {v.name: {"cdc": [], "parquet": []} for v in variants}
        for r in range(args.repeat):
            for v in variants[r % len(variants) :] + variants[: r % len(variants)]:
                times[v.name]["cdc"].append(run_to_end(cdc_frame(spark, v)))
                times[v.name]["parquet"].append(run_to_end(parquet_frame(spark, v)))
        spark.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)

    print(f"\nSpark CDC read vs native Parquet scan of the table's files ({expected_rows:,} changes; median / best)")
    print(f"{'table':<24} {'CDC s':>14} {'parquet s':>14} {'ratio':>8}")
    for name, t in times.items():
        cdc, pq = t["cdc"], t["parquet"]
        ratio = statistics.median(cdc) / statistics.median(pq)
        print(
            f"{name:<24} {statistics.median(cdc):6.2f} / {min(cdc):5.2f} "
            f"{statistics.median(pq):6.2f} / {min(pq):5.2f} {ratio:7.2f}x"
        )
    for msg in failures:
        print(f"CHECK FAILED: {msg}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
