"""Vectorised Avro encoding of flat records: the body of an Avro data block in numpy, no per-row Python.

An Avro data block (format doc 6.4) frames every record with its own big-endian int32 byte
length, then holds the record as a schemaless Avro datum. `encode_block_records` writes
those framed records for a whole Arrow table at once, byte for byte as fastavro writes
them one by one (`content.encode_avro_records`):

- every field becomes, for every row, a few encoded bytes: zigzag varints for
  int/long (and the dates, times and timestamps stored as them), little-endian IEEE for
  float/double, one byte for boolean, a varint length for string/bytes followed by the
  value's bytes, and for `["null", T]` / `[T, "null"]` unions the branch index (a varint
  too: 0 or 1 -> byte 0x00 or 0x02) before the value (nothing after it for nulls);
- each field's bounded encodings are a (rows, width) byte matrix and the bytes each row
  uses of it (a varint or a null uses fewer than the width); neighbouring matrices are put
  side by side as long as only the last one has rows of differing lengths, so a row's
  bytes are a prefix of its matrix row. String/bytes values stay in Arrow's data buffers;
- the output is one gather: for each row its pieces (matrix row prefix, value bytes,
  matrix row prefix, ...) in order, source index = piece start - output start + position,
  computed with `np.repeat` in blocks of about 512 KiB of output (the index arrays stay
  in cache).

Only flat records of primitives (and nullable unions of them) are handled; for anything
else (records, arrays, maps, enums, fixed, decimals, other unions, other logical types)
`encode_block_records` returns None and the caller encodes with fastavro.

Decoding (`decode_block_records`) goes the other way in one pass, column-wise, by polars'
(Rust) Avro reader: the block's records are handed over as they lie, as one Avro container
block whose schema starts with a 4-byte `fixed` field that swallows each record's length
prefix, so no Python touches a record. It takes records of primitives, nullable unions and
nested (nullable) records -- CDC blocks, whose `before` / `after` images are records, included.
"""

from __future__ import annotations

import copy
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import fastavro
import numpy as np
import numpy.typing as npt
import pyarrow as pa

__all__ = [
    "decode_block_records",
    "decode_blocks_records",
    "encode_block_records",
    "read_container",
    "read_long",
    "varint_sizes",
    "zigzag",
]

_U8 = npt.NDArray[np.uint8]
_I64 = npt.NDArray[np.int64]

_PRIMITIVES = frozenset({"boolean", "int", "long", "float", "double", "string", "bytes"})
#: Logical types whose bytes are exactly their physical type's (fastavro is given the schema
#: with the time ones stripped; `uuid` strings are written as the strings they are).
_LOGICAL_OK: dict[str, frozenset[str]] = {
    "int": frozenset({"date", "time-millis"}),
    "long": frozenset(
        {
            "time-micros",
            "timestamp-millis",
            "timestamp-micros",
            "timestamp-nanos",
            "local-timestamp-millis",
            "local-timestamp-micros",
            "local-timestamp-nanos",
        }
    ),
    "string": frozenset({"uuid"}),
}
#: Gather block size (output bytes): keeps the index arrays small and in cache.
_BLOCK_BYTES = 1 << 19
_INT32_MAX = 2**31 - 1
#: Varint byte count thresholds: a value needs k+1 bytes once it is >= 2**(7k).
_VARINT_STEPS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)


@dataclass(frozen=True)
class _Field:
    name: str
    kind: str  # one of _PRIMITIVES
    #: Union branch index of null (0 for ["null", T], 1 for [T, "null"]); None: not nullable.
    null_index: int | None


@dataclass
class _Small:
    """Bounded bytes of every row: row i uses mat[i, :lens[i]]."""

    mat: _U8
    lens: _I64 | int  # an int: every row uses that many bytes (all of mat's columns)


@dataclass
class _Data:
    """Variable bytes of every row: row i is buf[starts[i] : starts[i] + lens[i]].

    An int `starts` is a stride (row i starts at i * starts); an int `lens` is every row's length.
    """

    buf: _U8
    starts: _I64 | int
    lens: _I64 | int


# -- schema --------------------------------------------------------------------------------
def _primitive(node: Any) -> str | None:
    """The primitive type name of a non-union schema node, None if it is anything else."""
    if isinstance(node, str):
        return node if node in _PRIMITIVES else None
    if not isinstance(node, dict):
        return None
    typ = node.get("type")
    if not isinstance(typ, str) or typ not in _PRIMITIVES:
        return None
    logical = node.get("logicalType")
    if logical is not None and logical not in _LOGICAL_OK.get(typ, ()):
        return None
    return typ


def _plan(avro_schema: Any) -> list[_Field] | None:
    """The fields of a flat record schema of supported types, None if it is not one."""
    if not isinstance(avro_schema, dict) or avro_schema.get("type") != "record":
        return None
    fields = avro_schema.get("fields")
    if not isinstance(fields, list):
        return None
    out: list[_Field] = []
    for field in fields:
        if not isinstance(field, dict) or not isinstance(field.get("name"), str):
            return None
        node = field.get("type")
        null_index: int | None = None
        if isinstance(node, list):
            if len(node) != 2 or node.count("null") != 1:
                return None
            null_index = node.index("null")
            node = node[1 - null_index]
        kind = _primitive(node)
        if kind is None:
            return None
        out.append(_Field(field["name"], kind, null_index))
    return out


# -- Arrow buffers -------------------------------------------------------------------------
def _int_dtype(t: pa.DataType, kind: str) -> str | None:
    """numpy dtype of the values of an Arrow array written as an Avro int or long (None: not one).

    An Avro int takes Arrow types of 32 bits at most: fastavro refuses larger values in a
    union (and writes them as longs elsewhere), so those are left to the fastavro fallback.
    """
    if pa.types.is_timestamp(t) or pa.types.is_time64(t):
        return "<i8" if kind == "long" else None
    if pa.types.is_date32(t) or pa.types.is_time32(t):
        return "<i4"
    if not pa.types.is_integer(t) or t.bit_width > (64 if kind == "long" else 32):
        return None
    if pa.types.is_signed_integer(t):
        return f"<i{t.bit_width // 8}"
    return f"<u{t.bit_width // 8}" if t.bit_width < (64 if kind == "long" else 32) else None


def _bits(buf: pa.Buffer | None, offset: int, n: int) -> npt.NDArray[np.bool_]:
    """n bits of an Arrow bitmap (LSB first) from bit `offset`."""
    if buf is None:
        return np.ones(n, dtype=np.bool_)
    raw = np.frombuffer(buf, dtype=np.uint8)
    return np.unpackbits(raw, count=offset + n, bitorder="little")[offset:].astype(np.bool_)


def _fixed(arr: pa.Array, dtype: str) -> npt.NDArray[Any]:
    """The values buffer of a fixed-width array (n values from its offset; null slots arbitrary)."""
    dt = np.dtype(dtype)
    return np.frombuffer(arr.buffers()[1], dtype=dt, count=len(arr), offset=arr.offset * dt.itemsize)


def _compatible(kind: str, t: pa.DataType) -> bool:
    if kind == "boolean":
        return bool(pa.types.is_boolean(t))
    if kind in ("int", "long"):
        return _int_dtype(t, kind) is not None
    if kind == "float":
        return bool(pa.types.is_float32(t))
    if kind == "double":
        return bool(pa.types.is_float64(t))
    if kind == "string":
        return bool(pa.types.is_string(t) or pa.types.is_large_string(t))
    return bool(pa.types.is_binary(t) or pa.types.is_large_binary(t))  # bytes


# -- encodings -----------------------------------------------------------------------------
def varint_sizes(u: npt.NDArray[np.uint64]) -> _I64:
    """How many bytes Avro's base-128 varint of each unsigned value takes (1 to 10)."""
    return np.searchsorted(_VARINT_STEPS, u, side="right").astype(np.int64) + 1


def _varints(u: npt.NDArray[np.uint64]) -> tuple[_U8, _I64]:
    """Avro varint bytes of unsigned values: a (n, k) matrix (k bytes for the largest) and lengths."""
    lens = varint_sizes(u)
    width = int(lens.max()) if len(lens) else 1
    mat = np.empty((len(u), width), dtype=np.uint8)
    for k in range(width):
        group = ((u >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
        if k < width - 1:
            group |= (lens > k + 1).astype(np.uint8) << np.uint8(7)
        mat[:, k] = group
    return mat, lens


def zigzag(v: npt.NDArray[Any]) -> npt.NDArray[np.uint64]:
    """Avro's zigzag mapping of signed longs to unsigned: 0, -1, 1, -2 ... -> 0, 1, 2, 3 ..."""
    s = v.astype(np.int64, copy=False)
    return (s.view(np.uint64) << np.uint64(1)) ^ (s >> np.int64(63)).view(np.uint64)


def _with_branch(field: _Field, valid: npt.NDArray[np.bool_] | None, mat: _U8, lens: _I64 | int) -> _Small:
    """`mat` (the value bytes) behind the union branch byte; null rows keep the branch byte only."""
    if field.null_index is None:
        return _Small(mat, lens)
    n = mat.shape[0]
    out = np.empty((n, mat.shape[1] + 1), dtype=np.uint8)
    out[:, 1:] = mat
    value_byte, null_byte = (0x02, 0x00) if field.null_index == 0 else (0x00, 0x02)
    if valid is None:
        out[:, 0] = value_byte
        return _Small(out, lens + 1)
    out[:, 0] = np.where(valid, value_byte, null_byte)
    return _Small(out, np.where(valid, lens, 0).astype(np.int64) + 1)


def _encode_field(field: _Field, arr: pa.Array) -> list[_Small | _Data]:
    """The encoded pieces of one field's values (an Arrow array of a type `_compatible` with it)."""
    t = arr.type
    n = len(arr)
    valid: npt.NDArray[np.bool_] | None = None
    if arr.null_count:
        if field.null_index is None:
            raise ValueError(f"field {field.name!r} is not nullable in the Avro schema but has null values")
        valid = _bits(arr.buffers()[0], arr.offset, n)
    kind = field.kind
    if kind == "boolean":
        values = _bits(arr.buffers()[1], arr.offset, n)
        return [_with_branch(field, valid, values.astype(np.uint8).reshape(n, 1), 1)]
    if kind in ("int", "long"):
        dtype = _int_dtype(t, kind)
        assert dtype is not None
        u = zigzag(_fixed(arr, dtype))
        if valid is not None:
            u = np.where(valid, u, np.uint64(0))
        mat, lens = _varints(u)
        return [_with_branch(field, valid, mat, lens)]
    if kind == "float":
        bits = _fixed(arr, "<u4")
        # fastavro goes through a C double: signalling NaNs come back quiet.
        nan = (bits & np.uint32(0x7F800000)) == np.uint32(0x7F800000)
        nan &= (bits & np.uint32(0x007FFFFF)) != 0
        if nan.any():
            bits = np.where(nan, bits | np.uint32(0x00400000), bits)
        mat = np.ascontiguousarray(bits, dtype="<u4").view(np.uint8).reshape(n, 4)
        return [_with_branch(field, valid, mat, 4)]
    if kind == "double":
        mat = np.ascontiguousarray(_fixed(arr, "<u8")).view(np.uint8).reshape(n, 8)
        return [_with_branch(field, valid, mat, 8)]
    # string / bytes: varint length, then the bytes
    large = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
    buffers = arr.buffers()
    offsets = np.frombuffer(
        buffers[1], dtype="<i8" if large else "<i4", count=n + 1, offset=arr.offset * (8 if large else 4)
    ).astype(np.int64)
    first, last = (int(offsets[0]), int(offsets[-1])) if n else (0, 0)
    data = np.frombuffer(buffers[2], dtype=np.uint8)[first:last] if buffers[2] is not None else np.empty(0, np.uint8)
    starts = offsets[:-1] - first
    lens = np.diff(offsets)
    if valid is not None:
        lens = np.where(valid, lens, 0)
    mat, vlens = _varints(zigzag(lens))
    return [_with_branch(field, valid, mat, vlens), _Data(data, starts, lens)]


# -- assembly ------------------------------------------------------------------------------
def _joined(run: list[_Small], n: int) -> _Data:
    """Bounded pieces side by side as one matrix; only the last may use fewer bytes than its width."""
    mat = np.concatenate([p.mat for p in run], axis=1) if len(run) > 1 else run[0].mat
    width = mat.shape[1]
    last = run[-1]
    lens = last.lens + (width - last.mat.shape[1])
    return _Data(mat.reshape(-1), width, lens)


def _gather(pieces: list[_Data], row_ends: _I64) -> bytes:
    """Every row's pieces in order, rows one after another (`row_ends`: cumulated row lengths)."""
    n = len(row_ends)
    total = int(row_ends[-1])
    bases = np.cumsum([0] + [p.buf.size for p in pieces[:-1]]).tolist()
    src = np.concatenate([p.buf for p in pieces])
    out = np.empty(total, dtype=np.uint8)
    index_type = np.int32 if max(src.size, total) <= _INT32_MAX else np.int64
    # Row blocks of about _BLOCK_BYTES output bytes (at least one row each).
    cuts = np.searchsorted(row_ends, np.arange(_BLOCK_BYTES, total, _BLOCK_BYTES), side="left") + 1
    bounds = np.unique(np.concatenate([[0], cuts, [n]])).tolist()
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        starts = np.empty((hi - lo, len(pieces)), dtype=index_type)
        lens = np.empty((hi - lo, len(pieces)), dtype=index_type)
        for k, (piece, base) in enumerate(zip(pieces, bases)):
            if isinstance(piece.starts, int):
                starts[:, k] = base + piece.starts * np.arange(lo, hi)
            else:
                starts[:, k] = piece.starts[lo:hi] + base
            lens[:, k] = piece.lens if isinstance(piece.lens, int) else piece.lens[lo:hi]
        flat_lens = lens.reshape(-1)
        # Source index of output byte j of a piece starting at output s: start + (j - s).
        shift = starts.reshape(-1)
        shift -= np.cumsum(flat_lens, dtype=index_type)
        shift += flat_lens
        index = np.repeat(shift, flat_lens)
        index += np.arange(index.size, dtype=index_type)
        out_lo = int(row_ends[lo - 1]) if lo else 0
        np.take(src, index, out=out[out_lo : out_lo + index.size])
    return out.tobytes()


def encode_block_records(table: pa.Table, avro_schema: dict[str, Any]) -> bytes | None:
    """Every row of `table` as [int32 big-endian length][schemaless Avro datum of `avro_schema`].

    `avro_schema` is a parsed record schema (fastavro's `parse_schema` output or plain
    JSON); columns are found by field name and may be chunked or sliced. Dates, times and
    timestamps may come as their Arrow types or as the ints Avro stores them as. Returns
    None when the schema (or a column's Arrow type) is not one this encoder handles: the
    caller then encodes with fastavro. Raises ValueError for nulls in a field whose Avro
    type is not nullable.
    """
    fields = _plan(avro_schema)
    if fields is None:
        return None
    n = table.num_rows
    columns: list[pa.Array] = []
    for field in fields:
        index = table.schema.get_field_index(field.name)
        if index < 0:  # missing or ambiguous
            return None
        column = table.column(index)
        columns.append(column.combine_chunks() if column.num_chunks != 1 else column.chunk(0))
    if not all(_compatible(field.kind, arr.type) for field, arr in zip(fields, columns)):
        return None
    if n == 0:
        return b""
    pieces: list[_Small | _Data] = []
    for field, arr in zip(fields, columns):
        pieces.extend(_encode_field(field, arr))
    record_lens = np.zeros(n, dtype=np.int64)
    for piece in pieces:
        record_lens += piece.lens
    if int(record_lens.max()) > _INT32_MAX:
        return None  # cannot be framed; fastavro's path raises
    frame = record_lens.astype(">i4").view(np.uint8).reshape(n, 4)
    # Bounded pieces side by side, up to the first one whose rows differ in length (or a value).
    merged: list[_Data] = []
    run: list[_Small] = [_Small(frame, 4)]
    for piece in pieces:
        if isinstance(piece, _Data):
            if run:
                merged.append(_joined(run, n))
                run = []
            merged.append(piece)
            continue
        run.append(piece)
        if not isinstance(piece.lens, int):
            merged.append(_joined(run, n))
            run = []
    if run:
        merged.append(_joined(run, n))
    row_ends = np.cumsum(record_lens + 4)
    if len(merged) == 1 and merged[0].buf.size == int(row_ends[-1]):
        return merged[0].buf.tobytes()  # one matrix without unused bytes: already the output
    return _gather(merged, row_ends)


# -- decoding ------------------------------------------------------------------------------
#: Field prepended to the container schema: swallows each record's big-endian length prefix.
_FRAME_FIELD = "__lakeward_frame"
CONTAINER_SYNC = b"lakeward-avro-sy"
_DECODABLE = frozenset({"boolean", "int", "long", "float", "double", "string", "bytes"})
_DECODED_TYPES = (pa.bool_(), pa.int32(), pa.int64(), pa.float32(), pa.float64(), pa.string(), pa.binary())


class _Unsupported(Exception):
    """The schema holds something the one-pass decoder does not take."""


def _inline(node: Any, named: dict[str, Any], namespace: str | None, counter: list[int]) -> Any:
    """`node` with every named-record reference replaced by its definition (records renamed
    uniquely, so a type may appear twice); raises _Unsupported for anything but primitives,
    two-branch nullable unions and records."""
    if isinstance(node, str):
        if node in _DECODABLE:
            return node
        definition = named.get(node) or (named.get(f"{namespace}.{node}") if namespace else None)
        if definition is None:
            raise _Unsupported(node)
        return _inline(definition, named, namespace, counter)
    if isinstance(node, list):
        if len(node) != 2 or node.count("null") != 1:
            raise _Unsupported("union")
        return [b if b == "null" else _inline(b, named, namespace, counter) for b in node]
    if not isinstance(node, dict):
        raise _Unsupported(repr(node))
    typ = node.get("type")
    if typ == "record":
        name = node.get("name")
        space = node.get("namespace", namespace)
        if not isinstance(name, str) or not isinstance(node.get("fields"), list):
            raise _Unsupported("record")
        full = name if "." in name or not space else f"{space}.{name}"
        named.setdefault(full, node)
        named.setdefault(name, node)
        counter[0] += 1
        unique = f"r{counter[0]}"
        fields = [
            {"name": f["name"], "type": _inline(f["type"], named, space, counter)}
            for f in node["fields"]
            if isinstance(f, dict) and isinstance(f.get("name"), str)
        ]
        if len(fields) != len(node["fields"]):
            raise _Unsupported("field")
        return {"type": "record", "name": unique, "fields": fields}
    if isinstance(typ, str) and typ in _DECODABLE and node.get("logicalType") in (None, "uuid"):
        return typ
    raise _Unsupported(repr(typ))


@lru_cache(maxsize=64)
def _framed_header(stripped_schema_json: str) -> bytes | None:
    """Container header for a block's records with their length prefixes (None: unsupported schema)."""
    try:
        record = _inline(json.loads(stripped_schema_json), {}, None, [0])
    except (_Unsupported, json.JSONDecodeError):
        return None
    if not isinstance(record, dict) or record.get("type") != "record":
        return None
    framed = copy.copy(record)
    framed["fields"] = [{"name": _FRAME_FIELD, "type": {"type": "fixed", "name": "LakewardFrame", "size": 4}}]
    framed["fields"] += record["fields"]
    out = io.BytesIO()
    try:
        fastavro.writer(out, fastavro.parse_schema(framed), [], codec="null", sync_marker=CONTAINER_SYNC)
    except Exception:  # fastavro's schema errors have several types; the per-record path decides
        return None
    return out.getvalue()


def _decodable(t: pa.DataType) -> bool:
    if pa.types.is_struct(t):
        return all(_decodable(f.type) for f in t)
    return t in _DECODED_TYPES


def _avro_long(value: int) -> bytes:
    """`value` as Avro writes a long: zig-zag, then a base-128 varint."""
    out = bytearray()
    value = (value << 1) ^ (value >> 63)
    while value & ~0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_long(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """The Avro long (zig-zag varint) at `pos` and the position after it (IndexError: the bytes end inside it)."""
    shift = result = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


#: pyarrow casts string and binary views (to `string`, inside structs too) from version 16 on.
_ARROW_VIEWS = int(pa.__version__.split(".")[0]) >= 16


def read_container(container: bytes, *, views: bool = False) -> pa.Table | None:
    """An Avro object container decoded by polars' (Rust) reader, None if polars cannot decode it.

    Strings and bytes come as Arrow large strings and binaries, or with `views` as string and
    binary views: polars holds them as views, so that hand-over copies nothing, and a caller
    that casts them to another type anyway saves the conversion to large strings (half the
    CPU of converting a container of CDC images to `string`).
    """
    import polars as pl  # lazy: polars takes ~0.15 s to import, too slow for CLI start-up

    try:
        frame = pl.read_avro(io.BytesIO(container))
        return frame.to_arrow(compat_level=pl.CompatLevel.newest()) if views and _ARROW_VIEWS else frame.to_arrow()
    except (Exception, pl.exceptions.PanicException):  # several unrelated types (a panic on short bytes)
        return None


def frame_container(header: bytes, count: int, body: bytes | memoryview) -> bytes:
    """An Avro object container holding one block of `count` records: `header` (written with
    `CONTAINER_SYNC` as its sync marker), the block's count and size, `body`, the marker."""
    return b"".join([header, _avro_long(count), _avro_long(len(body)), body, CONTAINER_SYNC])


def decode_block_records(content: bytes, count: int, stripped_schema_json: str, physical: pa.Schema) -> pa.Table | None:
    """The records of an Avro data block's content (version and count at bytes 0-8) in one pass.

    `stripped_schema_json`: the block's `SCHEMA` with time logical types removed; `physical`:
    its Arrow schema with those columns as ints. Returns None when the schema holds types
    this path does not take, or on any doubt about the bytes (the length prefixes must add
    up to the content exactly); the caller then decodes record by record, with precise errors.
    """
    if count <= 0:
        return None
    return decode_blocks_records([content], [count], stripped_schema_json, physical)


def decode_blocks_records(
    contents: Sequence[bytes], counts: Sequence[int], stripped_schema_json: str, physical: pa.Schema
) -> pa.Table | None:
    """The records of several Avro data blocks of one schema, in block order, in one pass.

    Each block becomes one block of the same Avro container, so polars decodes them all in
    one call (a call has a fixed cost of about a millisecond: a file group's `.cdc` blocks are
    many and small). Every block's length prefixes must add up to its content exactly, as in
    `decode_block_records`; any doubt returns None (the caller decodes block by block).
    """
    if len(contents) != len(counts) or any(c <= 0 for c in counts) or not contents:
        return None
    if not _decodable_schema(physical):
        return None
    header = _framed_header(stripped_schema_json)
    if header is None:
        return None
    bodies = [memoryview(c)[8:] for c in contents]
    parts: list[bytes | memoryview] = [header]
    for count, body in zip(counts, bodies):
        parts += [_avro_long(count), _avro_long(len(body)), body, CONTAINER_SYNC]
    container = b"".join(parts)
    total = sum(counts)
    table = read_container(container, views=True)  # cast to `physical` below
    if table is None or table.num_rows != total or table.column_names != [_FRAME_FIELD, *physical.names]:
        return None
    frames = table.column(0).combine_chunks().cast(pa.binary())
    offsets = np.frombuffer(frames.buffers()[1], dtype=np.int32, count=total + 1, offset=frames.offset * 4)
    if offsets[-1] - offsets[0] != 4 * total:
        return None
    lengths = np.frombuffer(frames.buffers()[2], dtype=">i4", count=total, offset=int(offsets[0]))
    if (lengths < 0).any():
        return None
    starts = np.concatenate([[0], np.cumsum(counts[:-1], dtype=np.int64)]).astype(np.int64)
    per_block = np.add.reduceat(lengths.astype(np.int64), starts)
    expected = np.array([len(b) for b in bodies], dtype=np.int64) - 4 * np.asarray(counts, dtype=np.int64)
    if not np.array_equal(per_block, expected):
        return None
    try:
        return table.drop_columns([_FRAME_FIELD]).cast(physical)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


@lru_cache(maxsize=64)
def _decodable_schema(physical: pa.Schema) -> bool:
    return all(_decodable(f.type) for f in physical)
