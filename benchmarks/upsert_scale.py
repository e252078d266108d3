"""Upsert cost against table size: a fixed 200,000-row upsert into tables of 1M, 4M and 16M rows.

Issue 19 target 5: the cost of an upsert must grow with the change, not the table.

Each table is non-partitioned, keyed by a zero-padded string `key` (ingestion order, so
`bulk_insert` of the sorted load gives every file group a narrow, disjoint key range) and
sized with `hoodie.parquet.max.file.size` so that a file group holds about 50,000 rows
(1M rows: 20 file groups; 16M rows: 320). Each table is built once with `bulk_insert`
into `--cache` and copied for every run, so every upsert starts from the same table.

The upsert batch is always 200,000 rows: half updates, half new keys above the table's
largest key (ingestion appends). The updates are

* ``clustered``: every key of a fixed window of the 100,000 most recent keys (two file
  groups: 10% of the 1M table's groups; the same two at every size, so the change's
  footprint is fixed and only the table around it grows);
* ``uniform``: 100,000 keys drawn uniformly from the whole table (touches every file
  group at every size: the cost of a copy-on-write upsert then grows with the table by
  construction; reported as it is).

Table types: ``cow`` (copy-on-write: touched file groups are rewritten) and ``mor``
(merge-on-read: updates are appended to the touched groups' logs).

Every upsert runs in a fresh child process that first builds its batch, then measures
around `Table.open(path).upsert(batch)`:

* wall time and CPU time (user + system, of the process and its children),
* bytes read: `rchar` (bytes through read syscalls, page cache included) and
  `read_bytes` (bytes fetched from the block device) from /proc/self/io,
* peak RSS of the child (`ru_maxrss`, which includes the batch and the imports).

The copy is synced to disk before the child starts, so that writing back a 640 MB copy
does not land in the measured upsert's wall time.

The result is checked: the row count after the upsert is the table's plus the inserts.
Run ``python benchmarks/upsert_scale.py --help`` for the options; see benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SEED = 20261124
UPSERT_ROWS = 200_000
ROWS_PER_FILE_GROUP = 50_000
#: Keys of the clustered update window (the most recent keys of the table).
CLUSTERED_WINDOW = 100_000
KEY_WIDTH = 12
TABLE_TYPES = {"cow": "COPY_ON_WRITE", "mor": "MERGE_ON_READ"}
PATTERNS = ("clustered", "uniform")


def parse_size(text: str) -> int:
    """`1M`, `4M`, `250k` or a plain number of rows."""
    text = text.strip().lower()
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:], 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def size_label(rows: int) -> str:
    return f"{rows // 1_000_000}M" if rows % 1_000_000 == 0 else f"{rows // 1_000}k"


def keys_of(ids: np.ndarray) -> pa.Array:
    """Zero-padded string keys, so that key order is id order."""
    return pc.utf8_lpad(pa.array(ids, pa.int64()).cast(pa.string()), KEY_WIDTH, "0")


def rows_of(ids: np.ndarray, ts: np.ndarray, rng: np.random.Generator) -> pa.Table:
    n = len(ids)
    num = pa.array(rng.integers(0, 10_000_000, n, dtype=np.int64)).cast(pa.string())
    return pa.table(
        {
            "key": keys_of(ids),
            "ts": pa.array(ts, pa.int64()),
            "name": pc.binary_join_element_wise("name", num, "_"),
            "amount": pa.array(np.round(rng.uniform(0.0, 10_000.0, n), 2), pa.float64()),
            "qty": pa.array(rng.integers(0, 1000, n, dtype=np.int32), pa.int32()),
            "flag": pa.array(rng.random(n) < 0.5, pa.bool_()),
        }
    )


def batch(rows: int, pattern: str) -> pa.Table:
    """The 200,000-row upsert into a table of `rows` rows (keys 0..rows-1)."""
    rng = np.random.default_rng(SEED + 1)
    n_updates = UPSERT_ROWS // 2
    if pattern == "clustered":
        updates = np.arange(rows - CLUSTERED_WINDOW, rows, dtype=np.int64)[:n_updates]
    else:
        updates = np.sort(rng.choice(rows, n_updates, replace=False).astype(np.int64))
    inserts = np.arange(rows, rows + UPSERT_ROWS - len(updates), dtype=np.int64)
    ids = np.concatenate([updates, inserts])
    ts = rng.integers(10_000_000_000, 11_000_000_000, len(ids), dtype=np.int64)
    return rows_of(ids, ts, rng)


def table_options(rows_per_group: int, estimate: bool) -> dict[str, Any]:
    """File sizing for file groups of about `rows_per_group` rows (about 40 bytes a row on disk).

    The build gives the writer a record size estimate (there is no commit to measure yet);
    the upserts measure it from recent commits, as a writer does by default.
    """
    options: dict[str, Any] = {
        "hoodie.parquet.max.file.size": rows_per_group * 64,
        "hoodie.parquet.small.file.limit": rows_per_group * 16,
    }
    if estimate:
        options["hoodie.copyonwrite.record.size.estimate"] = 64
    return options


def build(path: Path, rows: int, table_type: str) -> float:
    """Bulk-insert `rows` rows (in key order, 1M rows a commit) into a new table; seconds taken."""
    from lakeward import Table

    start = time.perf_counter()
    table = Table.create(
        str(path),
        table_name="scale",
        record_key="key",
        ordering_field="ts",
        table_type=TABLE_TYPES[table_type],
        options=table_options(ROWS_PER_FILE_GROUP, estimate=True),
    )
    rng = np.random.default_rng(SEED)
    chunk = 1_000_000
    for start_id in range(0, rows, chunk):
        ids = np.arange(start_id, min(rows, start_id + chunk), dtype=np.int64)
        table.bulk_insert(rows_of(ids, rng.integers(0, 1_000_000_000, len(ids), dtype=np.int64), rng))
    return time.perf_counter() - start


def proc_io() -> dict[str, int]:
    out: dict[str, int] = {}
    with open("/proc/self/io") as f:
        for line in f:
            name, _, value = line.partition(":")
            out[name.strip()] = int(value)
    return out


def cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def child(path: str, rows: int, pattern: str, profile: str | None) -> dict[str, Any]:
    """Run one upsert in this process; what it cost."""
    from lakeward import Table

    data = batch(rows, pattern)
    options = table_options(ROWS_PER_FILE_GROUP, estimate=False)
    io0, cpu0, wall0 = proc_io(), cpu_seconds(), time.perf_counter()
    if profile:
        import cProfile

        scope = {"Table": Table, "path": path, "data": data, "options": options}
        cProfile.runctx("Table.open(path, options=options).upsert(data)", globals(), scope, profile)
    else:
        Table.open(path, options=options).upsert(data)
    wall, cpu, io1 = time.perf_counter() - wall0, cpu_seconds() - cpu0, proc_io()
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    written = Table.open(path)
    expected = rows + UPSERT_ROWS // 2
    got = written.read(columns=["key"]).num_rows
    if got != expected:
        raise AssertionError(f"{got} rows after the upsert, expected {expected}")
    return {
        "wall": wall,
        "cpu": cpu,
        "rchar": io1["rchar"] - io0["rchar"],
        "read_bytes": io1["read_bytes"] - io0["read_bytes"],
        "peak_rss": peak_rss,
    }


def table_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run_case(source: Path, scratch: Path, rows: int, pattern: str, profile: str | None) -> dict[str, Any]:
    """Copy the built table and upsert into the copy in a child process."""
    target = scratch / "table"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target)
    os.sync()  # the copy's dirty pages are written back now, not during the measured upsert
    command = [sys.executable, __file__, "--child", str(target), str(rows), pattern]
    if profile:
        command += ["--profile", profile]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"upsert child failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    shutil.rmtree(target, ignore_errors=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1M,4M,16M", help="table sizes in rows (default 1M,4M,16M)")
    parser.add_argument("--types", default="cow,mor", help="table types: cow, mor (default both)")
    parser.add_argument("--patterns", default="clustered,uniform", help="key patterns (default both)")
    parser.add_argument("--repeat", type=int, default=1, help="upserts per case (best and median shown)")
    parser.add_argument(
        "--cache",
        default=os.path.join(tempfile.gettempdir(), "lakeward-upsert-scale"),
        help="where built tables are kept and reused (default: $TMPDIR/lakeward-upsert-scale)",
    )
    parser.add_argument("--rebuild", action="store_true", help="rebuild the tables even if cached")
    parser.add_argument("--profile", help="write a cProfile of each upsert to PROFILE.<type>.<size>.<pattern>")
    parser.add_argument("--out", help="write the results as JSON to this file")
    parser.add_argument("--child", nargs=3, metavar=("PATH", "ROWS", "PATTERN"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        path, rows, pattern = args.child
        print(json.dumps(child(path, int(rows), pattern, args.profile)))
        return 0

    sizes = [parse_size(s) for s in args.sizes.split(",")]
    types = [t.strip() for t in args.types.split(",")]
    patterns = [p.strip() for p in args.patterns.split(",")]
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}", flush=True)
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="upsert-scale-") as tmp:
        scratch = Path(tmp)
        for table_type in types:
            for rows in sizes:
                source = cache / f"{table_type}-{size_label(rows)}"
                if args.rebuild:
                    shutil.rmtree(source, ignore_errors=True)
                if not (source / ".hoodie" / "hoodie.properties").exists():
                    shutil.rmtree(source, ignore_errors=True)
                    seconds = build(source, rows, table_type)
                    print(f"built {source} in {seconds:.1f} s", flush=True)
                for pattern in patterns:
                    runs = []
                    for i in range(args.repeat):
                        profile = f"{args.profile}.{table_type}.{size_label(rows)}.{pattern}" if args.profile else None
                        runs.append(run_case(source, scratch, rows, pattern, profile if i == 0 else None))
                    walls = sorted(r["wall"] for r in runs)
                    cpus = sorted(r["cpu"] for r in runs)
                    row = {
                        "type": table_type,
                        "rows": rows,
                        "pattern": pattern,
                        "table_bytes": table_bytes(source),
                        "wall_best": walls[0],
                        "wall_median": float(np.median(walls)),
                        "cpu_best": cpus[0],
                        "cpu_median": float(np.median(cpus)),
                        "rchar": min(r["rchar"] for r in runs),
                        "read_bytes": min(r["read_bytes"] for r in runs),
                        "peak_rss": max(r["peak_rss"] for r in runs),
                    }
                    results.append(row)
                    print(
                        f"{table_type:3} {size_label(rows):>4} {pattern:9} wall {row['wall_best']:6.2f} s"
                        f" (median {row['wall_median']:6.2f})  cpu {row['cpu_best']:6.2f} s"
                        f"  rchar {row['rchar'] / 2**20:8.1f} MiB  read_bytes {row['read_bytes'] / 2**20:7.1f} MiB"
                        f"  peak RSS {row['peak_rss'] / 2**30:5.2f} GiB  (table {row['table_bytes'] / 2**20:.0f} MiB)",
                        flush=True,
                    )
    print_ratios(results)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2))
    return 0


def print_ratios(results: list[dict[str, Any]]) -> None:
    """Largest/smallest size ratios per type and pattern; the 16M peak RSS against 4 GB."""
    print()
    for table_type in TABLE_TYPES:
        for pattern in PATTERNS:
            rows = sorted(
                (r for r in results if r["type"] == table_type and r["pattern"] == pattern), key=lambda r: r["rows"]
            )
            if len(rows) < 2:
                continue
            small, large = rows[0], rows[-1]
            label = f"{size_label(large['rows'])}/{size_label(small['rows'])}"
            target = "  (target <= 1.5x)" if pattern == "clustered" else ""
            print(
                f"{table_type} {pattern:9} {label}: wall {large['wall_best'] / small['wall_best']:.2f}x"
                f"  cpu {large['cpu_best'] / small['cpu_best']:.2f}x"
                f"  rchar {large['rchar'] / max(1, small['rchar']):.2f}x{target}"
            )
    for r in results:
        if r["rows"] >= 16_000_000:
            verdict = "ok" if r["peak_rss"] < 4 * 2**30 else "OVER"
            label = f"{r['type']} {size_label(r['rows'])} {r['pattern']}"
            print(f"{label}: peak RSS {r['peak_rss'] / 2**30:.2f} GiB (< 4 GiB: {verdict})")


if __name__ == "__main__":
    sys.exit(main())
