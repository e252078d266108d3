"""A forced metadata-table compaction of a record index, timed alone (issue 17: the metadata table's
cost per commit is mostly this compaction, spread over the delta commits it folds).

Builds once (under `--workdir`, reused by later runs) the table `mdt_overhead.py` measures: a
version 9 merge-on-read table of `--rows` rows (8 partitions, random keys; bulk insert), its
metadata table with `files` and `record_index`, then `--upserts` upserts of `--batch` rows (90%
uniform updates, 10% new keys) with `hoodie.metadata.compact.max.delta.commits=1000`, so that
nothing is compacted yet. Each run copies that table and times `schedule_metadata_compaction(force=True)`
+ `execute_metadata_compaction` on the copy (process CPU, all threads, and wall); `--profile` runs
one more under cProfile (CPU clock) and prints the functions that took the most time.

    python benchmarks/mdt_compaction.py --rows 2000000 --repeat 5 --profile
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import random
import shutil
import statistics
import tempfile
import time

import numpy as np
from record_index import rows, update_keys

from lakeward import Table
from lakeward.core.metadata_table import compaction

OPTIONS = {"hoodie.metadata.record.index.enable": "true", "hoodie.metadata.compact.max.delta.commits": "1000"}


def build(path: str, n: int, batch: int, upserts: int) -> None:
    """The table before its first metadata compaction; a `.done` file marks it complete."""
    shutil.rmtree(path, ignore_errors=True)
    rng = random.Random(17)
    table = Table.create(
        path, record_key="id", partition_by="part", ordering_field="ts", table_type="MERGE_ON_READ", table_version=9
    )
    keys = np.array(rng.sample(range(n * 10), n), dtype=np.int64)
    table.bulk_insert(rows(keys, 1))
    Table.open(path, options=OPTIONS).initialize_metadata_table()
    next_key = n * 10
    updates = batch * 9 // 10
    for round_ in range(upserts):
        fresh = np.arange(next_key, next_key + batch - updates, dtype=np.int64)
        next_key += len(fresh)
        upsert = rows(np.concatenate([update_keys(rng, keys, updates, "uniform"), fresh]), round_ + 2)
        Table.open(path, options=OPTIONS).upsert(upsert)
        keys = np.concatenate([keys, fresh])
    open(os.path.join(path, ".done"), "w").close()


def compact_copy(source: str, target: str, profile: bool) -> tuple[float, float]:
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target)
    table = Table.open(target)

    def run() -> None:
        planned = compaction.schedule_metadata_compaction(table.storage, table.timeline(), force=True)
        assert planned is not None, "nothing to compact"
        compaction.execute_metadata_compaction(table.storage, planned)

    cpu, wall = time.process_time(), time.perf_counter()
    if profile:
        profiler = cProfile.Profile(time.process_time)
        profiler.runcall(run)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(20)
    else:
        run()
    return time.process_time() - cpu, time.perf_counter() - wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--batch", type=int, default=200_000)
    parser.add_argument("--upserts", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="one more run under cProfile")
    parser.add_argument("--workdir", default=tempfile.gettempdir(), help="where the built table is kept")
    args = parser.parse_args()
    source = os.path.join(args.workdir, f"lakeward-mdt-compaction-{args.rows}-{args.batch}-{args.upserts}")
    if not os.path.exists(os.path.join(source, ".done")):
        started = time.perf_counter()
        build(source, args.rows, args.batch, args.upserts)
        print(f"built {source} in {time.perf_counter() - started:.1f} s", flush=True)
    target = source + "-run"
    runs = []
    try:
        for _ in range(args.repeat):
            runs.append(compact_copy(source, target, profile=False))
            print(f"compaction CPU {runs[-1][0]:.2f} s, wall {runs[-1][1]:.2f} s", flush=True)
        if args.profile:
            compact_copy(source, target, profile=True)
    finally:
        shutil.rmtree(target, ignore_errors=True)
    cpus, walls = [c for c, _ in runs], [w for _, w in runs]
    print(
        f"--- forced metadata compaction, {args.rows} keys + {args.upserts} upserts of {args.batch}: "
        f"CPU best {min(cpus):.2f} median {statistics.median(cpus):.2f} s; "
        f"wall best {min(walls):.2f} median {statistics.median(walls):.2f} s; load average {os.getloadavg()}"
    )


if __name__ == "__main__":
    main()
