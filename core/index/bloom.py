"""BLOOM index: prune base files by key range and bloom filter, then confirm by real keys.

The filters come from the base files' footers, or, with `hoodie.bloom.index.use.metadata` on a
table whose metadata table keeps `bloom_filters`, from there (a `FilterSource` the write plane
passes: same bytes, so the same candidates), the footers then giving only the key ranges.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakeward.core.engine import Engine
from lakeward.core.file_group.base_file import FooterKeys, read_footer_keys
from lakeward.core.file_group.file_group import FileSlice
from lakeward.core.file_group.reader import MergeSettings
from lakeward.core.file_group.slice_keys import CommittedInstants
from lakeward.core.index.base import NO_INSTANTS, Locations, Probe, confirm, empty_locations, locations_array
from lakeward.core.index.bloom_filter import hash_positions
from lakeward.core.storage import Storage

#: (data partition, base file name) -> the file's bloom filter serialised as in its footer (the same
#: bytes, so of the footer's type); None when the source has no filter for that file (the footer's is used).
FilterSource = Callable[[str, str], bytes | None]


def _footer(storage: Storage, file_slice: FileSlice, filters: FilterSource | None = None) -> FooterKeys:
    """The slice's base-file footer keys; with `filters`, its bloom filter is asked from there, and
    only when the index first needs it (a file whose key range admits no key never asks)."""
    assert file_slice.base_file is not None
    footer = read_footer_keys(storage, file_slice.base_file.path)
    if filters is None:
        return footer
    partition, name = file_slice.partition_path, file_slice.base_file.name

    def filter_text() -> str | bytes | None:
        found = filters(partition, name)
        if found is not None:
            return found
        return footer.bloom_source() if footer.bloom_source is not None else footer.bloom_text

    return replace(footer, bloom_text=None, bloom_source=filter_text)


#: Above this many files, sorting the batch once beats comparing every key with every range.
SORT_ABOVE_FILES = 24


def _range_mask(keys: pa.Array, footer: FooterKeys) -> np.ndarray:
    inside = pc.and_(pc.greater_equal(keys, footer.min_key), pc.less_equal(keys, footer.max_key))
    return np.flatnonzero(inside.to_numpy(zero_copy_only=False))


class SortedKeys:
    """The batch's keys sorted once, so each file's key range is found by binary search.

    A file's candidates are then a slice of the sort order: O(log n) a file instead of
    comparing every key with every file's range, which made the cost grow with the table.
    The search compares Python strings (code point order), which is the UTF-8 byte order
    Arrow sorts and compares by.
    """

    def __init__(self, keys: pa.Array):
        self.order = pc.sort_indices(keys).to_numpy()
        self.sorted = keys.take(pa.array(self.order))

    def in_range(self, footer: FooterKeys) -> np.ndarray:
        """Rows of keys inside the file's [min, max] record key range (all, if unknown)."""
        if footer.min_key is None or footer.max_key is None:
            return self.order
        lo = bisect.bisect_left(self.sorted, footer.min_key, key=_as_py)
        hi = bisect.bisect_right(self.sorted, footer.max_key, key=_as_py)
        return self.order[lo:hi]


def _as_py(scalar: pa.Scalar) -> str:
    return scalar.as_py()  # type: ignore[no-any-return]


def key_ranges(keys: pa.Array, footers: Sequence[FooterKeys]) -> list[np.ndarray]:
    """Per base file, the rows of the keys inside its footer's key range (all, if it records none).

    Few files: compare the keys with each range; many: sort once and binary-search each.
    """
    if len(footers) > SORT_ABOVE_FILES:
        ranges = SortedKeys(keys)
        return [ranges.in_range(footer) for footer in footers]
    everything = np.arange(len(keys))
    return [
        everything if footer.min_key is None or footer.max_key is None else _range_mask(keys, footer)
        for footer in footers
    ]


def _admitted(keys: pa.Array, footers: Sequence[FooterKeys], prune_by_ranges: bool) -> list[np.ndarray]:
    """Per base file, the rows of the keys its key range and bloom filter admit (no false negatives).

    A file whose range admits no key is never asked for its bloom filter (not parsed, not
    held); keys are hashed once per filter geometry, and only those some range admits.
    """
    everything = np.arange(len(keys))
    candidates = key_ranges(keys, footers) if prune_by_ranges else [everything] * len(footers)
    geometries: dict[tuple[int, int], list[int]] = {}
    for i, (footer, rows) in enumerate(zip(footers, candidates)):
        bloom = footer.bloom if len(rows) else None
        if bloom is not None:
            geometries.setdefault((bloom.num_hashes, bloom.vector_size), []).append(i)
    admitted = list(candidates)
    for geometry, files in geometries.items():
        hashed = np.zeros(len(keys), dtype=bool)
        for i in files:
            hashed[candidates[i]] = True
        hashed_rows = np.flatnonzero(hashed)
        slot = np.full(len(keys), -1, dtype=np.int64)
        slot[hashed_rows] = np.arange(len(hashed_rows))
        positions = hash_positions(keys.take(pa.array(hashed_rows)), *geometry)
        for i in files:
            rows = candidates[i]
            bloom = footers[i].bloom
            assert bloom is not None
            admitted[i] = rows[bloom.might_contain_positions(positions[slot[rows]])]
    return admitted


def _mask(n: int, rows: np.ndarray) -> np.ndarray:
    mask = np.zeros(n, dtype=bool)
    mask[rows] = True
    return mask


def locate(
    storage: Storage,
    engine: Engine,
    slices: Sequence[FileSlice],
    keys: pa.Array,
    prune_by_ranges: bool = True,
    committed: CommittedInstants = NO_INSTANTS,
    unconfirmed_single: bool = False,
    filters: FilterSource | None = None,
    deleted: np.ndarray | None = None,
    also: Locations | None = None,
    confirm_in: Collection[str] = (),
    merge: MergeSettings | None = None,
) -> pa.Array:
    """File id for each key (null: in no file) among the given latest slices.

    Base files are pruned by key range and bloom filter, and every admitted key is
    confirmed against the file's real keys. A slice with log files is also searched for
    every key in its committed log blocks (data and delete), since its base file's bloom
    filter cannot admit keys that live only in the log.

    `unconfirmed_single`: a key that only one file admits, and that no slice's log holds,
    is routed to that file unread. Exact only when the write rewrites that file group with
    a merge that tells updates from inserts (copy-on-write): then a false positive just
    becomes an insert into that group. Never on merge-on-read, where it would land in the
    group's log as an "update" of a key the group does not hold. `confirm_in`: file ids whose
    candidates are confirmed all the same (file groups a pending clustering will replace: a
    write routed there is refused as an update, where a key new to the table is an insert).

    `filters`: where the base files' bloom filters come from instead of their footers.
    `deleted` (n booleans, filled): which keys were located in a group that holds them only
    deleted, none holding them live (`index.base.confirm`): a write there re-adds them.
    `also` (filled): further groups where a key is live too (`index.base.every_location`); then a
    key found live in a slice with logs is still confirmed in the base files that admit it.
    """
    result = empty_locations(len(keys))
    if not slices or not len(keys):
        return locations_array(result)
    n = len(keys)
    nothing = np.zeros(n, dtype=bool)
    everything = np.ones(n, dtype=bool)
    with_base = [s for s in slices if s.base_file is not None]
    footers = engine.map(lambda s: _footer(storage, s, filters), with_base, "read footers")
    admitted = dict(zip((s.file_id for s in with_base), _admitted(keys, footers, prune_by_ranges)))
    with_logs = [s for s in slices if s.log_files]
    if deleted is None:
        deleted = np.zeros(n, dtype=bool)  # located where the key is held only deleted (`confirm`)
    # Slices with logs: every key against the logs, admitted ones against the base file.
    confirm(
        storage,
        engine,
        [Probe(s, _mask(n, admitted[s.file_id]) if s.file_id in admitted else nothing, everything) for s in with_logs],
        keys,
        committed,
        result,
        "confirm keys in slices with logs",
        deleted=deleted,
        also=also,
        merge=merge,
    )
    open_keys = (result == "") | deleted  # a key deleted in a log may live in a base file (re-inserted)
    # Base-only slices some key is admitted by: the others need no further look (with `also`,
    # a key live in a slice with logs may be live in a base file too).
    base_only = [(s, admitted[s.file_id]) for s in with_base if not s.log_files]
    if also is None:
        base_only = [(s, rows[open_keys[rows]]) for s, rows in base_only]
    base_only = [(s, rows) for s, rows in base_only if len(rows)]
    if unconfirmed_single and base_only:
        admitted_by = np.bincount(np.concatenate([rows for _, rows in base_only]), minlength=n)
        unread = []
        for file_slice, rows in base_only:
            if file_slice.file_id in confirm_in:
                unread.append((file_slice, rows))
                continue
            single = rows[(admitted_by[rows] == 1) & open_keys[rows]]
            result[single] = file_slice.file_id
            unread.append((file_slice, np.setdiff1d(rows, single, assume_unique=True)))
        base_only = unread
    confirm(
        storage,
        engine,
        [Probe(s, _mask(n, rows), nothing) for s, rows in base_only if len(rows)],
        keys,
        committed,
        result,
        "confirm bloom candidates",
        deleted=deleted,
        also=also,
        merge=merge,
    )
    return locations_array(result)


def admitted_keys(storage: Storage, file_slice: FileSlice, keys: pa.Array, prune_by_ranges: bool = True) -> pa.Array:
    """The keys of `keys` that the slice's base file may hold: those its footer's key range (with
    `prune_by_ranges`) and bloom filter admit, as `locate` prunes (no false negatives; a false
    positive is left to the caller's check against the file's real keys).

    For an engine that checks a base file where its keys are read (the Spark plane's key-scan
    tasks): a file that admits none of the batch's keys need not be read. The filter is the
    footer's, which is read for the key range anyway (no metadata table lookup per file).
    """
    assert file_slice.base_file is not None
    if not len(keys):
        return keys
    (rows,) = _admitted(keys, [_footer(storage, file_slice)], prune_by_ranges)
    return keys.take(pa.array(rows, pa.int64()))
