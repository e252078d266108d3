"""Reads of v9 tables with a metadata table list files from its `files` partition.

- the read makes O(1) storage list calls with the metadata table, O(partitions) without;
- a metadata table made stale (the last data commit's entry removed) is followed by both
  lakeward and hudi-rs: they agree, and the rows show it is the metadata table that listed;
- a damaged metadata table is logged and the read falls back to listing storage, with the
  right rows.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from lakeward import Table
from lakeward.core.file_group.metadata_listing import MetadataFileListing
from lakeward.core.file_group.view import FileSystemView
from lakeward.core.storage import FileEntry, Storage
from tests.interop.compare import both_readers, comparable_rows, fail_on, snapshot_mismatches, write_instants


class CountingStorage(Storage):
    """A real local Storage that records its list calls (folder, recursive)."""

    list_calls: list[tuple[str, bool]] = []

    def list_dir(self, rel: str = "", recursive: bool = False) -> list[FileEntry]:
        type(self).list_calls.append((rel, recursive))
        return super().list_dir(rel, recursive)


def _counting_table(path: str) -> Table:
    plain = Storage.for_uri(path)
    storage = CountingStorage(plain.fs, plain.root, plain.uri, {})
    table = Table.open(path)
    table.storage = storage
    return table


@pytest.mark.parametrize("name", ["v9_txns_simple_meta", "v9_txns_complex_meta"])
def test_reads_list_through_the_metadata_table(fixture_table: Callable[[str, str], str], name: str):
    path = fixture_table("mor/avro", name)
    table = _counting_table(path)
    CountingStorage.list_calls = []
    with_mdt = table.read()
    # the timeline folder, its LSM history (no `_version_` file in a table that never
    # archived: the manifests are listed, as Java does), the MDT's timeline and its `files`
    # folder (paths relative to the MDT's base); never the table's files
    assert CountingStorage.list_calls == [
        (".hoodie/timeline", False),
        (".hoodie/timeline/history", False),
        (".hoodie/timeline", False),
        ("files", False),
    ], CountingStorage.list_calls
    assert comparable_rows(with_mdt) == both_readers(path)[1]

    # without the metadata table, the view lists the whole table (every partition)
    storage = table.storage
    CountingStorage.list_calls = []
    listed = FileSystemView.from_storage_listing(storage, table.timeline())
    assert ("", True) in CountingStorage.list_calls
    assert sorted(listed.partitions()) == sorted(MetadataFileListing(storage).partitions())


def _drop_last_mdt_deltacommit(path: str) -> str:
    """Remove the metadata table's record of the last data write (its MDT log files and
    timeline files): a writer that committed without updating the metadata table."""
    table = Table.open(path)
    last = table.completed_instants()
    last_write = [i for i in last if i.action.value in ("deltacommit", "commit")][-1].time
    mdt = Path(path) / ".hoodie" / "metadata"
    removed = [p for p in mdt.rglob(f"*{last_write}*") if p.is_file()]
    assert any(".log." in p.name for p in removed), removed
    for p in removed:
        p.unlink()
    return last_write


def test_a_stale_metadata_table_is_followed_by_both_readers(fixture_table: Callable[[str, str], str]):
    path = fixture_table("cow", "v9_txns_simple_meta")
    before = Table.open(path).read().num_rows
    last_write = _drop_last_mdt_deltacommit(path)
    ours, theirs = both_readers(path)
    assert ours == theirs
    # the stale metadata table lists neither the last write's files nor, hence, its rows
    assert all(r["_hoodie_commit_time"] != last_write for r in ours)
    assert len(ours) < before
    fail_on(snapshot_mismatches(path, [None, *write_instants(Table.open(path))]))


def test_a_damaged_metadata_table_falls_back_to_listing(
    fixture_table: Callable[[str, str], str], caplog: pytest.LogCaptureFixture
):
    path = fixture_table("mor/avro", "v9_txns_simple_meta")
    expected = comparable_rows(Table.open(path).read())
    files = Path(path) / ".hoodie" / "metadata" / "files"
    for hfile in files.glob("*.hfile"):
        hfile.write_bytes(hfile.read_bytes()[:200])  # truncated
    with caplog.at_level(logging.WARNING):
        got = comparable_rows(Table.open(path).read())
    assert got == expected
    assert any("listing" in r.getMessage() and "metadata" in r.getMessage() for r in caplog.records), caplog.text
