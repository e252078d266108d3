"""BLOOM tagging on the Spark engine when a partition has many file groups and the batch's keys are
clustered (issue 17): the upsert's key-scan tasks get only the batch keys inside each base file's
key range, with `hoodie.bloom.index.prune.by.ranges` on (Hudi's default) or off.

The table: one partition, `--groups` file groups with disjoint key ranges (`g0000-...`,
`g0001-...`, one insert each with small-file filling off), `--rows-per-group` rows each. The batch:
`--batch` keys in the key range of one file group, 90% updates of its keys and 10% new keys. Each
run upserts the batch through `Table.upsert(df, engine="spark")` into a fresh copy of the table,
the two settings interleaved, `--repeat` times. Prints wall and process-tree CPU seconds (the Spark
JVM and its Python workers included), best / median, the ratio, and the (slice, key) pairs the
key-scan tasks checked (from the plane's log line).

    python benchmarks/spark_bloom_ranges.py --groups 40 --rows-per-group 50000 --batch 20000
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from spark_upsert import measured, spark_session  # noqa: E402  (a sibling script)

from lakeward import Table  # noqa: E402


class PairsLog(logging.Handler):
    """Keeps the (slice, key) pairs figure of the last BLOOM key-scan log line."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.pairs: int | None = None

    def emit(self, record: logging.LogRecord) -> None:
        found = re.search(r"(\d+) \(slice, key\) pair", record.getMessage())
        if found:
            self.pairs = int(found.group(1))


def build(root: Path, groups: int, rows_per_group: int) -> Path:
    path = root / "template"
    options = {"hoodie.parquet.small.file.limit": "0"}
    table = Table.create(str(path), record_key="id", ordering_field="ts", options=options)
    for g in range(groups):
        keys = [f"g{g:04d}-{i:07d}" for i in range(0, 2 * rows_per_group, 2)]  # even: odd ones are new keys
        table.insert(pa.table({"id": keys, "ts": [0] * len(keys), "v": [f"v{g}"] * len(keys)}))
    assert len(Table.open(str(path)).file_slices()) == groups
    return path


def batch(groups: int, rows_per_group: int, size: int) -> pa.Table:
    g = groups // 2
    updates = [f"g{g:04d}-{i:07d}" for i in range(0, 2 * rows_per_group, 2)][: size * 9 // 10]
    inserts = [f"g{g:04d}-{i:07d}" for i in range(1, 2 * rows_per_group, 2)][: size - len(updates)]
    keys = updates + inserts
    return pa.table({"id": keys, "ts": [1] * len(keys), "v": ["u"] * len(keys)})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--groups", type=int, default=40, help="file groups in the one partition")
    p.add_argument("--rows-per-group", type=int, default=50_000)
    p.add_argument(
        "--batch", type=int, default=20_000, help="keys of the upsert, in one group's key range (<= rows per group)"
    )
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument(
        "--no-broadcast",
        action="store_true",
        help="spark.sql.autoBroadcastJoinThreshold=-1: the tagging path of batches too big to broadcast",
    )
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--memory", default="4g")
    args = p.parse_args(argv)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the workers import lakeward
    spark = spark_session(args.cores, args.memory)
    if args.no_broadcast:
        spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
    pairs_log = PairsLog()
    logging.getLogger("lakeward.core.write.plane.spark").addHandler(pairs_log)
    logging.getLogger("lakeward.core.write.plane.spark").setLevel(logging.INFO)
    root = Path(tempfile.mkdtemp(prefix="lw-bloom-ranges-"))
    try:
        template = build(root, args.groups, args.rows_per_group)
        data = spark.createDataFrame(batch(args.groups, args.rows_per_group, args.batch)).cache()
        data.count()
        results: dict[str, list[dict[str, Any]]] = {"true": [], "false": []}
        for prune in ("true", "false"):  # warm-up, untimed: the JVM's classes, Python workers
            warm = root / f"warm-{prune}"
            shutil.copytree(template, warm)
            Table.open(str(warm), options={"hoodie.bloom.index.prune.by.ranges": prune}).upsert(data, engine="spark")
            shutil.rmtree(warm)
        for run in range(args.repeat):
            for prune in ("true", "false"):
                copy = root / f"run-{run}-{prune}"
                shutil.copytree(template, copy)
                table = Table.open(str(copy), options={"hoodie.bloom.index.prune.by.ranges": prune})
                figures = measured(spark, lambda t=table: t.upsert(data, engine="spark"))
                figures["pairs"] = pairs_log.pairs
                results[prune].append(figures)
                shutil.rmtree(copy)
                print(
                    f"run {run} prune.by.ranges={prune}: wall {figures['wall']:.2f}s cpu {figures['cpu']:.2f}s "
                    f"pairs {figures['pairs']}",
                    flush=True,
                )
        print(f"\n{args.groups} file groups x {args.rows_per_group} rows, upsert of {args.batch} keys in one range")
        print("| prune.by.ranges | wall best / median | CPU best / median | (slice, key) pairs checked |")
        print("|---|---|---|---|")
        for prune, runs in results.items():
            walls, cpus = [r["wall"] for r in runs], [r["cpu"] for r in runs]
            print(
                f"| {prune} | {min(walls):.2f} / {statistics.median(walls):.2f} s | "
                f"{min(cpus):.2f} / {statistics.median(cpus):.2f} s | {runs[-1]['pairs']} |"
            )
        on, off = results["true"], results["false"]
        print(
            f"ratio on/off: wall {min(r['wall'] for r in on) / min(r['wall'] for r in off):.2f}x best, "
            f"CPU {min(r['cpu'] for r in on) / min(r['cpu'] for r in off):.2f}x best"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
