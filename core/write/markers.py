"""Direct write markers under `.hoodie/.temp/<instant>/`: created before every data file.

They let a failed or abandoned instant be rolled back exactly: every data file it may
have written has a marker, even if the writer died before committing.
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Iterable
from dataclasses import dataclass

from lakeward.core.storage import Storage
from lakeward.core.timeline import METAFOLDER

log = logging.getLogger(__name__)
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


def reconcile_markers(storage: Storage, instant_time: str, committed_paths: Iterable[str]) -> list[str]:
    """Delete data files that have a marker but are not part of the commit; return their paths.

    A task attempt that failed after writing its file, or a speculative duplicate, leaves
    such a file: it must not survive next to the committed version of the file group.
    """
    keep = set(committed_paths)
    orphans = [
        m.data_path
        for m in list_markers(storage, instant_time)
        if m.io_type != "APPEND" and m.data_path not in keep  # appended log files are neutralised, not deleted
    ]
    for path in orphans:
        log.info("deleting %s: written by a failed or duplicate task attempt of %s", path, instant_time)
        storage.delete_file(path, missing_ok=True)
    return orphans
