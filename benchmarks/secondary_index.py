"""Secondary index benchmark: point lookups, 0.1% predicates and a text prefix query, with and without indexes.

A copy-on-write table of ``--rows`` rows (default 10,000,000) in ``--files`` base files
(default 40; one bulk insert each). Columns: ``id`` (record key), ``order_ref`` (unique, in
random order: the point lookup), ``customer`` (random in [0, rows/10): ~10 rows a value),
``bucket`` (random in [0, 1000): a value picks 0.1% of the rows), ``amount`` (float) and
``note`` (text: a random item word ``Item0000``-``Item0999`` then random words;
``LIKE 'Item0042%'`` picks ~0.1%).

Indexes: ``bitmap`` on order_ref, customer and bucket, ``text`` on note. Each query is read

* through the indexes: ``Table.read(filters=...)`` (row-group reads of the selected rows);
* by the plain scan with Parquet statistics: the same read with indexes off (pyarrow's
  dataset scanner over the base files: projection, row-group pruning by statistics).

Figures per query (best of ``--repeat`` wall times, the others from the last run):
wall time, bytes read (``rchar`` of /proc/self/io: every byte the process read from
files, index files included), rows decoded (rows of the Parquet row groups decoded).
Also: index build time and index size against the data size. Not a timed test:
numbers depend on the machine (2 cores here) and the page cache (warm: each query runs
first once untimed). Targets: point lookups >= 20x fewer bytes and >= 5x lower latency.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds

from lakeward.core.file_group.reader import read_file_slices
from lakeward.core.index.secondary.definitions import load_definitions
from lakeward.core.index.secondary.predicates import filters_to_expression
from lakeward.core.index.secondary.read import read_with_indexes
from lakeward.core.index.secondary.storage import IndexCatalog
from lakeward.core.table import Table

SEED = 20261121
WORDS = ["Buying", "sale", "blue", "red", "apple", "fresh", "deal", "now", "price", "crate"]


def rchar() -> int:
    """Bytes this process has read through read(2)/pread(2) so far (page-cache hits included)."""
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    return 0


def batch(rng: np.random.Generator, start: int, n: int, total: int) -> pa.Table:
    items = rng.integers(0, 1000, n)
    extra = rng.integers(0, len(WORDS), (n, 3))
    words = np.array(WORDS)
    notes = [f"Item{i:04d} {a} {b} {c}" for i, (a, b, c) in zip(items, words[extra].tolist())]
    return pa.table(
        {
            "id": pa.array(np.arange(start, start + n), pa.int64()),
            "order_ref": pa.array(ORDER_REFS[start : start + n], pa.int64()),
            "customer": pa.array(rng.integers(0, total // 10, n), pa.int64()),
            "bucket": pa.array(rng.integers(0, 1000, n), pa.int64()),
            "amount": pa.array(rng.random(n) * 100),
            "note": notes,
        }
    )


ORDER_REFS: np.ndarray = np.zeros(0, dtype=np.int64)


def make_table(path: str, rows: int, files: int) -> tuple[Table, float, int]:
    global ORDER_REFS
    rng = np.random.default_rng(SEED)
    ORDER_REFS = rng.permutation(rows).astype(np.int64) * 7 + 3  # unique, in random order
    table = Table.create(path, record_key="id", options={"hoodie.parquet.max.file.size": str(4 * 1024**3)})
    per = rows // files
    started = time.perf_counter()
    for k in range(files):
        n = per if k < files - 1 else rows - per * (files - 1)
        table.bulk_insert(batch(rng, k * per, n, rows))
    seconds = time.perf_counter() - started
    size = sum(s.base_file.size for s in table.file_slices() if s.base_file is not None)
    return table, seconds, size


def measure(fn: Callable[[], Any], repeat: int) -> tuple[float, int, Any]:
    fn()  # warm: metadata, page cache, unpacked text indexes
    best = float("inf")
    result = None
    read = 0
    for _ in range(repeat):
        before = rchar()
        started = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - started)
        read = rchar() - before
    return best, read, result


def scan_rows_decoded(table: Table, filters: Any, only: set[str] | None = None) -> int:
    """Rows of the row groups the statistics-pruned scan decodes (of the base files `only`, if given)."""
    paths = [
        table.storage.full_path(s.base_file.path)
        for s in table.file_slices()
        if s.base_file is not None and (only is None or s.base_file.path in only)
    ]
    if not paths:
        return 0
    dataset = ds.dataset(paths, format="parquet")
    expression = filters_to_expression(filters)
    total = 0
    for fragment in dataset.get_fragments():
        for piece in fragment.split_by_row_group(expression):
            total += sum(rg.num_rows for rg in piece.row_groups)
    return total


def run(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="lakeward-bench-index-"))
    path = str(root / "table")
    if Path(path).exists():
        shutil.rmtree(path)
    out: dict[str, Any] = {}
    print(f"writing {args.rows:,} rows in {args.files} base files ...", flush=True)
    table, write_s, data_bytes = make_table(path, args.rows, args.files)
    out["write seconds"] = write_s
    out["data bytes"] = data_bytes
    table.create_index("values", ["order_ref", "customer", "bucket"], "bitmap")
    table.create_index("words", "note", "text")
    started = time.perf_counter()
    built = table.build_indexes()
    out["index build seconds"] = time.perf_counter() - started
    assert built is not None
    status = table.index_status()
    out["index bytes"] = dict(status.index_bytes)

    timeline = table.timeline()
    slices = table.file_slices()
    schema = table.schema()
    definitions = load_definitions(table.storage)
    catalog = IndexCatalog.load(table.storage, timeline)
    probe = table.read(columns=["order_ref", "customer"], filters=[("id", "=", args.rows // 2)]).to_pylist()[0]
    queries = {
        "point lookup order_ref = v (unique)": [("order_ref", "=", probe["order_ref"])],
        "lookup customer = v (~10 rows)": [("customer", "=", probe["customer"])],
        "0.1% bucket = 7": [("bucket", "=", 7)],
        "text LIKE 'Item0042%'": [("note", "like", "Item0042%")],
    }
    for label, filters in queries.items():

        def indexed(filters: Any = filters) -> Any:
            return read_with_indexes(table.storage, slices, schema, None, filters, definitions, catalog)

        def scanned(filters: Any = filters) -> pa.Table:
            return read_file_slices(table.storage, slices, schema, None, filters_to_expression(filters))

        t_index, b_index, (rows, explain) = measure(indexed, args.repeat)
        t_scan, b_scan, scan = measure(scanned, args.repeat)
        assert rows.num_rows == scan.num_rows, (label, rows.num_rows, scan.num_rows)
        scanned_files = {s.base_file for s in explain.slices if s.mode == "scan" and s.base_file}
        decoded_index = sum(s.rows_decoded or 0 for s in explain.slices) + scan_rows_decoded(
            table, filters, scanned_files
        )
        decoded_scan = scan_rows_decoded(table, filters)
        out[label] = {
            "rows": rows.num_rows,
            "index seconds": t_index,
            "scan seconds": t_scan,
            "index bytes read": b_index,
            "scan bytes read": b_scan,
            "index rows decoded": decoded_index,
            "scan rows decoded": decoded_scan,
            "files via index": explain.count("index"),
            "files read via index": sum(1 for s in explain.slices if s.mode == "index" and s.candidate_rows),
            "files scanned": explain.count("scan"),
        }
    if not args.dir and not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=10_000_000, help="table rows (default 10,000,000)")
    p.add_argument("--files", type=int, default=40, help="base files (default 40; at least 20)")
    p.add_argument("--repeat", type=int, default=3, help="timed runs per query (best is reported)")
    p.add_argument("--dir", default=None, help="work folder (default: a temporary one, removed after)")
    p.add_argument("--keep", action="store_true", help="keep the temporary table")
    args = p.parse_args(argv)
    out = run(args)
    mb = 1024 * 1024
    print(f"rows={args.rows:,} base files={args.files} data={out['data bytes'] / mb:.1f} MB")
    print(f"write (bulk_insert x {args.files}): {out['write seconds']:.1f}s")
    index_total = sum(out["index bytes"].values())
    sizes = ", ".join(f"{k} {v / mb:.1f} MB" for k, v in out["index bytes"].items())
    print(
        f"index build: {out['index build seconds']:.1f}s; index size {index_total / mb:.1f} MB ({sizes}) = "
        f"{index_total / out['data bytes']:.2f}x data"
    )
    for label, q in out.items():
        if not isinstance(q, dict) or "rows" not in q:
            continue
        print(
            f"\n{label}: {q['rows']} row(s); base files: {q['files via index']} answered by the index "
            f"({q['files read via index']} of them read), {q['files scanned']} scanned"
        )
        print(
            f"  wall time    index {q['index seconds'] * 1000:9.1f} ms   scan {q['scan seconds'] * 1000:9.1f} ms"
            f"   scan/index {q['scan seconds'] / q['index seconds']:7.1f}x"
        )
        print(
            f"  bytes read   index {q['index bytes read'] / mb:9.2f} MB   scan {q['scan bytes read'] / mb:9.2f} MB"
            f"   scan/index {q['scan bytes read'] / max(1, q['index bytes read']):7.1f}x"
        )
        print(
            f"  rows decoded index {q['index rows decoded']:12,}   scan {q['scan rows decoded']:12,}"
            f"   scan/index {q['scan rows decoded'] / max(1, q['index rows decoded']):7.1f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
