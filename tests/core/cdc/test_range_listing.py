"""CDC and incremental queries list only the partitions their commits wrote.

A stream consumer polls a range of a few commits; listing the whole table at every poll makes
each poll cost grow with the table, not with the change. The plan of a range lists the
partitions the range's commits touched (a storage listing of each; the metadata table's
`files` partition on versions 8+, filtered), and its results are those of the whole listing.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.core.storage import Storage

SCHEMA = pa.schema([("id", pa.string()), ("part", pa.string()), ("v", pa.int64()), ("ts", pa.int64())])
PARTS = [f"p{i}" for i in range(6)]


def _rows(keys: list[str], part: str, v: int) -> pa.Table:
    return pa.Table.from_pylist([{"id": k, "part": part, "v": v, "ts": v} for k in keys], schema=SCHEMA)


@pytest.fixture(params=[("6", "COPY_ON_WRITE"), ("8", "MERGE_ON_READ"), ("9", "COPY_ON_WRITE")])
def table(request, tmp_path) -> Table:
    version, table_type = request.param
    t = Table.create(
        str(tmp_path / "t"), record_key="id", partition_by="part", ordering_field="ts", table_type=table_type,
        options={"hoodie.table.cdc.enabled": "true", "hoodie.write.table.version": version},
    )  # fmt: skip
    for i, part in enumerate(PARTS):
        t.upsert(_rows([f"{part}-{k}" for k in range(20)], part, 1 + i))
    return t


def _listed(monkeypatch, table: Table) -> list[tuple[str, bool]]:
    """The listings of the table's own folders from now on (not its metadata table's)."""
    calls: list[tuple[str, bool]] = []
    original = Storage.list_dir

    def spy(self: Storage, rel: str = "", recursive: bool = False):
        if self.root == table.storage.root:
            calls.append((rel, recursive))
        return original(self, rel, recursive)

    monkeypatch.setattr(Storage, "list_dir", spy)
    return calls


def _data_listings(calls: list[tuple[str, bool]]) -> set[str]:
    """The data-table folders listed (recursive listings of the root as "*")."""
    return {"*" if recursive and rel == "" else rel for rel, recursive in calls if not rel.startswith(".hoodie")}


def _last_completed(table: Table) -> str:
    """Where the next poll begins: the last write's completion time (8+) or instant time (6)."""
    return table.timeline().completed_writes()[-1].ordering_time


def test_a_poll_lists_only_the_partitions_its_commits_wrote(table, monkeypatch):
    begin = _last_completed(table)
    table.upsert(_rows(["p2-1", "p2-2", "p2-new"], "p2", 50))
    table.delete(keys=["p4-3"])
    calls = _listed(monkeypatch, table)
    changes = Table.open(table.path).read_changes(begin, images="struct")
    assert _data_listings(calls) <= {"p2", "p4"}
    got = sorted((r["op"], (r["after"] or r["before"])["id"]) for r in changes.to_pylist())
    assert got == [("d", "p4-3"), ("i", "p2-new"), ("u", "p2-1"), ("u", "p2-2")]
    before = {r["after"]["id"]: r["before"]["v"] for r in changes.to_pylist() if r["op"] == "u"}
    assert before == {"p2-1": 3, "p2-2": 3}

    calls.clear()
    rows = Table.open(table.path).read_incremental(begin)
    assert _data_listings(calls) <= {"p2", "p4"}
    assert sorted(rows.column("id").to_pylist()) == ["p2-1", "p2-2", "p2-new"]


def test_a_range_over_a_deleted_partition_still_reads_its_changes(table, monkeypatch):
    begin = _last_completed(table)
    table.delete_partition(["p1"])
    table.upsert(_rows(["p3-0"], "p3", 60))
    calls = _listed(monkeypatch, table)
    changes = Table.open(table.path).read_changes(begin, images="struct")
    assert _data_listings(calls) <= {"p1", "p3"}
    ops = sorted((r["op"], (r["after"] or r["before"])["id"]) for r in changes.to_pylist())
    assert ops == sorted([("d", f"p1-{k}") for k in range(20)] + [("u", "p3-0")])


@pytest.mark.parametrize("version", ["6", "8"])
def test_a_poll_on_a_cleaned_table_tries_no_file_that_is_not_there(tmp_path, monkeypatch, version):
    """Each failed read is a storage round trip (an S3 404); a poll must not pay one per cleaned write."""
    t = Table.create(
        str(tmp_path / "t"), record_key="id", partition_by="part", ordering_field="ts",
        options={"hoodie.table.cdc.enabled": "true", "hoodie.write.table.version": version,
                 "hoodie.cleaner.commits.retained": "3"},
    )  # fmt: skip
    for i in range(12):
        t.upsert(_rows(["a", "b"], "p0", i))
    assert t.clean() is not None
    begin = t.timeline().completed_writes()[-2].ordering_time
    missing: list[str] = []
    original = Storage._read

    def spy(self: Storage, rel: str) -> bytes:
        try:
            return original(self, rel)
        except FileNotFoundError:
            missing.append(rel)
            raise

    monkeypatch.setattr(Storage, "_read", spy)
    changes = Table.open(t.path).read_changes(begin, images="struct")
    # the LSM history's `_version_` is looked for once per timeline load (not there until the first archival)
    assert [rel for rel in missing if not rel.startswith(".hoodie/timeline/history/")] == []
    assert sorted((r["op"], r["after"]["v"]) for r in changes.to_pylist()) == [("u", 11), ("u", 11)]


@pytest.mark.parametrize("version", ["6", "8"])
def test_change_tracking_lists_only_the_partitions_of_untracked_delta_commits(tmp_path, monkeypatch, version):
    """The daemon plans change tracking on every table each cycle: its cost follows the new delta commits."""
    t = Table.create(
        str(tmp_path / "t"), record_key="id", partition_by="part", ordering_field="ts", table_type="MERGE_ON_READ",
        options={"hoodie.table.cdc.enabled": "true", "hoodie.write.table.version": version},
    )  # fmt: skip
    for i, part in enumerate(PARTS):
        t.upsert(_rows([f"{part}-{k}" for k in range(20)], part, 1 + i))  # base files: nothing to track
    begin = _last_completed(t)
    t.upsert(_rows(["p3-1", "p3-2"], "p3", 50))
    t.upsert(_rows(["p5-0"], "p5", 51))
    calls = _listed(monkeypatch, t)
    tracked = Table.open(t.path)
    instant = tracked.schedule_change_tracking()
    assert instant is not None
    assert _data_listings(calls) <= {"p3", "p5"}
    calls.clear()
    tracked.run_change_tracking(instant)
    assert _data_listings(calls) <= {"p3", "p5"}
    changes = Table.open(t.path).read_changes(begin, images="struct").to_pylist()
    assert sorted((r["op"], r["after"]["id"], r["before"]["v"], r["after"]["v"]) for r in changes) == [
        ("u", "p3-1", 4, 50), ("u", "p3-2", 4, 50), ("u", "p5-0", 6, 51)
    ]  # fmt: skip
