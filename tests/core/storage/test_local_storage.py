"""Storage on a local disk: atomic create-if-absent, atomic replace, listings."""

from __future__ import annotations

import os
import threading

import pytest

from lakeward.core.exceptions import ConfigError, InstantExistsError
from lakeward.core.storage.storage import Storage

INSTANT = ".hoodie/20240418173551906.commit"


def _race_create(storage: Storage, rel: str, writers: int) -> tuple[list[int], list[BaseException]]:
    """`writers` threads call create_if_absent(rel) at once; returns winners and errors."""
    barrier = threading.Barrier(writers)
    winners: list[int] = []
    errors: list[BaseException] = []
    record = threading.Lock()

    def write(i: int) -> None:
        payload = f"writer-{i}:".encode() + bytes([i]) * 64 * 1024
        barrier.wait()
        try:
            storage.create_if_absent(rel, payload)
        except BaseException as exc:  # noqa: BLE001 - every outcome is recorded
            with record:
                errors.append(exc)
        else:
            with record:
                winners.append(i)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return winners, errors


def test_local_create_if_absent_race_has_exactly_one_winner(tmp_path):
    storage = Storage.for_uri(str(tmp_path / "table"))
    winners, errors = _race_create(storage, INSTANT, 16)

    assert len(winners) == 1, f"winners: {winners}"
    assert len(errors) == 15
    assert all(isinstance(e, InstantExistsError) for e in errors), errors
    (winner,) = winners
    assert storage.read_bytes(INSTANT) == f"writer-{winner}:".encode() + bytes([winner]) * 64 * 1024
    # No temporary files are left behind, by the winner or the losers.
    assert os.listdir(tmp_path / "table" / ".hoodie") == ["20240418173551906.commit"]


def test_local_create_if_absent_keeps_existing_content(tmp_path):
    storage = Storage.for_uri(f"file://{tmp_path}/table")
    storage.create_if_absent(INSTANT, b"first")
    with pytest.raises(InstantExistsError, match="already exists"):
        storage.create_if_absent(INSTANT, b"second")
    assert storage.read_bytes(INSTANT) == b"first"
    assert [e.name for e in storage.list_dir(".hoodie")] == ["20240418173551906.commit"]


def test_local_list_dir_of_missing_dir_is_empty(tmp_path):
    storage = Storage.for_uri(str(tmp_path / "table"))
    assert storage.list_dir("no/such/dir") == []
    assert storage.list_dir("no/such/dir", recursive=True) == []
    assert storage.list_dir() == []  # the base path itself does not exist yet


def test_local_list_dir_paths_are_relative_to_base(tmp_path):
    storage = Storage.for_uri(str(tmp_path / "table"))
    storage.write_bytes("p=1/a.parquet", b"aa")
    storage.write_bytes("p=1/sub/b.parquet", b"bbb")
    storage.write_bytes(".hoodie/hoodie.properties", b"x")

    top = {(e.path, e.is_dir) for e in storage.list_dir()}
    assert top == {("p=1", True), (".hoodie", True)}
    flat = {(e.path, e.size) for e in storage.list_dir("p=1", recursive=True) if not e.is_dir}
    assert flat == {("p=1/a.parquet", 2), ("p=1/sub/b.parquet", 3)}


def test_local_write_bytes_replaces_atomically(tmp_path):
    """A reader never sees a missing, partial or mixed file while it is replaced."""
    storage = Storage.for_uri(str(tmp_path / "table"))
    rel = ".hoodie/hoodie.properties"
    size = 4 * 1024 * 1024
    versions = [b"A" * size, b"B" * size]
    storage.write_bytes(rel, versions[0])
    stop = threading.Event()
    bad_reads: list[str] = []
    reads = 0

    def read() -> None:
        nonlocal reads
        while not stop.is_set():
            try:
                data = storage.read_bytes(rel)
            except FileNotFoundError:
                bad_reads.append("missing")
                continue
            reads += 1
            if data not in versions:
                bad_reads.append(f"{len(data)} bytes, starting {data[:1]!r}, ending {data[-1:]!r}")

    readers = [threading.Thread(target=read) for _ in range(2)]
    for reader in readers:
        reader.start()
    try:
        for i in range(40):
            storage.write_bytes(rel, versions[i % 2])
    finally:
        stop.set()
        for reader in readers:
            reader.join(30)

    assert reads > 0
    assert bad_reads == []
    assert storage.read_bytes(rel) == versions[1]
    assert os.listdir(tmp_path / "table" / ".hoodie") == ["hoodie.properties"]


def test_local_delete_and_missing_files(tmp_path):
    storage = Storage.for_uri(str(tmp_path / "table"))
    storage.write_bytes("a.txt", b"x")
    assert storage.exists("a.txt") and storage.size("a.txt") == 1
    storage.delete_file("a.txt")
    assert not storage.exists("a.txt")
    storage.delete_file("a.txt")  # missing_ok by default
    with pytest.raises(FileNotFoundError):
        storage.delete_file("a.txt", missing_ok=False)
    with pytest.raises(FileNotFoundError):
        storage.read_bytes("a.txt")
    with pytest.raises(FileNotFoundError):
        storage.size("a.txt")


@pytest.mark.parametrize("uri", ["s3://bucket/tables/t#1", "s3a://bucket/tables/t?x=1", "file:///tmp/tables/t#2"])
def test_a_uri_whose_path_a_hash_or_question_mark_would_cut_is_refused(uri: str) -> None:
    """Before the fix `s3://bucket/tables/t#1` opened the table at `s3://bucket/tables/t`: two
    names, one table, and writes landed in the other one."""
    with pytest.raises(ConfigError, match=r"'\?' or '#'"):
        Storage.for_uri(uri)


def test_a_local_path_with_a_hash_is_its_own_table(tmp_path) -> None:
    first, second = Storage.for_uri(str(tmp_path / "t#1")), Storage.for_uri(str(tmp_path / "t#2"))
    assert first.root != second.root and first.root.endswith("t#1")


def test_a_table_whose_properties_are_not_text_is_reported_corrupt(tmp_path) -> None:
    """A `hoodie.properties` of bytes that are not UTF-8 gave a raw UnicodeDecodeError (a 500 from the
    daemon's API, a traceback from the CLI); it is a CorruptTableError naming the file."""
    from lakeward.core.exceptions import CorruptTableError
    from lakeward.core.table import Table

    Table.create(str(tmp_path / "t"), record_key="id")
    (tmp_path / "t" / ".hoodie" / "hoodie.properties").write_bytes(b"hoodie.table.name=\xff\xfe\n")
    with pytest.raises(CorruptTableError, match="hoodie.properties"):
        Table.open(str(tmp_path / "t"))
