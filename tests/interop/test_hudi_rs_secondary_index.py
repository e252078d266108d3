"""Interop: index files, index definitions and `indexing` instants never stop hudi-rs from reading a table.

Copy-on-write and merge-on-read tables with bitmap and text indexes, completed index
builds, index files built by compaction and clustering (`auto_build`) and a pending
(inflight, half-written) index build read the same with lakeward and hudi-rs: snapshot,
time travel to every completed instant, and incremental ranges.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from lakeward.core.index.secondary.storage import list_index_files
from lakeward.core.table import Table
from lakeward.core.timeline import Action
from tests.interop.compare import all_mismatches, fail_on


def _rows(ids: range, tag: str) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(list(ids), pa.int64()),
            "city": ["sf" if i % 3 else "nyc" for i in ids],
            "k": pa.array([i % 9 for i in ids], pa.int64()),
            "note": [f"{tag} Buying item{i % 5}" for i in ids],
            "ts": pa.array([len(tag)] * len(ids), pa.int64()),
        }
    )


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_hudi_rs_reads_tables_with_secondary_indexes(tmp_path: Any, table_type: str) -> None:
    path = str(tmp_path / "t")
    options = {"hoodie.parquet.small.file.limit": "0"}  # updates go to logs (merge-on-read)
    table = Table.create(
        path, record_key="id", partition_by="city", ordering_field="ts", table_type=table_type, options=options
    )
    table.insert(_rows(range(0, 60), "a"))
    table.create_index("by_k", "k", options={"auto_build": True})
    table.create_index("words", "note", "text", options={"auto_build": True})
    assert table.build_indexes() is not None
    table.upsert(_rows(range(30, 90), "bb"))
    if table_type == "MERGE_ON_READ":
        compaction = table.schedule_compaction(force=True)
        assert compaction is not None
        table.run_compaction(compaction)
    clustering = table.schedule_clustering()
    if clustering is not None:
        table.run_clustering(clustering)
    table.upsert(_rows(range(80, 100), "ccc"))
    pending = table.schedule_index_build()
    assert pending is not None
    table.completion_check = lambda _: (_ for _ in ()).throw(RuntimeError("stopped before completion"))
    with pytest.raises(RuntimeError):
        table.run_index_build(pending)  # leaves an inflight indexing instant with its index files
    table.completion_check = None
    instants = {f.instant_time for f in list_index_files(table.storage)}
    assert pending in instants and len(instants) >= 2
    assert any(i.action is Action.INDEXING for i in table.completed_instants())
    fail_on(all_mismatches(path))
    assert (
        table.read(filters=[("k", "=", 4)]).num_rows
        == Table.open(path).read().filter(pa.compute.field("k") == 4).num_rows
    )
