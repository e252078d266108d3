"""Rows flagged `_hoodie_is_deleted=true` in a batch written by an operation that looks no key up.

Apache Hudi's create handle (`HoodieCreateHandle.doWrite`) and merge handle write no record that is
a delete, so `insert`, `insert_overwrite` and `insert_overwrite_table` leave flagged rows out (and
delete nothing: they look no key up); `bulk_insert`'s row writer writes every row. The expected
rows are written out here from that rule; hudi-rs reads the same table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lakeward.core.table import Table
from tests.interop.compare import hudi_snapshot, hudi_table


def batch(rows: list[tuple[str, str, int, bool]]) -> pa.Table:
    ids, parts, tss, flags = zip(*rows)
    return pa.table(
        {
            "id": list(ids),
            "part": list(parts),
            "ts": pa.array(tss, pa.int64()),
            "_hoodie_is_deleted": pa.array(flags, pa.bool_()),
        }
    )


def live(table: pa.Table) -> list[tuple[str, str, int]]:
    return sorted(zip(*(table.column(c).to_pylist() for c in ("id", "part", "ts"))))


STORED = [("a", "p1", 1, False), ("b", "p2", 1, False)]
INCOMING = [("a", "p1", 2, True), ("c", "p1", 2, True), ("d", "p1", 2, False)]
EXPECTED = {
    # flagged rows are not written; the stored "a" stays (nothing is looked up, nothing deleted)
    "insert": [("a", "p1", 1), ("b", "p2", 1), ("d", "p1", 2)],
    "insert_overwrite": [("b", "p2", 1), ("d", "p1", 2)],
    "insert_overwrite_table": [("d", "p1", 2)],
    # Hudi's bulk_insert row writer writes every row as it comes
    "bulk_insert": [("a", "p1", 1), ("a", "p1", 2), ("b", "p2", 1), ("c", "p1", 2), ("d", "p1", 2)],
}


def write_flagged(path: Path, table_type: str, operation: str, to_frame: Any) -> None:
    table = Table.create(str(path), record_key="id", partition_by="part", ordering_field="ts", table_type=table_type)
    table.upsert(batch(STORED))
    getattr(table, operation)(to_frame(batch(INCOMING)))
    assert live(Table.open(str(path)).read(engine="local")) == EXPECTED[operation]
    assert live(pa.Table.from_batches(hudi_snapshot(hudi_table(str(path))))) == EXPECTED[operation]


@pytest.mark.parametrize("operation", list(EXPECTED))
@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_flagged_rows_of_operations_without_lookup(tmp_path, table_type, operation):
    write_flagged(tmp_path / "t", table_type, operation, lambda data: data)


@pytest.mark.parametrize("operation", ["insert", "insert_overwrite"])
def test_flagged_rows_of_operations_without_lookup_spark(tmp_path, spark, operation):
    write_flagged(tmp_path / "t", "COPY_ON_WRITE", operation, lambda data: spark.createDataFrame(data.to_pandas()))
