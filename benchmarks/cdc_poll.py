"""A stream consumer's poll: a CDC query over the last commit of a table with many partitions
(issue 19: cost grows with the change, not the table), against delta-rs `load_cdf` over the
same commit.

Both tables get the same rows: `--rounds` inserts of `--rows` rows spread over `--partitions`
partitions (a file per partition per round), then one commit that updates 50 keys of one
partition. The poll reads that commit's changes. lakeward is measured on version 6 (files
listed from storage) and version 8 (files listed from the metadata table), copy-on-write with
DATA_BEFORE_AFTER. CPU time (`time.process_time`, all threads), lakeward and delta-rs
interleaved; every result is checked first (50 updates, before and after images).

    python benchmarks/cdc_poll.py --partitions 200 --rounds 5 --repeat 15
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

SCHEMA = pa.schema([("id", pa.string()), ("part", pa.string()), ("v", pa.int64()), ("ts", pa.int64())])
UPDATED = 50


def batch(rows: int, partitions: int, round_: int) -> pa.Table:
    return pa.table(
        {
            "id": [f"{i}-{round_}" for i in range(rows)],
            "part": [f"d{i % partitions:04d}" for i in range(rows)],
            "v": pa.array([round_] * rows, pa.int64()),
            "ts": pa.array([round_] * rows, pa.int64()),
        },
        schema=SCHEMA,
    )


def poll_batch(partitions: int) -> pa.Table:
    """Updates of 50 keys of round 0 in partition d0007 (or the last partition)."""
    part = min(7, partitions - 1)
    ids = [f"{part + k * partitions}-0" for k in range(UPDATED)]
    return pa.table(
        {
            "id": ids,
            "part": [f"d{part:04d}"] * UPDATED,
            "v": pa.array([99] * UPDATED, pa.int64()),
            "ts": pa.array([99] * UPDATED, pa.int64()),
        },
        schema=SCHEMA,
    )


def build(root: Path, partitions: int, rounds: int, rows: int) -> dict[str, Any]:
    """The tables; returns each one's path and where its poll begins."""
    from deltalake import DeltaTable, write_deltalake

    from lakeward import Table

    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    out: dict[str, Any] = {}
    for version in ("6", "8"):
        path = str(root / f"lakeward-v{version}")
        table = Table.create(
            path,
            record_key="id",
            partition_by="part",
            ordering_field="ts",
            options={
                "hoodie.table.cdc.enabled": "true",
                "hoodie.table.cdc.supplemental.logging.mode": "DATA_BEFORE_AFTER",
                "hoodie.write.table.version": version,
                "hoodie.parquet.small.file.limit": "0",  # a file per partition per round
            },
        )
        for r in range(rounds):
            table.insert(batch(rows, partitions, r))
        last = table.timeline().completed_writes()[-1]
        table.upsert(poll_batch(partitions))
        out[f"lakeward v{version}"] = (path, last.ordering_time)
    path = str(root / "delta")
    for r in range(rounds):
        write_deltalake(
            path,
            batch(rows, partitions, r),
            mode="append",
            partition_by=["part"],
            configuration={"delta.enableChangeDataFeed": "true"},
        )
    (
        DeltaTable(path)
        .merge(poll_batch(partitions), predicate="t.id = s.id AND t.part = s.part", source_alias="s", target_alias="t")
        .when_matched_update_all()
        .execute()
    )
    out["delta"] = (path, DeltaTable(path).version())
    return out


def cpu(fn: Callable[[], Any]) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rows", type=int, default=20_000, help="rows per round")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--workdir", default="/tmp/lakeward-cdc-poll")
    args = parser.parse_args()

    from deltalake import DeltaTable

    from lakeward import Table

    tables = build(Path(args.workdir), args.partitions, args.rounds, args.rows)
    delta_path, delta_version = tables.pop("delta")

    def delta() -> pa.Table:
        cdf = DeltaTable(delta_path).load_cdf(starting_version=delta_version, ending_version=delta_version)
        return pa.RecordBatchReader.from_stream(cdf).read_all()

    def lake(name: str) -> pa.Table:
        path, begin = tables[name]
        return Table.open(path).read_changes(begin, images="struct")

    failures = 0
    changes = delta()
    kinds = pc.value_counts(changes.column("_change_type")).to_pylist()
    if sorted((k["values"], k["counts"]) for k in kinds) != [("update_postimage", 50), ("update_preimage", 50)]:
        print(f"CHECK FAILED: delta-rs changes {kinds}")
        failures += 1
    for name in tables:
        out = lake(name)
        ok = out.num_rows == UPDATED and set(out.column("op").to_pylist()) == {"u"}
        rows = out.to_pylist()
        ok = ok and {r["before"]["v"] for r in rows} == {0} and {r["after"]["v"] for r in rows} == {99}
        if not ok:
            print(f"CHECK FAILED: {name} changes")
            failures += 1
    times: dict[str, list[float]] = {n: [] for n in tables}
    delta_times: list[float] = []
    for _ in range(args.repeat):
        for name in tables:
            times[name].append(cpu(lambda name=name: lake(name)))  # type: ignore[misc]
            delta_times.append(cpu(delta))
    best, median = min(delta_times), statistics.median(delta_times)
    files = args.partitions * args.rounds
    print(
        f"{args.partitions} partitions, {files} base files, poll of 1 commit ({UPDATED} updates); "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print(f"{'delta-rs load_cdf':<22} best {best * 1e3:7.1f} ms  median {median * 1e3:7.1f} ms")
    for name, xs in times.items():
        b, m = min(xs), statistics.median(xs)
        print(f"{name:<22} best {b * 1e3:7.1f} ms ({b / best:5.2f}x)  median {m * 1e3:7.1f} ms ({m / median:5.2f}x)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
