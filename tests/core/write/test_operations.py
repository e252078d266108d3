"""Write operations through the user API (`Table`), checked against hand-written expectations.

Every expected snapshot below is worked out from the input batches, never from lakeward's
own output: a data engineer's view of insert / upsert / bulk_insert / delete /
insert_overwrite(_table) / delete_partition, plus schema evolution and meta columns.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakeward.core.exceptions import SchemaError
from lakeward.core.index import base as index_base
from lakeward.core.index import bloom as bloom_index
from lakeward.core.index import simple as simple_index
from lakeward.core.table import Table


# -- helpers ------------------------------------------------------------------------------
def make_table(tmp_path: Path, name: str = "trips", **kwargs) -> Table:
    kwargs.setdefault("record_key", "id")
    kwargs.setdefault("partition_by", "city")
    kwargs.setdefault("ordering_field", "ts")
    return Table.create(str(tmp_path / name), **kwargs)


def batch(*rows: tuple) -> pa.Table:
    """Rows of (id, city, ts, v)."""
    return pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "city": pa.array([r[1] for r in rows], pa.string()),
            "ts": pa.array([r[2] for r in rows], pa.int64()),
            "v": pa.array([r[3] for r in rows], pa.string()),
        }
    )


def snapshot(table: Table, columns: tuple[str, ...] = ("id", "city", "ts", "v")) -> list[tuple]:
    return sorted(tuple(r[c] for c in columns) for r in table.read().to_pylist())


def commit_json(table: Table, instant_time: str, action: str = "commit") -> dict:
    return json.loads((Path(table.path) / ".hoodie" / f"{instant_time}.{action}").read_text())


def live_file_ids(table: Table, partition: str) -> set[str]:
    return {s.file_id for s in table.file_slices() if s.partition_path == partition}


SEED = batch((1, "sf", 1, "a"), (2, "sf", 1, "b"), (3, "ny", 1, "c"))
SEED_ROWS = [(1, "sf", 1, "a"), (2, "sf", 1, "b"), (3, "ny", 1, "c")]


# -- insert ---------------------------------------------------------------------------------
def test_insert_keeps_duplicates_inside_a_batch(tmp_path):
    t = make_table(tmp_path)
    result = t.insert(batch((1, "sf", 1, "a"), (1, "sf", 2, "a-again"), (2, "ny", 1, "b")))
    assert result.num_inserts == 3
    assert result.num_updates == 0
    assert snapshot(t) == [(1, "sf", 1, "a"), (1, "sf", 2, "a-again"), (2, "ny", 1, "b")]


def test_insert_of_an_existing_key_adds_a_duplicate(tmp_path):
    """Insert does no index lookup: a stored key inserted again is a second record, not an update."""
    t = make_table(tmp_path)
    t.upsert(SEED)
    result = t.insert(batch((1, "sf", 2, "dup"), (4, "sf", 2, "d")))
    assert (result.num_inserts, result.num_updates) == (2, 0)
    assert snapshot(t) == sorted([*SEED_ROWS, (1, "sf", 2, "dup"), (4, "sf", 2, "d")])


def test_insert_never_consults_the_index(tmp_path, monkeypatch):
    t = make_table(tmp_path)
    t.upsert(SEED)
    calls: list[str] = []

    def spy(name):
        def fail(*args, **kwargs):
            calls.append(name)
            raise AssertionError(f"insert called the index ({name})")

        return fail

    for module, attr in [
        (bloom_index, "locate"),
        (simple_index, "locate"),
        (index_base, "read_key_states"),
        (bloom_index, "read_footer_keys"),
    ]:
        monkeypatch.setattr(module, attr, spy(f"{module.__name__}.{attr}"))
    t.insert(batch((5, "sf", 3, "e"), (6, "ny", 3, "f")))
    assert calls == []
    assert len(snapshot(t)) == 5


# -- upsert ---------------------------------------------------------------------------------
def test_upsert_updates_existing_keys_and_inserts_new_ones(tmp_path):
    t = make_table(tmp_path)
    first = t.upsert(SEED)
    assert (first.num_inserts, first.num_updates, first.num_deletes) == (3, 0, 0)

    result = t.upsert(batch((1, "sf", 2, "a2"), (3, "ny", 2, "c2"), (4, "sf", 2, "d"), (5, "la", 2, "e")))
    assert result.num_updates == 2
    assert result.num_inserts == 2
    assert result.num_deletes == 0
    assert snapshot(t) == [
        (1, "sf", 2, "a2"),
        (2, "sf", 1, "b"),
        (3, "ny", 2, "c2"),
        (4, "sf", 2, "d"),
        (5, "la", 2, "e"),
    ]
    meta = commit_json(t, result.instant_time)
    assert meta["operationType"] == "UPSERT"
    stats = [s for ss in meta["partitionToWriteStats"].values() for s in ss]
    assert sum(s["numUpdateWrites"] for s in stats) == 2
    assert sum(s["numInserts"] for s in stats) == 2
    assert sorted(s["path"] for s in stats) == sorted(result.files_written)
    for path in result.files_written:
        assert (Path(t.path) / path).is_file()


def test_upsert_same_key_in_another_partition_is_a_new_record(tmp_path):
    """The default (non-global) index scopes keys by partition, as Hudi's BLOOM index does."""
    t = make_table(tmp_path)
    t.upsert(SEED)
    result = t.upsert(batch((3, "sf", 2, "c-in-sf")))
    assert (result.num_inserts, result.num_updates) == (1, 0)
    assert snapshot(t) == sorted([*SEED_ROWS, (3, "sf", 2, "c-in-sf")])


# -- bulk_insert ------------------------------------------------------------------------------
def test_bulk_insert_writes_only_new_file_groups(tmp_path):
    t = make_table(tmp_path)
    first = t.upsert(SEED)
    before = {(s.partition_path, s.file_id): s.base_file.path for s in t.file_slices()}

    result = t.bulk_insert(batch((7, "sf", 5, "g"), (8, "ny", 5, "h")))
    meta = commit_json(t, result.instant_time)
    assert meta["operationType"] == "BULK_INSERT"
    stats = [s for ss in meta["partitionToWriteStats"].values() for s in ss]
    assert len(stats) == 2
    assert all(s["prevCommit"] == "null" for s in stats)
    assert {s["fileId"] for s in stats}.isdisjoint({fid for _, fid in before})
    # The old file groups are untouched: their latest base file is still the first commit's.
    after = {(s.partition_path, s.file_id): s.base_file.path for s in t.file_slices()}
    for key, path in before.items():
        assert after[key] == path
        assert path.endswith(f"_{first.instant_time}.parquet")
    assert len(after) == 4
    assert snapshot(t) == sorted([*SEED_ROWS, (7, "sf", 5, "g"), (8, "ny", 5, "h")])


# -- delete -----------------------------------------------------------------------------------
def test_delete_by_rows_ignores_unknown_keys(tmp_path):
    t = make_table(tmp_path)
    t.upsert(SEED)
    # 99 does not exist; 3 exists but in "ny", not "sf": neither is deleted.
    result = t.delete(pa.table({"id": [1, 99, 3], "city": ["sf", "sf", "sf"]}))
    assert result.num_deletes == 1
    assert (result.num_inserts, result.num_updates) == (0, 0)
    assert snapshot(t) == [(2, "sf", 1, "b"), (3, "ny", 1, "c")]
    assert commit_json(t, result.instant_time)["operationType"] == "DELETE"


def test_delete_by_keys_ignores_unknown_keys(tmp_path):
    t = make_table(tmp_path)
    t.upsert(SEED)
    result = t.delete(keys=[2, 3, 42])
    assert result.num_deletes == 2
    assert snapshot(t) == [(1, "sf", 1, "a")]


def test_delete_by_key_dicts_on_a_composite_key_table(tmp_path):
    t = Table.create(str(tmp_path / "t"), record_key=["id", "name"], partition_by="city")
    t.upsert(pa.table({"id": [1, 1, 2], "name": ["Alice", "Bob", "Alice"], "city": ["sf", "sf", "ny"], "v": [1, 2, 3]}))
    result = t.delete(keys=[{"id": 1, "name": "Bob", "city": "sf"}, {"id": 9, "name": "Nobody", "city": "sf"}])
    assert result.num_deletes == 1
    assert sorted((r["id"], r["name"]) for r in t.read().to_pylist()) == [(1, "Alice"), (2, "Alice")]


def test_delete_of_only_unknown_keys_changes_nothing(tmp_path):
    t = make_table(tmp_path)
    t.upsert(SEED)
    files_before = {s.base_file.path for s in t.file_slices()}
    result = t.delete(keys=[100, 200])
    assert result.num_deletes == 0
    assert result.files_written == ()
    assert {s.base_file.path for s in t.file_slices()} == files_before
    assert snapshot(t) == SEED_ROWS


def test_delete_by_keys_on_a_table_without_data_is_a_no_op(tmp_path):
    t = make_table(tmp_path)
    result = t.delete(keys=[1, 2])
    assert result.num_deletes == 0
    assert result.files_written == ()
    assert t.read().num_rows == 0


# -- insert_overwrite / insert_overwrite_table / delete_partition --------------------------
def test_insert_overwrite_replaces_only_the_batch_partitions(tmp_path):
    t = make_table(tmp_path)
    t.upsert(SEED)
    t.bulk_insert(batch((4, "sf", 1, "d")))  # a second file group in "sf"
    sf_groups = live_file_ids(t, "sf")
    ny_groups = live_file_ids(t, "ny")
    assert len(sf_groups) == 2

    result = t.insert_overwrite(batch((10, "sf", 2, "new-sf")))
    assert snapshot(t) == [(3, "ny", 1, "c"), (10, "sf", 2, "new-sf")]
    assert result.replaced_file_groups == 2

    hoodie = Path(t.path) / ".hoodie"
    assert (hoodie / f"{result.instant_time}.replacecommit").is_file()
    assert (hoodie / f"{result.instant_time}.replacecommit.requested").is_file()
    assert (hoodie / f"{result.instant_time}.replacecommit.inflight").is_file()
    assert not (hoodie / f"{result.instant_time}.commit").exists()
    meta = commit_json(t, result.instant_time, "replacecommit")
    assert meta["operationType"] == "INSERT_OVERWRITE"
    replaced = meta["partitionToReplaceFileIds"]
    assert set(replaced) == {"sf"}
    assert set(replaced["sf"]) == sf_groups
    assert live_file_ids(t, "ny") == ny_groups
    new_stats = meta["partitionToWriteStats"]["sf"]
    assert len(new_stats) == 1 and new_stats[0]["fileId"] not in sf_groups

    # Replaced records stay gone: upserting one of their keys inserts it afresh.
    again = t.upsert(batch((1, "sf", 3, "back")))
    assert (again.num_inserts, again.num_updates) == (1, 0)
    assert snapshot(t) == [(1, "sf", 3, "back"), (3, "ny", 1, "c"), (10, "sf", 2, "new-sf")]


def test_insert_overwrite_into_a_new_partition_replaces_nothing(tmp_path):
    t = make_table(tmp_path)
    t.upsert(SEED)
    result = t.insert_overwrite(batch((20, "la", 1, "l")))
    assert result.replaced_file_groups == 0
    meta = commit_json(t, result.instant_time, "replacecommit")
    assert not any(meta["partitionToReplaceFileIds"].values())
    assert snapshot(t) == sorted([*SEED_ROWS, (20, "la", 1, "l")])


def test_insert_overwrite_table_replaces_every_partition(tmp_path):
    t = make_table(tmp_path)
    t.upsert(SEED)
    before = {p: live_file_ids(t, p) for p in ("sf", "ny")}
    result = t.insert_overwrite_table(batch((30, "la", 1, "x"), (31, "sf", 1, "y")))
    assert snapshot(t) == [(30, "la", 1, "x"), (31, "sf", 1, "y")]
    meta = commit_json(t, result.instant_time, "replacecommit")
    assert meta["operationType"] == "INSERT_OVERWRITE_TABLE"
    assert {p: set(ids) for p, ids in meta["partitionToReplaceFileIds"].items() if ids} == before
    assert result.replaced_file_groups == 2


def test_delete_partition_drops_whole_partitions(tmp_path):
    t = make_table(tmp_path)
    t.upsert(SEED)
    t.upsert(batch((4, "la", 1, "d")))
    ny_groups = live_file_ids(t, "ny")
    result = t.delete_partition(["ny"])
    assert snapshot(t) == [(1, "sf", 1, "a"), (2, "sf", 1, "b"), (4, "la", 1, "d")]
    meta = commit_json(t, result.instant_time, "replacecommit")
    assert meta["operationType"] == "DELETE_PARTITION"
    assert {p: set(ids) for p, ids in meta["partitionToReplaceFileIds"].items()} == {"ny": ny_groups}
    assert result.files_written == ()


def test_delete_partition_of_one_partition_given_as_a_string(tmp_path):
    """A partition path passed alone (not in a list) is that one partition, never its characters:
    "ab" once dropped partitions "a" and "b" and kept "ab"."""
    t = make_table(tmp_path)
    t.upsert(batch((1, "a", 1, "x"), (2, "b", 1, "y"), (3, "ab", 1, "z")))
    t.delete_partition("ab")
    assert snapshot(t) == [(1, "a", 1, "x"), (2, "b", 1, "y")]


def test_delete_of_one_key_given_as_a_string_or_a_mapping(tmp_path):
    """One key passed alone (not in a list) is that key: keys="ab" once deleted keys "a" and "b"."""
    t = Table.create(str(tmp_path / "t"), record_key="name", partition_by="city")
    t.upsert(pa.table({"name": ["a", "b", "ab", "c"], "city": ["sf"] * 4, "v": [1, 2, 3, 4]}))
    assert t.delete(keys="ab").num_deletes == 1
    t.delete(keys={"name": "c", "city": "sf"})
    assert sorted(t.read(columns=["name"]).column("name").to_pylist()) == ["a", "b"]


def test_delete_partition_of_an_unknown_partition_fails_and_leaves_the_table(tmp_path):
    t = make_table(tmp_path)
    t.upsert(SEED)
    writes = [i.time for i in t.timeline().completed_writes()]
    with pytest.raises(SchemaError, match="nowhere"):
        t.delete_partition(["nowhere"])
    assert [i.time for i in t.timeline().completed_writes()] == writes
    assert t.timeline().pending() == []
    assert snapshot(t) == SEED_ROWS


# -- schema evolution -------------------------------------------------------------------------
def test_adding_a_nullable_column_reads_null_for_old_rows(tmp_path):
    t = make_table(tmp_path)
    t.upsert(SEED)
    newer = batch((2, "sf", 2, "b2"), (4, "ny", 2, "d")).append_column("score", pa.array([20.5, 40.0]))
    result = t.upsert(newer)
    assert "score" in t.schema().names
    assert snapshot(t, ("id", "v", "score")) == [
        (1, "a", None),
        (2, "b2", 20.5),
        (3, "c", None),
        (4, "d", 40.0),
    ]
    schema = json.loads(commit_json(t, result.instant_time)["extraMetadata"]["schema"])
    assert [f["name"] for f in schema["fields"]] == ["id", "city", "ts", "v", "score"]
    # Dropping the column again is refused (lakeward does not support dropping columns).
    with pytest.raises(SchemaError, match="score"):
        t.upsert(batch((5, "la", 3, "e")))
    assert snapshot(t, ("id", "score")) == [(1, None), (2, 20.5), (3, None), (4, 40.0)]


def test_a_column_differing_only_in_case_is_refused(tmp_path):
    """`V` beside `v` was accepted: readers that resolve names case-insensitively (Hudi's Spark and
    Hive readers; hudi-rs read the old files' `v` as `V`) cannot tell the two apart."""
    t = make_table(tmp_path)
    t.upsert(SEED)
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    with pytest.raises(SchemaError, match="'V' of the batch differs from the table's column 'v' only in case"):
        t.upsert(batch((2, "sf", 2, "b2")).append_column("V", pa.array(["x"])))
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before
    with pytest.raises(SchemaError, match="only in case"):  # two new columns of one batch, too
        t.upsert(batch((2, "sf", 2, "b2")).append_column("Extra", pa.array([1])).append_column("extra", pa.array([2])))
    assert snapshot(t) == SEED_ROWS


# -- meta columns -----------------------------------------------------------------------------
def test_carried_over_records_keep_their_commit_time_and_seqno(tmp_path):
    t = make_table(tmp_path)
    first = t.upsert(batch((1, "sf", 1, "a"), (2, "sf", 1, "b"), (3, "sf", 1, "c")))
    before = {r["id"]: r for r in t.read().to_pylist()}
    second = t.upsert(batch((2, "sf", 2, "b2")))
    after = {r["id"]: r for r in t.read().to_pylist()}

    for key in (1, 3):
        assert after[key]["_hoodie_commit_time"] == first.instant_time
        assert after[key]["_hoodie_commit_seqno"] == before[key]["_hoodie_commit_seqno"]
        assert after[key]["_hoodie_commit_seqno"].startswith(first.instant_time + "_")
    assert after[2]["_hoodie_commit_time"] == second.instant_time
    assert after[2]["_hoodie_commit_seqno"].startswith(second.instant_time + "_")
    assert after[2]["v"] == "b2"
    # Every row now lives in the second commit's file and says so.
    (new_file,) = second.files_written
    assert {r["_hoodie_file_name"] for r in after.values()} == {os.path.basename(new_file)}


def test_commit_seqno_and_file_name_columns_of_every_base_file(tmp_path):
    t = make_table(tmp_path)
    t.upsert(batch((1, "sf", 1, "a"), (2, "sf", 1, "b"), (3, "ny", 1, "c"), (4, "la", 1, "d")))
    t.upsert(batch((2, "sf", 2, "b2"), (5, "ny", 2, "e")))
    files = [s.base_file.path for s in t.file_slices()]
    assert len(files) == 3
    seqnos = []
    for rel in files:
        name = os.path.basename(rel)
        file_id, token, instant = re.fullmatch(r"(.+)_(\d+-\d+-\d+)_(\d{17})\.parquet", name).groups()
        rows = pq.read_table(Path(t.path) / rel).to_pylist()
        partition = os.path.dirname(rel)
        for row in rows:
            assert row["_hoodie_file_name"] == name
            assert row["_hoodie_partition_path"] == partition == row["city"]
            assert row["_hoodie_record_key"] == str(row["id"])
            m = re.fullmatch(r"(\d{17})_(\d+)_(\d+)", row["_hoodie_commit_seqno"])
            assert m, row["_hoodie_commit_seqno"]
            assert m.group(1) == row["_hoodie_commit_time"]
            if row["_hoodie_commit_time"] == instant:  # written by this file's own task
                assert m.group(2) == token.split("-")[0]
            seqnos.append(row["_hoodie_commit_seqno"])
    assert len(seqnos) == 5
    assert len(set(seqnos)) == 5, "sequence numbers must be unique"
