"""Indexes (`hoodie.index.type`): BLOOM (default), SIMPLE and BUCKET find the same records.

The BUCKET expectations are computed here independently from Hudi's rule
(bucket = (Java List<String>.hashCode of the hash-field values & Integer.MAX_VALUE) % N),
with a Java String.hashCode written in this file.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from lakeward.core.exceptions import ConfigError
from lakeward.core.index import base as index_base
from lakeward.core.index import bloom as bloom_index
from lakeward.core.index.bloom_filter import BloomFilter
from lakeward.core.table import Table

INDEX_CONFIGS = {
    "bloom": {},
    "bloom-simple-filter": {"hoodie.bloom.index.filter.type": "SIMPLE"},
    "bloom-no-range-pruning": {"hoodie.bloom.index.prune.by.ranges": "false"},
    "simple": {"hoodie.index.type": "SIMPLE"},
    "bucket-4": {"hoodie.index.type": "BUCKET", "hoodie.bucket.index.num.buckets": 4},
    "bucket-1": {"hoodie.index.type": "BUCKET", "hoodie.bucket.index.num.buckets": "1"},
}


def java_string_hash(text: str) -> int:
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return h


def expected_bucket(values: list[str | None], num_buckets: int) -> int:
    """Java's List<String>.hashCode (a null element hashes to 0) & Integer.MAX_VALUE, mod N."""
    h = 1
    for v in values:
        h = (31 * h + (0 if v is None else java_string_hash(v))) & 0xFFFFFFFF
    return (h & 0x7FFFFFFF) % num_buckets


def test_java_string_hash_helper_matches_known_java_values():
    # Known values of Java's "...".hashCode() (as signed ints in Java).
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == (-(2**31)) & 0xFFFFFFFF
    # List.of("1").hashCode() == 31 + 49 == 80
    assert expected_bucket(["1"], 1000) == 80


def make_table(tmp_path: Path, options: dict, name: str = "t") -> Table:
    return Table.create(
        str(tmp_path / name), record_key="id", partition_by="city", ordering_field="ts", options=options
    )


def batch(*rows: tuple) -> pa.Table:
    return pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "city": pa.array([r[1] for r in rows], pa.string()),
            "ts": pa.array([r[2] for r in rows], pa.int64()),
            "v": pa.array([r[3] for r in rows], pa.string()),
        }
    )


def snapshot(table: Table) -> list[tuple]:
    return sorted((r["id"], r["city"], r["ts"], r["v"]) for r in table.read().to_pylist())


def run_scenario(table: Table) -> list[tuple]:
    """The same writes on every index; returns (inserts, updates, deletes) of each write."""
    counts = []
    r = table.upsert(batch(*[(i, "sf" if i % 2 else "ny", 1, f"v{i}") for i in range(1, 11)]))
    counts.append((r.num_inserts, r.num_updates, r.num_deletes))
    r = table.upsert(batch((1, "sf", 2, "u1"), (2, "ny", 2, "u2"), (11, "sf", 2, "n11"), (12, "ny", 2, "n12")))
    counts.append((r.num_inserts, r.num_updates, r.num_deletes))
    r = table.delete(keys=[3, 4, 404])
    counts.append((r.num_inserts, r.num_updates, r.num_deletes))
    flagged = batch((5, "sf", 3, "x"), (6, "ny", 3, "u6"), (13, "sf", 3, "n13"))
    r = table.upsert(flagged.append_column("_hoodie_is_deleted", pa.array([True, False, False])))
    counts.append((r.num_inserts, r.num_updates, r.num_deletes))
    return counts


EXPECTED_SNAPSHOT = sorted(
    [
        (1, "sf", 2, "u1"),
        (2, "ny", 2, "u2"),
        (6, "ny", 3, "u6"),
        (7, "sf", 1, "v7"),
        (8, "ny", 1, "v8"),
        (9, "sf", 1, "v9"),
        (10, "ny", 1, "v10"),
        (11, "sf", 2, "n11"),
        (12, "ny", 2, "n12"),
        (13, "sf", 3, "n13"),
    ]
)
EXPECTED_COUNTS = [(10, 0, 0), (2, 2, 0), (0, 0, 2), (1, 1, 1)]


@pytest.mark.parametrize("config", list(INDEX_CONFIGS), ids=list(INDEX_CONFIGS))
def test_every_index_gives_the_same_upsert_results(tmp_path, config):
    t = make_table(tmp_path, INDEX_CONFIGS[config])
    assert run_scenario(t) == EXPECTED_COUNTS
    assert snapshot(t) == EXPECTED_SNAPSHOT
    # The table also reopens with the same index options and keeps finding the records.
    # (`_hoodie_is_deleted` is a data column since the last write, so batches carry it.)
    again = Table.open(t.path, options=INDEX_CONFIGS[config])
    more = batch((7, "sf", 4, "u7"), (14, "ny", 4, "n14"))
    r = again.upsert(more.append_column("_hoodie_is_deleted", pa.array([False, False])))
    assert (r.num_inserts, r.num_updates) == (1, 1)
    assert len(snapshot(again)) == len(EXPECTED_SNAPSHOT) + 1


# -- BUCKET -----------------------------------------------------------------------------------
def test_bucket_file_ids_carry_the_bucket_number_of_their_keys(tmp_path):
    num_buckets = 4
    t = make_table(tmp_path, {"hoodie.index.type": "BUCKET", "hoodie.bucket.index.num.buckets": num_buckets})
    t.upsert(batch(*[(i, "sf", 1, f"v{i}") for i in range(20)]))
    rows = t.read().to_pylist()
    file_of = {}
    for row in rows:
        file_id = re.fullmatch(r"(.+)_\d+-\d+-\d+_\d{17}\.parquet", row["_hoodie_file_name"]).group(1)
        assert re.fullmatch(r"\d{8}-.+", file_id), file_id
        assert int(file_id[:8]) == expected_bucket([str(row["id"])], num_buckets), row["id"]
        file_of[row["id"]] = file_id
    assert len(set(file_of.values())) <= num_buckets

    # Updates and new keys land in the file group of their bucket, never in a new one.
    t.upsert(batch(*[(i, "sf", 2, f"w{i}") for i in range(0, 40, 3)]))
    groups = {s.file_id for s in t.file_slices()}
    assert len(groups) <= num_buckets
    for row in t.read().to_pylist():
        file_id = row["_hoodie_file_name"].split("_")[0]
        assert int(file_id[:8]) == expected_bucket([str(row["id"])], num_buckets)
        if row["id"] in file_of:
            assert file_id == file_of[row["id"]], "a key moved to another file group"


def test_bucket_of_a_composite_key_hashes_every_key_field_value(tmp_path):
    num_buckets = 8
    t = Table.create(
        str(tmp_path / "t"),
        record_key=["id", "name"],
        partition_by="city",
        options={"hoodie.index.type": "BUCKET", "hoodie.bucket.index.num.buckets": num_buckets},
    )
    ids = list(range(12))
    names = [f"n{i % 5}" for i in ids]
    t.upsert(pa.table({"id": ids, "name": names, "city": ["sf"] * len(ids)}))
    for row in t.read().to_pylist():
        assert row["_hoodie_record_key"] == f"id:{row['id']},name:{row['name']}"
        bucket = int(row["_hoodie_file_name"][:8])
        assert bucket == expected_bucket([str(row["id"]), row["name"]], num_buckets)


def test_bucket_hash_fields_outside_the_record_key_are_refused(tmp_path):
    """A hash field that is not a record key field moves a key to another bucket when its value changes
    (the old row stays: two copies). Hudi refuses it; so does lakeward, before anything is written."""
    options = {
        "hoodie.index.type": "BUCKET",
        "hoodie.bucket.index.num.buckets": 4,
        "hoodie.bucket.index.hash.field": "v",
    }
    t = make_table(tmp_path, options)
    with pytest.raises(ConfigError, match="hoodie.bucket.index.hash.field.*record key"):
        t.upsert(batch((1, "sf", 1, "a")))
    assert t.read().num_rows == 0


@pytest.mark.parametrize("hash_field", [None, "name"])
def test_bucket_of_a_composite_key_with_null_and_empty_parts_is_hudis(tmp_path, hash_field):
    """Hudi 1.x hashes the parts of the record key text (`KeyGenUtils.extractRecordKeysByFields`: a
    `__null__` part is null, `__empty__` is ""); a null hash field value crashed the write."""
    num_buckets = 8
    options = {"hoodie.index.type": "BUCKET", "hoodie.bucket.index.num.buckets": num_buckets}
    if hash_field:
        options["hoodie.bucket.index.hash.field"] = hash_field
    t = Table.create(str(tmp_path / "t"), record_key=["id", "name"], partition_by="city", options=options)
    t.upsert(pa.table({"id": [1, 2, 3], "name": pa.array([None, "", "x"], pa.string()), "city": ["sf"] * 3}))
    for row in t.read().to_pylist():
        parts = {"id": str(row["id"]), "name": row["name"]}
        wanted = [parts["name"]] if hash_field else [parts["id"], parts["name"]]
        assert int(row["_hoodie_file_name"][:8]) == expected_bucket(wanted, num_buckets), row["_hoodie_record_key"]
    assert t.delete(keys=[{"id": 1, "name": None, "city": "sf"}]).num_deletes == 1


def test_bucket_of_a_timestamp_key_is_the_bucket_of_its_key_text(tmp_path):
    """The bucket hashed the column's text in the batch's type (naive, UTC, ms): one instant landed in
    several buckets (duplicates), and a delete by the naive values missed rows written as such."""
    import datetime as dt

    options = {"hoodie.index.type": "BUCKET", "hoodie.bucket.index.num.buckets": 4}
    t = Table.create(str(tmp_path / "t"), record_key="k", partition_by="city", ordering_field="ts", options=options)
    days = [dt.datetime(2024, 1, d) for d in range(1, 5)]

    def rows(unit: str, tz: str | None, ts: int) -> pa.Table:
        values = [d.replace(tzinfo=dt.UTC) if tz else d for d in days]
        return pa.table({"k": pa.array(values, pa.timestamp(unit, tz)), "city": ["sf"] * 4, "ts": [ts] * 4})

    for unit, tz, ts in (("us", None, 1), ("us", "UTC", 2), ("ms", None, 3)):
        t.upsert(rows(unit, tz, ts))
    read = t.read().to_pylist()
    assert sorted(r["ts"] for r in read) == [3, 3, 3, 3]
    for row in read:
        assert int(row["_hoodie_file_name"][:8]) == expected_bucket([row["_hoodie_record_key"]], 4)
    assert t.delete(keys=days).num_deletes == 4
    assert t.read().num_rows == 0


def test_bucket_delete_of_unknown_keys_creates_no_file_group(tmp_path):
    """Key 2 hashes to bucket 1, which has no file group: deleting it must not create one."""
    t = make_table(tmp_path, {"hoodie.index.type": "BUCKET", "hoodie.bucket.index.num.buckets": 4})
    assert expected_bucket(["1"], 4) == 0 and expected_bucket(["2"], 4) == 1
    t.upsert(batch((1, "sf", 1, "a")))
    groups_before = {s.file_id for s in t.file_slices()}
    result = t.delete(pa.table({"id": [2], "city": ["sf"]}))
    assert result.num_deletes == 0
    assert result.files_written == ()
    assert {s.file_id for s in t.file_slices()} == groups_before
    assert snapshot(t) == [(1, "sf", 1, "a")]


def _tree(path: Path) -> dict[str, bytes]:
    return {str(f.relative_to(path)): f.read_bytes() for f in sorted(path.rglob("*")) if f.is_file()}


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
@pytest.mark.parametrize(
    "first, second",
    [
        ({"hoodie.index.type": "SIMPLE"}, {"hoodie.index.type": "BUCKET", "hoodie.bucket.index.num.buckets": 4}),
        (
            {"hoodie.index.type": "BUCKET", "hoodie.bucket.index.num.buckets": 8},
            {"hoodie.index.type": "BUCKET", "hoodie.bucket.index.num.buckets": 4},
        ),
    ],
    ids=["simple-then-bucket", "8-then-4-buckets"],
)
def test_a_bucket_write_on_file_groups_that_are_not_its_buckets_is_refused(tmp_path, table_type, first, second):
    """File groups written by another index, or bucket numbers past the configured count: the keys are
    not where the bucket index would look, so a write through it would add every updated key again."""
    path = tmp_path / "t"
    Table.create(str(path), record_key="id", partition_by="city", ordering_field="ts", table_type=table_type)
    rows = [(i, "sf", 1, "v1") for i in range(10)]
    Table.open(str(path), options=first).upsert(batch(*rows))
    assert max(expected_bucket([str(i)], 8) for i in range(10)) >= 4  # the 8-bucket table has buckets 4..7
    before = _tree(path)
    with pytest.raises(ConfigError, match=r"hoodie\.bucket\.index\.num\.buckets|hoodie\.index\.type"):
        Table.open(str(path), options=second).upsert(batch(*[(i, "sf", 2, "v2") for i in range(10)]))
    assert _tree(path) == before
    assert snapshot(Table.open(str(path))) == rows


# -- BLOOM pruning ----------------------------------------------------------------------------
@pytest.fixture
def two_files_one_partition(tmp_path):
    """One partition, two file groups with disjoint key ranges: [a00, a09] and [m00, m09]."""
    t = Table.create(str(tmp_path / "t"), record_key="key", partition_by="city")
    t.bulk_insert(pa.table({"key": [f"a{i:02d}" for i in range(10)], "city": ["sf"] * 10, "v": list(range(10))}))
    (a_file,) = {s.file_id for s in t.file_slices()}
    t.bulk_insert(pa.table({"key": [f"m{i:02d}" for i in range(10)], "city": ["sf"] * 10, "v": list(range(10))}))
    files = {s.file_id: s.base_file.path for s in t.file_slices()}
    assert len(files) == 2
    return t, a_file, files


@pytest.fixture
def key_reads(monkeypatch):
    """Record the file id of every base file whose keys an index reads."""
    seen: list[str] = []
    original = index_base.read_key_states

    def spy(storage, file_slice, *args, **kwargs):
        seen.append(file_slice.file_id)
        return original(storage, file_slice, *args, **kwargs)

    monkeypatch.setattr(index_base, "read_key_states", spy)  # the one reader of keys every index confirms with
    return seen


@pytest.fixture
def saturated_blooms(monkeypatch):
    """Every bloom filter answers "maybe" for every key: only key ranges and real keys decide."""
    monkeypatch.setattr(
        BloomFilter, "might_contain_positions", lambda self, positions: np.ones(len(positions), dtype=bool)
    )


def _file_ids_written(result) -> set[str]:
    return {re.fullmatch(r"(.+)_\d+-\d+-\d+_\d{17}\.parquet", p.split("/")[-1]).group(1) for p in result.files_written}


def test_bloom_never_reads_a_file_whose_key_range_excludes_the_keys(two_files_one_partition, key_reads):
    t, a_file, files = two_files_one_partition
    (m_file,) = set(files) - {a_file}
    result = t.upsert(pa.table({"key": ["a03", "a05"], "city": ["sf", "sf"], "v": [33, 55]}))
    assert m_file not in key_reads
    assert set(key_reads) <= {a_file}
    assert (result.num_updates, result.num_inserts) == (2, 0)
    assert _file_ids_written(result) == {a_file}, "the other file group must not be rewritten"
    values = {r["key"]: r["v"] for r in t.read().to_pylist()}
    assert len(values) == 20 and values["a03"] == 33 and values["a05"] == 55 and values["m03"] == 3


def test_bloom_reads_no_file_for_keys_outside_every_range(two_files_one_partition, key_reads):
    t, _, _ = two_files_one_partition
    result = t.upsert(pa.table({"key": ["z99", "0zz", "b50"], "city": ["sf"] * 3, "v": [1, 2, 3]}))
    assert key_reads == []
    assert (result.num_inserts, result.num_updates) == (3, 0)
    assert len(t.read()) == 23


def test_bloom_prunes_by_key_range_even_when_bloom_filters_say_maybe(
    two_files_one_partition, key_reads, saturated_blooms
):
    t, a_file, files = two_files_one_partition
    (m_file,) = set(files) - {a_file}
    result = t.upsert(pa.table({"key": ["a07"], "city": ["sf"], "v": [77]}))
    assert m_file not in key_reads
    assert result.num_updates == 1
    assert _file_ids_written(result) == {a_file}


def test_bloom_confirms_keys_admitted_by_several_files(tmp_path, key_reads, saturated_blooms):
    """Overlapping key ranges and false-positive blooms: real keys decide, no key is duplicated."""
    t = Table.create(str(tmp_path / "t"), record_key="key", partition_by="city")
    t.bulk_insert(pa.table({"key": ["a00", "a01", "z00"], "city": ["sf"] * 3, "v": [1, 2, 3]}))  # [a00, z00]
    (wide,) = {s.file_id for s in t.file_slices()}
    t.bulk_insert(pa.table({"key": ["m00", "m01"], "city": ["sf"] * 2, "v": [4, 5]}))  # [m00, m01]
    (narrow,) = {s.file_id for s in t.file_slices()} - {wide}

    result = t.upsert(pa.table({"key": ["m01", "m05"], "city": ["sf", "sf"], "v": [50, 60]}))
    assert sorted(key_reads) == sorted([wide, narrow])
    assert (result.num_updates, result.num_inserts) == (1, 1)
    keys = [r["key"] for r in t.read().to_pylist()]
    assert sorted(keys) == ["a00", "a01", "m00", "m01", "m05", "z00"]
    assert {r["key"]: r["v"] for r in t.read().to_pylist()}["m01"] == 50
    # The updated key stayed in its own file group.
    owner = {r["key"]: r["_hoodie_file_name"].split("_")[0] for r in t.read().to_pylist()}
    assert owner["m01"] == narrow


def test_bloom_without_range_pruning_still_finds_the_right_file(two_files_one_partition, key_reads, saturated_blooms):
    t, a_file, files = two_files_one_partition
    t = Table.open(t.path, options={"hoodie.bloom.index.prune.by.ranges": "false"})
    result = t.upsert(pa.table({"key": ["m04"], "city": ["sf"], "v": [44]}))
    assert sorted(key_reads) == sorted(files)  # every file admits the key: all confirmed
    assert result.num_updates == 1
    assert _file_ids_written(result) == set(files) - {a_file}
    assert sorted(r["key"] for r in t.read().to_pylist()).count("m04") == 1


def test_simple_index_reads_every_file_of_the_partition(two_files_one_partition, key_reads):
    t, _, files = two_files_one_partition
    simple = Table.open(t.path, options={"hoodie.index.type": "SIMPLE"})
    result = simple.upsert(pa.table({"key": ["a03"], "city": ["sf"], "v": [33]}))
    assert sorted(key_reads) == sorted(files)
    assert result.num_updates == 1


def test_indexes_only_look_at_the_records_partition(tmp_path, key_reads, monkeypatch):
    t = Table.create(str(tmp_path / "t"), record_key="key", partition_by="city")
    t.upsert(pa.table({"key": ["k1", "k2"], "city": ["sf", "ny"], "v": [1, 2]}))
    ny_file = next(s for s in t.file_slices() if s.partition_path == "ny")
    footers: list[str] = []
    original = bloom_index.read_footer_keys

    def footer_spy(storage, path):
        footers.append(path)
        return original(storage, path)

    monkeypatch.setattr(bloom_index, "read_footer_keys", footer_spy)
    Table.open(t.path).upsert(pa.table({"key": ["k2"], "city": ["ny"], "v": [22]}))
    assert footers == [ny_file.base_file.path]
    assert set(key_reads) <= {ny_file.file_id}

    key_reads.clear()
    Table.open(t.path, options={"hoodie.index.type": "SIMPLE"}).upsert(
        pa.table({"key": ["k2"], "city": ["ny"], "v": [23]})
    )
    assert key_reads == [ny_file.file_id]
    assert {r["key"]: r["v"] for r in t.read().to_pylist()} == {"k1": 1, "k2": 23}
