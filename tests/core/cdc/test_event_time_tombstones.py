"""CDC of a merge-on-read event-time table where a delete with an ordering value (a tombstone) is
followed by a late record of the same key with a smaller ordering value.

The late record loses to the tombstone (the snapshot, incremental reads and compaction keep the key
deleted), so no change may report it: the expected changes are written out here from that rule,
for every logging mode, before and after a compaction, and through a later delete_partition.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from lakeward import Table

SCHEMA = pa.schema(
    [("id", pa.string()), ("p", pa.string()), ("ts", pa.int64()), ("v", pa.int64()), ("_hoodie_is_deleted", pa.bool_())]
)


def row(ts: int, v: int, deleted: bool = False) -> pa.Table:
    return pa.Table.from_pylist([{"id": "k", "p": "a", "ts": ts, "v": v, "_hoodie_is_deleted": deleted}], schema=SCHEMA)


def ops(table: Table) -> list[tuple[str, int | None]]:
    """(op, the after image's v) of every change of key k, oldest first."""
    out = []
    for change in table.read_changes("earliest").to_pylist():
        after = change.get("after")
        out.append((change["op"], json.loads(after)["v"] if after else None))
    return out


@pytest.mark.parametrize("mode", ["OP_KEY_ONLY", "DATA_BEFORE", "DATA_BEFORE_AFTER"])
@pytest.mark.parametrize("version", [6, 9])
def test_a_late_record_under_a_tombstone_reports_no_change(tmp_path: Path, version: int, mode: str) -> None:
    options = {"hoodie.table.cdc.enabled": "true", "hoodie.table.cdc.supplemental.logging.mode": mode}
    options["hoodie.record.merge.mode"] = "EVENT_TIME_ORDERING"
    table = Table.create(
        str(tmp_path / "t"),
        record_key="id",
        partition_by="p",
        ordering_field="ts",
        table_type="MERGE_ON_READ",
        schema=SCHEMA,
        options=options,
        table_version=version,
    )
    table.upsert(row(5, 1))
    table.upsert(row(10, 2, deleted=True))  # the tombstone: ordering value 10
    table.upsert(row(7, 3))  # late: loses to the tombstone
    assert table.read().num_rows == 0
    expected_ops = ["i", "d"]
    assert [op for op, _ in ops(table)] == expected_ops
    if mode == "DATA_BEFORE_AFTER":
        assert ops(table) == [("i", 1), ("d", None)]
    plan = table.schedule_compaction(force=True)
    assert plan is not None
    table.run_compaction(plan)
    assert table.read().num_rows == 0
    assert [op for op, _ in ops(table)] == expected_ops
    table.delete_partition(["a"])
    assert [op for op, _ in ops(table)] == expected_ops  # nothing was there to delete
