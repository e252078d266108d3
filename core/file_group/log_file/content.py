"""Block contents of Hudi log files: records as Avro or Parquet, delete lists, in and out of Arrow.

Format doc 6.4-6.6. Every function here is pure (bytes and Arrow in, bytes and Arrow out):

- Avro data block (type 3): int content version (3), int record count, then per record an
  int byte length and the record as a schemaless Avro datum of the header's `SCHEMA`.
- Parquet data block (type 5): one complete Parquet file.
- Delete block (type 1, content version 3): int version, int payload length, then one Avro
  datum of `HoodieDeleteRecordList` (record key, partition path, ordering value). The
  ordering value is a union of one-field wrapper records (`IntWrapper`, `LongWrapper`,
  ...), as Java's `HoodieAvroUtils.wrapValueIntoAvro` writes it and hudi-rs 0.5.0 reads
  it; the flat union of primitives in the format doc's 6.6 decodes the same bytes only
  for small values (its branch 2, `long`, is the wrapper list's `IntWrapper`).

Avro is encoded and decoded with fastavro, one datum per record (the format frames every
record with its own length, so there is no container to hand over whole). To keep the
per-record work small, date and timestamp columns travel as their physical ints: the
Avro schema given to fastavro has those logical types removed (the bytes are the same)
and Arrow casts the ints back. Decimals keep their logical type (fastavro <-> Decimal).

Delete blocks are decoded column-wise by polars when every entry's ordering value takes one
wrapper (as Hudi writes them; `_decode_deletes_column_wise`), else by fastavro, entry by entry.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lakeward.core.exceptions import CorruptTableError, SchemaError
from lakeward.core.file_group.log_file import avro_vector
from lakeward.core.schema import arrow_schema_from_avro, conform_batch

#: Content version of Avro data blocks and delete blocks written by Hudi 0.14/0.15 (and here).
AVRO_BLOCK_VERSION = 3
DELETE_BLOCK_VERSION = 3
#: Hudi's default codec for Parquet log blocks (`hoodie.parquet.compression.codec` in the fixtures).
DEFAULT_PARQUET_BLOCK_COMPRESSION = "gzip"

DELETE_RECORD_KEY = "record_key"
DELETE_PARTITION_PATH = "partition_path"
DELETE_ORDERING_VALUE = "ordering_value"

_INT = struct.Struct(">i")
_TWO_INTS = struct.Struct(">ii")
_PHYSICAL_LOGICAL_TYPES = frozenset(
    {
        "date",
        "time-millis",
        "time-micros",
        "timestamp-millis",
        "timestamp-micros",
        "timestamp-nanos",
        "local-timestamp-millis",
        "local-timestamp-micros",
        "local-timestamp-nanos",
    }
)


# -- schemas -------------------------------------------------------------------------------
def _strip_time_logical_types(node: Any) -> Any:
    """The Avro schema with date/time/timestamp logical types removed (same binary encoding)."""
    if isinstance(node, list):
        return [_strip_time_logical_types(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: v for k, v in node.items() if not (k == "logicalType" and v in _PHYSICAL_LOGICAL_TYPES)}
    if "fields" in out:
        out["fields"] = [dict(f, type=_strip_time_logical_types(f["type"])) for f in out["fields"]]
    for key in ("items", "values"):
        if key in out:
            out[key] = _strip_time_logical_types(out[key])
    if isinstance(out.get("type"), dict | list):
        out["type"] = _strip_time_logical_types(out["type"])
    return out


def _physical_type(t: pa.DataType) -> pa.DataType:
    """Arrow type with dates and timestamps replaced by the ints Avro stores them as."""
    if pa.types.is_timestamp(t) or pa.types.is_time64(t):
        return pa.int64()
    if pa.types.is_date32(t) or pa.types.is_time32(t):
        return pa.int32()
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_physical_type(f.type)) for f in t])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        ctor = pa.list_ if pa.types.is_list(t) else pa.large_list
        return ctor(t.value_field.with_type(_physical_type(t.value_type)))
    if pa.types.is_map(t):
        return pa.map_(t.key_field, t.item_field.with_type(_physical_type(t.item_type)))
    return t


def _has_physical_change(t: pa.DataType) -> bool:
    return _physical_type(t) != t


@lru_cache(maxsize=64)
def _schemas(schema_json: str) -> tuple[Any, pa.Schema]:
    """(fastavro schema with time logical types stripped, Arrow schema) of a header `SCHEMA`."""
    try:
        parsed = json.loads(schema_json)
    except json.JSONDecodeError as exc:
        raise CorruptTableError(f"log block SCHEMA header is not valid JSON: {exc}") from exc
    arrow = arrow_schema_from_avro(parsed)
    return fastavro.parse_schema(_strip_time_logical_types(parsed)), arrow


def arrow_schema_of(schema_json: str) -> pa.Schema:
    """The Arrow schema of the records a data block with this `SCHEMA` header holds."""
    return _schemas(schema_json)[1]


# -- Avro data blocks ----------------------------------------------------------------------
def _map_to_dict(item: Callable[[Any], Any] | None) -> Callable[[Any], Any]:
    def convert(value: Any) -> Any:
        if value is None:
            return None
        if item is None:
            return dict(value)
        return {k: item(v) for k, v in value}

    return convert


def _to_avro_converter(t: pa.DataType) -> Callable[[Any], Any] | None:
    """Python-value fix-ups fastavro needs after Arrow's `to_pylist` (maps: pairs -> dict)."""
    if pa.types.is_map(t):
        return _map_to_dict(_to_avro_converter(t.item_type))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        inner = _to_avro_converter(t.value_type)
        if inner is None:
            return None
        return lambda v: None if v is None else [inner(x) for x in v]
    if pa.types.is_struct(t):
        converters = {f.name: c for f in t if (c := _to_avro_converter(f.type)) is not None}
        if not converters:
            return None
        return lambda v: None if v is None else {k: (converters[k](x) if k in converters else x) for k, x in v.items()}
    return None


def encode_avro_records(records: pa.Table, schema_json: str) -> bytes:
    """Avro data block content (version 3) of `records`, encoded with the header `SCHEMA`.

    `records` are conformed (cast, reordered; missing nullable columns filled with nulls)
    to the schema first, so they may come in any compatible Arrow types. Flat records of
    primitives are encoded vectorised (`avro_vector`, the same bytes); others by fastavro.
    """
    avro_schema, arrow_schema = _schemas(schema_json)
    table = conform_batch(records, arrow_schema, allow_missing=True)
    body = avro_vector.encode_block_records(table, avro_schema)
    if body is not None:
        return _TWO_INTS.pack(AVRO_BLOCK_VERSION, table.num_rows) + body
    columns: list[list[Any]] = []
    for field, column in zip(table.schema, table.columns):
        if _has_physical_change(field.type):
            column = column.cast(_physical_type(field.type))
        values = column.to_pylist()
        convert = _to_avro_converter(field.type)
        columns.append([convert(v) for v in values] if convert is not None else values)
    names = table.column_names
    out = io.BytesIO()
    out.write(_TWO_INTS.pack(AVRO_BLOCK_VERSION, table.num_rows))
    datum = io.BytesIO()
    write = fastavro.schemaless_writer
    for row in zip(*columns) if columns else ((),) * table.num_rows:
        datum.seek(0)
        datum.truncate()
        write(datum, avro_schema, dict(zip(names, row)))
        encoded = datum.getvalue()
        out.write(_INT.pack(len(encoded)))
        out.write(encoded)
    return out.getvalue()


@lru_cache(maxsize=64)
def _physical_schema(schema_json: str) -> pa.Schema:
    """The Arrow schema of a header `SCHEMA` with dates and timestamps as the ints Avro stores."""
    return pa.schema([f.with_type(_physical_type(f.type)) for f in _schemas(schema_json)[1]])


def _record_count(content: bytes) -> int:
    """The record count of an Avro data block's content (its version checked)."""
    if len(content) < 8:
        raise CorruptTableError(f"Avro data block content of {len(content)} bytes is too short")
    version, count = _TWO_INTS.unpack_from(content, 0)
    if version not in (2, AVRO_BLOCK_VERSION):
        raise CorruptTableError(f"Avro data block content version {version} is not supported (only 2 and 3)")
    if count < 0:
        raise CorruptTableError(f"Avro data block claims {count} records")
    return int(count)


def decode_avro_blocks(contents: Sequence[bytes], schema_json: str) -> tuple[pa.Table, list[int]] | None:
    """The records of several Avro data blocks of one header `SCHEMA`, decoded in one column-wise
    pass (`avro_vector.decode_blocks_records`): (all records in block order, each block's count).

    None when that pass cannot take them (the schema's types, a bad version or count, any
    doubt about the bytes): the caller then decodes block by block (`decode_avro_records`),
    which raises the precise error for damaged bytes.
    """
    try:
        counts = [_record_count(c) for c in contents]
        physical = _physical_schema(schema_json)
    except (CorruptTableError, SchemaError):
        return None
    filled = [i for i, n in enumerate(counts) if n > 0]
    if not filled:
        return None
    stripped = _stripped_schema_json(schema_json)
    picked = [contents[i] for i in filled]
    together = avro_vector.decode_blocks_records(picked, [counts[i] for i in filled], stripped, physical)
    if together is None:
        return None
    return _logical(together, physical, arrow_schema_of(schema_json)), counts


def decode_avro_records(content: bytes, schema_json: str) -> pa.Table:
    """Records of an Avro data block (content versions 2 and 3) as Arrow, in the header `SCHEMA`."""
    avro_schema, arrow_schema = _schemas(schema_json)
    count = _record_count(content)
    physical = _physical_schema(schema_json)
    fast = _decode_with_polars(content, count, schema_json, physical)
    if fast is not None:
        return _logical(fast, physical, arrow_schema)
    buf = io.BytesIO(content)
    buf.seek(8)
    read = fastavro.schemaless_reader
    rows = []
    try:
        for _ in range(count):
            (length,) = _INT.unpack(buf.read(4))
            start = buf.tell()
            rows.append(read(buf, avro_schema, None))
            if buf.tell() != start + length:
                used = buf.tell() - start
                raise CorruptTableError(f"Avro record at byte {start} is {used} bytes, framed as {length}")
    except (struct.error, EOFError, ValueError, TypeError, IndexError) as exc:
        raise CorruptTableError(f"Avro data block records cannot be decoded: {exc!r}") from exc
    if buf.tell() != len(content):
        raise CorruptTableError(f"Avro data block has {len(content) - buf.tell()} bytes after its {count} records")
    return _logical(pa.Table.from_pylist(rows, schema=physical), physical, arrow_schema)


def _logical(table: pa.Table, physical: pa.Schema, arrow_schema: pa.Schema) -> pa.Table:
    """Physical columns (ints for dates and timestamps) cast back to the schema's logical types."""
    if physical == arrow_schema:
        return table
    return pa.Table.from_arrays(
        [c if f.type == p.type else c.cast(f.type) for c, f, p in zip(table.columns, arrow_schema, physical)],
        schema=arrow_schema,
    )


_FAST_TYPES = (pa.bool_(), pa.int32(), pa.int64(), pa.float32(), pa.float64(), pa.string(), pa.binary())


@lru_cache(maxsize=64)
def _container_header(schema_json: str) -> bytes:
    """An Avro container header (the block's schema, time logical types stripped) with a fixed sync marker."""
    stripped = _strip_time_logical_types(json.loads(schema_json))
    out = io.BytesIO()
    fastavro.writer(out, fastavro.parse_schema(stripped), [], codec="null", sync_marker=avro_vector.CONTAINER_SYNC)
    return out.getvalue()


@lru_cache(maxsize=64)
def _stripped_schema_json(schema_json: str) -> str:
    """A header `SCHEMA` with time logical types removed (the bytes they describe are ints)."""
    return json.dumps(_strip_time_logical_types(json.loads(schema_json)))


@lru_cache(maxsize=64)
def _null_first_unions(schema_json: str) -> bool:
    """Whether every nullable field is `["null", T]` (polars' reader rejects `[T, "null"]`)."""
    fields = json.loads(schema_json).get("fields", [])
    return all(not isinstance(f["type"], list) or f["type"][0] == "null" for f in fields)


def _decode_with_polars(content: bytes, count: int, schema_json: str, physical: pa.Schema) -> pa.Table | None:
    """The block's records decoded in one pass by polars' (Rust) Avro reader, or None to use fastavro.

    Only flat records of primitive types take this path; their datums are re-framed as one
    Avro container block (the length prefixes dropped). Any doubt (other types, a framing or
    decoding problem) returns None, and the per-record fastavro path decides, with its
    precise corruption errors.
    """
    framed = avro_vector.decode_block_records(content, count, _stripped_schema_json(schema_json), physical)
    if framed is not None:  # records as they lie, nested records (CDC images) included
        return framed
    if count == 0 or any(f.type not in _FAST_TYPES for f in physical) or not _null_first_unions(schema_json):
        return None
    try:
        # lazy: polars is slow to import
        import polars as pl
    except ImportError:  # pragma: no cover - polars is a dependency; stay correct without it
        return None
    view = memoryview(content)
    parts = []
    pos = 8
    end = len(content)
    unpack = _INT.unpack_from
    try:
        for _ in range(count):
            (length,) = unpack(content, pos)
            pos += 4
            if length < 0 or pos + length > end:
                return None
            parts.append(view[pos : pos + length])
            pos += length
    except struct.error:
        return None
    if pos != end:
        return None
    body = b"".join(parts)
    container = avro_vector.frame_container(_container_header(schema_json), count, body)
    try:
        table = pl.read_avro(io.BytesIO(container)).to_arrow()
    except Exception:  # polars raises several unrelated types on bytes it cannot decode
        return None
    if table.num_rows != count or table.column_names != physical.names:
        return None
    try:
        return table.cast(physical)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


# -- Parquet data blocks -------------------------------------------------------------------
def encode_parquet_records(
    records: pa.Table, schema_json: str, compression: str = DEFAULT_PARQUET_BLOCK_COMPRESSION
) -> bytes:
    """A complete Parquet file of `records` (conformed to the header `SCHEMA`), as Parquet data blocks hold."""
    arrow_schema = arrow_schema_of(schema_json)
    table = conform_batch(records, arrow_schema, allow_missing=True)
    # Java readers read Parquet log blocks with parquet-avro: give them the Avro schema too.
    table = table.replace_schema_metadata({"parquet.avro.schema": schema_json, "writer.model.name": "avro"})
    sink = pa.BufferOutputStream()
    # Timestamps are already in the schema's unit (millis or micros): no coercion.
    pq.write_table(table, sink, compression=compression, write_statistics=True)
    return sink.getvalue().to_pybytes()


def decode_parquet_records(content: bytes) -> pa.Table:
    """Records of a Parquet data block, in the Parquet file's own schema."""
    try:
        table = pq.read_table(pa.BufferReader(content))
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorruptTableError(f"Parquet data block cannot be read: {exc}") from exc
    return table.replace_schema_metadata(None)


# -- delete blocks -------------------------------------------------------------------------
def _wrapper(name: str, value_type: Any) -> dict[str, Any]:
    return {
        "type": "record",
        "name": name,
        "namespace": "org.apache.hudi.avro.model",
        "fields": [{"name": "value", "type": value_type}],
    }


#: Union branches of `orderingVal`: Hudi wraps each ordering value in a one-field record
#: (`HoodieAvroUtils.wrapValueIntoAvro`), so the branch names the Java type. Index 2 is
#: `IntWrapper`: Spark SQL's default ordering value (Java `Integer` 0) sits there.
ORDERING_WRAPPERS: tuple[tuple[str, Any], ...] = (
    ("BooleanWrapper", "boolean"),
    ("IntWrapper", "int"),
    ("LongWrapper", "long"),
    ("FloatWrapper", "float"),
    ("DoubleWrapper", "double"),
    ("BytesWrapper", "bytes"),
    ("StringWrapper", "string"),
    ("DateWrapper", "int"),
    ("DecimalWrapper", {"type": "bytes", "logicalType": "decimal", "precision": 30, "scale": 15}),
    ("TimeMicrosWrapper", {"type": "long", "logicalType": "time-micros"}),
    ("TimestampMicrosWrapper", "long"),
)

#: `HoodieDeleteRecordList` as Hudi 0.14/0.15 writes it and hudi-rs 0.5.0 reads it (format doc 6.6).
DELETE_RECORD_LIST_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "HoodieDeleteRecordList",
    "namespace": "org.apache.hudi.avro.model",
    "fields": [
        {
            "name": "deleteRecordList",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "HoodieDeleteRecord",
                    "fields": [
                        {"name": "recordKey", "type": ["null", "string"], "default": None},
                        {"name": "partitionPath", "type": ["null", "string"], "default": None},
                        {
                            "name": "orderingVal",
                            "type": ["null", *(_wrapper(n, t) for n, t in ORDERING_WRAPPERS)],
                            "default": None,
                        },
                    ],
                },
            },
        }
    ],
}
_DELETE_SCHEMA = fastavro.parse_schema(_strip_time_logical_types(DELETE_RECORD_LIST_SCHEMA))
_DECIMAL = pa.decimal128(30, 15)
#: Arrow type of the values of each wrapper (as decoded: times and dates as their ints first).
_WRAPPER_ARROW: dict[str, tuple[pa.DataType, pa.DataType]] = {
    "BooleanWrapper": (pa.bool_(), pa.bool_()),
    "IntWrapper": (pa.int32(), pa.int32()),
    "LongWrapper": (pa.int64(), pa.int64()),
    "FloatWrapper": (pa.float32(), pa.float32()),
    "DoubleWrapper": (pa.float64(), pa.float64()),
    "BytesWrapper": (pa.binary(), pa.binary()),
    "StringWrapper": (pa.string(), pa.string()),
    "DateWrapper": (pa.int32(), pa.date32()),
    "DecimalWrapper": (_DECIMAL, _DECIMAL),
    "TimeMicrosWrapper": (pa.int64(), pa.time64("us")),
    "TimestampMicrosWrapper": (pa.int64(), pa.timestamp("us", "UTC")),
}


def _ordering_wrapper(t: pa.DataType) -> str | None:
    """The wrapper Hudi would put ordering values of Arrow type `t` in (None: no values)."""
    if pa.types.is_null(t):
        return None
    if pa.types.is_boolean(t):
        return "BooleanWrapper"
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_int32(t):
        return "IntWrapper"
    if pa.types.is_integer(t):
        return "LongWrapper"
    if pa.types.is_float16(t) or pa.types.is_float32(t):
        return "FloatWrapper"
    if pa.types.is_float64(t):
        return "DoubleWrapper"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "BytesWrapper"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "StringWrapper"
    if pa.types.is_date(t):
        return "DateWrapper"
    if pa.types.is_decimal(t):
        return "DecimalWrapper"
    if pa.types.is_time(t):
        return "TimeMicrosWrapper"
    if pa.types.is_timestamp(t):
        return "TimestampMicrosWrapper"
    raise SchemaError(f"ordering values of type {t} cannot be written to a delete block")


def _ordering_physical(values: pa.Array, wrapper: str) -> list[Any]:
    """Ordering values as the Python objects the wrapper's physical Avro type takes."""
    physical, _ = _WRAPPER_ARROW[wrapper]
    if wrapper == "DateWrapper":
        values = values.cast(pa.date32()).cast(pa.int32())
    elif wrapper == "TimeMicrosWrapper":
        values = values.cast(pa.time64("us")).cast(pa.int64())
    elif wrapper == "TimestampMicrosWrapper":
        values = values.cast(pa.timestamp("us", values.type.tz), safe=False).cast(pa.int64())
    else:
        values = values.cast(physical)
    return values.to_pylist()


def encode_delete_records(records: pa.Table) -> bytes:
    """Delete block content (version 3) of `records` (columns record_key, partition_path, ordering_value).

    Every ordering value goes into the one wrapper of its Arrow type (int64 -> LongWrapper,
    timestamps -> TimestampMicrosWrapper ...); hudi-rs rejects a block that mixes them. A
    missing `ordering_value` column or nulls mean "no ordering value", which Hudi (like
    Spark SQL's 0) reads as a natural-order delete.
    """
    n = records.num_rows
    keys = records.column(DELETE_RECORD_KEY).to_pylist()
    partitions = (
        records.column(DELETE_PARTITION_PATH).to_pylist()
        if DELETE_PARTITION_PATH in records.column_names
        else [None] * n
    )
    if DELETE_ORDERING_VALUE in records.column_names:
        ordering = records.column(DELETE_ORDERING_VALUE).combine_chunks()
    else:
        ordering = pa.nulls(n)
    wrapper = _ordering_wrapper(ordering.type)
    values = _ordering_physical(ordering, wrapper) if wrapper is not None else [None] * n
    full_name = f"org.apache.hudi.avro.model.{wrapper}"
    entries = [
        {
            "recordKey": key,
            "partitionPath": partition,
            "orderingVal": None if value is None else (full_name, {"value": value}),
        }
        for key, partition, value in zip(keys, partitions, values)
    ]
    out = io.BytesIO()
    fastavro.schemaless_writer(out, _DELETE_SCHEMA, {"deleteRecordList": entries})
    payload = out.getvalue()
    return _TWO_INTS.pack(DELETE_BLOCK_VERSION, len(payload)) + payload


def _ordering_array(wrapped: list[Any]) -> pa.Array:
    """One Arrow array of decoded `(wrapper name, {"value": v})` ordering values."""
    names = {name.rsplit(".", 1)[-1] for name in {w[0] for w in wrapped if w is not None}}
    if not names:
        return pa.nulls(len(wrapped), pa.int64())
    if names == {"IntWrapper", "LongWrapper"}:
        names = {"LongWrapper"}
    if len(names) > 1:
        raise CorruptTableError(f"delete block mixes ordering value types {sorted(names)}")
    (name,) = names
    if name not in _WRAPPER_ARROW:
        raise CorruptTableError(f"delete block ordering values of kind {name} are not supported")
    physical, logical = _WRAPPER_ARROW[name]
    values = pa.array([w[1]["value"] if w is not None else None for w in wrapped], physical)
    return values if physical == logical else values.cast(logical)


#: Physical Avro type polars reads each wrapper's value as (the same bytes as the wrapper's
#: own type: ints read as longs, strings and decimals as bytes, converted by Arrow after).
_WRAPPER_READ: dict[str, str] = {
    "BooleanWrapper": "boolean",
    "IntWrapper": "long",
    "LongWrapper": "long",
    "FloatWrapper": "float",
    "DoubleWrapper": "double",
    "BytesWrapper": "bytes",
    "StringWrapper": "bytes",
    "DateWrapper": "long",
    "DecimalWrapper": "bytes",
    "TimeMicrosWrapper": "long",
    "TimestampMicrosWrapper": "long",
}
_INT_WRAPPERS = frozenset({2, 3})  # IntWrapper and LongWrapper: decoded together as longs


@lru_cache(maxsize=16)
def _delete_entries_header(branch: int) -> bytes:
    """Container header of delete entries whose `orderingVal` is always union branch `branch`.

    The entry's union index is read as a plain long field (`branch`), the wrapper's value
    (a one-field record: the same bytes as its field) as the field `value`; branch 0 (null)
    has no value field. Entries with any other branch are not described by this schema.
    """
    fields: list[dict[str, Any]] = [
        {"name": "recordKey", "type": ["null", "bytes"]},  # checked as UTF-8 by Arrow's cast
        {"name": "partitionPath", "type": ["null", "bytes"]},
        {"name": "branch", "type": "long"},
    ]
    if branch:
        fields.append({"name": "value", "type": _WRAPPER_READ[ORDERING_WRAPPERS[branch - 1][0]]})
    return _container_header(json.dumps({"type": "record", "name": "DeleteEntry", "fields": fields}))


def _string_sizes(arr: pa.Array) -> Any:
    """Encoded bytes of each value of a decoded `["null", string|bytes]` (or plain) field, sans branch."""
    if arr.type != pa.large_binary():  # polars' bytes come as large_binary: no cast
        arr = arr.cast(pa.large_binary())
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64, count=len(arr) + 1, offset=arr.offset * 8)
    lengths = np.diff(offsets)
    sizes = avro_vector.varint_sizes(avro_vector.zigzag(lengths)) + lengths
    if arr.null_count:
        sizes[~np.asarray(arr.is_valid())] = 0
    return sizes


def _decimal_values(values: pa.Array) -> pa.Array | None:
    """Unscaled big-endian two's-complement bytes (no nulls) as decimal128(30, 15), None past 16 bytes."""
    arr = values.cast(pa.large_binary())
    n = len(arr)
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64, count=n + 1, offset=arr.offset * 8)
    lengths = np.diff(offsets)
    if n == 0 or int(lengths.max()) > 16:
        return None
    data = np.frombuffer(arr.buffers()[2], dtype=np.uint8) if arr.buffers()[2] is not None else np.empty(0, np.uint8)
    negative = np.zeros(n, dtype=np.bool_)
    if data.size:  # an empty value is 0 (Python's int.from_bytes, as fastavro reads it)
        negative = (lengths > 0) & (data[np.minimum(offsets[:-1], data.size - 1)] >= 0x80)
    big = np.repeat(np.where(negative, np.uint8(0xFF), np.uint8(0))[:, None], 16, axis=1)
    column = np.arange(16)[None, :]
    shift = 16 - lengths[:, None]
    take = column >= shift  # right-aligned: byte j of the matrix is value byte j - (16 - length)
    source = offsets[:-1, None] + column - shift
    big[take] = data[source[take]]
    little = np.ascontiguousarray(big[:, ::-1])
    wide = pa.Array.from_buffers(pa.decimal128(38, 15), n, [None, pa.py_buffer(little.tobytes())])
    return wide.cast(_DECIMAL)  # ArrowInvalid past 30 digits (fastavro rounds those: left to it)


def _decode_deletes_column_wise(payload: bytes) -> pa.Table | None:
    """A `HoodieDeleteRecordList` datum decoded column-wise by polars, or None to use fastavro.

    Hudi (and fastavro) write the entry array as one block: a count, the entries, a 0. When
    every entry's `orderingVal` takes the same union branch as the first's (Hudi writes one
    wrapper per block; IntWrapper and LongWrapper may mix), the entries are flat records
    polars can read (`_delete_entries_header`) and go to it as one container block. The
    result is taken only when every entry's branch is that one and the entries' encoded
    sizes, recomputed from the decoded values, add up to the block's bytes exactly: then
    each entry was read from where it starts, as fastavro reads it. Anything else (mixed
    null and non-null ordering values, other block layouts, bytes polars refuses, values
    out of range) returns None.
    """
    try:
        count, pos = avro_vector.read_long(payload, 0)
        if count == 0:
            return _ordering_free_deletes() if pos == len(payload) else None
        if count < 0 or payload[-1] != 0:
            return None
        start = pos
        for _ in range(2):  # recordKey, partitionPath of the first entry
            present, pos = avro_vector.read_long(payload, pos)
            if present:
                length, pos = avro_vector.read_long(payload, pos)
                pos += length
        branch, _ = avro_vector.read_long(payload, pos)
    except IndexError:
        return None
    if not 0 <= branch <= len(ORDERING_WRAPPERS):
        return None
    body = memoryview(payload)[start:-1]
    table = avro_vector.read_container(avro_vector.frame_container(_delete_entries_header(branch), count, body))
    if table is None or table.num_rows != count:
        return None
    keys, partitions, branches = (_one_chunk(table.column(i)) for i in range(3))
    found = branches.cast(pa.int64()).to_numpy(zero_copy_only=False)
    matching = ((found == 2) | (found == 3)) if branch in _INT_WRAPPERS else found == branch
    if not matching.all():
        return None
    sizes = 2 + _string_sizes(keys) + _string_sizes(partitions) + avro_vector.varint_sizes(avro_vector.zigzag(found))
    if branch == 0:
        if int(sizes.sum()) != len(body):
            return None
        try:
            return _delete_table(keys, partitions, pa.nulls(count, pa.int64()))
        except pa.ArrowInvalid:  # not UTF-8
            return None
    values = _one_chunk(table.column(3))
    wrapper = ORDERING_WRAPPERS[branch - 1][0]
    read = _WRAPPER_READ[wrapper]
    if read == "long":
        sizes += avro_vector.varint_sizes(avro_vector.zigzag(values.to_numpy()))  # int64: read as long
    elif read in ("bytes", "string"):
        sizes += _string_sizes(values)
    else:
        sizes += {"boolean": 1, "float": 4, "double": 8}[read]
    if int(sizes.sum()) != len(body):
        return None
    if wrapper == "BooleanWrapper":
        ends = np.cumsum(sizes) + (start - 1)  # the boolean is each entry's last byte
        if (np.frombuffer(payload, dtype=np.uint8)[ends] > 1).any():
            return None  # fastavro reads any non-zero byte as true
    physical, logical = _WRAPPER_ARROW[wrapper]
    if branch in _INT_WRAPPERS and (found == 3).any():
        physical = logical = pa.int64()  # `_ordering_array`: IntWrapper and LongWrapper mixed decode as longs
    try:
        if wrapper == "DecimalWrapper":
            ordering = _decimal_values(values)
        elif wrapper == "FloatWrapper":
            ordering = _quieted_floats(values.cast(pa.float32()))
        else:
            ordering = values.cast(physical)
        if ordering is None:
            return None
        return _delete_table(keys, partitions, ordering if physical == logical else ordering.cast(logical))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # invalid UTF-8, values out of range
        return None


def _one_chunk(column: pa.ChunkedArray) -> pa.Array:
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _delete_table(keys: pa.Array, partitions: pa.Array, ordering: pa.Array) -> pa.Table:
    """The delete table of decoded columns (keys and partition paths as bytes or strings).

    Raises ArrowInvalid for keys or partition paths that are not UTF-8.
    """
    return pa.table(
        {
            DELETE_RECORD_KEY: keys.cast(pa.string()),
            DELETE_PARTITION_PATH: partitions.cast(pa.string()),
            DELETE_ORDERING_VALUE: ordering,
        }
    )


def _ordering_free_deletes() -> pa.Table:
    """An empty delete table (`_ordering_array` of no entries: int64 nulls)."""
    return _delete_table(pa.array([], pa.string()), pa.array([], pa.string()), pa.nulls(0, pa.int64()))


def _quieted_floats(values: pa.Array) -> pa.Array:
    """float32 values (no nulls) with signalling NaNs made quiet, as fastavro's float -> double ->
    Arrow float trip leaves them."""
    bits = values.to_numpy().view("<u4")
    nan = ((bits & np.uint32(0x7F800000)) == np.uint32(0x7F800000)) & ((bits & np.uint32(0x007FFFFF)) != 0)
    if not nan.any():
        return values
    return pa.array(np.where(nan, bits | np.uint32(0x00400000), bits).astype("<u4").view(np.float32))


def decode_delete_records(content: bytes) -> pa.Table:
    """Entries of a delete block (content version 3) as record_key, partition_path, ordering_value."""
    if len(content) < 8:
        raise CorruptTableError(f"delete block content of {len(content)} bytes is too short")
    version, length = _TWO_INTS.unpack_from(content, 0)
    if version != DELETE_BLOCK_VERSION:
        raise CorruptTableError(
            f"delete block content version {version} is not supported (only {DELETE_BLOCK_VERSION}; "
            "versions 1 and 2 hold Java Kryo data)"
        )
    if length != len(content) - 8:
        raise CorruptTableError(f"delete block payload is {len(content) - 8} bytes, framed as {length}")
    payload = content[8:]
    if _entry_count(payload) < COLUMN_WISE_MIN_ENTRIES:
        return _decode_deletes_with_fastavro(payload)
    fast = _decode_deletes_column_wise(payload)
    return fast if fast is not None else _decode_deletes_with_fastavro(payload)


#: Delete blocks of fewer entries go to fastavro: the column-wise path pays ~0.6 ms of fixed cost
#: a block (the polars call and a dozen Arrow calls), fastavro ~8 µs an entry, so fastavro is the
#: cheaper below ~70 entries (`cdc_cpu.py delete-blocks`; issue 19's small CDC table writes
#: blocks of ~33). Both give the same table (`tests/core/file_group/test_delete_block_decode.py`).
COLUMN_WISE_MIN_ENTRIES = 64


def _entry_count(payload: bytes) -> int:
    """The entry count of a delete payload's first array block (-1 when it cannot be read: the
    decoders then say what is wrong; a negative count, one with a byte size, is read as is)."""
    try:
        return avro_vector.read_long(payload, 0)[0]
    except IndexError:
        return -1


def _decode_deletes_with_fastavro(payload: bytes) -> pa.Table:
    """A `HoodieDeleteRecordList` datum decoded by fastavro, entry by entry: any layout and
    mix of ordering wrappers, with precise errors for damaged bytes."""
    length = len(payload)
    buf = io.BytesIO(payload)
    try:
        datum = fastavro.schemaless_reader(buf, _DELETE_SCHEMA, None, return_record_name=True)
    except (EOFError, ValueError, TypeError, IndexError, KeyError, struct.error) as exc:
        raise CorruptTableError(f"delete block records cannot be decoded: {exc!r}") from exc
    if buf.tell() != length:
        raise CorruptTableError(f"delete block has {length - buf.tell()} bytes after its records")
    entries = datum["deleteRecordList"] if isinstance(datum, dict) else []
    return pa.table(
        {
            DELETE_RECORD_KEY: pa.array([e["recordKey"] for e in entries], pa.string()),
            DELETE_PARTITION_PATH: pa.array([e["partitionPath"] for e in entries], pa.string()),
            DELETE_ORDERING_VALUE: _ordering_array([e["orderingVal"] for e in entries]),
        }
    )
