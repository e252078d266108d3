"""HFile (version 3) writer: metadata-table base files and HFile log-block payloads, as Hudi 1.x.

The counterpart of `hfile.HFileReader`, producing the bytes Hudi 1.1's native `hudi-io`
writer produces, so that Java Hudi, hudi-rs and lakeward read what lakeward writes:

- data blocks (`DATABLK*`) of cells `keyLen(4) valueLen(4) rowLen(2) row 0x00
  Long.MAX(8) Put(4) value mvcc(0)`, a new block when the next cell would take the block
  past `block_size` (1 MiB, Hudi's `HFileContext` default; the `hoodie.hfile.block.size`
  setting does not reach that writer); a key is never split over two blocks;
- one meta block per meta entry (`METABLKc`; the base files' `bloomFilter`);
- a single-level root data index (`IDXROOT2`; Hudi writes no leaf or intermediate index
  blocks whatever the size), a meta index (`IDXROOT2`, written even when empty), and the
  file info (`FILEINF2`: `PBUF` + delimited `InfoProto`), its pairs in Java `HashMap`
  iteration order as Hudi's writer emits them;
- every block GZ-compressed (gzip header with mtime 0, deflate level 6 — bit-identical to
  Java's `GZIPOutputStream` on every block of the fixtures; the metadata compaction passes its
  own level, `lakeward.metadata.compact.deflate.level`, whose fast levels go through igzip:
  `deflate.gzip_member`), `NULL` checksums reserved as
  4 zero bytes per started 16 KiB of on-disk block;
- the 4096-byte trailer: `TRABLK"$`, varint-delimited `TrailerProto`, version 3 in the
  last byte.

`write_base_hfile` and `write_log_block_hfile` fill the file info as Hudi's metadata-table
writers do (`HoodieAvroHFileWriter` for base files: schema, bloom filter, min/max record
key; `HFileUtils.serializeRecordsToLogBlock` for log blocks: schema only). Every field is
a function of the cells and the schema except `hfile.CREATE_TIME_TS` (the wall clock, in
milliseconds; pass `create_time_ms` to pin it).

Cells are encoded first (`encode_cells`, or gathered already encoded by a columnar merge:
`HFileWriter.extend_encoded`, `hfile_cells.EncodedCells`) and cut into data blocks once, when
the file is finished: a block ends where the running size of its cells would pass `block_size`
(a `searchsorted` over the cells' offsets), so no Python work is done per cell there.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa

from lakeward.core.file_group.deflate import JAVA_DEFLATE_LEVEL, gzip_member
from lakeward.core.file_group.hfile import (
    BLOCK_HEADER_SIZE,
    BYTES_PER_CHECKSUM,
    CHECKSUM_SIZE,
    CODEC_GZ,
    CODEC_NONE,
    COMPARATOR_CLASS,
    DATA_MAGIC,
    FILE_INFO_MAGIC,
    FILE_INFO_PB_MAGIC,
    HFILE_MAJOR_VERSION,
    KEY_SUFFIX,
    KEY_TAIL,
    META_MAGIC,
    ROOT_INDEX_MAGIC,
    TRAILER_MAGIC,
    TRAILER_SIZE,
    FileInfoKey,
)
from lakeward.core.file_group.hfile_cells import EncodedCells, binary_array
from lakeward.core.index.bloom_filter import DYNAMIC_V0, BloomFilter

#: Hudi's `HFileContext` block size (1 MiB), used by both metadata-table HFile writers.
DEFAULT_BLOCK_SIZE = 1024 * 1024
#: The metadata table's bloom filter on base HFiles: `hoodie.metadata.bloom.filter.num.entries`
#: and `.fpp` (10000 and 1e-9, checked bit for bit against the fixtures), Hudi's dynamic
#: growth bound (100000) and type.
MDT_BLOOM_NUM_ENTRIES = 10000
MDT_BLOOM_FPP = 1e-9
MDT_BLOOM_MAX_ENTRIES = 100000
#: Name of the base files' bloom filter meta block.
BLOOM_FILTER_META_BLOCK = "bloomFilter"
#: Cell overhead beyond row and value: keyLen(4) valueLen(4) rowLen(2) suffix(10) mvcc(1).
_CELL_OVERHEAD = 4 + 4 + 2 + KEY_SUFFIX + 1
#: The memstore timestamp ending every cell (0, one VInt byte).
MEMSTORE_ZERO = b"\x00"
_CELL_HEAD = struct.Struct(">iih")


def protobuf_varint(value: int) -> bytes:
    """A non-negative int as a protobuf base-128 varint (`CodedOutputStream.writeUInt64NoTag`)."""
    if value < 0:
        value &= (1 << 64) - 1  # int64 fields: two's complement over 10 bytes
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _pb_field(number: int, value: int | bytes) -> bytes:
    """One protobuf field: varint (wire type 0) for ints, length-delimited (2) for bytes."""
    if isinstance(value, bytes):
        return protobuf_varint(number << 3 | 2) + protobuf_varint(len(value)) + value
    return protobuf_varint(number << 3) + protobuf_varint(value)


def java_string_hash(text: str) -> int:
    """Java `String.hashCode` (over UTF-16 code units, int32 wrap-around), as unsigned 32 bits."""
    units = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h


def java_hashmap_order(keys: list[str]) -> list[str]:
    """`keys` (distinct, in insertion order) in the iteration order of a Java `HashMap<String, _>`.

    Buckets are `(h ^ h >>> 16) & (capacity - 1)` with the capacity doubled from 16 while
    size > 0.75 * capacity; within a bucket, insertion order (resizes keep it). Valid while
    no bucket is treeified (8+ colliding keys), far beyond the few keys of HFile metadata.
    """
    capacity = 16
    while len(keys) > capacity * 3 // 4:
        capacity *= 2

    def bucket(key: str) -> int:
        h = java_string_hash(key)
        return (h ^ (h >> 16)) & (capacity - 1)

    position = {key: i for i, key in enumerate(keys)}
    return sorted(keys, key=lambda k: (bucket(k), position[k]))


def encode_cells(cells: Sequence[tuple[bytes, bytes]]) -> EncodedCells:
    """`cells` (key, value) encoded as data blocks hold them: `keyLen(4) valueLen(4) rowLen(2) row
    family(0) LATEST_TIMESTAMP Put value mvcc(0)`."""
    head = _CELL_HEAD.pack
    parts: list[bytes] = []
    for key, value in cells:
        parts += (head(len(key) + 2 + KEY_SUFFIX, len(value), len(key)), key, KEY_TAIL, value, MEMSTORE_ZERO)
    row_lengths = np.fromiter((len(key) for key, _ in cells), np.int64, len(cells))
    value_lengths = np.fromiter((len(value) for _, value in cells), np.int64, len(cells))
    starts = np.zeros(len(cells) + 1, np.int64)
    np.cumsum(row_lengths + value_lengths + _CELL_OVERHEAD, out=starts[1:])
    data = np.frombuffer(b"".join(parts), np.uint8)
    return EncodedCells(data, starts, starts[:-1] + 10, row_lengths, value_lengths)


def concat_encoded(chunks: Sequence[EncodedCells]) -> EncodedCells:
    """Encoded cells of `chunks`, one after the other, as one."""
    if len(chunks) == 1:
        return chunks[0]
    shifts, total = [], 0
    for chunk in chunks:
        shifts.append(total - int(chunk.starts[0]))
        total += int(chunk.starts[-1] - chunk.starts[0])
    data = np.concatenate([c.data[int(c.starts[0]) : int(c.starts[-1])] for c in chunks])
    starts = np.concatenate([c.starts[:-1] + s for c, s in zip(chunks, shifts)] + [np.array([total], np.int64)])
    row_starts = np.concatenate([c.row_starts + s for c, s in zip(chunks, shifts)])
    return EncodedCells(
        data,
        starts,
        row_starts,
        np.concatenate([c.row_lengths for c in chunks]),
        np.concatenate([c.value_lengths for c in chunks]),
    )


class HFileWriter:
    """Builds one HFile in memory from cells appended in strictly ascending key order.

    Keys are the UTF-8 bytes of Hudi record keys (the HFile row); values are opaque (Avro
    binary of a `HoodieMetadataRecord` in the metadata table). `file_info` and
    `meta_blocks` keep insertion order, which decides their on-disk order (Java `HashMap`).
    """

    def __init__(
        self,
        *,
        block_size: int = DEFAULT_BLOCK_SIZE,
        codec: int = CODEC_GZ,
        create_time_ms: int | None = None,
        deflate_level: int = JAVA_DEFLATE_LEVEL,
    ):
        if codec not in (CODEC_GZ, CODEC_NONE):
            raise ValueError(f"HFile codec {codec} is not writable (GZ={CODEC_GZ} or NONE={CODEC_NONE})")
        self.block_size = block_size
        self.codec = codec
        self.deflate_level = deflate_level
        self.create_time_ms = int(time.time() * 1000) if create_time_ms is None else create_time_ms
        # initialised first, as Hudi's writer does in its constructor (decides HashMap order)
        self.file_info: dict[str, bytes] = {FileInfoKey.MAX_MEMSTORE_TS: struct.pack(">q", 0)}
        self.meta_blocks: dict[str, bytes] = {}
        self._pending: list[tuple[bytes, bytes]] = []  # cells appended one by one, not encoded yet
        self._chunks: list[EncodedCells] = []
        self._last_key: bytes | None = None
        self._out = bytearray()
        self._index: list[tuple[int, int, bytes]] = []  # (offset, on-disk size, first key)
        self._first_block_offset = -1
        self._last_block_offset = 0
        self._entries = self._key_bytes = self._value_bytes = self._uncompressed = 0

    def append(self, key: bytes, value: bytes) -> None:
        """Adds one cell; keys must be strictly ascending by unsigned bytes (Hudi rejects duplicates)."""
        self.extend(((key, value),))

    def extend(self, cells: Iterable[tuple[bytes, bytes]]) -> None:
        """`append` of every cell, in order (the same checks, one loop for large files)."""
        last, pending = self._last_key, self._pending
        for key, value in cells:
            if last is not None and key <= last:
                raise ValueError(f"HFile keys must be strictly ascending: {key!r} after {last!r}")
            if len(key) > 0x7FFF:
                raise ValueError(f"HFile row key of {len(key)} bytes exceeds the 2-byte row length")
            pending.append((key, value))
            last = key
        self._last_key = last

    def extend_encoded(self, cells: EncodedCells) -> None:
        """Appends cells already encoded as data blocks hold them (`encode_cells`, or a columnar merge
        gathering them); their keys must be strictly ascending and above every key appended so far
        (only the boundary is checked here)."""
        if not len(cells):
            return
        if self._last_key is not None and cells.row(0) <= self._last_key:
            raise ValueError(f"HFile keys must be strictly ascending: {cells.row(0)!r} after {self._last_key!r}")
        self._encode_pending()
        self._chunks.append(cells)
        self._last_key = cells.row(len(cells) - 1)

    def _encode_pending(self) -> None:
        if self._pending:
            self._chunks.append(encode_cells(self._pending))
            self._pending = []

    def add_file_info(self, name: str, value: bytes) -> None:
        """Sets a file-info entry (a later value for the same name replaces the earlier one)."""
        self.file_info[name] = value

    def add_meta_block(self, name: str, value: bytes) -> None:
        """Adds a meta block holding `value`, indexed under `name` in the meta index."""
        self.meta_blocks[name] = value

    # -- blocks ----------------------------------------------------------------------------
    def _block_bytes_of(self, magic: bytes, raw: bytes, previous_offset: int = -1) -> bytes:
        payload = gzip_member(raw, self.deflate_level) if self.codec == CODEC_GZ else raw
        with_header = BLOCK_HEADER_SIZE + len(payload)
        checksum = -(-with_header // BYTES_PER_CHECKSUM) * CHECKSUM_SIZE
        header = magic + struct.pack(
            ">iiqbii", len(payload) + checksum, len(raw), previous_offset, 0, BYTES_PER_CHECKSUM, with_header
        )
        return header + payload + bytes(checksum)

    def _write(self, block: bytes) -> int:
        offset = len(self._out)
        self._out += block
        return offset

    def _write_data_blocks(self) -> None:
        """Cuts the appended cells into data blocks (a new block when the next cell would take the
        block past `block_size`; a block holds at least one cell) and writes them."""
        self._encode_pending()
        if not self._chunks:
            return
        cells = concat_encoded(self._chunks)
        self._chunks = []
        starts, n = cells.starts, len(cells)
        self._entries += n
        self._key_bytes += int(cells.row_lengths.sum())
        self._value_bytes += int(cells.value_lengths.sum())
        self._uncompressed += int(starts[-1] - starts[0])
        first = 0
        while first < n:
            end = int(np.searchsorted(starts, starts[first] + self.block_size, "right")) - 1
            end = min(max(end, first + 1), n)
            raw = cells.data[starts[first] : starts[end]].tobytes()
            # Hudi creates each data block after the first with the then-current file offset as
            # its "previous block offset" (that is, its own start); readers ignore the field.
            previous = -1 if self._first_block_offset < 0 else len(self._out)
            block = self._block_bytes_of(DATA_MAGIC, raw, previous)
            offset = self._write(block)
            if self._first_block_offset < 0:
                self._first_block_offset = offset
            self._last_block_offset = offset
            self._index.append((offset, len(block), cells.row(first)))
            first = end

    def _file_info_block(self) -> bytes:
        n = self._entries
        last = b"" if self._last_key is None else struct.pack(">h", len(self._last_key)) + self._last_key
        self.file_info[FileInfoKey.LAST_KEY] = last
        self.file_info[FileInfoKey.AVG_KEY_LEN] = struct.pack(">i", self._key_bytes // n if n else 0)
        self.file_info[FileInfoKey.CREATE_TIME] = struct.pack(">q", self.create_time_ms)
        self.file_info[FileInfoKey.AVG_VALUE_LEN] = struct.pack(">i", self._value_bytes // n if n else 0)
        self.file_info.setdefault(FileInfoKey.KEY_VALUE_VERSION, struct.pack(">i", 1))
        pairs = b"".join(
            _pb_field(1, _pb_field(1, name.encode()) + _pb_field(2, self.file_info[name]))
            for name in java_hashmap_order(list(self.file_info))
        )
        return FILE_INFO_PB_MAGIC + protobuf_varint(len(pairs)) + pairs

    def finish(self) -> bytes:
        """The complete HFile. The writer is spent afterwards."""
        self._write_data_blocks()
        meta_index = bytearray()
        for name in java_hashmap_order(list(self.meta_blocks)):
            block = self._block_bytes_of(META_MAGIC, self.meta_blocks[name])
            offset = self._write(block)
            raw_name = name.encode()
            meta_index += struct.pack(">qi", offset, len(block)) + protobuf_varint(len(raw_name)) + raw_name
        # Root index key length: Hudi writes a protobuf varint (as hudi-rs reads it), which
        # equals Hadoop's VInt (what HBase reads) for first keys under 126 bytes.
        root_index = b"".join(
            struct.pack(">qi", offset, size) + protobuf_varint(len(key) + 2) + struct.pack(">h", len(key)) + key
            for offset, size, key in self._index
        )
        load_on_open = self._write(self._block_bytes_of(ROOT_INDEX_MAGIC, root_index))
        self._write(self._block_bytes_of(ROOT_INDEX_MAGIC, bytes(meta_index)))
        file_info_offset = self._write(self._block_bytes_of(FILE_INFO_MAGIC, self._file_info_block()))
        trailer_proto = b"".join(
            _pb_field(number, value)
            for number, value in (
                (1, file_info_offset),
                (2, load_on_open),
                (3, self._uncompressed),
                (5, len(self._index)),
                (6, len(self.meta_blocks)),
                (7, self._entries),
                (8, 1),  # num_data_index_levels: root only
                (9, self._first_block_offset),  # -1 (as uint64) when the file has no cells
                (10, self._last_block_offset),
                (11, COMPARATOR_CLASS.encode()),
                (12, self.codec),
            )
        )
        trailer = bytearray(TRAILER_SIZE)
        head = TRAILER_MAGIC + protobuf_varint(len(trailer_proto)) + trailer_proto
        trailer[: len(head)] = head
        trailer[-4:] = struct.pack(">i", HFILE_MAJOR_VERSION)  # minor version 0
        self._write(bytes(trailer))
        return bytes(self._out)


def write_base_hfile(
    cells: Iterable[tuple[str, bytes]] | EncodedCells,
    schema: str,
    *,
    create_time_ms: int | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
    bloom: BloomFilter | None = None,
    deflate_level: int = JAVA_DEFLATE_LEVEL,
) -> bytes:
    """A metadata-table base HFile of `cells` (record key, Avro value; or cells already encoded,
    as a columnar merge gathers them), sorted by key.

    As Hudi's `HoodieAvroHFileWriter`: file info `schema`, `minRecordKey`, `maxRecordKey`
    (empty strings for a file without cells), `bloomFilterTypeCode`, and a `bloomFilter` meta
    block holding the base64 `DYNAMIC_V0` filter over the keys. `bloom`: a filter that already
    holds every key of `cells` (the replaced base file's, extended with the keys new to it), used
    instead of hashing every key again. `deflate_level`: of its GZ blocks (Java's by default, which
    keeps the bytes Hudi's; the metadata compaction passes its own, `lakeward.metadata.compact.deflate.level`).
    """
    writer = HFileWriter(block_size=block_size, create_time_ms=create_time_ms, deflate_level=deflate_level)
    writer.add_file_info(FileInfoKey.SCHEMA, schema.encode())
    keys: Sequence[str] | pa.Array
    if isinstance(cells, EncodedCells):
        writer.extend_encoded(cells)
        count = len(cells)
        first, last = (cells.row(0).decode(), cells.row(count - 1).decode()) if count else ("", "")
        if bloom is None:  # hashed from the cells' rows
            keys = binary_array(cells.data, cells.row_starts, cells.row_lengths).cast(pa.large_string())
    else:
        pairs = list(cells)
        writer.extend([(key.encode(), value) for key, value in pairs])
        keys = [key for key, _ in pairs]
        count = len(keys)
        first, last = (keys[0], keys[-1]) if count else ("", "")
    if bloom is None:
        bloom = new_metadata_bloom_filter()
        if count:
            bloom.add_keys(keys)
    writer.add_file_info(FileInfoKey.MIN_RECORD_KEY, first.encode())
    writer.add_file_info(FileInfoKey.MAX_RECORD_KEY, last.encode())
    writer.add_file_info(FileInfoKey.BLOOM_TYPE_CODE, bloom.type_code.encode())
    writer.add_meta_block(BLOOM_FILTER_META_BLOCK, bloom.serialize().encode())
    return writer.finish()


def new_metadata_bloom_filter() -> BloomFilter:
    """An empty bloom filter of the geometry Hudi gives metadata-table HFiles."""
    return BloomFilter.create(MDT_BLOOM_NUM_ENTRIES, MDT_BLOOM_FPP, MDT_BLOOM_MAX_ENTRIES, DYNAMIC_V0)


def extended_metadata_bloom_filter(base: bytes | None, new_keys: Sequence[str]) -> BloomFilter | None:
    """The bloom filter of a base HFile (`base`: its `bloomFilter` meta block) extended with
    `new_keys`, for the file that replaces it; None (hash every key afresh) when it has none or
    could still grow rows (a parsed filter never grows, so it would fill up faster than a new one).
    Keys deleted since stay in it as false positives, which readers confirm against the cells."""
    if base is None:
        return None
    bloom = BloomFilter.deserialize(base, DYNAMIC_V0)
    if bloom.num_rows * MDT_BLOOM_NUM_ENTRIES < MDT_BLOOM_MAX_ENTRIES:
        return None
    if new_keys:
        bloom.add_keys(new_keys)
    return bloom


def write_log_block_hfile(
    cells: Mapping[str, bytes] | Iterable[tuple[str, bytes]],
    schema: str,
    *,
    create_time_ms: int | None = None,
) -> bytes:
    """The content of an `HFILE_DATA` log block: `cells` sorted by key, file info `schema` only.

    As Hudi's `HFileUtils.serializeRecordsToLogBlock`; the cells are sorted here (Hudi sorts
    them in a `TreeMap`) and a duplicate key is an error, as in Hudi.
    """
    pairs = list(cells.items()) if isinstance(cells, Mapping) else list(cells)
    pairs.sort(key=lambda kv: kv[0].encode())
    writer = HFileWriter(create_time_ms=create_time_ms)
    writer.add_file_info(FileInfoKey.SCHEMA, schema.encode())
    writer.extend([(key.encode(), value) for key, value in pairs])
    return writer.finish()
