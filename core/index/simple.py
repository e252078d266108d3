"""SIMPLE index: join incoming keys with every key each latest slice of the partition holds."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from lakeward.core.config.table import TableConfig
from lakeward.core.engine import Engine
from lakeward.core.file_group.file_group import FileSlice
from lakeward.core.file_group.reader import MergeSettings
from lakeward.core.file_group.slice_keys import CommittedInstants
from lakeward.core.index.base import NO_INSTANTS, Locations, Probe, confirm, empty_locations, locations_array
from lakeward.core.storage import Storage


def locate(
    storage: Storage,
    engine: Engine,
    slices: Sequence[FileSlice],
    keys: pa.Array,
    committed: CommittedInstants = NO_INSTANTS,
    virtual_keys: TableConfig | None = None,
    also: Locations | None = None,
    merge: MergeSettings | None = None,
    deleted: np.ndarray | None = None,
) -> pa.Array:
    """File id holding each key (null for keys in no file) among the given latest slices.

    A slice holds the keys of its base file and of its committed log blocks (data and delete);
    on a virtual-key table (`virtual_keys`: its config) they are computed from the key fields.
    `also` (filled): further groups where a key is live too (`index.base.every_location`).
    `merge`: the table's merge settings (a delete that lost on ordering value keeps its key live).
    `deleted` (n booleans, filled): which keys were located only where they are held deleted (`confirm`).
    """
    result = empty_locations(len(keys))
    if not len(keys):
        return locations_array(result)
    everything = np.ones(len(keys), dtype=bool)
    probes = [Probe(s, everything, everything) for s in slices]
    confirm(
        storage, engine, probes, keys, committed, result, "read keys", virtual_keys, deleted, also=also, merge=merge
    )
    return locations_array(result)
