"""On-disk format of tables lakeward writes (format reference, sections 1-5).

Everything is read back with independent tools (a Java-properties parser written here,
`json`, `pyarrow.parquet`, `zlib`), not with lakeward's own readers.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakeward.core.index.bloom_filter import BloomFilter
from lakeward.core.table import Table
from lakeward.core.write import client as client_module

META = [
    "_hoodie_commit_time",
    "_hoodie_commit_seqno",
    "_hoodie_record_key",
    "_hoodie_partition_path",
    "_hoodie_file_name",
]
BASE_NAME = re.compile(
    r"^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-\d+)_(\d+-\d+-\d+)_(\d{17})\.parquet$"
)


def java_properties(text: str) -> dict[str, str]:
    """A small java.util.Properties reader: comments, `key=value` / `key:value`, backslash escapes."""
    props = {}
    for line in text.splitlines():
        stripped = line.lstrip()
        if not stripped or stripped[0] in "#!":
            continue
        key, value, i, escaped = [], [], 0, False
        target = key
        while i < len(stripped):
            ch = stripped[i]
            if escaped:
                target.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(ch, ch))
                escaped = False
            elif ch == "\\":
                escaped = True
            elif target is key and ch in "=:":
                target = value
            else:
                target.append(ch)
            i += 1
        props["".join(key).strip()] = "".join(value)
    return props


def batch(ids, cities, ts=1) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "city": pa.array(cities, pa.string()),
            "ts": pa.array([ts] * len(ids), pa.int64()),
            "v": pa.array([f"v{i}" for i in ids], pa.string()),
        }
    )


@pytest.fixture
def table(tmp_path) -> Table:
    return Table.create(
        str(tmp_path / "trips"),
        record_key="id",
        partition_by="city",
        ordering_field="ts",
        table_name="trips_v6",
        options={"hoodie.database.name": "analytics"},
    )


def commit_files(t: Table) -> list[Path]:
    return sorted((Path(t.path) / ".hoodie").glob("*.commit")) + sorted(
        (Path(t.path) / ".hoodie").glob("*.replacecommit")
    )


# -- hoodie.properties ------------------------------------------------------------------------
def test_hoodie_properties_keys_and_checksum(table):
    text = (Path(table.path) / ".hoodie" / "hoodie.properties").read_text()
    assert text.startswith("#")
    props = java_properties(text)
    assert props["hoodie.table.name"] == "trips_v6"
    assert props["hoodie.database.name"] == "analytics"
    assert props["hoodie.table.type"] == "COPY_ON_WRITE"
    assert props["hoodie.table.version"] == "6"
    assert props["hoodie.timeline.layout.version"] == "1"
    assert props["hoodie.table.recordkey.fields"] == "id"
    assert props["hoodie.table.partition.fields"] == "city"
    assert props["hoodie.table.precombine.field"] == "ts"
    assert props["hoodie.table.keygenerator.class"] == "org.apache.hudi.keygen.SimpleKeyGenerator"
    assert props["hoodie.datasource.write.hive_style_partitioning"] == "false"
    assert props["hoodie.datasource.write.partitionpath.urlencode"] == "false"
    assert props["hoodie.archivelog.folder"] == "archived"
    assert props["hoodie.table.checksum"] == str(zlib.crc32(b"analytics.trips_v6"))
    assert props["hoodie.table.checksum"] == "4112824395"
    # The method agrees with the format reference's worked example.
    assert zlib.crc32(b"default.v6_complexkeygen_hivestyle") == 281415413


def test_default_database_checksum_and_folders(tmp_path):
    t = Table.create(str(tmp_path / "my_table"), record_key="id")
    props = java_properties((Path(t.path) / ".hoodie" / "hoodie.properties").read_text())
    assert props["hoodie.table.name"] == "my_table"
    assert props["hoodie.database.name"] == "default"
    assert int(props["hoodie.table.checksum"]) == zlib.crc32(b"default.my_table")
    assert props["hoodie.table.keygenerator.class"] == "org.apache.hudi.keygen.NonpartitionedKeyGenerator"
    assert "hoodie.table.partition.fields" not in props
    for folder in (".temp", ".aux/.bootstrap/.partitions", ".aux/.bootstrap/.fileids", ".schema", "archived"):
        assert (Path(t.path) / ".hoodie" / folder).is_dir(), folder


def test_create_schema_is_escaped_avro_json(tmp_path):
    schema = pa.schema([("id", pa.int64()), ("city", pa.string()), ("amount", pa.float64())])
    t = Table.create(str(tmp_path / "t"), record_key="id", partition_by="city", schema=schema)
    raw = (Path(t.path) / ".hoodie" / "hoodie.properties").read_text()
    line = next(x for x in raw.splitlines() if x.startswith("hoodie.table.create.schema="))
    assert "\\:" in line, "':' must be escaped in Java properties"
    avro = json.loads(java_properties(raw)["hoodie.table.create.schema"])
    assert avro["type"] == "record"
    assert avro["name"] == "t_record"
    assert [f["name"] for f in avro["fields"]] == ["id", "city", "amount"]
    assert avro["fields"][0]["type"] == ["long", "null"]


# -- partition metadata -------------------------------------------------------------------------
def test_partition_metadata_in_every_partition(table):
    first = table.upsert(batch([1, 2], ["sf", "ny"]))
    second = table.upsert(batch([3, 4], ["sf", "la"]))
    expected = {"sf": first.instant_time, "ny": first.instant_time, "la": second.instant_time}
    for partition, commit_time in expected.items():
        text = (Path(table.path) / partition / ".hoodie_partition_metadata").read_text()
        assert text.startswith("#")
        assert java_properties(text) == {"commitTime": commit_time, "partitionDepth": "1"}


def test_partition_metadata_depth_for_nested_and_unpartitioned_tables(tmp_path):
    nested = Table.create(str(tmp_path / "nested"), record_key="id", partition_by=["year", "month"])
    r = nested.upsert(pa.table({"id": [1], "year": [2024], "month": [5]}))
    props = java_properties((Path(nested.path) / "2024" / "5" / ".hoodie_partition_metadata").read_text())
    assert props == {"commitTime": r.instant_time, "partitionDepth": "2"}

    flat = Table.create(str(tmp_path / "flat"), record_key="id")
    r = flat.upsert(pa.table({"id": [1, 2]}))
    props = java_properties((Path(flat.path) / ".hoodie_partition_metadata").read_text())
    assert props == {"commitTime": r.instant_time, "partitionDepth": "0"}
    assert [p.name for p in Path(flat.path).glob("*.parquet")] == [os.path.basename(r.files_written[0])]
    meta = json.loads((Path(flat.path) / ".hoodie" / f"{r.instant_time}.commit").read_text())
    assert list(meta["partitionToWriteStats"]) == [""]
    assert meta["partitionToWriteStats"][""][0]["path"] == r.files_written[0]
    assert "/" not in r.files_written[0]


# -- base files ---------------------------------------------------------------------------------
def test_base_file_names_and_footer(table):
    result = table.upsert(batch([1, 2, 10], ["sf", "sf", "sf"]))
    (rel,) = result.files_written
    assert rel.startswith("sf/")
    m = BASE_NAME.match(os.path.basename(rel))
    assert m, rel
    assert m.group(3) == result.instant_time

    path = Path(table.path) / rel
    footer = {k.decode(): v.decode() for k, v in pq.read_metadata(path).metadata.items()}
    # Keys compare as strings: "1" < "10" < "2".
    assert footer["hoodie_min_record_key"] == "1"
    assert footer["hoodie_max_record_key"] == "2"
    assert footer["hoodie_bloom_filter_type_code"] == "DYNAMIC_V0"
    assert footer["org.apache.hudi.bloomfilter"]
    bloom = BloomFilter.deserialize(footer["org.apache.hudi.bloomfilter"], footer["hoodie_bloom_filter_type_code"])
    assert bloom.might_contain(pa.array(["1", "2", "10"])).all()

    avro = json.loads(footer["parquet.avro.schema"])
    assert avro["name"] == "trips_v6_record"
    assert avro["namespace"] == "hoodie.trips_v6"
    names = [f["name"] for f in avro["fields"]]
    assert names == [*META, "id", "city", "ts", "v"]
    for field in avro["fields"][:5]:
        assert field["type"] == ["null", "string"]

    schema = pq.read_schema(path)
    assert schema.names == [*META, "id", "city", "ts", "v"]
    for name in META:
        assert schema.field(name).type == pa.string()


def test_simple_bloom_filter_type_is_recorded(tmp_path):
    t = Table.create(
        str(tmp_path / "t"), record_key="id", partition_by="city", options={"hoodie.bloom.index.filter.type": "SIMPLE"}
    )
    result = t.upsert(batch([1, 2], ["sf", "sf"]))
    footer = pq.read_metadata(Path(t.path) / result.files_written[0]).metadata
    assert footer[b"hoodie_bloom_filter_type_code"] == b"SIMPLE"


def test_footer_of_a_rewritten_file_covers_every_key(table):
    table.upsert(batch([5, 6, 7], ["sf"] * 3))
    table.insert(batch([1, 30], ["sf", "sf"]))  # tops up the small file
    result = table.upsert(batch([6, 99], ["sf", "sf"]))  # update + insert
    table.delete(keys=[99])
    latest = table.file_slices()[0].base_file.path
    footer = {k.decode(): v.decode() for k, v in pq.read_metadata(Path(table.path) / latest).metadata.items()}
    keys = ["1", "30", "5", "6", "7"]
    assert sorted(r["_hoodie_record_key"] for r in pq.read_table(Path(table.path) / latest).to_pylist()) == keys
    assert footer["hoodie_min_record_key"] == "1"
    assert footer["hoodie_max_record_key"] == "7"
    bloom = BloomFilter.deserialize(footer["org.apache.hudi.bloomfilter"], footer["hoodie_bloom_filter_type_code"])
    assert bloom.might_contain(pa.array(keys)).all()
    assert result.num_updates == 1


# -- commit metadata ----------------------------------------------------------------------------
def test_commit_metadata_json(table):
    first = table.upsert(batch([1, 2, 3], ["sf", "sf", "ny"]))
    second = table.upsert(batch([2, 4], ["sf", "sf"], ts=2))
    meta = json.loads((Path(table.path) / ".hoodie" / f"{second.instant_time}.commit").read_text())
    assert meta["operationType"] == "UPSERT"
    assert meta["compacted"] is False
    assert isinstance(meta["extraMetadata"]["schema"], str)
    assert all(isinstance(v, str) for v in meta["extraMetadata"].values())
    schema = json.loads(meta["extraMetadata"]["schema"])
    assert schema["name"] == "trips_v6_record"
    assert [f["name"] for f in schema["fields"]] == ["id", "city", "ts", "v"]
    assert all(f["type"][0] == "null" and f["default"] is None for f in schema["fields"])

    assert list(meta["partitionToWriteStats"]) == ["sf"]
    (stat,) = meta["partitionToWriteStats"]["sf"]
    sf_file = next(s.file_id for s in table.file_slices() if s.partition_path == "sf")
    assert stat["fileId"] == sf_file
    assert stat["path"].startswith("sf/" + sf_file + "_")
    assert stat["path"].endswith(f"_{second.instant_time}.parquet")
    assert stat["prevCommit"] == first.instant_time
    assert stat["partitionPath"] == "sf"
    assert (stat["numWrites"], stat["numUpdateWrites"], stat["numInserts"], stat["numDeletes"]) == (3, 1, 1, 0)
    size = (Path(table.path) / stat["path"]).stat().st_size
    assert stat["fileSizeInBytes"] == size
    assert stat["totalWriteBytes"] == size
    for key in ("cdcStats", "totalWriteErrors", "tempPath", "minEventTime", "maxEventTime", "runtimeStats"):
        assert key in stat

    first_meta = json.loads((Path(table.path) / ".hoodie" / f"{first.instant_time}.commit").read_text())
    assert sorted(first_meta["partitionToWriteStats"]) == ["ny", "sf"]
    for stats in first_meta["partitionToWriteStats"].values():
        assert all(s["prevCommit"] == "null" for s in stats)
    assert sum(s["numInserts"] for ss in first_meta["partitionToWriteStats"].values() for s in ss) == 3


# -- timeline -----------------------------------------------------------------------------------
def test_timeline_files_of_a_commit(table):
    r = table.upsert(batch([1, 2], ["sf", "ny"]))
    hoodie = Path(table.path) / ".hoodie"
    requested = hoodie / f"{r.instant_time}.commit.requested"
    inflight = hoodie / f"{r.instant_time}.inflight"
    completed = hoodie / f"{r.instant_time}.commit"
    assert requested.read_bytes() == b""
    workload = json.loads(inflight.read_text())
    assert workload["operationType"] == "UPSERT"
    assert json.loads(completed.read_text())["operationType"] == "UPSERT"
    assert sorted(p.name for p in hoodie.iterdir() if p.name.startswith(r.instant_time)) == sorted(
        [requested.name, inflight.name, completed.name]
    )


def test_timeline_files_of_a_replacecommit(table):
    table.upsert(batch([1, 2], ["sf", "ny"]))
    r = table.insert_overwrite(batch([3], ["sf"]))
    hoodie = Path(table.path) / ".hoodie"
    requested = (hoodie / f"{r.instant_time}.replacecommit.requested").read_bytes()
    assert requested[:4] == b"Obj\x01", "replacecommit.requested is an Avro container file"
    assert (hoodie / f"{r.instant_time}.replacecommit.inflight").is_file()
    meta = json.loads((hoodie / f"{r.instant_time}.replacecommit").read_text())
    assert meta["operationType"] == "INSERT_OVERWRITE"
    assert "partitionToReplaceFileIds" in meta


def test_markers_exist_during_the_write_and_are_removed_after_commit(table, monkeypatch):
    seen: dict[str, list[str]] = {}
    original = client_module.delete_markers_of_completed

    def spy(storage, instant_time):
        root = Path(table.path) / ".hoodie" / ".temp" / instant_time
        seen[instant_time] = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
        assert (Path(table.path) / ".hoodie" / f"{instant_time}.commit").is_file(), "markers go after completion"
        return original(storage, instant_time)

    monkeypatch.setattr(client_module, "delete_markers_of_completed", spy)
    first = table.upsert(batch([1, 2], ["sf", "ny"]))
    second = table.upsert(batch([1], ["sf"], ts=2))
    assert seen[first.instant_time] == sorted(f"{p}.marker.CREATE" for p in first.files_written)
    assert seen[second.instant_time] == sorted(f"{p}.marker.MERGE" for p in second.files_written)
    temp = Path(table.path) / ".hoodie" / ".temp"
    assert list(temp.rglob("*")) == []


def test_instant_times_are_17_digits_and_strictly_increasing(table):
    times = [table.upsert(batch([i], ["sf"], ts=i)).instant_time for i in range(6)]
    times.append(table.delete(keys=[0]).instant_time)
    times.append(table.insert_overwrite(batch([9], ["ny"])).instant_time)
    for t in times:
        assert re.fullmatch(r"\d{17}", t)
        dt.datetime.strptime(t, "%Y%m%d%H%M%S%f")  # a real calendar time
    assert times == sorted(times)
    assert len(set(times)) == len(times)
    assert [i.time for i in table.completed_instants()] == times
    assert [i.action.value for i in table.completed_instants()] == ["commit"] * 7 + ["replacecommit"]
