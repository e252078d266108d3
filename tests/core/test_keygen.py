"""Key generators: `_hoodie_record_key`, `_hoodie_partition_path` and partition directories,
as Apache Hudi forms them (format reference, section 9). Expected strings are written by hand.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pytest

from lakeward.core.exceptions import ConfigError, CorruptTableError, InvalidRecordError, SchemaError
from lakeward.core.table import Table

KEYGEN = "org.apache.hudi.keygen."


def keys_and_partitions(t: Table) -> list[tuple[str, str]]:
    return sorted((r["_hoodie_record_key"], r["_hoodie_partition_path"]) for r in t.read().to_pylist())


def partition_dirs(t: Table) -> set[str]:
    root = Path(t.path)
    return {
        str(p.parent.relative_to(root))
        for p in root.rglob(".hoodie_partition_metadata")
        if ".hoodie" not in p.relative_to(root).parts[:-1]
    }


def properties(t: Table) -> str:
    return (Path(t.path) / ".hoodie" / "hoodie.properties").read_text()


def test_simple_key_generator(tmp_path):
    t = Table.create(str(tmp_path / "t"), record_key="uuid", partition_by="city")
    assert f"hoodie.table.keygenerator.class={KEYGEN}SimpleKeyGenerator" in properties(t)
    t.upsert(pa.table({"uuid": ["334e26e9", "e96c4396"], "city": ["san_francisco", "chennai"]}))
    assert keys_and_partitions(t) == [("334e26e9", "san_francisco"), ("e96c4396", "chennai")]
    assert partition_dirs(t) == {"san_francisco", "chennai"}


def test_simple_key_of_numbers_booleans_and_dates(tmp_path):
    t = Table.create(str(tmp_path / "t"), record_key="id", partition_by="flag")
    t.upsert(pa.table({"id": pa.array([7, -3], pa.int32()), "flag": [True, False]}))
    assert keys_and_partitions(t) == [("-3", "false"), ("7", "true")]
    d = Table.create(str(tmp_path / "d"), record_key="id", partition_by="day")
    d.upsert(pa.table({"id": [1], "day": pa.array([dt.date(2024, 3, 5)], pa.date32())}))
    assert keys_and_partitions(d) == [("1", "2024-03-05")]


def test_complex_key_generator_formats_field_value_pairs(tmp_path):
    t = Table.create(str(tmp_path / "t"), record_key=["id", "name"], partition_by=["country", "city"])
    assert f"hoodie.table.keygenerator.class={KEYGEN}ComplexKeyGenerator" in properties(t)
    t.upsert(
        pa.table(
            {
                "id": [1, 2, 3],
                "name": ["Alice", None, ""],
                "country": ["us", "us", "in"],
                "city": ["sf", "ny", "chennai"],
            }
        )
    )
    assert keys_and_partitions(t) == [
        ("id:1,name:Alice", "us/sf"),
        ("id:2,name:__null__", "us/ny"),
        ("id:3,name:__empty__", "in/chennai"),
    ]
    assert partition_dirs(t) == {"us/sf", "us/ny", "in/chennai"}
    # a key with a null field, deleted by dict: typed as the table's column (it failed with
    # "column 'name' of type null cannot be part of a record key")
    assert t.delete(keys=[{"id": 2, "name": None, "country": "us", "city": "ny"}]).num_deletes == 1
    assert [k for k, _ in keys_and_partitions(t)] == ["id:1,name:Alice", "id:3,name:__empty__"]


def test_complex_key_generator_with_a_single_key_field(tmp_path):
    t = Table.create(str(tmp_path / "t"), record_key="id", partition_by="city", key_generator="COMPLEX")
    t.upsert(pa.table({"id": [1], "city": ["sf"]}))
    assert keys_and_partitions(t) == [("id:1", "sf")]
    assert f"hoodie.table.keygenerator.class={KEYGEN}ComplexKeyGenerator" in properties(t)


def test_complex_key_with_every_field_null_or_empty_is_rejected(tmp_path):
    t = Table.create(str(tmp_path / "t"), record_key=["id", "name"], partition_by="city")
    with pytest.raises(InvalidRecordError):
        t.upsert(pa.table({"id": pa.array([None], pa.int64()), "name": [""], "city": ["sf"]}))
    assert t.read().num_rows == 0


def test_simple_key_null_or_empty_is_rejected(tmp_path):
    t = Table.create(str(tmp_path / "t"), record_key="id", partition_by="city")
    with pytest.raises(InvalidRecordError):
        t.upsert(pa.table({"id": ["a", ""], "city": ["sf", "sf"]}))
    with pytest.raises(InvalidRecordError):
        t.upsert(pa.table({"id": ["a", None], "city": ["sf", "sf"]}))


def test_non_partitioned_key_generator(tmp_path):
    t = Table.create(str(tmp_path / "t"), record_key="id")
    assert f"hoodie.table.keygenerator.class={KEYGEN}NonpartitionedKeyGenerator" in properties(t)
    r = t.upsert(pa.table({"id": [1, 2], "city": ["sf", "ny"]}))
    assert keys_and_partitions(t) == [("1", ""), ("2", "")]
    assert "/" not in r.files_written[0]
    assert partition_dirs(t) == {"."}


def test_non_partitioned_by_class_name_ignores_a_multi_field_key_format(tmp_path):
    t = Table.create(
        str(tmp_path / "t"), record_key=["id", "name"], key_generator=f"{KEYGEN}NonpartitionedKeyGenerator"
    )
    t.upsert(pa.table({"id": [1], "name": ["Alice"]}))
    assert keys_and_partitions(t) == [("id:1,name:Alice", "")]


# -- timestamp-based ------------------------------------------------------------------------------
def test_timestamp_key_generator_epoch_millis(tmp_path):
    t = Table.create(
        str(tmp_path / "t"),
        record_key="id",
        partition_by="event_ms",
        key_generator="TIMESTAMP",
        options={
            "hoodie.keygen.timebased.timestamp.type": "EPOCHMILLISECONDS",
            "hoodie.keygen.timebased.output.dateformat": "yyyy/MM/dd",
        },
    )
    assert f"hoodie.table.keygenerator.class={KEYGEN}TimestampBasedKeyGenerator" in properties(t)
    # 1700000000000 ms = 2023-11-14T22:13:20Z; 1704067199999 ms = 2023-12-31T23:59:59.999Z; 0 = 1970-01-01.
    t.upsert(pa.table({"id": [1, 2, 3], "event_ms": [1_700_000_000_000, 1_704_067_199_999, 0]}))
    assert keys_and_partitions(t) == [("1", "2023/11/14"), ("2", "2023/12/31"), ("3", "1970/01/01")]
    assert partition_dirs(t) == {"2023/11/14", "2023/12/31", "1970/01/01"}
    depth = (Path(t.path) / "2023/11/14/.hoodie_partition_metadata").read_text()
    assert "partitionDepth=3" in depth
    # The source column keeps its value.
    assert sorted(r["event_ms"] for r in t.read().to_pylist()) == [0, 1_700_000_000_000, 1_704_067_199_999]


def test_timestamp_key_generator_date_string(tmp_path):
    t = Table.create(
        str(tmp_path / "t"),
        record_key="id",
        partition_by="day",
        key_generator=f"{KEYGEN}TimestampBasedKeyGenerator",
        options={
            "hoodie.keygen.timebased.timestamp.type": "DATE_STRING",
            "hoodie.keygen.timebased.input.dateformat": "yyyy-MM-dd HH:mm:ss",
            "hoodie.keygen.timebased.output.dateformat": "yyyy/MM/dd",
        },
    )
    t.upsert(pa.table({"id": [1, 2], "day": ["2024-03-05 23:10:00", "2024-12-31 00:00:01"]}))
    assert keys_and_partitions(t) == [("1", "2024/03/05"), ("2", "2024/12/31")]
    # The options are persisted so that a reopened table keeps producing the same paths.
    again = Table.open(t.path)
    again.upsert(pa.table({"id": [3], "day": ["2025-01-02 12:00:00"]}))
    assert keys_and_partitions(again)[-1] == ("3", "2025/01/02")
    assert "hoodie.keygen.timebased.output.dateformat=yyyy/MM/dd" in properties(t)


def test_timestamp_key_generator_output_timezone(tmp_path):
    """`hoodie.keygen.timebased.timezone` shifts the partition date: 22:13 UTC is the next day in Kolkata."""
    t = Table.create(
        str(tmp_path / "t"),
        record_key="id",
        partition_by="event_ms",
        key_generator="TIMESTAMP",
        options={
            "hoodie.keygen.timebased.timestamp.type": "EPOCHMILLISECONDS",
            "hoodie.keygen.timebased.output.dateformat": "yyyy/MM/dd/HH",
            "hoodie.keygen.timebased.timezone": "Asia/Kolkata",
        },
    )
    # 2023-11-14T22:13:20Z = 2023-11-15T03:43:20+05:30
    t.upsert(pa.table({"id": [1], "event_ms": [1_700_000_000_000]}))
    assert keys_and_partitions(t) == [("1", "2023/11/15/03")]


# -- hive style, URL encoding, default partition -------------------------------------------------
def test_hive_style_partitioning(tmp_path):
    t = Table.create(str(tmp_path / "t"), record_key="id", partition_by=["year", "city"], hive_style_partitioning=True)
    t.upsert(pa.table({"id": [1, 2], "year": [2024, 2025], "city": ["sf", "ny"]}))
    assert keys_and_partitions(t) == [("id:1", "year=2024/city=sf"), ("id:2", "year=2025/city=ny")]
    assert partition_dirs(t) == {"year=2024/city=sf", "year=2025/city=ny"}
    assert "hoodie.datasource.write.hive_style_partitioning=true" in properties(t)


def test_hive_style_by_option(tmp_path):
    t = Table.create(
        str(tmp_path / "t"),
        record_key="id",
        partition_by="city",
        options={"hoodie.datasource.write.hive_style_partitioning": "true"},
    )
    t.upsert(pa.table({"id": [1], "city": ["sf"]}))
    assert keys_and_partitions(t) == [("1", "city=sf")]


def test_url_encoded_partition_values(tmp_path):
    t = Table.create(str(tmp_path / "t"), record_key="id", partition_by="city", url_encode_partitions=True)
    t.upsert(pa.table({"id": [1, 2, 3], "city": ["a b/c", "plain", "x=y&z"]}))
    # As Hudi's PartitionPathEncodeUtils: `/` and `=` escaped, space and `&` kept.
    assert keys_and_partitions(t) == [("1", "a b%2Fc"), ("2", "plain"), ("3", "x%3Dy&z")]
    assert partition_dirs(t) == {"a b%2Fc", "plain", "x%3Dy&z"}
    assert "hoodie.datasource.write.partitionpath.urlencode=true" in properties(t)
    # Reading back gives the original values in the data column.
    assert sorted(r["city"] for r in t.read().to_pylist()) == ["a b/c", "plain", "x=y&z"]


def test_url_encoding_with_hive_style_encodes_only_the_value(tmp_path):
    t = Table.create(
        str(tmp_path / "t"),
        record_key="id",
        partition_by="city",
        url_encode_partitions=True,
        hive_style_partitioning=True,
    )
    t.upsert(pa.table({"id": [1], "city": ["a b/c"]}))
    assert keys_and_partitions(t) == [("1", "city=a b%2Fc")]


def test_without_url_encoding_a_slash_is_refused(tmp_path):
    """A value `a/b` would be the folder `b` inside partition `a` (issue 18): refused, naming the option."""
    t = Table.create(str(tmp_path / "t"), record_key="id", partition_by="city")
    with pytest.raises(InvalidRecordError, match="hoodie.datasource.write.partitionpath.urlencode"):
        t.upsert(pa.table({"id": [1], "city": ["a/b"]}))
    assert partition_dirs(t) == set()


def test_null_or_empty_partition_value_goes_to_the_hive_default_partition(tmp_path):
    t = Table.create(str(tmp_path / "t"), record_key="id", partition_by="city")
    t.upsert(pa.table({"id": [1, 2, 3], "city": ["sf", None, ""]}))
    assert keys_and_partitions(t) == [
        ("1", "sf"),
        ("2", "__HIVE_DEFAULT_PARTITION__"),
        ("3", "__HIVE_DEFAULT_PARTITION__"),
    ]
    assert partition_dirs(t) == {"sf", "__HIVE_DEFAULT_PARTITION__"}
    hive = Table.create(str(tmp_path / "h"), record_key="id", partition_by="city", hive_style_partitioning=True)
    hive.upsert(pa.table({"id": [1], "city": pa.array([None], pa.string())}))
    assert keys_and_partitions(hive) == [("1", "city=__HIVE_DEFAULT_PARTITION__")]


def test_commit_metadata_uses_the_same_partition_strings(tmp_path):
    t = Table.create(
        str(tmp_path / "t"),
        record_key="id",
        partition_by="city",
        url_encode_partitions=True,
        hive_style_partitioning=True,
    )
    r = t.upsert(pa.table({"id": [1], "city": ["a b"]}))
    meta = json.loads((Path(t.path) / ".hoodie" / f"{r.instant_time}.commit").read_text())
    assert list(meta["partitionToWriteStats"]) == ["city=a b"]
    assert meta["partitionToWriteStats"]["city=a b"][0]["path"].startswith("city=a b/")


# -- timestamp fields in keys and partition paths ------------------------------------------------
#: 2024-01-01T00:00:00Z in microseconds: Hudi renders a timestamp-micros key field as its number
#: (`HoodieAvroUtils.getNestedFieldValAsString` without consistent logical timestamps, the default).
MIDNIGHT_US = 1704067200000000


def _ts(values: list[dt.datetime], unit: str = "us", tz: str | None = None) -> pa.Array:
    return pa.array(values, pa.timestamp(unit, tz))


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
@pytest.mark.parametrize("virtual_keys", [False, True])
def test_a_timestamp_record_key_is_one_key_whatever_the_batch_type(tmp_path, table_type, virtual_keys):
    """Naive timestamps are stored as UTC and read back with tz=UTC, and batches come in ms or us:
    the key was the value's text in the batch's own type (naive, 'Z', '.000'), so a read-back row,
    a millisecond batch or a delete by the naive value made a second row or deleted nothing."""
    options = {"hoodie.populate.meta.fields": "false"} if virtual_keys else {}
    t = Table.create(
        str(tmp_path / "t"),
        record_key="id",
        partition_by="part",
        ordering_field="o",
        table_type=table_type,
        options=options,
    )
    midnight = dt.datetime(2024, 1, 1)
    t.upsert(pa.table({"id": _ts([midnight]), "part": ["p"], "o": [1], "v": [1]}))
    back = t.read(columns=["id", "part", "o", "v"])
    assert back.schema.field("id").type == pa.timestamp("us", "UTC")
    result = t.upsert(back.set_column(3, "v", pa.array([2])).set_column(2, "o", pa.array([2])))
    assert (result.num_inserts, result.num_updates) == (0, 1)
    result = t.upsert(pa.table({"id": _ts([midnight], "ms"), "part": ["p"], "o": [3], "v": [3]}))
    assert (result.num_inserts, result.num_updates) == (0, 1)
    aware = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    result = t.upsert(pa.table({"id": _ts([aware], "us", "America/New_York"), "part": ["p"], "o": [4], "v": [4]}))
    assert (result.num_inserts, result.num_updates) == (0, 1)
    rows = t.read().to_pylist()
    assert [(r["id"], r["v"]) for r in rows] == [(aware, 4)]
    if not virtual_keys:
        assert rows[0]["_hoodie_record_key"] == str(MIDNIGHT_US)
    assert t.delete(keys=[midnight]).num_deletes == 1
    assert t.read().num_rows == 0


def test_a_millisecond_timestamp_key_is_its_number_of_milliseconds(tmp_path):
    """A timestamp-millis field renders as Hudi renders it: the number of milliseconds."""
    t = Table.create(str(tmp_path / "t"), record_key="id", ordering_field="o")
    t.upsert(pa.table({"id": _ts([dt.datetime(2024, 1, 1)], "ms", "UTC"), "o": [1]}))
    assert [r["_hoodie_record_key"] for r in t.read().to_pylist()] == [str(MIDNIGHT_US // 1000)]


@pytest.mark.parametrize("hive_style", ["false", "true"])
def test_a_timestamp_partition_field_is_one_partition_whatever_the_batch_type(tmp_path, hive_style):
    """The same instant went to a folder per batch type ('... 00:00:00.000000', '...Z', '....000'):
    a read-back row upserted into a new partition, a second copy of its key."""
    t = Table.create(
        str(tmp_path / "t"),
        record_key="k",
        partition_by="day",
        ordering_field="o",
        options={"hoodie.datasource.write.hive_style_partitioning": hive_style},
    )
    midnight = dt.datetime(2024, 1, 1)
    t.upsert(pa.table({"k": ["k1"], "day": _ts([midnight]), "o": [1]}))
    back = t.read(columns=["k", "day", "o"]).set_column(2, "o", pa.array([2]))
    assert (
        t.upsert(back).num_updates,
        t.upsert(pa.table({"k": ["k1"], "day": _ts([midnight], "ms"), "o": [3]})).num_updates,
    ) == (1, 1)
    expected = f"day={MIDNIGHT_US}" if hive_style == "true" else str(MIDNIGHT_US)
    assert partition_dirs(t) == {expected}
    assert [r["k"] for r in t.read().to_pylist()] == ["k1"]
    aware = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    for op, value, keep in (("=", midnight, 1), ("=", aware, 1), (">", aware, 0), ("<=", midnight, 1)):
        assert t.read(filters=[("day", op, value)]).num_rows == keep, (op, value)


@pytest.mark.parametrize("field", ["key", "partition"])
def test_a_table_whose_timestamp_keys_were_written_as_text_is_refused(tmp_path, monkeypatch, field):
    """Tables written before timestamps rendered as Hudi renders them hold text keys or folders: a
    write now would add a second copy of each record, so it is refused, the table left as it was."""
    import pyarrow.compute as pc

    import lakeward.core.keygen as keygen

    real = keygen.key_text

    def as_text(column, name, stored=None):  # the former rendering
        if pa.types.is_timestamp(column.type):
            return pc.cast(column, pa.string())
        return real(column, name, stored)

    path = str(tmp_path / "t")
    if field == "key":
        Table.create(path, record_key="id", ordering_field="o")
        batch = pa.table({"id": _ts([dt.datetime(2024, 1, 1)]), "o": [1]})
    else:
        Table.create(path, record_key="k", partition_by="day", ordering_field="o")
        batch = pa.table({"k": ["k1"], "day": _ts([dt.datetime(2024, 1, 1)]), "o": [1]})
    monkeypatch.setattr(keygen, "key_text", as_text)
    Table.open(path).upsert(batch)
    monkeypatch.undo()
    before = sorted(str(p) for p in Path(path).rglob("*"))
    with pytest.raises(ConfigError, match="written as text"):
        Table.open(path).upsert(batch)
    assert sorted(str(p) for p in Path(path).rglob("*")) == before


ENCODING = "hoodie.table.complex.keygen.encoding"


def _as_complex_keygen(t: Table, encoding: str | None = None) -> None:
    """Turn a SIMPLE-key table (keys stored as the bare value) into what Hudi 0.14.1-1.0.2 left: a
    ComplexKeyGenerator table over one key field whose stored keys are bare values (HUDI-7001)."""
    path = Path(t.path) / ".hoodie" / "hoodie.properties"
    lines = [
        line
        for line in path.read_text().splitlines()
        if not line.startswith(("hoodie.table.keygenerator.", "hoodie.table.checksum"))
    ]
    lines.append(f"hoodie.table.keygenerator.class={KEYGEN}ComplexKeyGenerator")
    if encoding is not None:
        lines.append(f"{ENCODING}={encoding}")
    path.write_text("\n".join(lines) + "\n")


def _rows(t: Table) -> list[tuple[str, int]]:
    return sorted((r["_hoodie_record_key"], r["v"]) for r in Table.open(t.path).read().to_pylist())


@pytest.mark.parametrize("version", [6, 8, 9])
def test_a_recorded_value_only_complex_key_encoding_is_honoured(tmp_path, version):
    """`hoodie.table.complex.keygen.encoding=VALUE_ONLY` (what Hudi records for tables whose
    single-field complex keys are bare values): writes key by the bare value, so upserts and
    deletes find the stored records instead of adding `id:k1` copies."""
    t = Table.create(str(tmp_path / "t"), record_key="id", partition_by="part", table_version=version)
    t.upsert(pa.table({"id": ["k1", "k2"], "part": ["p", "p"], "v": [1, 1]}))
    _as_complex_keygen(t, "value_only")
    result = Table.open(t.path).upsert(pa.table({"id": ["k1", "k3"], "part": ["p", "p"], "v": [2, 2]}))
    assert (result.num_updates, result.num_inserts) == (1, 1)
    assert _rows(t) == [("k1", 2), ("k2", 1), ("k3", 2)]
    Table.open(t.path).delete(pa.table({"id": ["k2"], "part": ["p"]}))
    assert _rows(t) == [("k1", 2), ("k3", 2)]


def test_a_table_created_with_the_value_only_encoding_records_it(tmp_path):
    t = Table.create(str(tmp_path / "t"), record_key="id", key_generator="COMPLEX", options={ENCODING: "VALUE_ONLY"})
    assert f"{ENCODING}=VALUE_ONLY" in properties(t)
    t.upsert(pa.table({"id": ["k1"], "v": [1]}))
    t.upsert(pa.table({"id": ["k1"], "v": [2]}))
    assert _rows(t) == [("k1", 2)]


@pytest.mark.parametrize("version", [6, 8])
def test_bare_complex_keys_without_a_recorded_encoding_are_refused(tmp_path, version):
    """A single-field ComplexKeyGenerator table written by Hudi 0.14.1-1.0.2 stores bare keys but
    records no encoding: lakeward would key `id:k1` and store every upserted record a second time.
    The write is refused, naming the fix, and the table is left as it was; as in Hudi,
    `hoodie.write.complex.keygen.validation.enable=false` writes anyway."""
    t = Table.create(str(tmp_path / "t"), record_key="id", partition_by="part", table_version=version)
    t.upsert(pa.table({"id": ["k1"], "part": ["p"], "v": [1]}))
    _as_complex_keygen(t)
    timeline = sorted(p.name for p in (Path(t.path) / ".hoodie").iterdir())
    for write in (
        lambda table: table.upsert(pa.table({"id": ["k1"], "part": ["p"], "v": [2]})),
        lambda table: table.delete(pa.table({"id": ["k1"], "part": ["p"]})),
    ):
        with pytest.raises(ConfigError, match=f"{ENCODING}=VALUE_ONLY") as refused:
            write(Table.open(t.path))
        assert "'k1'" in str(refused.value) and "validation.enable" in str(refused.value)
    assert sorted(p.name for p in (Path(t.path) / ".hoodie").iterdir()) == timeline
    assert _rows(t) == [("k1", 1)]
    unchecked = Table.open(t.path, options={"hoodie.write.complex.keygen.validation.enable": "false"})
    unchecked.upsert(pa.table({"id": ["k1"], "part": ["p"], "v": [2]}))
    assert _rows(t) == [("id:k1", 2), ("k1", 1)]  # what Hudi writes with its validation off


def test_prefixed_complex_keys_pass_the_encoding_check(tmp_path):
    t = Table.create(str(tmp_path / "t"), record_key="id", key_generator="COMPLEX")
    t.upsert(pa.table({"id": ["k1"], "v": [1]}))
    Table.open(t.path).upsert(pa.table({"id": ["k1"], "v": [2]}))
    assert _rows(t) == [("id:k1", 2)]


def test_an_unknown_recorded_complex_key_encoding_is_a_clear_error(tmp_path):
    t = Table.create(str(tmp_path / "t"), record_key="id", partition_by="part")
    t.upsert(pa.table({"id": ["k1"], "part": ["p"], "v": [1]}))
    _as_complex_keygen(t, "BARE")
    with pytest.raises(CorruptTableError, match=f"{ENCODING}='BARE'.*FIELD_PREFIXED.*VALUE_ONLY"):
        Table.open(t.path)


def test_floating_keys_and_partitions_render_as_java_does(tmp_path):
    """Hudi renders a double or float key or partition value with Java's `toString`: a decimal point
    always, `E` notation outside [1e-3, 1e7). A Hudi-written table's keys and folders look so, and a
    write keyed `1` instead of `1.0` would store each record a second time."""
    t = Table.create(str(tmp_path / "t"), record_key="k", partition_by="p", hive_style_partitioning=True)
    keys = [1.0, 1e20, 1.5e-7, -0.0, 123.456, 0.001, 1e7, 9999999.0, -2.5e-4]
    parts = pa.array([0.1, 2.5, 2.5, 1e-4, 3e10, 2.5, 2.5, 2.5, 2.5], pa.float32())
    t.upsert(pa.table({"k": keys, "p": parts, "v": list(range(len(keys)))}))
    expected_keys = ["1.0", "1.0E20", "1.5E-7", "-0.0", "123.456", "0.001", "1.0E7", "9999999.0", "-2.5E-4"]
    expected_parts = ["p=0.1", "p=2.5", "p=2.5", "p=1.0E-4", "p=3.0E10", "p=2.5", "p=2.5", "p=2.5", "p=2.5"]
    assert keys_and_partitions(t) == sorted(zip(expected_keys, expected_parts))
    assert partition_dirs(t) == {"p=0.1", "p=2.5", "p=1.0E-4", "p=3.0E10"}
    # the same keys upserted again are updates, and reads give the values back, typed
    result = Table.open(t.path).upsert(pa.table({"k": keys, "p": parts, "v": [10] * len(keys)}))
    assert (result.num_updates, result.num_inserts) == (len(keys), 0)
    rows = Table.open(t.path).read().to_pylist()
    assert sorted((r["k"], r["v"]) for r in rows) == sorted((k, 10) for k in keys)
    assert t.read(filters=[("p", "=", 2.5)]).num_rows == 6
    assert t.read(filters=[("p", ">", 1.0)]).num_rows == 7


def test_a_table_whose_floating_keys_were_written_the_former_way_is_refused(tmp_path, monkeypatch):
    """Before floating keys rendered as Java does, lakeward keyed 1.0 as `1`: a write now would store
    each such record a second time, so it is refused and the table left as it was."""
    import pyarrow.compute as pc

    import lakeward.core.keygen as keygen

    real = keygen.key_text

    def former(column, name, stored=None):
        if pa.types.is_floating(column.type):
            return pc.cast(column, pa.string())
        return real(column, name, stored)

    path = str(tmp_path / "t")
    Table.create(path, record_key="k")
    batch = pa.table({"k": [1.0, 2.5], "v": [1, 1]})
    monkeypatch.setattr(keygen, "key_text", former)
    Table.open(path).upsert(batch)
    monkeypatch.undo()
    before = sorted(str(p) for p in Path(path).rglob("*"))
    with pytest.raises(ConfigError, match="record key '1'"):
        Table.open(path).upsert(batch)
    assert sorted(str(p) for p in Path(path).rglob("*")) == before


def test_dictionary_and_view_columns_are_written_as_their_values(tmp_path):
    """pandas categoricals and polars strings arrive as dictionary- or view-typed Arrow columns: they are
    plain strings to Hudi, as keys, partitions and data alike."""
    import pandas as pd

    t = Table.create(str(tmp_path / "t"), record_key="id", partition_by="city")
    frame = pd.DataFrame({"id": ["a", "b"], "city": pd.Categorical(["sf", "ny"]), "v": pd.Categorical(["x", "y"])})
    t.upsert(frame)
    views = pa.table(
        {
            "id": pa.array(["a", "c"]).cast(pa.string_view()),
            "city": pa.array(["sf", "la"]).dictionary_encode(),
            "v": pa.array(["x2", "z"]).cast(pa.string_view()),
        }
    )
    result = Table.open(t.path).upsert(views)
    assert (result.num_updates, result.num_inserts) == (1, 1)
    read = Table.open(t.path).read()
    assert read.schema.field("city").type == pa.string() and read.schema.field("v").type == pa.string()
    assert sorted((r["id"], r["city"], r["v"]) for r in read.to_pylist()) == [
        ("a", "sf", "x2"),
        ("b", "ny", "y"),
        ("c", "la", "z"),
    ]
    assert partition_dirs(t) == {"sf", "ny", "la"}


def test_a_nested_key_field_is_refused_as_unsupported(tmp_path):
    t = Table.create(str(tmp_path / "t"), record_key="s.id")
    batch = pa.table({"s": pa.array([{"id": 1}], pa.struct([("id", pa.int64())])), "v": [1]})
    with pytest.raises(SchemaError, match=r"nested field 's.id'.*does not support"):
        t.upsert(batch)


@pytest.mark.parametrize(
    ("recorded", "expected"),
    [
        ("SimpleAvroKeyGenerator", "SimpleKeyGenerator"),
        ("ComplexAvroKeyGenerator", "ComplexKeyGenerator"),
        ("NonpartitionedAvroKeyGenerator", "NonpartitionedKeyGenerator"),
    ],
)
def test_a_table_recording_hudis_avro_key_generator_opens(tmp_path, recorded, expected):
    """Hudi's Flink writer records the Avro key generators (SimpleAvroKeyGenerator by default): such tables
    could not be opened at all, not even read ("not a supported key generator")."""
    partitioned = expected != "NonpartitionedKeyGenerator"
    record_key = ["id", "name"] if expected == "ComplexKeyGenerator" else "id"
    t = Table.create(str(tmp_path / "t"), record_key=record_key, partition_by="city" if partitioned else None)
    t.upsert(pa.table({"id": [1, 2], "name": ["a", "b"], "city": ["sf", "ny"]}))
    path = Path(t.path) / ".hoodie" / "hoodie.properties"
    path.write_text(path.read_text().replace(f"{KEYGEN}{expected}", f"{KEYGEN}{recorded}"))
    assert f"{KEYGEN}{recorded}" in properties(t)
    reopened = Table.open(t.path)
    assert keys_and_partitions(reopened) == keys_and_partitions(t)
    reopened.upsert(pa.table({"id": [3], "name": ["c"], "city": ["sf"]}))
    assert len(reopened.read()) == 3


def test_a_nul_character_in_a_partition_value_is_refused_before_the_write(tmp_path):
    """It failed midway with Python's raw `ValueError: embedded null byte` (creating the marker folder)."""
    t = Table.create(str(tmp_path / "t"), record_key="id", partition_by="city")
    t.upsert(pa.table({"id": [1], "city": ["sf"]}))
    before = sorted(p.name for p in Path(t.path).rglob("*"))
    with pytest.raises(InvalidRecordError, match="NUL character"):
        t.upsert(pa.table({"id": [2], "city": ["s\x00f"]}))
    assert sorted(p.name for p in Path(t.path).rglob("*")) == before
    encoded = Table.create(
        str(tmp_path / "e"),
        record_key="id",
        partition_by="city",
        options={"hoodie.datasource.write.partitionpath.urlencode": "true"},
    )
    encoded.upsert(pa.table({"id": [2], "city": ["s\x00f"]}))
    assert keys_and_partitions(encoded) == [("2", "s%00f")]
    assert encoded.read().column("city").to_pylist() == ["s\x00f"]


def test_customkeygenerators_typed_partition_field_is_refused_at_create(tmp_path):
    """`partition_by="city:SIMPLE"` was stored as given, making a table hudi-rs refuses to read."""
    with pytest.raises(ConfigError, match="partition_by='city'"):
        Table.create(str(tmp_path / "t"), record_key="id", partition_by="city:SIMPLE")
    assert not (tmp_path / "t").exists()
