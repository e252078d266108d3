"""CDC benchmark (issue 7): change queries per supplemental logging mode, their write cost, and delta-rs's CDF.

The standard table of ``upsert_and_read.py`` (2,000,000 rows, seeded) is created once with
CDC disabled and once per logging mode (KEY_OP, DATA_BEFORE, DATA_BEFORE_AFTER), as
COPY_ON_WRITE and (``--table-types cow,mor``) MERGE_ON_READ. The same ``--commits`` upserts
are applied to every table: each updates 1% of the rows, inserts 0.25% new keys and deletes
0.25% (``_hoodie_is_deleted`` rows), all of them distinct keys, so every commit's changes are
known exactly. The lakeward tables carry ``_hoodie_is_deleted`` (false) from the load on, so
the schema never changes. MERGE_ON_READ tables are written with
``hoodie.parquet.small.file.limit=0``: inserts go to new file groups and every commit is a
log append (with the default the 2M-row table's base files count as small files, and the
inserts routed to them make every commit rewrite them, as copy-on-write). delta-rs gets the
same data and the same commits as ``merge`` (delete / update / insert clauses), on one table
with ``delta.enableChangeDataFeed`` and one without.

Measured:

* write: each commit's ``Table.open(p).upsert(batch)`` (delta-rs: ``DeltaTable(p).merge(...)``),
  summed over the commits; the overhead of each mode is its sum (and its median commit) over
  the CDC-disabled table's.
  The tables take the commits in turn (the order rotates every commit), so drifts in machine
  load hit them all alike.
* CDC query: ``Table.open(p).read_changes(begin, end, images="struct")`` over the commits
  (``begin`` = the load's instant, ``end`` = the last commit), median of ``--query-repeat``,
  and once with the default ``images="json"``; delta-rs: ``DeltaTable(p).load_cdf(
  starting_version=1, ending_version=commits)`` read fully to Arrow. Bytes read: the
  process's ``rchar`` (``/proc/self/io``: every byte any thread got from a read syscall) over
  the timed call, the same measure for both engines; for lakeward also, in one separate
  untimed query, bytes by file kind (``.cdc``, base file, log file, timeline) through a
  counting filesystem under ``Storage``.
* MERGE_ON_READ: the query first infers changes from the log files (no ``.cdc`` files yet);
  then ``schedule_change_tracking()`` + ``run_change_tracking()`` persist them (timed) and
  the query is timed again.
* snapshot read: ``Table.open(p).read()`` of each table, median (and best) of
  ``--read-repeat`` (interleaved); CDC-enabled / CDC-disabled, target <= 1.05.

Sizes: ``--rows`` is a list, each size run in turn (default 53,334 rows -- 10 commits of
about 800 changes, ~8,000 in all, where fixed costs dominate -- and 2,000,000 rows, 300,000
changes). The run ends with one table of every (size, table type, mode, and for
MERGE_ON_READ inferred / after change tracking) CDC query against delta-rs ``load_cdf`` on
the same changes: best of ``--query-repeat`` each, and the ratio (issue 19: <= 2x).

Checked: every write's own counts (``WriteResult``; delta-rs's merge metrics); every query's
per-commit counts of inserts, updates and deletes and the sums of the before- and after-image
``ts`` and ``id`` against the workload, all modes' images equal to each other, the JSON
result's row count, delta-rs's per-version counts and sums; and that every table's snapshot
has the expected rows and sums. A mismatch is printed and the exit
status is 1 (the figures are still printed).

Run ``--help`` for the flags; see benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

sys.path.insert(0, str(Path(__file__).resolve().parent))

from upsert_and_read import (  # noqa: E402 -- the sibling benchmark's standard table and helpers
    DATA_COLUMNS,
    N_PARTITIONS,
    PARTITIONS,
    SEED,
    _rows,
    aggregates,
    disk_usage,
    engine_version,
    make_dataset,
    parquet_codec,
    timed,
)

MODES = ("KEY_OP", "DATA_BEFORE", "DATA_BEFORE_AFTER")
OFF = "disabled"
IS_DELETED = "_hoodie_is_deleted"
TABLE_TYPES = {"cow": "COPY_ON_WRITE", "mor": "MERGE_ON_READ"}
#: The small table of issue 19: 10 commits of 1.5% of the rows -> about 8,000 changes.
SMALL_ROWS = 53_334
DELTA_CDF, DELTA_PLAIN = "delta-rs (CDF)", "delta-rs (no CDF)"
#: delta-rs CDF change types -> lakeward ops (an update is two delta rows, pre- and post-image).
DELTA_OPS = {"insert": "i", "update_preimage": "u", "update_postimage": "u", "delete": "d"}


class CheckFailed(AssertionError):
    """A query or read returned something other than the workload's changes / rows."""


# --------------------------------------------------------------------------- workload


@dataclass
class Workload:
    initial: pa.Table  # the standard table (7 data columns)
    commits: list[pa.Table]  # each: the 7 columns + _hoodie_is_deleted, shuffled
    #: per commit: {"i"|"u"|"d": {"n", "sum_id", "sum_before_ts", "sum_after_ts"}}
    expected: list[dict[str, dict[str, int]]]
    final: dict[str, Any]  # aggregates of the table after every commit
    n_upd: int
    n_ins: int
    n_del: int


def make_workload(
    rows: int, commits: int, update_frac: float, insert_frac: float, delete_frac: float, seed: int = SEED
) -> Workload:
    """The standard table and ``commits`` upsert batches with updates, inserts and deletes.

    Updates and deletes hit keys of the initial load drawn without replacement across all
    commits (no key changes twice), with a ``ts`` newer than any before; inserts are new keys
    (``id`` >= rows) spread uniformly over the partitions, like the standard upsert batch.
    """
    initial = make_dataset(rows, 0, seed).initial
    n_upd, n_ins, n_del = (max(1, round(rows * f)) if f > 0 else 0 for f in (update_frac, insert_frac, delete_frac))
    if commits * (n_upd + n_del) > rows:
        raise SystemExit(f"{commits} commits of {n_upd} updates + {n_del} deletes need more than {rows} rows")
    rng = np.random.default_rng(seed + 7)
    ids = initial["id"].to_numpy()
    part_by_id = np.empty(rows, dtype=np.int64)
    part_by_id[ids] = pc.index_in(initial["part"], value_set=pa.array(PARTITIONS)).to_numpy()
    pos = np.empty(rows, dtype=np.int64)
    pos[ids] = np.arange(rows)
    ts0 = initial["ts"].to_numpy()
    pool = rng.permutation(rows).astype(np.int64)
    final_ts = int(ts0.sum())
    final_id = int(ids.sum())
    batches, expected = [], []
    for k in range(commits):
        lo = k * (n_upd + n_del)
        upd_ids, del_ids = pool[lo : lo + n_upd], pool[lo + n_upd : lo + n_upd + n_del]
        ins_ids = np.arange(rows + k * n_ins, rows + (k + 1) * n_ins, dtype=np.int64)
        ts_base = (k + 1) * 10_000_000_000  # newer than the load and every earlier commit
        upd_ts = rng.integers(ts_base, ts_base + 1_000_000_000, n_upd, dtype=np.int64)
        ins_ts = rng.integers(ts_base, ts_base + 1_000_000_000, n_ins, dtype=np.int64)
        del_ts = rng.integers(ts_base, ts_base + 1_000_000_000, n_del, dtype=np.int64)
        upd = _rows(rng, upd_ids, part_by_id[upd_ids], upd_ts)
        ins = _rows(rng, ins_ids, rng.integers(0, N_PARTITIONS, n_ins), ins_ts)
        dele = _rows(rng, del_ids, part_by_id[del_ids], del_ts)
        flags = pa.array(np.r_[np.zeros(n_upd + n_ins, bool), np.ones(n_del, bool)])
        batch = pa.concat_tables([upd, ins, dele]).append_column(IS_DELETED, flags)
        batches.append(batch.take(pa.array(rng.permutation(batch.num_rows))))
        before_upd, before_del = int(ts0[pos[upd_ids]].sum()), int(ts0[pos[del_ids]].sum())
        expected.append(
            {
                "i": {"n": n_ins, "sum_id": int(ins_ids.sum()), "sum_before_ts": 0, "sum_after_ts": int(ins_ts.sum())},
                "u": {
                    "n": n_upd,
                    "sum_id": int(upd_ids.sum()),
                    "sum_before_ts": before_upd,
                    "sum_after_ts": int(upd_ts.sum()),
                },
                "d": {"n": n_del, "sum_id": int(del_ids.sum()), "sum_before_ts": before_del, "sum_after_ts": 0},
            }
        )
        final_ts += int(upd_ts.sum()) - before_upd + int(ins_ts.sum()) - before_del
        final_id += int(ins_ids.sum()) - int(del_ids.sum())
    final = {"rows": rows + commits * (n_ins - n_del), "sum_id": final_id, "sum_ts": final_ts}
    return Workload(initial, batches, expected, final, n_upd, n_ins, n_del)


# --------------------------------------------------------------------------- checks


def _sum(values: pa.Array | pa.ChunkedArray) -> int:
    return int(pc.sum(values).as_py() or 0)


def check_changes(label: str, changes: pa.Table, expected: list[dict[str, dict[str, int]]]) -> None:
    """A lakeward CDC result (struct images) holds exactly the workload's changes, commit by commit."""
    instants = sorted(set(changes["ts_ms"].to_pylist()))
    if len(instants) != len(expected):
        raise CheckFailed(f"{label}: changes of {len(instants)} commits, expected {len(expected)}")
    for k, (instant, want) in enumerate(zip(instants, expected)):
        of_commit = changes.filter(pc.equal(changes["ts_ms"], instant))
        for op, w in want.items():
            rows = of_commit.filter(pc.equal(of_commit["op"], op))
            image = rows["after"] if op != "d" else rows["before"]
            got = {
                "n": rows.num_rows,
                "sum_id": _sum(pc.struct_field(image, "id")) if rows.num_rows else 0,
                "sum_before_ts": _sum(pc.struct_field(rows["before"], "ts")) if rows.num_rows else 0,
                "sum_after_ts": _sum(pc.struct_field(rows["after"], "ts")) if rows.num_rows else 0,
            }
            if got != w:
                diff = {key: (got[key], w[key]) for key in w if got[key] != w[key]}
                raise CheckFailed(f"{label}: commit {k + 1} ({instant}) op {op!r}: (got, expected) {diff}")
    extra = set(changes["op"].to_pylist()) - {"i", "u", "d"}
    if extra:
        raise CheckFailed(f"{label}: unexpected ops {sorted(extra)}")


def check_same_images(label: str, changes: pa.Table, reference: pa.Table) -> None:
    """Two tables' change rows are the same (ops and images; instant times differ per table)."""
    for column in ("op", "before", "after"):
        if not changes[column].equals(reference[column]):
            raise CheckFailed(f"{label}: column {column!r} differs from the DATA_BEFORE_AFTER table's")


def check_delta_changes(changes: pa.Table, expected: list[dict[str, dict[str, int]]], first_version: int) -> None:
    plain = [pa.field(f.name, pa.string()) if f.type == pa.string_view() else f for f in changes.schema]
    changes = changes.cast(pa.schema(plain))  # pyarrow can't filter string_view columns
    for k, want in enumerate(expected):
        version = first_version + k
        of_version = changes.filter(pc.equal(changes["_commit_version"], version))
        types = of_version["_change_type"]
        for op, w in want.items():
            kinds = [t for t, o in DELTA_OPS.items() if o == op]
            got = {"n": 0, "sum_id": 0, "sum_before_ts": 0, "sum_after_ts": 0}
            for kind in kinds:
                rows = of_version.filter(pc.equal(types, kind))
                if kind != "update_postimage":
                    got["n"] += rows.num_rows
                if kind in ("insert", "update_postimage", "delete"):
                    got["sum_id"] += _sum(rows["id"])
                if kind in ("update_preimage", "delete"):
                    got["sum_before_ts"] += _sum(rows["ts"])
                if kind in ("insert", "update_postimage"):
                    got["sum_after_ts"] += _sum(rows["ts"])
            if got != w:
                diff = {key: (got[key], w[key]) for key in w if got[key] != w[key]}
                raise CheckFailed(f"delta-rs load_cdf: version {version} op {op!r}: (got, expected) {diff}")


def check_snapshot(label: str, table: pa.Table, final: dict[str, Any]) -> None:
    got = aggregates(table)
    bad = {k: (got[k], v) for k, v in final.items() if got[k] != v}
    if bad:
        raise CheckFailed(f"{label}: snapshot differs from the workload's final table: (got, expected) {bad}")


# --------------------------------------------------------------------------- bytes read


def rchar() -> int | None:
    """Bytes this process has got from read syscalls so far (all threads), or None off Linux."""
    try:
        with open("/proc/self/io") as f:
            for line in f:
                if line.startswith("rchar:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def measured(fn: Callable[[], Any]) -> tuple[float, int | None, Any]:
    """(seconds, bytes read by the process during the call, result)."""
    before = rchar()
    seconds, out = timed(fn)
    after = rchar()
    return seconds, (after - before if before is not None and after is not None else None), out


def file_kind(path: str) -> str:
    name = path.rsplit("/", 1)[-1]
    if "/.hoodie/" in path or path.endswith("/.hoodie"):
        return "timeline"
    if name.endswith(".cdc"):
        return "cdc"
    if ".log." in name:
        return "log"
    if name.endswith(".parquet"):
        return "base"
    return "other"


class _CountingFile:
    """A file-like object over a pyarrow file that tallies the bytes read from it."""

    def __init__(self, inner: Any, add: Callable[[int], None]):
        self._inner, self._add, self.closed = inner, add, False

    def read(self, nbytes: int | None = None) -> bytes:
        data = self._inner.read() if nbytes is None or nbytes < 0 else self._inner.read(nbytes)
        self._add(len(data))
        return data

    def seek(self, position: int, whence: int = 0) -> int:
        return self._inner.seek(position, whence)

    def tell(self) -> int:
        return self._inner.tell()

    def size(self) -> int:
        return self._inner.size()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return self._inner.seekable()

    def writable(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True
        self._inner.close()


class _CountingHandler(pafs.FileSystemHandler):
    """A pyarrow filesystem that delegates to another and tallies bytes read by file kind."""

    def __init__(self, fs: pafs.FileSystem, tally: dict[str, int], lock: threading.Lock):
        self.fs, self.tally, self.lock = fs, tally, lock

    def _counted(self, path: str, inner: Any) -> pa.PythonFile:
        kind = file_kind(path)

        def add(n: int) -> None:
            with self.lock:
                self.tally[kind] = self.tally.get(kind, 0) + n

        return pa.PythonFile(_CountingFile(inner, add), mode="r")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _CountingHandler) and other.fs.equals(self.fs)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]

    def get_type_name(self) -> str:
        return "counting+" + self.fs.type_name

    def normalize_path(self, path: str) -> str:
        return self.fs.normalize_path(path)

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        return self.fs.get_file_info(paths)

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        return self.fs.get_file_info(selector)

    def create_dir(self, path: str, recursive: bool) -> None:
        self.fs.create_dir(path, recursive=recursive)

    def delete_dir(self, path: str) -> None:
        self.fs.delete_dir(path)

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        self.fs.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self) -> None:
        raise OSError("not supported by the counting filesystem")

    def delete_file(self, path: str) -> None:
        self.fs.delete_file(path)

    def move(self, src: str, dest: str) -> None:
        self.fs.move(src, dest)

    def copy_file(self, src: str, dest: str) -> None:
        self.fs.copy_file(src, dest)

    def open_input_stream(self, path: str) -> pa.NativeFile:
        return self._counted(path, self.fs.open_input_stream(path))

    def open_input_file(self, path: str) -> pa.NativeFile:
        return self._counted(path, self.fs.open_input_file(path))

    def open_output_stream(self, path: str, metadata: Any = None) -> pa.NativeFile:
        return self.fs.open_output_stream(path, metadata=metadata)

    def open_append_stream(self, path: str, metadata: Any = None) -> pa.NativeFile:
        return self.fs.open_append_stream(path, metadata=metadata)


@contextlib.contextmanager
def counting_storage() -> Iterator[dict[str, int]]:
    """While active, every lakeward ``Storage`` opened (also by the engine's tasks) counts the
    bytes read through it, by file kind, into the yielded dict. Slower: Python-level reads."""
    from lakeward.core.storage import Storage

    original = Storage.__dict__["for_uri"]
    tally: dict[str, int] = {}
    lock = threading.Lock()

    def for_uri(cls: type[Storage], uri: str, options: Any = None) -> Storage:
        storage = original.__func__(cls, uri, options)
        storage.fs = pafs.PyFileSystem(_CountingHandler(storage.fs, tally, lock))
        return storage

    Storage.for_uri = classmethod(for_uri)  # type: ignore[method-assign,assignment]
    try:
        yield tally
    finally:
        Storage.for_uri = original  # type: ignore[method-assign]


# --------------------------------------------------------------------------- tables


@dataclass
class Variant:
    """One table of the run: a lakeward table (table type x CDC mode) or a delta-rs table."""

    name: str
    path: str
    kind: str  # "lakeward" | "delta"
    table_type: str = ""  # "cow" | "mor" (lakeward)
    mode: str = OFF  # lakeward: a logging mode or OFF; delta: "cdf" or OFF
    write_options: dict[str, Any] = field(default_factory=dict)  # lakeward: given to writes
    begin: str = ""  # lakeward: the load's instant
    instants: list[str] = field(default_factory=list)  # lakeward: the commits' instants
    load_s: float = 0.0
    commit_s: list[float] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def cdc(self) -> bool:
        return self.mode != OFF


def create_lakeward(v: Variant, initial: pa.Table) -> None:
    from lakeward import Table

    options: dict[str, Any] = {}
    if v.cdc:
        options = {"hoodie.table.cdc.enabled": "true", "hoodie.table.cdc.supplemental.logging.mode": v.mode}
    if v.table_type == "mor":
        # Inserts go to new file groups, so every commit is a log append (a delta commit whose
        # changes are inferred from the log, or persisted by change tracking). With the default
        # (100 MB) the 2M-row table's base files are small files: the inserts routed to them
        # make every commit rewrite them, as copy-on-write would (Hudi does the same).
        # A write option: not stored in the table, given to every Table.open that writes.
        v.write_options["hoodie.parquet.small.file.limit"] = 0
    table = Table.create(
        v.path,
        table_name="bench",
        record_key="id",
        partition_by="part",
        ordering_field="ts",
        table_type=TABLE_TYPES[v.table_type],
        options={**options, **v.write_options},
    )
    # The flag column from the start, so the schema doesn't change at the first delete.
    table.bulk_insert(initial.append_column(IS_DELETED, pa.array(np.zeros(initial.num_rows, bool))))
    v.begin = Table.open(v.path).completed_instants()[-1].time


def commit_lakeward(v: Variant, batch: pa.Table) -> Any:
    from lakeward import Table

    result = Table.open(v.path, options=v.write_options).upsert(batch)
    v.instants.append(result.instant_time)
    return result


def create_delta(v: Variant, initial: pa.Table, codec: str) -> None:
    from deltalake import WriterProperties, write_deltalake

    configuration = {"delta.enableChangeDataFeed": "true"} if v.cdc else None
    write_deltalake(
        v.path,
        initial,
        partition_by=["part"],
        configuration=configuration,
        writer_properties=WriterProperties(compression=codec.upper()),
    )


def commit_delta(v: Variant, batch: pa.Table, codec: str) -> dict[str, Any]:
    from deltalake import DeltaTable, WriterProperties

    columns = {c: f"s.{c}" for c in DATA_COLUMNS}
    return (
        DeltaTable(v.path)
        .merge(
            batch,
            predicate="t.id = s.id AND t.part = s.part",  # as upsert_and_read.py: Hudi's key semantics
            source_alias="s",
            target_alias="t",
            writer_properties=WriterProperties(compression=codec.upper()),
        )
        .when_matched_delete(predicate=f"s.{IS_DELETED}")
        .when_matched_update(updates=columns)
        .when_not_matched_insert(updates=columns, predicate=f"NOT s.{IS_DELETED}")
        .execute()
    )


def lakeward_changes(v: Variant, images: str) -> pa.Table:
    from lakeward import Table

    return Table.open(v.path).read_changes(v.begin, v.instants[-1], images=images)  # type: ignore[arg-type]


def delta_changes(v: Variant, commits: int) -> pa.Table:
    from deltalake import DeltaTable

    reader = DeltaTable(v.path).load_cdf(starting_version=1, ending_version=commits)
    return pa.RecordBatchReader.from_stream(reader).read_all()


def snapshot(v: Variant) -> pa.Table:
    if v.kind == "delta":
        from deltalake import DeltaTable

        return DeltaTable(v.path).to_pyarrow_table()
    from lakeward import Table

    return Table.open(v.path).read()


def cdc_bytes(path: str) -> int:
    """Bytes of the change data files under a table (lakeward ``.cdc``; delta ``_change_data``)."""
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            if f.endswith(".cdc") or "/_change_data" in dirpath:
                total += os.path.getsize(os.path.join(dirpath, f))
    return total


def median_of(repeat: int, variants: list[Variant], fn: Callable[[Variant], Any]) -> dict[str, list[float]]:
    """``repeat`` rounds of ``fn`` over the variants (order rotating per round): times per variant."""
    times: dict[str, list[float]] = {v.name: [] for v in variants}
    for r in range(repeat):
        for v in variants[r % len(variants) :] + variants[: r % len(variants)]:
            t, out = timed(lambda v=v: fn(v))
            del out
            times[v.name].append(t)
    return times


# --------------------------------------------------------------------------- run


def run(args: argparse.Namespace, wl: Workload, root: Path, failures: list[str]) -> dict[str, Any]:
    def fail(msg: str) -> None:
        print(f"  CHECK FAILED: {msg}", flush=True)
        failures.append(msg)

    variants: list[Variant] = []
    for tt in args.table_types:
        for mode in (OFF, *args.modes):
            name = f"{tt.upper()} {mode}"
            variants.append(Variant(name, str(root / f"{tt}-{mode.lower()}"), "lakeward", tt, mode))
    lake = list(variants)
    if not args.no_delta:
        variants.append(Variant(DELTA_CDF, str(root / "delta-cdf"), "delta", mode="cdf"))
        variants.append(Variant(DELTA_PLAIN, str(root / "delta-plain"), "delta"))

    # -- load (one untimed-for-the-report step per table) ---------------------------------------
    print("loading the tables...", flush=True)
    codec = "snappy"
    for v in lake:
        v.load_s, _ = timed(lambda v=v: create_lakeward(v, wl.initial))
        print(f"  {v.name:<24} load {v.load_s:7.2f}s", flush=True)
    found = parquet_codec(Path(lake[0].path))
    codec = (found or "snappy").lower()
    for v in variants:
        if v.kind == "delta":
            v.load_s, _ = timed(lambda v=v: create_delta(v, wl.initial, codec))
            print(f"  {v.name:<24} load {v.load_s:7.2f}s (codec {codec})", flush=True)

    # -- commits: every table takes commit k before any takes k+1; the order rotates ------------
    print(f"applying {len(wl.commits)} commits to {len(variants)} tables...", flush=True)
    miscounted: dict[str, list[str]] = {}  # the write's own counts (WriteResult, merge metrics) that differ
    for k, batch in enumerate(wl.commits):
        turn = variants[k % len(variants) :] + variants[: k % len(variants)]
        line = []
        for v in turn:
            if v.kind == "lakeward":
                t, result = timed(lambda v=v, b=batch: commit_lakeward(v, b))
                got = (result.num_updates, result.num_inserts, result.num_deletes)
                if got != (wl.n_upd, wl.n_ins, wl.n_del):
                    miscounted.setdefault(v.name, []).append(f"commit {k + 1}: {got}")
            else:
                t, metrics = timed(lambda v=v, b=batch: commit_delta(v, b, codec))
                got = (
                    metrics["num_target_rows_updated"],
                    metrics["num_target_rows_inserted"],
                    metrics["num_target_rows_deleted"],
                )
                if got != (wl.n_upd, wl.n_ins, wl.n_del):
                    miscounted.setdefault(v.name, []).append(f"commit {k + 1}: {got}")
            v.commit_s.append(t)
            line.append(f"{v.name} {t:.2f}s")
        print(f"  commit {k + 1}: " + ", ".join(line), flush=True)
    for name, bad in miscounted.items():
        fail(
            f"{name}: the write reported updates/inserts/deletes other than ({wl.n_upd}, {wl.n_ins}, {wl.n_del}) "
            f"in {len(bad)} of {len(wl.commits)} commits: {'; '.join(bad[:3])}{'; ...' if len(bad) > 3 else ''}"
        )

    for v in variants:
        files, size = disk_usage(Path(v.path))
        v.figures.update(
            write_s=sum(v.commit_s),
            commit_median_s=statistics.median(v.commit_s),
            table_bytes=size,
            data_files=files,
            cdc_bytes=cdc_bytes(v.path),
        )

    # -- CDC queries -----------------------------------------------------------------------------
    queried = [v for v in variants if v.cdc]
    reference: dict[str, pa.Table] = {}

    def query_round(label: str, targets: list[Variant]) -> None:
        """Time every target's query (medians of --query-repeat, interleaved), check the results."""
        times: dict[str, list[float]] = {v.name: [] for v in targets}
        json_times: dict[str, list[float]] = {v.name: [] for v in targets}
        for r in range(args.query_repeat):
            order = targets[r % len(targets) :] + targets[: r % len(targets)]
            for v in order:
                if v.kind == "delta":
                    t, nbytes, out = measured(lambda v=v: delta_changes(v, len(wl.commits)))
                    if r == 0:
                        v.figures[f"{label}rows"] = out.num_rows
                        v.figures[f"{label}bytes_read"] = nbytes
                        try:
                            check_delta_changes(out, wl.expected, 1)
                        except CheckFailed as exc:
                            fail(str(exc))
                else:
                    t, nbytes, out = measured(lambda v=v: lakeward_changes(v, "struct"))
                    if r == 0:
                        v.figures[f"{label}rows"] = out.num_rows
                        v.figures[f"{label}bytes_read"] = nbytes
                        try:
                            check_changes(f"{v.name} {label or 'query'}", out, wl.expected)
                            ref = reference.setdefault(v.table_type, out)
                            if ref is not out:
                                check_same_images(f"{v.name} {label or 'query'}", out, ref)
                        except CheckFailed as exc:
                            fail(str(exc))
                    if not args.no_json and r == 0:  # once: the images' JSON encoding on top
                        tj, js = timed(lambda v=v: lakeward_changes(v, "json"))
                        json_times[v.name].append(tj)
                        if js.num_rows != out.num_rows:
                            fail(f"{v.name}: images='json' gave {js.num_rows} rows, 'struct' {out.num_rows}")
                        del js
                del out
                times[v.name].append(t)
        for v in targets:
            v.figures[f"{label}query_s"] = statistics.median(times[v.name])
            v.figures[f"{label}query_best_s"] = min(times[v.name])
            v.figures[f"{label}query_runs"] = times[v.name]
            if json_times[v.name]:
                v.figures[f"{label}query_json_s"] = statistics.median(json_times[v.name])
            f = v.figures
            json_part = f", json {f[label + 'query_json_s']:.2f}s" if label + "query_json_s" in f else ""
            mb = f"{f[label + 'bytes_read'] / 1e6:.1f} MB" if f[label + "bytes_read"] is not None else "? MB"
            what = f"{label}query {f[label + 'query_s']:.2f}s{json_part}, {mb}, {f[label + 'rows']:,} rows"
            print(f"  {v.name:<24} {what}", flush=True)

    # Order the queries by the mode's data: the DATA_BEFORE_AFTER result is the reference.
    queried.sort(key=lambda v: (v.kind, v.table_type, -MODES.index(v.mode) if v.mode in MODES else 0))
    cow_q = [v for v in queried if v.table_type != "mor"]
    mor_q = [v for v in queried if v.table_type == "mor"]
    print("CDC queries...", flush=True)
    if cow_q:
        query_round("", cow_q)
    if mor_q:
        print("  MERGE_ON_READ, changes inferred from the log files:", flush=True)
        query_round("infer_", mor_q)

    def breakdown(label: str, targets: list[Variant]) -> None:
        for v in targets:
            if v.kind != "lakeward":
                continue
            with counting_storage() as tally:
                lakeward_changes(v, "struct")
            v.figures[f"{label}bytes_by_kind"] = dict(tally)
            parts = ", ".join(f"{k} {n / 1e6:.1f}" for k, n in sorted(tally.items()))
            print(f"  {v.name:<24} {label}bytes read by file kind (MB): {parts}", flush=True)

    if not args.no_breakdown:
        breakdown("", cow_q)
        breakdown("infer_", mor_q)

    if mor_q:
        print("  MERGE_ON_READ change tracking (persists the delta commits' changes)...", flush=True)
        from lakeward import Table

        for v in mor_q:

            def track(v: Variant = v) -> str | None:
                table = Table.open(v.path, options=v.write_options)
                instant = table.schedule_change_tracking()
                if instant is not None:
                    table.run_change_tracking(instant)
                return instant

            t, instant = timed(track)
            if instant is None:
                fail(f"{v.name}: schedule_change_tracking() planned nothing")
            v.figures["tracking_s"] = t
            v.figures["cdc_bytes"] = cdc_bytes(v.path)
            print(f"  {v.name:<24} change tracking {t:.2f}s, .cdc {v.figures['cdc_bytes'] / 1e6:.1f} MB", flush=True)
        reference.pop("mor", None)
        query_round("", mor_q)
        if not args.no_breakdown:
            breakdown("", mor_q)

    # -- snapshot reads --------------------------------------------------------------------------
    print(f"snapshot reads (median of {args.read_repeat}, interleaved)...", flush=True)
    for v in variants:  # checked once, untimed (also warms the page cache alike for all)
        try:
            check_snapshot(v.name, snapshot(v), wl.final)
        except CheckFailed as exc:
            fail(str(exc))
    times = median_of(args.read_repeat, variants, snapshot)
    for v in variants:
        v.figures["read_s"] = statistics.median(times[v.name])
        v.figures["read_best_s"] = min(times[v.name])
        v.figures["read_runs"] = times[v.name]
    return {"variants": variants, "codec": codec}


# --------------------------------------------------------------------------- report


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:6.2f}x" if a is not None and b else "     -"


def report(args: argparse.Namespace, wl: Workload, variants: list[Variant]) -> dict[str, Any]:
    by = {v.name: v for v in variants}
    n_changes = len(wl.commits) * (wl.n_upd + wl.n_ins + wl.n_del)
    print()
    print(
        f"rows={args.rows:,} commits={len(wl.commits)} per commit: {wl.n_upd:,} updates + {wl.n_ins:,} inserts + "
        f"{wl.n_del:,} deletes -> {n_changes:,} changes; cpus={os.cpu_count()} load={os.getloadavg()[0]:.1f} "
        f"lakeward {engine_version('lakeward') or '?'} deltalake {engine_version('deltalake') or '-'}"
    )
    summary: dict[str, Any] = {}

    print(
        "\nwrites (sum and median of the commits; overhead = the sum (median) / the CDC-disabled table's; "
        "change MB: .cdc or _change_data files)"
    )
    head = (
        f"{'table':<24} {'load s':>7} {'commits s':>9} {'median s':>8} {'overhead':>8} {'(median)':>8} "
        f"{'change MB':>9} {'table MB':>8}"
    )
    print(head)
    print("-" * len(head))
    for v in variants:
        f = v.figures
        base = by.get(f"{v.table_type.upper()} {OFF}") if v.kind == "lakeward" else by.get(DELTA_PLAIN)
        over = over_m = None
        if base is not None and base is not v:
            over = f["write_s"] / base.figures["write_s"]
            over_m = f["commit_median_s"] / base.figures["commit_median_s"]
            summary[f"write overhead {v.name}"] = over
            summary[f"write overhead (median commit) {v.name}"] = over_m
        print(
            f"{v.name:<24} {v.load_s:7.2f} {f['write_s']:9.2f} {f['commit_median_s']:8.3f} "
            f"{ratio(over, 1.0):>8} {ratio(over_m, 1.0):>8} {f['cdc_bytes'] / 1e6:9.1f} {f['table_bytes'] / 1e6:8.1f}"
        )

    delta = by.get(DELTA_CDF)
    for prefix, title in (("infer_", "MERGE_ON_READ CDC query, inferred from log files"), ("", "CDC query")):
        rows = [v for v in variants if f"{prefix}query_s" in v.figures]
        if not rows:
            continue
        print(
            f"\n{title} over {len(wl.commits)} commits (images='struct': median of {args.query_repeat}; "
            "'json': one run; MB read = process rchar; delta-rs rows: an update is 2)"
        )
        head = (
            f"{'table':<24} {'struct s':>8} {'json s':>7} {'MB read':>8} {'rows':>9}   "
            f"{'time / delta-rs':>15} {'bytes / delta-rs':>16}"
        )
        print(head)
        print("-" * len(head))
        for v in rows:
            f = v.figures
            q, j, b = f[f"{prefix}query_s"], f.get(f"{prefix}query_json_s"), f[f"{prefix}bytes_read"]
            js = f"{j:7.2f}" if j is not None else f"{'-':>7}"
            mb = f"{b / 1e6:8.1f}" if b is not None else f"{'-':>8}"
            dq = delta.figures.get("query_s") if delta and v is not delta else None
            db = delta.figures.get("bytes_read") if delta and v is not delta else None
            print(
                f"{v.name:<24} {q:8.2f} {js} {mb} {f[f'{prefix}rows']:9,}   "
                f"{ratio(q, dq):>15} {ratio(b, db) if b is not None else '-':>16}"
            )
            if dq:
                summary[f"{prefix}query time {v.name} / delta-rs"] = q / dq
            if db and b is not None:
                summary[f"{prefix}query bytes {v.name} / delta-rs"] = b / db
    tracked = [v for v in variants if "tracking_s" in v.figures]
    if tracked:
        print("\nMERGE_ON_READ change tracking (schedule + run over the commits)")
        for v in tracked:
            print(f"{v.name:<24} {v.figures['tracking_s']:7.2f}s")

    print(
        f"\nsnapshot read (median and best of {args.read_repeat}, interleaved); "
        "target CDC-enabled / disabled <= 1.05 (median)"
    )
    for v in variants:
        r, best = v.figures["read_s"], v.figures["read_best_s"]
        base = by.get(f"{v.table_type.upper()} {OFF}") if v.kind == "lakeward" else by.get(DELTA_PLAIN)
        line = f"{v.name:<24} median {r:7.3f}s  best {best:7.3f}s"
        if base is not None and base is not v:
            rr, rb = r / base.figures["read_s"], best / base.figures["read_best_s"]
            verdict = f"  (target <= 1.05: {'OK' if rr <= 1.05 else 'MISSED'})" if v.kind == "lakeward" else ""
            line += f"  / {base.name}: {rr:.3f}x (best {rb:.3f}x){verdict}"
            summary[f"snapshot read {v.name} / {base.name}"] = rr
            summary[f"snapshot read (best) {v.name} / {base.name}"] = rb
        print(line)
    return summary


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--rows",
        default=f"{SMALL_ROWS},2000000",
        help=f"comma list of table sizes, each run in turn (default {SMALL_ROWS:,} -- 10 commits of about 8,000 "
        "changes -- and 2,000,000 -- 300,000 changes); the ratio table at the end covers every size",
    )
    p.add_argument("--commits", type=int, default=10, help="upsert commits the CDC query covers (default 10)")
    p.add_argument("--update-frac", type=float, default=0.01, help="updates per commit, of --rows (default 0.01)")
    p.add_argument("--insert-frac", type=float, default=0.0025, help="new keys per commit, of --rows (0.0025)")
    p.add_argument("--delete-frac", type=float, default=0.0025, help="deletes per commit, of --rows (0.0025)")
    p.add_argument(
        "--table-types", default="cow,mor", help="comma list of cow, mor (default both; mor adds change tracking)"
    )
    p.add_argument("--modes", default=",".join(MODES), help=f"comma list of logging modes (default {','.join(MODES)})")
    p.add_argument("--query-repeat", type=int, default=3, help="CDC queries per table, median kept (default 3)")
    p.add_argument("--read-repeat", type=int, default=5, help="snapshot reads per table, median kept (default 5)")
    p.add_argument("--no-delta", action="store_true", help="skip delta-rs")
    p.add_argument("--no-json", action="store_true", help="don't also time images='json' queries")
    p.add_argument("--no-breakdown", action="store_true", help="skip the untimed bytes-by-file-kind query")
    p.add_argument(
        "--no-warmup", action="store_true", help="skip the untimed run of everything on 2,000 rows and 2 commits"
    )
    p.add_argument("--seed", type=int, default=SEED, help=f"data seed (default {SEED})")
    p.add_argument("--workdir", type=Path, help="parent for the temporary tables (default: system tmp)")
    p.add_argument("--out", type=Path, help="write the figures as JSON to this file")
    args = p.parse_args(argv)
    try:
        args.sizes = [int(r.replace("_", "")) for r in str(args.rows).split(",") if r.strip()]
    except ValueError:
        p.error(f"--rows {args.rows!r}: a comma list of integers")
    args.rows = min(args.sizes, default=0)
    args.table_types = [t.strip().lower() for t in args.table_types.split(",") if t.strip()]
    args.modes = [m.strip().upper() for m in args.modes.split(",") if m.strip()]
    if bad := [t for t in args.table_types if t not in TABLE_TYPES] + [m for m in args.modes if m not in MODES]:
        p.error(f"unknown table type(s) / mode(s) {bad}")
    if not args.table_types or not args.modes or min(args.rows, args.commits, args.query_repeat, args.read_repeat) < 1:
        p.error("need a table type, a mode, and --rows, --commits, --query-repeat, --read-repeat >= 1")
    return args


def ratio_table(runs: list[tuple[argparse.Namespace, Workload, list[Variant]]]) -> dict[str, Any]:
    """The CDC query of every (size, table type, mode) against delta-rs ``load_cdf`` on the same
    changes, best of ``--query-repeat`` each (target: lakeward <= 2x delta-rs)."""
    out: dict[str, Any] = {}
    print(
        "\nCDC query, lakeward read_changes(images='struct') vs delta-rs load_cdf read to Arrow, on the same "
        "changes (best of --query-repeat, interleaved; target ratio <= 2.00)"
    )
    head = f"{'rows':>10} {'changes':>8}  {'table':<44} {'lakeward s':>10} {'delta-rs s':>10} {'ratio':>7}"
    print(head)
    print("-" * len(head))
    for args, wl, variants in runs:
        delta = next((v for v in variants if v.name == DELTA_CDF), None)
        peer = delta.figures.get("query_best_s") if delta else None
        n_changes = len(wl.commits) * (wl.n_upd + wl.n_ins + wl.n_del)
        for v in variants:
            if v.kind != "lakeward" or not v.cdc:
                continue
            cases = [("infer_", " (inferred from logs)"), ("", " (change tracking)")] if v.table_type == "mor" else []
            for prefix, what in cases or [("", "")]:
                t = v.figures.get(f"{prefix}query_best_s")
                if t is None:
                    continue
                r = t / peer if peer else None
                out[f"{args.rows} {v.name}{what}"] = {"lakeward_s": t, "delta_rs_s": peer, "ratio": r}
                peer_s = f"{peer:10.3f}" if peer else f"{'-':>10}"
                ratio_s = f"{r:6.2f}x" if r is not None else f"{'-':>7}"
                print(f"{args.rows:>10,} {n_changes:>8,}  {v.name + what:<44} {t:10.3f} {peer_s} {ratio_s}")
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    runs: list[tuple[argparse.Namespace, Workload, list[Variant]]] = []
    results: dict[str, Any] = {}
    status = 0
    for rows in args.sizes:
        one = argparse.Namespace(**{**vars(args), "rows": rows})
        if len(args.sizes) > 1:
            print(f"\n=== {rows:,} rows ===", flush=True)
        code, wl, variants, result = run_size(one)
        runs.append((one, wl, variants))
        results[str(rows)] = result
        status = status or code
    ratios = ratio_table(runs)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        data = {"sizes": results, "cdc_query_vs_delta_rs": ratios}
        args.out.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
        print(f"\nwrote {args.out}")
    return status


def run_size(args: argparse.Namespace) -> tuple[int, Workload, list[Variant], dict[str, Any]]:
    """One size: the workload, every table, the report; (exit status, workload, tables, JSON figures)."""
    print(f"generating data: rows={args.rows:,} commits={args.commits} seed={args.seed}", flush=True)
    t, wl = timed(
        lambda: make_workload(args.rows, args.commits, args.update_frac, args.insert_frac, args.delete_frac, args.seed)
    )
    print(f"  {t:.2f}s; per commit {wl.n_upd:,} updates + {wl.n_ins:,} inserts + {wl.n_del:,} deletes", flush=True)
    failures: list[str] = []
    root = Path(tempfile.mkdtemp(prefix="lakeward-cdc-bench-", dir=args.workdir))
    try:
        if not args.no_warmup:
            # Lazy imports, thread pools and first-call costs of every path, out of the timings.
            print("warm-up (2,000 rows, 2 commits, untimed)...", flush=True)
            tiny = make_workload(2000, 2, args.update_frac, args.insert_frac, args.delete_frac, args.seed + 1)
            quick = argparse.Namespace(**{**vars(args), "query_repeat": 1, "read_repeat": 1, "no_breakdown": True})
            with contextlib.redirect_stdout(io.StringIO()):
                run(quick, tiny, root / "warm-up", failures)
            shutil.rmtree(root / "warm-up", ignore_errors=True)
        out = run(args, wl, root, failures)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    summary = report(args, wl, out["variants"])
    result: dict[str, Any] = {}
    if args.out:
        result = {
            "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "workload": {"updates": wl.n_upd, "inserts": wl.n_ins, "deletes": wl.n_del, "final": wl.final},
            "environment": {
                "python": sys.version.split()[0],
                "platform": platform.platform(),
                "cpus": os.cpu_count(),
                "codec": out["codec"],
                "versions": {d: engine_version(d) for d in ("lakeward", "pyarrow", "deltalake")},
            },
            "tables": {
                v.name: {"load_s": v.load_s, "commit_s": v.commit_s, **v.figures, "path": None} for v in out["variants"]
            },
            "summary": summary,
            "failures": failures,
        }
    if failures:
        print(f"\nFAILED ({len(failures)} check(s)):", file=sys.stderr)
        for msg in failures:
            print(f"  {msg}", file=sys.stderr)
    return (1 if failures else 0), wl, out["variants"], result


if __name__ == "__main__":
    sys.exit(main())
