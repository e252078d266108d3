"""The merge of one record-index file slice into its compacted base file, against Hudi's own.

Hudi 1.1 compacted the `_meta` fixtures' metadata tables (files and record_index in one instant):
a slice made of Hudi's compacted base alone merges into exactly its cells, byte for byte, and
a lakeward value (no file name) gets Hudi's layout once stamped. The compacted base's bloom filter
is the replaced base's (read from its meta block) extended with the keys new to the group.
"""

from __future__ import annotations

import io
from contextlib import nullcontext
from typing import Any

import fastavro
import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.core.config.write import WriteConfig
from lakeward.core.file_group.hfile import HFileReader
from lakeward.core.file_group.hfile_writer import BLOOM_FILTER_META_BLOCK
from lakeward.core.file_group.metadata_listing import metadata_storage
from lakeward.core.index.bloom_filter import DYNAMIC_V0, BloomFilter
from lakeward.core.metadata_table.compaction import mdt_timeline
from lakeward.core.metadata_table.record_index import RECORD_INDEX_PARTITION, decode_location, encode_location
from lakeward.core.metadata_table.record_index_compaction import FileNameStamp, merge_record_index_slice
from lakeward.core.metadata_table.schema import METADATA_RECORD_SCHEMA
from lakeward.core.metadata_table.services import run_metadata_table_services
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
        assert merge_record_index_slice(mdt, entry.path, [], completed, entry.name)[0] == expected
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


@pytest.mark.parametrize("name", ["v9_txns_simple_meta"])
def test_the_bloom_filter_meta_block_of_a_hudi_record_index_base_holds_its_keys(fixture_table: Any, name: str):
    mdt = metadata_storage(Storage.for_uri(fixture_table("cow", name)))
    entry = next(e for e in mdt.list_dir(RECORD_INDEX_PARTITION) if e.name.endswith(".hfile"))
    reader = HFileReader(mdt.read_bytes(entry.path), entry.name)
    raw = reader.meta_block(BLOOM_FILTER_META_BLOCK)
    assert raw is not None and reader.meta_block("noSuchBlock") is None
    keys = [k.decode() for k, _ in reader.items()]
    assert BloomFilter.deserialize(raw, DYNAMIC_V0).might_contain(keys).all()


def test_record_index_compaction_extends_the_base_bloom_filter_with_the_new_keys(tmp_path: Any):
    """A full filter (>= 100k keys, every row in use) is kept and extended, not rebuilt: the
    compacted base's filter is the old one plus the keys new to the group, holding every live key."""
    path = str(tmp_path / "t")
    rows = 100_500
    table = Table.create(path, record_key="id", partition_by="part", ordering_field="ts", table_version=9)
    table.bulk_insert(pa.table({"id": [f"k{i:07d}" for i in range(rows)], "part": ["p"] * rows, "ts": [1] * rows}))
    options = {"hoodie.metadata.record.index.enable": "true", "hoodie.metadata.record.index.min.filegroup.count": "1"}
    Table.open(path, options=options).initialize_metadata_table()
    mdt = metadata_storage(table.storage)
    [old] = [e for e in mdt.list_dir(RECORD_INDEX_PARTITION) if e.name.endswith(".hfile")]
    new_keys = [f"n{i:03d}" for i in range(50)]
    Table.open(path, options={"hoodie.index.type": "RECORD_INDEX"}).upsert(
        pa.table({"id": new_keys + ["k0000001"], "part": ["p"] * 51, "ts": [2] * 51})
    )
    run = run_metadata_table_services(table.storage, nullcontext(), WriteConfig.model_validate({}), force=True)
    assert run is not None and run.compactions
    [new] = [e for e in mdt.list_dir(RECORD_INDEX_PARTITION) if e.name.endswith(".hfile") and e.path != old.path]
    old_bloom = BloomFilter.deserialize(
        HFileReader(mdt.read_bytes(old.path), old.name).meta_block(BLOOM_FILTER_META_BLOCK) or b"", DYNAMIC_V0
    )
    reader = HFileReader(mdt.read_bytes(new.path), new.name)
    raw = reader.meta_block(BLOOM_FILTER_META_BLOCK)
    assert raw is not None
    old_bloom.add_keys(sorted(new_keys))
    assert raw.decode() == old_bloom.serialize()
    assert BloomFilter.deserialize(raw, DYNAMIC_V0).might_contain([k.decode() for k, _ in reader.items()]).all()
    assert len(reader) == rows + len(new_keys)
