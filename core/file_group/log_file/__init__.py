"""Hudi log files (log format version 1): blocks, their framing, a reader and a writer.

- `log_block`: the block model (data blocks in Avro or Parquet, delete, command blocks).
- `content`: block contents in and out of Arrow (Avro records, Parquet, delete lists).
- `log_format`: framing of blocks in a file, and detection of corrupt blocks.
- `reader`: `LogFileReader` / `read_log_file`, which skip corrupt blocks with a warning.
- `writer`: `LogFileWriter` / `write_log_blocks`, Hudi naming and size rollover.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakeward.core.lazy import on_first_use

if TYPE_CHECKING:
    from lakeward.core.file_group.log_file.log_block import (
        AvroDataBlock,
        BlockType,
        CdcDataBlock,
        CommandBlock,
        CommandType,
        DataBlock,
        DataBlockFormat,
        DeleteBlock,
        HeaderKey,
        LogBlock,
        OpaqueBlock,
        ParquetDataBlock,
        data_block,
    )
    from lakeward.core.file_group.log_file.log_format import (
        MAGIC,
        CorruptBlock,
        RawBlock,
        decode_avro_together,
        decode_block,
        decode_blocks,
        encode_block,
        scan_blocks,
    )
    from lakeward.core.file_group.log_file.reader import LogFileReader, block_instant_times, read_log_file
    from lakeward.core.file_group.log_file.writer import (
        DEFAULT_MAX_LOG_FILE_SIZE,
        MAX_LOG_FILE_SIZE_KEY,
        LogFileWriter,
        WrittenLogFile,
        write_log_blocks,
    )

__all__ = [
    "DEFAULT_MAX_LOG_FILE_SIZE",
    "MAGIC",
    "MAX_LOG_FILE_SIZE_KEY",
    "AvroDataBlock",
    "BlockType",
    "CdcDataBlock",
    "CommandBlock",
    "CommandType",
    "CorruptBlock",
    "DataBlock",
    "DataBlockFormat",
    "DeleteBlock",
    "HeaderKey",
    "LogBlock",
    "LogFileReader",
    "LogFileWriter",
    "OpaqueBlock",
    "ParquetDataBlock",
    "RawBlock",
    "WrittenLogFile",
    "block_instant_times",
    "data_block",
    "decode_avro_together",
    "decode_block",
    "decode_blocks",
    "encode_block",
    "read_log_file",
    "scan_blocks",
    "write_log_blocks",
]

# The names load with their module on first use: opening a table lists log files but decodes no block
# (`content` brings fastavro and pyarrow.parquet; start-up time, issue 23).
__getattr__ = on_first_use(
    __name__,
    {
        "AvroDataBlock": "log_block",
        "BlockType": "log_block",
        "CdcDataBlock": "log_block",
        "CommandBlock": "log_block",
        "CommandType": "log_block",
        "DataBlock": "log_block",
        "DataBlockFormat": "log_block",
        "DeleteBlock": "log_block",
        "HeaderKey": "log_block",
        "LogBlock": "log_block",
        "OpaqueBlock": "log_block",
        "ParquetDataBlock": "log_block",
        "data_block": "log_block",
        "MAGIC": "log_format",
        "CorruptBlock": "log_format",
        "RawBlock": "log_format",
        "decode_avro_together": "log_format",
        "decode_block": "log_format",
        "decode_blocks": "log_format",
        "encode_block": "log_format",
        "scan_blocks": "log_format",
        "LogFileReader": "reader",
        "block_instant_times": "reader",
        "read_log_file": "reader",
        "DEFAULT_MAX_LOG_FILE_SIZE": "writer",
        "MAX_LOG_FILE_SIZE_KEY": "writer",
        "LogFileWriter": "writer",
        "WrittenLogFile": "writer",
        "write_log_blocks": "writer",
    },
)
