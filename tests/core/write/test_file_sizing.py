"""File sizing: small files are topped up by inserts, `hoodie.parquet.max.file.size` caps base
files, and bulk_insert always writes new file groups.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from lakeward.core.table import Table

#: Small bloom filters keep footers small, so file sizes reflect the data.
SMALL_BLOOM = {"hoodie.index.bloom.num_entries": 200}


def make_table(tmp_path: Path, options: dict | None = None, name: str = "t") -> Table:
    return Table.create(str(tmp_path / name), record_key="id", partition_by="city", options=options)


def rows(ids: range, city: str = "sf") -> pa.Table:
    """Records with an incompressible 64-character payload (about 100 bytes each in Parquet)."""
    return pa.table(
        {
            "id": pa.array(list(ids), pa.int64()),
            "city": [city] * len(ids),
            "payload": [hashlib.sha256(str(i).encode()).hexdigest() for i in ids],
        }
    )


def groups(table: Table, partition: str = "sf") -> dict[str, str]:
    """file id -> latest base file path, for one partition."""
    return {s.file_id: s.base_file.path for s in table.file_slices() if s.partition_path == partition}


def num_rows(table: Table, rel_path: str) -> int:
    return pq.read_metadata(Path(table.path) / rel_path).num_rows


# -- small files --------------------------------------------------------------------------------
def test_insert_tops_up_the_partitions_small_file(tmp_path):
    t = make_table(tmp_path)
    first = t.insert(rows(range(0, 5)))
    (file_id,) = groups(t)
    second = t.insert(rows(range(5, 8)))
    assert groups(t).keys() == {file_id}, "the small file group is reused, no new one"
    latest = groups(t)[file_id]
    assert latest.endswith(f"_{second.instant_time}.parquet")
    assert num_rows(t, latest) == 8
    # Copy-on-write: the first version is still on disk, untouched.
    old = [p for p in (Path(t.path) / "sf").glob("*.parquet") if p.name.endswith(f"_{first.instant_time}.parquet")]
    assert len(old) == 1 and pq.read_metadata(old[0]).num_rows == 5
    stats = [s for s in t.file_slices() if s.file_id == file_id]
    assert stats[0].base_instant_time == second.instant_time
    assert sorted(r["id"] for r in t.read().to_pylist()) == list(range(8))


def test_upsert_inserts_also_go_to_the_small_file(tmp_path):
    t = make_table(tmp_path)
    t.upsert(rows(range(0, 5)))
    (file_id,) = groups(t)
    result = t.upsert(rows(range(3, 9)))  # 3 and 4 are updates, 5..8 inserts
    assert (result.num_updates, result.num_inserts) == (2, 4)
    assert groups(t).keys() == {file_id}
    assert num_rows(t, groups(t)[file_id]) == 9


def test_small_files_are_only_topped_up_in_their_own_partition(tmp_path):
    t = make_table(tmp_path)
    t.insert(rows(range(0, 5), "sf"))
    sf_group = set(groups(t, "sf"))
    t.insert(rows(range(5, 8), "ny"))
    assert set(groups(t, "sf")) == sf_group
    assert len(groups(t, "ny")) == 1
    assert set(groups(t, "ny")).isdisjoint(sf_group)


def test_small_file_limit_zero_disables_topping_up(tmp_path):
    t = make_table(tmp_path, {"hoodie.parquet.small.file.limit": 0})
    t.insert(rows(range(0, 5)))
    t.insert(rows(range(5, 8)))
    assert len(groups(t)) == 2
    assert sorted(num_rows(t, p) for p in groups(t).values()) == [3, 5]


def test_files_above_the_small_file_limit_are_not_topped_up(tmp_path):
    t = make_table(tmp_path, {**SMALL_BLOOM, "hoodie.parquet.small.file.limit": 1000})
    t.insert(rows(range(0, 50)))  # well over 1000 bytes
    ((first, first_path),) = groups(t).items()
    assert (Path(t.path) / first_path).stat().st_size > 1000
    t.insert(rows(range(50, 60)))
    assert len(groups(t)) == 2
    assert groups(t)[first] == first_path, "a file above the small-file limit was rewritten"
    assert num_rows(t, first_path) == 50


# -- max file size ------------------------------------------------------------------------------
def test_max_file_size_splits_a_large_insert_into_several_file_groups(tmp_path):
    limit = 60_000
    options = {**SMALL_BLOOM, "hoodie.parquet.max.file.size": limit}
    t = make_table(tmp_path, options)
    n = 3000  # ~100 bytes a record in Parquet: ~300 KB in all
    result = t.insert(rows(range(n)))
    sizes = {p: (Path(t.path) / p).stat().st_size for p in result.files_written}
    assert len(sizes) >= 4, sizes
    assert all(size <= limit * 1.25 for size in sizes.values()), sizes
    assert sum(num_rows(t, p) for p in sizes) == n
    assert sorted(r["id"] for r in t.read(columns=["id"]).to_pylist()) == list(range(n))

    # The next insert tops the small ones up but still keeps every file within the limit.
    more = t.insert(rows(range(n, n + 1500)))
    for path in more.files_written:
        assert (Path(t.path) / path).stat().st_size <= limit * 1.25, path
    assert len(t.read(columns=["id"])) == n + 1500


def test_max_file_size_applies_to_bulk_insert(tmp_path):
    limit = 60_000
    t = make_table(tmp_path, {**SMALL_BLOOM, "hoodie.parquet.max.file.size": limit})
    result = t.bulk_insert(rows(range(3000)))
    assert len(result.files_written) >= 4
    for path in result.files_written:
        assert (Path(t.path) / path).stat().st_size <= limit * 1.25


def test_a_large_insert_after_a_tiny_commit_is_not_split_into_small_files(tmp_path):
    """With the default 120 MB limit, 20,000 short records belong in one file group.

    The first commit holds 2 records, so its bytes per record are dominated by the
    footer's bloom filter (about 1 MB at the default 60,000 entries); Hudi ignores such
    commits when estimating record size (they are far below the small-file limit).
    """
    t = make_table(tmp_path)
    t.insert(rows(range(2)))
    result = t.insert(rows(range(2, 20_002)))
    assert len(result.files_written) == 1, f"{len(result.files_written)} files for 20,000 records of ~100 bytes"
    assert len(groups(t)) == 1


# -- bulk_insert --------------------------------------------------------------------------------
def test_bulk_insert_never_reuses_small_files(tmp_path):
    t = make_table(tmp_path)
    t.insert(rows(range(0, 5)))
    before = groups(t)
    result = t.bulk_insert(rows(range(5, 8)))
    after = groups(t)
    assert len(after) == 2
    assert {k: v for k, v in after.items() if k in before} == before, "the small file was rewritten"
    assert len(result.files_written) == 1
    (new_group,) = set(after) - set(before)
    assert num_rows(t, after[new_group]) == 3
    # A later bulk_insert again writes a new group rather than topping up the previous one.
    t.bulk_insert(rows(range(8, 9)))
    assert len(groups(t)) == 3
