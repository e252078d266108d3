"""A COW table on a real S3 server (SeaweedFS): hudi-rs and lakeward read the same rows, and
racing committers cannot both complete one instant."""

from __future__ import annotations

import threading

import hudi
import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.core.exceptions import ConfigError, InstantExistsError, StorageError, TableNotFoundError
from lakeward.core.storage import Storage
from lakeward.core.timeline import Action, Timeline
from lakeward.core.timeline.transitions import complete, create_requested, read_instant, transition_to_inflight

pytestmark = pytest.mark.s3

DATA = ["id", "city", "fare", "ts"]


def _hudi_rows(uri: str, options: dict[str, str], as_of: str | None = None) -> list[dict]:
    builder = hudi.HudiTableBuilder.from_base_uri(uri).with_storage_options(options)
    batches = (
        builder.build().read(hudi.HudiReadOptions().with_as_of_timestamp(as_of) if as_of else None)
        if as_of
        else builder.build().read()
    )
    table = pa.Table.from_batches(batches)
    return sorted(table.select(DATA).to_pylist(), key=lambda r: r["id"])


def _rows(table: pa.Table) -> list[dict]:
    return sorted(table.select(DATA).to_pylist(), key=lambda r: r["id"])


def test_s3_cow_table_reads_the_same_with_hudi_rs_and_lakeward(s3_server, s3_table_uri):
    table = Table.create(
        s3_table_uri,
        record_key="id",
        partition_by="city",
        ordering_field="ts",
        hive_style_partitioning=True,
        storage_options=s3_server.options,
    )
    first = table.upsert(
        pa.table({"id": [1, 2, 3], "city": ["sf", "sf", "nyc"], "fare": [10.0, 20.0, 30.0], "ts": [1, 1, 1]})
    )
    table.upsert(pa.table({"id": [2, 4], "city": ["sf", "nyc"], "fare": [25.0, 40.0], "ts": [2, 2]}))
    table.delete(pa.table({"id": [3], "city": ["nyc"]}))

    expected = [
        {"id": 1, "city": "sf", "fare": 10.0, "ts": 1},
        {"id": 2, "city": "sf", "fare": 25.0, "ts": 2},
        {"id": 4, "city": "nyc", "fare": 40.0, "ts": 2},
    ]
    reopened = Table.open(s3_table_uri, storage_options=s3_server.options)
    assert _rows(reopened.read()) == expected
    assert _hudi_rows(s3_table_uri, s3_server.options) == expected
    assert _rows(reopened.read(as_of=first.instant_time)) == [
        {"id": 1, "city": "sf", "fare": 10.0, "ts": 1},
        {"id": 2, "city": "sf", "fare": 20.0, "ts": 1},
        {"id": 3, "city": "nyc", "fare": 30.0, "ts": 1},
    ]
    storage = Storage.for_uri(s3_table_uri, s3_server.options)
    assert storage.exists("city=sf/.hoodie_partition_metadata")
    assert [e for e in storage.list_dir(".hoodie/.temp", recursive=True) if not e.is_dir] == []


def test_s3_racing_committers_cannot_both_complete_an_instant(s3_server, s3_table_uri):
    Table.create(s3_table_uri, record_key="id", storage_options=s3_server.options)
    storage = Storage.for_uri(s3_table_uri, s3_server.options)
    requested = create_requested(storage, "20260101000000000", Action.COMMIT)
    inflight = transition_to_inflight(storage, requested)

    outcomes: list[str] = []
    barrier = threading.Barrier(8)

    def committer(n: int) -> None:
        barrier.wait()
        try:
            complete(storage, inflight, f'{{"committer": {n}}}'.encode())
            outcomes.append(f"won:{n}")
        except InstantExistsError:
            outcomes.append("lost")

    threads = [threading.Thread(target=committer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    winners = [o for o in outcomes if o.startswith("won")]
    assert len(winners) == 1 and outcomes.count("lost") == 7
    completed = Timeline.load(storage).completed()
    assert [i.time for i in completed] == ["20260101000000000"]
    assert read_instant(storage, completed[0]) == f'{{"committer": {winners[0].split(":")[1]}}}'.encode()


def test_open_with_denied_credentials_says_so_and_not_that_the_table_is_missing(s3_server, s3_table_uri):
    """Before the fix a 403 (or an unreachable endpoint) read as "is not a Hudi table"."""
    Table.create(s3_table_uri, record_key="id", storage_options=s3_server.options).upsert(pa.table({"id": [1]}))
    denied = {**s3_server.options, "aws_secret_access_key": "not-the-secret"}
    with pytest.raises(StorageError, match="cannot read .*hoodie.properties") as raised:
        Table.open(s3_table_uri, storage_options=denied)
    assert not isinstance(raised.value, TableNotFoundError)
    assert Table.open(s3_table_uri, storage_options=s3_server.options).read().num_rows == 1


def test_storage_going_down_mid_check_is_a_storage_error_not_damage(tmp_path, monkeypatch):
    """S3 went down after `check()` had listed the files: every base file was reported damaged
    ("is unreadable", a CorruptFileError), which would send on-call to restore files that are fine.
    The outage is real: a SeaweedFS of this test's own, killed at the first base-file read."""
    import lakeward.core.file_group.integrity as integrity
    from tests.support.seaweedfs import _kill, start_seaweedfs

    server = start_seaweedfs(tmp_path / "weed")
    try:
        uri = server.uri("down")
        table = Table.create(uri, record_key="id", partition_by="city", storage_options=server.options)
        table.upsert(pa.table({"id": [1, 2], "city": ["sf", "nyc"], "fare": [1.0, 2.0], "ts": [1, 1]}))
        assert Table.open(uri, storage_options=server.options).check().ok
        real = integrity.check_base_file

        def outage_then_check(storage: Storage, path: str) -> None:
            _kill(server.process)
            real(storage, path)

        monkeypatch.setattr(integrity, "check_base_file", outage_then_check)
        with pytest.raises(StorageError, match="storage"):
            Table.open(uri, storage_options=server.options).check()
    finally:
        _kill(server.process)


def test_a_table_in_a_bucket_that_does_not_exist_says_so(s3_server):
    """`s3://nosuchbucket/t` read as a table not created yet; a typo in the bucket name looked the same."""
    with pytest.raises(TableNotFoundError, match="bucket 'no-such-bucket-x' does not exist"):
        Table.open("s3://no-such-bucket-x/t", storage_options=s3_server.options)
    with pytest.raises(TableNotFoundError, match="hoodie.properties does not exist") as raised:
        Table.open(s3_server.uri("not-created-yet"), storage_options=s3_server.options)
    assert "bucket" not in str(raised.value)


def test_the_daemon_reports_a_table_in_a_bucket_that_does_not_exist_as_such(s3_server, monkeypatch):
    from lakeward.services.discovery import DiscoveryCache, discover
    from lakeward.services.model import TableRef

    for key, value in s3_server.options.items():  # the daemon's tables take S3 settings from the environment
        monkeypatch.setenv(key.upper(), value)
    refs = [TableRef("typo", "s3://no-such-bucket-x/t"), TableRef("later", s3_server.uri("not-created-yet"))]
    problems = {p.table.name: p.error for p in discover(refs, [], DiscoveryCache()).problems}
    assert "bucket 'no-such-bucket-x' does not exist" in problems["typo"]
    assert "hoodie.properties does not exist" in problems["later"]


def test_s3_settings_given_as_table_options_are_refused_naming_storage_options(s3_server, s3_table_uri):
    """`aws_*` keys in `options` were ignored: the table was then reached on AWS without credentials
    and failed with a DNS error (found by an exploration)."""
    Table.create(s3_table_uri, record_key="id", storage_options=s3_server.options)
    for call in (
        lambda: Table.open(s3_table_uri, options=s3_server.options),
        lambda: Table.create(s3_table_uri + "-other", record_key="id", options=s3_server.options),
    ):
        with pytest.raises(ConfigError, match="storage_options") as raised:
            call()
        assert "aws_endpoint_url" in str(raised.value)
    assert not Storage.for_uri(s3_table_uri + "-other", s3_server.options).exists(".hoodie/hoodie.properties")
