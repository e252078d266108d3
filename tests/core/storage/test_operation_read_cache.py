"""One write reads `hoodie.properties` and lists the timelines once per locked step (`storage.read_cache`)."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.core.locks import InProcessLockProvider
from lakeward.core.storage import Storage, read_cache


@pytest.fixture
def storage_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[tuple[str, str, str]]]:
    """Every read and listing that reaches the filesystem: (kind, table root, path) -> count."""
    counts: Counter[tuple[str, str, str]] = Counter()
    read, list_ = Storage._read, Storage._list

    def counted_read(self: Storage, rel: str) -> bytes:
        counts[("read", self.root, rel)] += 1
        return read(self, rel)

    def counted_list(self: Storage, rel: str, recursive: bool) -> list:  # type: ignore[type-arg]
        counts[("list", self.root, rel)] += 1
        return list_(self, rel, recursive)

    monkeypatch.setattr(Storage, "_read", counted_read)
    monkeypatch.setattr(Storage, "_list", counted_list)
    yield counts


def _rows(ids: range, ts: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(list(ids), pa.int64()),
            "part": pa.array([f"p{i % 2}" for i in ids]),
            "ts": pa.array([ts] * len(ids), pa.int64()),
        }
    )


def test_an_upsert_reads_properties_and_timelines_once_per_locked_step(
    tmp_path: Path, storage_reads: Counter[tuple[str, str, str]]
) -> None:
    path = str(tmp_path / "t")
    table = Table.create(
        path,
        table_name="t",
        record_key="id",
        partition_by="part",
        ordering_field="ts",
        options={"hoodie.metadata.enable": "true"},
    )
    table.bulk_insert(_rows(range(100), 1))
    table = Table.open(path, options={"hoodie.metadata.enable": "true"})
    storage_reads.clear()

    table.upsert(_rows(range(50, 150), 2))

    root, mdt = os.path.abspath(path), os.path.join(os.path.abspath(path), ".hoodie", "metadata")
    # was 12; 5 inside the write, 2 more in the metadata-table gate before it (its version check)
    assert storage_reads[("read", root, ".hoodie/hoodie.properties")] <= 7
    assert storage_reads[("read", mdt, ".hoodie/hoodie.properties")] <= 4  # was 10 (2 in the gate, as above)
    assert storage_reads[("list", root, ".hoodie")] <= 5  # was 7
    assert storage_reads[("list", mdt, ".hoodie")] <= 3  # was 9
    instant_reads = {k: n for k, n in storage_reads.items() if k[0] == "read" and k[2].endswith(".commit")}
    assert instant_reads and max(instant_reads.values()) <= 2  # was 3
    assert Table.open(path).read().num_rows == 150


def test_cached_reads_see_the_operations_own_changes(tmp_path: Path) -> None:
    storage = Storage.for_uri(str(tmp_path))
    storage.write_bytes(".hoodie/hoodie.properties", b"a=1\n")
    with read_cache.cached_reads():
        assert storage.read_bytes(".hoodie/hoodie.properties") == b"a=1\n"
        assert [e.name for e in storage.list_dir(".hoodie")] == ["hoodie.properties"]
        # another Storage of the same files (the metadata table's is one) changes them
        Storage.for_uri(str(tmp_path)).write_bytes(".hoodie/hoodie.properties", b"a=2\n")
        storage.create_if_absent(".hoodie/001.commit", b"{}")
        assert storage.read_bytes(".hoodie/hoodie.properties") == b"a=2\n"
        assert sorted(e.name for e in storage.list_dir(".hoodie")) == ["001.commit", "hoodie.properties"]
        storage.delete_file(".hoodie/001.commit")
        assert not storage.exists(".hoodie/001.commit")
        assert [e.name for e in storage.list_dir(".hoodie")] == ["hoodie.properties"]


def test_taking_the_table_lock_reads_other_writers_changes(tmp_path: Path) -> None:
    storage = Storage.for_uri(str(tmp_path))
    storage.write_bytes(".hoodie/hoodie.properties", b"a=1\n")
    lock = InProcessLockProvider(str(tmp_path))
    with read_cache.cached_reads():
        assert [e.name for e in storage.list_dir(".hoodie")] == ["hoodie.properties"]
        assert storage.read_bytes(".hoodie/hoodie.properties") == b"a=1\n"
        (tmp_path / ".hoodie" / "002.commit").write_bytes(b"{}")  # another process's commit
        with open(tmp_path / ".hoodie" / "hoodie.properties", "wb") as f:
            f.write(b"a=3\n")
        assert [e.name for e in storage.list_dir(".hoodie")] == ["hoodie.properties"]  # as of the last read
        assert storage.read_bytes(".hoodie/hoodie.properties") == b"a=1\n"
        with lock:
            assert sorted(e.name for e in storage.list_dir(".hoodie")) == ["002.commit", "hoodie.properties"]
            assert storage.read_bytes(".hoodie/hoodie.properties") == b"a=3\n"
    # outside an operation every read goes to storage
    (tmp_path / ".hoodie" / "003.commit").write_bytes(b"{}")
    assert len(storage.list_dir(".hoodie")) == 3
