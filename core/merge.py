"""Record merging: de-duplication inside a batch and merging incoming records into stored ones.

Vectorised over Arrow: sorting and set membership, no per-row Python. Two semantics, by
the table's payload class (as Apache Hudi):
- OverwriteWithLatestAvroPayload (default): an incoming record replaces the stored one.
- DefaultHoodieRecordPayload: the stored record stays if its ordering value is larger.
Inside one batch the record with the largest ordering value wins (ties: the last one).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

RECORD_KEY = "_hoodie_record_key"
PARTITION_PATH = "_hoodie_partition_path"
_ROW = "__lakeward_row"


def deduplicate(batch: pa.Table, ordering_field: str | None) -> pa.Table:
    """Keep one record per (partition path, record key): the largest ordering value, else the last."""
    if batch.num_rows < 2:
        return batch
    indexed = batch.append_column(_ROW, pa.array(np.arange(batch.num_rows), pa.int64()))
    sort_keys = [(PARTITION_PATH, "ascending"), (RECORD_KEY, "ascending")]
    if ordering_field:
        sort_keys.append((ordering_field, "ascending"))
    sort_keys.append((_ROW, "ascending"))
    order = pc.sort_indices(indexed, sort_keys=sort_keys)
    keys = pc.take(indexed.column(RECORD_KEY), order).combine_chunks()
    parts = pc.take(indexed.column(PARTITION_PATH), order).combine_chunks()
    if len(keys) < 2:
        return batch
    changes = pc.or_(
        pc.not_equal(keys.slice(1), keys.slice(0, len(keys) - 1)),
        pc.not_equal(parts.slice(1), parts.slice(0, len(parts) - 1)),
    ).to_numpy(zero_copy_only=False)
    last_of_group = np.append(changes, True)
    if last_of_group.all():
        return batch
    keep_rows = np.sort(pc.take(indexed.column(_ROW), order).to_numpy()[last_of_group])
    return batch.take(pa.array(keep_rows))


@dataclass(frozen=True)
class MergeOutcome:
    """The rows of a file group after merging, and what happened to them."""

    kept_base: pa.Table
    written_incoming: pa.Table
    #: Record keys of `written_incoming` rows that are new to the file group (not updates).
    inserted_keys: pa.Array
    num_updates: int
    num_inserts: int
    num_deletes: int


def merge_records(
    base: pa.Table,
    incoming: pa.Table | None,
    delete_keys: pa.Array | None,
    ordering_field: str | None = None,
    event_time_ordering: bool = False,
) -> MergeOutcome:
    """Split a file group's rows into stored rows kept as they are and incoming rows to write."""
    base_keys = base.column(RECORD_KEY)
    drop = np.zeros(base.num_rows, dtype=bool)
    num_updates = 0
    updated_incoming = np.zeros(incoming.num_rows if incoming is not None else 0, dtype=bool)
    if incoming is not None and incoming.num_rows:
        in_keys = incoming.column(RECORD_KEY)
        match_idx = pc.index_in(base_keys, value_set=in_keys.combine_chunks())
        matched = pc.is_valid(match_idx).to_numpy(zero_copy_only=False)
        if event_time_ordering and ordering_field and matched.any():
            stored_wins = _stored_wins(base, incoming, match_idx, matched, ordering_field)
            if stored_wins.any():
                # The stored record is newer: keep it and drop the matching incoming record.
                losing = pc.filter(match_idx, pa.array(stored_wins)).to_numpy()
                keep_in = np.ones(incoming.num_rows, dtype=bool)
                keep_in[losing] = False
                incoming = incoming.filter(pa.array(keep_in))
                matched &= ~stored_wins
        drop |= matched
        num_updates = int(matched.sum())
        updated_incoming = np.zeros(incoming.num_rows, dtype=bool)
        updated_incoming[pc.filter(match_idx, pa.array(matched)).to_numpy()] = True
    num_deletes = 0
    if delete_keys is not None and len(delete_keys):
        deleted = pc.is_in(base_keys, value_set=delete_keys).to_numpy(zero_copy_only=False) & ~drop
        num_deletes = int(deleted.sum())
        drop |= deleted
    kept = base.filter(pa.array(~drop)) if drop.any() else base
    written = incoming if incoming is not None else base.schema.empty_table()
    inserted = written.column(RECORD_KEY).combine_chunks()
    if updated_incoming.any():
        inserted = inserted.filter(pa.array(~updated_incoming))
    return MergeOutcome(kept, written, inserted, num_updates, written.num_rows - num_updates, num_deletes)


def _stored_wins(
    base: pa.Table, incoming: pa.Table, match_idx: pa.Array, matched: np.ndarray, ordering_field: str
) -> np.ndarray:
    stored = base.column(ordering_field)
    fresh = pc.take(incoming.column(ordering_field), pc.fill_null(match_idx, 0))
    greater = pc.fill_null(pc.greater(stored, fresh), False).to_numpy(zero_copy_only=False)
    return greater & matched
