"""Issue 18, item 1: merge-on-read + BLOOM index must never give a key two file groups.

Two reproductions: a small (saturated) bloom filter, where a new key that one filter
admits was routed into that group's log unconfirmed and later, once it lived only in a
log, inserted again elsewhere; and a delete + pending compaction + re-upsert sequence at
default settings, after which the key lives only in a log on top of the compacted base.
Both are read with lakeward and with hudi-rs; write counts must be exact.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import hudi
import pyarrow as pa
import pytest

from lakeward.core.table import Table

SMALL_BLOOM = {
    "hoodie.index.bloom.num_entries": "60",
    "hoodie.index.bloom.fpp": "0.2",
    "hoodie.bloom.index.prune.by.ranges": "false",
}


def _rows(keys: list[str], ts: int, value: str) -> pa.Table:
    return pa.Table.from_pylist([{"uuid": k, "ts": ts, "v": value} for k in keys])


def _key_counts(path: str) -> tuple[Counter[str], Counter[str]]:
    """Record-key multiplicities read by lakeward and by hudi-rs."""
    mine = Table.open(path).read(columns=["uuid"]).column("uuid").to_pylist()
    batches = hudi.HudiTableBuilder.from_base_uri(path).build().read(hudi.HudiReadOptions())
    theirs = [k for b in batches for k in b.column("uuid").to_pylist()]
    return Counter(mine), Counter(theirs)


def _assert_unique(path: str, expected: set[str]) -> None:
    mine, theirs = _key_counts(path)
    assert {k: n for k, n in mine.items() if n > 1} == {}, "lakeward reads a key twice"
    assert {k: n for k, n in theirs.items() if n > 1} == {}, "hudi-rs reads a key twice"
    assert set(mine) == expected
    assert set(theirs) == expected


@pytest.mark.parametrize("options", [SMALL_BLOOM, {**SMALL_BLOOM, "hoodie.bloom.index.prune.by.ranges": "true"}])
def test_small_bloom_filter_on_merge_on_read_keeps_keys_unique(tmp_path: Path, options: dict[str, str]) -> None:
    path = str(tmp_path / "t")
    Table.create(path, record_key="uuid", ordering_field="ts", table_type="MERGE_ON_READ", options=options)
    live: set[str] = set()
    for batch in range(8):
        keys = [f"k{batch:02d}-{i:03d}" for i in range(40)]
        result = Table.open(path, options=options).upsert(_rows(keys, batch, "a"))
        assert (result.num_inserts, result.num_updates) == (len(keys), 0), f"batch {batch}: all keys are new"
        live |= set(keys)
        # Update a few existing keys too: they must be counted as updates.
        old = sorted(live - set(keys))[:5]
        if old:
            result = Table.open(path, options=options).upsert(_rows(old, 100 + batch, "u"))
            assert (result.num_inserts, result.num_updates) == (0, len(old))
        _assert_unique(path, live)
    # A brand-new key, deleted, then written again: one row, and the delete counts.
    for i in range(10):
        key = f"new-{i}"
        result = Table.open(path, options=options).upsert(_rows([key], 1000, "n"))
        assert (result.num_inserts, result.num_updates) == (1, 0)
        live.add(key)
        deleted = Table.open(path, options=options).delete(keys=[key])
        assert deleted.num_deletes == 1, f"the delete of {key} was dropped"
        live.discard(key)
        _assert_unique(path, live)
        result = Table.open(path, options=options).upsert(_rows([key], 1001, "m"))
        # The key's file group still holds it (in its delete block): like Hudi's index, the
        # write goes there, as an update of that group, never to a second group.
        assert (result.num_inserts, result.num_updates) == (0, 1)
        live.add(key)
        result = Table.open(path, options=options).upsert(_rows([key], 1002, "o"))
        assert (result.num_inserts, result.num_updates) == (0, 1)
        _assert_unique(path, live)


def test_reupsert_around_pending_compaction_keeps_one_row(tmp_path: Path) -> None:
    p = str(tmp_path / "t")
    Table.create(p, record_key="uuid", ordering_field="ts", table_type="MERGE_ON_READ")
    Table.open(p).upsert(_rows([f"k{i}" for i in range(10)], 1, "a"))
    assert Table.open(p).delete(keys=["k3"]).num_deletes == 1
    c = Table.open(p).schedule_compaction(force=True)
    assert c is not None
    result = Table.open(p).upsert(_rows(["k3"], 2, "b"))  # while c is pending
    # k3's group still holds it (base file and delete block): it goes there, counted as
    # Hudi counts records its index locates: an update.
    assert (result.num_inserts, result.num_updates) == (0, 1)
    Table.open(p).run_compaction(c)
    result = Table.open(p).upsert(_rows(["k3"], 3, "c"))
    assert (result.num_inserts, result.num_updates) == (0, 1)
    _assert_unique(p, {f"k{i}" for i in range(10)})
    rows = Table.open(p).read(columns=["uuid", "ts", "v"]).to_pylist()
    assert {"uuid": "k3", "ts": 3, "v": "c"} in rows
    assert Table.open(p).delete(keys=["k3"]).num_deletes == 1
    _assert_unique(p, {f"k{i}" for i in range(10)} - {"k3"})


def _values(path: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(key, value) rows read by lakeward and by hudi-rs, sorted."""
    mine = Table.open(path).read(columns=["uuid", "v"]).to_pylist()
    batches = hudi.HudiTableBuilder.from_base_uri(path).build().read(hudi.HudiReadOptions())
    theirs = [r for b in batches for r in b.select(["uuid", "v"]).to_pylist()]
    return sorted((r["uuid"], r["v"]) for r in mine), sorted((r["uuid"], r["v"]) for r in theirs)


@pytest.mark.parametrize("version", [6, 9])
@pytest.mark.parametrize("index", ["BLOOM", "SIMPLE"])
@pytest.mark.parametrize("last", ["delete", "upsert"])
def test_key_deleted_in_a_log_then_inserted_elsewhere_is_found_where_it_lives(
    tmp_path: Path, version: int, index: str, last: str
) -> None:
    """`insert` does not look keys up (Hudi's insert), so a key deleted in one group's log and
    inserted again lands in a new group: the group where it lives must win every later lookup,
    else a delete is appended where the key is already gone (lost) and an upsert leaves two rows."""
    path = str(tmp_path / "t")
    options = {"hoodie.index.type": index}
    Table.create(
        path, record_key="uuid", ordering_field="ts", table_type="MERGE_ON_READ", table_version=version, options=options
    )
    Table.open(path, options=options).upsert(_rows(["a", "k"], 1, "one"))
    assert Table.open(path, options=options).delete(keys=["k"]).num_deletes == 1
    Table.open(path, options=options).insert(_rows(["k"], 3, "three"))
    assert _values(path) == ([("a", "one"), ("k", "three")],) * 2
    if last == "delete":
        assert Table.open(path, options=options).delete(keys=["k"]).num_deletes == 1
        expected = [("a", "one")]
    else:
        result = Table.open(path, options=options).upsert(_rows(["k"], 4, "four"))
        assert (result.num_inserts, result.num_updates) == (0, 1)
        expected = [("a", "one"), ("k", "four")]
    assert _values(path) == (expected, expected)
    # and the next round still finds the key where it now lives
    Table.open(path, options=options).upsert(_rows(["k"], 5, "five"))
    assert _values(path) == ([("a", "one"), ("k", "five")],) * 2


def test_copy_on_write_new_keys_a_saturated_filter_admits_are_inserted_beside_a_pending_clustering(
    tmp_path: Path,
) -> None:
    """A key no file holds but one saturated filter admits was routed to that file group unread
    (exact on copy-on-write: the rewrite tells the insert), so with a clustering pending on the group
    the upsert of a brand-new key was refused as an update of it; and a delete of a key no file holds
    rewrote the whole file group to delete nothing."""
    table = Table.create(
        str(tmp_path / "t"),
        record_key="uuid",
        ordering_field="ts",
        options={
            **SMALL_BLOOM,
            "hoodie.index.bloom.num_entries": "2",
            "hoodie.bloom.index.filter.type": "SIMPLE",
            "hoodie.clustering.plan.strategy.sort.columns": "v",  # a plan even for one small file
        },
    )
    table.upsert(_rows([f"k{i:03d}" for i in range(20)], 1, "a"))
    before = {s.base_file.path for s in table.file_slices() if s.base_file is not None}
    fresh = [f"k{i:03d}x" for i in range(19)]  # no file holds them; the saturated filter admits some
    absent = table.delete(keys=fresh)
    assert absent.num_deletes == 0 and absent.files_written == (), absent.files_written
    assert {s.base_file.path for s in table.file_slices() if s.base_file is not None} == before
    assert table.schedule_clustering() is not None
    for key in fresh:
        assert table.upsert(_rows([key], 1, "b")).num_inserts == 1, key
    rows = table.read(columns=["uuid"]).column("uuid").to_pylist()
    assert sorted(rows) == sorted([f"k{i:03d}" for i in range(20)] + fresh)


@pytest.mark.parametrize("meta_fields", ["true", "false"])
@pytest.mark.parametrize("index", ["BLOOM", "SIMPLE"])
def test_a_late_flagged_delete_does_not_hide_a_live_copy_of_a_duplicated_key(
    tmp_path: Path, index: str, meta_fields: str
) -> None:
    """Under event-time ordering (version 8+) a `_hoodie_is_deleted` row that lost on ordering value
    leaves its key live. The index took the key's group for holding it only deleted, so with a second
    copy of the key (from bulk_insert) an upsert updated one copy only and a delete() left one live.
    Tables without meta fields (virtual keys) key their rows by the record key column."""
    path = str(tmp_path / "t")
    table = Table.create(
        path,
        record_key="uuid",
        ordering_field="ts",
        table_type="MERGE_ON_READ",
        table_version=8,
        options={"hoodie.index.type": index, "hoodie.populate.meta.fields": meta_fields},
    )

    def rows(keys: list[str], values: list[str], ts: list[int], deleted: list[bool]) -> pa.Table:
        return pa.table({"uuid": keys, "ts": ts, "v": values, "_hoodie_is_deleted": deleted})

    def read() -> list[tuple[str, str]]:
        mine = sorted((r["uuid"], r["v"]) for r in table.read(columns=["uuid", "v"]).to_pylist())
        snapshot = hudi.HudiTableBuilder.from_base_uri(path).build().read(hudi.HudiReadOptions())
        theirs = sorted((r["uuid"], r["v"]) for r in pa.Table.from_batches(snapshot).to_pylist())
        assert mine == theirs
        return mine

    table.upsert(rows(["k1", "k2"], ["a", "a"], [5, 5], [False, False]))
    table.upsert(rows(["k1"], ["late"], [2], [True]))  # loses to ts 5: k1 stays live
    table.bulk_insert(rows(["k1"], ["b"], [6], [False]))  # a second live copy, in a new group
    assert read() == [("k1", "a"), ("k1", "b"), ("k2", "a")]
    assert table.upsert(rows(["k1"], ["c"], [7], [False])).num_updates == 2  # every copy
    assert read() == [("k1", "c"), ("k1", "c"), ("k2", "a")]
    assert table.delete(keys=["k1"]).num_deletes == 2
    assert read() == [("k2", "a")]
