"""Where index files live, and which base files are indexed.

One index file per base file and index, holding every column of the index:

    .hoodie/.index/<index_type>/<instant>/<file_id>/<index_name>.<base file stem>.lwidx

`<instant>` is the instant that wrote the file: an index build (`indexing`), or the
compaction or clustering that built it for the base files it wrote. The base file stem
(`<file_id>_<write_token>_<base_instant>`) names the exact base file indexed.

An index file counts only once its instant completed, exactly like a base file. The
folder of an instant plays the role of its markers: rolling an instant back removes
`.hoodie/.index/*/<instant>/`, and a file whose instant never completes is never read.
"""

from __future__ import annotations

import posixpath
from collections import defaultdict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from lakeward.core.file_group.file_group import BaseFile
from lakeward.core.index.secondary.definitions import INDEX_FOLDER, IndexDefinition, IndexType
from lakeward.core.storage import Storage
from lakeward.core.timeline import WRITE_ACTIONS, Action, Timeline

INDEX_FILE_EXTENSION = ".lwidx"
PLANS_FOLDER = posixpath.join(INDEX_FOLDER, "plans")
_TYPE_NAMES = frozenset(t.value for t in IndexType)


def base_stem(base_file_name: str) -> str:
    return base_file_name.rsplit(".", 1)[0]


def index_file_path(index_type: IndexType, instant_time: str, file_id: str, index_name: str, base_name: str) -> str:
    name = f"{index_name}.{base_stem(base_name)}{INDEX_FILE_EXTENSION}"
    return posixpath.join(INDEX_FOLDER, index_type.value, instant_time, file_id, name)


@dataclass(frozen=True)
class IndexFile:
    """One index file found on storage."""

    path: str
    index_type: IndexType
    instant_time: str
    file_id: str
    index_name: str
    base_stem: str
    size: int


def parse_index_file(path: str, size: int = 0) -> IndexFile | None:
    parts = path.split("/")
    if len(parts) != 6 or "/".join(parts[:2]) != INDEX_FOLDER or parts[2] not in _TYPE_NAMES:
        return None
    name = parts[5]
    if not name.endswith(INDEX_FILE_EXTENSION) or "." not in name:
        return None
    index_name, _, rest = name[: -len(INDEX_FILE_EXTENSION)].partition(".")
    if not index_name or not rest:
        return None
    return IndexFile(path, IndexType(parts[2]), parts[3], parts[4], index_name, rest, size)


def list_index_files(storage: Storage) -> list[IndexFile]:
    """Every index file of the table (one recursive listing of `.hoodie/.index/`)."""
    out = []
    for entry in storage.list_dir(INDEX_FOLDER, recursive=True):
        if entry.is_dir:
            continue
        parsed = parse_index_file(entry.path, entry.size)
        if parsed is not None:
            out.append(parsed)
    return out


@dataclass(frozen=True)
class CommittedInstants:
    """Instants whose index files count: completed index builds and writes (compactions and
    clusterings build indexes too), and anything older than the active timeline (archived:
    pending instants are never archived, and a rolled-back instant left no index files)."""

    completed: frozenset[str]
    archived_before: str | None = None

    def __contains__(self, instant_time: object) -> bool:
        return instant_time in self.completed or (
            self.archived_before is not None and isinstance(instant_time, str) and instant_time < self.archived_before
        )


def pending_index_builds(timeline: Timeline) -> list[str]:
    """Instant times of index builds planned (requested or inflight) but not completed, oldest first."""
    return [i.time for i in timeline.pending() if i.action is Action.INDEXING]


def committed_instants(timeline: Timeline) -> CommittedInstants:
    completed = frozenset(i.time for i in timeline.completed({Action.INDEXING, *WRITE_ACTIONS}))
    return CommittedInstants(completed, timeline.instants[0].time if timeline.instants else None)


class IndexCatalog:
    """The committed index files of a table, by (index name, base file stem); the newest wins."""

    def __init__(self, files: Iterable[IndexFile], committed: Collection[str] | CommittedInstants):
        self._by_key: dict[tuple[str, str], IndexFile] = {}
        for f in files:
            if f.instant_time not in committed:
                continue
            key = (f.index_name, f.base_stem)
            current = self._by_key.get(key)
            if current is None or f.instant_time > current.instant_time:
                self._by_key[key] = f

    @classmethod
    def load(cls, storage: Storage, timeline: Timeline) -> IndexCatalog:
        return cls(list_index_files(storage), committed_instants(timeline))

    def find(self, index_name: str, base_file: BaseFile) -> IndexFile | None:
        return self._by_key.get((index_name, base_stem(base_file.name)))

    def indexed(self, definition: IndexDefinition, base_file: BaseFile) -> bool:
        return self.find(definition.name, base_file) is not None


def delete_instant_index_files(storage: Storage, instant_time: str) -> list[str]:
    """Remove every index file an instant wrote (its rollback); returns the files removed."""
    removed = []
    for kind in IndexType:
        folder = posixpath.join(INDEX_FOLDER, kind.value, instant_time)
        entries = [e.path for e in storage.list_dir(folder, recursive=True) if not e.is_dir]
        removed.extend(entries)
        storage.delete_dir(folder)
    storage.delete_file(posixpath.join(PLANS_FOLDER, f"{instant_time}.json"))  # an index build's plan
    return removed


def delete_index_files_of_base_files(storage: Storage, base_file_paths: Iterable[str]) -> list[str]:
    """Remove the index files of base files that are gone (the cleaner deleted them); returns their paths."""
    stems: dict[str, set[str]] = defaultdict(set)
    for path in base_file_paths:
        name = posixpath.basename(path)
        if name.endswith(".parquet"):
            stem = base_stem(name)
            stems[stem.split("_", 1)[0]].add(stem)
    if not stems:
        return []
    removed = []
    for f in list_index_files(storage):
        if f.base_stem in stems.get(f.file_id, ()):
            storage.delete_file(f.path)
            removed.append(f.path)
    return removed


def delete_index_files_named(storage: Storage, index_names: Sequence[str]) -> list[str]:
    """Remove every file of the named indexes (after a drop)."""
    wanted = set(index_names)
    removed = []
    for f in list_index_files(storage):
        if f.index_name in wanted:
            storage.delete_file(f.path)
            removed.append(f.path)
    return removed
