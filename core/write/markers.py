"""Direct write markers under `.hoodie/.temp/<instant>/`: created before every data file.

They let a failed or abandoned instant be rolled back exactly: every data file it may
have written has a marker, even if the writer died before committing.
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Iterable
from dataclasses import dataclass

from lakeward.core.exceptions import LakewardError
from lakeward.core.file_group.log_file import block_instant_times
from lakeward.core.file_group.naming import parse_log_file_name
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


def _marker_path(instant_time: str, partition_path: str, file_name: str, io_type: str) -> str:
    return posixpath.join(marker_dir(instant_time), partition_path, f"{file_name}{_SUFFIX}{io_type}")


def create_marker(storage: Storage, instant_time: str, partition_path: str, file_name: str, io_type: str) -> None:
    storage.write_bytes(_marker_path(instant_time, partition_path, file_name, io_type), b"")


def delete_marker(storage: Storage, instant_time: str, partition_path: str, file_name: str, io_type: str) -> None:
    """Withdraw one marker (e.g. the log file version it named was taken by another writer)."""
    storage.delete_file(_marker_path(instant_time, partition_path, file_name, io_type), missing_ok=True)


def log_file_written_by(storage: Storage, path: str, instant_time: str) -> bool:
    """Whether the log file at `path` exists and holds blocks of `instant_time` only.

    An APPEND marker names the exact log file version a task created (every append is a
    new file, written whole). The check guards against a marker left behind by a task
    that died after creating it but before finding its version taken by another writer:
    that file is someone else's and must never be deleted.

    A `.cdc` file is always written whole by one instant under a name of its own, but its
    blocks may carry the instants whose changes it holds (a compaction persists the change
    data of the delta commits it compacts): it belongs to the instant that lists it.
    """
    parsed = parse_log_file_name(posixpath.basename(path))
    if parsed is not None and parsed.is_cdc:
        return storage.exists(path)
    return holds_only_blocks_of(storage, path, instant_time)


def holds_only_blocks_of(storage: Storage, path: str, instant_time: str) -> bool:
    """Whether the log or `.cdc` file at `path` exists, holds a readable block of `instant_time`, and
    every readable block in it carries `instant_time`.

    Without a marker this is the only evidence that a file is a failed write's own: a write's
    `.cdc` blocks carry its instant, while those of a compaction or of change tracking carry the
    (completed) instants whose changes they hold. A file with no readable block gives no such
    evidence (a completed commit's damaged log, kept for repair, or a file another writer is
    writing), so it is never taken for the instant's.
    """
    instants = block_instant_times(storage, path)
    return instants == {instant_time}


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


def delete_markers_of_completed(storage: Storage, instant_time: str) -> None:
    """Remove the markers of an instant that has completed. A failure (storage stalling right after
    the completion) is logged, not raised: the instant stands, and a caller told otherwise would
    redo it (a retried insert wrote every row twice). Markers of a completed instant are read by
    nothing (rollbacks read those of pending instants), so left ones only take space."""
    try:
        delete_markers(storage, instant_time)
    except (OSError, LakewardError) as exc:
        log.warning(
            "instant %s of %s completed, but its markers (%s) could not be removed: %s",
            instant_time,
            storage.uri,
            marker_dir(instant_time),
            exc,
        )


def delete_markers_of_archived(storage: Storage, instant_times: Iterable[str]) -> None:
    """Remove the marker folders archived instants left (their removal failed when they completed), as
    Hudi's archiver does; one listing of `.hoodie/.temp`. Failures are logged, not raised."""
    archived = set(instant_times)
    try:
        left = [e.name for e in storage.list_dir(TEMP_FOLDER) if e.is_dir and e.name in archived]
    except (OSError, LakewardError) as exc:
        log.warning("could not list the markers of %s: %s", storage.uri, exc)
        return
    for instant_time in left:
        delete_markers_of_completed(storage, instant_time)


def reconcile_markers(storage: Storage, instant_time: str, committed_paths: Iterable[str]) -> list[str]:
    """Delete data files that have a marker but are not part of the commit; return their paths.

    A task attempt that failed after writing its file, or a speculative duplicate, leaves
    such a file: it must not survive next to the committed version of the file group.
    That holds for log files too (APPEND markers): their blocks carry this instant, so
    once it completes a reader would merge the failed attempt's blocks as committed. Each
    append writes a new log file version under its own write token, so such a file holds
    only the failed attempt's blocks; it is deleted when it exists and every block in it
    is of this instant (`log_file_written_by`). `committed_paths`: every file the commit's
    write stats vouch for (`WriteStat.files()`).
    """
    keep = set(committed_paths)
    orphans = [
        m.data_path
        for m in list_markers(storage, instant_time)
        if m.data_path not in keep
        and (m.io_type != "APPEND" or log_file_written_by(storage, m.data_path, instant_time))
    ]
    for path in orphans:
        log.info("deleting %s: written by a failed or duplicate task attempt of %s", path, instant_time)
        storage.delete_file(path, missing_ok=True)
    return orphans
