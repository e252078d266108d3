"""Index lookups: for each incoming record key of one partition, the file group holding it.

Every index answers the same question over the latest file slices of a partition and
returns one file id (or null) per key. A key is held by a slice when its base file or one
of its committed log blocks (data or delete) names it; candidates are confirmed against
those real keys. A key is normally live in one file group; it can be held, deleted, by
others (an `insert` looks nothing up), and the group where it is live wins the lookup. An `insert`
or `bulk_insert` can also store a key again, live, in another group: as Apache Hudi's indexes tag
every location of such a key, a lookup given an `also` list reports the further groups there
(`every_location`), so that an upsert or delete changes every copy. The per-file work (read
footers, read the key column, scan log blocks for keys) is plain Python over Arrow, run
by an engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakeward.core.config.table import TableConfig
from lakeward.core.engine import Engine
from lakeward.core.exceptions import ConfigError
from lakeward.core.file_group.base_file import read_base_file
from lakeward.core.file_group.file_group import FileSlice
from lakeward.core.file_group.reader import MergeSettings, still_deleted
from lakeward.core.file_group.slice_keys import (
    RECORD_KEY,
    CommittedInstants,
    base_record_keys,
    deleted_last,
    log_block_keys,
)
from lakeward.core.keygen import record_keys
from lakeward.core.storage import Storage

NO_INSTANTS = CommittedInstants(frozenset())


def read_keys(
    storage: Storage,
    file_slice: FileSlice,
    committed: CommittedInstants = NO_INSTANTS,
    with_base: bool = True,
    virtual_keys: TableConfig | None = None,
) -> pa.Array:
    """The record keys a slice holds: its base file's (unless `with_base=False`) and its committed logs'.

    `virtual_keys`: the config of a table written without meta fields, whose keys are computed
    from the key generator's fields (Hudi's SIMPLE index on such tables reads those fields).
    """
    return read_key_states(storage, file_slice, committed, with_base, virtual_keys)[0]


def read_key_states(
    storage: Storage,
    file_slice: FileSlice,
    committed: CommittedInstants = NO_INSTANTS,
    with_base: bool = True,
    virtual_keys: TableConfig | None = None,
    merge: MergeSettings | None = None,
    among: pa.Array | None = None,
) -> tuple[pa.Array, pa.Array]:
    """(held, deleted): the keys `read_keys` gives, and those of them whose last event in the
    slice's committed logs is a delete (`slice_keys.deleted_last`; duplicates possible in both) that a
    read finds deleted: under event-time ordering (`merge`) a delete that lost keeps its key live. `among`:
    the keys whose deleted state the caller needs (the others' is not weighed: that merges the slice)."""
    parts = []
    if with_base:
        parts.append(
            base_record_keys(storage, file_slice)
            if virtual_keys is None
            else _virtual_base_keys(storage, file_slice, virtual_keys)
        )
    deleted = pa.array([], pa.string())
    if file_slice.log_files:
        key_field = RECORD_KEY if virtual_keys is None else virtual_keys.virtual_key_field
        if key_field is None:  # refused at create (`check_virtual_keys`); a table made elsewhere
            raise ConfigError("a merge-on-read table without meta fields needs a single-field record key")
        blocks = log_block_keys(storage, file_slice.log_files, committed, key_field)
        parts.extend(keys.cast(pa.string()) for _, keys in blocks)
        deleted = deleted_last(blocks)
        if among is not None and len(deleted):
            deleted = deleted.filter(pc.is_in(deleted, value_set=among.cast(pa.string())))
        deleted = still_deleted(storage, file_slice, committed, merge, deleted)
    held = pa.concat_arrays(parts) if parts else pa.array([], pa.string())
    return held, deleted


def _virtual_base_keys(storage: Storage, file_slice: FileSlice, config: TableConfig) -> pa.Array:
    """The record keys of a virtual-key slice's base file, from its record key columns."""
    if file_slice.base_file is None:
        return pa.array([], pa.string())
    return base_file_keys(storage, file_slice.base_file.path, config)


def base_file_keys(storage: Storage, path: str, virtual_keys: TableConfig | None = None) -> pa.Array:
    """The record keys of the base file at `path`, as strings: its `_hoodie_record_key` column, or for a
    table without meta fields (`virtual_keys`: its config) the keys its key generator makes of its rows."""
    if virtual_keys is None:
        return read_base_file(storage, path, columns=[RECORD_KEY]).column(0).combine_chunks().cast(pa.string())
    rows = read_base_file(storage, path, columns=list(virtual_keys.record_key_fields))
    return record_keys(rows, virtual_keys).combine_chunks()


@dataclass(frozen=True)
class Probe:
    """Keys to confirm against one slice: `base` against its base file, `logs` against its log blocks."""

    file_slice: FileSlice
    base: np.ndarray
    logs: np.ndarray

    @property
    def candidates(self) -> np.ndarray:
        return self.base | self.logs


def confirm(
    storage: Storage,
    engine: Engine,
    probes: Sequence[Probe],
    keys: pa.Array,
    committed: CommittedInstants,
    result: np.ndarray,
    description: str = "confirm index candidates",
    virtual_keys: TableConfig | None = None,
    deleted: np.ndarray | None = None,
    also: Locations | None = None,
    merge: MergeSettings | None = None,
) -> None:
    """Set `result[i]` to the file id of the probed slice that really holds key i (one task per slice).

    A slice where the key is live wins over one that holds it only deleted (`deleted[i]` says
    which `result[i]` is: pass the same array to every call that fills `result`). With `also`,
    a further slice where a key is live too is appended there instead of replacing `result[i]`.
    The base file is read (key column only) only when some key is a base candidate; log
    files only when the slice has some. `merge`: the table's merge settings (`read_key_states`).
    """
    work = [p for p in probes if p.base.any() or (p.logs.any() and p.file_slice.log_files)]
    if deleted is None:
        deleted = np.zeros(len(result), dtype=bool)

    def task(probe: Probe) -> tuple[Probe, tuple[pa.Array, pa.Array]]:
        file_slice = probe.file_slice
        with_base = bool(probe.base.any()) and file_slice.base_file is not None
        if not probe.logs.any():
            file_slice = replace(file_slice, log_files=())
        among = keys.filter(pa.array(probe.candidates))
        return probe, read_key_states(storage, file_slice, committed, with_base, virtual_keys, merge, among)

    for probe, (file_keys, dead) in engine.map(task, work, description):
        assign_confirmed(keys, probe.candidates, file_keys, probe.file_slice.file_id, result, dead, deleted, also)


#: Further locations of keys live in more than one file group: (rows of the keys, file id) pairs.
Locations = list[tuple[np.ndarray, str]]


def assign_confirmed(
    keys: pa.Array,
    candidates: np.ndarray,
    file_keys: pa.Array,
    file_id: str,
    result: np.ndarray,
    file_deleted: pa.Array | None = None,
    deleted: np.ndarray | None = None,
    also: Locations | None = None,
) -> None:
    """Mark `result[i] = file_id` for candidate keys that the file really holds; with `file_deleted`
    (the file's keys held only deleted) and `deleted` (which results are such), a location where the
    key is live replaces one where it is deleted, and a deleted one only fills an empty result.
    With `also`, a key live here and already live in another group keeps that result, and
    (its rows, `file_id`) is appended to `also`."""
    if not candidates.any() or not len(file_keys):
        return
    rows = np.flatnonzero(candidates)
    # Hash the (smaller) candidate set and probe it with the file's keys.
    wanted = keys.take(pa.array(rows))
    found = pc.index_in(file_keys, value_set=wanted)
    hits = rows[np.unique(pc.drop_null(found).to_numpy(zero_copy_only=False))]
    if file_deleted is not None and deleted is not None and len(file_deleted):
        dead_here = pc.is_in(keys.take(pa.array(hits)), value_set=file_deleted).to_numpy(zero_copy_only=False)
        live, dead = hits[~dead_here], hits[dead_here]
    else:
        live, dead = hits, hits[:0]
    if also is not None:
        elsewhere = (result[live] != "") & (result[live] != file_id)
        if deleted is not None:
            elsewhere &= ~deleted[live]
        if elsewhere.any():
            also.append((live[elsewhere], file_id))
            live = live[~elsewhere]
    result[live] = file_id
    if deleted is None:
        return
    deleted[live] = False
    dead = dead[result[dead] == ""]
    result[dead] = file_id
    deleted[dead] = True


def every_location(located: pa.Array, also: Locations) -> tuple[np.ndarray | None, pa.Array]:
    """(rows, file ids): each key's location (`located`, null: none) in key order, then one more
    entry per further group in `also` where the key is live too. `rows` (None when `also` is
    empty: one entry per key) says which key each entry is, for taking the records it tags."""
    if not also:
        return None, located
    rows = np.concatenate([np.arange(len(located)), *(r for r, _ in also)])
    further = pa.array([file_id for r, file_id in also for _ in range(len(r))], pa.string())
    return rows, pa.concat_arrays([located.cast(pa.string()), further])


def locations_array(result: np.ndarray) -> pa.Array:
    """File ids as an Arrow string array, null where no file holds the key."""
    return pa.array(result, pa.string(), mask=(result == ""))


def empty_locations(n: int) -> np.ndarray:
    return np.full(n, "", dtype=object)


def slices_with_base(slices: Sequence[FileSlice]) -> list[FileSlice]:
    return [s for s in slices if s.base_file is not None]
