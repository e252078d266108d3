"""The HFile reader against the metadata-table HFiles of the v9 fixtures, byte level."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import fastavro
import pytest

from lakeward.core.exceptions import CorruptTableError
from lakeward.core.file_group.hfile import CODEC_GZ, HFileReader
from lakeward.core.file_group.log_file.log_block import BlockType, HeaderKey
from lakeward.core.file_group.log_file.log_format import RawBlock, scan_blocks
from tests.support.fixture_tables import all_fixtures

META_FIXTURES = [(kind, name) for kind, name in all_fixtures() if name.startswith("v9") and "meta" in name]


def _decode_all(reader: HFileReader, schema_json: str | None = None) -> list[tuple[str, dict]]:
    schema = fastavro.parse_schema(json.loads(reader.avro_schema or schema_json or ""))
    out = []
    for key, value in reader.items():
        buf = io.BytesIO(value)
        record = fastavro.schemaless_reader(buf, schema, None)
        assert buf.tell() == len(value), f"{reader.name}: {key!r} leaves {len(value) - buf.tell()} bytes"
        out.append((key.decode(), record))  # type: ignore[arg-type]
    return out


@pytest.mark.parametrize(("kind", "name"), META_FIXTURES)
def test_every_metadata_hfile_cell_decodes(fixture_table: Callable[[str, str], str], kind: str, name: str):
    mdt = Path(fixture_table(kind, name)) / ".hoodie" / "metadata"
    base_files = sorted(mdt.glob("*/*.hfile"))
    assert base_files, f"{name} has no metadata HFiles"
    cells = 0
    for path in base_files:
        reader = HFileReader(path.read_bytes(), str(path))
        assert reader.trailer.codec == CODEC_GZ and reader.trailer.major_version == 3
        decoded = _decode_all(reader)
        keys = [k for k, _ in decoded]
        assert len(decoded) == len(reader) and keys == sorted(keys) and len(set(keys)) == len(keys)
        if decoded:
            assert reader.file_info[b"hfile.LASTKEY"][2:].decode() == keys[-1]
            assert reader.file_info[b"minRecordKey"].decode() == keys[0]
            assert reader.file_info[b"maxRecordKey"].decode() == keys[-1]
        for key, record in decoded:
            assert record["key"] == "" and 1 <= record["type"] <= 7, (path.name, key)
        cells += len(decoded)
    # HFile log blocks (metadata delta commits) decode too
    blocks = 0
    for log_path in sorted(mdt.glob("*/.*.log.*")):
        for block in scan_blocks(log_path.read_bytes()):
            assert isinstance(block, RawBlock), f"{log_path.name}: {block}"
            if block.block_type is BlockType.HFILE_DATA:
                reader = HFileReader(block.content, log_path.name)
                decoded = _decode_all(reader, block.header.get(HeaderKey.SCHEMA))
                assert len(decoded) == len(reader) > 0
                blocks += 1
    assert cells > 0 and blocks > 0


def test_files_partition_records_of_one_fixture(fixture_table: Callable[[str, str], str]):
    """The `files` base HFile written by the MDT compaction lists what the data files are."""
    base = Path(fixture_table("mor/avro", "v9_txns_simple_meta"))
    [hfile] = (base / ".hoodie" / "metadata" / "files").glob("files-0000-0_*_20260307162612567.hfile")
    records = dict(_decode_all(HFileReader(hfile.read_bytes())))
    assert sorted(records) == ["__all_partitions__", "region=apac", "region=eu", "region=us"]
    assert records["__all_partitions__"]["type"] == 1
    assert sorted(records["__all_partitions__"]["filesystemMetadata"]) == ["region=apac", "region=eu", "region=us"]
    for partition in ("region=apac", "region=eu", "region=us"):
        listed = records[partition]["filesystemMetadata"]
        assert records[partition]["type"] == 2
        for file_name, info in listed.items():
            on_disk = base / partition / file_name
            assert on_disk.is_file(), on_disk
            assert info == {"size": on_disk.stat().st_size, "isDeleted": False}


def test_get_and_prefix_lookups(fixture_table: Callable[[str, str], str]):
    base = Path(fixture_table("mor/avro", "v9_txns_simple_meta"))
    [hfile] = (base / ".hoodie" / "metadata" / "files").glob("files-0000-0_*_20260307162612567.hfile")
    reader = HFileReader(hfile.read_bytes())
    assert reader.get(b"region=eu") is not None and reader.get(b"region=e") is None
    assert [k for k, _ in reader.items_with_prefix(b"region=")] == [b"region=apac", b"region=eu", b"region=us"]


def test_damaged_hfiles_are_clear_errors(fixture_table: Callable[[str, str], str]):
    base = Path(fixture_table("mor/avro", "v9_txns_simple_meta"))
    [hfile] = (base / ".hoodie" / "metadata" / "files").glob("files-0000-0_*_20260307162612567.hfile")
    data = hfile.read_bytes()
    with pytest.raises(CorruptTableError, match="shorter than"):
        HFileReader(data[:100], "short")
    with pytest.raises(CorruptTableError, match="trailer magic"):
        HFileReader(data[:-10], "truncated")
    flipped = bytearray(data)
    flipped[80] ^= 0xFF  # inside the compressed payload of the first data block
    with pytest.raises(CorruptTableError, match="offset 0"):
        list(HFileReader(bytes(flipped), "flipped").items())
