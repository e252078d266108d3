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


def deduplicate(batch: pa.Table, ordering_field: str | None, by_key_only: bool = False) -> pa.Table:
    """Keep one record per (partition path, record key), or per record key with `by_key_only`
    (a global index's rule, as Hudi's): the largest ordering value, else the last."""
    if batch.num_rows < 2:
        return batch
    if len(pc.unique(batch.column(RECORD_KEY))) == batch.num_rows:
        return batch  # every key once (the usual batch): one hash pass instead of a sort of the string keys
    indexed = batch.append_column(_ROW, pa.array(np.arange(batch.num_rows), pa.int64()))
    group_by = [RECORD_KEY] if by_key_only else [PARTITION_PATH, RECORD_KEY]
    sort_keys = [(column, "ascending") for column in group_by]
    if ordering_field:
        sort_keys.append((ordering_field, "ascending"))
    sort_keys.append((_ROW, "ascending"))
    order = pc.sort_indices(indexed, sort_keys=sort_keys)
    changes = None
    for column in group_by:
        values = pc.take(indexed.column(column), order).combine_chunks()
        changed = pc.not_equal(values.slice(1), values.slice(0, len(values) - 1))
        changes = changed if changes is None else pc.or_(changes, changed)
    assert changes is not None
    last_of_group = np.append(changes.to_numpy(zero_copy_only=False), True)
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
    match_keys: bool = True,
    delete_orderings: pa.Array | None = None,
) -> MergeOutcome:
    """Split a file group's rows into stored rows kept as they are and incoming rows to write.

    `match_keys=False` (plain inserts) appends every incoming row, duplicates included.
    `delete_orderings` (aligned with `delete_keys`) are the ordering values of delete
    markers (`_hoodie_is_deleted`): with event-time ordering a newer stored record survives.
    """
    base_keys = base.column(RECORD_KEY)
    drop = np.zeros(base.num_rows, dtype=bool)
    written = incoming if incoming is not None else base.schema.empty_table()
    updated_incoming = np.zeros(written.num_rows, dtype=bool)
    if match_keys and written.num_rows:
        match_idx = pc.index_in(base_keys, value_set=written.column(RECORD_KEY).combine_chunks())
        matched = pc.is_valid(match_idx).to_numpy(zero_copy_only=False)
        if event_time_ordering and ordering_field and matched.any():
            stored_wins = _stored_wins(base, written, match_idx, matched, ordering_field)
            if stored_wins.any():
                # The stored record is newer: keep it and drop the matching incoming record.
                losing = pc.filter(match_idx, pa.array(stored_wins)).to_numpy()
                keep_in = np.ones(written.num_rows, dtype=bool)
                keep_in[losing] = False
                matched &= ~stored_wins
                winners = pc.filter(match_idx, pa.array(matched)).to_numpy()
                updated_incoming[winners] = True
                written = written.filter(pa.array(keep_in))
                updated_incoming = updated_incoming[keep_in]
            else:
                updated_incoming[pc.filter(match_idx, pa.array(matched)).to_numpy()] = True
        else:
            updated_incoming[pc.filter(match_idx, pa.array(matched)).to_numpy()] = True
        drop |= matched
    num_updates = int(drop.sum())
    num_deletes = 0
    if delete_keys is not None and len(delete_keys):
        delete_idx = pc.index_in(base_keys, value_set=delete_keys)
        deleted = pc.is_valid(delete_idx).to_numpy(zero_copy_only=False) & ~drop
        if event_time_ordering and ordering_field and delete_orderings is not None and deleted.any():
            marker_order = pc.take(delete_orderings, pc.fill_null(delete_idx, 0))
            newer = pc.fill_null(pc.greater(base.column(ordering_field), marker_order), False)
            deleted &= ~newer.to_numpy(zero_copy_only=False)
        num_deletes = int(deleted.sum())
        drop |= deleted
    kept = base.filter(pa.array(~drop)) if drop.any() else base
    inserted = written.column(RECORD_KEY).combine_chunks()
    if updated_incoming.any():
        inserted = inserted.filter(pa.array(~updated_incoming))
    # Counted on the incoming side: a key stored several times (inserts allow duplicates) is one update.
    num_inserts = int((~updated_incoming).sum())
    return MergeOutcome(kept, written, inserted, num_updates, num_inserts, num_deletes)


def _stored_wins(
    base: pa.Table, incoming: pa.Table, match_idx: pa.Array, matched: np.ndarray, ordering_field: str
) -> np.ndarray:
    stored = base.column(ordering_field)
    fresh = pc.take(incoming.column(ordering_field), pc.fill_null(match_idx, 0))
    greater = pc.fill_null(pc.greater(stored, fresh), False).to_numpy(zero_copy_only=False)
    return greater & matched


def winning_versions(
    keys: pa.Array | pa.ChunkedArray,
    positions: np.ndarray,
    orderings: pa.Array | pa.ChunkedArray | None = None,
    resets: np.ndarray | None = None,
) -> np.ndarray:
    """Which version of each record key survives, among versions written in `positions` order.

    One entry per version (a stored record, a log record, a delete), aligned arrays:
    `positions` orders them by arrival (stored records first, then the log in file and
    block order). Returns the sorted indices of the winning versions, one per key that
    still has one.

    - Commit-time ordering (`orderings` None, OverwriteWithLatestAvroPayload or no
      ordering field): the latest version wins.
    - Event-time ordering (`orderings` given, DefaultHoodieRecordPayload): the largest
      ordering value wins, ties to the later version; null orderings lose to any value.
    - `resets` marks natural-order deletes (a delete-block entry without an ordering
      value, or an Integer 0): they remove every earlier version whatever its ordering,
      and are not candidates themselves, so a key whose last version is such a delete
      gets no winner. Versions after the reset compete as above.

    A winner may itself be a delete (or a `_hoodie_is_deleted` record): the caller decides.
    """
    n = len(keys)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if orderings is None and (resets is None or not resets.any()):
        return _latest_versions(keys, positions)
    columns: dict[str, pa.Array | pa.ChunkedArray] = {
        "k": keys,
        "p": pa.array(positions, pa.int64()),
        _ROW: pa.array(np.arange(n), pa.int64()),
    }
    if orderings is not None:
        columns["o"] = orderings
    versions = pa.table(columns)
    if resets is not None and resets.any():
        last_reset = versions.filter(pa.array(resets)).group_by("k").aggregate([("p", "max")])
        at = pc.index_in(versions.column("k"), value_set=last_reset.column("k"))
        threshold = pc.fill_null(pc.take(last_reset.column("p_max"), at), np.iinfo(np.int64).min)
        versions = versions.filter(pc.greater(versions.column("p"), threshold))
        if versions.num_rows == 0:
            return np.zeros(0, dtype=np.int64)
    sort_keys = [("k", "ascending")]
    if orderings is not None:
        # Null orderings first (validity before value), whatever the pyarrow version's null placement.
        versions = versions.append_column("v", pc.is_valid(versions.column("o")))
        sort_keys += [("v", "ascending"), ("o", "ascending")]
    sort_keys.append(("p", "ascending"))
    order = pc.sort_indices(versions, sort_keys=sort_keys)
    sorted_keys = pc.take(versions.column("k"), order).combine_chunks()
    m = len(sorted_keys)
    if m > 1:
        changes = pc.not_equal(sorted_keys.slice(1), sorted_keys.slice(0, m - 1)).to_numpy(zero_copy_only=False)
        last_of_key = np.append(changes, True)
    else:
        last_of_key = np.ones(m, dtype=bool)
    rows = pc.take(versions.column(_ROW), order).to_numpy()
    return np.sort(rows[last_of_key])


def _latest_versions(keys: pa.Array | pa.ChunkedArray, positions: np.ndarray) -> np.ndarray:
    """Commit-time ordering: per key, the version with the largest position (ties: the later row).

    One hash aggregation instead of sorting the (string) keys: every version gets a
    distinct rank that orders it as (position, row), and the key's largest rank names
    its winning row.
    """
    n = len(keys)
    low = int(positions.min())
    rank = (positions.astype(np.int64) - low) * n + np.arange(n, dtype=np.int64)
    best = pa.table({"k": keys, "r": pa.array(rank, pa.int64())}).group_by("k", use_threads=False)
    latest = best.aggregate([("r", "max")]).column("r_max").to_numpy()
    return np.sort(latest % n)
