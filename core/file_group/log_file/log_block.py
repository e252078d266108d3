"""Log blocks: the units a Hudi log file is made of (format doc 6.2-6.8).

A block is a type, a header map (which instant wrote it, its schema, a rollback's
target ...), a content and a footer map (empty in practice). The classes here are the
in-memory model used on both sides: the writer serialises them, the reader builds them.

- `AvroDataBlock` / `ParquetDataBlock`: records WITH the five `_hoodie_*` meta columns.
- `DeleteBlock`: record keys (with partition path and ordering value) to delete.
- `CommandBlock`: a rollback of all blocks of `TARGET_INSTANT_TIME`; no content.
- `CdcDataBlock`: change records of one instant (in a `.cdc` log file), Avro-encoded.
- `OpaqueBlock`: HFile blocks, carried as bytes (not decoded here).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum, IntEnum

import pyarrow as pa

from lakeward.core.exceptions import CorruptTableError, SchemaError
from lakeward.core.file_group.log_file.content import (
    DEFAULT_PARQUET_BLOCK_COMPRESSION,
    DELETE_ORDERING_VALUE,
    DELETE_PARTITION_PATH,
    DELETE_RECORD_KEY,
    encode_avro_records,
    encode_delete_records,
    encode_parquet_records,
)
from lakeward.core.schema import META_COLUMNS


class BlockType(IntEnum):
    """Block type codes, written as the block's type int (format doc 6.2)."""

    COMMAND = 0
    DELETE = 1
    CORRUPT = 2  # never written: a reader's marker for damaged bytes
    AVRO_DATA = 3
    HFILE_DATA = 4
    PARQUET_DATA = 5
    CDC_DATA = 6


class HeaderKey(IntEnum):
    """Keys of header and footer maps, written as their ordinal (format doc 6.3)."""

    INSTANT_TIME = 0
    TARGET_INSTANT_TIME = 1
    SCHEMA = 2
    COMMAND_BLOCK_TYPE = 3
    COMPACTED_BLOCK_TIMES = 4
    RECORD_POSITIONS = 5
    BLOCK_IDENTIFIER = 6
    IS_PARTIAL = 7
    BASE_FILE_INSTANT_TIME_OF_RECORD_POSITIONS = 8


class CommandType(IntEnum):
    """`COMMAND_BLOCK_TYPE` values; a rollback is the only command Hudi has."""

    ROLLBACK = 0


class DataBlockFormat(str, Enum):
    """`hoodie.logfile.data.block.format`: how data blocks hold their records."""

    AVRO = "avro"
    PARQUET = "parquet"

    @classmethod
    def parse(cls, value: str | DataBlockFormat) -> DataBlockFormat:
        try:
            return cls(str(value.value if isinstance(value, DataBlockFormat) else value).strip().lower())
        except ValueError:
            raise SchemaError(f"hoodie.logfile.data.block.format={value!r} must be 'avro' or 'parquet'") from None


Header = Mapping[HeaderKey, str]


@dataclass(frozen=True, kw_only=True)
class LogBlock(abc.ABC):
    """Common part of every block: its header and footer maps."""

    header: Header
    footer: Header = field(default_factory=dict)

    @property
    @abc.abstractmethod
    def block_type(self) -> BlockType:
        """The block's type code, as written in the log file."""

    @property
    def instant_time(self) -> str:
        """The instant that wrote the block (every block has one)."""
        value = self.header.get(HeaderKey.INSTANT_TIME)
        if value is None:
            raise CorruptTableError(f"{self.block_type.name} block has no INSTANT_TIME header")
        return value

    @abc.abstractmethod
    def content(self) -> bytes:
        """The block's content bytes, as they go between the header and the footer."""


def _with_meta_first(records: pa.Table) -> pa.Table:
    missing = [c for c in META_COLUMNS if c not in records.column_names]
    if missing:
        raise SchemaError(f"data block records lack the meta column(s) {missing}; log records carry all five")
    rest = [c for c in records.column_names if c not in META_COLUMNS]
    return records.select([*META_COLUMNS, *rest])


@dataclass(frozen=True, kw_only=True)
class DataBlock(LogBlock):
    """Records of one instant for one file slice, meta columns first."""

    records: pa.Table

    @property
    def schema_json(self) -> str:
        """The Avro writer schema (with meta fields) of the records: the `SCHEMA` header."""
        value = self.header.get(HeaderKey.SCHEMA)
        if value is None:
            raise CorruptTableError(f"{self.block_type.name} block has no SCHEMA header")
        return value

    @classmethod
    def create(cls, records: pa.Table, instant_time: str, schema_json: str) -> DataBlock:
        """A block of `records` (which carry the five meta columns) written by `instant_time`."""
        header = {HeaderKey.INSTANT_TIME: instant_time, HeaderKey.SCHEMA: schema_json}
        return cls(header=header, records=_with_meta_first(records))


@dataclass(frozen=True, kw_only=True)
class AvroDataBlock(DataBlock):
    """Type 3: records as length-prefixed Avro datums (Hudi's default data block format)."""

    @property
    def block_type(self) -> BlockType:
        return BlockType.AVRO_DATA

    def content(self) -> bytes:
        return encode_avro_records(self.records, self.schema_json)


@dataclass(frozen=True, kw_only=True)
class ParquetDataBlock(DataBlock):
    """Type 5: records as one complete Parquet file."""

    compression: str = DEFAULT_PARQUET_BLOCK_COMPRESSION

    @property
    def block_type(self) -> BlockType:
        return BlockType.PARQUET_DATA

    def content(self) -> bytes:
        return encode_parquet_records(self.records, self.schema_json, self.compression)


def data_block(
    records: pa.Table,
    instant_time: str,
    schema_json: str,
    block_format: DataBlockFormat | str = DataBlockFormat.AVRO,
    *,
    compression: str = DEFAULT_PARQUET_BLOCK_COMPRESSION,
) -> DataBlock:
    """A data block in `hoodie.logfile.data.block.format` (Avro by default, as Hudi)."""
    if DataBlockFormat.parse(block_format) is DataBlockFormat.AVRO:
        return AvroDataBlock.create(records, instant_time, schema_json)
    header = {HeaderKey.INSTANT_TIME: instant_time, HeaderKey.SCHEMA: schema_json}
    return ParquetDataBlock(header=header, records=_with_meta_first(records), compression=compression)


def _string_array(values: pa.Array | pa.ChunkedArray | list[str]) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.Array):
        return values if pa.types.is_string(values.type) else values.cast(pa.string())
    return pa.array(values, pa.string())


@dataclass(frozen=True, kw_only=True)
class DeleteBlock(LogBlock):
    """Type 1: keys deleted by one instant; columns record_key, partition_path, ordering_value."""

    records: pa.Table

    @property
    def block_type(self) -> BlockType:
        return BlockType.DELETE

    def content(self) -> bytes:
        return encode_delete_records(self.records)

    @classmethod
    def create(
        cls,
        instant_time: str,
        schema_json: str,
        record_keys: pa.Array | pa.ChunkedArray | list[str],
        partition_paths: pa.Array | pa.ChunkedArray | list[str] | str,
        ordering_values: pa.Array | pa.ChunkedArray | list[object] | None = None,
    ) -> DeleteBlock:
        """Deletes of `record_keys`; `ordering_values` (the table's ordering field type) are optional.

        Hudi reads a delete without an ordering value (null, or Spark SQL's 0) as a
        natural-order delete: it removes every earlier version of the key.
        """
        keys = _string_array(record_keys)
        if isinstance(partition_paths, str):
            partitions = pa.array([partition_paths] * len(keys), pa.string())
        else:
            partitions = _string_array(partition_paths)
        columns: dict[str, pa.Array] = {DELETE_RECORD_KEY: keys, DELETE_PARTITION_PATH: partitions}
        if isinstance(ordering_values, pa.ChunkedArray):
            columns[DELETE_ORDERING_VALUE] = ordering_values.combine_chunks()
        elif isinstance(ordering_values, pa.Array):
            columns[DELETE_ORDERING_VALUE] = ordering_values
        elif ordering_values is not None:
            columns[DELETE_ORDERING_VALUE] = pa.array(ordering_values)
        else:
            columns[DELETE_ORDERING_VALUE] = pa.nulls(len(keys))
        header = {HeaderKey.INSTANT_TIME: instant_time, HeaderKey.SCHEMA: schema_json}
        return cls(header=header, records=pa.table(columns))


@dataclass(frozen=True, kw_only=True)
class CommandBlock(LogBlock):
    """Type 0: a command in the header; Hudi's only command is ROLLBACK of a target instant."""

    @property
    def block_type(self) -> BlockType:
        return BlockType.COMMAND

    def content(self) -> bytes:
        return b""

    @property
    def command_type(self) -> CommandType | None:
        raw = self.header.get(HeaderKey.COMMAND_BLOCK_TYPE)
        try:
            return CommandType(int(raw)) if raw is not None else None
        except ValueError:
            return None

    @property
    def target_instant_time(self) -> str | None:
        return self.header.get(HeaderKey.TARGET_INSTANT_TIME)

    @classmethod
    def rollback(cls, instant_time: str, target_instant_time: str) -> CommandBlock:
        """The block a rollback instant appends: every block of `target_instant_time` is void."""
        return cls(
            header={
                HeaderKey.INSTANT_TIME: instant_time,
                HeaderKey.TARGET_INSTANT_TIME: target_instant_time,
                HeaderKey.COMMAND_BLOCK_TYPE: str(CommandType.ROLLBACK.value),
            }
        )


@dataclass(frozen=True, kw_only=True)
class CdcDataBlock(LogBlock):
    """Type 6: change records (op, key, images) of one instant, as an Avro data block's content.

    The `SCHEMA` header is the CDC record schema of the table's supplemental logging mode
    (format doc 10), not the table schema; records carry no meta columns of their own.
    """

    records: pa.Table

    @property
    def block_type(self) -> BlockType:
        return BlockType.CDC_DATA

    @property
    def schema_json(self) -> str:
        value = self.header.get(HeaderKey.SCHEMA)
        if value is None:
            raise CorruptTableError("CDC data block has no SCHEMA header")
        return value

    @classmethod
    def create(cls, records: pa.Table, instant_time: str, schema_json: str) -> CdcDataBlock:
        return cls(header={HeaderKey.INSTANT_TIME: instant_time, HeaderKey.SCHEMA: schema_json}, records=records)

    def content(self) -> bytes:
        return encode_avro_records(self.records, self.schema_json)


@dataclass(frozen=True, kw_only=True)
class OpaqueBlock(LogBlock):
    """A block kept as raw content: HFile data blocks (metadata table)."""

    kind: BlockType
    raw_content: bytes

    @property
    def block_type(self) -> BlockType:
        return self.kind

    def content(self) -> bytes:
        return self.raw_content
