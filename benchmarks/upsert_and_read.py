"""Upsert + snapshot-read benchmark: lakeward vs delta-rs, pyiceberg, hudi-rs and raw pyarrow.

Every engine runs in this one process on the same, seeded, in-memory Arrow data:

* ``lakeward``  -- ``Table.create`` + ``bulk_insert``, copy-on-write ``upsert``,
  ``Table.open(path).read()``.
* ``hudi-rs``   -- read-only: snapshot read of the lakeward table with the ``hudi``
  package (hudi-rs), plus raw pyarrow reading the latest base files hudi-rs lists
  (shown as ``pyarrow@lakeward-files``: the cost of the bytes lakeward wrote).
* ``deltalake`` -- ``write_deltalake(partition_by=["part"])``, ``DeltaTable.merge(...)
  .when_matched_update_all().when_not_matched_insert_all().execute()``,
  ``to_pyarrow_table()``.
* ``pyiceberg`` -- SqlCatalog (sqlite) + local warehouse, identity(part) partitioning,
  ``append``, ``upsert(df, join_cols=["id"])``, ``scan().to_arrow()``.
* ``pyarrow``   -- the raw floor: a hive-partitioned parquet dataset with one file per
  partition; the upsert reads each affected file, drops the updated keys
  (``is_in``/``filter``), appends the new rows (``concat_tables``) and rewrites it;
  the read is ``pyarrow.dataset.dataset(...).to_table()``.

Each reader's result is checked (row count, sum of ``id``/``ts``/``qty``, sum of
``amount`` within 1e-9 relative) against the expected post-upsert table; any mismatch
makes the run fail with exit status 1.

Run ``python benchmarks/upsert_and_read.py --help`` for the flags; see benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

SEED = 20240607
N_PARTITIONS = 4
PARTITIONS = [f"p{i}" for i in range(N_PARTITIONS)]
DATA_COLUMNS = ["id", "part", "ts", "name", "amount", "qty", "flag"]

#: canonical engine names, in run order (lakeward first: it provides the table that
#: hudi-rs reads and, with ``--compression auto``, the codec the others use).
ENGINES = ("lakeward", "hudi-rs", "deltalake", "pyiceberg", "pyarrow")
ALIASES = {
    "hudi": "hudi-rs",
    "hudi_rs": "hudi-rs",
    "hudirs": "hudi-rs",
    "delta": "deltalake",
    "delta-rs": "deltalake",
    "iceberg": "pyiceberg",
    "floor": "pyarrow",
    "arrow": "pyarrow",
}

# Extra read-only row shown for context (raw pyarrow on lakeward's own base files).
LW_FILES = "pyarrow@lakeward-files"

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("part", pa.string()),
        ("ts", pa.int64()),
        ("name", pa.string()),
        ("amount", pa.float64()),
        ("qty", pa.int32()),
        ("flag", pa.bool_()),
    ]
)


class EngineUnavailable(Exception):
    """The engine's package is not importable (reported, not a failure)."""


class VerificationError(AssertionError):
    """A reader returned something other than the expected table."""


# --------------------------------------------------------------------------- data


@dataclass
class Dataset:
    initial: pa.Table
    upsert: pa.Table
    expected: dict[str, Any]
    n_updates: int
    n_inserts: int


def _names(rng: np.random.Generator, n: int) -> pa.Array:
    """Variable-length strings such as ``name_483920_k`` (fast, vectorised)."""
    num = pa.array(rng.integers(0, 10_000_000, n, dtype=np.int64)).cast(pa.string())
    suffix = pa.array(np.array(list("abcdefghijklmnopqrstuvwxyz"))[rng.integers(0, 26, n)])
    return pc.binary_join_element_wise("name", num, suffix, "_")


def _rows(rng: np.random.Generator, ids: np.ndarray, parts: np.ndarray, ts: np.ndarray) -> pa.Table:
    n = len(ids)
    return pa.Table.from_arrays(
        [
            pa.array(ids, pa.int64()),
            pc.take(pa.array(PARTITIONS, pa.string()), pa.array(parts, pa.int64())),
            pa.array(ts, pa.int64()),
            _names(rng, n),
            pa.array(np.round(rng.uniform(0.0, 10_000.0, n), 2), pa.float64()),
            pa.array(rng.integers(0, 1000, n, dtype=np.int32), pa.int32()),
            pa.array(rng.random(n) < 0.5, pa.bool_()),
        ],
        schema=SCHEMA,
    )


def make_dataset(rows: int, upsert_rows: int, seed: int = SEED) -> Dataset:
    """Initial table of ``rows`` rows and an upsert batch of ``upsert_rows`` rows.

    ``id`` = 0..rows-1 (shuffled order), ``part`` uniform over p0..p3, ``ts`` < 1e9.
    The upsert is half updates of keys drawn uniformly without replacement from the
    whole table (same ``part``, fresh values, ``ts`` >= 1e10) and half new keys
    (``id`` >= rows, random ``part``); the batch is shuffled.
    """
    rng = np.random.default_rng(seed)
    ids = rng.permutation(rows).astype(np.int64)
    parts_by_id = rng.integers(0, N_PARTITIONS, rows)  # indexed by id
    ts = rng.integers(0, 1_000_000_000, rows, dtype=np.int64)
    initial = _rows(rng, ids, parts_by_id[ids], ts)

    n_upd = min(upsert_rows // 2, rows)
    n_ins = upsert_rows - n_upd
    upd_ids = rng.choice(rows, n_upd, replace=False).astype(np.int64)
    ins_ids = np.arange(rows, rows + n_ins, dtype=np.int64)
    up_ids = np.concatenate([upd_ids, ins_ids])
    up_parts = np.concatenate([parts_by_id[upd_ids], rng.integers(0, N_PARTITIONS, n_ins)])
    up_ts = rng.integers(10_000_000_000, 11_000_000_000, len(up_ids), dtype=np.int64)
    order = rng.permutation(len(up_ids))
    upsert = _rows(rng, up_ids[order], up_parts[order], up_ts[order])

    # Expected aggregates of the table after the upsert (initial rows are id-indexed
    # through ``pos``; updated rows are replaced, new rows added).
    pos = np.empty(rows, dtype=np.int64)
    pos[ids] = np.arange(rows)
    amount0 = initial["amount"].to_numpy()
    ts0 = initial["ts"].to_numpy()
    qty0 = initial["qty"].to_numpy().astype(np.int64)
    replaced = pos[upd_ids]
    expected = {
        "rows": rows + n_ins,
        "sum_id": int(ids.sum()) + int(ins_ids.sum()),
        "sum_ts": int(ts0.sum()) - int(ts0[replaced].sum()) + int(up_ts.sum()),
        "sum_qty": int(qty0.sum()) - int(qty0[replaced].sum()) + int(upsert["qty"].to_numpy().astype(np.int64).sum()),
        "sum_amount": math.fsum(amount0) - math.fsum(amount0[replaced]) + math.fsum(upsert["amount"].to_numpy()),
    }
    return Dataset(initial, upsert, expected, n_upd, n_ins)


def aggregates(table: pa.Table) -> dict[str, Any]:
    """The same aggregates as ``Dataset.expected``, over the data columns only."""
    missing = [c for c in DATA_COLUMNS if c not in table.column_names]
    if missing:
        raise VerificationError(f"columns missing from result: {missing}")
    return {
        "rows": table.num_rows,
        "sum_id": pc.sum(table["id"]).as_py() or 0,
        "sum_ts": pc.sum(table["ts"]).as_py() or 0,
        "sum_qty": pc.sum(pc.cast(table["qty"], pa.int64())).as_py() or 0,
        "sum_amount": pc.sum(table["amount"]).as_py() or 0.0,
    }


def verify(engine: str, table: pa.Table, expected: dict[str, Any]) -> None:
    got = aggregates(table)
    bad = {
        k: (got[k], expected[k])
        for k in expected
        if (not math.isclose(got[k], expected[k], rel_tol=1e-9) if k == "sum_amount" else got[k] != expected[k])
    }
    if bad:
        detail = ", ".join(f"{k}: got {g!r}, expected {e!r}" for k, (g, e) in bad.items())
        raise VerificationError(f"{engine}: read result differs from expected: {detail}")


# ----------------------------------------------------------------------- helpers


#: The clock phases are timed with: wall time, or with ``--cpu`` the process's CPU time (all
#: threads), which a machine shared with other jobs distorts far less.
CLOCK: Callable[[], float] = time.perf_counter


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    gc.collect()
    t0 = CLOCK()
    out = fn()
    return CLOCK() - t0, out


def disk_usage(path: Path) -> tuple[int, int]:
    """(number of data parquet files, total bytes of everything under ``path``)."""
    n_files = total = 0
    for dirpath, _dirnames, filenames in os.walk(path):
        meta = any(p in dirpath for p in ("/.hoodie", "/_delta_log", "/metadata"))
        for f in filenames:
            total += os.path.getsize(os.path.join(dirpath, f))
            if f.endswith(".parquet") and not meta:
                n_files += 1
    return n_files, total


def parquet_codec(path: Path) -> str | None:
    """Compression codec of the first data parquet file found under ``path``."""
    for dirpath, _dirnames, filenames in sorted(os.walk(path)):
        if any(p in dirpath for p in ("/.hoodie", "/_delta_log", "/metadata")):
            continue
        for f in sorted(filenames):
            if f.endswith(".parquet"):
                md = pq.ParquetFile(os.path.join(dirpath, f)).metadata
                if md.num_row_groups:
                    return md.row_group(0).column(0).compression
    return None


def engine_version(engine: str) -> str | None:
    from importlib import metadata

    dist = {"hudi-rs": "hudi", "pyarrow": "pyarrow", LW_FILES: "pyarrow"}.get(engine, engine)
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


# ------------------------------------------------------------------------ engines
#
# Each runner returns {row_name: {"load": s, "upsert": s, "read": s, ...}} for the
# rows it produced; hudi-rs and the lakeward-files read piggy-back on the lakeward
# table, so they are produced by ``run_lakeward``.


@dataclass
class Ctx:
    root: Path
    data: Dataset
    codec: str  # parquet codec (lower case) for the peers
    selected: set[str]
    read_repeat: int = 3
    #: `Table.create` options of the lakeward table (`--virtual-keys`: `hoodie.populate.meta.fields=false`).
    lakeward_options: dict[str, str] | None = None

    def read(self, engine: str, fn: Callable[[], pa.Table]) -> float:
        """Best of ``read_repeat`` timed snapshot reads; the first result is verified.

        Reads do not change the table, so they are repeated within a round: one read
        of a fresh ~100 MB result is noisy (allocator page faults, shared CPUs)."""
        best = math.inf
        for i in range(self.read_repeat):
            t, table = timed(fn)
            if i == 0:
                verify(engine, table, self.data.expected)
            del table
            best = min(best, t)
        return best


def run_lakeward(ctx: Ctx) -> dict[str, dict[str, Any]]:
    try:
        from lakeward import Table
    except ImportError as exc:
        raise EngineUnavailable(f"lakeward.Table not importable: {exc}") from exc

    path = ctx.root / "lakeward"
    uri = str(path)
    out: dict[str, dict[str, Any]] = {}

    def load() -> None:
        t = Table.create(
            uri,
            table_name="bench",
            record_key="id",
            partition_by="part",
            ordering_field="ts",
            options=ctx.lakeward_options,
        )
        t.bulk_insert(ctx.data.initial)

    t_load, _ = timed(load)
    t_up, _ = timed(lambda: Table.open(uri).upsert(ctx.data.upsert))
    if "lakeward" in ctx.selected:
        t_read = ctx.read("lakeward", lambda: Table.open(uri).read())
        files, size = disk_usage(path)
        out["lakeward"] = {
            "load": t_load,
            "upsert": t_up,
            "read": t_read,
            "data_files": files,
            "bytes": size,
            "base_bytes": latest_base_bytes(Table.open(uri)),
            "codec": parquet_codec(path),
        }

    if "hudi-rs" in ctx.selected:
        try:
            import hudi
        except ImportError as exc:
            out["hudi-rs"] = {"status": f"unavailable: {exc}"}
            return out

        def hudi_read() -> pa.Table:
            ht = hudi.HudiTableBuilder.from_base_uri(uri).build()
            batches = ht.read()  # without meta fields: the data columns only
            return pa.Table.from_batches(batches) if batches else ht.get_schema_with_meta_fields().empty_table()

        t_read = ctx.read("hudi-rs", hudi_read)
        out["hudi-rs"] = {"read": t_read}

        # Context: raw pyarrow over exactly the latest base files (COW: no log files).
        slices = hudi.HudiTableBuilder.from_base_uri(uri).build().get_file_slices()
        if slices and not any(s.log_file_names for s in slices):
            paths = [str(path / s.partition_path / s.base_file_name) for s in slices]
            t_read = ctx.read(LW_FILES, lambda: ds.dataset(paths, format="parquet").to_table())
            out[LW_FILES] = {"read": t_read, "data_files": len(paths)}
    return out


def latest_base_bytes(table: Any) -> int:
    """Bytes of the table's latest base files (what a snapshot read scans; no timeline,
    no metadata table, no older file versions kept for time travel)."""
    return sum(s.base_file.size for s in table.file_slices() if s.base_file is not None)


def run_deltalake(ctx: Ctx) -> dict[str, dict[str, Any]]:
    try:
        from deltalake import DeltaTable, WriterProperties, write_deltalake
    except ImportError as exc:
        raise EngineUnavailable(f"deltalake not importable: {exc}") from exc

    path = ctx.root / "delta"
    uri = str(path)
    props = WriterProperties(compression=ctx.codec.upper())
    t_load, _ = timed(lambda: write_deltalake(uri, ctx.data.initial, partition_by=["part"], writer_properties=props))

    def merge() -> dict[str, Any]:
        # ``part`` in the predicate mirrors Hudi's (non-global index) key semantics.
        # (With or without it, and streamed_exec True/False, measured the same here:
        # uniform updates touch every partition, so there is nothing to prune.)
        return (
            DeltaTable(uri)
            .merge(
                ctx.data.upsert,
                predicate="t.id = s.id AND t.part = s.part",
                source_alias="s",
                target_alias="t",
                writer_properties=props,
            )
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )

    t_up, metrics = timed(merge)
    n_upd, n_ins = (
        metrics.get("num_target_rows_updated"),
        metrics.get("num_target_rows_inserted"),
    )
    if (n_upd, n_ins) != (ctx.data.n_updates, ctx.data.n_inserts):
        raise VerificationError(
            f"deltalake merge: updated/inserted {n_upd}/{n_ins}, expected {ctx.data.n_updates}/{ctx.data.n_inserts}"
        )
    t_read = ctx.read("deltalake", lambda: DeltaTable(uri).to_pyarrow_table())
    files, size = disk_usage(path)
    return {
        "deltalake": {
            "load": t_load,
            "upsert": t_up,
            "read": t_read,
            "data_files": files,
            "bytes": size,
            "codec": parquet_codec(path),
        }
    }


def run_pyiceberg(ctx: Ctx) -> dict[str, dict[str, Any]]:
    try:
        from pyiceberg.catalog.sql import SqlCatalog
        from pyiceberg.partitioning import PartitionField, PartitionSpec
        from pyiceberg.schema import Schema
        from pyiceberg.transforms import IdentityTransform
        from pyiceberg.types import (
            BooleanType,
            DoubleType,
            IntegerType,
            LongType,
            NestedField,
            StringType,
        )
    except ImportError as exc:
        raise EngineUnavailable(
            f"pyiceberg SqlCatalog not importable ({exc}); pip install 'pyiceberg[sql-sqlite]'"
        ) from exc

    path = ctx.root / "iceberg"
    path.mkdir()
    catalog = SqlCatalog(
        "bench",
        uri=f"sqlite:///{path}/catalog.db",
        warehouse=(path / "warehouse").as_uri(),
    )
    catalog.create_namespace("bench")
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "part", StringType(), required=False),
        NestedField(3, "ts", LongType(), required=False),
        NestedField(4, "name", StringType(), required=False),
        NestedField(5, "amount", DoubleType(), required=False),
        NestedField(6, "qty", IntegerType(), required=False),
        NestedField(7, "flag", BooleanType(), required=False),
    )
    spec = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="part"))

    def load() -> None:
        table = catalog.create_table(
            "bench.t",
            schema=schema,
            partition_spec=spec,
            properties={"write.parquet.compression-codec": ctx.codec.lower()},
        )
        table.append(ctx.data.initial)

    t_load, _ = timed(load)
    t_up, res = timed(lambda: catalog.load_table("bench.t").upsert(ctx.data.upsert, join_cols=["id"]))
    if (res.rows_updated, res.rows_inserted) != (
        ctx.data.n_updates,
        ctx.data.n_inserts,
    ):
        raise VerificationError(
            f"pyiceberg upsert: updated/inserted {res.rows_updated}/{res.rows_inserted}, "
            f"expected {ctx.data.n_updates}/{ctx.data.n_inserts}"
        )
    t_read = ctx.read("pyiceberg", lambda: catalog.load_table("bench.t").scan().to_arrow())
    files, size = disk_usage(path / "warehouse")
    return {
        "pyiceberg": {
            "load": t_load,
            "upsert": t_up,
            "read": t_read,
            "data_files": files,
            "bytes": size,
            "codec": parquet_codec(path / "warehouse"),
        }
    }


def _floor_file(root: Path, part: str) -> Path:
    return root / f"part={part}" / "data.parquet"


def _floor_write(table: pa.Table, dest: Path, codec: str) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    pq.write_table(table, tmp, compression=codec)
    os.replace(tmp, dest)


def floor_load(root: Path, data: pa.Table, codec: str) -> None:
    for part in pc.unique(data["part"]).to_pylist():
        _floor_write(data.filter(pc.equal(data["part"], part)), _floor_file(root, part), codec)


def floor_upsert(root: Path, batch: pa.Table, codec: str) -> None:
    """Copy-on-write upsert, vectorised: per affected file drop the keys being
    written (``is_in``), append the batch's rows for that partition, rewrite."""
    for part in pc.unique(batch["part"]).to_pylist():
        incoming = batch.filter(pc.equal(batch["part"], part))
        dest = _floor_file(root, part)
        if dest.exists():
            current = pq.ParquetFile(dest).read()
            kept = current.filter(pc.invert(pc.is_in(current["id"], value_set=incoming["id"])))
            incoming = pa.concat_tables([kept, incoming])
        _floor_write(incoming, dest, codec)


def floor_read(root: Path) -> pa.Table:
    return ds.dataset(root, format="parquet", partitioning="hive").to_table()


def run_pyarrow(ctx: Ctx) -> dict[str, dict[str, Any]]:
    path = ctx.root / "pyarrow"
    t_load, _ = timed(lambda: floor_load(path, ctx.data.initial, ctx.codec))
    t_up, _ = timed(lambda: floor_upsert(path, ctx.data.upsert, ctx.codec))
    t_read = ctx.read("pyarrow", lambda: floor_read(path))
    files, size = disk_usage(path)
    return {
        "pyarrow": {
            "load": t_load,
            "upsert": t_up,
            "read": t_read,
            "data_files": files,
            "bytes": size,
            "codec": parquet_codec(path),
        }
    }


RUNNERS: dict[str, Callable[[Ctx], dict[str, dict[str, Any]]]] = {
    "lakeward": run_lakeward,  # also produces hudi-rs and pyarrow@lakeward-files
    "deltalake": run_deltalake,
    "pyiceberg": run_pyiceberg,
    "pyarrow": run_pyarrow,
}


# --------------------------------------------------------------------------- main


RATIOS: list[tuple[str, tuple[str, str], tuple[str, str], float | None]] = [
    # label, numerator (row, phase), denominator (row, phase), target (<=)
    (
        "lakeward upsert / delta-rs merge",
        ("lakeward", "upsert"),
        ("deltalake", "upsert"),
        1.0,
    ),
    (
        "lakeward read / raw pyarrow read",
        ("lakeward", "read"),
        ("pyarrow", "read"),
        1.2,
    ),
    (
        "lakeward upsert / raw pyarrow upsert",
        ("lakeward", "upsert"),
        ("pyarrow", "upsert"),
        None,
    ),
    (
        "lakeward upsert / pyiceberg upsert",
        ("lakeward", "upsert"),
        ("pyiceberg", "upsert"),
        None,
    ),
    ("lakeward read / hudi-rs read", ("lakeward", "read"), ("hudi-rs", "read"), None),
    (
        "lakeward read / pyarrow@lakeward-files",
        ("lakeward", "read"),
        (LW_FILES, "read"),
        None,
    ),
    (
        "lakeward read / delta-rs read",
        ("lakeward", "read"),
        ("deltalake", "read"),
        None,
    ),
    (
        "lakeward bulk_insert / delta-rs write",
        ("lakeward", "load"),
        ("deltalake", "load"),
        1.2,
    ),
    ("hudi-rs read / raw pyarrow read", ("hudi-rs", "read"), ("pyarrow", "read"), None),
    (
        "pyarrow@lakeward-files / raw pyarrow read",
        (LW_FILES, "read"),
        ("pyarrow", "read"),
        None,
    ),
    (
        "delta-rs merge / raw pyarrow upsert",
        ("deltalake", "upsert"),
        ("pyarrow", "upsert"),
        None,
    ),
    (
        "pyiceberg upsert / raw pyarrow upsert",
        ("pyiceberg", "upsert"),
        ("pyarrow", "upsert"),
        None,
    ),
    (
        "delta-rs read / raw pyarrow read",
        ("deltalake", "read"),
        ("pyarrow", "read"),
        None,
    ),
    (
        "pyiceberg read / raw pyarrow read",
        ("pyiceberg", "read"),
        ("pyarrow", "read"),
        None,
    ),
]


#: Issue 19 target 6: lakeward's latest base files <= 1.2x raw pyarrow's bytes for the same rows.
BYTES_TARGET = 1.2


def bytes_on_disk(info: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """Lakeward's latest base files against the raw pyarrow table of the same rows (None
    unless both ran). Both hold the post-upsert rows, one file per partition for pyarrow,
    meta columns and Hudi's footer (bloom filter, key range, Avro schema) for lakeward."""
    lakeward, raw = info.get("lakeward", {}).get("base_bytes"), info.get("pyarrow", {}).get("bytes")
    if not lakeward or not raw:
        return None
    return {"lakeward": lakeward, "pyarrow": raw, "ratio": lakeward / raw, "target": BYTES_TARGET}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--rows", type=int, default=2_000_000, help="rows in the initial load")
    p.add_argument("--upsert-rows", type=int, default=200_000, help="rows in the upsert batch")
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="load+upsert+read rounds per engine, each on a fresh table; best of N reported",
    )
    p.add_argument(
        "--read-repeat",
        type=int,
        default=3,
        help="snapshot reads per round (reads don't modify the table); best kept (default 3)",
    )
    p.add_argument(
        "--only",
        default=",".join(ENGINES),
        help=f"comma list of engines to run (default: all of {','.join(ENGINES)})",
    )
    p.add_argument("--out", type=Path, help="write results as JSON to this file")
    p.add_argument("--seed", type=int, default=SEED, help=f"data seed (default {SEED})")
    p.add_argument(
        "--compression",
        default="auto",
        help="parquet codec for the peers (snappy, zstd, gzip, none...); 'auto' = whatever lakeward wrote, else snappy",
    )
    p.add_argument("--workdir", type=Path, help="parent for the temp dirs (default: system tmp)")
    p.add_argument(
        "--virtual-keys",
        action="store_true",
        help="create the lakeward table with hoodie.populate.meta.fields=false (no meta values, keys from `id`)",
    )
    p.add_argument(
        "--cpu",
        action="store_true",
        help="time every phase in process CPU time (all threads) instead of wall time",
    )
    p.add_argument(
        "--no-warmup",
        action="store_true",
        help="skip the tiny untimed warm-up of every engine",
    )
    args = p.parse_args(argv)
    names = [ALIASES.get(n.strip().lower(), n.strip().lower()) for n in args.only.split(",")]
    unknown = sorted({n for n in names if n} - set(ENGINES))
    if unknown:
        p.error(f"unknown engine(s) {unknown}; choose from {', '.join(ENGINES)}")
    args.engines = [e for e in ENGINES if e in names]
    if min(args.repeat, args.read_repeat, args.rows) < 1 or args.upsert_rows < 0:
        p.error("--repeat, --read-repeat and --rows must be >= 1, --upsert-rows >= 0")
    return args


def run_round(
    data: Dataset,
    engines: list[str],
    codec: str,
    workdir: Path | None,
    read_repeat: int = 1,
    lakeward_options: dict[str, str] | None = None,
) -> tuple[dict[str, dict[str, Any]], dict[str, str], str]:
    """One load/upsert/read round of every selected engine in a fresh temp dir.

    Returns (rows, statuses, codec used by the peers)."""
    rows: dict[str, dict[str, Any]] = {}
    status: dict[str, str] = {}
    selected = set(engines)
    runners = [r for r in RUNNERS if r in selected or (r == "lakeward" and "hudi-rs" in selected)]
    with tempfile.TemporaryDirectory(prefix="lakeward-bench-", dir=workdir) as tmp:
        root = Path(tmp)
        for name in runners:
            ctx = Ctx(
                root,
                data,
                codec if codec != "auto" else "snappy",
                selected,
                read_repeat,
                lakeward_options,
            )
            produced = {"lakeward": [e for e in ("lakeward", "hudi-rs") if e in selected]}.get(name, [name])
            try:
                out = RUNNERS[name](ctx)
                rows.update(out)
                for e in produced:
                    status[e] = out.get(e, {}).pop("status", "ok")
                if name == "lakeward" and codec == "auto":
                    found = parquet_codec(root / "lakeward")
                    codec = found.lower() if found else "auto"
            except EngineUnavailable as exc:
                for e in produced:
                    status[e] = f"unavailable: {exc}"
            except Exception as exc:  # noqa: BLE001 -- report, keep benchmarking others
                traceback.print_exc()
                for e in produced:
                    status[e] = f"error: {type(exc).__name__}: {exc}"
            finally:
                shutil.rmtree(root / name, ignore_errors=True)
                gc.collect()
    return rows, status, codec if codec != "auto" else "snappy"


def fmt_s(v: float | None) -> str:
    return "-" if v is None else f"{v:8.3f}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    global CLOCK
    CLOCK = time.process_time if args.cpu else time.perf_counter
    codec = args.compression.lower()
    if codec == "none":
        codec = "uncompressed"
    lakeward_options = {"hoodie.populate.meta.fields": "false"} if args.virtual_keys else None

    print(
        f"generating data: rows={args.rows:,} upsert_rows={args.upsert_rows:,} seed={args.seed}",
        flush=True,
    )
    t_gen, data = timed(lambda: make_dataset(args.rows, args.upsert_rows, args.seed))
    print(
        f"  {t_gen:.2f}s; upsert = {data.n_updates:,} updates + {data.n_inserts:,} inserts; "
        f"expect {data.expected['rows']:,} rows after upsert",
        flush=True,
    )

    if not args.no_warmup:
        print("warm-up (tiny, untimed)...", flush=True)
        _rows_w, st, _ = run_round(
            make_dataset(2000, 200, args.seed + 1), args.engines, codec, args.workdir, 1, lakeward_options
        )
        for e, s in st.items():
            if s != "ok":
                print(f"  warm-up {e}: {s}", flush=True)

    runs: dict[str, dict[str, list[float]]] = {}
    info: dict[str, dict[str, Any]] = {}
    status: dict[str, str] = {}
    for i in range(args.repeat):
        print(f"round {i + 1}/{args.repeat}...", flush=True)
        rows, st, codec = run_round(data, args.engines, codec, args.workdir, args.read_repeat, lakeward_options)
        for e, s in st.items():
            if s != "ok" or e not in status:
                status[e] = s
        for row, vals in rows.items():
            for phase in ("load", "upsert", "read"):
                if phase in vals:
                    runs.setdefault(row, {}).setdefault(phase, []).append(vals[phase])
            info[row] = {k: v for k, v in vals.items() if k not in ("load", "upsert", "read")}
            line = "  ".join(f"{ph} {vals[ph]:.3f}s" for ph in ("load", "upsert", "read") if ph in vals)
            print(f"  {row:<24} {line}", flush=True)

    best = {row: {ph: min(v) for ph, v in phases.items()} for row, phases in runs.items()}

    # ---- report
    print()
    print(
        f"rows={args.rows:,} upsert={args.upsert_rows:,} ({data.n_updates:,} upd + "
        f"{data.n_inserts:,} new) repeat={args.repeat} read_repeat={args.read_repeat} (best of) peers' codec={codec} "
        f"cpus={os.cpu_count()} virtual_keys={args.virtual_keys} clock={'cpu' if args.cpu else 'wall'} "
        f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    header = f"{'engine':<24} {'load s':>8} {'upsert s':>8} {'read s':>8} {'files':>6} {'MB':>8}  codec  version"
    print(header)
    print("-" * len(header))
    order = ["lakeward", "hudi-rs", LW_FILES, "deltalake", "pyiceberg", "pyarrow"]
    for row in order:
        if row in best:
            b, inf = best[row], info.get(row, {})
            mb = f"{inf['bytes'] / 1e6:8.1f}" if "bytes" in inf else f"{'-':>8}"
            print(
                f"{row:<24} {fmt_s(b.get('load')):>8} {fmt_s(b.get('upsert')):>8} "
                f"{fmt_s(b.get('read')):>8} {inf.get('data_files', '-'):>6} {mb}  "
                f"{(inf.get('codec') or '-').lower():<6} {engine_version(row) or '-'}"
            )
        elif row in status and status[row] != "ok":
            print(f"{row:<24} {status[row]}")

    print()
    on_disk = bytes_on_disk(info)
    if on_disk is not None:
        print(
            f"bytes on disk: lakeward latest base files {on_disk['lakeward'] / 1e6:.1f} MB, raw pyarrow "
            f"({codec}) of the same rows {on_disk['pyarrow'] / 1e6:.1f} MB, ratio {on_disk['ratio']:.2f} "
            f"(target <= {BYTES_TARGET}: {'OK' if on_disk['ratio'] <= BYTES_TARGET else 'MISSED'})"
        )
        print()
    ratios: dict[str, dict[str, Any]] = {}
    print(f"ratios of the {'CPU' if args.cpu else 'wall'} times, best / median over the rounds")
    for label, (nr, np_), (dr, dp), target in RATIOS:
        a, b = best.get(nr, {}).get(np_), best.get(dr, {}).get(dp)
        if a is None or b is None or b <= 0:
            continue
        r = a / b
        med = statistics.median(runs[nr][np_]) / statistics.median(runs[dr][dp])
        ratios[label] = {"ratio": r, "median_ratio": med, "target": target}
        verdict = "" if target is None else f"  (target <= {target}: {'OK' if r <= target else 'MISSED'})"
        print(f"{label:<44} {r:6.2f} / {med:6.2f}{verdict}")
    if not ratios:
        print("(no ratios: need at least two engines)")

    failures = {e: s for e, s in status.items() if s.startswith("error")}
    if args.out:
        result = {
            "config": {
                "rows": args.rows,
                "upsert_rows": args.upsert_rows,
                "updates": data.n_updates,
                "inserts": data.n_inserts,
                "repeat": args.repeat,
                "read_repeat": args.read_repeat,
                "seed": args.seed,
                "peer_codec": codec,
                "engines": args.engines,
                "virtual_keys": args.virtual_keys,
                "clock": "cpu" if args.cpu else "wall",
            },
            "environment": {
                "python": sys.version.split()[0],
                "platform": platform.platform(),
                "cpus": os.cpu_count(),
                "versions": {d: engine_version(d) for d in ("lakeward", "pyarrow", "deltalake", "pyiceberg", "hudi")},
            },
            "expected": data.expected,
            "status": status,
            "best": best,
            "runs": runs,
            "info": info,
            "ratios": ratios,
            "bytes_on_disk": on_disk,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
        print(f"\nwrote {args.out}")

    if failures:
        print("\nFAILED:", file=sys.stderr)
        for e, s in failures.items():
            print(f"  {e}: {s}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
