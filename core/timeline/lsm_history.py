"""The LSM archived timeline of timeline layout 2 (`.hoodie/timeline/history/`): read side.

Hudi 1.x (table versions 8+) archives old instants into parquet files instead of the
`.hoodie/archived/` log files of version 6 (format reference §2.6; Hudi's `LSMTimeline`,
`LSMTimelineWriter`, `HoodieLSMTimelineManifest`, `HoodieLSMTimelineInstant.avsc`):

- data files `<minInstant>_<maxInstant>_<layer>.parquet`, one row per archived instant with
  the columns of `HoodieLSMTimelineInstant`: `instantTime`, `completionTime`, `action` (the
  completed action: a compaction is `commit`), `metadata` (the bytes of the completed
  instant file), `plan` (the requested plan of a clean, compaction or clustering), `version`;
- `manifest_<N>`: JSON `{"files": [{"fileName": ..., "fileLen": ...}, ...]}`, the complete
  list of valid data files of snapshot N (files replaced by an LSM compaction are gone
  from later manifests);
- `_version_`: the latest N as decimal text. When it is missing or unreadable, readers take
  the largest N among the `manifest_*` files, as Java does.

A reader reads `_version_`, then that manifest, then the listed files. Archived instants
become completed `Instant`s whose `archive_file` names the parquet file holding their
content; `read_archived_content` fetches that content (the whole file's `metadata` column
is read once and kept, since timeline files never change). A data file a manifest lists
never changes either (an LSM compaction writes new files and a manifest without the old
ones), so the instants of each are read once per process too: loading the timeline of a
table with a long history costs two small reads, not a read of the whole history.
"""

from __future__ import annotations

import json
import posixpath
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from lakeward.core.exceptions import CorruptTableError
from lakeward.core.storage import Storage
from lakeward.core.table_version import TimelineLayout
from lakeward.core.timeline.instant import Action, Instant, State

VERSION_FILE = "_version_"
MANIFEST_PREFIX = "manifest_"
_MANIFEST_RE = re.compile(r"^manifest_(\d+)$")
_DATA_FILE_RE = re.compile(r"^(\d+)_(\d+)_(\d)\.parquet$")

#: The columns of `HoodieLSMTimelineInstant` read to build the timeline (Java's `LoadMode.TIME`
#: plus the action); `metadata` and `plan` are read only when an instant's content is needed.
TIMELINE_COLUMNS = ("instantTime", "completionTime", "action")


@dataclass(frozen=True)
class HistoryFile:
    """One data file of the LSM tree, as its name describes it."""

    name: str
    min_instant: str
    max_instant: str
    layer: int
    #: The size the manifest gives (`fileLen`), None when it gives none.
    length: int | None = None

    @classmethod
    def parse(cls, name: str, length: int | None = None) -> HistoryFile:
        m = _DATA_FILE_RE.match(name)
        if m is None:
            raise CorruptTableError(f"LSM timeline manifest lists {name!r}, not a <min>_<max>_<layer>.parquet file")
        return cls(name, m.group(1), m.group(2), int(m.group(3)), length)

    def overlaps(self, begin: str | None, end: str | None) -> bool:
        """Whether the file may hold instants with `begin <= time <= end` (None: unbounded)."""
        return (begin is None or self.max_instant >= begin) and (end is None or self.min_instant <= end)


def snapshot_versions(storage: Storage, folder: str) -> list[int]:
    """The N of every `manifest_N` in `folder` (unordered)."""
    return [int(m.group(1)) for e in storage.list_dir(folder) if not e.is_dir and (m := _MANIFEST_RE.match(e.name))]


def data_file_names(storage: Storage, folder: str) -> list[str]:
    """The names of the LSM data files (`<min>_<max>_<layer>.parquet`) in `folder`, listed or not."""
    return [e.name for e in storage.list_dir(folder) if not e.is_dir and _DATA_FILE_RE.match(e.name)]


def latest_snapshot_version(storage: Storage, folder: str) -> int | None:
    """The latest snapshot N of the LSM timeline in `folder`, or None when nothing was archived.

    `_version_` first; when it is missing or unreadable (a writer died between writing the
    manifest and the version file), the largest N of the `manifest_N` files.
    """
    try:
        text = storage.read_bytes(posixpath.join(folder, VERSION_FILE)).decode("utf-8").strip()
        return int(text)
    except (FileNotFoundError, UnicodeDecodeError, ValueError):
        pass
    return max(snapshot_versions(storage, folder), default=None)


def manifest_files(storage: Storage, folder: str, version: int) -> list[HistoryFile]:
    """The valid data files of snapshot `version`, from `manifest_<version>`."""
    path = posixpath.join(folder, f"{MANIFEST_PREFIX}{version}")
    try:
        raw = storage.read_bytes(path)
    except FileNotFoundError:
        raise CorruptTableError(f"LSM timeline snapshot {version} has no manifest {storage.uri_of(path)}") from None
    if not raw.strip():
        return []
    try:
        entries = json.loads(raw)["files"]
        listed = [(str(e["fileName"]), _length(e.get("fileLen"))) for e in entries]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CorruptTableError(f"LSM timeline manifest {storage.uri_of(path)} is not valid: {exc}") from exc
    return sorted((HistoryFile.parse(name, length) for name, length in listed), key=lambda f: f.name)


def _length(value: object) -> int | None:
    """A manifest entry's `fileLen`, None when absent or not a whole number."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_history_file(storage: Storage, path: str, columns: Sequence[str] | None = None) -> pa.Table:
    """The rows of one LSM history data file (`columns` only, or all), or CorruptTableError naming it."""
    # lazy: only tables with an archived (LSM) timeline read Parquet here; listing a timeline does not
    # (start-up time of `lakeward show` and `timeline`, issue 23)
    import pyarrow.parquet as pq

    try:
        data = storage.read_bytes(path)
    except FileNotFoundError:
        raise CorruptTableError(
            f"the LSM timeline manifest lists {storage.uri_of(path)}, which does not exist"
        ) from None
    try:
        return pq.read_table(pa.BufferReader(data), columns=None if columns is None else list(columns))
    except (pa.ArrowInvalid, OSError, KeyError) as exc:
        raise CorruptTableError(f"archived timeline file {storage.uri_of(path)} cannot be read: {exc}") from exc


def load_archived_instants(
    storage: Storage, folder: str, begin: str | None = None, end: str | None = None
) -> list[Instant]:
    """The completed instants archived in the LSM timeline under `folder`, oldest first.

    With `begin`/`end`, only instants whose time lies in [begin, end] (files are skipped by
    the min/max in their names, as Java's time-range filter does). Rows with an action
    lakeward does not know are left out, as timeline files of unknown actions are.
    """
    version = latest_snapshot_version(storage, folder)
    if version is None:
        return []
    found: dict[tuple[str, Action], Instant] = {}
    for history_file in manifest_files(storage, folder, version):
        if not history_file.overlaps(begin, end):
            continue
        for instant in _file_instants(storage, posixpath.join(folder, history_file.name), history_file.length):
            if (begin is not None and instant.time < begin) or (end is not None and instant.time > end):
                continue
            found[(instant.time, instant.action)] = instant
    return sorted(found.values(), key=Instant.sort_key)


#: History data files whose instants are kept (a file holds one archival batch, or an LSM
#: compaction's merge of several): tens of instants each, a few hundred bytes per instant.
_INSTANTS_CACHE_FILES = 1024
_instants_cache: OrderedDict[tuple[str, str, int | None], tuple[Instant, ...]] = OrderedDict()
_instants_lock = threading.Lock()


def _file_instants(storage: Storage, path: str, length: int | None) -> tuple[Instant, ...]:
    """The archived instants one history data file holds (in file order), read once per process:
    by the storage, the file and the size its manifest gives."""
    key = (storage.uri, path, length)
    with _instants_lock:
        cached = _instants_cache.get(key)
        if cached is not None:
            _instants_cache.move_to_end(key)
            return cached
    instants = []
    for row in read_history_file(storage, path, TIMELINE_COLUMNS).to_pylist():
        time, action_name = row["instantTime"], row["action"]
        if time is None or action_name is None:
            continue
        try:
            action = Action(action_name)
        except ValueError:
            continue  # an action lakeward does not know, left out as its timeline files are
        completion = row["completionTime"] or None
        instants.append(
            Instant(time, action.completed_action, State.COMPLETED, completion, TimelineLayout.V2, archive_file=path)
        )
    found = tuple(instants)
    with _instants_lock:
        _instants_cache[key] = found
        while len(_instants_cache) > _INSTANTS_CACHE_FILES:
            _instants_cache.popitem(last=False)
    return found


_CONTENT_CACHE_FILES = 32
_content_cache: OrderedDict[tuple[str, str], dict[tuple[str, str], bytes]] = OrderedDict()
_content_lock = threading.Lock()


def read_archived_content(storage: Storage, instant: Instant) -> bytes:
    """The completed-instant bytes (`metadata` column) of an archived instant; b"" when none.

    Java stores null for an empty completed file; callers treat b"" as empty metadata.
    """
    if instant.archive_file is None:
        raise ValueError(f"{instant} is not an archived instant")
    key = (storage.uri, instant.archive_file)
    with _content_lock:
        contents = _content_cache.get(key)
        if contents is not None:
            _content_cache.move_to_end(key)
    if contents is None:
        table = read_history_file(storage, instant.archive_file, ("instantTime", "action", "metadata"))
        contents = {
            (str(r["instantTime"]), str(r["action"])): r["metadata"] or b""
            for r in table.to_pylist()
            if r["instantTime"] is not None
        }
        with _content_lock:
            _content_cache[key] = contents
            while len(_content_cache) > _CONTENT_CACHE_FILES:
                _content_cache.popitem(last=False)
    found = contents.get((instant.time, instant.action.completed_action.value))
    if found is None:
        raise FileNotFoundError(f"{instant} is no longer in {storage.uri_of(instant.archive_file)}")
    return found


__all__ = [
    "HistoryFile",
    "data_file_names",
    "latest_snapshot_version",
    "load_archived_instants",
    "manifest_files",
    "read_archived_content",
    "snapshot_versions",
]
