"""A BUCKET-index table that keeps a record index (`hoodie.metadata.record.index.enable=true`).

On merge-on-read, BUCKET-index upserts append to the buckets' log files, new keys included (a key's
bucket is fixed by its hash, so an insert into an existing bucket goes to that bucket's log). The
record index must learn those keys from the log blocks, as it learns keys from rewritten base
files, or a later RECORD_INDEX lookup would miss keys that live only in logs.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from lakeward import Table
from tests.core.metadata_table.test_record_index import _check
from tests.support.keyed_rows import Model, part_of
from tests.support.keyed_rows import batch as _batch

BUCKET = {
    "hoodie.index.type": "BUCKET",
    "hoodie.bucket.index.num.buckets": "2",
    "hoodie.metadata.record.index.enable": "true",
}

LAYOUT = {"record_key": "id", "partition_by": "part", "ordering_field": "ts", "table_version": 9}


@pytest.mark.parametrize("table_type", ["MERGE_ON_READ", "COPY_ON_WRITE"])
def test_bucket_upserts_keep_the_record_index(tmp_path: Path, table_type: str):
    rng = random.Random(23)
    path = str(tmp_path / "t")
    Table.create(path, **LAYOUT, table_type=table_type, options=BUCKET)
    table = Table.open(path, options=BUCKET)
    model: Model = {f"k{i}": (part_of(f"k{i}"), 1, i) for i in range(30)}
    table.insert(_batch(model))
    table.initialize_metadata_table()  # with the record index
    gone: set[str] = set()
    _check(path, model, gone)
    for step in range(6):
        # updates, re-inserts of deleted keys, and new keys into existing buckets (logs on merge-on-read)
        keys = [*rng.sample(sorted(model), 4), *rng.sample(sorted(gone), min(2, len(gone)))]
        keys += [f"k{30 + 5 * step + i}" for i in range(5)]
        batch = {k: (part_of(k), step + 2, rng.randrange(1000)) for k in keys}
        table.upsert(_batch(batch))
        model |= batch
        gone -= set(keys)
        deleted = {k: model.pop(k) for k in rng.sample(sorted(model), 2)}
        table.delete(_batch(deleted))
        gone |= set(deleted)
        _check(path, model, gone)
    # a RECORD_INDEX writer tags by the index the BUCKET writer kept: updates stay updates
    indexed = Table.open(path, options={"hoodie.index.type": "RECORD_INDEX"})
    keys = sorted(model)[:6]
    batch = {k: (model[k][0], 50, 1) for k in keys}
    result = indexed.upsert(_batch(batch))
    assert (result.num_updates, result.num_inserts) == (len(keys), 0)
    model |= batch
    _check(path, model, gone)
