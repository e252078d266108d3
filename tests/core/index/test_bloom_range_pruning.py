"""BLOOM index range pruning: cost follows the batch's key ranges, not the number of file groups.

A file whose footer key range admits none of the batch's keys is never asked for its bloom
filter (not parsed, not held in memory) and never read for keys; the binary search over the
sorted batch finds the same keys as comparing every key with the range.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lakeward.core.file_group import base_file
from lakeward.core.file_group.base_file import FooterKeys, read_footer_keys
from lakeward.core.index import base as index_base
from lakeward.core.index import bloom as bloom_index
from lakeward.core.index.bloom_filter import BloomFilter
from lakeward.core.table import Table

GROUPS = 6


@pytest.fixture
def six_ranges(tmp_path: Path) -> tuple[Table, dict[str, str]]:
    """One partition, six file groups with disjoint key ranges g0-000..g0-009, ..., g5-000..g5-009."""
    t = Table.create(str(tmp_path / "t"), record_key="key", ordering_field="ts")
    first_keys: dict[str, str] = {}
    for g in range(GROUPS):
        before = {s.file_id for s in t.file_slices()}
        keys = [f"g{g}-{i:03d}" for i in range(10)]
        t.bulk_insert(pa.table({"key": keys, "ts": [1] * 10, "v": list(range(10))}))
        (new,) = {s.file_id for s in t.file_slices()} - before
        first_keys[new] = keys[0]
    return t, first_keys


@pytest.fixture
def parsed_blooms(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count bloom filters parsed from footers, with an empty footer cache (a fresh process)."""
    monkeypatch.setattr(base_file, "_footer_cache", {})
    monkeypatch.setattr(base_file, "_footer_cache_bloom_bytes", 0)
    parsed: list[int] = []
    original = BloomFilter.deserialize.__func__  # type: ignore[attr-defined]

    def spy(cls: type[BloomFilter], text: str | bytes, type_code: str = "DYNAMIC_V0") -> BloomFilter:
        parsed.append(len(text))
        return original(cls, text, type_code)

    monkeypatch.setattr(BloomFilter, "deserialize", classmethod(spy))
    return parsed


def test_upsert_into_one_key_range_parses_and_reads_only_that_file_group(
    six_ranges: tuple[Table, dict[str, str]], parsed_blooms: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    t, first_keys = six_ranges
    (target,) = [f for f, k in first_keys.items() if k.startswith("g3")]
    key_reads: list[str] = []
    original = index_base.read_key_states

    def spy(storage, file_slice, *args, **kwargs):  # type: ignore[no-untyped-def]
        key_reads.append(file_slice.file_id)
        return original(storage, file_slice, *args, **kwargs)

    monkeypatch.setattr(index_base, "read_key_states", spy)
    # No small files: the inserts start a new file group instead of rewriting (and so parsing) another.
    result = Table.open(t.path, options={"hoodie.parquet.small.file.limit": 0}).upsert(
        pa.table({"key": ["g3-002", "g3-007", "g3-500", "zz-1"], "ts": [2] * 4, "v": [20, 70, 500, 1]})
    )
    assert (result.num_updates, result.num_inserts) == (2, 2)
    assert len(parsed_blooms) == 1, "only the file group whose key range admits keys has its filter parsed"
    assert set(key_reads) <= {target}
    footers = {s.file_id: read_footer_keys(t.storage, s.base_file.path) for s in t.file_slices() if s.base_file}
    untouched = [f for f in first_keys if f != target]
    assert all("bloom" not in footers[f].__dict__ for f in untouched), "untouched groups hold no parsed filter"
    values = {r["key"]: r["v"] for r in t.read().to_pylist()}
    assert len(values) == 10 * GROUPS + 2 and values["g3-002"] == 20 and values["g3-007"] == 70


def test_upsert_outside_every_key_range_parses_no_bloom_filter(
    six_ranges: tuple[Table, dict[str, str]], parsed_blooms: list[int]
) -> None:
    t, _ = six_ranges
    no_small_files = {"hoodie.parquet.small.file.limit": 0}
    result = Table.open(t.path, options=no_small_files).upsert(
        pa.table({"key": ["a", "g9-000", "g2-999x"], "ts": [2] * 3, "v": [1, 2, 3]})
    )
    assert result.num_inserts == 3
    assert parsed_blooms == []


def test_lazy_footer_filter_is_the_written_one(six_ranges: tuple[Table, dict[str, str]], parsed_blooms: list[int]):
    t, first_keys = six_ranges
    path = next(s.base_file.path for s in t.file_slices() if s.file_id in first_keys)
    footer = read_footer_keys(t.storage, path)
    assert parsed_blooms == []
    assert footer.bloom is not None and footer.bloom is footer.bloom  # parsed once, then kept
    assert len(parsed_blooms) == 1
    assert footer.min_key is not None and footer.bloom.might_contain(pa.array([footer.min_key])).all()


KEYS = ["", "a", "a\x00", "ab", "b", "é", "ë", "z", "~", "\u00ff", "\u0100", "日本", "😀", "😀a", "\U0010ffff"]


@pytest.mark.parametrize(
    "low, high",
    [("a", "b"), ("a\x00", "z"), ("é", "😀"), ("", "\U0010ffff"), ("b", "a"), ("c", "d"), ("日", "日本"), ("~", "~")],
)
def test_sorted_search_admits_exactly_the_keys_arrow_comparison_admits(low: str, high: str) -> None:
    """Binary search over Python strings agrees with Arrow's UTF-8 byte comparison, bounds included."""
    rng = np.random.default_rng(7)
    keys = pa.array([KEYS[i] for i in rng.integers(0, len(KEYS), 200)], pa.string())
    footer = FooterKeys(low, high)
    expected = np.flatnonzero(
        pc.and_(pc.greater_equal(keys, low), pc.less_equal(keys, high)).to_numpy(zero_copy_only=False)
    )
    assert np.array_equal(np.sort(bloom_index.SortedKeys(keys).in_range(footer)), expected)


def test_sorted_search_without_a_footer_range_admits_every_key() -> None:
    keys = pa.array(["b", "a", "c"])
    assert sorted(bloom_index.SortedKeys(keys).in_range(FooterKeys(None, "z")).tolist()) == [0, 1, 2]


@pytest.mark.parametrize("files", [3, bloom_index.SORT_ABOVE_FILES + 5])
def test_key_ranges_of_few_and_many_files_agree_with_arrow_comparison(files: int) -> None:
    """Both ways of finding each file's keys (compare, or sort and search) give the same rows."""
    rng = np.random.default_rng(files)
    keys = pa.array([f"k{i:05d}" for i in rng.integers(0, 10_000, 3_000)])
    bounds = np.sort(rng.integers(0, 10_000, (files, 2)), axis=1)
    footers = [FooterKeys(f"k{lo:05d}", f"k{hi:05d}") for lo, hi in bounds] + [FooterKeys(None, None)]
    got = bloom_index.key_ranges(keys, footers)
    for footer, rows in zip(footers, got):
        if footer.min_key is None:
            assert sorted(rows.tolist()) == list(range(len(keys)))
            continue
        inside = pc.and_(pc.greater_equal(keys, footer.min_key), pc.less_equal(keys, footer.max_key))
        assert np.array_equal(np.sort(rows), np.flatnonzero(inside.to_numpy(zero_copy_only=False)))
