"""Log format version 1: how blocks are framed in a log file (format doc 6.1, 6.3).

A log file is a sequence of blocks, no file header. Each block, integers big-endian:

    magic "#HUDI#" | long blockSize | int version (1) | int type | header map |
    long content length | content | footer map | long totalBlockLength

`blockSize` counts the bytes after itself through the trailing long; `totalBlockLength`
counts the magic through the footer (the whole block minus the trailing long), so it is
always `blockSize + 6`.

Corrupt blocks are detected as Hudi's `HoodieLogFileReader` does, by the magic and the
sizes: a block is sound when its magic is in place, `blockSize` does not run past the
end of the file and the trailing long agrees with `blockSize`. Here the inner structure
must also add up exactly (version, type, header, content length, footer). Hudi also
checks that a magic (or the end of the file) follows; that check is not made here: it
would condemn a complete block because of damage AFTER it (for instance a torn next
block), and the exact inner structure already catches a wrong `blockSize`. Whatever
follows a sound block is judged on its own: bytes that do not form a sound block are
reported as one `CorruptBlock` up to the next magic (or the end of the file), and
scanning resumes there. So a torn or truncated write never hides the complete blocks
before it, and a damaged block in the middle does not hide the ones after it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa

from lakeward.core.exceptions import CorruptTableError, LakewardError
from lakeward.core.file_group.log_file.content import (
    decode_avro_blocks,
    decode_avro_records,
    decode_delete_records,
    decode_parquet_records,
)
from lakeward.core.file_group.log_file.log_block import (
    AvroDataBlock,
    BlockType,
    CdcDataBlock,
    CommandBlock,
    DeleteBlock,
    Header,
    HeaderKey,
    LogBlock,
    OpaqueBlock,
    ParquetDataBlock,
)

MAGIC = b"#HUDI#"
LOG_FORMAT_VERSION = 1

_LONG = struct.Struct(">q")
_INT = struct.Struct(">i")
_TWO_INTS = struct.Struct(">ii")
#: Smallest sound blockSize: version, type, two empty maps, content length, trailing long.
_MIN_BLOCK_SIZE = 4 + 4 + 4 + 8 + 4 + 8


def encode_header(header: Mapping[HeaderKey, str]) -> bytes:
    """A header or footer map: int count, then per entry int key ordinal, int length, UTF-8 value."""
    parts = [_INT.pack(len(header))]
    for key, value in header.items():
        raw = value.encode("utf-8")
        parts.append(_TWO_INTS.pack(int(key), len(raw)))
        parts.append(raw)
    return b"".join(parts)


def encode_block(block: LogBlock) -> bytes:
    """The bytes of one framed block (log format version 1)."""
    content = block.content()
    body = b"".join(
        (
            _TWO_INTS.pack(LOG_FORMAT_VERSION, int(block.block_type)),
            encode_header(block.header),
            _LONG.pack(len(content)),
            content,
            encode_header(block.footer),
        )
    )
    block_size = len(body) + _LONG.size
    return b"".join((MAGIC, _LONG.pack(block_size), body, _LONG.pack(len(MAGIC) + block_size)))


@dataclass(frozen=True)
class RawBlock:
    """A soundly framed block whose content is not decoded yet."""

    offset: int
    length: int
    block_type: BlockType
    header: Header
    footer: Header
    content: bytes

    @property
    def instant_time(self) -> str | None:
        return self.header.get(HeaderKey.INSTANT_TIME)


@dataclass(frozen=True)
class CorruptBlock:
    """Bytes of a log file that do not form a sound block (torn write, truncation, damage)."""

    offset: int
    length: int
    reason: str
    #: The `INSTANT_TIME` of the torn block, when its header survived (a truncated block
    #: usually keeps it); None when the bytes give no readable header (random damage).
    instant_time: str | None = None
    #: The block type its surviving header gives (None with `instant_time` None).
    block_type: BlockType | None = None


class _Malformed(Exception):
    """Inner structure of a framed block does not add up (becomes a CorruptBlock)."""


def _read_map(data: bytes, pos: int, end: int) -> tuple[dict[HeaderKey, str], int]:
    if pos + 4 > end:
        raise _Malformed("header/footer map runs past the block")
    (count,) = _INT.unpack_from(data, pos)
    pos += 4
    if count < 0 or count > 64:
        raise _Malformed(f"header/footer map claims {count} entries")
    out: dict[HeaderKey, str] = {}
    for _ in range(count):
        if pos + 8 > end:
            raise _Malformed("header/footer entry runs past the block")
        ordinal, length = _TWO_INTS.unpack_from(data, pos)
        pos += 8
        if length < 0 or pos + length > end:
            raise _Malformed(f"header/footer value of {length} bytes runs past the block")
        try:
            key = HeaderKey(ordinal)
        except ValueError:
            raise _Malformed(f"unknown header key ordinal {ordinal}") from None
        try:
            out[key] = data[pos : pos + length].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _Malformed(f"header value is not UTF-8: {exc}") from None
        pos += length
    return out, pos


def _frame_at(data: bytes, pos: int) -> RawBlock:
    """The sound block starting at `pos`, else _Malformed saying why not."""
    n = len(data)
    if data[pos : pos + len(MAGIC)] != MAGIC:
        raise _Malformed("no magic where a block should start")
    if pos + 14 > n:
        raise _Malformed("block size runs past the end of the file")
    (block_size,) = _LONG.unpack_from(data, pos + 6)
    end = pos + 14 + block_size
    if block_size < _MIN_BLOCK_SIZE:
        raise _Malformed(f"block size {block_size} is too small")
    if end > n:
        raise _Malformed(f"block size {block_size} runs {end - n} bytes past the end of the file")
    (total,) = _LONG.unpack_from(data, end - 8)
    if total != block_size + len(MAGIC):
        raise _Malformed(f"trailing block length {total} does not match block size {block_size}")
    body_end = end - 8
    version, type_code = _TWO_INTS.unpack_from(data, pos + 14)
    if version != LOG_FORMAT_VERSION:
        raise _Malformed(f"log format version {version} (only version 1 is read)")
    try:
        block_type = BlockType(type_code)
    except ValueError:
        raise _Malformed(f"unknown block type {type_code}") from None
    header, p = _read_map(data, pos + 22, body_end)
    if p + 8 > body_end:
        raise _Malformed("content length runs past the block")
    (content_length,) = _LONG.unpack_from(data, p)
    p += 8
    if content_length < 0 or p + content_length > body_end:
        raise _Malformed(f"content of {content_length} bytes runs past the block")
    content = data[p : p + content_length]
    footer, p = _read_map(data, p + content_length, body_end)
    if p != body_end:
        raise _Malformed(f"{body_end - p} unexplained bytes before the trailing block length")
    return RawBlock(pos, end - pos, block_type, header, footer, content)


def _surviving_header(data: bytes, pos: int, stop: int) -> tuple[str | None, BlockType | None]:
    """The `INSTANT_TIME` and block type in the header of a torn block at `pos`, if the header is intact.

    Lets a reader tell a torn block of a write that never completed (skipped, as Hudi
    does) from damage to a completed write's block (an error).
    """
    if data[pos : pos + len(MAGIC)] != MAGIC or pos + 22 > stop:
        return None, None
    version, type_code = _TWO_INTS.unpack_from(data, pos + 14)
    if version != LOG_FORMAT_VERSION or type_code not in BlockType._value2member_map_:
        return None, None
    try:
        header, _ = _read_map(data, pos + 22, stop)
    except _Malformed:
        return None, None
    instant = header.get(HeaderKey.INSTANT_TIME)
    return instant, BlockType(type_code) if instant is not None else None


def scan_blocks(data: bytes) -> Iterator[RawBlock | CorruptBlock]:
    """Every block of a log file's bytes, in order; damaged stretches come out as CorruptBlock.

    After a corrupt block, scanning resumes at the next magic (as Hudi does), so sound
    blocks after a damaged one are still found.
    """
    pos, n = 0, len(data)
    while pos < n:
        try:
            block = _frame_at(data, pos)
        except _Malformed as exc:
            following = data.find(MAGIC, pos + 1)
            stop = following if following != -1 else n
            yield CorruptBlock(pos, stop - pos, str(exc), *_surviving_header(data, pos, stop))
            pos = stop
            continue
        yield block
        pos += block.length


@dataclass(frozen=True)
class DecodedTogether:
    """Avro-encoded blocks (data or CDC) of one `SCHEMA`, decoded in one column-wise pass."""

    #: Positions of the blocks among the raw blocks given, in order.
    positions: list[int]
    #: Their records, block after block.
    records: pa.Table
    #: Each block's record count.
    counts: list[int]

    def slices(self) -> Iterator[tuple[int, pa.Table]]:
        """(position, records) of each block."""
        start = 0
        for position, n in zip(self.positions, self.counts):
            yield position, self.records.slice(start, n)
            start += n


def decode_avro_together(raws: Sequence[RawBlock]) -> list[DecodedTogether]:
    """The Avro data and CDC data blocks among `raws` that share a `SCHEMA`, decoded one pass
    per schema (a pass has a fixed cost of about a millisecond, and log and `.cdc` blocks
    are many and small). Blocks left out (alone with their schema, or ones the pass declines)
    are for `decode_block`, which raises the precise error for damaged bytes."""
    by_schema: dict[tuple[BlockType, str], list[int]] = {}
    for i, raw in enumerate(raws):
        schema = raw.header.get(HeaderKey.SCHEMA)
        if raw.block_type in (BlockType.AVRO_DATA, BlockType.CDC_DATA) and schema is not None:
            by_schema.setdefault((raw.block_type, schema), []).append(i)
    out = []
    for (_, schema), positions in by_schema.items():
        if len(positions) < 2:
            continue
        together = decode_avro_blocks([raws[i].content for i in positions], schema)
        if together is not None:
            out.append(DecodedTogether(positions, *together))
    return out


def decode_blocks(raws: Sequence[RawBlock]) -> list[LogBlock]:
    """`decode_block` of each of `raws`, the Avro blocks of one schema decoded together."""
    records: dict[int, pa.Table] = {}
    for group in decode_avro_together(raws):
        records.update(group.slices())
    out: list[LogBlock] = []
    for i, raw in enumerate(raws):
        if i not in records:
            out.append(decode_block(raw))
            continue
        header, footer = dict(raw.header), dict(raw.footer)
        if raw.block_type is BlockType.CDC_DATA:
            out.append(CdcDataBlock(header=header, footer=footer, records=records[i]))
        else:
            out.append(AvroDataBlock(header=header, footer=footer, records=records[i]))
    return out


def decode_block(raw: RawBlock) -> LogBlock:
    """The block model of a soundly framed block; its content is decoded here.

    A content that cannot be decoded although the framing is sound is not a torn write
    but damage or an unsupported variant: CorruptTableError, never a silent skip.
    """
    header, footer = dict(raw.header), dict(raw.footer)
    try:
        if raw.block_type is BlockType.AVRO_DATA:
            schema = raw.header.get(HeaderKey.SCHEMA)
            if schema is None:
                raise CorruptTableError("Avro data block has no SCHEMA header")
            return AvroDataBlock(header=header, footer=footer, records=decode_avro_records(raw.content, schema))
        if raw.block_type is BlockType.PARQUET_DATA:
            return ParquetDataBlock(header=header, footer=footer, records=decode_parquet_records(raw.content))
        if raw.block_type is BlockType.DELETE:
            return DeleteBlock(header=header, footer=footer, records=decode_delete_records(raw.content))
        if raw.block_type is BlockType.COMMAND:
            return CommandBlock(header=header, footer=footer)
        if raw.block_type is BlockType.CDC_DATA:
            schema = raw.header.get(HeaderKey.SCHEMA)
            if schema is None:
                raise CorruptTableError("CDC data block has no SCHEMA header")
            return CdcDataBlock(header=header, footer=footer, records=decode_avro_records(raw.content, schema))
        return OpaqueBlock(header=header, footer=footer, kind=raw.block_type, raw_content=raw.content)
    except LakewardError as exc:
        raise CorruptTableError(f"{raw.block_type.name} block at byte {raw.offset}: {exc}") from exc
