"""Bytes on disk and snapshot-read CPU time: meta fields vs virtual keys vs raw pyarrow (issue 19 target 6).

One process, `upsert_and_read.py`'s data (seeded: a bulk insert, then a copy-on-write upsert
of half updates, half new keys), three tables of the same post-upsert rows:

* ``meta``    -- lakeward with the five `_hoodie_*` columns populated (the default);
* ``virtual`` -- lakeward with ``hoodie.populate.meta.fields=false`` (virtual keys);
* ``pyarrow`` -- the raw floor of ``upsert_and_read.py`` (one snappy file per partition).

Bytes are those of the latest base files (what a snapshot read scans) against the raw
files. Reads are timed in CPU time (``time.process_time``: this process's user + system
time, all threads), interleaved: round i reads meta, virtual and pyarrow one after the
other, so that machine load shifts all three alike. Each read is checked against the
expected aggregates. Best and median over the rounds are printed, and the ratios of the
medians.

    python benchmarks/virtual_keys.py --rows 2000000 --upsert-rows 200000 --rounds 9
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from upsert_and_read import (  # noqa: E402 -- the sibling benchmark's data and floor
    BYTES_TARGET,
    SEED,
    floor_load,
    floor_read,
    floor_upsert,
    latest_base_bytes,
    make_dataset,
    verify,
)

from lakeward import Table  # noqa: E402

#: Issue 19 target 6: snapshot read <= 1.2x raw pyarrow.
READ_TARGET = 1.2
VIRTUAL = {"hoodie.populate.meta.fields": "false"}


def build(root: Path, data: Any) -> dict[str, Callable[[], pa.Table]]:
    """The three tables of the same rows; returns a reader per table."""
    for name, options in (("meta", None), ("virtual", VIRTUAL)):
        table = Table.create(
            str(root / name),
            table_name="bench",
            record_key="id",
            partition_by="part",
            ordering_field="ts",
            options=options,
        )
        table.bulk_insert(data.initial)
        Table.open(str(root / name)).upsert(data.upsert)
    floor_load(root / "pyarrow", data.initial, "snappy")
    floor_upsert(root / "pyarrow", data.upsert, "snappy")
    return {
        "meta": lambda: Table.open(str(root / "meta")).read(),
        "virtual": lambda: Table.open(str(root / "virtual")).read(),
        "pyarrow": lambda: floor_read(root / "pyarrow"),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--upsert-rows", type=int, default=200_000)
    p.add_argument("--rounds", type=int, default=9, help="interleaved read rounds (default 9)")
    p.add_argument("--out", type=Path, help="write results as JSON to this file")
    args = p.parse_args(argv)
    data = make_dataset(args.rows, args.upsert_rows, SEED)
    with tempfile.TemporaryDirectory(prefix="lakeward-vk-") as tmp:
        root = Path(tmp)
        readers = build(root, data)
        raw_bytes = sum(f.stat().st_size for f in (root / "pyarrow").rglob("*.parquet"))
        sizes = {name: latest_base_bytes(Table.open(str(root / name))) for name in ("meta", "virtual")}
        sizes["pyarrow"] = raw_bytes
        for name, read in readers.items():
            verify(name, read(), data.expected)  # and an untimed warm-up read
        cpu: dict[str, list[float]] = {name: [] for name in readers}
        for _ in range(args.rounds):
            for name, read in readers.items():
                started = time.process_time()
                rows = read()
                cpu[name].append(time.process_time() - started)
                del rows
    load = os.getloadavg()
    print(f"rows={args.rows:,} upsert={args.upsert_rows:,} rounds={args.rounds} load average {load[0]:.1f}")
    print(f"{'table':<10} {'MB':>8} {'bytes/raw':>10} {'read cpu best s':>16} {'median s':>9} {'median/raw':>11}")
    medians = {name: statistics.median(times) for name, times in cpu.items()}
    for name in readers:
        print(
            f"{name:<10} {sizes[name] / 1e6:8.1f} {sizes[name] / raw_bytes:10.2f} {min(cpu[name]):16.3f} "
            f"{medians[name]:9.3f} {medians[name] / medians['pyarrow']:11.2f}"
        )
    print(f"targets: bytes/raw <= {BYTES_TARGET}, read/raw <= {READ_TARGET}")
    if args.out:
        result = {"rows": args.rows, "upsert_rows": args.upsert_rows, "load": load, "bytes": sizes, "cpu": cpu}
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
