"""The changes of one commit to one file group, computed from the group's rows before and after it.

One function serves every write path and every inference case: a record whose latest
version was written by the commit is an insert (`i`) when the key was absent before and
an update (`u`) otherwise; a key present before and gone after is a delete (`d`). Records
the commit did not touch keep their old commit time and yield nothing, so an upsert that
loses to a newer stored record (event-time ordering) is not a change either.

Changes are an Arrow table: `op`, `ts_ms` (the commit's instant time), `record_key`, and
the images `before` / `after` as structs of the full row (meta columns included, as Hudi
persists them), null where the operation has none.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakeward.core.file_group.log_file import DataBlock, DeleteBlock
from lakeward.core.file_group.log_file.content import DELETE_ORDERING_VALUE, DELETE_RECORD_KEY
from lakeward.core.file_group.reader import MergeSettings, merge_log_blocks
from lakeward.core.merge import RECORD_KEY

OP, TS, KEY, BEFORE, AFTER = "op", "ts_ms", "record_key", "before", "after"
INSERT, UPDATE, DELETE = "i", "u", "d"
COMMIT_TIME = "_hoodie_commit_time"
#: Within one commit, a delete sorts before an insert of the same key (insert_overwrite).
OP_RANK = {DELETE: 0, UPDATE: 1, INSERT: 2}


def image_type(full_schema: pa.Schema) -> pa.StructType:
    return pa.struct(list(full_schema))


def change_schema(full_schema: pa.Schema) -> pa.Schema:
    image = image_type(full_schema)
    return pa.schema(
        [
            pa.field(OP, pa.string()),
            pa.field(TS, pa.string()),
            pa.field(KEY, pa.string()),
            pa.field(BEFORE, image),
            pa.field(AFTER, image),
        ]
    )


def as_images(rows: pa.Table, full_schema: pa.Schema) -> pa.StructArray:
    """Rows (already in `full_schema`) as one struct array."""
    rows = rows.select(full_schema.names)
    arrays = [rows.column(i).combine_chunks() for i in range(rows.num_columns)]
    if rows.num_rows == 0:
        return pa.array([], image_type(full_schema))  # type: ignore[return-value]
    return pa.StructArray.from_arrays(arrays, fields=list(full_schema))


def empty_changes(full_schema: pa.Schema) -> pa.Table:
    return change_schema(full_schema).empty_table()


def diff_states(
    instant_time: str,
    before: pa.Table | None,
    after: pa.Table | None,
    full_schema: pa.Schema,
    keys: pa.Array | None = None,
) -> pa.Table:
    """The changes `instant_time` made to a file group whose rows were `before` and became `after`.

    Both tables are in `full_schema` (meta columns first). `keys` restricts the result to
    those record keys (the keys a log append touched), which saves nothing in correctness
    but skips rows that cannot have changed.
    """
    before = before if before is not None else full_schema.empty_table()
    after = after if after is not None else full_schema.empty_table()
    if keys is not None:
        before = before.filter(pc.is_in(before.column(RECORD_KEY), value_set=keys))
        after = after.filter(pc.is_in(after.column(RECORD_KEY), value_set=keys))
    return _diff(instant_time, instant_time, before, after, full_schema)


def _diff(
    after_times: str | pa.Array, before_times: str | pa.Array, before: pa.Table, after: pa.Table, full_schema: pa.Schema
) -> pa.Table:
    """`diff_states`, where each key's commit may be its own: `*_times` are the instant times of
    the commits that turned `before` into `after`, one for all rows or one per row of each."""
    if before.num_rows == 0:
        times = pa.repeat(pa.scalar(after_times), after.num_rows) if isinstance(after_times, str) else after_times
        return inserts_of(times, after, full_schema)
    b_keys = before.column(RECORD_KEY).combine_chunks()
    a_keys = after.column(RECORD_KEY).combine_chunks()
    b_images = as_images(before, full_schema)
    a_images = as_images(after, full_schema)
    written = pc.fill_null(pc.equal(after.column(COMMIT_TIME), after_times), False)
    at_before = pc.index_in(a_keys, value_set=b_keys)
    existed = pc.is_valid(at_before)
    gone = pc.invert(pc.is_in(b_keys, value_set=a_keys))

    parts = []
    upserted = pc.filter(pa.array(range(len(a_keys)), pa.int64()), written)
    if len(upserted):
        was = pc.take(existed, upserted)
        parts.append(
            _changes(
                pc.if_else(was, UPDATE, INSERT),
                after_times if isinstance(after_times, str) else pc.take(after_times, upserted),
                pc.take(a_keys, upserted),
                pc.take(b_images, pc.take(at_before, upserted)),
                pc.take(a_images, upserted),
                full_schema,
            )
        )
    removed = pc.filter(pa.array(range(len(b_keys)), pa.int64()), gone)
    if len(removed):
        n = len(removed)
        parts.append(
            _changes(
                pa.repeat(pa.scalar(DELETE), n),
                before_times if isinstance(before_times, str) else pc.take(before_times, removed),
                pc.take(b_keys, removed),
                pc.take(b_images, removed),
                pa.nulls(n, image_type(full_schema)),
                full_schema,
            )
        )
    if not parts:
        return empty_changes(full_schema)
    return pa.concat_tables(parts)


def inserts_of(instant_times: pa.Array, rows: pa.Table, full_schema: pa.Schema) -> pa.Table:
    """The inserts of new file groups' rows (`rows` in `full_schema`, each group's rows as its
    commit `instant_times` (one per row) left them): the rows their own commit wrote."""
    keep = pc.fill_null(pc.equal(rows.column(COMMIT_TIME), instant_times), False)
    written = rows.filter(keep)
    n = written.num_rows
    if n == 0:
        return empty_changes(full_schema)
    return _changes(
        pa.repeat(pa.scalar(INSERT), n),
        instant_times.filter(keep),
        written.column(RECORD_KEY).combine_chunks(),
        pa.nulls(n, image_type(full_schema)),
        as_images(written, full_schema),
        full_schema,
    )


def _changes(
    ops: pa.Array,
    instant_time: str | pa.Array,
    keys: pa.Array,
    before: pa.Array,
    after: pa.Array,
    full_schema: pa.Schema,
) -> pa.Table:
    n = len(keys)
    times = pa.repeat(pa.scalar(instant_time), n) if isinstance(instant_time, str) else instant_time
    return pa.Table.from_arrays(
        [ops, times, pc.cast(keys, pa.string()), before, after],
        schema=change_schema(full_schema),
    )


def block_keys(blocks: Sequence[DataBlock | DeleteBlock]) -> pa.Array:
    """The distinct record keys the data and delete blocks touch (strings)."""
    keys = [
        (b.records.column(RECORD_KEY) if isinstance(b, DataBlock) else b.records.column(DELETE_RECORD_KEY))
        .combine_chunks()
        .cast(pa.string())
        for b in blocks
    ]
    return pc.unique(pa.concat_arrays(keys)) if keys else pa.array([], pa.string())


def _by_instant(blocks: Sequence[DataBlock | DeleteBlock]) -> dict[str, list[DataBlock | DeleteBlock]]:
    """The blocks of each instant, instants in log order."""
    by_instant: dict[str, list[DataBlock | DeleteBlock]] = {}
    for block in blocks:
        by_instant.setdefault(block.instant_time, []).append(block)
    return by_instant


def _touched_base(
    base: pa.Table | None, touched: pa.Array, full_schema: pa.Schema, settings: MergeSettings
) -> pa.Table:
    """The base records (in `full_schema`) of the `touched` keys. Records no block touches never
    change: every state and diff of a fold needs only these (a fraction of a large slice)."""
    # With the keys stored (no virtual key field), the base is cut to the touched keys before
    # it is conformed: a merge is per key, so the result is the same for a fraction of the rows.
    stored_keys = False
    if base is not None and settings.key_field is None and RECORD_KEY in base.column_names:
        stored_keys = True
        keys = base.column(RECORD_KEY)
        base = base.filter(pc.is_in(keys, value_set=touched.cast(keys.type)))
    state = merge_log_blocks(base, [], full_schema, settings)
    if state.num_rows and not stored_keys:
        keys = state.column(RECORD_KEY)
        state = state.filter(pc.is_in(keys, value_set=touched.cast(keys.type)))
    return state


def fold_log_changes(
    base: pa.Table | None,
    blocks: Sequence[DataBlock | DeleteBlock],
    full_schema: pa.Schema,
    settings: MergeSettings,
    wanted: frozenset[str] | None = None,
) -> dict[str, pa.Table]:
    """The changes of each delta commit whose blocks a slice's log holds, by instant time.

    Applies the visible `blocks` (log order) to `base` one instant at a time, as a reader
    of the slice right after each instant would see it, and diffs consecutive states on
    the keys the instant touched. `wanted`: only these instants' changes are kept (all
    instants are still applied, in order).
    """
    by_instant = _by_instant(blocks)
    touched_base = _touched_base(base, block_keys(blocks), full_schema, settings)
    state = touched_base
    # A delete that carries an ordering value (event-time ordering) goes on deciding after it removed
    # the row: a later record with a smaller ordering value loses to it. The state table cannot hold
    # it, so each state is then the merge of the base with every block up to its instant, as a reader
    # of the slice right after that instant merges them.
    cumulative = _has_ordered_deletes(blocks, settings)
    applied: list[DataBlock | DeleteBlock] = []
    out: dict[str, pa.Table] = {}
    for instant_time, instant_blocks in by_instant.items():
        if cumulative:
            applied.extend(instant_blocks)
            after = merge_log_blocks(touched_base, applied, full_schema, settings)
        else:
            after = merge_log_blocks(state, instant_blocks, full_schema, settings)
        if wanted is None or instant_time in wanted:
            out[instant_time] = diff_states(instant_time, state, after, full_schema, block_keys(instant_blocks))
        state = after
    return out


def _has_ordered_deletes(blocks: Sequence[DataBlock | DeleteBlock], settings: MergeSettings) -> bool:
    """Whether an event-time merge meets a delete block entry with an ordering value among `blocks`."""
    if not (settings.event_time_ordering and settings.ordering_field):
        return False
    for block in blocks:
        if isinstance(block, DeleteBlock) and DELETE_ORDERING_VALUE in block.records.column_names:
            values = block.records.column(DELETE_ORDERING_VALUE)
            if values.null_count < len(values):
                return True
    return False


def fold_log_changes_at_once(
    base: pa.Table | None,
    blocks: Sequence[DataBlock | DeleteBlock],
    full_schema: pa.Schema,
    settings: MergeSettings,
    wanted: frozenset[str] | None = None,
) -> pa.Table | None:
    """`fold_log_changes` in one merge, when no key is touched by two instants' blocks (and the
    base holds each key once): each key's state before its instant is then its base record,
    and after it the record a merge of every block leaves, so one merge and one diff (each
    key's rows with its own instant's time) give every instant's changes. The rows come in
    another order than the fold's (callers sort). None: the keys do not allow it (fold instead).
    """
    by_instant = _by_instant(blocks)
    instant_keys = [block_keys(instant_blocks) for instant_blocks in by_instant.values()]
    touched = pa.concat_arrays(instant_keys) if instant_keys else pa.array([], pa.string())
    if pc.count_distinct(touched).as_py() != len(touched):
        return None
    times = pa.array(np.repeat(list(by_instant), [len(k) for k in instant_keys]).astype(object), pa.string())
    state = _touched_base(base, touched, full_schema, settings)
    if state.num_rows and pc.count_distinct(state.column(RECORD_KEY)).as_py() != state.num_rows:
        return None
    after = merge_log_blocks(state, blocks, full_schema, settings)

    def times_of(rows: pa.Table) -> pa.Array:
        return pc.take(times, pc.index_in(rows.column(RECORD_KEY), value_set=touched))

    changes = _diff(times_of(after), times_of(state), state, after, full_schema)
    if wanted is not None:
        changes = changes.filter(pc.is_in(changes.column(TS), value_set=pa.array(sorted(wanted), pa.string())))
    return changes
