"""Cleaning benchmark: a table with 500 commits and 2,000 file slices, cleaned under KEEP_LATEST_COMMITS.

Built with real lakeward writes: 500 upserts of one record into each of 4 partitions (one file
group each), so every commit writes 4 new file slices (2,000 in all). The clean keeps the
slices the last 10 commits need and deletes the rest. Prints the time to plan (schedule) and
to execute the clean, and files deleted per second.

Usage: python benchmarks/cleaning.py [--commits 500] [--partitions 4] [--retained 10] [--path DIR]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from lakeward.core.table import Table


def build(path: Path, commits: int, partitions: int, retained: int) -> Table:
    table = Table.create(
        str(path),
        record_key="id",
        partition_by="part",
        ordering_field="ts",
        options={"hoodie.cleaner.commits.retained": retained, "hoodie.index.type": "SIMPLE"},
    )
    for c in range(commits):
        batch = pa.table(
            {
                "id": list(range(partitions)),
                "part": [f"p{p}" for p in range(partitions)],
                "ts": [c] * partitions,
                "val": [f"v{c}"] * partitions,
            }
        )
        table.upsert(batch)
    return table


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commits", type=int, default=500)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--retained", type=int, default=10)
    parser.add_argument("--path", default=None)
    args = parser.parse_args()
    root = Path(args.path or tempfile.mkdtemp(prefix="lakeward-clean-bench-"))
    path = root / "table"
    try:
        started = time.perf_counter()
        table = build(path, args.commits, args.partitions, args.retained)
        built = time.perf_counter() - started
        slices = sum(1 for _ in path.rglob("*.parquet"))
        print(f"built {args.commits} commits, {slices} file slices in {built:.1f} s")
        started = time.perf_counter()
        instant = table.schedule_clean()
        planned = time.perf_counter() - started
        assert instant is not None
        started = time.perf_counter()
        result = table.run_clean(instant)
        executed = time.perf_counter() - started
        total = planned + executed
        print(f"plan (schedule_clean): {planned:.3f} s")
        print(f"execute (run_clean):   {executed:.3f} s, {result.files_deleted} files deleted")
        print(f"clean total:           {total:.3f} s, {result.files_deleted / total:.0f} files deleted/s")
        started = time.perf_counter()
        rows = table.read().num_rows
        print(f"snapshot read after the clean: {rows} rows in {time.perf_counter() - started:.3f} s")
    finally:
        if args.path is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
