"""One operation's reads of `hoodie.properties` and timeline listings, served once.

A write reads its table's and its metadata table's `hoodie.properties` and lists their
timelines from many places (the write client, the metadata-table writer, its compaction,
clean and archival checks); each place reading storage "now" made one upsert read
`hoodie.properties` 11 times and list each timeline 8-10 times. Inside `cached_reads()`,
`Storage` serves those reads from this cache instead:

- a `hoodie.properties` file (its bytes, or its absence) is read once, and so is an instant
  file of a timeline (a commit's metadata, read by the integrity check, the schema
  resolution and the file sizing);
- a timeline folder (`.hoodie`, `.hoodie/timeline`, the metadata table's the same) is
  listed once.

Entries are dropped when any `Storage` (any thread of this process) writes or deletes
a path they cover: the operation always sees its own changes. Changes of other writers
are seen as of the last read, which is why taking the table lock clears the cache
(`forget()`): the decisions that depend on other writers (conflict checks, rollbacks,
completing instants) are taken under the lock, on fresh reads.
"""

from __future__ import annotations

import posixpath
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

T = TypeVar("T")

PROPERTIES_FILE = "hoodie.properties"
#: Folders whose listings are cached: the timeline folders of table layouts 1 and 2.
_TIMELINE_SUFFIXES = ("/.hoodie", "/.hoodie/timeline")

#: The cache of the operation running in this context (None: reads go to storage).
_current: ContextVar[ReadCache | None] = ContextVar("lakeward_read_cache", default=None)
#: Every cache in use, so that a change made in any thread drops their entries.
_active: set[ReadCache] = set()
_active_lock = threading.Lock()


def caches_file(full_path: str) -> bool:
    """Whether reads of this file are served from the cache: `hoodie.properties` files and the
    instant files of a timeline folder."""
    folder, name = posixpath.split(full_path)
    return name == PROPERTIES_FILE or folder.endswith(_TIMELINE_SUFFIXES)


def caches_listing(full_path: str, recursive: bool) -> bool:
    """Whether this listing is served from the cache: a timeline folder, not recursively."""
    return not recursive and full_path.rstrip("/").endswith(_TIMELINE_SUFFIXES)


class ReadCache:
    """File contents and folder listings by full path, for one operation."""

    def __init__(self) -> None:
        self._files: dict[str, bytes | None] = {}
        #: folder -> (its listing, the names of its sub-folders)
        self._listings: dict[str, tuple[list[object], frozenset[str]]] = {}
        self._lock = threading.Lock()
        #: Counts changes: a load that a change overtook is returned but not kept.
        self._generation = 0

    def file(self, full_path: str, load: Callable[[], bytes | None]) -> bytes | None:
        """The file's bytes (None: it does not exist), loaded on the first ask."""
        with self._lock:
            if full_path in self._files:
                return self._files[full_path]
            generation = self._generation
        data = load()
        with self._lock:
            if generation == self._generation:
                self._files[full_path] = data
        return data

    def listing(
        self, full_path: str, load: Callable[[], list[T]], sub_folders: Callable[[list[T]], set[str]]
    ) -> list[T]:
        """The folder's entries (a fresh list), listed on the first ask."""
        with self._lock:
            cached = self._listings.get(full_path)
            generation = self._generation
        if cached is None:
            entries = load()
            cached = (list(entries), frozenset(sub_folders(entries)))
            with self._lock:
                if generation == self._generation:
                    self._listings[full_path] = cached  # type: ignore[assignment]
        return list(cached[0])  # type: ignore[arg-type]

    def changed(self, full_path: str) -> None:
        """Drop what a write or delete of `full_path` (a file or a folder) may have changed."""
        with self._lock:
            self._generation += 1
            self._files = {p: d for p, d in self._files.items() if p != full_path and not p.startswith(full_path + "/")}
            for folder in list(self._listings):
                if _stale(folder, self._listings[folder][1], full_path):
                    del self._listings[folder]

    def clear(self) -> None:
        with self._lock:
            self._generation += 1
            self._files.clear()
            self._listings.clear()


def _stale(folder: str, sub_folders: frozenset[str], changed: str) -> bool:
    """Whether a change of `changed` may alter the listing of `folder`: a change of the folder
    itself or of an entry in it, or below it under a sub-folder it did not list (created now)."""
    if changed == folder or folder.startswith(changed + "/"):
        return True
    if not changed.startswith(folder + "/"):
        return False
    rest = changed[len(folder) + 1 :]
    return "/" not in rest or rest.split("/", 1)[0] not in sub_folders


def current() -> ReadCache | None:
    """The cache of the operation running in this context, if any."""
    return _current.get()


def changed(full_path: str) -> None:
    """A `Storage` wrote or deleted `full_path`: drop the entries of every cache it affects."""
    with _active_lock:
        caches = list(_active)
    for cache in caches:
        cache.changed(full_path)


def forget() -> None:
    """Empty this context's cache (the table lock was just taken: other writers may have committed)."""
    cache = _current.get()
    if cache is not None:
        cache.clear()


@contextmanager
def cached_reads() -> Iterator[ReadCache]:
    """Serve this context's `hoodie.properties` reads and timeline listings once (nested: the outer cache)."""
    outer = _current.get()
    if outer is not None:
        yield outer
        return
    cache = ReadCache()
    token = _current.set(cache)
    with _active_lock:
        _active.add(cache)
    try:
        yield cache
    finally:
        with _active_lock:
            _active.discard(cache)
        _current.reset(token)
