"""A small keyed table for metadata-table index tests: key -> (partition, ordering value, value).

`batch` turns model rows into an Arrow batch of the table's schema (`id`, `part`, `ts`, `val`);
`check_rows` asserts that lakeward and hudi-rs (which lists through the metadata table on
versions 8/9) both read exactly the model's rows.
"""

from __future__ import annotations

import random

import pyarrow as pa

from lakeward import Table
from tests.interop.compare import both_readers

SCHEMA = pa.schema([("id", pa.string()), ("part", pa.string()), ("ts", pa.int64()), ("val", pa.int64())])
PARTS = ["p0", "p1", "p2"]
#: Record key -> (partition, ordering value `ts`, `val`).
Model = dict[str, tuple[str, int, int]]


def batch(rows: Model) -> pa.Table:
    """The rows as a batch, sorted by key."""
    return pa.Table.from_pylist(
        [{"id": k, "part": p, "ts": ts, "val": v} for k, (p, ts, v) in sorted(rows.items())], schema=SCHEMA
    )


def part_of(key: str) -> str:
    """The partition of key `k<n>`: fixed per key (the tests' keys never move partition)."""
    return PARTS[int(key[1:]) % len(PARTS)]


def check_rows(path: str, model: Model) -> None:
    """lakeward and hudi-rs read the table at `path` to exactly the model's rows (meta columns aside)."""
    mine, theirs = both_readers(path)
    expected = sorted(({"id": k, "part": p, "ts": ts, "val": v} for k, (p, ts, v) in model.items()), key=repr)
    strip = [
        sorted(({k: v for k, v in r.items() if not k.startswith("_hoodie")} for r in rows), key=repr)
        for rows in (mine, theirs)
    ]
    assert strip[0] == strip[1] == expected


def upsert_txns_update_and_insert(table: Table) -> tuple[pa.Table, dict[str, object]]:
    """On a `v9_txns_*` fixture: upsert an update of the first row (amount + 1, a later `txn_ts`) and a
    new row `TXN-900` in its partition, assert they count as one update and one insert; the rows
    before (meta columns dropped) and the new row."""
    data = table.read()
    data = data.drop_columns([c for c in data.column_names if c.startswith("_hoodie")])
    first = data.slice(0, 1).to_pylist()[0]
    changed = dict(first, amount=first["amount"] + 1, txn_ts=first["txn_ts"] + 1000)
    new = dict(first, txn_id="TXN-900", txn_ts=first["txn_ts"] + 1000)
    result = table.upsert(pa.Table.from_pylist([changed, new], schema=data.schema))
    assert (result.num_updates, result.num_inserts) == (1, 1)
    return data, new


def bucket_table_with_log_keys(path: str, table_type: str, version: int, inserted: int, appended: int) -> Model:
    """Create a BUCKET-index table (2 buckets) at `path`: keys `k0`… inserted, then `appended` more
    upserted (merge-on-read: into the buckets' logs, so those keys live only in log files, as
    before a record index is built). The model of its rows."""
    table = Table.create(
        path,
        record_key="id",
        partition_by="part",
        ordering_field="ts",
        table_type=table_type,
        table_version=version,
        options={"hoodie.index.type": "BUCKET", "hoodie.bucket.index.num.buckets": "2"},
    )
    model: Model = {f"k{i}": (part_of(f"k{i}"), 1, i) for i in range(inserted)}
    table.insert(batch(model))
    second = {f"k{i}": (part_of(f"k{i}"), 1, i) for i in range(inserted, inserted + appended)}
    table.upsert(batch(second))
    return model | second


def random_upsert(
    rng: random.Random, model: Model, gone: set[str], fresh: list[str], updates: int, ts: int
) -> tuple[Model, list[str], list[str]]:
    """An upsert batch of `updates` random live keys, up to 2 deleted keys (`gone`) inserted again
    and the `fresh` keys, ordering value `ts`: (its rows, the updated keys, the re-inserted keys)."""
    updated = rng.sample(sorted(model), updates)
    reinserts = rng.sample(sorted(gone), min(2, len(gone)))
    rows = {k: (part_of(k), ts, rng.randrange(1000)) for k in [*updated, *reinserts, *fresh]}
    return rows, updated, reinserts
