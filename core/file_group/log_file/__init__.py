"""Hudi log files (log format version 1): blocks, their framing, a reader and a writer.

- `log_block`: the block model (data blocks in Avro or Parquet, delete, command blocks).
- `content`: block contents in and out of Arrow (Avro records, Parquet, delete lists).
- `log_format`: framing of blocks in a file, and detection of corrupt blocks.
- `reader`: `LogFileReader` / `read_log_file`, which skip corrupt blocks with a warning.
- `writer`: `LogFileWriter` / `write_log_blocks`, Hudi naming and size rollover.
"""

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
    decode_block,
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
    "decode_block",
    "encode_block",
    "read_log_file",
    "scan_blocks",
    "write_log_blocks",
]
