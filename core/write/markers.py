"""Direct write markers under `.hoodie/.temp/<instant>/`: created before every data file.

They let a failed or abandoned instant be rolled back exactly: every data file it may
have written has a marker, even if the writer died before committing.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from lakeward.core.storage import Storage
from lakeward.core.timeline import METAFOLDER

TEMP_FOLDER = posixpath.join(METAFOLDER, ".temp")
_SUFFIX = ".marker."


@dataclass(frozen=True)
class Marker:
    partition_path: str
    file_name: str
    io_type: str  # CREATE, MERGE or APPEND

    @property
    def data_path(self) -> str:
        return posixpath.join(self.partition_path, self.file_name) if self.partition_path else self.file_name


def marker_dir(instant_time: str) -> str:
    return posixpath.join(TEMP_FOLDER, instant_time)


def create_marker(storage: Storage, instant_time: str, partition_path: str, file_name: str, io_type: str) -> None:
    rel = posixpath.join(marker_dir(instant_time), partition_path, f"{file_name}{_SUFFIX}{io_type}")
    storage.write_bytes(rel, b"")


def list_markers(storage: Storage, instant_time: str) -> list[Marker]:
    root = marker_dir(instant_time) + "/"
    markers = []
    for entry in storage.list_dir(marker_dir(instant_time), recursive=True):
        if entry.is_dir or _SUFFIX not in entry.name:
            continue
        rel = entry.path[len(root) :] if entry.path.startswith(root) else entry.path
        partition = posixpath.dirname(rel)
        file_name, _, io_type = posixpath.basename(rel).rpartition(_SUFFIX)
        markers.append(Marker(partition, file_name, io_type))
    return markers


def delete_markers(storage: Storage, instant_time: str) -> None:
    storage.delete_dir(marker_dir(instant_time))
