"""hudi-rs reads CDC-enabled tables exactly as lakeward does: `.cdc` files and change-tracking
instants are invisible to it (snapshots and latest_state incremental reads agree)."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from lakeward import Table
from tests.interop.compare import all_mismatches, fail_on

SCHEMA = pa.schema([("id", pa.string()), ("part", pa.string()), ("v", pa.int64()), ("ts", pa.int64())])


def batch(*items: tuple[str, str, int, int]) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(SCHEMA.names, i)) for i in items], schema=SCHEMA)


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_hudi_rs_reads_a_cdc_table_with_persisted_changes(tmp_path, table_type):
    path = str(tmp_path / "t")
    t = Table.create(
        path,
        record_key="id",
        partition_by="part",
        ordering_field="ts",
        table_type=table_type,
        options={"hoodie.table.cdc.enabled": "true", "hoodie.table.cdc.supplemental.logging.mode": "DATA_BEFORE"},
    )
    t.insert(batch(("a", "x", 1, 1), ("b", "x", 2, 1), ("c", "y", 3, 1)))
    t.upsert(batch(("a", "x", 10, 2), ("d", "y", 4, 2)))
    t.delete(batch(("b", "x", 0, 3)))
    if table_type == "MERGE_ON_READ":
        t.run_compaction(t.schedule_compaction(force=True))
        t.upsert(batch(("c", "y", 30, 4)))
        t.run_change_tracking(t.schedule_change_tracking())
        t.upsert(batch(("d", "y", 40, 5)))  # a delta commit after the change-tracking instant
    cdc = [f for _, _, fs in os.walk(path) for f in fs if f.endswith(".cdc")]
    assert cdc, "the scenario must leave .cdc files for hudi-rs to skip"
    fail_on(all_mismatches(path))
