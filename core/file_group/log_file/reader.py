"""Reading one log file: its blocks in order, surviving torn and damaged blocks.

The file is read whole (one GET on object stores; log files are bounded by
`hoodie.logfile.max.size`). Corrupt stretches (format doc 6.1: size running past the
end, trailing length disagreeing, no magic after the block) are logged as warnings,
counted in `corrupt_blocks` and skipped; the sound blocks before and after them are read.
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Iterator

from lakeward.core.exceptions import MissingFileError
from lakeward.core.file_group.log_file.log_block import LogBlock
from lakeward.core.file_group.log_file.log_format import CorruptBlock, RawBlock, decode_block, scan_blocks
from lakeward.core.file_group.naming import parse_log_file_name
from lakeward.core.storage import Storage

log = logging.getLogger(__name__)


class LogFileReader:
    """The blocks of one log file (path relative to the table's base path)."""

    def __init__(self, storage: Storage, path: str):
        self.storage = storage
        self.path = path
        #: Corrupt stretches met so far (filled while iterating).
        self.corrupt_blocks: list[CorruptBlock] = []

    def raw_blocks(self) -> Iterator[RawBlock]:
        """Soundly framed blocks, content not decoded (cheap: for header-only decisions)."""
        self.corrupt_blocks = []
        try:
            data = self.storage.read_bytes(self.path)
        except FileNotFoundError as exc:
            parsed = parse_log_file_name(posixpath.basename(self.path))
            instant = parsed.base_instant_time if parsed is not None else None
            uri = self.storage.uri_of(self.path)
            raise MissingFileError(f"log file {uri} (instant {instant}) is missing: {exc}", uri, instant) from exc
        for block in scan_blocks(data):
            if isinstance(block, CorruptBlock):
                self.corrupt_blocks.append(block)
                log.warning(
                    "skipping a corrupt log block in %s: %d bytes at offset %d (%s)",
                    self.storage.uri_of(self.path),
                    block.length,
                    block.offset,
                    block.reason,
                )
                continue
            yield block

    def blocks(self) -> Iterator[LogBlock]:
        """Every sound block, decoded, in file order."""
        for raw in self.raw_blocks():
            yield decode_block(raw)

    def __iter__(self) -> Iterator[LogBlock]:
        return self.blocks()


def read_log_file(storage: Storage, path: str) -> list[LogBlock]:
    """All sound blocks of one log file, decoded (corrupt blocks are logged and skipped)."""
    return list(LogFileReader(storage, path).blocks())


def block_instant_times(storage: Storage, path: str) -> set[str] | None:
    """The `INSTANT_TIME`s of a log file's sound blocks; None when the file does not exist.

    Headers only (contents are not decoded). Used to check that a log file holds blocks
    of one instant only before a rollback deletes it.
    """
    if not storage.exists(path):
        return None
    return {raw.instant_time or "" for raw in LogFileReader(storage, path).raw_blocks()}
