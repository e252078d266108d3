"""Upsert tagging through the record index vs the BLOOM index, on the same table (issue 17).

Builds a v9 table of `--rows` rows (bulk insert), its metadata table with the `record_index`
partition, then alternates upserts of `--batch` rows (`--update-share` existing keys, the rest new)
tagged with `hoodie.index.type=RECORD_INDEX` and with `BLOOM`, `--rounds` times each. Both writes
keep the record index (a table with the partition keeps it on every commit), so each round sees
the same table shape. Prints process CPU time (all threads) and wall time, best and median, and
the RECORD_INDEX / BLOOM ratios (target: <= 0.5). Before each RECORD_INDEX upsert, the tagging
alone is timed for both indexes on the same table: the record index cold (its HFiles parsed, as in
a fresh process) and warm (the process cache of parsed HFiles), and BLOOM (footers, bloom
filters, candidate key reads).

    python benchmarks/record_index.py --rows 2000000 --batch 200000
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from lakeward import Table
from lakeward.core.engine.local import LocalEngine
from lakeward.core.file_group.slice_keys import CommittedInstants
from lakeward.core.index import bloom
from lakeward.core.metadata_table import record_index


def _rows(keys: np.ndarray, ts: int) -> pa.Table:
    n = len(keys)
    ids = pa.array([f"key-{k:010d}" for k in keys.tolist()], pa.string())
    parts = pa.array([f"p{k % 8}" for k in keys.tolist()], pa.string())
    return pa.table({"id": ids, "part": parts, "ts": pa.array(np.full(n, ts, np.int64)), "val": pa.array(keys * 3)})


def _timed(action: Callable[[], object]) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    action()
    return time.process_time() - cpu, time.perf_counter() - wall


def _tag_record_index(table: Table, keys: pa.Array, cold: bool) -> None:
    if cold:
        record_index.clear_cache()  # as a fresh process: parse the partition's HFiles again
    record_index.RecordIndex(table.storage).locate(keys)


def _tag_bloom(table: Table, batch: pa.Table) -> None:
    """What the BLOOM tagging of an upsert reads: per partition, footers, then candidate keys
    (merge-on-read: every key against slices with logs)."""
    timeline = table.timeline()
    slices = table.file_slices()
    committed = CommittedInstants.of(timeline)
    engine = LocalEngine()
    for partition in set(batch.column("part").to_pylist()):
        ids = batch.filter(pa.compute.equal(batch.column("part"), partition)).column("id").combine_chunks()
        mine = [s for s in slices if s.partition_path == partition]
        bloom.locate(table.storage, engine, mine, ids, True, committed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--batch", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--update-share", type=float, default=0.9)
    parser.add_argument("--table-type", default="MERGE_ON_READ", choices=["COPY_ON_WRITE", "MERGE_ON_READ"])
    args = parser.parse_args()
    rng = random.Random(17)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "t")
        table = Table.create(
            path, record_key="id", partition_by="part", ordering_field="ts", table_type=args.table_type, table_version=9
        )
        keys = np.array(rng.sample(range(args.rows * 10), args.rows), dtype=np.int64)
        cpu, wall = _timed(lambda: table.bulk_insert(_rows(keys, 1)))
        print(f"bulk insert {args.rows} rows: CPU {cpu:.2f} s, wall {wall:.2f} s")
        opened = Table.open(path, options={"hoodie.metadata.record.index.enable": "true"})
        cpu, wall = _timed(opened.initialize_metadata_table)
        print(f"metadata table + record index of {args.rows} keys: CPU {cpu:.2f} s, wall {wall:.2f} s")
        times: dict[str, list[tuple[float, float]]] = {"RECORD_INDEX": [], "BLOOM": []}
        tagging: dict[str, list[tuple[float, float]]] = {"RECORD_INDEX cold": [], "RECORD_INDEX warm": [], "BLOOM": []}
        next_key = args.rows * 10
        for round_ in range(args.rounds):
            for index in ("RECORD_INDEX", "BLOOM"):
                updates = int(args.batch * args.update_share)
                batch_keys = np.concatenate(
                    [
                        np.array(rng.sample(keys.tolist(), updates), dtype=np.int64),
                        np.arange(next_key, next_key + args.batch - updates, dtype=np.int64),
                    ]
                )
                next_key += args.batch - updates
                keys = np.concatenate([keys, batch_keys[updates:]])
                writer = Table.open(path, options={"hoodie.index.type": index})
                batch = _rows(batch_keys, round_ + 2)
                if index == "RECORD_INDEX":  # tagging alone, interleaved: both indexes on the same table
                    ids = batch.column("id").combine_chunks()
                    tagging["RECORD_INDEX cold"].append(_timed(lambda w=writer, k=ids: _tag_record_index(w, k, True)))
                    tagging["RECORD_INDEX warm"].append(_timed(lambda w=writer, k=ids: _tag_record_index(w, k, False)))
                    tagging["BLOOM"].append(_timed(lambda w=writer, b=batch: _tag_bloom(w, b)))
                cpu, wall = _timed(lambda w=writer, b=batch: w.upsert(b))
                times[index].append((cpu, wall))
                print(f"round {round_} {index:12s} upsert {args.batch}: CPU {cpu:.2f} s, wall {wall:.2f} s")
    for index, runs in tagging.items():
        cpus, walls = [c for c, _ in runs], [w for _, w in runs]
        print(
            f"tagging {index:17s} CPU best {min(cpus):.2f} median {statistics.median(cpus):.2f} s; "
            f"wall best {min(walls):.2f} median {statistics.median(walls):.2f} s"
        )
    for index, runs in times.items():
        cpus, walls = [c for c, _ in runs], [w for _, w in runs]
        print(
            f"{index:12s} CPU best {min(cpus):.2f} median {statistics.median(cpus):.2f} s; "
            f"wall best {min(walls):.2f} median {statistics.median(walls):.2f} s"
        )
    rli, bloom = times["RECORD_INDEX"], times["BLOOM"]
    for label, pick in (("best", min), ("median", statistics.median)):
        cpu_ratio = pick(c for c, _ in rli) / pick(c for c, _ in bloom)
        wall_ratio = pick(w for _, w in rli) / pick(w for _, w in bloom)
        print(f"RECORD_INDEX / BLOOM ({label}): CPU {cpu_ratio:.2f}x, wall {wall_ratio:.2f}x (target <= 0.5x)")
    for label in ("RECORD_INDEX cold", "RECORD_INDEX warm"):
        ratio = statistics.median(c for c, _ in tagging[label]) / statistics.median(c for c, _ in tagging["BLOOM"])
        print(f"tagging {label} / BLOOM (median CPU): {ratio:.2f}x")
    print(f"load average: {os.getloadavg()}")


if __name__ == "__main__":
    main()
