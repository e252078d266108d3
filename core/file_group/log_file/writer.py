"""Writing log blocks of one file slice: Hudi's naming, a new version per block set, size rollover.

Where the blocks go (format doc 4.4, 4.6):

- Files are named `.<fileId>_<baseInstant>.log.<version>_<writeToken>`, versions from 1.
- Every `append` (one write's block set for the slice) starts a NEW log file version,
  the next after the highest existing one, instead of appending to an existing file.
  Apache Hudi 0.14/0.15 does the same (each write creates the next version), and it is
  the only way that works on object stores (S3, GCS), which cannot append: a file is
  written once, whole, with an atomic create-if-absent, so readers never see half a
  file from a live writer and two writers can never write into the same file.
- Inside one `append`, blocks go into the current file until it passes `max_file_size`
  (`hoodie.logfile.max.size`); the next block starts the next version (Hudi's
  rollover: a file can exceed the limit by the one block that crossed it).
- If a racing writer took a version first, the writer moves on to the next one.
- `before_create(path)` runs before each file is created (the write client creates the
  file's APPEND marker there), `on_taken(path)` when that version was taken by someone
  else (the marker is withdrawn), so a marker exists for every log file written.

`LogFileWriter` holds no global state and only plain values, so it runs the same inside
local thread-pool tasks and Spark tasks (build it from a `Storage` on the executor).
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lakeward.core.exceptions import InstantExistsError, StorageError
from lakeward.core.file_group.file_group import LogFile
from lakeward.core.file_group.log_file.log_block import CommandBlock, DataBlock, DeleteBlock, LogBlock
from lakeward.core.file_group.log_file.log_format import encode_block
from lakeward.core.file_group.naming import log_file_name, parse_log_file_name
from lakeward.core.storage import Storage

#: The write config key of the size at which a log file rolls over to the next version.
MAX_LOG_FILE_SIZE_KEY = "hoodie.logfile.max.size"
#: Hudi's default for `hoodie.logfile.max.size`: 1 GiB.
DEFAULT_MAX_LOG_FILE_SIZE = 1024 * 1024 * 1024
#: Versions tried past the latest one when racing writers keep taking them.
_MAX_VERSION_ATTEMPTS = 100


@dataclass(frozen=True)
class WrittenLogFile:
    """One log file written by `LogFileWriter.append`, and what went into it."""

    log_file: LogFile
    num_blocks: int
    #: Records of data blocks.
    num_records: int
    #: Keys of delete blocks.
    num_deletes: int
    #: Rollback command blocks.
    num_rollbacks: int


class LogFileWriter:
    """Writes block sets into the log files of one file slice (partition, file id, base instant)."""

    def __init__(
        self,
        storage: Storage,
        partition_path: str,
        file_id: str,
        base_instant_time: str,
        write_token: str,
        *,
        max_file_size: int = DEFAULT_MAX_LOG_FILE_SIZE,
        latest_version: int | None = None,
        before_create: Callable[[str], None] | None = None,
        on_taken: Callable[[str], None] | None = None,
    ):
        """`latest_version`: the slice's highest log version if the caller knows it (from the
        file-system view), which saves listing the partition; a version taken meanwhile by
        another writer is skipped either way. `before_create` / `on_taken`: called with the
        path of each log file before it is created / when its version was already taken.
        """
        if max_file_size <= 0:
            raise ValueError(f"{MAX_LOG_FILE_SIZE_KEY} must be positive, got {max_file_size}")
        self.storage = storage
        self.partition_path = partition_path
        self.file_id = file_id
        self.base_instant_time = base_instant_time
        self.write_token = write_token
        self.max_file_size = max_file_size
        self._latest_version = latest_version
        self._before_create = before_create
        self._on_taken = on_taken

    def _path(self, name: str) -> str:
        return posixpath.join(self.partition_path, name) if self.partition_path else name

    def latest_version(self) -> int:
        """The highest log version of this slice on storage (0 when it has no log file yet)."""
        latest = 0
        for entry in self.storage.list_dir(self.partition_path):
            parsed = parse_log_file_name(entry.name)
            if (
                parsed is not None
                and not parsed.is_cdc
                and parsed.file_id == self.file_id
                and parsed.base_instant_time == self.base_instant_time
            ):
                latest = max(latest, parsed.version)
        return latest

    def append(self, blocks: Sequence[LogBlock]) -> list[WrittenLogFile]:
        """Write `blocks` (in order) into new log file version(s); returns the files written.

        Nothing is written for an empty sequence.
        """
        groups: list[list[tuple[LogBlock, bytes]]] = []
        current: list[tuple[LogBlock, bytes]] = []
        size = 0
        for block in blocks:
            encoded = encode_block(block)
            current.append((block, encoded))
            size += len(encoded)
            if size > self.max_file_size:
                groups.append(current)
                current, size = [], 0
        if current:
            groups.append(current)
        written: list[WrittenLogFile] = []
        if not groups:
            return written
        if self._latest_version is None:
            self._latest_version = self.latest_version()
        for group in groups:
            log_file = self._create(self._latest_version + 1, b"".join(encoded for _, encoded in group))
            written.append(_describe(log_file, [b for b, _ in group]))
            self._latest_version = log_file.version
        return written

    def _create(self, version: int, data: bytes) -> LogFile:
        """Create the first free version >= `version` with `data`, atomically."""
        for candidate in range(version, version + _MAX_VERSION_ATTEMPTS):
            name = log_file_name(self.file_id, self.base_instant_time, candidate, self.write_token)
            path = self._path(name)
            if self._before_create is not None:
                self._before_create(path)
            try:
                self.storage.create_if_absent(path, data)
            except InstantExistsError:
                if self._on_taken is not None:
                    self._on_taken(path)
                continue
            return LogFile(path, self.file_id, self.base_instant_time, candidate, self.write_token, len(data))
        raise StorageError(
            f"no free log file version in {version}..{version + _MAX_VERSION_ATTEMPTS - 1} for file group "
            f"{self.file_id} in {self.storage.uri_of(self.partition_path)}"
        )


def _describe(log_file: LogFile, blocks: Sequence[LogBlock]) -> WrittenLogFile:
    records = sum(b.records.num_rows for b in blocks if isinstance(b, DataBlock))
    deletes = sum(b.records.num_rows for b in blocks if isinstance(b, DeleteBlock))
    rollbacks = sum(1 for b in blocks if isinstance(b, CommandBlock))
    return WrittenLogFile(log_file, len(blocks), records, deletes, rollbacks)


def write_log_blocks(
    storage: Storage,
    partition_path: str,
    file_id: str,
    base_instant_time: str,
    write_token: str,
    blocks: Sequence[LogBlock],
    *,
    max_file_size: int = DEFAULT_MAX_LOG_FILE_SIZE,
    latest_version: int | None = None,
    before_create: Callable[[str], None] | None = None,
    on_taken: Callable[[str], None] | None = None,
) -> list[WrittenLogFile]:
    """`LogFileWriter(...).append(blocks)` as one plain function (for engine tasks)."""
    writer = LogFileWriter(
        storage,
        partition_path,
        file_id,
        base_instant_time,
        write_token,
        max_file_size=max_file_size,
        latest_version=latest_version,
        before_create=before_create,
        on_taken=on_taken,
    )
    return writer.append(blocks)
