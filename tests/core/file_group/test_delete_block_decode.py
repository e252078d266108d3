"""Delete blocks decoded column-wise (polars) give exactly what entry-by-entry fastavro decoding gives.

`content._decode_deletes_with_fastavro` is the reference: the decoder every delete block went
through before, and still the fallback for any block the column-wise path does not take.
"""

from __future__ import annotations

import io
import random
import struct
import zipfile
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pytest

from lakeward.core.exceptions import CorruptTableError
from lakeward.core.file_group.log_file import BlockType, RawBlock, content, scan_blocks
from lakeward.core.file_group.naming import parse_log_file_name
from tests.support.fixture_tables import shared_dir

_NS = "org.apache.hudi.avro.model."
Entry = tuple[str | None, str | None, tuple[str, Any] | None]

_CHARS = "abcXYZ019-_/=.:éßø中文🙂\u0000"


def _text(rng: random.Random, longest: int = 40) -> str:
    return "".join(rng.choice(_CHARS) for _ in range(rng.randint(0, longest)))


#: A random value of each wrapper's Avro type (as fastavro writes it), edge values included.
_VALUES: dict[str, Callable[[random.Random], Any]] = {
    "BooleanWrapper": lambda r: r.random() < 0.5,
    "IntWrapper": lambda r: r.choice([0, -1, 2**31 - 1, -(2**31), r.randint(-(2**31), 2**31 - 1), r.randint(-99, 99)]),
    "LongWrapper": lambda r: r.choice([0, 2**63 - 1, -(2**63), r.randint(-(2**63), 2**63 - 1), r.randint(-9999, 9999)]),
    "FloatWrapper": lambda r: r.choice([0.0, -0.0, 1.5, float("inf"), float("nan"), r.uniform(-1e30, 1e30)]),
    "DoubleWrapper": lambda r: r.choice([0.0, -0.0, float("inf"), float("nan"), 5e-324, r.uniform(-1e300, 1e300)]),
    "BytesWrapper": lambda r: r.randbytes(r.randint(0, 40)),
    "StringWrapper": lambda r: _text(r),
    "DateWrapper": lambda r: r.randint(-1_000_000, 1_000_000),
    "DecimalWrapper": lambda r: Decimal(r.randint(-(10**30) + 1, 10**30 - 1)).scaleb(-15),
    "TimeMicrosWrapper": lambda r: r.randint(0, 86_400_000_000 - 1),
    "TimestampMicrosWrapper": lambda r: r.randint(-(2**62), 2**62),
}
WRAPPERS = [name for name, _ in content.ORDERING_WRAPPERS]


def _payload(entries: list[Entry]) -> bytes:
    """A `HoodieDeleteRecordList` datum of `entries` (any wrappers, any mix), written by fastavro."""
    out = io.BytesIO()
    records = [
        {"recordKey": k, "partitionPath": p, "orderingVal": None if o is None else (_NS + o[0], {"value": o[1]})}
        for k, p, o in entries
    ]
    fastavro.schemaless_writer(out, content._DELETE_SCHEMA, {"deleteRecordList": records})
    return out.getvalue()


def _block(payload: bytes) -> bytes:
    return struct.pack(">ii", content.DELETE_BLOCK_VERSION, len(payload)) + payload


def _same(new: pa.Table, old: pa.Table) -> None:
    """Equal schemas and values; floats compared by their bits (NaN payloads included)."""
    assert new.schema == old.schema
    assert new.num_rows == old.num_rows
    for a, b in zip(new.columns, old.columns):
        a, b = a.combine_chunks(), b.combine_chunks()
        if pa.types.is_floating(a.type):
            bits = pa.uint32() if a.type == pa.float32() else pa.uint64()
            a, b = a.view(bits), b.view(bits)
        assert a.equals(b)


def _check(payload: bytes, *, fast: bool = True) -> pa.Table:
    """The decoded block, asserted equal to the fastavro decoding, and the column-wise decoding
    equal to it too (taken if `fast`; `decode_delete_records` sends small blocks to fastavro)."""
    reference = content._decode_deletes_with_fastavro(payload)
    column_wise = content._decode_deletes_column_wise(payload)
    assert (column_wise is not None) == fast
    if column_wise is not None:
        _same(column_wise, reference)
    new = content.decode_delete_records(_block(payload))
    _same(new, reference)
    return new


def _entries(rng: random.Random, n: int, wrapper: str | None, nulls: bool = True) -> list[Entry]:
    out: list[Entry] = []
    for _ in range(n):
        key = None if nulls and rng.random() < 0.05 else _text(rng)
        partition = None if nulls and rng.random() < 0.05 else _text(rng, 10)
        out.append((key, partition, None if wrapper is None else (wrapper, _VALUES[wrapper](rng))))
    return out


@pytest.mark.parametrize("wrapper", WRAPPERS)
@pytest.mark.parametrize("n", [1, 7, 1000])
def test_every_wrapper_decodes_column_wise_as_fastavro_does(wrapper: str, n: int) -> None:
    rng = random.Random(f"{wrapper}-{n}")
    new = _check(_payload(_entries(rng, n, wrapper)))
    assert new.num_rows == n


@pytest.mark.parametrize("n", [content.COLUMN_WISE_MIN_ENTRIES - 1, content.COLUMN_WISE_MIN_ENTRIES])
def test_small_blocks_decode_with_fastavro_and_larger_ones_column_wise(n: int, monkeypatch: Any) -> None:
    """Below `COLUMN_WISE_MIN_ENTRIES` entries fastavro is the cheaper decoder (the column-wise
    path's fixed cost): `decode_delete_records` takes it there, with the same result."""
    payload = _payload(_entries(random.Random(n), n, "LongWrapper"))
    taken: list[str] = []
    for name in ("_decode_deletes_with_fastavro", "_decode_deletes_column_wise"):
        decoder = getattr(content, name)
        monkeypatch.setattr(content, name, lambda p, decoder=decoder, name=name: taken.append(name) or decoder(p))
    _check(payload)
    taken.clear()
    content.decode_delete_records(_block(payload))
    small = n < content.COLUMN_WISE_MIN_ENTRIES
    assert taken == (["_decode_deletes_with_fastavro"] if small else ["_decode_deletes_column_wise"])


@pytest.mark.parametrize("n", [1, 1000])
def test_null_ordering_values_decode_column_wise(n: int) -> None:
    new = _check(_payload(_entries(random.Random(n), n, None)))
    assert new.column("ordering_value").type == pa.int64()
    assert new.column("ordering_value").null_count == n


def test_empty_list_decodes_column_wise() -> None:
    new = _check(_payload([]))
    assert new.num_rows == 0


def test_a_large_block_of_encoded_deletes_decodes_column_wise() -> None:
    n = 100_000
    records = pa.table(
        {
            "record_key": [f"uuid-{i:06d}-ключ" for i in range(n)],
            "partition_path": [f"city={i % 7}" for i in range(n)],
            "ordering_value": pa.array([i * 1_000_003 - 2**40 for i in range(n)], pa.int64()),
        }
    )
    payload = content.encode_delete_records(records)[8:]
    new = _check(payload)
    assert new.column("record_key").equals(records.column("record_key"))
    assert new.column("ordering_value").equals(records.column("ordering_value"))


def test_int_and_long_wrappers_mixed_decode_as_longs_column_wise() -> None:
    entries: list[Entry] = [
        ("a", "p", ("IntWrapper", 5)),
        ("b", "p", ("LongWrapper", 2**40)),
        ("c", None, ("IntWrapper", -1)),
    ]
    new = _check(_payload(entries))
    assert new.column("ordering_value").to_pylist() == [5, 2**40, -1]
    assert _check(_payload(entries[1:])).column("ordering_value").type == pa.int64()
    assert _check(_payload(entries[:1])).column("ordering_value").type == pa.int32()


@pytest.mark.parametrize(
    "entries",
    [
        [("a", "p", None), ("b", "p", ("LongWrapper", 3))],  # null and non-null ordering values
        [("a", "p", ("LongWrapper", 3)), ("b", "p", None)],
    ],
)
def test_blocks_the_column_wise_path_does_not_take_decode_with_fastavro(entries: list[Entry]) -> None:
    _check(_payload(entries), fast=False)


def test_mixed_wrappers_are_refused_by_both_paths() -> None:
    payload = _payload([("a", "p", ("LongWrapper", 3)), ("b", "p", ("StringWrapper", "x"))])
    assert content._decode_deletes_column_wise(payload) is None
    with pytest.raises(CorruptTableError, match="mixes"):
        content.decode_delete_records(_block(payload))


def test_an_array_in_several_blocks_decodes_with_fastavro() -> None:
    first = _payload([("a", "p", ("LongWrapper", 1)), ("b", "p", ("LongWrapper", 2))])
    second = _payload([("c", "q", ("LongWrapper", 3))])
    payload = first[:-1] + second  # two array blocks, then the end marker
    new = _check(payload, fast=False)
    assert new.column("record_key").to_pylist() == ["a", "b", "c"]


def test_a_boolean_byte_other_than_0_or_1_reads_as_fastavro_reads_it() -> None:
    payload = bytearray(_payload([("a", "p", ("BooleanWrapper", True)), ("b", "p", ("BooleanWrapper", True))]))
    assert payload[-2] == 1
    payload[-2] = 7  # the last entry's boolean
    new = _check(bytes(payload), fast=False)
    assert new.column("ordering_value").to_pylist() == [True, True]


def test_signalling_nan_floats_come_back_as_fastavro_leaves_them() -> None:
    payload = bytearray(_payload([("a", "p", ("FloatWrapper", 1.0))]))
    payload[-5:-1] = struct.pack("<I", 0x7F800001)  # a signalling NaN
    new = _check(bytes(payload))
    assert new.column("ordering_value").combine_chunks().view(pa.uint32()).to_pylist() == [0x7FC00001]


def test_decimals_of_every_width_and_past_the_precision() -> None:
    values = [Decimal(0), Decimal("1e-15"), Decimal("-1e-15"), Decimal("-128e-15"), Decimal("127e-15")]
    values += [Decimal(10**29 - 1).scaleb(-15), Decimal(-(10**29)).scaleb(-15), Decimal(-(2**96)).scaleb(-15)]
    _check(_payload([("k", "p", ("DecimalWrapper", v)) for v in values]))
    # Unscaled values of 31+ digits: fastavro rounds them to 30; the fast path leaves them to it.
    past = _payload([("k", "p", ("DecimalWrapper", Decimal(10**31 + 7).scaleb(-15)))])
    assert content._decode_deletes_column_wise(past) is None
    # An empty unscaled value is 0.
    empty = bytearray(_payload([("k", "p", ("DecimalWrapper", Decimal(0)))]))
    assert empty[-3:] == b"\x02\x00\x00"  # length 1, the byte 0, end of the array
    _check(bytes(empty[:-3] + b"\x00\x00"))


@pytest.mark.parametrize(
    "damage",
    [
        lambda p: p[:-1],  # no end marker
        lambda p: p + b"\x00",  # a byte after the array
        lambda p: p[:-3] + p[-1:],  # an entry cut short
        lambda p: p.replace("é".encode(), b"\xff\xfe"),  # not UTF-8
    ],
)
def test_damaged_payloads_are_refused_as_before(damage: Callable[[bytes], bytes]) -> None:
    payload = damage(_payload([("kéy", "p", ("LongWrapper", 10**12)), ("b", "é", ("LongWrapper", 3))]))
    with pytest.raises(CorruptTableError):
        content._decode_deletes_with_fastavro(payload)
    assert content._decode_deletes_column_wise(payload) is None
    with pytest.raises(CorruptTableError):
        content.decode_delete_records(_block(payload))


def _hudi_delete_payloads(archive: Path) -> list[bytes]:
    """The payloads of every delete block in the log files of a fixture zip (metadata tables included)."""
    payloads = []
    with zipfile.ZipFile(archive) as zf:
        for name in zf.namelist():
            if parse_log_file_name(name.rsplit("/", 1)[-1]) is None:
                continue
            for raw in scan_blocks(zf.read(name)):
                if isinstance(raw, RawBlock) and raw.block_type is BlockType.DELETE:
                    payloads.append(raw.content[8:])
    return payloads


#: Fixture tables whose logs hold delete blocks: Spark SQL DELETEs (IntWrapper 0), metadata-table
#: deletes (IntWrapper 0 in v9's record index, no ordering value in the other partitions).
_HUDI_DELETES = [
    "hudi-tables/mor/avro/v6_trips_8i3d",
    "hudi-tables-v8-v9/mor/avro/v8_trips_8i3d",
    "hudi-tables-v8-v9/mor/avro/v9_txns_complex_meta",
    "hudi-tables-v8-v9/mor/avro/v9_timebasedkeygen_nonhivestyle",
    "hudi-tables-v8-v9/cow/v9_txns_simple_meta",
]


@pytest.mark.parametrize("name", _HUDI_DELETES)
def test_hudi_written_delete_blocks_decode_column_wise_as_fastavro_does(name: str) -> None:
    payloads = _hudi_delete_payloads(shared_dir() / "fixtures" / f"{name}.zip")
    assert payloads, f"{name} has no delete block"
    entries = 0
    for payload in payloads:
        new = _check(payload)
        ordering = new.column("ordering_value").to_pylist()
        assert ordering in ([0] * new.num_rows, [None] * new.num_rows)  # Spark SQL's Integer 0, or none
        entries += new.num_rows
    assert entries > 0
