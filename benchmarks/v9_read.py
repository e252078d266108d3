"""Hudi 1.x read benchmark (issue 15): snapshot reads of table version 9 and list calls per read.

Three measurements in one run:

(a) **Snapshot read time, lakeward vs hudi-rs, on the same v9 tables.** The standard data of
    ``upsert_and_read.py`` (``--rows``, default 2,000,000, in 4 partitions; an upsert of
    ``--upsert-rows``, half updates, half new keys) is written by lakeward into two table
    version 9 tables (``Table.create(..., table_version=9)``): copy-on-write (bulk insert,
    then the upsert rewrites the affected files) and merge-on-read (bulk insert, then the
    upsert and ``--log-rounds - 1`` more rounds updating the same keys go to log files;
    ``hoodie.parquet.small.file.limit=0`` so that inserts make new file groups instead of
    rewriting base files). Each table is then read by ``Table.open(p).read()`` and by hudi-rs
    (``HudiTableBuilder.from_base_uri(p).build().read()``), interleaved, ``--read-repeat``
    times; best and median are printed with the ratio (target: lakeward <= 1.0x hudi-rs).
    Both results are checked against the expected rows (count and column sums).

(b) **Storage list calls per read, with and without the metadata table,** on the real
    Hudi 1.1 tables with a metadata table in ``fixtures/hudi-tables-v8-v9`` (the ``_meta``
    ones). Each is read once as written (listing through the metadata table's ``files``
    partition) and once as a copy without the metadata table (``hoodie.table.metadata.partitions``
    removed and ``.hoodie/metadata`` deleted, as a Hudi writer with ``hoodie.metadata.enable=false``
    leaves it). List calls are counted through lakeward's storage layer (``Storage.list_dir``);
    "folders" counts the folders those calls cover (a recursive call covers every folder it
    returns, plus its own), which is what a hierarchical store (HDFS, a local disk, a
    per-prefix listing of an object store) lists one by one. Both reads must give the same
    rows.

(c) **The same 2M-row tables with a metadata table.** After (a) and (b), each table gets its
    metadata table (``Table.initialize_metadata_table()``: the ``files`` partition from a
    listing, as Hudi 1.x bootstraps it; its time is printed), then the reads of (a) are
    repeated (lakeward's view confirms that the read lists through the metadata table; both
    results are checked) and the list calls per read are counted again: with the metadata
    table here, without it in (a), on the same table.

Run ``--help`` for the flags; see benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parent))

from upsert_and_read import SEED, engine_version, make_dataset, timed, verify  # noqa: E402

#: The shared folder next to the repository, or $LAKEWARD_SHARED_DIR (as in the tests).
SHARED = Path(os.environ.get("LAKEWARD_SHARED_DIR") or Path(__file__).resolve().parents[2] / "shared")
FIXTURES = SHARED / "fixtures" / "hudi-tables-v8-v9"
#: The Hudi 1.1 tables with a metadata table (files, column_stats, partition_stats, record_index, ...).
META_FIXTURES = (
    ("cow", "v9_txns_simple_meta"),
    ("cow", "v9_txns_complex_meta"),
    ("cow", "v9_txns_nonpart_meta"),
    ("mor/avro", "v9_txns_simple_meta"),
    ("mor/avro", "v9_txns_complex_meta"),
)
METADATA_PARTITIONS_KEY = "hoodie.table.metadata.partitions"


# --------------------------------------------------------------------------- (a) read time


def hudi_read(path: str) -> pa.Table:
    import hudi

    table = hudi.HudiTableBuilder.from_base_uri(path).build()
    return pa.Table.from_batches(table.read(), schema=table.get_schema_with_meta_fields())


def lakeward_read(path: str) -> pa.Table:
    from lakeward import Table

    return Table.open(path).read()


def write_tables(root: Path, rows: int, upsert_rows: int, log_rounds: int) -> dict[str, tuple[str, dict[str, Any]]]:
    """The v9 COW and MOR tables of the standard data: table type -> (path, expected aggregates)."""
    from lakeward import Table

    data = make_dataset(rows, upsert_rows, SEED)
    tables = {}
    for kind, table_type in (("COW", "COPY_ON_WRITE"), ("MOR", "MERGE_ON_READ")):
        path = str(root / kind.lower())
        # A write option (not stored in the table): given to every Table.open that writes.
        options = {"hoodie.parquet.small.file.limit": 0} if kind == "MOR" else {}
        table = Table.create(
            path,
            record_key="id",
            partition_by="part",
            ordering_field="ts",
            table_type=table_type,
            table_version=9,
            options=options,
        )
        t, _ = timed(lambda table=table: table.bulk_insert(data.initial))
        print(f"  {kind}: bulk_insert of {rows:,} rows {t:.2f}s", flush=True)
        t, _ = timed(lambda path=path, options=options: Table.open(path, options=options).upsert(data.upsert))
        print(f"  {kind}: upsert of {upsert_rows:,} rows {t:.2f}s", flush=True)
        expected = dict(data.expected)
        for k in range(1, log_rounds if kind == "MOR" else 1):
            batch = data.upsert
            again = batch.set_column(batch.schema.get_field_index("ts"), "ts", pc.add(batch["ts"], k))
            t, _ = timed(
                lambda path=path, again=again, options=options: Table.open(path, options=options).upsert(again)
            )
            print(f"  {kind}: upsert round {k + 1} (the same keys, newer ts) {t:.2f}s", flush=True)
            expected["sum_ts"] = data.expected["sum_ts"] + k * batch.num_rows  # the newest round wins
        tables[kind] = (path, expected)
    return tables


def initialize_metadata_table(path: str) -> Any:
    from lakeward import Table

    return Table.open(path).initialize_metadata_table()


def describe(path: str) -> str:
    from lakeward import Table

    table = Table.open(path)
    slices = table.file_slices()
    logs = sum(len(s.log_files) for s in slices)
    return f"table version {table.version.number}, {len(slices)} file slices, {logs} log files"


def read_times(path: str, expected: dict[str, Any], repeat: int) -> dict[str, list[float]]:
    """Interleaved reads (lakeward, hudi-rs) x repeat; every result checked."""
    times: dict[str, list[float]] = {"lakeward": [], "hudi-rs": []}
    readers: dict[str, Callable[[str], pa.Table]] = {"lakeward": lakeward_read, "hudi-rs": hudi_read}
    for _ in range(repeat):
        for name, reader in readers.items():
            t, result = timed(lambda reader=reader: reader(path))
            verify(f"{name} on {path}", result, expected)
            times[name].append(t)
            del result
    return times


def report_times(times: dict[str, list[float]]) -> None:
    """Best and median of each reader, and their ratios."""
    ours, theirs = min(times["lakeward"]), min(times["hudi-rs"])
    med_ours, med_theirs = statistics.median(times["lakeward"]), statistics.median(times["hudi-rs"])
    print(f"    lakeward  best {ours:.3f}s  median {med_ours:.3f}s")
    print(f"    hudi-rs   best {theirs:.3f}s  median {med_theirs:.3f}s")
    ratio, med_ratio = ours / theirs, med_ours / med_theirs
    print(f"    lakeward / hudi-rs: {ratio:.2f}x best, {med_ratio:.2f}x median (target <= 1.0x)", flush=True)


# --------------------------------------------------------------------------- (b) list calls


def counting_storage(path: str) -> Any:
    """A real local Storage of `path` that records each list call and the folders it covers."""
    from lakeward.core.storage import FileEntry, Storage

    class CountingStorage(Storage):
        calls: list[tuple[str, bool, int]] = []

        def list_dir(self, rel: str = "", recursive: bool = False) -> list[FileEntry]:
            entries = super().list_dir(rel, recursive)
            folders = 1 + (sum(1 for e in entries if e.is_dir) if recursive else 0)
            type(self).calls.append((rel, recursive, folders))
            return entries

    plain = Storage.for_uri(path)
    return CountingStorage(plain.fs, plain.root, plain.uri, {})


def counted_read(path: str) -> tuple[pa.Table, list[tuple[str, bool, int]], bool]:
    """(rows, list calls as (folder, recursive, folders covered), listed through the metadata table?)."""
    from lakeward import Table
    from lakeward.core.file_group.view import FileSystemView
    from lakeward.core.storage import Storage

    table = Table.open(path)
    storage = counting_storage(path)
    table.storage = storage
    type(storage).calls = []
    rows = table.read()
    calls = list(type(storage).calls)
    return rows, calls, FileSystemView.load(Storage.for_uri(path), table.timeline()).from_metadata_table


def unzip_fixture(kind: str, name: str, dest: Path) -> Path:
    """Unzip a fixture table under `dest`; its base path (the folder holding .hoodie)."""
    with zipfile.ZipFile(FIXTURES / kind / f"{name}.zip") as zf:
        members = [m for m in zf.namelist() if not m.startswith("__MACOSX") and not m.endswith(".DS_Store")]
        zf.extractall(dest, members)
    return next(p.parent for p in dest.rglob(".hoodie") if p.parent.parent == dest)


def without_metadata_table(src: Path, dest: Path) -> Path:
    """A copy of the table as a Hudi writer with hoodie.metadata.enable=false leaves it."""
    shutil.copytree(src, dest)
    shutil.rmtree(dest / ".hoodie" / "metadata")
    props = dest / ".hoodie" / "hoodie.properties"
    kept = [line for line in props.read_text().splitlines() if not line.startswith(METADATA_PARTITIONS_KEY)]
    props.write_text("\n".join(kept) + "\n")
    return dest


def partition_count(rows: pa.Table) -> int:
    column = "_hoodie_partition_path"
    return len(pc.unique(rows[column])) if column in rows.column_names else 0


def fmt_calls(calls: list[tuple[str, bool, int]]) -> str:
    return ", ".join(f"{rel or '<table>'}{' (recursive)' if rec else ''}" for rel, rec, _ in calls)


def measure_list_calls(root: Path) -> list[dict[str, Any]]:
    """For each `_meta` fixture: list calls and folders per read with and without the metadata table."""
    out = []
    for kind, name in META_FIXTURES:
        with_mdt = unzip_fixture(kind, name, root / f"{kind.replace('/', '-')}-{name}")
        without = without_metadata_table(with_mdt, root / f"{kind.replace('/', '-')}-{name}-nomdt")
        rows_a, calls_a, via_a = counted_read(str(with_mdt))
        rows_b, calls_b, via_b = counted_read(str(without))
        if not via_a or via_b:
            raise AssertionError(f"{kind}/{name}: listed through the metadata table: {via_a} / {via_b}")
        if record_keys(rows_a) != record_keys(rows_b):
            raise AssertionError(f"{kind}/{name}: the reads with and without the metadata table differ")
        out.append(
            {
                "table": f"{kind}/{name}",
                "partitions": partition_count(rows_a),
                "rows": rows_a.num_rows,
                "with": calls_a,
                "without": calls_b,
            }
        )
    return out


def record_keys(rows: pa.Table) -> list[tuple[str, str]]:
    """(commit time, record key) of every row, sorted: two reads of the same table give the same."""
    return sorted(zip(rows["_hoodie_commit_time"].to_pylist(), rows["_hoodie_record_key"].to_pylist()))


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=2_000_000, help="rows in the initial load (default 2,000,000)")
    p.add_argument("--upsert-rows", type=int, default=200_000, help="rows per upsert (default 200,000)")
    p.add_argument("--log-rounds", type=int, default=3, help="upserts into the MOR table (log files; default 3)")
    p.add_argument("--read-repeat", type=int, default=5, help="reads per reader and table, interleaved")
    p.add_argument("--workdir", default=None, help="parent folder of the temporary tables")
    args = p.parse_args(argv)
    print(
        f"python {platform.python_version()}, lakeward {engine_version('lakeward')}, "
        f"hudi-rs {engine_version('hudi-rs')}; rows={args.rows:,} upsert={args.upsert_rows:,} "
        f"log rounds={args.log_rounds} read repeat={args.read_repeat}",
        flush=True,
    )
    status = 0
    with tempfile.TemporaryDirectory(prefix="lakeward-v9-bench-", dir=args.workdir) as tmp:
        root = Path(tmp)
        print("(a) snapshot read of lakeward-written table version 9, lakeward vs hudi-rs", flush=True)
        tables = write_tables(root / "bench", args.rows, args.upsert_rows, args.log_rounds)
        for kind, (path, expected) in tables.items():
            times = read_times(path, expected, args.read_repeat)
            print(f"  {kind} ({describe(path)}; {expected['rows']:,} rows):")
            report_times(times)
            _, calls, _ = counted_read(path)
            print(
                f"    list calls per read (no metadata table): {len(calls)} "
                f"covering {sum(c[2] for c in calls)} folders: {fmt_calls(calls)}"
            )

        print("(b) storage list calls per read, with vs without the metadata table (Hudi 1.1 fixtures)", flush=True)
        for r in measure_list_calls(root / "fixtures"):
            a, b = r["with"], r["without"]
            print(f"  {r['table']} ({r['partitions']} partitions, {r['rows']} rows):")
            print(f"    with the metadata table:    {len(a)} calls, {sum(c[2] for c in a)} folders: {fmt_calls(a)}")
            print(f"    without the metadata table: {len(b)} calls, {sum(c[2] for c in b)} folders: {fmt_calls(b)}")
        print(
            "  (without the metadata table lakeward lists the table in one recursive call: it covers every\n"
            "  folder of the table, partitions and .hoodie/ alike, which a hierarchical store lists one by one\n"
            "  and an object store pages through key by key (1,000 keys a request on S3); with the metadata\n"
            "  table a read lists 4 folders whatever the number of partitions and files)"
        )
        print("(c) the same tables with a metadata table (initialised by lakeward)", flush=True)
        for kind, (path, expected) in tables.items():
            t, init = timed(lambda path=path: initialize_metadata_table(path))
            print(f"  {kind}: initialize_metadata_table {t:.2f}s ({init.partitions} partitions, {init.files} files)")
            times = read_times(path, expected, args.read_repeat)
            report_times(times)
            _, calls, via_mdt = counted_read(path)
            if not via_mdt:
                raise AssertionError(f"{kind}: the read did not list through the metadata table")
            print(
                f"    list calls per read (with the metadata table): {len(calls)} "
                f"covering {sum(c[2] for c in calls)} folders: {fmt_calls(calls)}"
            )

    return status


if __name__ == "__main__":
    sys.exit(main())
