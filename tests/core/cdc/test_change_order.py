"""The order of a CDC query's rows (`read.changes.change_order`): commit time, record key, then
a delete before an update before an insert, exactly as a sort of the strings themselves.

The sort compares commit times by their rank among the distinct times; these tests check it
against the plain string sort on chunked input with ties, times of several lengths and nulls.
"""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.compute as pc

from lakeward.core.cdc.changes import KEY, OP, OP_RANK, TS
from lakeward.core.read.changes import change_order


def _string_sort(changes: pa.Table) -> pa.Array:
    rank = pc.fill_null(pc.index_in(changes.column(OP), value_set=pa.array(list(OP_RANK))), 9)
    keys = pa.table({TS: changes.column(TS), KEY: changes.column(KEY), "_rank": rank})
    return pc.sort_indices(keys, sort_keys=[(TS, "ascending"), (KEY, "ascending"), ("_rank", "ascending")])


def _changes(rows: list[tuple[str | None, str | None, str | None]], chunks: int) -> pa.Table:
    schema = pa.schema([(OP, pa.string()), (TS, pa.string()), (KEY, pa.string())])
    size = max(1, -(-len(rows) // chunks))
    parts = [
        pa.Table.from_pylist([dict(zip((OP, TS, KEY), r)) for r in rows[i : i + size]], schema=schema)
        for i in range(0, len(rows), size)
    ]
    return pa.concat_tables(parts) if parts else schema.empty_table()


def test_change_order_is_the_string_sort_of_time_key_and_op():
    rng = random.Random(19)
    times = ["20260101000000000", "20260101000000001", "20251231235959999", "2026010100000000", "9", None]
    rows = [
        (rng.choice(["i", "u", "d", None]), rng.choice(times), rng.choice([f"k{i}" for i in range(40)] + [None]))
        for _ in range(2_000)
    ]
    for chunks in (1, 7):
        changes = _changes(rows, chunks)
        assert change_order(changes).equals(_string_sort(changes))


def test_change_order_puts_a_delete_before_an_insert_of_the_same_key():
    changes = _changes([("i", "2", "a"), ("d", "2", "a"), ("u", "1", "b"), ("i", "1", "a")], 2)
    assert change_order(changes).to_pylist() == [3, 2, 1, 0]


def test_change_order_of_no_change():
    assert len(change_order(_changes([], 1))) == 0
