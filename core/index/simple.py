"""SIMPLE index: join incoming keys with the keys of every latest base file of the partition."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from lakeward.core.engine import Engine
from lakeward.core.file_group.file_group import FileSlice
from lakeward.core.index.base import (
    assign_confirmed,
    empty_locations,
    locations_array,
    read_keys,
    slices_with_base,
)
from lakeward.core.storage import Storage


def locate(storage: Storage, engine: Engine, slices: Sequence[FileSlice], keys: pa.Array) -> pa.Array:
    """File id holding each key (null for keys in no file) among the given latest slices."""
    result = empty_locations(len(keys))
    files = slices_with_base(slices)
    everything = np.ones(len(keys), dtype=bool)
    found = engine.map(lambda s: (s.file_id, read_keys(storage, s)), files, "read keys")
    for file_id, file_keys in found:
        assign_confirmed(keys, everything, file_keys, file_id, result)
    return locations_array(result)
