"""CDC queries of savepointed instants after a clean: the savepoint keeps the instant's own
files readable, while files written later for it (a compaction's `.cdc` images) or by others
(the file group it replaced) may be gone. Found by a report-only exploration."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.core.exceptions import InstantNotFoundError

SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string()), ("ts", pa.int64()), ("v", pa.string())])


def _rows(ids: list[int], ts: int) -> pa.Table:
    return pa.Table.from_pylist([{"id": i, "part": "p0", "ts": ts, "v": f"{i}@{ts}"} for i in ids], schema=SCHEMA)


def _table(path: Path, table_type: str, version: str) -> Table:
    return Table.create(
        str(path), record_key="id", partition_by="part", ordering_field="ts", table_type=table_type,
        options={"hoodie.table.cdc.enabled": "true", "hoodie.write.table.version": version,
                 "hoodie.cleaner.commits.retained": "1"},
    )  # fmt: skip


def _range_of(t: Table, begin: str, end: str) -> tuple[str, str]:
    """(begin, end) in the time a range is in: completion time on 8+, instant time on 6."""
    completion = t.timeline().completion_times()
    return completion.get(begin, begin), completion.get(end, end)


@pytest.mark.parametrize("version", ["6", "8"])
def test_a_savepointed_delta_commit_whose_compacted_images_were_cleaned_reads_from_its_log(
    tmp_path: Path, version: str
) -> None:
    t = _table(tmp_path / "t", "MERGE_ON_READ", version)
    t0 = t.upsert(_rows([0, 1], 1)).instant_time
    t1 = t.upsert(_rows([1], 2)).instant_time  # a delta commit: a log file
    t.savepoint(t1)
    for k in range(3):  # each compaction persists the slice's changes (t1's too) in `.cdc` files
        t.upsert(_rows([0, 1], 3 + k))
        t.run_compaction(t.schedule_compaction(force=True))
    assert t.clean() is not None  # deletes the compacted slices and their `.cdc` files; t1's log stays
    changes = Table.open(t.path).read_changes(*_range_of(t, t0, t1), images="struct").to_pylist()
    assert [(r["op"], r["before"]["v"], r["after"]["v"]) for r in changes] == [("u", "1@1", "1@2")]


def test_a_savepointed_overwrite_whose_replaced_group_was_cleaned_names_that_group(tmp_path: Path) -> None:
    t = _table(tmp_path / "t", "COPY_ON_WRITE", "6")
    t0 = t.upsert(_rows([0, 1], 1)).instant_time
    replaced = {s.file_id for s in t.file_slices()}
    t1 = t.insert_overwrite(_rows([2], 2)).instant_time
    t.savepoint(t1)
    for k in range(3):
        t.upsert(_rows([2], 3 + k))
    assert t.clean() is not None
    (group,) = replaced
    with pytest.raises(InstantNotFoundError, match=f"replaced file group {group} of instant {t1} is gone"):
        Table.open(t.path).read_changes(t0, t1)


def _cdc_table(path: Path, table_type: str, version: str, mode: str) -> Table:
    return Table.create(
        str(path), record_key="id", partition_by="part", ordering_field="ts", table_type=table_type,
        options={"hoodie.table.cdc.enabled": "true", "hoodie.write.table.version": version,
                 "hoodie.table.cdc.supplemental.logging.mode": mode, "hoodie.cleaner.commits.retained": "2"},
    )  # fmt: skip


def _in(part: str, ids: list[int], ts: int) -> pa.Table:
    return pa.Table.from_pylist([{"id": i, "part": part, "ts": ts, "v": f"{i}@{ts}"} for i in ids], schema=SCHEMA)


def _earliest(t: Table) -> list[tuple[str, int, str | None, str | None]]:
    rows = Table.open(t.path).read_changes("earliest", images="struct").to_pylist()
    return sorted(
        (r["op"], (r["before"] or r["after"])["id"], (r["before"] or {}).get("v"), (r["after"] or {}).get("v"))
        for r in rows
    )


@pytest.mark.parametrize(("version", "table_type"), [("6", "COPY_ON_WRITE"), ("9", "MERGE_ON_READ")])
def test_earliest_begins_after_a_savepointed_write_whose_images_were_cleaned(
    tmp_path: Path, version: str, table_type: str
) -> None:
    """OP_KEY_ONLY persists no image: the savepointed update's before-images come from the file
    version before it, which the savepoint does not keep and the clean deleted."""
    t = _cdc_table(tmp_path / "t", table_type, version, "OP_KEY_ONLY")
    t.upsert(_in("p0", [1], 1))
    saved = t.upsert(_in("p0", [1, 2], 2)).instant_time
    t.savepoint(saved)
    t.upsert(_in("p0", [1], 3))
    t.delete(keys=[2])
    assert t.clean() is not None
    assert _earliest(t) == [("d", 2, "2@2", None), ("u", 1, "1@2", "1@3")]


@pytest.mark.parametrize("mode", ["OP_KEY_ONLY", "DATA_BEFORE", "DATA_BEFORE_AFTER"])
def test_earliest_begins_after_a_savepointed_delete_of_a_file_groups_last_key(tmp_path: Path, mode: str) -> None:
    """A delete that empties a file group writes no `.cdc` file: its deletes come from the
    version before it, which the clean deleted."""
    t = _cdc_table(tmp_path / "t", "COPY_ON_WRITE", "6", mode)
    t.upsert(_in("x", [1], 1))
    saved = t.delete(keys=[1]).instant_time
    t.savepoint(saved)
    t.upsert(_in("y", [2], 2))
    t.upsert(_in("y", [2], 3))
    assert t.clean() is not None
    assert _earliest(t) == [("i", 2, None, "2@2"), ("u", 2, "2@2", "2@3")]


@pytest.mark.parametrize("version", ["6", "8"])
def test_earliest_keeps_a_savepointed_write_whose_changes_need_no_cleaned_file(tmp_path: Path, version: str) -> None:
    """An insert into a new file group needs no earlier version: from "earliest" it stays in range."""
    t = _cdc_table(tmp_path / "t", "COPY_ON_WRITE", version, "OP_KEY_ONLY")
    t.upsert(_in("y", [2], 1))
    t.upsert(_in("y", [2], 2))
    saved = t.upsert(_in("x", [1], 1)).instant_time
    t.savepoint(saved)
    t.upsert(_in("y", [2], 3))
    t.upsert(_in("y", [2], 4))
    assert t.clean() is not None
    assert _earliest(t) == [("i", 1, None, "1@1"), ("u", 2, "2@2", "2@3"), ("u", 2, "2@3", "2@4")]


@pytest.mark.parametrize(("version", "table_type"), [("6", "COPY_ON_WRITE"), ("9", "MERGE_ON_READ")])
def test_a_savepointed_overwrite_whose_replaced_version_was_cleaned_is_not_read_from_an_older_one(
    tmp_path: Path, version: str, table_type: str
) -> None:
    """Another savepoint kept an older version of the group the overwrite replaced; the version right
    before the overwrite was cleaned. Its deletes were read from the older version: a key written in
    between was missing from them. Now "earliest" begins after the overwrite, and a range over it
    fails naming the group. Found by a report-only exploration."""
    t = _table(tmp_path / "t", table_type, version)
    first = t.insert(_in("p0", [1], 1)).instant_time
    t.savepoint(first)  # keeps the group's first version
    second = t.upsert(_in("p0", [2], 2)).instant_time  # the group's second version: keys 1 and 2
    overwrite = t.insert_overwrite(_in("p0", [3], 3)).instant_time  # replaces the group
    t.savepoint(overwrite)
    t.upsert(_in("p1", [9], 4))
    assert t.clean() is not None  # deletes the second version
    assert 3 not in {row[1] for row in _earliest(t)}  # begins after the overwrite
    begin, _ = _range_of(t, second, second)  # a range of the overwrite alone
    with pytest.raises(InstantNotFoundError, match="replaced file group"):
        Table.open(t.path).read_changes(begin)
