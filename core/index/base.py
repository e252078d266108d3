"""Index lookups: for each incoming record key of one partition, the file group holding it.

Every index answers the same question over the latest file slices of a partition and
returns one file id (or null) per key. The per-file work (read footers, read the key
column) is plain Python over Arrow, run by an engine.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakeward.core.file_group.base_file import read_base_file
from lakeward.core.file_group.file_group import FileSlice
from lakeward.core.storage import Storage


def read_keys(storage: Storage, file_slice: FileSlice) -> pa.Array:
    """The record keys stored in a slice's base file."""
    if file_slice.base_file is None:
        return pa.array([], pa.string())
    table = read_base_file(storage, file_slice.base_file.path, columns=["_hoodie_record_key"])
    return table.column(0).combine_chunks()


def assign_confirmed(
    keys: pa.Array, candidates: np.ndarray, file_keys: pa.Array, file_id: str, result: np.ndarray
) -> None:
    """Mark `result[i] = file_id` for candidate keys that the file really holds."""
    if not candidates.any():
        return
    rows = np.flatnonzero(candidates)
    # Hash the (smaller) candidate set and probe it with the file's keys.
    found = pc.index_in(file_keys, value_set=keys.take(pa.array(rows)))
    hits = pc.drop_null(found).to_numpy(zero_copy_only=False)
    result[rows[np.unique(hits)]] = file_id


def locations_array(result: np.ndarray) -> pa.Array:
    """File ids as an Arrow string array, null where no file holds the key."""
    return pa.array(result, pa.string(), mask=(result == ""))


def empty_locations(n: int) -> np.ndarray:
    return np.full(n, "", dtype=object)


def slices_with_base(slices: Sequence[FileSlice]) -> list[FileSlice]:
    return [s for s in slices if s.base_file is not None]
