"""The bitmap and text index files on their own: built from Arrow, answering predicates with row ids."""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest
from pyroaring import BitMap

from lakeward.core.index.secondary.bitmap import BitmapIndexFile, build_bitmap_index
from lakeward.core.index.secondary.predicates import ColumnPredicate, predicate_expression
from lakeward.core.index.secondary.text import TextIndexFile, build_text_index


def _open_bitmap(table: pa.Table) -> BitmapIndexFile:
    body = build_bitmap_index(table, [table.num_rows], "id", "idx", "f_1-0-1_20260101000000000.parquet")
    return BitmapIndexFile(pa.BufferReader(body), len(body))


def _exact(table: pa.Table, p: ColumnPredicate) -> BitMap:
    positions = pa.table({"row": pa.array(range(table.num_rows)), p.column: table.column(p.column)})
    return BitMap(positions.filter(predicate_expression(p)).column("row").to_pylist())


def test_bitmap_index_is_exact_for_every_supported_type_and_operator() -> None:
    rng = random.Random(7)
    n = 3000
    utc = dt.UTC
    table = pa.table(
        {
            "i": pa.array([rng.choice([None, *range(-20, 20)]) for _ in range(n)], pa.int32()),
            "s": [rng.choice([None, "", "apple", "Apple", "apricot", "b", "zz", "é"]) for _ in range(n)],
            "f": [rng.choice([None, float("nan"), -0.0, 0.0, 1.5, -2.25, 3.0]) for _ in range(n)],
            "ts": pa.array(
                [
                    rng.choice([None, dt.datetime(2026, 1, d, tzinfo=utc)])
                    for d in (rng.randint(1, 9) for _ in range(n))
                ],
                pa.timestamp("us", tz="UTC"),
            ),
            "d": pa.array([dt.date(2026, 2, rng.randint(1, 20)) for _ in range(n)], pa.date32()),
            "dec": pa.array([Decimal(rng.randint(0, 50)) / 4 for _ in range(n)], pa.decimal128(10, 2)),
            "b": [rng.choice([True, False, None]) for _ in range(n)],
        }
    )
    index = _open_bitmap(table)
    samples = {
        "i": [0, 5, -20, 19, 100],
        "s": ["apple", "", "é", "q"],
        "f": [0.0, -0.0, 1.5, 3.0, 9.0],
        "ts": [dt.datetime(2026, 1, 3, tzinfo=utc)],
        "d": [dt.date(2026, 2, 10)],
        "dec": [Decimal("2.5"), Decimal("12.25")],
        "b": [True, False],
    }
    checked = 0
    for column, values in samples.items():
        for value in values:
            for op in ("=", "!=", "<", "<=", ">", ">="):
                if column == "b" and op not in ("=", "!="):
                    continue
                p = ColumnPredicate(column, op, value)
                got, want = index.lookup(p), _exact(table, p)
                assert got is not None, p
                if op == "!=":
                    assert want <= got, p  # a superset: the reader applies the exact filter
                else:
                    assert got == want, p
                checked += 1
        for op in ("is null", "is not null"):
            p = ColumnPredicate(column, op)
            assert index.lookup(p) == _exact(table, p), p
        p = ColumnPredicate(column, "in", tuple(values[:2]))
        assert index.lookup(p) == _exact(table, p), p
    for pattern in ("ap%", "A%", "é%"):
        p = ColumnPredicate("s", "like", pattern)
        assert index.lookup(p) == _exact(table, p), p
    assert index.lookup(ColumnPredicate("s", "like", "%p%")) is None  # no literal prefix: not answered
    assert index.lookup(ColumnPredicate("i", "=", "5")) is None  # a literal of another type: not answered
    assert index.lookup(ColumnPredicate("nope", "=", 1)) is None
    assert checked > 100


def test_bitmap_point_lookup_reads_a_small_part_of_the_index_file() -> None:
    n = 400_000
    values = np.random.default_rng(3).integers(0, 200_000, n)
    table = pa.table({"v": pa.array(values, pa.int64())})
    body = build_bitmap_index(table, [n // 4] * 4, "id", "idx", "f_1-0-1_20260101000000000.parquet")
    index = BitmapIndexFile(pa.BufferReader(body), len(body))
    wanted = int(values[12345])
    rows = index.lookup(ColumnPredicate("v", "=", wanted))
    assert rows is not None and 12345 in rows
    assert sorted(rows) == np.flatnonzero(values == wanted).tolist()
    assert index.bytes_read < len(body) / 20, (index.bytes_read, len(body))
    assert index.row_groups == [n // 4] * 4


def test_text_index_words_ignore_case_and_prefix_like_is_a_superset() -> None:
    texts = [
        "Buying now: apples",
        "buying NOW",
        "I am buying",
        "Buy-in price",
        None,
        "Ölfass kaufen",
        "now buying",
        "Buyingx deal",
    ]
    table = pa.table({"t": texts})
    body = build_text_index(table, [len(texts)], "id", "idx", "f_1-0-1_20260101000000000.parquet")
    index = TextIndexFile(pa.BufferReader(body), len(body), "test.lwidx", "mem")
    assert index.lookup(ColumnPredicate("t", "match", "BUYING")) == BitMap([0, 1, 2, 6])
    assert index.lookup(ColumnPredicate("t", "match", "buying now")) == BitMap([0, 1, 6])
    assert index.lookup(ColumnPredicate("t", "phrase", "buying now")) == BitMap([0, 1])
    assert index.lookup(ColumnPredicate("t", "match", "ölfass")) == BitMap([5])
    assert index.lookup(ColumnPredicate("t", "match", "...")) == BitMap()
    like = index.lookup(ColumnPredicate("t", "like", "Buying%"))
    exact = _exact(table, ColumnPredicate("t", "like", "Buying%"))
    assert exact == BitMap([0, 7]) and like is not None and exact <= like
    like_two = index.lookup(ColumnPredicate("t", "like", "Buying no%"))
    assert like_two is not None and BitMap([0]) <= like_two and 2 not in like_two
    assert index.lookup(ColumnPredicate("t", "like", "%uying%")) is None
    assert index.lookup(ColumnPredicate("t", "<", "b")) is None
    for p in (ColumnPredicate("t", "match", "buying now"), ColumnPredicate("t", "phrase", "now buying")):
        assert index.lookup(p) == _exact(table, p), p


@pytest.mark.parametrize("op", ["match", "phrase"])
def test_text_predicates_without_index_follow_the_same_words(op: str) -> None:
    table = pa.table({"t": ["Hello, World", "hello-world!", "WORLD hello", None, "helloworld"]})
    got = table.filter(predicate_expression(ColumnPredicate("t", op, "HELLO world"))).column("t").to_pylist()
    assert got == (
        ["Hello, World", "hello-world!", "WORLD hello"] if op == "match" else ["Hello, World", "hello-world!"]
    )
