"""The merge of one record-index file slice into its compacted base file, against Hudi's own.

Hudi 1.1 compacted the `_meta` fixtures' metadata tables (files and record_index in one instant):
a slice made of Hudi's compacted base alone merges into exactly its cells, byte for byte, and
a lakeward value (no file name) gets Hudi's layout once stamped. The compacted base's bloom filter
is the replaced base's (read from its meta block) extended with the keys new to the group.
"""

from __future__ import annotations

import io
import random
import struct
import uuid
from typing import Any

import fastavro
import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.core.config.write import WriteConfig, parse_write_config
from lakeward.core.exceptions import ConfigError
from lakeward.core.file_group.deflate import gzip_member
from lakeward.core.file_group.hfile import BLOCK_HEADER_SIZE, HFileReader
from lakeward.core.file_group.hfile_writer import BLOOM_FILTER_META_BLOCK, write_base_hfile
from lakeward.core.file_group.log_file.log_block import DeleteBlock
from lakeward.core.file_group.log_file.log_format import encode_block
from lakeward.core.file_group.metadata_listing import metadata_storage
from lakeward.core.index.bloom_filter import DYNAMIC_V0, BloomFilter
from lakeward.core.metadata_table.compaction import mdt_timeline
from lakeward.core.metadata_table.index_partition import hfile_data_block
from lakeward.core.metadata_table.record_index import RECORD_INDEX_PARTITION, decode_location, encode_location
from lakeward.core.metadata_table.record_index_compaction import (
    FileNameStamp,
    merge_record_index_slice,
    merge_slice_cells,
)
from lakeward.core.metadata_table.schema import HFILE_SCHEMA_JSON, METADATA_RECORD_SCHEMA
from lakeward.core.metadata_table.services import run_metadata_table_services
from lakeward.core.storage import Storage
from lakeward.core.timeline import Action
from tests.interop.compare import both_readers


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
        merged = merge_record_index_slice(mdt, entry.path, [], completed, entry.name)[0]
        assert [(k.decode(), v) for k, v in merged.items()] == expected
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
    run = run_metadata_table_services(
        table.storage, table.service_context("metadata_compaction").lock, WriteConfig.model_validate({}), force=True
    )
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


def _odd_value(rng: random.Random, location: bytes) -> bytes:
    """A value the file-name splice cannot take: the `key` field set, or a file name too long for a
    one-byte length (both go through the Avro codec)."""
    record = fastavro.schemaless_reader(io.BytesIO(location), _SCHEMA, None)
    if rng.random() < 0.5:
        record |= {"key": "k"}  # type: ignore[operator]
    else:
        record |= {"_hoodie_file_name": "f" * 70}  # type: ignore[operator]
    out = io.BytesIO()
    fastavro.schemaless_writer(out, _SCHEMA, record)
    return out.getvalue()


_SCHEMA = fastavro.parse_schema(METADATA_RECORD_SCHEMA)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_the_columnar_slice_merge_equals_a_record_by_record_merge(tmp_path: Any, seed: int):
    """Random keys (some of other lengths and non-ASCII), values of every layout, upserts, deletes
    and re-inserts over several log files, blocks of uncommitted instants skipped: the compacted
    cells (and the HFile written from them) are exactly the newest value per live key, stamped."""
    rng = random.Random(seed)
    storage = Storage.for_uri(str(tmp_path))
    universe = [f"key-{i:05d}" for i in range(2500)] + [f"k{i}-é" for i in range(300)] + ["", "a" * 40]
    universe = [k for k in universe if k]

    def value() -> bytes:
        partition = rng.choice(["p1", "year=2024/month=01", ""])
        file_id = rng.choice([f"{uuid.UUID(int=rng.getrandbits(128))}-0", "not-a-uuid-file-7"])
        location = encode_location(partition, file_id, rng.randrange(10**12, 2 * 10**12))
        return _odd_value(rng, location) if rng.random() < 0.05 else location

    base_keys = sorted(rng.sample(universe, rng.choice([0, 1, 1200])), key=str.encode)
    stamp_old = FileNameStamp("record-index-0000-0_0-0-0_20250101000000000.hfile")
    model = {k.encode(): stamp_old(value()) if rng.random() < 0.9 else value() for k in base_keys}
    base_path = None
    if base_keys or rng.random() < 0.5:
        base_path = "record_index/record-index-0000-0_0-0-0_20250101000000000.hfile"
        storage.write_bytes(
            base_path, write_base_hfile(sorted((k.decode(), v) for k, v in model.items()), HFILE_SCHEMA_JSON)
        )
    completed, logs = set(), []
    for n in range(rng.randint(1, 6)):
        instant = f"2025010100000{n:04d}"
        committed = rng.random() < 0.85
        if committed:
            completed.add(instant)
        data = b""
        for _ in range(rng.randint(1, 3)):
            keys = rng.sample(universe, rng.randint(1, 400))
            if rng.random() < 0.6:
                cells = {k: value() for k in keys}
                data += hfile_data_block(instant, sorted(cells.items(), key=lambda kv: kv[0].encode()))
                if committed:
                    model.update({k.encode(): v for k, v in cells.items()})
            else:
                block = DeleteBlock.create(instant, HFILE_SCHEMA_JSON, keys, "", pa.array([0] * len(keys), pa.int64()))
                data += encode_block(block)
                if committed:
                    for k in keys:
                        model.pop(k.encode(), None)
        path = f"record_index/.record-index-0000-0_{instant}.log.1_0-0-0"
        storage.write_bytes(path, data)
        logs.append(path)
    name = "record-index-0000-0_0-0-0_20250102000000000.hfile"
    stamp = FileNameStamp(name)
    expected = [(k, stamp(model[k])) for k in sorted(model)]
    cells, _ = merge_record_index_slice(storage, base_path, logs, completed, name)
    assert cells.items() == expected
    assert merge_slice_cells(storage, base_path, logs, completed) == model
    written = HFileReader(write_base_hfile(cells, HFILE_SCHEMA_JSON, create_time_ms=0))
    assert list(written.items()) == expected
    by_pairs = write_base_hfile([(k.decode(), v) for k, v in expected], HFILE_SCHEMA_JSON, create_time_ms=0)
    assert write_base_hfile(cells, HFILE_SCHEMA_JSON, create_time_ms=0) == by_pairs


def _gz_payloads(data: bytes) -> list[tuple[bytes, bytes]]:
    """(on-disk GZ payload, uncompressed payload) of every data block of an HFile."""
    reader = HFileReader(data)
    out = []
    for entry in reader.index:
        on_disk = struct.unpack_from(">i", data, entry.offset + 29)[0]
        out.append((data[entry.offset + BLOCK_HEADER_SIZE : entry.offset + on_disk], reader.data_block(entry)))
    return out


@pytest.mark.parametrize(("level", "options"), [(1, {}), (6, {"lakeward.metadata.compact.deflate.level": "6"})])
def test_the_metadata_compaction_deflates_its_base_files_at_the_configured_level(
    tmp_path: Any, level: int, options: dict[str, str]
):
    """`lakeward.metadata.compact.deflate.level` (default 1) is the deflate level of every block of the
    base files the metadata compaction writes (`files` and `record_index`); 6 gives Java's bytes. The
    compacted cells are the same at any level, and hudi-rs (listing through `files`) reads the table."""
    path = str(tmp_path / "t")
    keys = [f"k{i:05d}" for i in range(3000)]
    table = Table.create(path, record_key="id", partition_by="part", ordering_field="ts", table_version=9)
    table.bulk_insert(pa.table({"id": keys, "part": ["p"] * len(keys), "ts": [1] * len(keys)}))
    index = {"hoodie.metadata.record.index.enable": "true", "hoodie.metadata.record.index.min.filegroup.count": "2"}
    Table.open(path, options=index).initialize_metadata_table()
    mdt = metadata_storage(table.storage)
    before = {e.path for e in mdt.list_dir(RECORD_INDEX_PARTITION) if e.name.endswith(".hfile")}
    Table.open(path, options={"hoodie.index.type": "RECORD_INDEX"}).upsert(
        pa.table({"id": ["n1", "n2", "k00001"], "part": ["p"] * 3, "ts": [2] * 3})
    )
    config = WriteConfig.model_validate(options)
    assert config.metadata_compact_deflate_level == level
    run = run_metadata_table_services(
        table.storage, table.service_context("metadata_compaction").lock, config, force=True
    )
    assert run is not None and run.compactions
    [compaction] = run.compactions
    assert any(name.startswith("files/") for name in compaction.base_files)
    cells = 0
    for name in compaction.base_files:
        data = mdt.read_bytes(name)
        for payload, raw in _gz_payloads(data):
            assert payload == gzip_member(raw, level), name
        cells += len(HFileReader(data))
    assert cells == len(keys) + 2 + 2  # the record index's keys; `files`: the partition list and partition p
    after = {e.path for e in mdt.list_dir(RECORD_INDEX_PARTITION) if e.name.endswith(".hfile")} - before
    merged = {k for p in after for k, _ in HFileReader(mdt.read_bytes(p)).items()}
    assert merged == {k.encode() for k in [*keys, "n1", "n2"]}
    mine, theirs = both_readers(path)
    assert len(mine) == len(theirs) == len(keys) + 2


@pytest.mark.parametrize("level", ["0", "10", "fast"])
def test_a_deflate_level_outside_1_to_9_is_refused(level: str):
    with pytest.raises(ConfigError, match=r"lakeward\.metadata\.compact\.deflate\.level"):
        parse_write_config({"lakeward.metadata.compact.deflate.level": level})
