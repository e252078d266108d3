"""Upsert tagging through the record index vs the BLOOM index, on the same table (issue 17).

Builds a v9 table of `--rows` rows (bulk insert), its metadata table with the `record_index`
partition, then alternates upserts of `--batch` rows (`--update-share` existing keys, the rest new)
tagged with `hoodie.index.type=RECORD_INDEX` and with `BLOOM`, `--rounds` times each. Both writes
keep the record index (a table with the partition keeps it on every commit), so each round sees
the same table shape. Update keys are `clustered` (a window of adjacent keys: the newest rows of
an append-mostly table) or `uniform` (drawn from the whole table); `--keys both` runs the two
patterns on the same table, interleaved per round. Prints process CPU time (all threads) and wall
time, best and median, of the whole upsert and of the tagging alone, and the RECORD_INDEX / BLOOM
ratios (target: <= 0.5). Before each RECORD_INDEX upsert, the tagging alone is timed for both
indexes on the same table: the record index cold (its HFiles parsed, as in a fresh process) and
warm (the process cache of parsed HFiles), and BLOOM (footers, bloom filters, candidate key reads).
`--profile` runs one more upsert per index under cProfile (CPU clock) and prints where it went.

    python benchmarks/record_index.py --rows 10000000 --batch 200000 --keys both
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import random
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from lakeward import Table
from lakeward.core.engine.local import LocalEngine
from lakeward.core.file_group.slice_keys import CommittedInstants
from lakeward.core.index import bloom
from lakeward.core.metadata_table import record_index


def rows(keys: np.ndarray, ts: int) -> pa.Table:
    n = len(keys)
    ids = pa.array([f"key-{k:010d}" for k in keys.tolist()], pa.string())
    parts = pa.array([f"p{k % 8}" for k in keys.tolist()], pa.string())
    return pa.table({"id": ids, "part": parts, "ts": pa.array(np.full(n, ts, np.int64)), "val": pa.array(keys * 3)})


def timed(action: Callable[[], object]) -> tuple[float, float]:
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


def update_keys(rng: random.Random, keys: np.ndarray, count: int, pattern: str) -> np.ndarray:
    """`count` existing keys: the `count` largest (clustered) or a uniform sample."""
    if pattern == "clustered":
        return np.sort(keys)[-count:]
    return np.array(rng.sample(keys.tolist(), count), dtype=np.int64)


def summary(label: str, runs: list[tuple[float, float]]) -> str:
    cpus, walls = [c for c, _ in runs], [w for _, w in runs]
    return (
        f"{label:34s} CPU best {min(cpus):.2f} median {statistics.median(cpus):.2f} s; "
        f"wall best {min(walls):.2f} median {statistics.median(walls):.2f} s"
    )


def ratio(label: str, ours: list[tuple[float, float]], theirs: list[tuple[float, float]]) -> str:
    parts = []
    for name, pick in (("best", min), ("median", statistics.median)):
        cpu = pick(c for c, _ in ours) / pick(c for c, _ in theirs)
        wall = pick(w for _, w in ours) / pick(w for _, w in theirs)
        parts.append(f"{name} CPU {cpu:.2f}x wall {wall:.2f}x")
    return f"{label}: " + "; ".join(parts)


def profile(action: Callable[[], object], title: str) -> None:
    profiler = cProfile.Profile(time.process_time)
    profiler.runcall(action)
    print(f"--- profile: {title} (main thread, CPU clock)")
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--batch", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--update-share", type=float, default=0.9)
    parser.add_argument("--keys", default="both", choices=["clustered", "uniform", "both"])
    parser.add_argument("--table-type", default="MERGE_ON_READ", choices=["COPY_ON_WRITE", "MERGE_ON_READ"])
    parser.add_argument("--profile", action="store_true", help="one more upsert per index under cProfile")
    parser.add_argument("--small-file-limit", default=None, help="hoodie.parquet.small.file.limit of the upserts")
    parser.add_argument("--workdir", default=None, help="parent folder of the temporary table")
    args = parser.parse_args()
    rng = random.Random(17)
    patterns = ["clustered", "uniform"] if args.keys == "both" else [args.keys]
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        path = os.path.join(tmp, "t")
        table = Table.create(
            path, record_key="id", partition_by="part", ordering_field="ts", table_type=args.table_type, table_version=9
        )
        keys = np.array(rng.sample(range(args.rows * 10), args.rows), dtype=np.int64)
        cpu, wall = timed(lambda: table.bulk_insert(rows(keys, 1)))
        print(f"bulk insert {args.rows} rows: CPU {cpu:.2f} s, wall {wall:.2f} s", flush=True)
        opened = Table.open(path, options={"hoodie.metadata.record.index.enable": "true"})
        cpu, wall = timed(opened.initialize_metadata_table)
        print(f"metadata table + record index of {args.rows} keys: CPU {cpu:.2f} s, wall {wall:.2f} s", flush=True)
        times: dict[str, list[tuple[float, float]]] = defaultdict(list)
        next_key = args.rows * 10
        ts = 2

        def write_options(index: str) -> dict[str, str]:
            limit = {} if args.small_file_limit is None else {"hoodie.parquet.small.file.limit": args.small_file_limit}
            return {"hoodie.index.type": index, **limit}

        def batch_of(pattern: str) -> pa.Table:
            nonlocal keys, next_key, ts
            updates = int(args.batch * args.update_share)
            fresh = np.arange(next_key, next_key + args.batch - updates, dtype=np.int64)
            batch_keys = np.concatenate([update_keys(rng, keys, updates, pattern), fresh])
            next_key += len(fresh)
            keys = np.concatenate([keys, fresh])
            ts += 1
            return rows(batch_keys, ts)

        for round_ in range(args.rounds):
            for pattern in patterns:
                for index in ("RECORD_INDEX", "BLOOM") if round_ % 2 == 0 else ("BLOOM", "RECORD_INDEX"):
                    writer = Table.open(path, options=write_options(index))
                    batch = batch_of(pattern)
                    if index == "RECORD_INDEX":  # tagging alone, interleaved: both indexes on the same table
                        ids = batch.column("id").combine_chunks()
                        for label, cold in (("cold", True), ("warm", False)):
                            run = timed(lambda w=writer, k=ids, c=cold: _tag_record_index(w, k, c))
                            times[f"{pattern} tagging RECORD_INDEX {label}"].append(run)
                        times[f"{pattern} tagging BLOOM"].append(timed(lambda w=writer, b=batch: _tag_bloom(w, b)))
                    cpu, wall = timed(lambda w=writer, b=batch: w.upsert(b))
                    times[f"{pattern} upsert {index}"].append((cpu, wall))
                    print(f"round {round_} {pattern} {index} upsert: CPU {cpu:.2f} s, wall {wall:.2f} s", flush=True)
        if args.profile:
            for index in ("RECORD_INDEX", "BLOOM"):
                writer = Table.open(path, options=write_options(index))
                batch = batch_of(patterns[-1])
                profile(lambda w=writer, b=batch: w.upsert(b), f"{patterns[-1]} upsert {index}")
    print(f"--- {args.rows} rows, {args.batch}-row upserts ({args.update_share:.0%} updates), {args.table_type}")
    for label, runs in sorted(times.items()):
        print(summary(label, runs))
    for pattern in patterns:
        rli, bloom_runs = times[f"{pattern} upsert RECORD_INDEX"], times[f"{pattern} upsert BLOOM"]
        print(ratio(f"{pattern} upsert RECORD_INDEX / BLOOM (target <= 0.5x)", rli, bloom_runs))
        for label in ("cold", "warm"):
            tag = times[f"{pattern} tagging RECORD_INDEX {label}"]
            print(ratio(f"{pattern} tagging RECORD_INDEX {label} / BLOOM", tag, times[f"{pattern} tagging BLOOM"]))
    print(f"load average: {os.getloadavg()}")


if __name__ == "__main__":
    main()
