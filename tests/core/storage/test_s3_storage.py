"""Storage on S3, against a real SeaweedFS server (fixture `s3_server`)."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakeward.core.exceptions import ConfigError, InstantExistsError, StorageError
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


def test_s3_create_if_absent_after_empty_files_does_not_stall(storage):
    """Hudi's `.requested` files are empty; the PUT after an empty one must not hang."""
    for i, data in enumerate([b"", b"x", b"", b"", b"{}", b"y" * 100_000, b""]):
        began = time.monotonic()
        storage.create_if_absent(f".hoodie/2024010100000000{i}.commit", data)
        assert time.monotonic() - began < 5, f"create_if_absent #{i} took {time.monotonic() - began:.1f}s"
        assert storage.read_bytes(f".hoodie/2024010100000000{i}.commit") == data


class DropPutAnswers:
    """A TCP proxy to the S3 server that swallows the answers to the next `drops` PUTs.

    The server does write the object, but the client sees its connection closed instead
    of the answer: the ambiguous failure a network blip causes.
    """

    def __init__(self, upstream: tuple[str, int], drops: int):
        self.upstream = upstream
        self.drops = drops
        self.dropped = 0
        self._guard = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._server.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.create_connection(self.upstream)
        drop_answer = threading.Event()

        def requests() -> None:
            try:
                while chunk := client.recv(65536):
                    if chunk.startswith(b"PUT "):
                        with self._guard:
                            if self.dropped < self.drops:
                                self.dropped += 1
                                drop_answer.set()
                    upstream.sendall(chunk)
            except OSError:
                pass

        threading.Thread(target=requests, daemon=True).start()
        try:
            while chunk := upstream.recv(65536):
                # Pass an interim `100 Continue` through: the body must reach the server.
                if drop_answer.is_set() and not chunk.startswith(b"HTTP/1.1 100 "):
                    break
                client.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (client, upstream):
                try:
                    sock.shutdown(socket.SHUT_RDWR)  # wakes the other pump's recv
                except OSError:
                    pass
                sock.close()


@pytest.fixture
def drop_put_answers(s3_server) -> Iterator[DropPutAnswers]:
    endpoint = urlparse(s3_server.endpoint_url)
    proxy = DropPutAnswers((endpoint.hostname, endpoint.port), drops=1)
    yield proxy
    proxy.close()


def test_s3_create_if_absent_whose_answer_was_lost_still_wins(s3_server, s3_table_uri, drop_put_answers):
    options = {**s3_server.options, "aws_endpoint_url": f"http://127.0.0.1:{drop_put_answers.port}"}
    storage = Storage.for_uri(s3_table_uri, options)
    storage.create_if_absent(INSTANT, b"ours")  # must not report the race as lost
    assert drop_put_answers.dropped == 1
    assert storage.read_bytes(INSTANT) == b"ours"


def test_s3_create_if_absent_whose_answer_was_lost_still_loses(s3_server, s3_table_uri, drop_put_answers):
    Storage.for_uri(s3_table_uri, s3_server.options).create_if_absent(INSTANT, b"theirs")
    options = {**s3_server.options, "aws_endpoint_url": f"http://127.0.0.1:{drop_put_answers.port}"}
    storage = Storage.for_uri(s3_table_uri, options)
    with pytest.raises(InstantExistsError):
        storage.create_if_absent(INSTANT, b"ours")
    assert drop_put_answers.dropped == 1
    assert storage.read_bytes(INSTANT) == b"theirs"


def test_s3_create_if_absent_that_never_got_an_answer_says_its_outcome_is_unknown(s3_server, s3_table_uri):
    """Every attempt's answer lost (a stalled server): the error said nothing of the PUT that may have
    landed, and a writer told its commit failed retried it (its rows twice once the PUT landed)."""
    endpoint = urlparse(s3_server.endpoint_url)
    proxy = DropPutAnswers((endpoint.hostname, endpoint.port), drops=100)
    try:
        options = {**s3_server.options, "aws_endpoint_url": f"http://127.0.0.1:{proxy.port}"}
        with pytest.raises(StorageError, match="the outcome is unknown"):
            Storage.for_uri(s3_table_uri, options).create_if_absent(INSTANT, b"ours")
    finally:
        proxy.close()
    assert Storage.for_uri(s3_table_uri, s3_server.options).read_bytes(INSTANT) == b"ours"  # it had landed


def test_s3_unreachable_storage_is_a_storage_error_naming_the_file(s3_server):
    """Completing an instant against an S3 endpoint nothing answers raised botocore's own errors (no
    LakewardError, no file named); listings and reads raised pyarrow's raw OSError."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = probe.getsockname()[1]  # closed again: nothing listens there
    down = Storage.for_uri(s3_server.uri("down"), {**s3_server.options, "aws_endpoint_url": f"http://127.0.0.1:{dead}"})
    for call, needle in (
        (lambda: down.create_if_absent(INSTANT, b"x"), "cannot create"),
        (lambda: down.list_dir(".hoodie"), "cannot list"),
        (lambda: down.read_bytes(INSTANT), "cannot read"),
        (lambda: down.open_input_file(INSTANT), "cannot open"),
        # the file's information (an upsert died with the raw OSError of `exists` during an outage)
        (lambda: down.exists(INSTANT), "cannot read information of"),
        (lambda: down.size(INSTANT), "cannot read information of"),
        (lambda: down.modified_time(INSTANT), "cannot read information of"),
        # writes and deletes too (an upsert died with pyarrow's raw OSError on a failed upload)
        (lambda: down.write_bytes(INSTANT, b"x"), "cannot write"),
        (lambda: down.delete_file(INSTANT), "cannot delete"),
        (lambda: _write_stream(down, INSTANT), "cannot write"),
    ):
        with pytest.raises(StorageError, match=needle) as raised:
            call()
        assert "down/.hoodie" in str(raised.value)


def _write_stream(storage: Storage, rel: str) -> None:
    with storage.open_output_stream(rel) as stream:
        stream.write(b"x" * 1024)


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


@pytest.mark.parametrize(
    "options, needle",
    [
        ({"aws_endpoint_url": "127.0.0.1:8333"}, "aws_endpoint_url must be an http:// or https:// URL"),
        ({"aws_endpoint_url": "localhost:8333"}, "aws_endpoint_url must be an http:// or https:// URL"),
        ({"aws_endpoint_url": "http://127.0.0.1:8333", "aws_allow_http": "false"}, "aws_allow_http is false"),
        ({"aws_allow_http": "yes"}, "aws_allow_http must be true or false"),
    ],
)
def test_s3_endpoint_options_that_cannot_work_are_config_errors(options, needle):
    """Before the fix an endpoint without a scheme became https (a TLS error on the first request) or
    an Arrow 'connection scheme' error, and aws_allow_http=false was ignored."""
    with pytest.raises(ConfigError, match=needle):
        Storage.for_uri("s3://bucket/t", options)


def test_s3_table_configured_by_the_environment_alone(s3_server, s3_table_uri, monkeypatch):
    """The AWS_* variables hudi-rs reads configure lakeward too (before: requests went to AWS's endpoint)."""
    for key, value in s3_server.options.items():
        monkeypatch.setenv(key.upper(), value)
    from lakeward import Table

    Table.create(s3_table_uri, record_key="id").upsert(pa.table({"id": [1, 2]}))
    assert sorted(Table.open(s3_table_uri).read().column("id").to_pylist()) == [1, 2]
    import hudi

    batches = hudi.HudiTableBuilder.from_base_uri(s3_table_uri).build().read()
    assert sorted(pa.Table.from_batches(batches).column("id").to_pylist()) == [1, 2]
