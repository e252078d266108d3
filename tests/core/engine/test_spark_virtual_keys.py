"""Writes to a virtual-key table (`hoodie.populate.meta.fields=false`) on the Spark engine.

The Spark data plane tags records by joining them with the keys each candidate slice holds.
Without meta fields the stored `_hoodie_record_key` is null, so every slice's keys come from
the per-slice key function over the key fields (as on the local engine): upserts update in
place instead of inserting a second copy, on copy-on-write and merge-on-read, and the files
keep null meta columns. lakeward (local reads) and hudi-rs read the same rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import hudi
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakeward.core.table import Table

pytestmark = pytest.mark.spark
#: New keys go to new file groups: an update the index misses would be a second copy there.
NO_SMALL_FILES = {"hoodie.parquet.small.file.limit": "0"}


def _rows(keys: list[int], ts: int, value: str) -> pa.Table:
    return pa.table(
        {"id": keys, "part": ["a" if k % 2 else "b" for k in keys], "ts": [ts] * len(keys), "v": [value] * len(keys)}
    )


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_spark_upserts_to_a_virtual_key_table_update_in_place(spark: Any, tmp_path: Path, table_type: str) -> None:
    path = str(tmp_path / "t")
    Table.create(
        path,
        record_key="id",
        partition_by="part",
        ordering_field="ts",
        table_type=table_type,
        table_version=8,
        options={"hoodie.populate.meta.fields": "false"},
    )
    Table.open(path, options=NO_SMALL_FILES).insert(
        spark.createDataFrame(_rows(list(range(8)), 1, "old")), engine="spark"
    )
    result = Table.open(path, options=NO_SMALL_FILES).upsert(
        spark.createDataFrame(_rows([1, 2, 3, 20], 2, "new")), engine="spark"
    )
    assert (result.num_inserts, result.num_updates) == (1, 3)
    want = sorted([(k, "new" if k in (1, 2, 3, 20) else "old") for k in [*range(8), 20]])
    mine = Table.open(path).read(columns=["id", "v"]).to_pylist()
    assert sorted((r["id"], r["v"]) for r in mine) == want
    batches = hudi.HudiTableBuilder.from_base_uri(path).build().read(hudi.HudiReadOptions())
    theirs = [(i, v) for b in batches for i, v in zip(b.column("id").to_pylist(), b.column("v").to_pylist())]
    assert sorted(theirs) == want
    for file in Path(path).rglob("*.parquet"):
        assert (
            pq.read_table(file, columns=["_hoodie_record_key"]).column(0).null_count == pq.read_metadata(file).num_rows
        )


def test_spark_upserts_update_every_live_copy_past_a_late_flagged_delete(spark: Any, tmp_path: Path) -> None:
    """Under event-time ordering a `_hoodie_is_deleted` row that lost on ordering value leaves its key
    live; in a table without meta fields the Spark engine's key scan must weigh it too, or an upsert
    updates only the copy `bulk_insert` put in another group."""
    path = str(tmp_path / "t")
    table = Table.create(
        path,
        record_key="id",
        ordering_field="ts",
        table_type="MERGE_ON_READ",
        table_version=8,
        options={"hoodie.populate.meta.fields": "false"},
    )

    def rows(keys: list[int], ts: int, value: str, deleted: bool = False) -> pa.Table:
        n = len(keys)
        return pa.table({"id": keys, "ts": [ts] * n, "v": [value] * n, "_hoodie_is_deleted": [deleted] * n})

    table.upsert(rows([1, 2], 5, "a"))
    table.upsert(rows([1], 2, "late", deleted=True))  # loses to ts 5: key 1 stays live
    table.bulk_insert(rows([1], 6, "b"))  # a second live copy, in a new file group
    result = Table.open(path).upsert(spark.createDataFrame(rows([1], 7, "c")), engine="spark")
    assert result.num_updates == 2
    want = [(1, "c"), (1, "c"), (2, "a")]
    assert sorted((r["id"], r["v"]) for r in Table.open(path).read(columns=["id", "v"]).to_pylist()) == want
    batches = hudi.HudiTableBuilder.from_base_uri(path).build().read(hudi.HudiReadOptions())
    theirs = [(i, v) for b in batches for i, v in zip(b.column("id").to_pylist(), b.column("v").to_pylist())]
    assert sorted(theirs) == want
