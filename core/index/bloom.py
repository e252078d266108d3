"""BLOOM index: prune files by key range and the footer bloom filters, then confirm by real keys."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from lakeward.core.engine import Engine
from lakeward.core.file_group.base_file import key_range_mask, read_footer_keys
from lakeward.core.file_group.file_group import FileSlice
from lakeward.core.index.base import (
    assign_confirmed,
    empty_locations,
    locations_array,
    read_keys,
    slices_with_base,
)
from lakeward.core.index.bloom_filter import hash_positions
from lakeward.core.storage import Storage


def locate(
    storage: Storage,
    engine: Engine,
    slices: Sequence[FileSlice],
    keys: pa.Array,
    prune_by_ranges: bool = True,
) -> pa.Array:
    """File id for each key (null: in no file) among the given latest slices.

    A key that only one file's range and bloom filter admit is routed to that file
    without reading its keys: the file group is rewritten by the merge anyway, and the
    merge tells updates from inserts exactly, so a false positive just becomes an insert
    into that file group. Keys admitted by several files are confirmed against the real
    keys of those files, so a key can never land in two file groups.
    """
    result = empty_locations(len(keys))
    files = slices_with_base(slices)
    if not files or not len(keys):
        return locations_array(result)
    footers = engine.map(lambda s: read_footer_keys(storage, s.base_file.path), files, "read footers")
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
    matrix = np.vstack(masks)
    admitted_by = matrix.sum(axis=0)
    single = admitted_by == 1
    if single.any():
        owner = np.argmax(matrix[:, single], axis=0)
        result[np.flatnonzero(single)] = np.array([f.file_id for f in files], dtype=object)[owner]
    ambiguous = admitted_by > 1
    to_confirm = [(f, m & ambiguous) for f, m in zip(files, masks) if (m & ambiguous).any()]

    def confirm(item: tuple[FileSlice, np.ndarray]) -> tuple[str, np.ndarray, pa.Array]:
        file_slice, candidates = item
        return file_slice.file_id, candidates, read_keys(storage, file_slice)

    for file_id, candidates, file_keys in engine.map(confirm, to_confirm, "confirm bloom candidates"):
        assign_confirmed(keys, candidates, file_keys, file_id, result)
    return locations_array(result)
