"""BLOOM index: prune base files by key range and footer bloom filter, then confirm by real keys."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from lakeward.core.engine import Engine
from lakeward.core.file_group.base_file import FooterKeys, key_range_mask, read_footer_keys
from lakeward.core.file_group.file_group import FileSlice
from lakeward.core.file_group.slice_keys import CommittedInstants
from lakeward.core.index.base import NO_INSTANTS, Probe, confirm, empty_locations, locations_array
from lakeward.core.index.bloom_filter import hash_positions
from lakeward.core.storage import Storage


def _footer(storage: Storage, file_slice: FileSlice) -> FooterKeys:
    assert file_slice.base_file is not None
    return read_footer_keys(storage, file_slice.base_file.path)


def _admitted(keys: pa.Array, footers: Sequence[FooterKeys], prune_by_ranges: bool) -> list[np.ndarray]:
    """Per base file, which keys its key range and bloom filter admit (no false negatives)."""
    positions_by_geometry: dict[tuple[int, int], np.ndarray] = {}
    masks: list[np.ndarray] = []
    for footer in footers:
        candidates = key_range_mask(keys, footer) if prune_by_ranges else np.ones(len(keys), dtype=bool)
        if footer.bloom is not None and candidates.any():
            geometry = (footer.bloom.num_hashes, footer.bloom.vector_size)
            if geometry not in positions_by_geometry:
                positions_by_geometry[geometry] = hash_positions(keys, *geometry)
            rows = np.flatnonzero(candidates)
            hits = footer.bloom.might_contain_positions(positions_by_geometry[geometry][rows])
            candidates = np.zeros(len(keys), dtype=bool)
            candidates[rows[hits]] = True
        masks.append(candidates)
    return masks


def locate(
    storage: Storage,
    engine: Engine,
    slices: Sequence[FileSlice],
    keys: pa.Array,
    prune_by_ranges: bool = True,
    committed: CommittedInstants = NO_INSTANTS,
    unconfirmed_single: bool = False,
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
    group's log as an "update" of a key the group does not hold.
    """
    result = empty_locations(len(keys))
    if not slices or not len(keys):
        return locations_array(result)
    nothing = np.zeros(len(keys), dtype=bool)
    everything = np.ones(len(keys), dtype=bool)
    with_base = [s for s in slices if s.base_file is not None]
    footers = engine.map(lambda s: _footer(storage, s), with_base, "read footers")
    admitted = dict(zip((s.file_id for s in with_base), _admitted(keys, footers, prune_by_ranges)))
    with_logs = [s for s in slices if s.log_files]
    # Slices with logs: every key against the logs, admitted ones against the base file.
    confirm(
        storage,
        engine,
        [Probe(s, admitted.get(s.file_id, nothing), everything) for s in with_logs],
        keys,
        committed,
        result,
        "confirm keys in slices with logs",
    )
    open_keys = result == ""
    base_only = [s for s in with_base if not s.log_files]
    masks = [admitted[s.file_id] & open_keys for s in base_only]
    if unconfirmed_single and masks:
        matrix = np.vstack(masks)
        admitted_by = matrix.sum(axis=0)
        single = admitted_by == 1
        if single.any():
            owner = np.argmax(matrix[:, single], axis=0)
            result[np.flatnonzero(single)] = np.array([s.file_id for s in base_only], dtype=object)[owner]
        masks = [m & (admitted_by > 1) for m in masks]
    confirm(
        storage,
        engine,
        [Probe(s, m, nothing) for s, m in zip(base_only, masks)],
        keys,
        committed,
        result,
        "confirm bloom candidates",
    )
    return locations_array(result)
