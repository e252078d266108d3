"""Hudi log files: block round trips, Hudi's own bytes, corrupt and truncated blocks, rollover, names.

Everything runs on real files in a temporary folder; Hudi's log files come from the MOR
fixture tables Apache Hudi (Spark) wrote.
"""

from __future__ import annotations

import datetime as dt
import logging
import posixpath
import struct
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from lakeward.core.exceptions import CorruptTableError, SchemaError
from lakeward.core.file_group.log_file import (
    MAGIC,
    AvroDataBlock,
    BlockType,
    CommandBlock,
    CommandType,
    DataBlock,
    DataBlockFormat,
    DeleteBlock,
    HeaderKey,
    LogBlock,
    LogFileReader,
    LogFileWriter,
    ParquetDataBlock,
    data_block,
    decode_block,
    encode_block,
    read_log_file,
    scan_blocks,
    write_log_blocks,
)
from lakeward.core.file_group.naming import log_file_name, parse_log_file_name
from lakeward.core.schema import META_COLUMNS, avro_schema_json, with_meta
from lakeward.core.storage import Storage

FILE_ID = "3f2a0c1e-5b6d-4e7f-8a9b-0c1d2e3f4a5b-0"
BASE_INSTANT = "20251121080000000"
TOKEN = "0-1-2"
READER_LOG = "lakeward.core.file_group.log_file.reader"

DATA_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("score", pa.float64()),
        ("small", pa.int32()),
        ("active", pa.bool_()),
        ("born", pa.date32()),
        ("seen", pa.timestamp("us", tz="UTC")),
        ("seen_ms", pa.timestamp("ms", tz="UTC")),
        ("amount", pa.decimal128(12, 2)),
        ("blob", pa.binary()),
        ("tags", pa.list_(pa.string())),
        ("items", pa.list_(pa.struct([("sku", pa.string()), ("qty", pa.int32())]))),
        ("attrs", pa.map_(pa.string(), pa.struct([("v", pa.float64()), ("ok", pa.bool_())]))),
        ("address", pa.struct([("city", pa.string()), ("geo", pa.struct([("lat", pa.float64())]))])),
    ]
)
SCHEMA_JSON = avro_schema_json(DATA_SCHEMA, "trips", with_meta=True)


def _records(instant: str, ids: list[int], partition: str = "p=1") -> pa.Table:
    """Log records with all five meta columns, as Hudi writes them (file name = file id)."""
    n = len(ids)
    rows = {
        "_hoodie_commit_time": [instant] * n,
        "_hoodie_commit_seqno": [f"{instant}_0_{i}" for i in range(n)],
        "_hoodie_record_key": [str(i) for i in ids],
        "_hoodie_partition_path": [partition] * n,
        "_hoodie_file_name": [FILE_ID] * n,
        "id": ids,
        "name": [f"name-{i}" if i % 3 else None for i in ids],
        "score": [i * 1.5 for i in ids],
        "small": [i % 100 for i in ids],
        "active": [i % 2 == 0 for i in ids],
        "born": [dt.date(2000, 1, 1) + dt.timedelta(days=i) for i in ids],
        "seen": [dt.datetime(2025, 1, 1, 12, 0, 0, 123456, tzinfo=dt.UTC) + dt.timedelta(seconds=i) for i in ids],
        "seen_ms": [dt.datetime(2025, 6, 1, 8, 30, 0, 125000, tzinfo=dt.UTC) for _ in ids],
        "amount": [Decimal(f"{i}.25") for i in ids],
        "blob": [bytes([i % 256, 0, 255]) for i in ids],
        "tags": [[f"t{i}", "x"] if i % 2 else [] for i in ids],
        "items": [[{"sku": f"s{i}", "qty": i}, {"sku": None, "qty": None}] for i in ids],
        "attrs": [[("a", {"v": float(i), "ok": True}), ("b", None)] if i % 2 else None for i in ids],
        "address": [{"city": "sf", "geo": {"lat": 37.7 + i}} if i % 4 else None for i in ids],
    }
    return pa.table(rows, schema=with_meta(DATA_SCHEMA))


def _storage(tmp_path: Path) -> Storage:
    return Storage.for_uri(str(tmp_path / "table"))


def _writer(storage: Storage, **kwargs: int) -> LogFileWriter:
    return LogFileWriter(storage, "p=1", FILE_ID, BASE_INSTANT, TOKEN, **kwargs)


def _three_blocks(block_format: DataBlockFormat = DataBlockFormat.AVRO) -> list[LogBlock]:
    return [
        data_block(_records("20251121080100000", [1, 2, 3]), "20251121080100000", SCHEMA_JSON, block_format),
        DeleteBlock.create("20251121080200000", SCHEMA_JSON, ["2"], "p=1", pa.array([7], pa.int64())),
        data_block(_records("20251121080300000", [4, 5]), "20251121080300000", SCHEMA_JSON, block_format),
    ]


def _comparable(block: LogBlock) -> tuple[object, ...]:
    records = block.records.to_pylist() if isinstance(block, DataBlock | DeleteBlock) else None
    return (block.block_type, dict(block.header), dict(block.footer), records)


# -- round trips -----------------------------------------------------------------------------
@pytest.mark.parametrize("block_format", list(DataBlockFormat))
def test_log_file_round_trip_every_block_type_reads_back_equal(tmp_path: Path, block_format: DataBlockFormat):
    storage = _storage(tmp_path)
    blocks: list[LogBlock] = [
        data_block(_records("20251121080100000", list(range(1, 21))), "20251121080100000", SCHEMA_JSON, block_format),
        DeleteBlock.create("20251121080200000", SCHEMA_JSON, ["3", "4"], "p=1", pa.array([10, 11], pa.int64())),
        DeleteBlock.create("20251121080300000", SCHEMA_JSON, ["5"], "p=1"),  # no ordering value
        CommandBlock.rollback("20251121080400000", "20251121080300000"),
        data_block(_records("20251121080500000", []), "20251121080500000", SCHEMA_JSON, block_format),
    ]
    written = _writer(storage).append(blocks)

    assert len(written) == 1
    log_file = written[0].log_file
    assert (written[0].num_blocks, written[0].num_records, written[0].num_deletes, written[0].num_rollbacks) == (
        5,
        20,
        3,
        1,
    )
    assert log_file.size == storage.size(log_file.path)
    back = read_log_file(storage, log_file.path)
    assert [_comparable(b) for b in back] == [_comparable(b) for b in blocks]
    expected_type = AvroDataBlock if block_format is DataBlockFormat.AVRO else ParquetDataBlock
    assert isinstance(back[0], expected_type)
    assert back[0].records.column_names == [*META_COLUMNS, *DATA_SCHEMA.names]
    command = back[3]
    assert isinstance(command, CommandBlock)
    assert command.command_type is CommandType.ROLLBACK
    assert command.target_instant_time == "20251121080300000"
    assert back[1].records.column("ordering_value").to_pylist() == [10, 11]
    assert back[2].records.column("ordering_value").to_pylist() == [None]


@pytest.mark.parametrize("block_format", list(DataBlockFormat))
def test_data_block_records_keep_types_and_values(tmp_path: Path, block_format: DataBlockFormat):
    storage = _storage(tmp_path)
    records = _records("20251121080100000", [1, 2, 3, 4, 5])
    [written] = write_log_blocks(
        storage,
        "p=1",
        FILE_ID,
        BASE_INSTANT,
        TOKEN,
        [data_block(records, "20251121080100000", SCHEMA_JSON, block_format)],
    )
    [back] = read_log_file(storage, written.log_file.path)
    assert isinstance(back, DataBlock)
    assert back.records.column_names == records.column_names
    for name in records.column_names:
        assert back.records.column(name).type == records.schema.field(name).type, name
    assert back.records.to_pylist() == records.to_pylist()
    assert back.schema_json == SCHEMA_JSON


def test_data_block_format_parse_accepts_hudi_spellings_and_rejects_others():
    assert DataBlockFormat.parse("AVRO") is DataBlockFormat.AVRO
    assert DataBlockFormat.parse(" parquet ") is DataBlockFormat.PARQUET
    with pytest.raises(SchemaError, match="hoodie.logfile.data.block.format"):
        DataBlockFormat.parse("orc")


def test_data_block_without_meta_columns_is_refused():
    rows = _records("20251121080100000", [1]).drop_columns(["_hoodie_commit_seqno"])
    with pytest.raises(SchemaError, match="_hoodie_commit_seqno"):
        data_block(rows, "20251121080100000", SCHEMA_JSON)


#: Union index of each ordering-value wrapper in Hudi's HoodieDeleteRecord.orderingVal (0 is null).
WRAPPER_INDEX = {
    "BooleanWrapper": 1,
    "IntWrapper": 2,
    "LongWrapper": 3,
    "FloatWrapper": 4,
    "DoubleWrapper": 5,
    "BytesWrapper": 6,
    "StringWrapper": 7,
    "DateWrapper": 8,
    "DecimalWrapper": 9,
    "TimeMicrosWrapper": 10,
    "TimestampMicrosWrapper": 11,
}
_UTC = dt.UTC


@pytest.mark.parametrize(
    ("values", "wrapper", "back_type"),
    [
        (pa.array([True, None, False]), "BooleanWrapper", pa.bool_()),
        (pa.array([1, None, 3], pa.int32()), "IntWrapper", pa.int32()),
        (pa.array([1, 2**40, 0], pa.int64()), "LongWrapper", pa.int64()),
        (pa.array([1.5, 2.5, None], pa.float32()), "FloatWrapper", pa.float32()),
        (pa.array([1.5, -2.25, 3.0], pa.float64()), "DoubleWrapper", pa.float64()),
        (pa.array([b"a", b"bc", None], pa.binary()), "BytesWrapper", pa.binary()),
        (pa.array(["x", "y", "z"], pa.string()), "StringWrapper", pa.string()),
        (pa.array([dt.date(2024, 1, 1), dt.date(1969, 12, 31), None], pa.date32()), "DateWrapper", pa.date32()),
        (
            pa.array([Decimal("1.5"), Decimal("-2.000000000000001"), None], pa.decimal128(30, 15)),
            "DecimalWrapper",
            pa.decimal128(30, 15),
        ),
        (pa.array([dt.time(1, 2, 3, 4), None, dt.time(0)], pa.time64("us")), "TimeMicrosWrapper", pa.time64("us")),
        (
            pa.array([dt.datetime(2025, 1, 1, 0, 0, 0, 1, tzinfo=_UTC), None], pa.timestamp("us", "UTC")),
            "TimestampMicrosWrapper",
            pa.timestamp("us", "UTC"),
        ),
        (
            pa.array([dt.datetime(2025, 1, 1, 0, 0, 0, 1000), dt.datetime(1970, 1, 1)], pa.timestamp("ms")),
            "TimestampMicrosWrapper",
            pa.timestamp("us", "UTC"),
        ),
    ],
)
def test_delete_block_ordering_values_round_trip_in_one_wrapper(values: pa.Array, wrapper: str, back_type: pa.DataType):
    n = len(values)
    keys, partitions = [f"k{i}" for i in range(n)], [f"p={i}" for i in range(n)]
    block = DeleteBlock.create("20251121080200000", SCHEMA_JSON, keys, partitions, values)
    [raw] = list(scan_blocks(encode_block(block)))
    back = decode_block(raw)

    assert isinstance(back, DeleteBlock)
    assert back.records.column("record_key").to_pylist() == keys
    assert back.records.column("partition_path").to_pylist() == partitions
    ordering = back.records.column("ordering_value")
    assert ordering.type == back_type
    assert ordering.to_pylist() == values.cast(back_type).to_pylist()
    # Hand-decoded: every non-null value sits in its type's wrapper (hudi-rs rejects mixed branches).
    assert _ordering_branches(raw.content[8:]) == [
        WRAPPER_INDEX[wrapper] if v is not None else 0 for v in values.to_pylist()
    ]


def _ordering_branches(payload: bytes) -> list[int]:
    """Union indices of orderingVal in a HoodieDeleteRecordList datum, decoded by hand."""
    pos = 0

    def varint() -> int:
        nonlocal pos
        shift = result = 0
        while True:
            byte = payload[pos]
            pos += 1
            result |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return (result >> 1) ^ -(result & 1)

    def skip_bytes() -> None:
        nonlocal pos
        length = varint()
        pos += length

    out = []
    for _ in range(varint()):  # one array block
        for _ in range(2):  # recordKey, partitionPath: union [null, string]
            if varint():
                skip_bytes()
        branch = varint()
        out.append(branch)
        if branch == 1:  # boolean
            pos += 1
        elif branch == 4:  # float
            pos += 4
        elif branch == 5:  # double
            pos += 8
        elif branch in (6, 7, 9):  # bytes, string, decimal (bytes)
            skip_bytes()
        elif branch:  # int, long, date, time, timestamp: zig-zag varints
            varint()
    assert varint() == 0  # end of the array
    assert pos == len(payload)
    return out


def test_delete_block_of_unsupported_ordering_values_is_refused():
    values = pa.array([{"a": 1}], pa.struct([("a", pa.int32())]))
    block = DeleteBlock.create("20251121080200000", SCHEMA_JSON, ["a"], "p=1", values)
    with pytest.raises(SchemaError, match="struct"):
        encode_block(block)


# -- Hudi's own files ------------------------------------------------------------------------
HUDI_LOGS = [
    ("mor/avro", "v6_trips_8i1u", BlockType.AVRO_DATA),
    ("mor/avro", "v6_trips_8i3d", BlockType.DELETE),
    ("mor/parquet", "v6_nonpartitioned", BlockType.PARQUET_DATA),
    ("mor/parquet", "v6_nonpartitioned_rollback", None),
]


def _log_paths(base: str) -> list[str]:
    root = Path(base)
    found = [p for p in root.rglob(".*.log.*") if parse_log_file_name(p.name) is not None]
    return sorted(str(p.relative_to(root)) for p in found)


@pytest.mark.parametrize(("kind", "name", "block_type"), HUDI_LOGS)
def test_hudi_written_log_files_decode_and_reencode_to_the_same_bytes(
    fixture_table: Callable[[str, str], str], kind: str, name: str, block_type: BlockType | None
):
    base = fixture_table(kind, name)
    storage = Storage.for_uri(base)
    paths = _log_paths(base)
    assert paths, f"{name} has no log files"
    seen = []
    for path in paths:
        original = storage.read_bytes(path)
        reader = LogFileReader(storage, path)
        blocks = list(reader.blocks())
        assert reader.corrupt_blocks == []
        assert blocks, path
        seen += [b.block_type for b in blocks]
        for block in blocks:
            assert block.instant_time.isdigit() and len(block.instant_time) == 17
            assert block.footer == {}
        if all(b.block_type is not BlockType.PARQUET_DATA for b in blocks):
            # Avro, delete and command blocks: lakeward's encoder reproduces Hudi's bytes exactly.
            assert b"".join(encode_block(b) for b in blocks) == original, path
        else:
            # Parquet blocks hold a Parquet file whose bytes depend on the writer: same records.
            again = list(scan_blocks(b"".join(encode_block(b) for b in blocks)))
            assert len(again) == len(blocks)
    if block_type is not None:
        assert block_type in seen
    else:  # the rollback fixture: data, rollback command, data
        assert seen == [BlockType.PARQUET_DATA, BlockType.COMMAND, BlockType.PARQUET_DATA]


def test_hudi_delete_block_fixture_holds_three_keys_with_spark_sql_default_ordering(
    fixture_table: Callable[[str, str], str],
):
    base = fixture_table("mor/avro", "v6_trips_8i3d")
    [path] = _log_paths(base)
    [block] = read_log_file(Storage.for_uri(base), path)
    assert isinstance(block, DeleteBlock)
    assert block.records.num_rows == 3
    assert block.records.column("partition_path").to_pylist() == ["city=san_francisco"] * 3
    # Spark SQL DELETE writes Java's default ordering value, Integer 0, in an IntWrapper.
    assert block.records.column("ordering_value").to_pylist() == [0, 0, 0]
    assert block.records.schema.field("ordering_value").type == pa.int32()


# -- damaged files ---------------------------------------------------------------------------
def _write_three(storage: Storage, block_format: DataBlockFormat = DataBlockFormat.AVRO) -> tuple[str, bytes]:
    [written] = _writer(storage).append(_three_blocks(block_format))
    return written.log_file.path, storage.read_bytes(written.log_file.path)


def _block_offsets(data: bytes) -> list[int]:
    return [b.offset for b in scan_blocks(data)]


def _read_with_warnings(storage: Storage, path: str, caplog: pytest.LogCaptureFixture) -> tuple[list[LogBlock], int]:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=READER_LOG):
        reader = LogFileReader(storage, path)
        blocks = list(reader.blocks())
    warnings = [r for r in caplog.records if r.name == READER_LOG and r.levelno == logging.WARNING]
    assert len(warnings) == len(reader.corrupt_blocks)
    for record in warnings:
        assert "corrupt log block" in record.getMessage() and path in record.getMessage()
    return blocks, len(warnings)


@pytest.mark.parametrize("block_format", list(DataBlockFormat))
@pytest.mark.parametrize("cut", [1, 7, 8, 9, 50, "half", "all-but-magic", "magic-only"])
def test_truncated_last_block_is_skipped_with_a_warning_and_earlier_blocks_survive(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, block_format: DataBlockFormat, cut: int | str
):
    storage = _storage(tmp_path)
    path, data = _write_three(storage, block_format)
    offsets = _block_offsets(data)
    last = offsets[-1]
    keep = {
        "half": last + (len(data) - last) // 2,
        "all-but-magic": last + 3,
        "magic-only": last + len(MAGIC),
    }.get(str(cut), len(data) - cut if isinstance(cut, int) else 0)
    storage.write_bytes(path, data[:keep])
    expected = [_comparable(b) for b in _three_blocks(block_format)[:2]]

    blocks, warnings = _read_with_warnings(storage, path, caplog)

    assert [_comparable(b) for b in blocks] == expected
    assert warnings == 1


def test_corrupt_middle_block_is_skipped_and_reading_resumes_at_the_next_block(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    storage = _storage(tmp_path)
    path, data = _write_three(storage)
    first, middle, last = _block_offsets(data)
    expected = [_comparable(b) for b in _three_blocks()]
    cases = {
        "size too large": data[: middle + 6] + struct.pack(">q", 10**9) + data[middle + 14 :],
        "size too small": data[: middle + 6] + struct.pack(">q", 40) + data[middle + 14 :],
        "trailing length": data[: last - 8] + struct.pack(">q", 1) + data[last:],
        "magic damaged": data[:middle] + b"#HUDI!" + data[middle + 6 :],
        "bytes lost inside": data[: middle + 30] + data[middle + 40 :],
    }
    for label, damaged in cases.items():
        storage.write_bytes(path, damaged)
        blocks, warnings = _read_with_warnings(storage, path, caplog)
        assert [_comparable(b) for b in blocks] == [expected[0], expected[2]], label
        assert warnings == 1, label


def test_garbage_after_the_last_block_and_before_the_first_is_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    storage = _storage(tmp_path)
    path, data = _write_three(storage)
    expected = [_comparable(b) for b in _three_blocks()]
    for label, damaged in {
        "torn magic at the end": data + MAGIC[:4],
        "a half-written header at the end": data + MAGIC + struct.pack(">q", 500) + b"\x00\x00",
        "zeros at the end": data + bytes(64),
        "junk at the start": b"junk" + data,
    }.items():
        storage.write_bytes(path, damaged)
        blocks, warnings = _read_with_warnings(storage, path, caplog)
        assert [_comparable(b) for b in blocks] == expected, label
        assert warnings == 1, label


def test_empty_and_all_garbage_files_give_no_blocks(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    storage = _storage(tmp_path)
    storage.write_bytes("p=1/.x-0_20251121080000000.log.1_0-1-2", b"")
    assert _read_with_warnings(storage, "p=1/.x-0_20251121080000000.log.1_0-1-2", caplog) == ([], 0)
    storage.write_bytes("p=1/.x-0_20251121080000000.log.1_0-1-2", b"\x00" * 100)
    assert _read_with_warnings(storage, "p=1/.x-0_20251121080000000.log.1_0-1-2", caplog) == ([], 1)


def test_soundly_framed_block_with_undecodable_content_raises_instead_of_dropping_rows(tmp_path: Path):
    """A torn write breaks the framing; damage inside a sound frame is an error, not a silent skip."""
    storage = _storage(tmp_path)
    block = data_block(_records("20251121080100000", [1, 2]), "20251121080100000", SCHEMA_JSON)
    data = bytearray(encode_block(block))
    [raw] = list(scan_blocks(bytes(data)))
    content_at = len(data) - 8 - 4 - len(raw.content)  # before: trailing long, empty footer
    assert data[content_at : content_at + 8] == struct.pack(">ii", 3, 2)  # version 3, 2 records
    data[content_at + 4 : content_at + 8] = struct.pack(">i", 50)  # claims 50 records
    storage.write_bytes("p=1/.x-0_20251121080000000.log.1_0-1-2", bytes(data))
    with pytest.raises(CorruptTableError, match="AVRO_DATA block at byte 0"):
        read_log_file(storage, "p=1/.x-0_20251121080000000.log.1_0-1-2")


# -- writer: versions, rollover, names -------------------------------------------------------
def test_each_append_starts_the_next_version_and_never_rewrites_a_file(tmp_path: Path):
    storage = _storage(tmp_path)
    writer = _writer(storage)
    first = writer.append(_three_blocks()[:1])
    first_bytes = storage.read_bytes(first[0].log_file.path)
    second = writer.append(_three_blocks()[1:])
    assert [w.log_file.version for w in first + second] == [1, 2]
    assert storage.read_bytes(first[0].log_file.path) == first_bytes
    assert writer.append([]) == []
    # A racing writer (another task attempt) took version 3 first: the writer moves on.
    storage.write_bytes(posixpath.join("p=1", log_file_name(FILE_ID, BASE_INSTANT, 3, TOKEN)), b"taken")
    third = writer.append(_three_blocks()[:1])
    assert third[0].log_file.version == 4
    assert storage.read_bytes(posixpath.join("p=1", log_file_name(FILE_ID, BASE_INSTANT, 3, TOKEN))) == b"taken"
    # Another slice's logs in the same folder (other base instant, other file id) do not count.
    other = LogFileWriter(storage, "p=1", FILE_ID, "20251121090000000", TOKEN).append(_three_blocks()[:1])
    assert other[0].log_file.version == 1


def test_a_known_latest_version_saves_the_listing_and_taken_versions_are_still_skipped(tmp_path: Path):
    storage = _storage(tmp_path)
    _writer(storage).append(_three_blocks()[:1])  # version 1
    [known] = LogFileWriter(storage, "p=1", FILE_ID, BASE_INSTANT, TOKEN, latest_version=1).append(_three_blocks()[1:2])
    assert known.log_file.version == 2
    # A stale hint (version 1 while 2 exists): the atomic create skips the taken version.
    [stale] = write_log_blocks(storage, "p=1", FILE_ID, BASE_INSTANT, TOKEN, _three_blocks()[2:], latest_version=1)
    assert stale.log_file.version == 3
    assert [b.block_type for b in read_log_file(storage, known.log_file.path)] == [_three_blocks()[1].block_type]


def test_rollover_starts_a_new_version_once_a_file_passes_the_max_size(tmp_path: Path):
    storage = _storage(tmp_path)
    instants = [f"2025112108{i:02d}00000" for i in range(1, 8)]
    blocks = [data_block(_records(t, [i * 10 + j for j in range(5)]), t, SCHEMA_JSON) for i, t in enumerate(instants)]
    limit = len(encode_block(blocks[0])) * 2 + 1  # about three blocks per file
    written = _writer(storage, max_file_size=limit).append(blocks)

    assert [w.log_file.version for w in written] == list(range(1, len(written) + 1))
    assert len(written) >= 3
    assert sum(w.num_blocks for w in written) == len(blocks)
    back_per_file = [read_log_file(storage, w.log_file.path) for w in written]
    for w, file_blocks in zip(written, back_per_file):
        sizes = [len(encode_block(b)) for b in file_blocks]
        assert w.log_file.size == sum(sizes) == storage.size(w.log_file.path)
        # Hudi's rule: the block that takes a file past the limit is its last one.
        assert sum(sizes[:-1]) <= limit
        if w is not written[-1]:
            assert w.log_file.size > limit
    back = [b for file_blocks in back_per_file for b in file_blocks]
    assert [_comparable(b) for b in back] == [_comparable(b) for b in blocks]
    listed = sorted(e.name for e in storage.list_dir("p=1") if not e.is_dir)
    assert listed == sorted(w.log_file.name for w in written)


def test_written_log_file_names_parse_back(tmp_path: Path):
    storage = _storage(tmp_path)
    [written] = LogFileWriter(storage, "a/b", FILE_ID, BASE_INSTANT, "12-3-45").append(_three_blocks())
    name = written.log_file.name
    assert name == f".{FILE_ID}_{BASE_INSTANT}.log.1_12-3-45"
    assert written.log_file.path == f"a/b/{name}"
    parsed = parse_log_file_name(name)
    assert parsed is not None
    assert (parsed.file_id, parsed.base_instant_time, parsed.version, parsed.write_token, parsed.is_cdc) == (
        FILE_ID,
        BASE_INSTANT,
        1,
        "12-3-45",
        False,
    )
    cdc = parse_log_file_name(log_file_name(FILE_ID, BASE_INSTANT, 7, "1-0-1", cdc=True))
    assert cdc is not None and cdc.is_cdc and cdc.version == 7
    with pytest.raises(ValueError, match="start at 1"):
        log_file_name(FILE_ID, BASE_INSTANT, 0, TOKEN)


def test_writer_rejects_a_non_positive_max_size(tmp_path: Path):
    with pytest.raises(ValueError, match="hoodie.logfile.max.size"):
        _writer(_storage(tmp_path), max_file_size=0)


def test_command_block_header_matches_hudi_rollback_blocks():
    block = CommandBlock.rollback("20250126040936578", "20250126040826878")
    assert dict(block.header) == {
        HeaderKey.INSTANT_TIME: "20250126040936578",
        HeaderKey.TARGET_INSTANT_TIME: "20250126040826878",
        HeaderKey.COMMAND_BLOCK_TYPE: "0",
    }
    assert len(encode_block(block)) == 105  # the size of Hudi's rollback block in the fixture
