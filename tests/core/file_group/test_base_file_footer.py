"""A base file's footer carries Hudi's key-value metadata once, as Hudi writes it (issue 19, target 3).

Hudi's readers find the bloom filter, the key range and the Avro schema in the Parquet
footer's key-value metadata; pyarrow would also copy any schema metadata into the
`ARROW:schema` entry, doubling the ~1 MB bloom filter every footer read pays for.
"""

from __future__ import annotations

import base64
import struct
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from lakeward.core.file_group.base_file import (
    AVRO_SCHEMA_FOOTER_KEY,
    BloomSettings,
    read_base_file,
    read_footer_keys,
    write_base_file,
)
from lakeward.core.index.bloom_filter import (
    BLOOM_FILTER_FOOTER_KEY,
    BLOOM_TYPE_CODE_FOOTER_KEY,
    MAX_RECORD_KEY_FOOTER_KEY,
    MIN_RECORD_KEY_FOOTER_KEY,
)
from lakeward.core.schema import META_COLUMNS, avro_schema_json, with_meta
from lakeward.core.storage import Storage

DATA = pa.schema([pa.field("id", pa.int64()), pa.field("ts", pa.timestamp("us", tz="UTC"))])


def _rows(n: int) -> pa.Table:
    keys = [f"key-{i:05d}" for i in range(n)]
    meta = {
        "_hoodie_commit_time": ["20240101000000000"] * n,
        "_hoodie_commit_seqno": [f"20240101000000000_0_{i}" for i in range(n)],
        "_hoodie_record_key": keys,
        "_hoodie_partition_path": [""] * n,
        "_hoodie_file_name": ["f.parquet"] * n,
    }
    data = {"id": list(range(n)), "ts": [1_700_000_000_000_000 + i for i in range(n)]}
    return pa.table({**meta, **data}, schema=with_meta(DATA))


def _footer(path: Path) -> bytes:
    """The raw Thrift footer of a Parquet file (its last 8 bytes: footer length, magic)."""
    raw = path.read_bytes()
    (length,) = struct.unpack("<i", raw[-8:-4])
    assert raw[-4:] == b"PAR1"
    return raw[-8 - length : -8]


def test_the_footer_holds_hudis_metadata_once_and_the_file_reads_back(tmp_path: Path) -> None:
    storage = Storage.for_uri(str(tmp_path))
    schema_json = avro_schema_json(DATA, "t", with_meta=True)
    rows = _rows(2000)
    write_base_file(storage, "f.parquet", rows, schema_json, BloomSettings())

    kv = pq.read_metadata(tmp_path / "f.parquet").metadata
    assert kv[AVRO_SCHEMA_FOOTER_KEY.encode()] == schema_json.encode()
    assert kv[MIN_RECORD_KEY_FOOTER_KEY.encode()] == b"key-00000"
    assert kv[MAX_RECORD_KEY_FOOTER_KEY.encode()] == b"key-01999"
    assert kv[BLOOM_TYPE_CODE_FOOTER_KEY.encode()] == b"DYNAMIC_V0"
    assert kv[b"writer.model.name"] == b"avro"
    bloom = kv[BLOOM_FILTER_FOOTER_KEY.encode()]
    assert len(bloom) > 1000
    # Once in the whole footer: not again inside the (base64) serialised Arrow schema.
    footer = _footer(tmp_path / "f.parquet")
    assert footer.count(bloom) == 1
    arrow_schema = base64.b64decode(kv.get(b"ARROW:schema", b""))
    assert bloom[:64] not in arrow_schema
    assert schema_json.encode() not in arrow_schema

    # The footer still works for the index and the file for reads (types kept: tz-aware ts).
    keys = read_footer_keys(storage, "f.parquet")
    assert (keys.min_key, keys.max_key) == ("key-00000", "key-01999")
    assert keys.bloom is not None and keys.bloom.might_contain(pa.array(["key-01234"])).all()
    back = read_base_file(storage, "f.parquet")
    assert back.schema.names == [*META_COLUMNS, "id", "ts"]
    assert back.equals(rows)


def _encodings(path: Path) -> dict[str, set[str]]:
    """Each column's encodings, over every row group, from the file's column chunk metadata."""
    meta = pq.read_metadata(path)
    found: dict[str, set[str]] = {}
    for group in range(meta.num_row_groups):
        for column in range(meta.num_columns):
            chunk = meta.row_group(group).column(column)
            found.setdefault(chunk.path_in_schema, set()).update(chunk.encodings)
    return found


def test_base_file_meta_columns_are_delta_and_dictionary_encoded_with_hudis_footer_intact(tmp_path: Path) -> None:
    """Issue 19 target 6: unique meta strings as DELTA_BYTE_ARRAY, the repeated ones as dictionaries."""
    storage = Storage.for_uri(str(tmp_path))
    schema_json = avro_schema_json(DATA, "t", with_meta=True)
    rows = _rows(5000)
    write_base_file(storage, "f.parquet", rows, schema_json, BloomSettings())

    encodings = _encodings(tmp_path / "f.parquet")
    for unique in ("_hoodie_commit_seqno", "_hoodie_record_key"):
        assert "DELTA_BYTE_ARRAY" in encodings[unique], (unique, encodings[unique])
        assert not encodings[unique] & {"PLAIN_DICTIONARY", "RLE_DICTIONARY"}, (unique, encodings[unique])
    for repeated in ("_hoodie_commit_time", "_hoodie_partition_path", "_hoodie_file_name"):
        assert "RLE_DICTIONARY" in encodings[repeated], (repeated, encodings[repeated])
        assert "DELTA_BYTE_ARRAY" not in encodings[repeated], (repeated, encodings[repeated])

    # Prefix sharing pays: 5,000 sequence numbers `20240101000000000_0_<n>` take a few bytes each.
    meta = pq.read_metadata(tmp_path / "f.parquet")
    seqno = next(
        meta.row_group(0).column(c)
        for c in range(meta.num_columns)
        if meta.row_group(0).column(c).path_in_schema == "_hoodie_commit_seqno"
    )
    assert seqno.total_compressed_size < 5000 * 4

    # Hudi's key-value metadata is intact: bloom filter (with every key), key range, Avro schema.
    kv = meta.metadata
    assert kv[AVRO_SCHEMA_FOOTER_KEY.encode()] == schema_json.encode()
    assert (kv[MIN_RECORD_KEY_FOOTER_KEY.encode()], kv[MAX_RECORD_KEY_FOOTER_KEY.encode()]) == (
        b"key-00000",
        b"key-04999",
    )
    assert kv[BLOOM_TYPE_CODE_FOOTER_KEY.encode()] == b"DYNAMIC_V0"
    keys = read_footer_keys(storage, "f.parquet")
    assert keys.bloom is not None and keys.bloom.might_contain(rows.column("_hoodie_record_key")).all()
    assert read_base_file(storage, "f.parquet").equals(rows)


def test_data_columns_get_a_dictionary_only_when_their_values_repeat(tmp_path: Path) -> None:
    """Issue 19 targets 4 and 6: a column of distinct values is written PLAIN from the start
    (a dictionary would be built, outgrow its page and fall back to PLAIN anyway), a column
    of few values as a dictionary; both read back unchanged, also through hudi-rs's types."""
    n = 20_000
    data = pa.schema([pa.field("id", pa.int64()), pa.field("ts", pa.timestamp("us", tz="UTC")), ("city", pa.string())])
    rows = _rows(n).drop_columns(["id", "ts"])
    rows = rows.append_column("id", pa.array(range(n), pa.int64()))
    rows = rows.append_column("ts", pa.array([1_700_000_000_000_000 + 7 * i for i in range(n)], data.field("ts").type))
    rows = rows.append_column("city", pa.array([("Oslo", "Lima", "Pune")[i % 3] for i in range(n)]))
    storage = Storage.for_uri(str(tmp_path))
    write_base_file(storage, "f.parquet", rows, avro_schema_json(data, "t", with_meta=True), BloomSettings())

    encodings = _encodings(tmp_path / "f.parquet")
    for distinct in ("id", "ts"):
        assert not encodings[distinct] & {"PLAIN_DICTIONARY", "RLE_DICTIONARY"}, (distinct, encodings[distinct])
    for repeated in ("city", "_hoodie_commit_time", "_hoodie_partition_path", "_hoodie_file_name"):
        assert "RLE_DICTIONARY" in encodings[repeated], (repeated, encodings[repeated])
    assert read_base_file(storage, "f.parquet").equals(rows)


def test_an_empty_base_file_carries_an_empty_bloom_filter_and_no_key_range(tmp_path: Path) -> None:
    """Hudi's writer puts the filter in every base file's footer (`HoodieBloomFilterWriteSupport`),
    the key range only when keys were written; Hudi's bloom lookups through the metadata table
    fail on a listed file without one. A compaction of a file group whose rows were all deleted
    writes such a file."""
    storage = Storage.for_uri(str(tmp_path))
    write_base_file(storage, "f.parquet", _rows(0), avro_schema_json(DATA, "t", with_meta=True), BloomSettings())

    kv = pq.read_metadata(tmp_path / "f.parquet").metadata
    assert BLOOM_FILTER_FOOTER_KEY.encode() in kv
    assert kv[BLOOM_TYPE_CODE_FOOTER_KEY.encode()] == b"DYNAMIC_V0"
    assert MIN_RECORD_KEY_FOOTER_KEY.encode() not in kv and MAX_RECORD_KEY_FOOTER_KEY.encode() not in kv
    keys = read_footer_keys(storage, "f.parquet")
    assert (keys.min_key, keys.max_key) == (None, None)
    assert keys.bloom is not None and not keys.bloom.might_contain(pa.array(["key-00001"])).any()


def test_the_footer_cache_counts_the_bloom_filters_it_holds_parsed(tmp_path: Path, monkeypatch) -> None:
    """A long-lived process (a writer, a Spark worker reused run after run) holds at most the cache's
    bound of bloom filters: parsed filters (~2.5 MB each, six times their text) count too. The bound
    once counted only the texts, and a reused Spark worker grew ~3 MB per compaction until the
    daemon's memory cap killed its driver."""
    from lakeward.core.file_group import base_file

    monkeypatch.setattr(base_file, "_footer_cache", {})
    monkeypatch.setattr(base_file, "_footer_cache_bloom_bytes", 0)
    bound = 8 * 1024 * 1024
    monkeypatch.setattr(base_file, "_FOOTER_CACHE_BLOOM_BYTES", bound)
    storage = Storage.for_uri(str(tmp_path))
    schema_json = avro_schema_json(DATA, "t", with_meta=True)

    def held() -> int:
        total = 0
        for keys in base_file._footer_cache.values():
            parsed = keys.__dict__.get("bloom")
            total += len(keys.bloom_text or "") + (parsed.num_rows * parsed.vector_size if parsed is not None else 0)
        return total

    for i in range(12):
        path = f"f{i}.parquet"
        write_base_file(storage, path, _rows(100), schema_json, BloomSettings())  # a writer's new file
        assert read_footer_keys(storage, path).bloom is not None  # an index probing it
        _, footer = base_file.read_base_file_and_footer(storage, path)
        assert base_file.extendable_bloom(footer, BloomSettings()) is not None  # a compaction extending it
        assert held() <= bound, f"after {i + 1} files the cache holds {held()} bytes of bloom filters"
    assert base_file._footer_cache, "the cache still serves"
