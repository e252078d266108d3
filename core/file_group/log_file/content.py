"""Block contents of Hudi log files: records as Avro or Parquet, delete lists, in and out of Arrow.

Format doc 6.4-6.6. Every function here is pure (bytes and Arrow in, bytes and Arrow out):

- Avro data block (type 3): int content version (3), int record count, then per record an
  int byte length and the record as a schemaless Avro datum of the header's `SCHEMA`.
- Parquet data block (type 5): one complete Parquet file.
- Delete block (type 1, content version 3): int version, int payload length, then one Avro
  datum of `HoodieDeleteRecordList` (record key, partition path, ordering value).

Avro is encoded and decoded with fastavro, one datum per record (the format frames every
record with its own length, so there is no container to hand over whole). To keep the
per-record work small, date and timestamp columns travel as their physical ints: the
Avro schema given to fastavro has those logical types removed (the bytes are the same)
and Arrow casts the ints back. Decimals keep their logical type (fastavro <-> Decimal).
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Callable
from decimal import Decimal
from functools import lru_cache
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakeward.core.exceptions import CorruptTableError, SchemaError
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
    to the schema first, so they may come in any compatible Arrow types.
    """
    avro_schema, arrow_schema = _schemas(schema_json)
    table = conform_batch(records, arrow_schema, allow_missing=True)
    columns: list[list[Any]] = []
    for field, column in zip(table.schema, table.columns):
        if _has_physical_change(field.type):
            column = pc.cast(column, _physical_type(field.type))
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


def decode_avro_records(content: bytes, schema_json: str) -> pa.Table:
    """Records of an Avro data block (content versions 2 and 3) as Arrow, in the header `SCHEMA`."""
    avro_schema, arrow_schema = _schemas(schema_json)
    if len(content) < 8:
        raise CorruptTableError(f"Avro data block content of {len(content)} bytes is too short")
    version, count = _TWO_INTS.unpack_from(content, 0)
    if version not in (2, AVRO_BLOCK_VERSION):
        raise CorruptTableError(f"Avro data block content version {version} is not supported (only 2 and 3)")
    if count < 0:
        raise CorruptTableError(f"Avro data block claims {count} records")
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
    physical = pa.schema([f.with_type(_physical_type(f.type)) for f in arrow_schema])
    table = pa.Table.from_pylist(rows, schema=physical)
    if physical == arrow_schema:
        return table
    return pa.Table.from_arrays(
        [c if f.type == p.type else pc.cast(c, f.type) for c, f, p in zip(table.columns, arrow_schema, physical)],
        schema=arrow_schema,
    )


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
    pq.write_table(
        table,
        sink,
        compression=compression,
        coerce_timestamps="us",
        allow_truncated_timestamps=True,
        write_statistics=True,
    )
    return sink.getvalue().to_pybytes()


def decode_parquet_records(content: bytes) -> pa.Table:
    """Records of a Parquet data block, in the Parquet file's own schema."""
    try:
        table = pq.read_table(pa.BufferReader(content))
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorruptTableError(f"Parquet data block cannot be read: {exc}") from exc
    return table.replace_schema_metadata(None)


# -- delete blocks -------------------------------------------------------------------------
#: `HoodieDeleteRecordList` as Hudi 0.14/0.15 writes it (format doc 6.6).
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
                            "type": [
                                "null",
                                "int",
                                "long",
                                "float",
                                "double",
                                "bytes",
                                "string",
                                {"type": "bytes", "logicalType": "decimal", "precision": 30, "scale": 15},
                                {"type": "int", "logicalType": "date"},
                                {"type": "int", "logicalType": "time-millis"},
                                {"type": "long", "logicalType": "time-micros"},
                                {"type": "long", "logicalType": "timestamp-millis"},
                                {"type": "long", "logicalType": "timestamp-micros"},
                            ],
                            "default": None,
                        },
                    ],
                },
            },
        }
    ],
}
_DELETE_SCHEMA = fastavro.parse_schema(DELETE_RECORD_LIST_SCHEMA)
_ORDERING_BRANCHES = DELETE_RECORD_LIST_SCHEMA["fields"][0]["type"]["items"]["fields"][2]["type"]
#: Physical branch schemas (logical types stripped) for encoding ordering values as ints.
_BRANCH_WRITERS = [fastavro.parse_schema(_strip_time_logical_types(b)) for b in _ORDERING_BRANCHES]
_DECIMAL_SCALE = 15


def _ordering_branch(t: pa.DataType) -> int:
    """Union branch of `orderingVal` for ordering values of Arrow type `t`."""
    if pa.types.is_null(t):
        return 0
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_int32(t):
        return 1
    if pa.types.is_int64(t) or pa.types.is_unsigned_integer(t):
        return 2
    if pa.types.is_float32(t):
        return 3
    if pa.types.is_float64(t):
        return 4
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return 5
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return 6
    if pa.types.is_decimal(t):
        return 7
    if pa.types.is_date32(t):
        return 8
    if pa.types.is_time32(t):
        return 9
    if pa.types.is_time64(t):
        return 10
    if pa.types.is_timestamp(t):
        return 11 if t.unit in ("s", "ms") else 12
    raise SchemaError(f"ordering values of type {t} cannot be written to a delete block")


def _zigzag(n: int) -> bytes:
    """Avro's variable-length zig-zag encoding of an int/long."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z & ~0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _avro_string(value: str | None) -> bytes:
    if value is None:
        return b"\x00"
    raw = value.encode("utf-8")
    return b"\x02" + _zigzag(len(raw)) + raw


def _ordering_physical(values: pa.Array, branch: int) -> list[Any]:
    """Ordering values as the Python objects the branch's physical Avro type takes."""
    if branch in (8, 9):
        values = pc.cast(values, pa.int32())
    elif branch == 10:
        values = pc.cast(pc.cast(values, pa.time64("us")), pa.int64())
    elif branch == 11:
        values = pc.cast(pc.cast(values, pa.timestamp("ms", values.type.tz)), pa.int64())
    elif branch == 12:
        values = pc.cast(pc.cast(values, pa.timestamp("us", values.type.tz), safe=False), pa.int64())
    elif branch == 7:
        values = pc.cast(values, pa.decimal128(30, _DECIMAL_SCALE))
    elif branch == 2 and pa.types.is_unsigned_integer(values.type):
        values = pc.cast(values, pa.int64())
    return values.to_pylist()


def encode_delete_records(records: pa.Table) -> bytes:
    """Delete block content (version 3) of `records` (columns record_key, partition_path, ordering_value).

    All ordering values take the one union branch of their Arrow type (hudi-rs rejects a
    block that mixes branches); a missing `ordering_value` column or nulls mean "no
    ordering value" (Hudi reads null, and Spark SQL writes 0, as natural order).
    """
    keys = records.column(DELETE_RECORD_KEY).to_pylist()
    partitions = (
        records.column(DELETE_PARTITION_PATH).to_pylist()
        if DELETE_PARTITION_PATH in records.column_names
        else [None] * records.num_rows
    )
    if DELETE_ORDERING_VALUE in records.column_names:
        ordering = records.column(DELETE_ORDERING_VALUE).combine_chunks()
    else:
        ordering = pa.nulls(records.num_rows)
    branch = _ordering_branch(ordering.type)
    values = _ordering_physical(ordering, branch) if branch else [None] * records.num_rows
    writer = _BRANCH_WRITERS[branch]
    body = bytearray()
    if records.num_rows:
        body += _zigzag(records.num_rows)
        value_buf = io.BytesIO()
        for key, partition, value in zip(keys, partitions, values):
            body += _avro_string(key)
            body += _avro_string(partition)
            if value is None:
                body += b"\x00"
                continue
            body += _zigzag(branch)
            value_buf.seek(0)
            value_buf.truncate()
            fastavro.schemaless_writer(value_buf, writer, value)
            body += value_buf.getvalue()
    body += b"\x00"  # end of the array
    return _TWO_INTS.pack(DELETE_BLOCK_VERSION, len(body)) + bytes(body)


def _ordering_array(values: list[Any]) -> pa.Array:
    """One Arrow array of decoded ordering values (one type per block, as hudi-rs requires)."""
    kinds = {type(v) for v in values if v is not None}
    if len(kinds) > 1 and not kinds <= {int, float}:
        raise CorruptTableError(f"delete block mixes ordering value types {sorted(k.__name__ for k in kinds)}")
    if kinds == {Decimal}:
        return pa.array(values, pa.decimal128(30, _DECIMAL_SCALE))
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise CorruptTableError(f"delete block ordering values cannot be read: {exc}") from exc


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
    try:
        datum = fastavro.schemaless_reader(io.BytesIO(content[8:]), _DELETE_SCHEMA, None)
    except (EOFError, ValueError, TypeError, IndexError, struct.error) as exc:
        raise CorruptTableError(f"delete block records cannot be decoded: {exc!r}") from exc
    entries = datum["deleteRecordList"] if isinstance(datum, dict) else []
    return pa.table(
        {
            DELETE_RECORD_KEY: pa.array([e["recordKey"] for e in entries], pa.string()),
            DELETE_PARTITION_PATH: pa.array([e["partitionPath"] for e in entries], pa.string()),
            DELETE_ORDERING_VALUE: _ordering_array([e["orderingVal"] for e in entries]),
        }
    )
