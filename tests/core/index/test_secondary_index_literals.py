"""Secondary indexes never lose a row on literal edges: a filtered read through an index returns the
rows of a scan without it and of the full read filtered in pyarrow. Each case lost rows (or failed)
before; found by exploratory testing: literals the index converted to the column's type and so
changed (5.5 on an integer column, 0.1 on a float32 one, a datetime on a date one), an in-list
holding None, NaN in an in-list, `like` prefixes ending in a non-ASCII mark or with a word tantivy's
regex cannot quote or compile."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.core.index.secondary.predicates import filters_to_expression


def _ids(data: pa.Table) -> list[int]:
    return sorted(data.column("id").to_pylist())


def assert_index_reads_lose_nothing(table: Table, filters: list[Any]) -> list[int]:
    expected = _ids(table.read().filter(filters_to_expression(filters)))
    assert _ids(table.scan(filters=filters, use_index=False).to_arrow()) == expected, filters
    assert _ids(table.read(filters=filters)) == expected, filters
    return expected


@pytest.fixture
def numbers(tmp_path: Path) -> Table:
    table = Table.create(str(tmp_path / "t"), record_key="id", options={"hoodie.parquet.small.file.limit": "0"})
    n = 300
    table.bulk_insert(
        pa.table(
            {
                "id": pa.array(range(n), pa.int64()),
                "k": pa.array([i % 10 for i in range(n)], pa.int64()),
                "n": pa.array([None if i % 10 == 0 else i for i in range(n)], pa.int64()),
                "f": pa.array([0.1 if i % 3 == 0 else float(i) for i in range(n)], pa.float32()),
                "g": pa.array([float("nan") if i % 7 == 0 else float(i) for i in range(n)], pa.float64()),
                "d": pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=i) for i in range(n)], pa.date32()),
            }
        )
    )
    table.create_index("bm", ["n", "f", "g", "d"])
    table.build_indexes()
    return table


@pytest.mark.parametrize(
    "filters",
    [
        [("n", "<", 5.5)],
        [("n", ">", 294.5)],
        [("k", "=", 5), ("n", "!=", 5.5)],
        [("k", "=", 5), ("n", "not in", [5.5])],
        [("d", "<", dt.datetime(2024, 1, 5, 12))],
        [("k", "=", 5), ("d", "!=", dt.datetime(2024, 1, 6, 12))],
        [("f", ">", 0.1)],
        [("k", "=", 3), ("f", "!=", 0.1)],
        [("n", "in", [None])],
        [("n", "in", [None, 15])],
        [("n", "in", [None]), ("k", "=", 0)],
        [("g", "in", [float("nan")])],
    ],
    ids=repr,
)
def test_bitmap_index_literal_edges(numbers: Table, filters: list[Any]) -> None:
    assert assert_index_reads_lose_nothing(numbers, filters), "the case must select rows"


def test_text_index_like_prefixes_tantivy_words_differently(tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "t"), record_key="id")
    values = ["किताब पढ़ो"] * 5 + ["कि"] * 5 + ["İstanbul trip"] * 5 + ["a" * 1000 + "b"] * 5 + ["plain words"] * 5
    table.bulk_insert(pa.table({"id": list(range(len(values))), "s": values}))
    table.create_index("tx", "s", "text")
    table.build_indexes()
    for pattern in ("कि%", "किताब%", "İst%", "a" * 1000 + "%", "pla%"):
        assert assert_index_reads_lose_nothing(table, [("s", "like", pattern)]), pattern


def test_text_index_rows_with_words_tantivy_leaves_out_are_still_found(tmp_path: Path) -> None:
    """Tantivy drops words over 65,530 bytes from its index: `match`, `phrase` and `like` through the
    index missed the rows holding them (the index answers with those rows too; the scan decides)."""
    table = Table.create(str(tmp_path / "t"), record_key="id")
    huge = "x" * 70_000
    wide = "é" * 40_000  # 80,000 bytes in UTF-8, 40,000 characters
    values = [f"{huge} hello"] * 3 + [f"say {wide}"] * 3 + ["plain words"] * 5 + [None] * 2
    table.bulk_insert(pa.table({"id": list(range(len(values))), "s": values}))
    table.create_index("tx", "s", "text")
    table.build_indexes()
    for filters in (
        [("s", "match", huge)],
        [("s", "like", "xxx%")],
        [("s", "phrase", f"{huge} hello")],
        [("s", "match", wide)],
        [("s", "like", "say é%")],
        [("s", "match", "hello")],
    ):
        assert assert_index_reads_lose_nothing(table, filters), filters[0][:2]
    # the index still answers: the rows it matched plus the six it cannot vouch for
    assert [c.candidate_rows for c in table.explain([("s", "match", "plain")]).slices] == [5 + 6]


@pytest.mark.parametrize("use_index", [True, False])
def test_in_lists_of_none_select_the_null_rows(tmp_path: Path, use_index: bool) -> None:
    """`in [None]` on a string column raised ArrowTypeError (a value set of nulls only has no type the
    column's matches); None in an in-list matches the null rows, as it does beside other values, and
    `not in` keeps the null rows unless None is listed, NaN or not (expected rows computed in Python)."""
    table = Table.create(str(tmp_path / "t"), record_key="id")
    n = 60
    s = [None if i % 5 == 0 else f"v{i % 3}" for i in range(n)]
    g = [None if i % 4 == 0 else float("nan") if i % 7 == 0 else float(i) for i in range(n)]
    table.bulk_insert(pa.table({"id": pa.array(range(n), pa.int64()), "s": s, "g": pa.array(g, pa.float64())}))
    if use_index:
        table.create_index("bm", ["s", "g"])
        table.build_indexes()

    def nan(v: Any) -> bool:
        return isinstance(v, float) and v != v

    cases = [
        ([("s", "in", [None])], [i for i in range(n) if s[i] is None]),
        ([("s", "in", ["v1", None])], [i for i in range(n) if s[i] in ("v1", None)]),
        ([("s", "not in", [None])], [i for i in range(n) if s[i] is not None]),
        ([("s", "not in", ["v1"])], [i for i in range(n) if s[i] != "v1"]),
        ([("g", "in", [None])], [i for i in range(n) if g[i] is None]),
        ([("g", "in", [float("nan"), None])], [i for i in range(n) if g[i] is None or nan(g[i])]),
        ([("g", "not in", [float("nan")])], [i for i in range(n) if not nan(g[i])]),
    ]
    for filters, expected in cases:
        assert _ids(table.read(filters=filters)) == expected, filters
        assert _ids(table.scan(filters=filters, use_index=use_index).to_arrow()) == expected, filters


def test_bitmap_like_reads_a_block_that_begins_past_prefix_and_the_last_code_point(tmp_path: Path) -> None:
    """A `like 'ab%'` took blocks up to 'ab' + U+10FFFF: a block whose first value goes on past that
    ('ab' + U+10FFFF + '1') was skipped, and its rows lost."""
    table = Table.create(str(tmp_path / "t"), record_key="id")
    values = [f"aa{i:04d}" for i in range(1024)] + ["ab\U0010ffff1", "ab\U0010ffff2", "b"]
    table.bulk_insert(pa.table({"id": list(range(len(values))), "s": values}))
    table.create_index("bm", "s")
    table.build_indexes()
    assert [r for r in assert_index_reads_lose_nothing(table, [("s", "like", "ab%")])] == [1024, 1025]
    assert table.explain([("s", "like", "ab%")]).count("index") == 1
