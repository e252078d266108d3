"""The `files` partition's records from a storage listing: Hudi's partition and file rules, and
the same listing as the metadata tables Hudi 1.1 wrote into every `_meta` fixture."""

from __future__ import annotations

import io
import posixpath
import struct
from collections.abc import Callable
from pathlib import Path

import fastavro
import pytest

from lakeward.core.file_group.hfile import HFileReader
from lakeward.core.file_group.hfile_writer import write_base_hfile
from lakeward.core.file_group.metadata_listing import MetadataFileListing
from lakeward.core.metadata_table.files_partition import (
    encode_record,
    files_partition_records,
    list_partition_files,
)
from lakeward.core.metadata_table.schema import COMMIT_SCHEMA_JSON, HFILE_SCHEMA_JSON, METADATA_RECORD_SCHEMA
from lakeward.core.storage import FileEntry, Storage
from lakeward.core.table_version import TimelineLayout
from lakeward.core.timeline import Timeline
from lakeward.core.timeline.metadata import CommitMetadata
from tests.support.fixture_tables import all_fixtures

META_FIXTURES = [(kind, name) for kind, name in all_fixtures() if name.startswith("v9") and "meta" in name]
V9_WITH_MDT = [
    *META_FIXTURES,
    ("mor/avro", "v9_nonpartitioned_rollback"),
    ("cow", "v9_timebasedkeygen_nonhivestyle"),
    ("cow", "v9_txns_simple_overwrite"),
]


def _files(*paths: str) -> list[FileEntry]:
    return [FileEntry(p, 10 + i, False) for i, p in enumerate(paths)]


def test_list_partition_files_hudi_partition_and_file_rules():
    base = "f1-0_0-1-1_20250101000000000.parquet"
    entries = _files(
        "2024/01/.hoodie_partition_metadata",
        f"2024/01/{base}",
        "2024/01/.f1-0_20250102000000000.log.1_0-1-1",  # a delta commit's log: its own instant
        "2024/01/f2-0_0-1-1_20250103000000000.parquet",  # after the instant: left out
        "2024/01/f3-0_0-1-1_20250101500000000.parquet",  # of a pending instant: left out
        "2024/01/notes.txt",  # not a data file
        "2024/01/deeper/.hoodie_partition_metadata",  # below a partition: not searched
        "2024/01/deeper/f4-0_0-1-1_20250101000000000.parquet",
        "2024/02/f5-0_0-1-1_20250101000000000.parquet",  # no partition metadata: not a partition
        "empty/.hoodie_partition_metadata",  # a partition without files still has a record
        ".hoodie/metadata/files/.hoodie_partition_metadata",  # the metadata table's own partition
        ".hoodie/metadata/files/files-0000-0_0-0-0_00000000000000000.hfile",
    )
    listing = list_partition_files(entries, "20250102000000000", {"20250101500000000"})
    assert listing == {
        "2024/01": {".f1-0_20250102000000000.log.1_0-1-1": 12, base: 11},
        "empty": {},
    }
    root = list_partition_files(_files(".hoodie_partition_metadata", base, "x/.hoodie_partition_metadata"), "2" * 17)
    assert root == {"": {base: 11}}  # a non-partitioned table: the root, nothing below it


def test_files_partition_records_keys_and_values():
    records = dict(files_partition_records({"": {"a.parquet": 5}, "region=us": {"b.parquet": 7, ".b.log.1_0-1-1": 3}}))
    assert list(records) == [".", "__all_partitions__", "region=us"]  # HFile order: unsigned bytes
    assert records["__all_partitions__"]["type"] == 1
    assert records["__all_partitions__"]["filesystemMetadata"] == {
        ".": {"size": 0, "isDeleted": False},
        "region=us": {"size": 0, "isDeleted": False},
    }
    assert records["region=us"]["type"] == 2 and records["region=us"]["key"] == ""
    assert records["region=us"]["filesystemMetadata"]["b.parquet"] == {"size": 7, "isDeleted": False}
    decoded = fastavro.schemaless_reader(
        io.BytesIO(encode_record(records["."])), fastavro.parse_schema(METADATA_RECORD_SCHEMA), None
    )
    assert decoded["_hoodie_file_name"] is None and decoded["ColumnStatsMetadata"] is None
    assert decoded["filesystemMetadata"] == {"a.parquet": {"size": 5, "isDeleted": False}}


@pytest.mark.parametrize(("kind", "name"), V9_WITH_MDT)
def test_listing_rule_matches_what_hudi_wrote_into_its_metadata_tables(
    fixture_table: Callable[[str, str], str], kind: str, name: str
):
    """Hudi's own metadata tables (after inserts, updates, deletes, insert overwrite, clustering,
    compaction, rollback) list exactly what the rule finds on storage as of the last instant."""
    storage = Storage.for_uri(fixture_table(kind, name))
    timeline = Timeline.load(storage, TimelineLayout.V2)
    listing = list_partition_files(
        storage.list_dir("", recursive=True), timeline.completed()[-1].time, {i.time for i in timeline.pending()}
    )
    ours = sorted((posixpath.join(p, n) if p else n, size) for p, files in listing.items() for n, size in files.items())
    hudi = MetadataFileListing(storage)
    assert ours == sorted((e.path, e.size) for e in hudi.file_entries())
    assert sorted(listing) == hudi.partitions()


def test_schema_strings_are_hudis(fixture_table: Callable[[str, str], str]):
    """The HFile schema and the delta commit's `schema` are the strings Hudi 1.1 wrote; the
    initialisation HFile of an empty table is Hudi's, byte for byte (its clock pinned)."""
    mdt = Path(fixture_table("cow", "v9_txns_simple_overwrite")) / ".hoodie" / "metadata"
    original = (mdt / "files" / "files-0000-0_0-5-4_00000000000000000.hfile").read_bytes()
    reader = HFileReader(original)
    assert reader.avro_schema == HFILE_SCHEMA_JSON
    commit = next((mdt / ".hoodie" / "timeline").glob("00000000000000000_*.deltacommit"))
    assert CommitMetadata.from_bytes(commit.read_bytes()).extraMetadata["schema"] == COMMIT_SCHEMA_JSON
    created = struct.unpack(">q", reader.file_info[b"hfile.CREATE_TIME_TS"])[0]
    cells = [(key, encode_record(record)) for key, record in files_partition_records({})]
    assert write_base_hfile(cells, HFILE_SCHEMA_JSON, create_time_ms=created) == original
