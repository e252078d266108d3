"""The units of a CDC query's work: which inference case finds the changes of one commit to one
file group (`InferenceCase`), from which states of the group (`FileGroupState`), as one
`ChangeSplit`. Plain data: planned by `extract.plan_change_splits`, shipped to either engine,
and read by `extract` and `image_versions` (a module of their own so both import them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from lakeward.core.file_group.file_group import FileSlice
from lakeward.core.file_group.reader import VisibleInstants


class InferenceCase(str, Enum):
    AS_IS = "AS_IS"
    BASE_FILE_INSERT = "BASE_FILE_INSERT"
    BASE_FILE_DELETE = "BASE_FILE_DELETE"
    LOG_FILE = "LOG_FILE"
    REPLACE_COMMIT = "REPLACE_COMMIT"


@dataclass(frozen=True)
class FileGroupState:
    """The rows of a file group at one point: a slice, read with the log blocks `visible` sees."""

    file_slice: FileSlice
    visible: VisibleInstants


@dataclass(frozen=True)
class ChangeSplit:
    """The changes of one commit to one file group (LOG_FILE: of a slice's wanted delta commits),
    and what they are found from."""

    case: InferenceCase
    instant_time: str
    partition_path: str
    file_id: str
    before: FileGroupState | None = None
    after: FileGroupState | None = None
    cdc_files: tuple[str, ...] = ()
    #: LOG_FILE: the delta commits of the slice (`after.file_slice`) wanted.
    instants: tuple[str, ...] = field(default=())
