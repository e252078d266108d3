"""Upsert on table version 9 against the same upsert on table version 6 (issue 16: within 1.1x).

The standard data of ``upsert_and_read.py`` (``--rows``, default 2,000,000, in 4 partitions; an
upsert of ``--upsert-rows``, half updates, half new keys) is bulk inserted into a fresh table of
each version (``Table.create(..., table_version=6 | 9)``), copy-on-write and merge-on-read, and
the upsert is timed on it. Each round builds new tables for both versions and runs them back to
back (the order alternates between rounds, so that a slower machine phase hits both); the median
and best of ``--rounds`` are printed with the ratio v9 / v6 (target: <= 1.1x), and the median
CPU time of the process (every engine thread), which other load on the machine sways less than
the wall time. Every table is
read back after its upsert (not timed) and checked against the expected rows (count and column
sums).

``--profile`` runs one more upsert per version and table type under cProfile and prints the
functions with the largest own time, to find what a version costs more.

Run ``--help`` for the flags; see benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import platform
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from upsert_and_read import Dataset, make_dataset, timed, verify  # noqa: E402 -- the sibling benchmark's data

from lakeward import Table  # noqa: E402

VERSIONS = (6, 9)
TABLE_TYPES = ("COPY_ON_WRITE", "MERGE_ON_READ")
TARGET = 1.1


def loaded_table(path: Path, data: Dataset, table_type: str, version: int) -> str:
    """A fresh table of `version` holding the initial rows (bulk insert); its path."""
    uri = str(path)
    table = Table.create(
        uri,
        table_name="bench",
        record_key="id",
        partition_by="part",
        ordering_field="ts",
        table_type=table_type,
        table_version=version,
    )
    table.bulk_insert(data.initial)
    return uri


def upsert_once(root: Path, data: Dataset, table_type: str, version: int, label: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of one upsert into a fresh table; the table
    is checked, then deleted. The CPU time counts every thread of the local engine and is
    less sensitive than the wall time to other processes sharing the machine."""
    path = root / label
    uri = loaded_table(path, data, table_type, version)
    cpu = time.process_time()
    seconds, _ = timed(lambda: Table.open(uri).upsert(data.upsert))
    cpu = time.process_time() - cpu
    verify(f"lakeward v{version} {table_type}", Table.open(uri).read(), data.expected)
    shutil.rmtree(path)
    return seconds, cpu


def profile_once(root: Path, data: Dataset, table_type: str, version: int, top: int) -> str:
    """The upsert under cProfile: the `top` functions by own time."""
    path = root / f"profile-{table_type}-v{version}"
    uri = loaded_table(path, data, table_type, version)
    table = Table.open(uri)
    profiler = cProfile.Profile()
    profiler.runcall(table.upsert, data.upsert)
    shutil.rmtree(path)
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=2_000_000, help="initial rows (default 2,000,000)")
    p.add_argument("--upsert-rows", type=int, default=200_000, help="upsert rows, half updates (default 200,000)")
    p.add_argument("--rounds", type=int, default=3, help="fresh tables and upserts per version (default 3)")
    p.add_argument("--profile", action="store_true", help="also profile one upsert per version and table type")
    p.add_argument("--profile-top", type=int, default=25, help="functions shown per profile (default 25)")
    p.add_argument("--workdir", type=Path, default=None, help="where tables go (default: a temporary folder)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    data = make_dataset(args.rows, args.upsert_rows)
    root = Path(tempfile.mkdtemp(prefix="lakeward-v9-upsert-", dir=args.workdir))
    print(
        f"v9 vs v6 upsert: {args.rows:,} rows, upsert of {args.upsert_rows:,} "
        f"({data.n_updates:,} updates, {data.n_inserts:,} inserts), {args.rounds} round(s); "
        f"Python {platform.python_version()} on {platform.machine()}"
    )
    ok = True
    try:
        for table_type in TABLE_TYPES:
            times: dict[int, list[float]] = {v: [] for v in VERSIONS}
            cpus: dict[int, list[float]] = {v: [] for v in VERSIONS}
            for r in range(args.rounds):
                order = VERSIONS if r % 2 == 0 else tuple(reversed(VERSIONS))
                for version in order:
                    label = f"{table_type}-v{version}-r{r}"
                    wall, cpu = upsert_once(root, data, table_type, version, label)
                    times[version].append(wall)
                    cpus[version].append(cpu)
            med = {v: statistics.median(ts) for v, ts in times.items()}
            best = {v: min(ts) for v, ts in times.items()}
            cpu_med = {v: statistics.median(ts) for v, ts in cpus.items()}
            ratio = med[9] / med[6]
            ok &= ratio <= TARGET
            print(f"\n{table_type}")
            for v in VERSIONS:
                runs = ", ".join(f"{t:.2f}" for t in times[v])
                print(
                    f"  v{v}: median {med[v]:.2f}s  best {best[v]:.2f}s  CPU median {cpu_med[v]:.2f}s  (runs: {runs})"
                )
            verdict = "within" if ratio <= TARGET else "OVER"
            print(
                f"  ratio v9/v6: median {ratio:.2f}x, best {best[9] / best[6]:.2f}x, "
                f"CPU median {cpu_med[9] / cpu_med[6]:.2f}x ({verdict} {TARGET}x)"
            )
            if args.profile:
                for version in VERSIONS:
                    print(f"\n--- profile: {table_type} upsert, table version {version}")
                    print(profile_once(root, data, table_type, version, args.profile_top))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
