"""Every index partition of the metadata table is initialised by one mechanism (`index_partition.write_partition`).

A writer enabling `record_index`, `bloom_filters`, `column_stats` and `partition_stats` on a table
whose metadata table has `files` builds each with its own initialisation delta commit, timed as the
table version's `MetadataTableRules.init_instant` says, on the timeline layout of that version;
each base HFile's cells carry their file's name in `_hoodie_file_name`, as Hudi's base HFiles (and
lakeward's compacted ones) do; the partitions join `hoodie.table.metadata.partitions`.
"""

from __future__ import annotations

import io
import posixpath
from pathlib import Path

import fastavro
import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.core.config.properties import parse_properties
from lakeward.core.file_group.hfile import HFileReader
from lakeward.core.file_group.metadata_listing import (
    load_metadata_timeline,
    metadata_partitions,
    metadata_storage,
    read_table_properties,
)
from lakeward.core.metadata_table.schema import METADATA_RECORD_SCHEMA
from lakeward.core.table_version import table_version
from tests.support.metadata_tables import table_with_metadata

SCHEMA = pa.schema([("id", pa.string()), ("part", pa.string()), ("ts", pa.int64()), ("val", pa.int64())])
_PARSED = fastavro.parse_schema(METADATA_RECORD_SCHEMA)
ALL = {
    "hoodie.metadata.record.index.enable": "true",
    "hoodie.metadata.index.bloom.filter.enable": "true",
    "hoodie.metadata.index.column.stats.enable": "true",
}


def _rows(n: int, ts: int) -> pa.Table:
    return pa.Table.from_pylist(
        [{"id": f"k{i:02d}", "part": f"p{i % 3}", "ts": ts, "val": i} for i in range(n)], schema=SCHEMA
    )


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        (9, {"bloom_filters", "column_stats", "files", "partition_stats", "record_index"}),
        (8, {"bloom_filters", "column_stats", "files", "partition_stats", "record_index"}),
        (6, {"files", "record_index"}),  # the v6 metadata table keeps no other index partition
    ],
)
def test_index_partitions_are_initialised_alike(tmp_path: Path, version: int, expected: set[str]):
    path = str(tmp_path / "t")
    table_with_metadata(path, version, "COPY_ON_WRITE", _rows(12, 1))
    data_completed = Table.open(path).timeline().completed()[-1].time
    Table.open(path, options=ALL).upsert(_rows(3, 2))  # builds them first, as Hudi's writer does
    props = parse_properties((Path(path) / ".hoodie" / "hoodie.properties").read_text())
    assert set(props["hoodie.table.metadata.partitions"].split(",")) == expected
    mdt = metadata_storage(Table.open(path).storage)
    rules = table_version(str(version)).metadata_table
    timeline = load_metadata_timeline(mdt)
    built = expected - {"files"}
    # each index partition took the next free reserved time after the data table's latest instant
    # (`files`, built by the table's first write, took an earlier one), each its own
    wanted = {rules.init_instant(data_completed, n) for n in range(len(built) + 1)}
    completed = {i.time for i in timeline.completed()}
    inits: dict[str, set[str]] = {}
    for partition in built:
        base_files = [p for p in Path(path, ".hoodie", "metadata", partition).iterdir() if p.suffix == ".hfile"]
        assert base_files, partition
        for base in base_files:
            init = base.stem.rsplit("_", 1)[1]
            assert init in wanted and init in completed, (init, sorted(wanted))
            inits.setdefault(partition, set()).add(init)
            for _, value in HFileReader(base.read_bytes(), str(base)).items():
                record = fastavro.schemaless_reader(io.BytesIO(value), _PARSED, None)
                assert record["_hoodie_file_name"] == posixpath.basename(str(base)), (partition, base.name)  # type: ignore[index,call-overload]
    assert all(len(times) == 1 for times in inits.values()), inits  # one initialisation per partition
    assert len({t for times in inits.values() for t in times}) == len(built), inits  # each its own instant


def test_stats_partitions_wait_for_pending_instants(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    """As Hudi's writer: beside a pending instant the write goes on without building the partition
    (a warning), and a later write builds it once nothing is pending."""
    path = str(tmp_path / "t")
    table_with_metadata(path, 9, "MERGE_ON_READ", _rows(12, 1))
    table = Table.open(path)
    table.upsert(_rows(3, 2))
    compaction = table.schedule_compaction(force=True)
    assert compaction is not None
    options = {"hoodie.metadata.index.column.stats.enable": "true"}
    with caplog.at_level("WARNING", logger="lakeward.core.table"):
        Table.open(path, options=options).upsert(_rows(3, 3))
    assert "instants are pending" in caplog.text
    assert "column_stats" not in metadata_partitions(read_table_properties(Table.open(path).storage))
    assert not (Path(path) / ".hoodie" / "metadata" / "column_stats").exists()
    Table.open(path).run_compaction(compaction)
    Table.open(path, options=options).upsert(_rows(3, 4))
    assert "column_stats" in metadata_partitions(read_table_properties(Table.open(path).storage))


@pytest.mark.parametrize("version", [8, 9])
def test_a_partition_built_after_the_metadata_archival_takes_no_archived_instant(tmp_path: Path, version: int):
    """The build took the reserved time `00000000000000000` again once the metadata archival had
    moved it to the history: as the timeline's first instant it made every base HFile of an
    archived metadata compaction look uncommitted, so the record index lost its keys and the
    upsert that built `column_stats` wrote each of the 40 keys a second time."""
    path = str(tmp_path / "t")
    opts = {
        "hoodie.index.type": "RECORD_INDEX",
        "hoodie.metadata.record.index.enable": "true",
        "hoodie.metadata.compact.max.delta.commits": "3",
        "hoodie.metadata.cleaner.commits.retained": "2",
        "hoodie.cleaner.commits.retained": "1",
        "hoodie.keep.min.commits": "3",
        "hoodie.keep.max.commits": "4",
        "hoodie.parquet.small.file.limit": "0",
    }
    Table.create(path, record_key="id", partition_by="part", ordering_field="ts", table_version=version, options=opts)
    Table.open(path, options=opts).upsert(_rows(40, 1))
    for ts in range(2, 14):
        table = Table.open(path, options=opts)
        table.upsert(_rows(1, ts))
        table.clean()
        table.archive()
    mdt = metadata_storage(Table.open(path).storage)
    first = load_metadata_timeline(mdt, table_version(version).timeline_layout).instants[0].time
    assert first > "00000000000000002", "the reserved instants were not archived: the test needs more commits"

    table = Table.open(path, options=opts | {"hoodie.metadata.index.column.stats.enable": "true"})
    table.upsert(_rows(40, 100))
    ids = Table.open(path).read().column("id").to_pylist()
    assert sorted(ids) == [f"k{i:02d}" for i in range(40)]
    assert "column_stats" in metadata_partitions(read_table_properties(Table.open(path).storage))


@pytest.mark.parametrize("version", [6, 9])
def test_an_index_partition_another_writer_built_since_the_table_was_opened_is_kept_not_refused(
    tmp_path: Path, version: int
):
    """Two processes open a table with the record index enabled before either built it (a daemon and
    an ingestion job): the one that writes second finds the partition built and goes on with it,
    instead of failing every write and service until reopened (found by a concurrent-writers exploration)."""
    path = str(tmp_path / "t")
    rows = lambda keys, v: pa.table({"k": keys, "p": ["a"] * len(keys), "v": [v] * len(keys)})  # noqa: E731
    Table.create(path, record_key="k", partition_by="p", table_version=version).upsert(rows(["k1", "k2"], 1))
    options = {"hoodie.index.type": "RECORD_INDEX", "hoodie.metadata.record.index.enable": "true"}
    late, first = Table.open(path, options=options), Table.open(path, options=options)
    first.upsert(rows(["k3"], 2))  # builds record_index
    assert "record_index" in parse_properties((tmp_path / "t/.hoodie/hoodie.properties").read_text())[
        "hoodie.table.metadata.partitions"
    ].split(",")
    result = late.upsert(rows(["k1", "k4"], 3))  # tags through the record index the other writer built
    assert (result.num_updates, result.num_inserts) == (1, 1)
    late.clean()
    assert sorted(Table.open(path).read(columns=["k", "v"]).to_pylist(), key=lambda r: r["k"]) == [
        {"k": "k1", "v": 3},
        {"k": "k2", "v": 1},
        {"k": "k3", "v": 2},
        {"k": "k4", "v": 3},
    ]
