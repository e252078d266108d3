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
    """File id holding each key (null for keys in no file) among the given latest slices."""
    result = empty_locations(len(keys))
    files = slices_with_base(slices)
    if not files or not len(keys):
        return locations_array(result)
    footers = engine.map(lambda s: read_footer_keys(storage, s.base_file.path), files, "read footers")
    positions_by_geometry: dict[tuple[int, int], np.ndarray] = {}
    to_confirm: list[tuple[FileSlice, np.ndarray]] = []
    for file_slice, footer in zip(files, footers):
        candidates = key_range_mask(keys, footer) if prune_by_ranges else np.ones(len(keys), dtype=bool)
        if footer.bloom is not None and candidates.any():
            geometry = (footer.bloom.num_hashes, footer.bloom.vector_size)
            if geometry not in positions_by_geometry:
                positions_by_geometry[geometry] = hash_positions(keys, *geometry)
            rows = np.flatnonzero(candidates)
            hits = footer.bloom.might_contain_positions(positions_by_geometry[geometry][rows])
            candidates = np.zeros(len(keys), dtype=bool)
            candidates[rows[hits]] = True
        if candidates.any():
            to_confirm.append((file_slice, candidates))

    def confirm(item: tuple[FileSlice, np.ndarray]) -> tuple[str, np.ndarray, pa.Array]:
        file_slice, candidates = item
        return file_slice.file_id, candidates, read_keys(storage, file_slice)

    for file_id, candidates, file_keys in engine.map(confirm, to_confirm, "confirm bloom candidates"):
        assign_confirmed(keys, candidates, file_keys, file_id, result)
    return locations_array(result)
