"""The HFile writer: byte-identical rewrites of Hudi's metadata-table HFiles, round trips
through lakeward's reader, and a metadata table with a lakeward-written base file read by
hudi-rs.

What is byte-identical with Hudi 1.1.1's output (every HFile of every `_meta` fixture):
data blocks, the bloom filter meta block, root and meta index blocks, the file info block
and the trailer — the whole file — once `hfile.CREATE_TIME_TS` is given the original's
value. That entry is the writer's wall clock, so a fresh write differs from Hudi's only in
it, and therefore in the (GZ-compressed) file info block that holds it; the trailer stays
identical because the file info block is the last block before it.
"""

from __future__ import annotations

import io
import json
import shutil
import struct
import uuid
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fastavro
import pytest

from lakeward.core.file_group.hfile import (
    BLOCK_HEADER_SIZE,
    CODEC_GZ,
    DATA_MAGIC,
    HFileReader,
    _protobuf_fields,
    _varint,
)
from lakeward.core.file_group.hfile_writer import (
    DEFAULT_BLOCK_SIZE,
    HFileWriter,
    write_base_hfile,
    write_log_block_hfile,
)
from lakeward.core.file_group.log_file.log_block import BlockType
from lakeward.core.file_group.log_file.log_format import RawBlock, scan_blocks
from lakeward.core.index.bloom_filter import BloomFilter
from tests.interop.compare import both_readers
from tests.support.fixture_tables import all_fixtures, unzip_table

META_FIXTURES = [(kind, name) for kind, name in all_fixtures() if name.startswith("v9") and "meta" in name]
CREATE_TIME = b"hfile.CREATE_TIME_TS"


def _cells(reader: HFileReader) -> list[tuple[str, bytes]]:
    return [(key.decode(), value) for key, value in reader.items()]


def _create_time(reader: HFileReader) -> int:
    return int(struct.unpack(">q", reader.file_info[CREATE_TIME])[0])


def _trailer_fields(data: bytes) -> dict[int, list[int | bytes]]:
    length, pos = _varint(data, len(data) - 4096 + 8)
    return _protobuf_fields(data[pos : pos + length])


def _log_block_hfiles(mdt: Path) -> list[tuple[str, bytes]]:
    found = []
    for log_path in sorted(mdt.glob("*/.*.log.*")):
        for block in scan_blocks(log_path.read_bytes()):
            if isinstance(block, RawBlock) and block.block_type is BlockType.HFILE_DATA:
                found.append((log_path.name, block.content))
    return found


def _assert_same_but_create_time(ours: bytes, theirs: bytes) -> None:
    """Identical up to the file info block and in the trailer; file info equal but the clock."""
    ours_reader, theirs_reader = HFileReader(ours), HFileReader(theirs)
    file_info_offset = theirs_reader.trailer.file_info_offset
    assert ours[:file_info_offset] == theirs[:file_info_offset]
    assert ours[-4096:] == theirs[-4096:]
    assert list(ours_reader.file_info) == list(theirs_reader.file_info)  # same keys, same order
    assert {k: v for k, v in ours_reader.file_info.items() if k != CREATE_TIME} == {
        k: v for k, v in theirs_reader.file_info.items() if k != CREATE_TIME
    }


# -- rewriting Hudi's own files ------------------------------------------------------------
@pytest.mark.parametrize(("kind", "name"), META_FIXTURES)
def test_write_base_hfile_fixture_rewrite_byte_identical(
    fixture_table: Callable[[str, str], str], kind: str, name: str
):
    """Every metadata-table base HFile (files, column_stats, partition_stats, record_index
    including empty ones, secondary indexes) comes out of the writer as Hudi wrote it."""
    mdt = Path(fixture_table(kind, name)) / ".hoodie" / "metadata"
    base_files = sorted(mdt.glob("*/*.hfile"))
    assert len(base_files) > 10
    for path in base_files:
        original = path.read_bytes()
        reader = HFileReader(original, path.name)
        schema = reader.avro_schema
        assert schema is not None
        pinned = write_base_hfile(_cells(reader), schema, create_time_ms=_create_time(reader))
        assert pinned == original, path.name
        _assert_same_but_create_time(write_base_hfile(_cells(reader), schema), original)


@pytest.mark.parametrize(("kind", "name"), META_FIXTURES)
def test_write_log_block_hfile_fixture_rewrite_byte_identical(
    fixture_table: Callable[[str, str], str], kind: str, name: str
):
    """The HFile inside every `HFILE_DATA` block of the metadata table's log files too."""
    mdt = Path(fixture_table(kind, name)) / ".hoodie" / "metadata"
    blocks = _log_block_hfiles(mdt)
    assert blocks
    for log_name, content in blocks:
        reader = HFileReader(content, log_name)
        schema = reader.avro_schema
        assert schema is not None
        # cells given out of order: the log-block writer sorts them, as Hudi's TreeMap does
        cells = _cells(reader)[::-1]
        assert write_log_block_hfile(cells, schema, create_time_ms=_create_time(reader)) == content, log_name
        _assert_same_but_create_time(write_log_block_hfile(cells, schema), content)


# -- round trips ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def record_index_template(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    """The HoodieMetadataRecord schema and one record-index record of a v9 fixture."""
    base = unzip_table("cow", "v9_txns_simple_meta", tmp_path_factory.mktemp("template"))
    for path in sorted((base / ".hoodie" / "metadata" / "record_index").glob("*.hfile")):
        reader = HFileReader(path.read_bytes())
        if len(reader):
            schema = reader.avro_schema
            assert schema is not None
            _, value = next(reader.items())
            record = fastavro.schemaless_reader(io.BytesIO(value), fastavro.parse_schema(json.loads(schema)), None)
            return schema, record  # type: ignore[return-value]
    raise AssertionError("no record_index HFile with records")


def _record_index_cells(template: tuple[str, dict[str, Any]], count: int) -> list[tuple[str, bytes]]:
    """`count` record-index cells (UUID record keys, Avro values), sorted by key."""
    schema_json, record = template
    schema = fastavro.parse_schema(json.loads(schema_json))
    cells = []
    for i in range(count):
        file_id = uuid.UUID(int=(i * 7919) % 97 << 64 | i)
        entry = dict(record["recordIndexMetadata"])
        entry.update(
            partitionName=f"region={('apac', 'eu', 'us')[i % 3]}",
            fileIdHighBits=struct.unpack(">q", file_id.bytes[:8])[0],
            fileIdLowBits=struct.unpack(">q", file_id.bytes[8:])[0],
            instantTime=1772922274124 + i,
        )
        out = io.BytesIO()
        fastavro.schemaless_writer(out, schema, {**record, "recordIndexMetadata": entry})
        cells.append((str(uuid.UUID(int=i * 0x9E3779B97F4A7C15 % 2**128)), out.getvalue()))
    return sorted(cells, key=lambda kv: kv[0].encode())


def _data_blocks(data: bytes, reader: HFileReader) -> list[tuple[int, int, int]]:
    """(offset, uncompressed size, previous-block-offset field) of each data block."""
    blocks = []
    for entry in reader.index:
        header = data[entry.offset : entry.offset + BLOCK_HEADER_SIZE]
        assert header[:8] == DATA_MAGIC
        blocks.append((entry.offset, struct.unpack_from(">i", header, 12)[0], struct.unpack_from(">q", header, 16)[0]))
    return blocks


def test_hfile_round_trip_empty_file_reads_empty(record_index_template: tuple[str, dict[str, Any]]):
    schema, _ = record_index_template
    for data in (write_base_hfile([], schema), write_log_block_hfile([], schema)):
        reader = HFileReader(data)
        assert len(reader) == 0 and reader.index == [] and list(reader.items()) == []
        assert reader.file_info[b"hfile.LASTKEY"] == b"" and reader.avro_schema == schema
        fields = _trailer_fields(data)
        assert fields[9] == [2**64 - 1] and fields[5] == [0]  # no first data block, as Hudi
    info = HFileReader(write_base_hfile([], schema)).file_info
    assert info[b"minRecordKey"] == info[b"maxRecordKey"] == b""


def test_hfile_round_trip_one_key(record_index_template: tuple[str, dict[str, Any]]):
    schema, _ = record_index_template
    [cell] = _record_index_cells(record_index_template, 1)
    reader = HFileReader(write_base_hfile([cell], schema))
    assert _cells(reader) == [cell] and reader.get(cell[0].encode()) == cell[1]
    assert reader.file_info[b"minRecordKey"] == reader.file_info[b"maxRecordKey"] == cell[0].encode()
    assert reader.file_info[b"hfile.AVG_KEY_LEN"] == struct.pack(">i", len(cell[0]))
    log_reader = HFileReader(write_log_block_hfile(dict([cell]), schema))
    assert _cells(log_reader) == [cell] and b"minRecordKey" not in log_reader.file_info


def test_hfile_round_trip_many_keys_spans_blocks_of_hudi_size(record_index_template: tuple[str, dict[str, Any]]):
    """12,000 record-index cells pass Hudi's 1 MiB block size: two data blocks, each key in
    one, the root index pointing at both; the bloom filter grows a second row as Hudi's."""
    schema_json, _ = record_index_template
    cells = _record_index_cells(record_index_template, 12000)
    data = write_base_hfile(cells, schema_json)
    reader = HFileReader(data)
    assert _cells(reader) == cells and len(reader) == len(cells)
    blocks = _data_blocks(data, reader)
    assert len(blocks) == 2 and reader.trailer.index_levels == 1
    # a block is closed when the next cell (row + value + 21 bytes) would pass 1 MiB
    first_block_cells = sum(1 for _ in HFileReader(data)._cells_of_block(reader.index[0]))
    next_key, next_value = cells[first_block_cells]
    assert blocks[0][1] <= DEFAULT_BLOCK_SIZE < blocks[0][1] + len(next_key) + len(next_value) + 21
    assert [entry.first_key for entry in reader.index] == [cells[0][0].encode(), next_key.encode()]
    # Hudi's quirk: a data block after the first records its own offset as "previous"
    assert blocks[0][2] == -1 and blocks[1][2] == blocks[1][0]
    fields = _trailer_fields(data)
    assert fields[9] == [blocks[0][0]] and fields[10] == [blocks[1][0]] and fields[7] == [12000]
    assert fields[3] == [sum(size for _, size, _ in blocks)]
    for key, value in cells[::997]:
        assert reader.get(key.encode()) == value
    # decoded values are the Avro records written
    schema = fastavro.parse_schema(json.loads(schema_json))
    record = fastavro.schemaless_reader(io.BytesIO(reader.get(cells[5][0].encode()) or b""), schema, None)
    assert record["type"] == 5 and record["recordIndexMetadata"]["partitionName"].startswith("region=")
    expected_bloom = BloomFilter.create(10000, 1e-9, 100000)
    expected_bloom.add_keys([key for key, _ in cells])
    meta_offset = blocks[-1][0] + reader.index[-1].size
    assert reader._block(meta_offset, b"METABLKc") == expected_bloom.serialize().encode()
    assert expected_bloom.num_rows == 2


def test_hfile_small_blocks_many_index_entries_and_prefix_reads(record_index_template: tuple[str, dict[str, Any]]):
    schema, _ = record_index_template
    cells = _record_index_cells(record_index_template, 2000)
    data = write_base_hfile(cells, schema, block_size=4096)
    reader = HFileReader(data)
    assert len(reader.index) > 40 and _cells(reader) == cells
    offsets = [entry.offset for entry in reader.index]
    assert offsets[0] == 0 and all(a.offset + a.size == b.offset for a, b in zip(reader.index, reader.index[1:]))
    prefix = cells[1000][0][:3].encode()
    expected = [key.encode() for key, _ in cells if key.encode().startswith(prefix)]
    assert [key for key, _ in reader.items_with_prefix(prefix)] == expected and expected


def test_hfile_long_first_key_uses_hudi_varint_and_reads_back():
    """A first key of 300 bytes: Hudi prefixes index keys with a protobuf varint (302 ->
    0xAE 0x02), which the reader accepts next to HBase's VInt."""
    writer = HFileWriter(create_time_ms=0)
    keys = [b"k" * 299 + bytes([i]) for i in range(3)]
    for key in keys:
        writer.append(key, b"v")
    data = writer.finish()
    reader = HFileReader(data)
    root = reader._block(reader.trailer.load_on_open_offset, b"IDXROOT2")
    assert root[12:14] == b"\xae\x02" and root[14:16] == struct.pack(">h", 300)
    assert reader.index[0].first_key == keys[0] and [k for k, _ in reader.items()] == keys


def test_hfile_writer_rejects_unsorted_and_duplicate_keys():
    writer = HFileWriter()
    writer.append(b"b", b"1")
    with pytest.raises(ValueError, match="strictly ascending"):
        writer.append(b"a", b"2")
    with pytest.raises(ValueError, match="strictly ascending"):
        writer.append(b"b", b"3")
    with pytest.raises(ValueError, match="strictly ascending"):
        write_log_block_hfile([("x", b"1"), ("x", b"2")], "{}")


def test_hfile_writer_uncompressed_codec_reads_back():
    writer = HFileWriter(codec=2)
    writer.append(b"a", b"payload")
    data = writer.finish()
    reader = HFileReader(data)
    assert reader.trailer.codec == 2 and _cells(reader) == [("a", b"payload")]
    assert b"payload" in data[: reader.index[0].size]  # stored as is
    with pytest.raises(ValueError, match="not writable"):
        HFileWriter(codec=0)


def test_hfile_blocks_are_java_gzip_members():
    """Blocks are gzip members with Java's header (no mtime, OS 0) and level-6 deflate."""
    writer = HFileWriter()
    writer.append(b"key", b"value" * 50)
    data = writer.finish()
    reader = HFileReader(data)
    assert reader.trailer.codec == CODEC_GZ
    payload_end = struct.unpack_from(">i", data, 29)[0]
    payload = data[BLOCK_HEADER_SIZE:payload_end]
    assert payload[:10] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x00"
    assert zlib.decompress(payload, wbits=31)[:4] == struct.pack(">i", 3 + 2 + 10)


# -- hudi-rs reads a metadata table whose base file lakeward wrote ---------------------------
def test_hudi_rs_reads_metadata_table_with_rewritten_files_base_hfile(fixture_table: Callable[[str, str], str]):
    """The `files` partition's base HFile replaced by the writer's rewrite of its records:
    hudi-rs and lakeward (both listing through the metadata table) read the same rows.
    Then the rewrite lists one more data file (a copy of an existing one, on disk before and
    ignored while unlisted): both readers now read its rows, so they did read our file."""
    path = fixture_table("mor/avro", "v9_txns_simple_meta")
    ours_before, theirs_before = both_readers(path)
    assert ours_before == theirs_before and len(theirs_before) == 12
    table = Path(path)
    [base] = (table / ".hoodie" / "metadata" / "files").glob("files-0000-0_13-*.hfile")
    reader = HFileReader(base.read_bytes())
    schema_json = reader.avro_schema
    assert schema_json is not None
    base.write_bytes(write_base_hfile(_cells(reader), schema_json))
    assert both_readers(path) == (ours_before, theirs_before)

    [original] = (table / "region=apac").glob("c3b646cc-*_20260307162557587.parquet")
    copy = original.with_name(original.name.replace(original.name[:36], "0badf11e-0000-0000-0000-000000000000"))
    shutil.copy(original, copy)
    assert both_readers(path) == (ours_before, theirs_before)  # unlisted: invisible
    schema = fastavro.parse_schema(json.loads(schema_json))
    cells = []
    for key, value in _cells(reader):
        if key == "region=apac":
            record = fastavro.schemaless_reader(io.BytesIO(value), schema, None)
            record["filesystemMetadata"][copy.name] = {"size": copy.stat().st_size, "isDeleted": False}  # type: ignore[index]
            out = io.BytesIO()
            fastavro.schemaless_writer(out, schema, record)
            value = out.getvalue()
        cells.append((key, value))
    base.write_bytes(write_base_hfile(cells, schema_json))
    ours_after, theirs_after = both_readers(path)
    assert ours_after == theirs_after and len(theirs_after) > len(theirs_before)
