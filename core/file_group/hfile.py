"""HFile (version 3) reader: the base files and log-block payloads of Hudi's metadata table.

A plain format reader over the bytes of one HFile, as Hudi 1.x writes it (native
`hudi-io` writer, and HBase's writer whose files have the same block layout):

- a 4096-byte trailer at the end: magic `TRABLK"$`, a varint-prefixed protobuf
  `TrailerProto` (offsets of the root data index and the file info, counts, codec), and
  the version in the last 4 bytes (major 3);
- blocks with a 33-byte header (magic `DATABLK*`, `IDXROOT2`, `FILEINF2`, `METABLKc`, sizes,
  checksum settings) and a payload compressed with the file's codec (GZ or NONE);
- the root data index: per data block its offset, on-disk size and first key;
- data blocks: cells `keyLen(4) valueLen(4) key value memstoreTs(vlong)`, where the key is
  `rowLen(2) row family(len 0) timestamp(8) type(1)`; Hudi's record key is the row.

Everything is big-endian. Only single-level root indexes are read (what Hudi writes for
metadata-table files); anything else is a CorruptTableError naming the problem.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from lakeward.core.exceptions import CorruptTableError
from lakeward.core.file_group.deflate import InflateError, inflate_gzip

TRAILER_SIZE = 4096
BLOCK_HEADER_SIZE = 33
TRAILER_MAGIC = b'TRABLK"$'
DATA_MAGIC = b"DATABLK*"
META_MAGIC = b"METABLKc"
ROOT_INDEX_MAGIC = b"IDXROOT2"
FILE_INFO_MAGIC = b"FILEINF2"
#: Marker ahead of the delimited `InfoProto` in the file info block.
FILE_INFO_PB_MAGIC = b"PBUF"
HFILE_MAJOR_VERSION = 3
#: Checksums (type NULL in Hudi's files) take 4 bytes per started 16 KiB of on-disk block.
BYTES_PER_CHECKSUM = 16384
CHECKSUM_SIZE = 4
#: The trailer's comparator class name, as Hudi 1.x writes it.
COMPARATOR_CLASS = "org.apache.hudi.io.storage.HoodieHBaseKVComparator"
#: `Compression.Algorithm` ordinals of HBase/Hudi: only these two are readable (as in hudi-rs).
CODEC_GZ = 1
CODEC_NONE = 2
#: Bytes after the row in a cell key: family length (1), timestamp (8), key type (1).
KEY_SUFFIX = 10
#: What follows the row in the key of every cell Hudi 1.x and lakeward write: family length 0, the
#: latest timestamp (Long.MAX_VALUE), key type Put (4).
KEY_TAIL = struct.pack(">bqb", 0, 2**63 - 1, 4)
#: A cell's head: key length, value length, then the key's 2-byte row length.
_CELL_HEAD = struct.Struct(">iih")


class FileInfoKey:
    """File-info entry names of Hudi's metadata-table HFiles."""

    SCHEMA = "schema"
    LAST_KEY = "hfile.LASTKEY"
    AVG_KEY_LEN = "hfile.AVG_KEY_LEN"
    AVG_VALUE_LEN = "hfile.AVG_VALUE_LEN"
    CREATE_TIME = "hfile.CREATE_TIME_TS"
    KEY_VALUE_VERSION = "KEY_VALUE_VERSION"
    MAX_MEMSTORE_TS = "MAX_MEMSTORE_TS_KEY"
    MIN_RECORD_KEY = "minRecordKey"
    MAX_RECORD_KEY = "maxRecordKey"
    BLOOM_TYPE_CODE = "bloomFilterTypeCode"


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """A protobuf base-128 varint at `pos`: (value, next position)."""
    value = shift = 0
    while True:
        if pos >= len(data):
            raise CorruptTableError("HFile: truncated protobuf varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _hadoop_vint(data: bytes, pos: int) -> tuple[int, int]:
    """A Hadoop `WritableUtils` variable-length integer at `pos`: (value, next position)."""
    first = struct.unpack_from(">b", data, pos)[0]
    pos += 1
    if first >= -112:
        return first, pos
    negative = first < -120
    length = (-119 - first) if negative else (-111 - first)
    value = int.from_bytes(data[pos : pos + length], "big")
    pos += length
    return (~value if negative else value), pos


def _protobuf_fields(data: bytes) -> dict[int, list[int | bytes]]:
    """Decode a protobuf message into field number -> values (varints as int, bytes as bytes)."""
    fields: dict[int, list[int | bytes]] = {}
    pos = 0
    while pos < len(data):
        tag, pos = _varint(data, pos)
        number, wire = tag >> 3, tag & 7
        value: int | bytes
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            length, pos = _varint(data, pos)
            value = data[pos : pos + length]
            pos += length
        elif wire == 1:
            value = int.from_bytes(data[pos : pos + 8], "little")
            pos += 8
        elif wire == 5:
            value = int.from_bytes(data[pos : pos + 4], "little")
            pos += 4
        else:
            raise CorruptTableError(f"HFile: unsupported protobuf wire type {wire}")
        fields.setdefault(number, []).append(value)
    return fields


@dataclass(frozen=True)
class Trailer:
    """The fixed file trailer: where the index and file info are, and how blocks are compressed."""

    file_info_offset: int
    load_on_open_offset: int
    data_index_count: int
    meta_index_count: int
    entry_count: int
    index_levels: int
    codec: int
    comparator: str
    major_version: int


@dataclass(frozen=True)
class IndexEntry:
    """A root data index entry: a data block's offset, on-disk size and first row key."""

    offset: int
    size: int
    first_key: bytes


class HFileReader:
    """Reads every cell of one HFile held in memory.

    `name` is used in error messages (the file path, or the log block it came from).
    """

    def __init__(self, data: bytes, name: str = "HFile"):
        self._data = data
        self.name = name
        self.trailer = self._read_trailer()
        self.index = self._read_root_index()
        self.file_info = self._read_file_info()

    # -- structure -------------------------------------------------------------------------
    def _fail(self, what: str) -> CorruptTableError:
        return CorruptTableError(f"{self.name}: {what}")

    def _read_trailer(self) -> Trailer:
        data = self._data
        if len(data) < TRAILER_SIZE:
            raise self._fail(f"{len(data)} bytes is shorter than the {TRAILER_SIZE}-byte HFile trailer")
        trailer = data[-TRAILER_SIZE:]
        if trailer[:8] != TRAILER_MAGIC:
            raise self._fail("bad trailer magic (not an HFile, or truncated)")
        version = int.from_bytes(trailer[-4:], "big")
        major = version & 0x00FFFFFF
        if major != HFILE_MAJOR_VERSION:
            raise self._fail(f"HFile major version {major} is not supported (only {HFILE_MAJOR_VERSION})")
        length, pos = _varint(trailer, 8)
        fields = _protobuf_fields(trailer[pos : pos + length])

        def num(field: int, default: int = 0) -> int:
            values = fields.get(field)
            return int(values[-1]) if values else default  # type: ignore[arg-type]

        comparator = fields.get(11, [b""])[-1]
        codec = num(12, CODEC_NONE)
        if codec not in (CODEC_GZ, CODEC_NONE):
            raise self._fail(f"compression codec {codec} is not supported (GZ or NONE)")
        levels = num(8, 1)
        if levels != 1 and num(5) > 0:
            raise self._fail(f"{levels}-level data index is not supported (single-level only)")
        return Trailer(
            file_info_offset=num(1),
            load_on_open_offset=num(2),
            data_index_count=num(5),
            meta_index_count=num(6),
            entry_count=num(7),
            index_levels=levels,
            codec=codec,
            comparator=comparator.decode() if isinstance(comparator, bytes) else str(comparator),
            major_version=major,
        )

    def _block(self, offset: int, magic: bytes) -> bytes:
        """The uncompressed payload of the block at `offset`, checking its magic."""
        header = self._data[offset : offset + BLOCK_HEADER_SIZE]
        if len(header) < BLOCK_HEADER_SIZE or header[:8] != magic:
            raise self._fail(f"no {magic.decode(errors='replace')} block at offset {offset}")
        uncompressed_size = struct.unpack_from(">i", header, 12)[0]
        on_disk_data_with_header = struct.unpack_from(">i", header, 29)[0]
        end = offset + on_disk_data_with_header
        if on_disk_data_with_header < BLOCK_HEADER_SIZE or end > len(self._data):
            raise self._fail(f"block at offset {offset} runs past the end of the file")
        payload = self._data[offset + BLOCK_HEADER_SIZE : end]
        if self.trailer.codec == CODEC_GZ:
            try:
                payload = inflate_gzip(payload)
            except InflateError as exc:
                raise self._fail(f"block at offset {offset} does not decompress: {exc}") from exc
        if len(payload) != uncompressed_size:
            raise self._fail(f"block at offset {offset} holds {len(payload)} bytes, header says {uncompressed_size}")
        return payload

    def _read_root_index(self) -> list[IndexEntry]:
        count = self.trailer.data_index_count
        if count == 0:
            return []
        payload = self._block(self.trailer.load_on_open_offset, ROOT_INDEX_MAGIC)
        entries, pos = [], 0
        for _ in range(count):
            offset, size = struct.unpack_from(">qi", payload, pos)
            row, pos = self._index_row(payload, pos + 12)
            entries.append(IndexEntry(offset, size, row))
        return entries

    def _index_row(self, payload: bytes, pos: int) -> tuple[bytes, int]:
        """The first row of a root-index entry whose length-prefixed key starts at `pos`: (row, end).

        The key is `rowLen(2) row` (Hudi 1.x's writer) or a full cell key with the 10-byte
        suffix (HBase's). Hudi prefixes it with a protobuf varint, HBase with a Hadoop VInt;
        the two agree below 128. A longer key is read by whichever encoding makes its length
        agree with the key's own 2-byte row length.
        """
        for decode in (_varint, _hadoop_vint):
            try:
                key_len, start = decode(payload, pos)
            except (CorruptTableError, struct.error):
                continue
            key = payload[start : start + key_len]
            if key_len < 2 or len(key) != key_len:
                continue
            row_len = struct.unpack_from(">h", key)[0]
            if row_len in (key_len - 2, key_len - 2 - KEY_SUFFIX):
                return key[2 : 2 + row_len], start + key_len
        raise self._fail(f"unreadable root index entry at byte {pos - 12} of the data index")

    def _read_file_info(self) -> dict[bytes, bytes]:
        payload = self._block(self.trailer.file_info_offset, FILE_INFO_MAGIC)
        if payload[:4] != FILE_INFO_PB_MAGIC:
            raise self._fail("file info block lacks its PBUF marker")
        length, pos = _varint(payload, 4)
        info: dict[bytes, bytes] = {}
        for pair in _protobuf_fields(payload[pos : pos + length]).get(1, []):
            fields = _protobuf_fields(pair)  # type: ignore[arg-type]
            key, value = fields.get(1, [b""])[0], fields.get(2, [b""])[0]
            info[bytes(key)] = bytes(value)  # type: ignore[arg-type]
        return info

    # -- cells -----------------------------------------------------------------------------
    def _cells_of_block(self, entry: IndexEntry) -> Iterator[tuple[bytes, bytes]]:
        payload = self._block(entry.offset, DATA_MAGIC)
        unpack = _CELL_HEAD.unpack_from
        pos, end = 0, len(payload)
        while pos < end:
            if pos + 10 > end:
                raise self._fail(f"truncated cell in the data block at offset {entry.offset}")
            key_len, value_len, row_len = unpack(payload, pos)
            start = pos + 8 + key_len
            pos = start + value_len
            if key_len < 2 + KEY_SUFFIX or value_len < 0 or pos >= end:  # no room left for the memstore VInt
                raise self._fail(f"truncated cell in the data block at offset {entry.offset}")
            yield payload[start - key_len + 2 : start - key_len + 2 + row_len], payload[start:pos]
            first = (
                payload[pos] - 256 if payload[pos] > 127 else payload[pos]
            )  # memstore timestamp (KEY_VALUE_VERSION 1)
            pos += 1 if first >= -112 else (-119 - first if first < -120 else -111 - first)

    def data_blocks(self) -> Iterator[bytes]:
        """The uncompressed payload of every data block, in key order (for bulk cell parsers)."""
        for entry in self.index:
            yield self.data_block(entry)

    def data_block(self, entry: IndexEntry) -> bytes:
        """The uncompressed payload of the data block of root-index entry `entry`."""
        return self._block(entry.offset, DATA_MAGIC)

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """Every (row key, value) in key order."""
        for entry in self.index:
            yield from self._cells_of_block(entry)

    def items_with_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Cells whose key starts with `prefix`, reading only the blocks that can hold them."""
        for i, entry in enumerate(self.index):
            following = self.index[i + 1].first_key if i + 1 < len(self.index) else None
            if following is not None and following < prefix:
                continue
            if entry.first_key > prefix and not entry.first_key.startswith(prefix):
                break
            for key, value in self._cells_of_block(entry):
                if key.startswith(prefix):
                    yield key, value

    def get(self, key: bytes) -> bytes | None:
        """The value stored under exactly `key`, or None."""
        for found, value in self.items_with_prefix(key):
            if found == key:
                return value
        return None

    def meta_block(self, name: str) -> bytes | None:
        """The uncompressed payload of the meta block `name` (Hudi's `bloomFilter`), None when absent.

        The meta index is the root-index block right after the data index (at the load-on-open offset).
        """
        if not self.trailer.meta_index_count:
            return None
        data_index = self.trailer.load_on_open_offset
        on_disk = struct.unpack_from(">i", self._data, data_index + 8)[0]  # without header, with checksums
        payload = self._block(data_index + BLOCK_HEADER_SIZE + on_disk, ROOT_INDEX_MAGIC)
        wanted, pos = name.encode(), 0
        for _ in range(self.trailer.meta_index_count):
            offset = struct.unpack_from(">q", payload, pos)[0]
            length, pos = _varint(payload, pos + 12)
            if payload[pos : pos + length] == wanted:
                return self._block(offset, META_MAGIC)
            pos += length
        return None

    def __len__(self) -> int:
        return self.trailer.entry_count

    @property
    def avro_schema(self) -> str | None:
        """The Avro schema of the values (`schema` file-info entry), if recorded."""
        raw = self.file_info.get(FileInfoKey.SCHEMA.encode())
        return raw.decode() if raw is not None else None
