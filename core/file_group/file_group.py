"""File groups and file slices: the unit every write, read and table service works on."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field


@dataclass(frozen=True)
class BaseFile:
    """A Parquet base file; `path` is relative to the table's base path."""

    path: str
    file_id: str
    instant_time: str
    size: int

    @property
    def name(self) -> str:
        return posixpath.basename(self.path)


@dataclass(frozen=True)
class LogFile:
    path: str
    file_id: str
    base_instant_time: str
    version: int
    write_token: str
    size: int

    @property
    def name(self) -> str:
        return posixpath.basename(self.path)


@dataclass(frozen=True)
class FileSlice:
    """A base file (if any) plus the log files written on top of it.

    `cdc_files`: the slice's `.cdc` log files (change data); never part of its rows, but
    they live and die with the slice (the cleaner removes them with it).
    """

    partition_path: str
    file_id: str
    base_instant_time: str
    base_file: BaseFile | None = None
    log_files: tuple[LogFile, ...] = ()
    cdc_files: tuple[LogFile, ...] = ()

    @property
    def size(self) -> int:
        return (self.base_file.size if self.base_file else 0) + sum(f.size for f in self.log_files)


@dataclass
class FileGroup:
    """All slices of one (partition, file id), ordered by base instant time."""

    partition_path: str
    file_id: str
    slices: list[FileSlice] = field(default_factory=list)

    def latest_slice(self, as_of: str | None = None) -> FileSlice | None:
        candidates = [s for s in self.slices if as_of is None or s.base_instant_time <= as_of]
        return candidates[-1] if candidates else None
