"""The one-pass (polars) decoding of Avro data blocks returns exactly what per-record fastavro decoding does."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from lakeward.core.file_group.log_file import (
    AvroDataBlock,
    CdcDataBlock,
    DeleteBlock,
    HeaderKey,
    content,
    decode_avro_together,
    decode_block,
    decode_blocks,
    encode_block,
    scan_blocks,
)

SCHEMA = {
    "type": "record",
    "name": "r",
    "fields": [
        {"name": "k", "type": "string"},
        {"name": "n_first", "type": ["null", "long"], "default": None},
        {"name": "v", "type": ["null", "double"], "default": None},
        {"name": "i", "type": ["null", "int"], "default": None},
        {"name": "f", "type": ["null", "float"], "default": None},
        {"name": "b", "type": ["null", "boolean"], "default": None},
        {"name": "s", "type": ["null", "string"], "default": None},
        {"name": "raw", "type": ["null", "bytes"], "default": None},
        {"name": "t", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}], "default": None},
    ],
}


def _rows(n: int) -> pa.Table:
    return pa.table(
        {
            "k": [f"key-{i}-é" * (1 + i % 40) for i in range(n)],
            "n_first": pa.array([None if i % 7 == 0 else (-1) ** i * i * 10**12 for i in range(n)], pa.int64()),
            "v": pa.array([None if i % 5 == 0 else i / 3 for i in range(n)], pa.float64()),
            "i": pa.array([None if i % 3 == 0 else -(2**31) + i for i in range(n)], pa.int32()),
            "f": pa.array([None if i % 4 == 0 else float(i) for i in range(n)], pa.float32()),
            "b": pa.array([None if i % 6 == 0 else i % 2 == 0 for i in range(n)], pa.bool_()),
            "s": pa.array([None if i % 2 else "x" * (i % 300) for i in range(n)], pa.string()),
            "raw": pa.array([None if i % 9 == 0 else bytes([i % 256]) * (i % 20) for i in range(n)], pa.binary()),
            "t": pa.array([None if i % 8 == 0 else 1_700_000_000_000_000 + i for i in range(n)], pa.timestamp("us")),
        }
    )


@pytest.mark.parametrize("n", [1, 2, 1000])
def test_one_pass_decoding_equals_per_record_decoding(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    schema_json = json.dumps(SCHEMA)
    encoded = content.encode_avro_records(_rows(n), schema_json)
    _, arrow_schema = content._schemas(schema_json)
    physical = pa.schema([f.with_type(content._physical_type(f.type)) for f in arrow_schema])
    assert content._decode_with_polars(encoded, n, schema_json, physical) is not None  # the fast path is taken
    fast = content.decode_avro_records(encoded, schema_json)
    monkeypatch.setattr(content, "_decode_with_polars", lambda *args: None)
    slow = content.decode_avro_records(encoded, schema_json)
    assert fast.schema == slow.schema
    assert fast.equals(slow)
    assert fast.to_pylist() == slow.to_pylist()


def test_damaged_framing_falls_back_to_the_precise_error() -> None:
    schema_json = json.dumps(SCHEMA)
    encoded = bytearray(content.encode_avro_records(_rows(10), schema_json))
    encoded[12] ^= 0x7F  # the first record's length no longer matches
    with pytest.raises(content.CorruptTableError):
        content.decode_avro_records(bytes(encoded), schema_json)


def test_value_first_unions_take_the_per_record_path() -> None:
    """`[T, "null"]` unions (legal Avro, not what Hudi writes) decode correctly through fastavro."""
    schema = dict(SCHEMA, fields=[SCHEMA["fields"][0], {"name": "v", "type": ["double", "null"], "default": 0.0}])
    schema_json = json.dumps(schema)
    rows = _rows(20).select(["k", "v"])
    decoded = content.decode_avro_records(content.encode_avro_records(rows, schema_json), schema_json)
    assert decoded.to_pylist() == rows.to_pylist()


IMAGE = {
    "type": "record",
    "name": "img",
    "namespace": "hoodie.t",
    "fields": [
        {"name": "_hoodie_record_key", "type": ["null", "string"], "default": None},
        {"name": "n", "type": ["null", "long"], "default": None},
        {"name": "d", "type": ["null", "double"], "default": None},
        {"name": "t", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}], "default": None},
    ],
}
#: The shapes of Hudi's CDC blocks: key-only with value-first unions, one nested image, and
#: two images where the second refers to the first's named type.
CDC_SCHEMAS = {
    "KEY_OP": {
        "type": "record",
        "name": "Record",
        "fields": [{"name": "op", "type": ["string", "null"]}, {"name": "record_key", "type": ["string", "null"]}],
    },
    "DATA_BEFORE": {
        "type": "record",
        "name": "CDC",
        "fields": [
            {"name": "op", "type": ["null", "string"], "default": None},
            {"name": "record_key", "type": ["null", "string"], "default": None},
            {"name": "before", "type": ["null", IMAGE], "default": None},
        ],
    },
    "DATA_BEFORE_AFTER": {
        "type": "record",
        "name": "CDC",
        "namespace": "hoodie.t",
        "fields": [
            {"name": "op", "type": ["null", "string"], "default": None},
            {"name": "ts_ms", "type": ["null", "string"], "default": None},
            {"name": "before", "type": ["null", IMAGE], "default": None},
            {"name": "after", "type": ["null", "hoodie.t.img"], "default": None},
        ],
    },
}


def _cdc_rows(mode: str, n: int) -> pa.Table:
    image = pa.struct(
        [
            pa.field("_hoodie_record_key", pa.string()),
            pa.field("n", pa.int64()),
            pa.field("d", pa.float64()),
            pa.field("t", pa.timestamp("us")),
        ]
    )
    images = [
        None if i % 4 == 0 else {"_hoodie_record_key": f"k{i}é", "n": -(i**5), "d": i / 7, "t": None if i % 3 else i}
        for i in range(n)
    ]
    ops = [None if i % 11 == 5 else "iud"[i % 3] for i in range(n)]
    if mode == "KEY_OP":
        return pa.table({"op": ops, "record_key": [None if i % 13 == 1 else f"key-{i}" for i in range(n)]})
    if mode == "DATA_BEFORE":
        return pa.table({"op": ops, "record_key": [f"k{i}" for i in range(n)], "before": pa.array(images, image)})
    after = pa.array(list(reversed(images)), image)
    return pa.table({"op": ops, "ts_ms": ["20240101"] * n, "before": pa.array(images, image), "after": after})


@pytest.mark.parametrize("mode", sorted(CDC_SCHEMAS))
@pytest.mark.parametrize("n", [1, 300])
def test_cdc_blocks_decode_in_one_pass_as_record_by_record(mode: str, n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """CDC records (nested, nullable images; a named type used twice; value-first unions)
    take the one-pass path and decode to exactly what fastavro gives record by record."""
    schema_json = json.dumps(CDC_SCHEMAS[mode])
    rows = _cdc_rows(mode, n)
    encoded = content.encode_avro_records(rows, schema_json)
    _, arrow_schema = content._schemas(schema_json)
    physical = pa.schema([f.with_type(content._physical_type(f.type)) for f in arrow_schema])
    assert content._decode_with_polars(encoded, n, schema_json, physical) is not None
    fast = content.decode_avro_records(encoded, schema_json)
    monkeypatch.setattr(content, "_decode_with_polars", lambda *args: None)
    slow = content.decode_avro_records(encoded, schema_json)
    assert fast.schema == slow.schema
    assert fast.to_pylist() == slow.to_pylist()
    assert fast.to_pylist() == rows.cast(fast.schema).to_pylist()


def test_a_record_count_beyond_the_content_is_a_precise_error() -> None:
    """The one-pass path declines (it does not crash) on a block claiming more records than it holds."""
    schema_json = json.dumps(CDC_SCHEMAS["DATA_BEFORE_AFTER"])
    encoded = bytearray(content.encode_avro_records(_cdc_rows("DATA_BEFORE_AFTER", 10), schema_json))
    encoded[4:8] = (99).to_bytes(4, "big")
    with pytest.raises(content.CorruptTableError):
        content.decode_avro_records(bytes(encoded), schema_json)


@pytest.mark.parametrize("mode", sorted(CDC_SCHEMAS))
def test_many_blocks_decode_in_one_call_as_block_by_block(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Several blocks of one schema (an empty one among them) decoded in one pass give each
    block's records exactly as decoding it alone, record by record."""
    schema_json = json.dumps(CDC_SCHEMAS[mode])
    blocks = [_cdc_rows(mode, n).slice(start) for n, start in ((7, 0), (0, 0), (300, 13), (1, 0))]
    encoded = [content.encode_avro_records(rows, schema_json) for rows in blocks]
    together = content.decode_avro_blocks(encoded, schema_json)
    assert together is not None  # the one-call path is taken
    records, counts = together
    assert counts == [b.num_rows for b in blocks]
    monkeypatch.setattr(content, "_decode_with_polars", lambda *args: None)
    start = 0
    for block, rows, n in zip(encoded, blocks, counts):
        alone = content.decode_avro_records(block, schema_json)
        assert records.schema == alone.schema
        assert records.slice(start, n).to_pylist() == alone.to_pylist() == rows.cast(alone.schema).to_pylist()
        start += n


def test_one_damaged_block_makes_the_one_call_decline() -> None:
    """A block whose record lengths do not add up (though polars could read the records) makes
    the one-call path decline, so each block is decoded alone, with the precise error."""
    schema_json = json.dumps(SCHEMA)
    good = content.encode_avro_records(_rows(10), schema_json)
    bad = bytearray(content.encode_avro_records(_rows(5), schema_json))
    bad[11] ^= 0x01  # the low byte of the first record's length prefix: off by one, its datum intact
    assert content.decode_avro_blocks([good, good], schema_json) is not None
    assert content.decode_avro_blocks([good, bytes(bad)], schema_json) is None
    with pytest.raises(content.CorruptTableError):
        content.decode_avro_records(bytes(bad), schema_json)


def test_a_logs_blocks_decode_together_as_one_by_one() -> None:
    """`decode_blocks` over a log's mixed blocks (data blocks of two schemas, a delete block, CDC
    blocks) gives what `decode_block` gives for each, with the blocks of one schema in one pass."""
    schema_json = json.dumps(SCHEMA)
    narrow_json = json.dumps(dict(SCHEMA, fields=SCHEMA["fields"][:3]))
    cdc_json = json.dumps(CDC_SCHEMAS["DATA_BEFORE_AFTER"])
    rows = _rows(40)
    blocks = [
        AvroDataBlock(header={HeaderKey.INSTANT_TIME: "1", HeaderKey.SCHEMA: schema_json}, records=rows.slice(0, 9)),
        DeleteBlock.create("2", schema_json, ["key-1-é"], "p"),
        AvroDataBlock(
            header={HeaderKey.INSTANT_TIME: "3", HeaderKey.SCHEMA: narrow_json},
            records=rows.slice(9, 5).select(["k", "n_first", "v"]),
        ),
        AvroDataBlock(header={HeaderKey.INSTANT_TIME: "4", HeaderKey.SCHEMA: schema_json}, records=rows.slice(14)),
        CdcDataBlock.create(_cdc_rows("DATA_BEFORE_AFTER", 5), "4", cdc_json),
        CdcDataBlock.create(_cdc_rows("DATA_BEFORE_AFTER", 30), "5", cdc_json),
    ]
    raws = list(scan_blocks(b"".join(encode_block(b) for b in blocks)))
    together = decode_avro_together(raws)
    assert sorted(g.positions for g in together) == [[0, 3], [4, 5]]  # one pass per shared schema
    got, alone = decode_blocks(raws), [decode_block(r) for r in raws]
    assert [type(b) for b in got] == [type(b) for b in alone]
    for a, b in zip(got, alone):
        assert a.header == b.header
        assert a.records.schema == b.records.schema
        assert a.records.to_pylist() == b.records.to_pylist()
