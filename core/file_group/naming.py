"""File names as Hudi forms them: file ids, write tokens, base files and log files."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from lakeward.core.table_version import INSTANT_TIME_PATTERN, LogSlicing

BASE_FILE_EXTENSION = ".parquet"
PARTITION_METADATA_FILE = ".hoodie_partition_metadata"
#: Hudi's "unknown" write token, used for files not written by a numbered task.
UNKNOWN_WRITE_TOKEN = "1-0-1"

_BASE_RE = re.compile(rf"^([^_]+)_(\d+-\d+-\d+)_({INSTANT_TIME_PATTERN})\.(parquet|orc|hfile)$")
_LOG_RE = re.compile(rf"^\.([^_]+)_({INSTANT_TIME_PATTERN}|)\.(log|archive)\.(\d+)(?:_(\d+-\d+-\d+))?(\.cdc|-cdc)?$")


def new_file_id() -> str:
    """A new file group id: a random UUID and the handle's file counter (always 0 here)."""
    return f"{uuid.uuid4()}-0"


def write_token(task_partition: int, stage: int, attempt: int) -> str:
    return f"{task_partition}-{stage}-{attempt}"


def base_file_name(file_id: str, token: str, instant_time: str) -> str:
    return f"{file_id}_{token}_{instant_time}{BASE_FILE_EXTENSION}"


def log_file_name(file_id: str, base_instant_time: str, version: int, token: str, *, cdc: bool = False) -> str:
    """`.<fileId>_<baseInstant>.log.<version>_<writeToken>[.cdc]` (format doc 4.4).

    `base_instant_time` is the instant of the file slice the log belongs to (its base
    file's, or a pending compaction's), not the instant that writes the log.
    """
    if version < 1:
        raise ValueError(f"log file versions start at 1, got {version}")
    return f".{file_id}_{base_instant_time}.log.{version}_{token}{'.cdc' if cdc else ''}"


def log_file_instant(slicing: LogSlicing, base_instant_time: str, writing_instant_time: str) -> str:
    """The instant a new log file's name carries, by the table version's `log_slicing`.

    v6 (`BASE_INSTANT`): the slice's base instant, so the log joins that slice and later
    versions continue its numbering. v8+ (`COMPLETION_TIME`): the delta commit writing it,
    each instant in its own log files from version 1 (readers slice by its completion time,
    and a rollback deletes whole files).
    """
    return base_instant_time if slicing is LogSlicing.BASE_INSTANT else writing_instant_time


@dataclass(frozen=True)
class BaseFileName:
    file_id: str
    write_token: str
    instant_time: str


@dataclass(frozen=True)
class LogFileName:
    file_id: str
    base_instant_time: str
    version: int
    write_token: str
    is_cdc: bool


def parse_base_file_name(name: str) -> BaseFileName | None:
    m = _BASE_RE.match(name)
    return BaseFileName(m.group(1), m.group(2), m.group(3)) if m else None


def parse_log_file_name(name: str) -> LogFileName | None:
    m = _LOG_RE.match(name)
    if not m or m.group(3) != "log":
        return None
    return LogFileName(m.group(1), m.group(2), int(m.group(4)), m.group(5) or "", bool(m.group(6)))
