"""Assign tagged records to file groups: updates to their file group, inserts to small files
first (`hoodie.parquet.small.file.limit`; merge-on-read: only slices without log files) and
then to new file groups sized so that no base file grows past `hoodie.parquet.max.file.size`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakeward.core.file_group.file_group import FileSlice
from lakeward.core.file_group.naming import new_file_id

LOCATION = "__lakeward_location"


def split_by(table: pa.Table, column: str) -> dict[str | None, pa.Table]:
    """Rows of `table` grouped by the values of a string column (order kept within a group)."""
    if table.num_rows == 0:
        return {}
    encoded = pc.dictionary_encode(table.column(column)).combine_chunks()
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    codes = np.where(pc.is_null(encoded.indices).to_numpy(zero_copy_only=False), -1, codes)
    # Few groups: small integer codes take numpy's linear-time radix sort (stable).
    order = np.argsort(codes.astype(np.int16) if len(encoded.dictionary) < 2**15 else codes, kind="stable")
    sorted_codes = codes[order]
    bounds = np.flatnonzero(np.diff(sorted_codes)) + 1
    starts = np.concatenate([[0], bounds])
    ends = np.concatenate([bounds, [len(order)]])
    ordered = table.take(pa.array(order))
    groups: dict[str | None, pa.Table] = {}
    dictionary = encoded.dictionary.to_pylist()
    for start, end in zip(starts, ends):
        code = int(sorted_codes[start])
        groups[None if code < 0 else dictionary[code]] = ordered.slice(int(start), int(end - start))
    return groups


@dataclass(frozen=True)
class Bucket:
    """Records bound for one file group; `base` is the slice they merge into, if any."""

    partition_path: str
    file_id: str
    base: FileSlice | None
    records: pa.Table


@dataclass(frozen=True)
class SizingPolicy:
    max_file_size: int
    small_file_limit: int
    avg_record_size: int
    #: File groups never filled as small files (under a pending clustering, which will replace them).
    excluded: frozenset[tuple[str, str]] = frozenset()

    @property
    def records_per_file(self) -> int:
        return max(1, self.max_file_size // max(1, self.avg_record_size))


@dataclass(frozen=True)
class InsertTarget:
    """How many of a partition's new records go to one file group (`base`: a small file it fills)."""

    partition_path: str
    file_id: str
    base: FileSlice | None
    count: int


def plan_inserts(
    partition_path: str,
    count: int,
    slices: Sequence[FileSlice],
    policy: SizingPolicy,
    use_small_files: bool,
    new_id: Callable[[], str] = new_file_id,
) -> list[InsertTarget]:
    """Spread `count` new records of a partition over its small files, then over new file groups.

    Works on counts only, so engines that never hold the records (Spark) plan the same way.
    """
    targets: list[InsertTarget] = []
    remaining = count
    if use_small_files and policy.small_file_limit > 0:
        small = sorted(
            # Merge-on-read: a slice with log files is never a small file (Hudi cannot pad it
            # without compacting it); copy-on-write slices never have log files.
            (
                s
                for s in slices
                if s.base_file is not None
                and not s.log_files
                and s.base_file.size < policy.small_file_limit
                and (s.partition_path, s.file_id) not in policy.excluded
            ),
            key=lambda s: s.base_file.size if s.base_file else 0,
        )
        for file_slice in small:
            if remaining <= 0:
                break
            assert file_slice.base_file is not None
            capacity = (policy.max_file_size - file_slice.base_file.size) // max(1, policy.avg_record_size)
            take = int(min(capacity, remaining))
            if take <= 0:
                continue
            targets.append(InsertTarget(partition_path, file_slice.file_id, file_slice, take))
            remaining -= take
    if remaining > 0:
        # Even split across the fewest files that respect the size limit.
        num_files = -(-remaining // policy.records_per_file)
        size = -(-remaining // num_files)
        for _ in range(num_files):
            take = min(size, remaining)
            targets.append(InsertTarget(partition_path, new_id(), None, take))
            remaining -= take
    return targets


def assign_inserts(
    partition_path: str,
    inserts: pa.Table,
    slices: Sequence[FileSlice],
    policy: SizingPolicy,
    use_small_files: bool,
    new_id: Callable[[], str] = new_file_id,
) -> list[Bucket]:
    """The partition's new records, cut into buckets as `plan_inserts` sizes them."""
    buckets: list[Bucket] = []
    offset = 0
    for target in plan_inserts(partition_path, inserts.num_rows, slices, policy, use_small_files, new_id):
        buckets.append(Bucket(partition_path, target.file_id, target.base, inserts.slice(offset, target.count)))
        offset += target.count
    return buckets


def merge_buckets(
    buckets: Sequence[Bucket], updates: Mapping[tuple[str, str], pa.Table], slices: Mapping[tuple[str, str], FileSlice]
) -> list[Bucket]:
    """Combine update buckets and insert buckets that target the same file group."""
    combined: dict[tuple[str, str], list[pa.Table]] = {}
    for key, table in updates.items():
        combined.setdefault(key, []).append(table)
    bases: dict[tuple[str, str], FileSlice | None] = {k: slices.get(k) for k in updates}
    for bucket in buckets:
        key = (bucket.partition_path, bucket.file_id)
        combined.setdefault(key, []).append(bucket.records)
        bases.setdefault(key, bucket.base)
    return [
        Bucket(key[0], key[1], bases.get(key), pa.concat_tables(tables) if len(tables) > 1 else tables[0])
        for key, tables in combined.items()
    ]
