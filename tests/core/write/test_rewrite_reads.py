"""A copy-on-write rewrite reads the old base file lean: no `_hoodie_file_name` (replaced), the
few-valued meta columns as dictionaries, and writes them back as plain strings (issue 19 target 4)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from lakeward import Table
from lakeward.core.schema import META_COLUMNS
from lakeward.core.write.handles import WriteContext, read_stored_rows


def _batch(ids: list[int], ts: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "city": pa.array(["sf" if i % 2 else "la" for i in ids]),
            "ts": pa.array([ts] * len(ids), pa.int64()),
        }
    )


def test_a_rewrite_reads_few_valued_meta_columns_as_dictionaries_and_writes_strings(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    table = Table.create(path, table_name="t", record_key="id", partition_by="city", ordering_field="ts")
    first = table.upsert(_batch(list(range(10)), 1))
    (old_file,) = [f for f in first.files_written if "city=sf" in f or f.startswith("sf/")]
    second = table.upsert(_batch([1, 21], 2))  # one update, one insert into the sf group

    ctx = WriteContext.of(table.service_context(), "0", pa.schema([]))
    rows = read_stored_rows(ctx, old_file, for_rewrite=True)
    assert "_hoodie_file_name" not in rows.column_names
    assert pa.types.is_dictionary(rows.schema.field("_hoodie_commit_time").type)
    assert pa.types.is_dictionary(rows.schema.field("_hoodie_partition_path").type)

    (new_file,) = [f for f in second.files_written if "sf" in f]
    stored = pq.read_table(str(tmp_path / "t" / new_file))
    assert all(stored.schema.field(name).type == pa.string() for name in META_COLUMNS)
    by_id = {r["id"]: r for r in stored.to_pylist()}
    assert sorted(by_id) == [1, 3, 5, 7, 9, 21]
    assert {r["_hoodie_file_name"] for r in by_id.values()} == {new_file.rsplit("/", 1)[-1]}
    assert {r["_hoodie_partition_path"] for r in by_id.values()} == {new_file.rsplit("/", 1)[0]}
    assert by_id[3]["_hoodie_commit_time"] == first.instant_time
    assert by_id[1]["_hoodie_commit_time"] == by_id[21]["_hoodie_commit_time"] == second.instant_time
