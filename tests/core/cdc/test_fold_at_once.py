"""The one-merge fold of a slice's log (`fold_log_changes_at_once`) against the per-instant fold.

When no key is touched by two instants, one merge of every block gives each instant's
changes; it must return exactly the per-instant fold's rows (in another order), and decline
(None) as soon as a key is touched twice, so the query folds instant by instant.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from lakeward import Table
from lakeward.core.cdc.changes import KEY, TS, fold_log_changes, fold_log_changes_at_once
from lakeward.core.cdc.extract import InferenceCase, SliceReads, plan_change_splits
from lakeward.core.file_group.reader import MergeSettings
from lakeward.core.schema import with_meta
from lakeward.core.table_schema import resolve_table_schema

SCHEMA = pa.schema([("id", pa.string()), ("part", pa.string()), ("v", pa.int64()), ("ts", pa.int64())])


def _rows(*items: tuple[str, int, int]) -> pa.Table:
    return pa.Table.from_pylist([{"id": i, "part": "x", "v": v, "ts": ts} for i, v, ts in items], schema=SCHEMA)


def _slice_fold(table: Table, begin: str):
    """(folded per instant, folded at once) of the table's one LOG_FILE split in (begin, latest]."""
    timeline = table.timeline()
    (split,) = [
        s
        for s in plan_change_splits(table.storage, timeline, table.config.table_type, begin, None)
        if s.case is InferenceCase.LOG_FILE
    ]
    full_schema = with_meta(resolve_table_schema(table.storage, timeline, table.config))
    reads = SliceReads(table.storage, full_schema)
    file_slice = split.after.file_slice
    base = reads.base(file_slice.base_file.path) if file_slice.base_file is not None else None
    blocks = reads.blocks(file_slice, split.after.visible)
    settings = MergeSettings.from_config(table.config)
    wanted = frozenset(split.instants)
    by_instant = fold_log_changes(base, blocks, full_schema, settings, wanted)
    folded = pa.concat_tables([by_instant[t] for t in split.instants if t in by_instant])
    return folded, fold_log_changes_at_once(base, blocks, full_schema, settings, wanted)


def _sorted(changes: pa.Table) -> pa.Table:
    return changes.take(pc.sort_indices(changes, sort_keys=[(TS, "ascending"), (KEY, "ascending")]))


def _table(tmp_path) -> tuple[Table, str]:
    options = {
        "hoodie.table.cdc.enabled": "true",
        "hoodie.index.type": "BUCKET",
        "hoodie.bucket.index.num.buckets": 1,
    }
    t = Table.create(
        str(tmp_path / "t"), record_key="id", partition_by="part", ordering_field="ts",
        table_type="MERGE_ON_READ", options=options,
    )  # fmt: skip
    first = t.upsert(_rows(("a", 1, 1), ("b", 2, 1), ("c", 3, 1), ("d", 4, 1))).instant_time
    t.upsert(_rows(("a", 10, 2), ("e", 5, 2)))  # an update and an insert
    t.delete(_rows(("b", 0, 3), ("zz", 0, 3)))  # a delete and the delete of a key never stored
    t.upsert(_rows(("c", 30, 0)))  # an older ordering value: still an update (commit-time ordering)
    return t, first


def test_fold_at_once_equals_the_per_instant_fold_when_keys_change_once(tmp_path):
    t, first = _table(tmp_path)
    folded, at_once = _slice_fold(t, first)
    assert at_once is not None
    assert folded.num_rows == 4  # a updated, e inserted, b deleted, c updated
    assert _sorted(at_once).equals(_sorted(folded))


def test_fold_at_once_declines_when_a_key_changes_twice(tmp_path):
    t, first = _table(tmp_path)
    t.upsert(_rows(("a", 11, 5)))  # "a" again: its state before this instant is not the base record
    folded, at_once = _slice_fold(t, first)
    assert at_once is None
    assert folded.num_rows == 5
