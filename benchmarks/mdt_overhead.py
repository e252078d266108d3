"""The metadata table's cost per commit: the same upsert with `hoodie.metadata.enable=false`, with
the `files` partition, and with `files` + `record_index` (issue 17: overhead <= 10%).

Bulk inserts `--rows` rows into a version 9 table (8 partitions, random keys) and copies it three
times: one without a metadata table, one with the `files` partition
(`initialize_metadata_table()`), one with `files` and `record_index`. Then `--rounds` rounds: the
same `--batch`-row upsert (`--update-share` existing keys, clustered or uniform, the rest new)
into each table, in an order rotated per round, all tagged by `--index` so that the tables differ
only by what the commit keeps. The metadata table's own services run inline after each write
(compaction every `hoodie.metadata.compact.max.delta.commits`, default 10, delta commits), so
run enough rounds for their share to show. Prints the process CPU time (all threads) and wall
time per round and table, best / median, and the overhead ratios.

    python benchmarks/mdt_overhead.py --rows 2000000 --batch 200000 --rounds 12
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
from collections import defaultdict

import numpy as np
from record_index import profile, ratio, rows, summary, timed, update_keys

from lakeward import Table

TABLES = ("no metadata table", "files", "files + record_index")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--batch", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--update-share", type=float, default=0.9)
    parser.add_argument("--keys", default="uniform", choices=["clustered", "uniform"])
    parser.add_argument("--index", default="BLOOM", help="hoodie.index.type of every upsert")
    parser.add_argument("--table-type", default="MERGE_ON_READ", choices=["COPY_ON_WRITE", "MERGE_ON_READ"])
    parser.add_argument("--profile", action="store_true", help="one more upsert per table under cProfile")
    parser.add_argument("--workdir", default=None, help="parent folder of the temporary tables")
    args = parser.parse_args()
    rng = random.Random(17)
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        paths = {label: os.path.join(tmp, f"t{i}") for i, label in enumerate(TABLES)}
        first = paths[TABLES[0]]
        table = Table.create(
            first,
            record_key="id",
            partition_by="part",
            ordering_field="ts",
            table_type=args.table_type,
            table_version=9,
        )
        keys = np.array(rng.sample(range(args.rows * 10), args.rows), dtype=np.int64)
        cpu, wall = timed(lambda: table.bulk_insert(rows(keys, 1)))
        print(f"bulk insert {args.rows} rows: CPU {cpu:.2f} s, wall {wall:.2f} s", flush=True)
        for label in TABLES[1:]:
            shutil.copytree(first, paths[label])
        Table.open(paths["files"]).initialize_metadata_table()
        with_index = Table.open(paths[TABLES[2]], options={"hoodie.metadata.record.index.enable": "true"})
        cpu, wall = timed(with_index.initialize_metadata_table)
        print(f"metadata table + record index of {args.rows} keys: CPU {cpu:.2f} s, wall {wall:.2f} s", flush=True)
        options = {label: {"hoodie.index.type": args.index} for label in TABLES}
        options[TABLES[0]]["hoodie.metadata.enable"] = "false"
        times: dict[str, list[tuple[float, float]]] = defaultdict(list)
        next_key = args.rows * 10
        for round_ in range(args.rounds + (1 if args.profile else 0)):
            updates = int(args.batch * args.update_share)
            fresh = np.arange(next_key, next_key + args.batch - updates, dtype=np.int64)
            next_key += len(fresh)
            batch = rows(np.concatenate([update_keys(rng, keys, updates, args.keys), fresh]), round_ + 2)
            keys = np.concatenate([keys, fresh])
            order = TABLES[round_ % 3 :] + TABLES[: round_ % 3]
            for label in order:
                writer = Table.open(paths[label], options=options[label])
                if round_ == args.rounds:
                    profile(lambda w=writer, b=batch: w.upsert(b), f"upsert, {label}")
                    continue
                cpu, wall = timed(lambda w=writer, b=batch: w.upsert(b))
                times[label].append((cpu, wall))
                print(f"round {round_} {label}: CPU {cpu:.2f} s, wall {wall:.2f} s", flush=True)
    print(f"--- {args.rows} rows, {args.batch}-row upserts ({args.update_share:.0%} {args.keys} updates), {args.index}")
    for label in TABLES:
        print(summary(f"upsert, {label}", times[label]))
    base = times[TABLES[0]]
    for label in TABLES[1:]:
        print(ratio(f"{label} / no metadata table (target <= 1.10x)", times[label], base))
        total = sum(c for c, _ in times[label]) / sum(c for c, _ in base)
        print(f"{label} / no metadata table, CPU summed over all rounds: {total:.3f}x")
    print(f"load average: {os.getloadavg()}")


if __name__ == "__main__":
    main()
