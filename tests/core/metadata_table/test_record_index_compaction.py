"""The merge of one record-index file slice into its compacted base file, against Hudi's own.

Hudi 1.1 compacted the `_meta` fixtures' metadata tables (files and record_index in one instant):
a slice made of Hudi's compacted base alone merges into exactly its cells, byte for byte, and
a lakeward value (no file name) gets Hudi's layout once stamped.
"""

from __future__ import annotations

import io
from typing import Any

import fastavro
import pytest

from lakeward.core.file_group.hfile import HFileReader
from lakeward.core.file_group.metadata_listing import metadata_storage
from lakeward.core.metadata_table.compaction import mdt_timeline
from lakeward.core.metadata_table.record_index import RECORD_INDEX_PARTITION, decode_location, encode_location
from lakeward.core.metadata_table.record_index_compaction import FileNameStamp, merge_record_index_slice
from lakeward.core.metadata_table.schema import METADATA_RECORD_SCHEMA
from lakeward.core.storage import Storage
from lakeward.core.timeline import Action


@pytest.mark.parametrize("name", ["v9_txns_simple_meta", "v9_txns_nonpart_meta"])
def test_a_hudi_compacted_record_index_base_merges_into_its_own_cells(fixture_table: Any, name: str):
    path = fixture_table("cow", name)
    storage = Storage.for_uri(path)
    mdt = metadata_storage(storage)
    [compaction] = mdt_timeline(storage).completed(Action.COMMIT)
    completed = set(mdt_timeline(storage).completion_times())
    bases = [e for e in mdt.list_dir(RECORD_INDEX_PARTITION) if e.name.endswith(f"_{compaction.time}.hfile")]
    assert len(bases) == 10
    cells = 0
    for entry in bases:
        expected = [(k.decode(), v) for k, v in HFileReader(mdt.read_bytes(entry.path), entry.name).items()]
        assert merge_record_index_slice(mdt, entry.path, [], completed, entry.name) == expected
        cells += len(expected)
    assert cells > 0


def test_a_lakeward_value_is_stamped_with_the_file_name_as_hudi_writes_it():
    value = encode_location("p1", "8f1e5a2c-0d3b-4a55-9c1e-2f6a7b8c9d0e-0", 1_772_922_274_124)
    stamped = _stamp(value, "record-index-0001-0_0-0-0_20260101000000000.hfile")
    record = fastavro.schemaless_reader(io.BytesIO(stamped), fastavro.parse_schema(METADATA_RECORD_SCHEMA), None)
    assert record["_hoodie_file_name"] == "record-index-0001-0_0-0-0_20260101000000000.hfile"  # type: ignore[index,call-overload]
    assert record["key"] == "" and decode_location(stamped) == decode_location(value)  # type: ignore[index,call-overload]
    # restamping (a base compacted again) and another writer's layout (key set) give the same bytes
    assert _stamp(_stamp(value, "old.hfile"), "record-index-0001-0_0-0-0_20260101000000000.hfile") == stamped
    keyed = io.BytesIO()
    fastavro.schemaless_writer(keyed, fastavro.parse_schema(METADATA_RECORD_SCHEMA), record | {"key": "k1"})  # type: ignore[operator]
    assert _stamp(keyed.getvalue(), "record-index-0001-0_0-0-0_20260101000000000.hfile") == stamped


def _stamp(value: bytes, file_name: str) -> bytes:
    return FileNameStamp(file_name)(value)
