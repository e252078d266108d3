"""Storage on S3, against a real SeaweedFS server (fixture `s3_server`)."""

from __future__ import annotations

import os
import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakeward.core.exceptions import ConfigError, InstantExistsError
from lakeward.core.storage.storage import Storage

pytestmark = pytest.mark.s3

INSTANT = ".hoodie/20240418173551906.commit"


@pytest.fixture
def storage(s3_server, s3_table_uri) -> Storage:
    return Storage.for_uri(s3_table_uri, s3_server.options)


def test_s3_write_read_list_delete(storage, s3_table_uri):
    assert storage.uri == s3_table_uri
    assert storage.list_dir() == []
    assert storage.list_dir("no/such/dir", recursive=True) == []

    storage.write_bytes(".hoodie/hoodie.properties", b"hoodie.table.name=trips\n")
    storage.write_bytes("city=sf/a.parquet", b"a" * 10)
    storage.write_bytes("city=sf/b.parquet", b"b" * 20)

    assert storage.exists("city=sf/a.parquet")
    assert not storage.exists("city=sf/c.parquet")
    assert storage.read_bytes(".hoodie/hoodie.properties") == b"hoodie.table.name=trips\n"
    assert storage.size("city=sf/b.parquet") == 20
    files = {(e.path, e.size) for e in storage.list_dir("city=sf")}
    assert files == {("city=sf/a.parquet", 10), ("city=sf/b.parquet", 20)}
    everything = {e.path for e in storage.list_dir(recursive=True) if not e.is_dir}
    assert everything == {".hoodie/hoodie.properties", "city=sf/a.parquet", "city=sf/b.parquet"}

    storage.write_bytes("city=sf/a.parquet", b"replaced")
    assert storage.read_bytes("city=sf/a.parquet") == b"replaced"

    storage.delete_file("city=sf/a.parquet")
    assert not storage.exists("city=sf/a.parquet")
    assert [e.path for e in storage.list_dir("city=sf")] == ["city=sf/b.parquet"]
    storage.delete_file("city=sf/a.parquet")  # missing_ok by default
    with pytest.raises(FileNotFoundError):
        storage.delete_file("city=sf/a.parquet", missing_ok=False)
    with pytest.raises(FileNotFoundError):
        storage.read_bytes("city=sf/a.parquet")


def test_s3_streams_round_trip_parquet(storage):
    table = pa.table({"id": list(range(1000)), "city": ["sf", "nyc"] * 500})
    with storage.open_output_stream("city=all/part-0.parquet") as out:
        pq.write_table(table, out)
    with storage.open_input_file("city=all/part-0.parquet") as source:
        assert pq.read_table(source).equals(table)


def test_s3_create_if_absent_race_has_exactly_one_winner(storage):
    writers = 16
    barrier = threading.Barrier(writers)
    winners: list[int] = []
    errors: list[BaseException] = []
    record = threading.Lock()

    def write(i: int) -> None:
        payload = f"writer-{i}:".encode() + bytes([i]) * 32 * 1024
        barrier.wait()
        try:
            storage.create_if_absent(INSTANT, payload)
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
        thread.join(120)

    assert len(winners) == 1, f"winners: {winners}, errors: {errors}"
    assert len(errors) == writers - 1
    assert all(isinstance(e, InstantExistsError) for e in errors), errors
    (winner,) = winners
    assert storage.read_bytes(INSTANT) == f"writer-{winner}:".encode() + bytes([winner]) * 32 * 1024
    assert [e.path for e in storage.list_dir(".hoodie")] == [INSTANT]


def test_s3_create_if_absent_keeps_existing_content(storage):
    storage.create_if_absent(INSTANT, b"first")
    with pytest.raises(InstantExistsError, match="already exists"):
        storage.create_if_absent(INSTANT, b"second")
    assert storage.read_bytes(INSTANT) == b"first"


def test_s3_unknown_aws_option_is_a_config_error(s3_server, s3_table_uri):
    with pytest.raises(ConfigError, match="aws_endpoint_uri"):
        Storage.for_uri(s3_table_uri, {**s3_server.options, "aws_endpoint_uri": "http://x"})


def test_s3_options_serve_hudi_rs(storage, s3_server, s3_table_uri, fixture_table):
    """The fixture's options open the same table in hudi-rs as lakeward's Storage writes."""
    hudi = pytest.importorskip("hudi")
    local = fixture_table("cow", "v6_nonpartitioned")
    for folder, _, names in os.walk(local):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                storage.write_bytes(os.path.relpath(path, local).replace(os.sep, "/"), f.read())

    def snapshot(uri: str, options: dict[str, str]) -> pa.Table:
        table = hudi.HudiTableBuilder.from_base_uri(uri).with_storage_options(options).build()
        return pa.Table.from_batches(list(table.read(hudi.HudiReadOptions())))

    from_s3 = snapshot(s3_table_uri, s3_server.options)
    from_disk = snapshot(local, {})
    assert from_s3.num_rows == from_disk.num_rows > 0
    assert from_s3.sort_by("_hoodie_record_key").equals(from_disk.sort_by("_hoodie_record_key"))
