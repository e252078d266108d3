"""Vectorised Avro record encoding: byte for byte what fastavro writes, one record at a time.

The reference is fastavro's `schemaless_writer` per record, framed with a big-endian int32
length (the loop of `content.encode_avro_records`), on the same rows after the same
physical casts (dates, times and timestamps as their ints).
"""

from __future__ import annotations

import io
import json
import struct
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lakeward.core.file_group.log_file import avro_vector
from lakeward.core.file_group.log_file.avro_vector import encode_block_records
from lakeward.core.file_group.log_file.content import encode_avro_records
from lakeward.core.schema import avro_schema_json

TIME_LOGICAL = {
    "date",
    "time-millis",
    "time-micros",
    "timestamp-millis",
    "timestamp-micros",
    "timestamp-nanos",
    "local-timestamp-millis",
    "local-timestamp-micros",
    "local-timestamp-nanos",
}
INT64 = np.iinfo(np.int64)
INT32 = np.iinfo(np.int32)


def _strip(node: Any) -> Any:
    if isinstance(node, list):
        return [_strip(n) for n in node]
    if isinstance(node, dict):
        out = {k: _strip(v) for k, v in node.items() if not (k == "logicalType" and v in TIME_LOGICAL)}
        if "fields" in node:
            out["fields"] = [dict(f, type=_strip(f["type"])) for f in node["fields"]]
        return out
    return node


def _physical(column: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    t = column.type
    if pa.types.is_timestamp(t) or pa.types.is_time64(t):
        return pc.cast(column, pa.int64())
    if pa.types.is_date32(t) or pa.types.is_time32(t):
        return pc.cast(column, pa.int32())
    return column


def fastavro_records(table: pa.Table, schema: dict[str, Any]) -> bytes:
    """The reference: every row through fastavro's schemaless writer, framed with its length."""
    parsed = fastavro.parse_schema(_strip(schema))
    columns = {name: _physical(table.column(name)).to_pylist() for name in table.column_names}
    out = io.BytesIO()
    for i in range(table.num_rows):
        datum = io.BytesIO()
        fastavro.schemaless_writer(datum, parsed, {name: values[i] for name, values in columns.items()})
        out.write(struct.pack(">i", len(datum.getvalue())) + datum.getvalue())
    return out.getvalue()


def _record(*fields: tuple[str, Any]) -> dict[str, Any]:
    return {
        "type": "record",
        "name": "r",
        "namespace": "hoodie.t",
        "fields": [{"name": n, "type": t} for n, t in fields],
    }


def _assert_same(table: pa.Table, schema: dict[str, Any]) -> bytes:
    expected = fastavro_records(table, schema)
    got = encode_block_records(table, fastavro.parse_schema(_strip(schema)))
    assert got is not None
    assert got == expected
    # The plain JSON schema (not parsed by fastavro, logical types kept) gives the same bytes.
    assert encode_block_records(table, schema) == expected
    return got


def _nullable(avro_type: Any, order: str) -> Any:
    return {"required": avro_type, "null_first": ["null", avro_type], "null_last": [avro_type, "null"]}[order]


# -- every supported type ---------------------------------------------------------------------
LONGS = [
    0,
    1,
    -1,
    63,
    -64,
    64,
    -65,
    *(
        v
        for k in range(1, 10)
        for v in (2 ** (7 * k) - 1, 2 ** (7 * k), -(2 ** (7 * k)), -(2 ** (7 * k)) - 1)
        if INT64.min <= v <= INT64.max
    ),
    int(INT64.max),
    int(INT64.min),
    int(INT64.max) - 1,
    int(INT64.min) + 1,
    1_700_000_000_000_000,
]
INTS = [0, 1, -1, 63, -64, 64, -65, 8191, -8192, 1_048_575, int(INT32.max), int(INT32.min), 300, -300]
DOUBLES = [0.0, -0.0, 1.5, -2.25, float("nan"), float("inf"), float("-inf"), 5e-324, 1.7976931348623157e308, 1e-300]
FLOATS = [0.0, -0.0, 1.5, float("nan"), float("inf"), float("-inf"), 1e-45, 3.4028234663852886e38, 0.1]
STRINGS = ["", "a", "é", "日本語テキスト", "🙂" * 40, "x" * 127, "y" * 128, "z" * 16383, "w" * 16384, "v" * 100_000]
BYTES = [b"", b"\x00", b"\xff\x00\xfe", bytes(range(256)), b"q" * 20_000]

#: (Avro type, Arrow type, values) of every supported type.
TYPES: list[tuple[str, Any, pa.DataType, list[Any]]] = [
    ("boolean", "boolean", pa.bool_(), [True, False, False, True]),
    ("int", "int", pa.int32(), INTS),
    ("long", "long", pa.int64(), LONGS),
    ("float", "float", pa.float32(), FLOATS),
    ("double", "double", pa.float64(), DOUBLES),
    ("string", "string", pa.string(), STRINGS),
    ("large_string", "string", pa.large_string(), STRINGS),
    ("bytes", "bytes", pa.binary(), BYTES),
    ("large_binary", "bytes", pa.large_binary(), BYTES),
    ("uuid", {"type": "string", "logicalType": "uuid"}, pa.string(), ["0b6f1c4e-8d2a-4c55-9f0e-5d3c2b1a0f9e", ""]),
    ("date", {"type": "int", "logicalType": "date"}, pa.date32(), [0, 1, -1, 19_000, -719_162, 2_932_896]),
    ("date_as_int", {"type": "int", "logicalType": "date"}, pa.int32(), [0, 20_000, -5]),
    (
        "timestamp_us",
        {"type": "long", "logicalType": "timestamp-micros"},
        pa.timestamp("us", "UTC"),
        [0, 1, -1, 1_735_732_800_123_456, -62_135_596_800_000_000, 253_402_300_799_999_999],
    ),
    ("timestamp_ms", {"type": "long", "logicalType": "timestamp-millis"}, pa.timestamp("ms", "UTC"), [0, -1, 10**15]),
    ("timestamp_ns", {"type": "long", "logicalType": "timestamp-nanos"}, pa.timestamp("ns"), LONGS),
    ("local_ts", {"type": "long", "logicalType": "local-timestamp-micros"}, pa.timestamp("us"), [5, -5, 10**17]),
    ("timestamp_as_long", {"type": "long", "logicalType": "timestamp-micros"}, pa.int64(), LONGS),
    ("time_ms", {"type": "int", "logicalType": "time-millis"}, pa.time32("ms"), [0, 1, 86_399_999]),
    ("time_us", {"type": "long", "logicalType": "time-micros"}, pa.time64("us"), [0, 1, 86_399_999_999]),
    ("int8_as_int", "int", pa.int8(), [0, -128, 127]),
    ("int16_as_long", "long", pa.int16(), [0, -32768, 32767]),
    ("uint32_as_long", "long", pa.uint32(), [0, 2**32 - 1, 2**31]),
    ("uint16_as_int", "int", pa.uint16(), [0, 65535]),
]
TYPE_IDS = [t[0] for t in TYPES]


def _array(arrow_type: pa.DataType, values: list[Any]) -> pa.Array:
    if pa.types.is_timestamp(arrow_type) or pa.types.is_time(arrow_type) or pa.types.is_date32(arrow_type):
        storage = pa.int64() if arrow_type.bit_width == 64 else pa.int32()
        return pa.array(values, storage).view(arrow_type)
    return pa.array(values, arrow_type)


@pytest.mark.parametrize("order", ["required", "null_first", "null_last"])
@pytest.mark.parametrize(("name", "avro_type", "arrow_type", "values"), TYPES, ids=TYPE_IDS)
def test_every_supported_type_encodes_like_fastavro(
    name: str, avro_type: Any, arrow_type: pa.DataType, values: list[Any], order: str
) -> None:
    if order != "required":
        values = [None, *values[:2], None, None, *values[2:], None]
    table = pa.table({name: _array(arrow_type, values)})
    _assert_same(table, _record((name, _nullable(avro_type, order))))


@pytest.mark.parametrize("order", ["null_first", "null_last"])
@pytest.mark.parametrize(("name", "avro_type", "arrow_type", "values"), TYPES, ids=TYPE_IDS)
def test_all_null_columns_and_sliced_nullable_columns(
    name: str, avro_type: Any, arrow_type: pa.DataType, values: list[Any], order: str
) -> None:
    schema = _record(("k", _nullable("long", order)), (name, _nullable(avro_type, order)))
    n = 7
    _assert_same(pa.table({"k": pa.nulls(n, pa.int64()), name: pa.nulls(n, arrow_type)}), schema)
    # Validity bitmaps and values at odd bit/byte offsets: slices of a longer column.
    cycled = [None if i % 3 == 0 else values[i % len(values)] for i in range(70)]
    table = pa.table({"k": pa.array(range(70), pa.int64()), name: _array(arrow_type, cycled)})
    for start, length in ((3, 50), (1, 9), (13, 0), (69, 1), (0, 70)):
        _assert_same(table.slice(start, length), schema)


def test_floats_keep_their_bits_and_signalling_nans_come_out_as_fastavro_writes_them() -> None:
    float_bits = np.array([0x7F800001, 0x7FC00001, 0xFF800123, 0x7FBFFFFF, 0x00000001, 0x80000000], dtype=np.uint32)
    double_bits = np.array([0x7FF0000000000001, 0xFFF8000000000123, 0x8000000000000000, 1], dtype=np.uint64)
    schema = _record(("f", "float"), ("d", ["null", "double"]))
    table = pa.table(
        {
            "f": pa.array(float_bits.view(np.float32)),
            "d": pa.array(np.resize(double_bits, len(float_bits)).view(np.float64)),
        }
    )
    _assert_same(table, schema)


# -- whole records ----------------------------------------------------------------------------
def _random_table(rng: np.random.Generator, n: int, null_rate: float) -> pa.Table:
    def nulls(values: pa.Array) -> pa.Array:
        if null_rate == 0:
            return values
        mask = pa.array(rng.random(n) < null_rate)
        return pc.if_else(mask, pa.nulls(n, values.type), values)

    words = np.array(["", "a", "ab", "é日", "x" * 130, "tail🙂", "p=1/q=2"], dtype=object)
    longs = rng.integers(INT64.min, INT64.max, n, dtype=np.int64, endpoint=True) >> rng.integers(0, 64, n)
    return pa.table(
        {
            "_hoodie_commit_time": nulls(pa.array(["20251121080000000"] * n)),
            "l": nulls(pa.array(longs)),
            "i": nulls(pa.array(rng.integers(INT32.min, INT32.max, n, dtype=np.int32, endpoint=True))),
            "s": nulls(pa.array(words[rng.integers(0, len(words), n)].tolist(), pa.string())),
            "d": nulls(pa.array(rng.standard_normal(n) * 10.0 ** rng.integers(-300, 300, n))),
            "f": nulls(pa.array(rng.standard_normal(n).astype(np.float32))),
            "b": nulls(pa.array(rng.random(n) < 0.5)),
            "y": nulls(pa.array([bytes(rng.integers(0, 256, k, dtype=np.uint8)) for k in rng.integers(0, 40, n)])),
            "ts": nulls(pa.array(longs // 1000).cast(pa.timestamp("us", "UTC"))),
            "day": nulls(pa.array(rng.integers(-100_000, 100_000, n, dtype=np.int32)).cast(pa.date32())),
        }
    )


def _random_schema(order: str) -> dict[str, Any]:
    types = {
        "_hoodie_commit_time": "string",
        "l": "long",
        "i": "int",
        "s": "string",
        "d": "double",
        "f": "float",
        "b": "boolean",
        "y": "bytes",
        "ts": {"type": "long", "logicalType": "timestamp-micros"},
        "day": {"type": "int", "logicalType": "date"},
    }
    return _record(*((name, _nullable(t, order)) for name, t in types.items()))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("order", ["null_first", "null_last"])
def test_random_records_of_every_type_with_nulls(seed: int, order: str) -> None:
    rng = np.random.default_rng(seed)
    table = _random_table(rng, int(rng.integers(1, 400)), null_rate=[0.0, 0.2, 0.9][seed % 3])
    _assert_same(table, _random_schema(order))


def test_required_fields_without_nulls() -> None:
    table = _random_table(np.random.default_rng(7), 300, null_rate=0.0)
    _assert_same(table, _random_schema("required"))


def test_mixed_union_orders_and_required_fields_in_one_record() -> None:
    table = _random_table(np.random.default_rng(8), 200, null_rate=0.0)
    table = table.set_column(3, "s", pc.if_else(pa.array(np.arange(200) % 4 == 0), None, table.column("s")))
    schema = _random_schema("required")
    for i, field in enumerate(schema["fields"]):
        field["type"] = (
            [field["type"], "null"] if i % 3 == 0 else ["null", field["type"]] if i % 3 == 1 else field["type"]
        )
    assert "null" in schema["fields"][3]["type"]  # s has nulls
    _assert_same(table, schema)


def test_chunked_and_sliced_columns() -> None:
    rng = np.random.default_rng(11)
    table = _random_table(rng, 90, null_rate=0.3)
    schema = _random_schema("null_first")
    chunked = pa.Table.from_batches(
        [
            b
            for t in (table.slice(0, 10), table.slice(10, 0), table.slice(10, 47), table.slice(57))
            for b in t.to_batches()
        ]
    )
    assert chunked.column("s").num_chunks > 1
    expected = fastavro_records(table, schema)
    assert _assert_same(chunked, schema) == expected
    # Columns chunked differently from each other.
    mixed = pa.table(
        {
            name: pa.chunked_array([col.combine_chunks().slice(0, k), col.combine_chunks().slice(k)])
            for k, (name, col) in enumerate(zip(table.column_names, table.columns))
        }
    )
    assert _assert_same(mixed, schema) == expected
    assert _assert_same(table.slice(3, 50), schema) == fastavro_records(table.slice(3, 50), schema)


def test_zero_rows_one_column_and_no_fields() -> None:
    schema = _random_schema("null_last")
    empty = _random_table(np.random.default_rng(1), 5, null_rate=0.5).slice(5)
    assert encode_block_records(empty, schema) == b""
    assert encode_block_records(pa.table({"x": pa.array([], pa.int64())}), _record(("x", "long"))) == b""
    one = pa.table({"x": pa.array([5, -3, None], pa.int64())})
    assert (
        _assert_same(one, _record(("x", ["null", "long"])))
        == b"\x00\x00\x00\x02\x02\x0a\x00\x00\x00\x02\x02\x05\x00\x00\x00\x01\x00"
    )
    no_columns = pa.table({"x": [1, 2, 3]}).drop_columns(["x"])
    assert encode_block_records(no_columns, _record()) == b"\x00\x00\x00\x00" * 3
    # Columns the schema does not name are not written (fastavro ignores extra keys too).
    extra = pa.table({"x": pa.array([1, 2], pa.int64()), "other": ["a", "b"]})
    assert encode_block_records(extra, _record(("x", "long"))) == fastavro_records(
        extra.select(["x"]), _record(("x", "long"))
    )


def test_rows_longer_than_a_gather_block_and_many_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    table = _random_table(np.random.default_rng(5), 500, null_rate=0.1)
    schema = _random_schema("null_first")
    expected = fastavro_records(table, schema)
    for block in (1, 7, 64, 1000):
        monkeypatch.setattr(avro_vector, "_BLOCK_BYTES", block)
        assert encode_block_records(table, schema) == expected
    big = pa.table({"s": ["a" * 70_000, "", "b" * 5, None] * 3})
    monkeypatch.setattr(avro_vector, "_BLOCK_BYTES", 100)
    _assert_same(big, _record(("s", ["null", "string"])))


def test_string_nulls_with_bytes_behind_them_write_nothing_but_the_branch() -> None:
    """Arrow lets a null slot span bytes of the data buffer; they must not be written."""
    data = b"abcdefghij"
    offsets = np.array([0, 3, 7, 10], dtype=np.int32)
    validity = np.packbits(np.array([1, 0, 1, 0, 0, 0, 0, 0], dtype=bool), bitorder="little")
    arr = pa.StringArray.from_buffers(3, pa.py_buffer(offsets), pa.py_buffer(data), pa.py_buffer(validity))
    assert arr.to_pylist() == ["abc", None, "hij"]
    _assert_same(pa.table({"s": arr}), _record(("s", ["string", "null"])))


# -- refused: the caller falls back to fastavro -----------------------------------------------
UNSUPPORTED: list[tuple[str, Any, pa.Array]] = [
    ("record", {"type": "record", "name": "inner", "fields": [{"name": "a", "type": "long"}]}, pa.array([{"a": 1}])),
    ("array", {"type": "array", "items": "long"}, pa.array([[1, 2]])),
    ("map", {"type": "map", "values": "long"}, pa.array([[("a", 1)]], pa.map_(pa.string(), pa.int64()))),
    ("enum", {"type": "enum", "name": "e", "symbols": ["A", "B"]}, pa.array(["A"])),
    ("fixed", {"type": "fixed", "name": "f", "size": 2}, pa.array([b"ab"], pa.binary(2))),
    (
        "decimal_bytes",
        {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 2},
        pa.array([1], pa.decimal128(5, 2)),
    ),
    (
        "decimal_fixed",
        {"type": "fixed", "name": "d", "size": 4, "logicalType": "decimal", "precision": 5, "scale": 2},
        pa.array([1], pa.decimal128(5, 2)),
    ),
    ("big_decimal", {"type": "bytes", "logicalType": "big-decimal"}, pa.array([b"1"])),
    ("unknown_logical", {"type": "long", "logicalType": "mystery"}, pa.array([1])),
    ("null", "null", pa.nulls(1)),
    ("three_branches", ["null", "long", "string"], pa.array([1])),
    ("no_null_branch", ["long", "string"], pa.array([1])),
    ("only_null", ["null"], pa.nulls(1)),
    ("named_reference", "hoodie.t.other", pa.array([1])),
    ("long_as_string", "long", pa.array(["1"])),
    ("string_as_binary", "string", pa.array([b"1"])),
    ("bytes_as_string", "bytes", pa.array(["1"])),
    ("float_as_double", "float", pa.array([1.0], pa.float64())),
    ("double_as_float", "double", pa.array([1.0], pa.float32())),
    ("long_as_uint64", "long", pa.array([1], pa.uint64())),
    ("int_as_int64", "int", pa.array([1], pa.int64())),
    ("int_as_uint32", "int", pa.array([1], pa.uint32())),
    ("int_as_timestamp", "int", pa.array([1], pa.timestamp("us"))),
    ("long_as_date64", "long", pa.array([0], pa.date64())),
    ("dictionary_string", "string", pa.array(["a"]).dictionary_encode()),
]


@pytest.mark.parametrize(("name", "avro_type", "values"), UNSUPPORTED, ids=[u[0] for u in UNSUPPORTED])
def test_unsupported_types_return_none(name: str, avro_type: Any, values: pa.Array) -> None:
    table = pa.table({"k": pa.array([1] * len(values), pa.int64()), "x": values})
    assert encode_block_records(table, _record(("k", "long"), ("x", avro_type))) is None
    assert encode_block_records(table.slice(0, 0), _record(("k", "long"), ("x", avro_type))) is None


def test_schemas_that_are_not_flat_records_or_miss_columns_return_none() -> None:
    table = pa.table({"x": pa.array([1], pa.int64())})
    assert encode_block_records(table, {"type": "array", "items": "long"}) is None
    assert encode_block_records(table, _record(("x", "long"), ("missing", ["null", "long"]))) is None
    duplicated = pa.Table.from_arrays([pa.array([1]), pa.array([2])], names=["x", "x"])
    assert encode_block_records(duplicated, _record(("x", "long"))) is None


def test_nulls_in_a_required_field_name_the_field() -> None:
    table = pa.table({"ok": pa.array([1, 2], pa.int64()), "amount": pa.array([1.5, None])})
    with pytest.raises(ValueError, match="'amount'"):
        encode_block_records(table, _record(("ok", "long"), ("amount", "double")))
    # A null outside the slice is no null.
    assert _assert_same(table.slice(0, 1), _record(("ok", "long"), ("amount", "double")))


# -- encode_avro_records ----------------------------------------------------------------------
@pytest.fixture
def fastavro_only(monkeypatch: pytest.MonkeyPatch) -> Any:
    """`encode_avro_records` with its vectorised path switched off: the fastavro loop alone."""

    def encode(records: pa.Table, schema_json: str) -> bytes:
        with monkeypatch.context() as patch:
            patch.setattr(avro_vector, "encode_block_records", lambda table, schema: None)
            return encode_avro_records(records, schema_json)

    return encode


def _benchmark_table(n: int, seed: int = 20240607) -> pa.Table:
    """The columns of benchmarks/upsert_and_read.py (`make_dataset`) plus the five meta columns."""
    rng = np.random.default_rng(seed)
    ids = rng.permutation(n).astype(np.int64)
    parts = pc.take(pa.array([f"p{i}" for i in range(4)]), pa.array(rng.integers(0, 4, n)))
    num = pa.array(rng.integers(0, 10_000_000, n, dtype=np.int64)).cast(pa.string())
    suffix = pa.array(np.array(list("abcdefghijklmnopqrstuvwxyz"))[rng.integers(0, 26, n)])
    instant = "20251121080000000"
    return pa.table(
        {
            "_hoodie_commit_time": pa.repeat(pa.scalar(instant), n),
            "_hoodie_commit_seqno": pc.binary_join_element_wise(
                f"{instant}_0_", pa.array(np.arange(n)).cast(pa.string()), ""
            ),
            "_hoodie_record_key": pa.array(ids).cast(pa.string()),
            "_hoodie_partition_path": parts,
            "_hoodie_file_name": pa.repeat(pa.scalar("3f2a0c1e-5b6d-4e7f-8a9b-0c1d2e3f4a5b-0"), n),
            "id": pa.array(ids),
            "part": parts,
            "ts": pa.array(rng.integers(0, 1_000_000_000, n, dtype=np.int64)),
            "name": pc.binary_join_element_wise("name", num, suffix, "_"),
            "amount": pa.array(np.round(rng.uniform(0.0, 10_000.0, n), 2)),
            "qty": pa.array(rng.integers(0, 1000, n, dtype=np.int32)),
            "flag": pa.array(rng.random(n) < 0.5),
        }
    )


@pytest.mark.slow  # ~15 s: 200k rows through both encoders
def test_benchmark_table_of_200k_rows_encodes_identically(fastavro_only: Any) -> None:
    table = _benchmark_table(200_000)
    for null_first in (True, False):
        schema_json = avro_schema_json(table.schema, "bench", with_meta=True, null_first=null_first)
        expected = fastavro_only(table, schema_json)
        assert encode_avro_records(table, schema_json) == expected
        assert encode_block_records(table, json.loads(schema_json)) == expected[8:]


def test_encode_avro_records_uses_the_vectorised_path_and_falls_back_for_other_schemas(
    fastavro_only: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    flat = _benchmark_table(100)
    schema_json = avro_schema_json(flat.schema, "bench", with_meta=True)
    expected = fastavro_only(flat, schema_json)
    assert expected[:8] == struct.pack(">ii", 3, 100)
    calls: list[bytes | None] = []

    def spy(table: pa.Table, schema: dict[str, Any]) -> bytes | None:
        calls.append(encode_block_records(table, schema))
        return calls[-1]

    monkeypatch.setattr(avro_vector, "encode_block_records", spy)
    # Logical types of the Arrow schema (dates, timestamps) and a missing nullable column.
    dated = flat.append_column("day", pa.array(np.arange(100, dtype=np.int32)).cast(pa.date32()))
    dated = dated.append_column("at", pa.array(np.arange(100) * 10**9, pa.int64()).cast(pa.timestamp("us", "UTC")))
    dated_json = avro_schema_json(dated.schema.append(pa.field("later", pa.float32())), "bench", with_meta=True)
    assert encode_avro_records(flat, schema_json) == expected
    assert encode_avro_records(dated, dated_json) == fastavro_only(dated, dated_json)
    assert encode_avro_records(flat.slice(0, 0), schema_json) == struct.pack(">ii", 3, 0)
    assert calls[0] is not None and calls[1] is not None
    # A list column: not vectorised, encoded by fastavro all the same.
    listed = flat.append_column("tags", pa.array([["a", "b"]] * 100))
    listed_json = avro_schema_json(listed.schema, "bench", with_meta=True)
    assert encode_avro_records(listed, listed_json) == fastavro_only(listed, listed_json)
    assert calls[-1] is None
