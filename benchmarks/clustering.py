"""Clustering benchmark: 400 small files (4 partitions x 100) clustered into 4, against the raw floor.

The floor is pyarrow reading the same 400 Parquet files and writing their rows into 4
files (one per partition), with nothing else: no timeline, markers, bloom filters or
meta-column handling. Run: `python benchmarks/clustering.py [rows]` (default 200,000).
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from lakeward.core.table import Table

PARTITIONS = 4
FILES = 400


def data(n: int) -> pa.Table:
    ids = list(range(n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "city": [f"c{i % PARTITIONS}" for i in ids],
            "ts": pa.array([1] * n, pa.int64()),
            "payload": [hashlib.md5(str(i).encode()).hexdigest() for i in ids],
            "value": [float(i) for i in ids],
        }
    )


def main(n: int = 200_000) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "t")
        per_file = n // FILES
        options = {
            "hoodie.copyonwrite.record.size.estimate": 100,
            "hoodie.parquet.max.file.size": per_file * 100,
            "hoodie.upsert.shuffle.parallelism": 2,
        }
        t = Table.create(path, record_key="id", partition_by="city", ordering_field="ts", options=options)
        t.bulk_insert(data(n))
        slices = t.file_slices()
        files = [str(Path(path) / s.base_file.path) for s in slices if s.base_file is not None]
        print(f"{n} rows in {len(files)} small files over {PARTITIONS} partitions")

        started = time.monotonic()
        instant = t.schedule_clustering()
        assert instant is not None
        planned = time.monotonic()
        result = t.run_clustering(instant)
        ours = time.monotonic() - started
        assert len(result.files_written) == PARTITIONS and result.records_written == n, result
        print(f"lakeward: plan {planned - started:.2f}s, total {ours:.2f}s -> {len(result.files_written)} files")

        out = Path(tmp) / "floor"
        out.mkdir()
        started = time.monotonic()
        for p in range(PARTITIONS):
            part = [f for f in files if f"/c{p}/" in f]
            pq.write_table(pa.concat_tables([pq.read_table(f) for f in part]), out / f"c{p}.parquet")
        floor = time.monotonic() - started
        print(f"floor (pyarrow read {len(files)} files, write {PARTITIONS}): {floor:.2f}s")
        print(f"ratio lakeward / floor: {ours / floor:.2f}x")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200_000)
