"""The metadata table's `column_stats` partition: per data file and column, min/max and counts (Hudi 1.x).

Layout (format doc 7.6, `HoodieMetadataPayload`, `HoodieTableMetadataUtil`): file groups
`col-stats-0000-0` … (2 by default, fixed at initialisation); a record goes to group
`abs(javaStringHash(key)) % n`. The key is `b64(xxh64(column)) + b64(xxh64(partition)) +
b64(md5(file name))` (`.` is the partition of a non-partitioned table); the value is a
`HoodieMetadataRecord` of type 3 whose `ColumnStatsMetadata` holds the file name, the column,
min/max, the value, null and size counts, `isDeleted` (a cleaned file's tombstone) and, in index
version 2 (table version 9), the value's logical type (`valueType.typeOrdinal`: min/max in the
primitive wrapper, a decimal as its unscaled big-endian bytes). Version 1 (table version 8)
puts min/max in the logical wrappers instead.

Records with the same key are merged newest first wins (a file's stats are written once; a
tombstone removes them). This module holds the keys, the value codec, the stats of a Parquet
file as Hudi computes them (from the footer: min/max over row groups, null and value counts,
compressed and uncompressed sizes), and the merged read of the partition that data skipping
uses (`core/read/pruning.py`).
"""

from __future__ import annotations

import datetime
import decimal
import io
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from enum import IntEnum
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakeward.core.file_group import log_file
from lakeward.core.file_group.hfile import HFileReader
from lakeward.core.file_group.hfile_writer import java_string_hash
from lakeward.core.file_group.metadata_listing import (
    NON_PARTITIONED_KEY,
    committed_blocks,
    load_metadata_timeline,
    metadata_storage,
    slice_times,
)
from lakeward.core.metadata_table.index_definitions import load_index_definitions
from lakeward.core.metadata_table.index_ids import file_id as file_id_hash
from lakeward.core.metadata_table.index_ids import name_id as hash_id
from lakeward.core.metadata_table.record_index import latest_slices
from lakeward.core.metadata_table.schema import METADATA_RECORD_SCHEMA, MetadataRecordType
from lakeward.core.storage import Storage

COLUMN_STATS_PARTITION = "column_stats"
#: File-group id prefix of the partition (`col-stats-0000-0`) and Hudi's default group count.
FILE_GROUP_PREFIX = "col-stats"
DEFAULT_FILE_GROUPS = 2
#: Meta fields Hudi indexes besides the data columns (the others differ per record and file).
INDEXED_META_FIELDS = ("_hoodie_commit_time", "_hoodie_partition_path", "_hoodie_record_key")
_NAMESPACE = METADATA_RECORD_SCHEMA.get("namespace", "org.apache.hudi.avro.model")
_PARSED_SCHEMA = fastavro.parse_schema(METADATA_RECORD_SCHEMA)


def partition_identifier(partition_path: str) -> str:
    """The partition as the index keys name it (`.` for a non-partitioned table)."""
    return partition_path or NON_PARTITIONED_KEY


def column_stats_key(column: str, partition_path: str, file_name: str) -> str:
    """The `column_stats` key of `column` in data file `file_name` of `partition_path`."""
    return hash_id(column) + hash_id(partition_identifier(partition_path)) + file_id_hash(file_name)


def file_group_index(key: str, num_groups: int) -> int:
    """The file group of an index key: `abs(javaStringHash(key)) % num_groups` (Java int semantics)."""
    h = java_string_hash(key)
    signed = h - (1 << 32) if h >= 1 << 31 else h
    return abs(signed) % num_groups


class ValueType(IntEnum):
    """Hudi's `ValueType` ordinals (index version 2's `valueType.typeOrdinal`)."""

    V1 = 0
    NULL = 1
    BOOLEAN = 2
    INT = 3
    LONG = 4
    FLOAT = 5
    DOUBLE = 6
    STRING = 7
    BYTES = 8
    FIXED = 9
    DECIMAL = 10
    UUID = 11
    DATE = 12
    TIME_MILLIS = 13
    TIME_MICROS = 14
    TIMESTAMP_MILLIS = 15
    TIMESTAMP_MICROS = 16
    TIMESTAMP_NANOS = 17
    LOCAL_TIMESTAMP_MILLIS = 18
    LOCAL_TIMESTAMP_MICROS = 19
    LOCAL_TIMESTAMP_NANOS = 20


@dataclass(frozen=True)
class ColumnRange:
    """One `column_stats` (or `partition_stats`) value: a column's range in one file (or partition).

    `min_value`/`max_value` are plain Python values of the column's logical type (str, int,
    Decimal, date, datetime, …; None when every value is null or there are no stats).
    """

    file_name: str
    column: str
    min_value: Any
    max_value: Any
    value_count: int
    null_count: int
    total_size: int = 0
    total_uncompressed_size: int = 0
    deleted: bool = False
    tight_bound: bool = False

    def tombstone(self) -> ColumnRange:
        """The record that marks these stats deleted (a cleaned file), as Hudi writes it."""
        return replace(self, deleted=True)


# -- value codec ------------------------------------------------------------------------------
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_EPOCH_DATE = datetime.date(1970, 1, 1)
_TIME_UNITS = {"s": 1_000_000, "ms": 1000, "us": 1, "ns": 1}


#: Wide enough for every decimal Parquet holds (38 digits; 76 for 256-bit), so that no bound is rounded.
_EXACT = decimal.Context(prec=100)
#: Version 1's `DecimalWrapper`: Avro decimal(30, 15) (Hudi's schema).
_V1_DECIMAL_PRECISION, _V1_DECIMAL_SCALE = 30, 15


def _decimal_of(unscaled: bytes, scale: int) -> decimal.Decimal:
    return decimal.Decimal(int.from_bytes(unscaled, "big", signed=True)).scaleb(-scale, _EXACT)


def column_value(value: Any, arrow_type: pa.DataType | None) -> Any:
    """A statistics bound as the Python value of the column's Arrow type, whatever wrote it: version 1's
    date (days) and timestamp (microseconds) wrappers decode as plain integers, and a time zone-less
    column's bounds may come aware or naive. NaN bounds nothing (no comparison accepts it): None."""
    if value is None:
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    if arrow_type is None:
        return value
    if pa.types.is_date(arrow_type) and isinstance(value, int) and not isinstance(value, bool):
        return _EPOCH_DATE + datetime.timedelta(days=value)
    if pa.types.is_timestamp(arrow_type):
        if isinstance(value, int) and not isinstance(value, bool):
            value = _EPOCH + datetime.timedelta(microseconds=value)
        if isinstance(value, datetime.datetime):
            if arrow_type.tz is None:
                return value.astimezone(datetime.UTC).replace(tzinfo=None) if value.tzinfo else value
            return value if value.tzinfo else value.replace(tzinfo=datetime.UTC)
    return value


def _timestamp_of(value: int, per_micro: int, divide: bool, local: bool) -> datetime.datetime:
    micros = value // per_micro if divide else value * per_micro
    stamp = _EPOCH + datetime.timedelta(microseconds=micros)
    return stamp.replace(tzinfo=None) if local else stamp


def decode_value(wrapped: Mapping[str, Any] | None, value_type: Mapping[str, Any] | None) -> Any:
    """A min/max wrapper as a Python value, typed by `valueType` (index version 2) or, in version 1,
    by the wrapper's own logical type (fastavro already converted it)."""
    if wrapped is None:
        return None
    value = wrapped.get("value")
    ordinal = int(value_type["typeOrdinal"]) if value_type else 0
    info = (value_type or {}).get("additionalInfo")
    if value is None or ordinal in (ValueType.V1, ValueType.NULL):
        return value
    if ordinal == ValueType.DECIMAL:
        scale = int(str(info).split(",")[1]) if info else 0
        return _decimal_of(value, scale) if isinstance(value, bytes) else decimal.Decimal(value)
    if ordinal == ValueType.DATE and isinstance(value, int):
        return _EPOCH_DATE + datetime.timedelta(days=value)
    timestamps = {
        ValueType.TIMESTAMP_MILLIS: (1000, False, False),
        ValueType.TIMESTAMP_MICROS: (1, False, False),
        ValueType.TIMESTAMP_NANOS: (1000, True, False),
        ValueType.LOCAL_TIMESTAMP_MILLIS: (1000, False, True),
        ValueType.LOCAL_TIMESTAMP_MICROS: (1, False, True),
        ValueType.LOCAL_TIMESTAMP_NANOS: (1000, True, True),
    }
    if ordinal in timestamps and isinstance(value, int):
        return _timestamp_of(value, *timestamps[ValueType(ordinal)])
    return value


def decode_range(record: Mapping[str, Any]) -> ColumnRange:
    """The `ColumnStatsMetadata` of a decoded metadata record."""
    stats = record["ColumnStatsMetadata"]
    value_type = stats.get("valueType")
    return ColumnRange(
        file_name=stats.get("fileName") or "",
        column=stats.get("columnName") or "",
        min_value=decode_value(stats.get("minValue"), value_type),
        max_value=decode_value(stats.get("maxValue"), value_type),
        value_count=int(stats.get("valueCount") or 0),
        null_count=int(stats.get("nullCount") or 0),
        total_size=int(stats.get("totalSize") or 0),
        total_uncompressed_size=int(stats.get("totalUncompressedSize") or 0),
        deleted=bool(stats.get("isDeleted")),
        tight_bound=bool(stats.get("isTightBound")),
    )


def _unscaled_bytes(value: decimal.Decimal, scale: int) -> bytes:
    """Java `BigInteger.toByteArray` of the unscaled value: minimal big-endian two's complement."""
    unscaled = int(value.scaleb(scale, _EXACT).to_integral_value())
    length = max(1, (unscaled + (unscaled < 0)).bit_length() // 8 + 1)
    return unscaled.to_bytes(length, "big", signed=True)


def _wrap(name: str, value: Any) -> tuple[str, dict[str, Any]]:
    return (f"{_NAMESPACE}.{name}", {"value": value})


def _ordinal_of(arrow_type: pa.DataType) -> tuple[ValueType, str | None]:
    """Index version 2's value type of an Arrow column type."""
    if pa.types.is_boolean(arrow_type):
        return ValueType.BOOLEAN, None
    if pa.types.is_integer(arrow_type):
        return (ValueType.LONG if arrow_type.bit_width > 32 else ValueType.INT), None
    if pa.types.is_float32(arrow_type):
        return ValueType.FLOAT, None
    if pa.types.is_floating(arrow_type):
        return ValueType.DOUBLE, None
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return ValueType.STRING, None
    if pa.types.is_decimal(arrow_type):
        return ValueType.DECIMAL, f"{arrow_type.precision},{arrow_type.scale}"
    if pa.types.is_date(arrow_type):
        return ValueType.DATE, None
    if pa.types.is_timestamp(arrow_type):
        local = arrow_type.tz is None
        unit = {"ms": 0, "us": 1, "ns": 2}.get(arrow_type.unit, 1)
        base = ValueType.LOCAL_TIMESTAMP_MILLIS if local else ValueType.TIMESTAMP_MILLIS
        return ValueType(base + unit), None
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return ValueType.BYTES, None
    raise TypeError(f"no column statistics for type {arrow_type}")


def indexable(arrow_type: pa.DataType) -> bool:
    """Whether Hudi keeps column statistics of a column of this type (primitive, not nested)."""
    try:
        _ordinal_of(arrow_type)
    except TypeError:
        return False
    return True


def _encode_v2(value: Any, arrow_type: pa.DataType) -> tuple[str, dict[str, Any]] | None:
    if value is None:
        return None
    ordinal, info = _ordinal_of(arrow_type)
    if ordinal == ValueType.DECIMAL:
        return _wrap("BytesWrapper", _unscaled_bytes(decimal.Decimal(value), arrow_type.scale))
    if ordinal == ValueType.DATE:
        return _wrap("IntWrapper", (value - _EPOCH_DATE).days)
    if ordinal >= ValueType.TIMESTAMP_MILLIS:
        return _wrap("LongWrapper", pa.scalar(value, arrow_type).cast(pa.int64()).as_py())
    name = {
        ValueType.BOOLEAN: "BooleanWrapper",
        ValueType.INT: "IntWrapper",
        ValueType.LONG: "LongWrapper",
        ValueType.FLOAT: "FloatWrapper",
        ValueType.DOUBLE: "DoubleWrapper",
        ValueType.STRING: "StringWrapper",
        ValueType.BYTES: "BytesWrapper",
    }[ordinal]
    return _wrap(name, value)


def _v1_decimal(value: Any, rounding: str) -> decimal.Decimal | None:
    """A bound in version 1's decimal(30, 15), rounded away from the range's inside (`rounding`: floor
    for a minimum, ceiling for a maximum) so that it still bounds every value; None when it does not
    fit (a range without that bound keeps every file)."""
    context = decimal.Context(prec=_EXACT.prec, rounding=rounding)
    bound = decimal.Decimal(value).quantize(decimal.Decimal(1).scaleb(-_V1_DECIMAL_SCALE), context=context)
    return bound if len(bound.as_tuple().digits) <= _V1_DECIMAL_PRECISION else None


def _encode_v1(value: Any, arrow_type: pa.DataType, rounding: str) -> tuple[str, dict[str, Any]] | None:
    if value is None:
        return None
    if pa.types.is_decimal(arrow_type):
        bound = _v1_decimal(value, rounding)
        return None if bound is None else _wrap("DecimalWrapper", bound)
    if pa.types.is_date(arrow_type):
        return _wrap("DateWrapper", (value - _EPOCH_DATE).days)
    if pa.types.is_timestamp(arrow_type):
        micros = pa.scalar(value, arrow_type).cast(pa.timestamp("us", arrow_type.tz)).cast(pa.int64()).as_py()
        return _wrap("TimestampMicrosWrapper", micros)
    return _encode_v2(value, arrow_type)


def encode_range(stats: ColumnRange, arrow_type: pa.DataType, version: int, record_type: MetadataRecordType) -> bytes:
    """The Avro value of `stats` (index `version` 1 or 2), the key field empty as Hudi writes it."""

    def encode(value: Any, rounding: str) -> tuple[str, dict[str, Any]] | None:
        """A bound (`rounding` outward: floor for the minimum, ceiling for the maximum; version 1 only)."""
        return _encode_v2(value, arrow_type) if version >= 2 else _encode_v1(value, arrow_type, rounding)

    value_type = None
    if version >= 2:
        if stats.min_value is None and stats.max_value is None:
            ordinal, info = ValueType.NULL, None  # no value (or a tombstone): Hudi types the range NULL
        else:
            ordinal, info = _ordinal_of(arrow_type)
        value_type = {"typeOrdinal": int(ordinal), "additionalInfo": info}
    record = {
        "key": "",
        "type": int(record_type),
        "filesystemMetadata": None,
        "ColumnStatsMetadata": {
            "fileName": stats.file_name,
            "columnName": stats.column,
            "minValue": None if stats.deleted else encode(stats.min_value, decimal.ROUND_FLOOR),
            "maxValue": None if stats.deleted else encode(stats.max_value, decimal.ROUND_CEILING),
            "valueCount": stats.value_count,
            "nullCount": stats.null_count,
            "totalSize": stats.total_size,
            "totalUncompressedSize": stats.total_uncompressed_size,
            "isDeleted": stats.deleted,
            "isTightBound": stats.tight_bound,
            "valueType": value_type,
        },
    }
    out = io.BytesIO()
    fastavro.schemaless_writer(out, _PARSED_SCHEMA, record)
    return out.getvalue()


# -- stats of a data file ---------------------------------------------------------------------
def _typed(value: Any, arrow_type: pa.DataType) -> Any:
    """A Parquet statistics value as the Python value of the column's Arrow type."""
    if value is None:
        return None
    if isinstance(value, bytes) and (pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)):
        return value.decode("utf-8")
    return pa.scalar(value).cast(arrow_type).as_py() if not isinstance(value, str | bytes) else value


def parquet_ranges(data: bytes | pa.NativeFile, file_name: str, columns: Iterable[str]) -> dict[str, ColumnRange]:
    """Per column of `columns` that the file has (top-level, primitive): its range in the file, as
    Hudi's `HoodieColumnRangeMetadata` from the Parquet footer (min/max over the row groups, nulls
    and values summed, compressed and uncompressed chunk sizes summed)."""
    source = pa.BufferReader(data) if isinstance(data, bytes) else data
    meta = pq.ParquetFile(source).metadata
    arrow_schema = meta.schema.to_arrow_schema()
    index = {meta.schema.column(i).path: i for i in range(meta.num_columns)}
    out: dict[str, ColumnRange] = {}
    for column in columns:
        position = index.get(column)
        if position is None or column not in arrow_schema.names:
            continue
        arrow_type = arrow_schema.field(column).type
        if not indexable(arrow_type):
            continue
        low = high = None
        nulls = values = size = raw = 0
        unbounded = unknown_nulls = False
        for g in range(meta.num_row_groups):
            chunk = meta.row_group(g).column(position)
            size += chunk.total_compressed_size
            raw += chunk.total_uncompressed_size
            values += chunk.num_values
            stats = chunk.statistics
            chunk_nulls = stats.null_count if stats is not None and stats.has_null_count else None
            unknown_nulls |= chunk_nulls is None
            nulls += chunk_nulls or 0
            if stats is not None and stats.has_min_max:
                lo, hi = _typed(stats.min, arrow_type), _typed(stats.max, arrow_type)
                low = lo if low is None or lo < low else low
                high = hi if high is None or hi > high else high
            elif chunk_nulls is None or chunk_nulls < chunk.num_values:
                unbounded = True  # values without min/max (a writer keeps none past 4 KiB): no bound
        if unbounded:
            low = high = None
        if unknown_nulls:
            # a chunk without a null count: counted as holding a null and a value more, so that
            # neither `is null` nor `is not null` rules the file out
            nulls, values = max(nulls, 1), max(values, nulls) + 1
        out[column] = ColumnRange(file_name, column, low, high, values, nulls, size, raw)
    return out


def table_ranges(table: pa.Table, file_name: str, columns: Iterable[str]) -> dict[str, ColumnRange]:
    """Per column of `columns` in `table`: its range over the rows (stats of a log file's records;
    no sizes, not a tight bound, as Hudi writes them for log files). A table without rows (a log file
    of deletes only) gets an empty range for every column, as Hudi writes for such a log file."""
    out: dict[str, ColumnRange] = {}
    for column in columns:
        if table.num_rows == 0:
            out[column] = ColumnRange(file_name, column, None, None, 0, 0)
            continue
        if column not in table.column_names or not indexable(table.schema.field(column).type):
            continue
        values = table.column(column)
        bounds = pc.min_max(values) if len(values) else None
        low = column_value(bounds["min"].as_py(), None) if bounds is not None else None  # NaN: no bound
        high = column_value(bounds["max"].as_py(), None) if bounds is not None else None
        out[column] = ColumnRange(file_name, column, low, high, len(values), values.null_count)
    return out


# -- reading the partition --------------------------------------------------------------------
def index_version(storage: Storage, table_version: int) -> int:
    """The column-stats index version of a table: its `index.json` entry (v9), else 2 on table
    version 9 and 1 before."""
    version = str(load_index_definitions(storage).get(COLUMN_STATS_PARTITION, {}).get("version", "") or "")
    if version.upper().startswith("V"):
        return int(version[1:])
    return 2 if table_version >= 9 else 1


def _apply(merged: dict[str, ColumnRange], data: bytes, name: str, keep: Callable[[str], bool] | None) -> None:
    for raw, value in HFileReader(data, name).items():
        key = raw.decode()
        if keep is not None and not keep(key):
            continue  # not asked for: not decoded
        record = fastavro.schemaless_reader(io.BytesIO(value), _PARSED_SCHEMA, None)
        stats = decode_range(record)  # type: ignore[arg-type]
        if stats.deleted:
            merged.pop(key, None)
        else:
            merged[key] = stats


def columns_filter(columns: Iterable[str]) -> Callable[[str], bool]:
    """A `read_ranges` key filter: the records of these columns (keys start with the column's id)."""
    ids = {hash_id(c) for c in columns}
    return lambda key: key[:12] in ids


def partitions_filter(partitions: Iterable[str]) -> Callable[[str], bool]:
    """A `read_ranges` key filter: the records of these data partitions (the key's second id)."""
    ids = {hash_id(partition_identifier(p)) for p in partitions}
    return lambda key: key[12:24] in ids


def read_ranges(
    storage: Storage, partition: str = COLUMN_STATS_PARTITION, keep: Callable[[str], bool] | None = None
) -> dict[str, ColumnRange]:
    """The merged records of a stats partition of the table's metadata table (key -> live range):
    per file group its latest base HFile, then the committed log blocks, newest last. `keep`: decode
    only the keys it accepts (`columns_filter`, `partitions_filter`)."""
    mdt = metadata_storage(storage)
    timeline = load_metadata_timeline(mdt)
    completion = slice_times(timeline)
    first = timeline.instants[0].time if timeline.instants else None
    merged: dict[str, ColumnRange] = {}
    for group in latest_slices(mdt, completion, first, partition).values():
        if group.base is not None:
            _apply(merged, mdt.read_bytes(group.base), group.base, keep)
        ordered = [path for *_, path in sorted(group.logs)]
        for path, block in committed_blocks(mdt, ordered, completion):
            if block.block_type is log_file.BlockType.HFILE_DATA:
                _apply(merged, block.content, path, keep)
    return merged
