"""Data skipping: file slices (and partitions) that the metadata table's statistics rule out.

Hudi's `hoodie.enable.data.skipping` (on by default in Hudi 1.x readers; `Table.scan(use_index=
False)` turns it off here): when the table's metadata table has a `column_stats` partition
(`core/metadata_table/column_stats.py`), a filtered snapshot read drops the slices in which no
row can match. A slice is a base file and log files; a merged row takes each column's value from
one of them, so a conjunction can match only if each of its predicates may match some file of
the slice, and a filter (an OR of conjunctions) only if one of its conjunctions can. A file
without statistics for a column (written before the index existed, or by a writer that kept
none) may match anything, so the result is always that of an unpruned read.

`partition_stats` (one range per partition and column) rules out whole partitions the same way.

Predicates that prune: `=`, `in`, `<`, `<=`, `>`, `>=` (against min/max; null values never
match them, except in an `in` list that holds None), `is null` (null count; files only: a
partition's range does not count the rows of files written before its column existed), `is not
null` (null count below the value count). NaN bounds nothing. The others
(`!=`, `not in`, `like`, `match`, `phrase`, and pyarrow Expressions) keep every slice.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import pyarrow as pa

from lakeward.core.config.table import TableConfig
from lakeward.core.exceptions import LakewardError
from lakeward.core.file_group.file_group import FileSlice
from lakeward.core.file_group.metadata_listing import metadata_partitions
from lakeward.core.index.secondary.predicates import ColumnPredicate, Dnf, literal, parse_filters
from lakeward.core.metadata_table.column_stats import (
    COLUMN_STATS_PARTITION,
    ColumnRange,
    column_stats_key,
    column_value,
    columns_filter,
    read_ranges,
)
from lakeward.core.metadata_table.partition_stats import PARTITION_STATS_PARTITION, partition_stats_key
from lakeward.core.read.filters import Filters
from lakeward.core.read.pruning import PrunedSlice, Pruning
from lakeward.core.storage import Storage

log = logging.getLogger(__name__)

#: The operators statistics can decide.
PRUNING_OPS = frozenset({"=", "in", "<", "<=", ">", ">=", "is null", "is not null"})


class _Undecided(Exception):
    """A literal the statistics cannot compare exactly: the slice is kept."""


def _literal(value: Any, arrow_type: pa.DataType | None) -> Any:
    """The filter literal as a Python value of the column's type (as the exact filter compares it).

    Only a literal that is exactly a value of the column's type (`predicates.literal`) prunes: a
    float32 column holds no 0.1 (the exact filter compares in double, where 0.10000000149 > 0.1),
    a date column no datetime of noon; comparing their converted values would drop rows."""
    if arrow_type is None or value is None:
        return value
    scalar = literal(value, arrow_type)
    if scalar is None:
        raise _Undecided
    return scalar.as_py()


def may_match(stats: ColumnRange | None, predicate: ColumnPredicate, arrow_type: pa.DataType | None) -> bool:
    """Whether a file (or partition) with these statistics may hold a value the predicate accepts."""
    if stats is None or predicate.op not in PRUNING_OPS:
        return True
    if stats.value_count == 0:
        return True  # no counts: nothing to decide from
    if predicate.op == "is null":
        return stats.null_count > 0
    if predicate.op == "is not null":
        return stats.null_count < stats.value_count
    if predicate.op == "in" and stats.null_count > 0 and any(v is None for v in predicate.value):
        return True  # `in` accepts nulls when its list has one (as pyarrow's is_in; NaN too: undecided below)
    low, high = column_value(stats.min_value, arrow_type), column_value(stats.max_value, arrow_type)
    if low is None or high is None:
        return stats.value_count > stats.null_count  # all null: no comparison matches; else no bounds
    try:
        if predicate.op == "in":
            return any(v is not None and low <= _literal(v, arrow_type) <= high for v in predicate.value)
        value = _literal(predicate.value, arrow_type)
        if value is None:
            return False  # a comparison with null matches no row
        return {
            "=": lambda: low <= value <= high,
            "<": lambda: low < value,
            "<=": lambda: low <= value,
            ">": lambda: high > value,
            ">=": lambda: high >= value,
        }[predicate.op]()
    except (_Undecided, TypeError, ValueError, pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return True  # not comparable here: the exact filter decides


def _slice_files(s: FileSlice) -> list[str]:
    names = [s.base_file.name] if s.base_file is not None else []
    return names + [f.name for f in s.log_files]


def _conjunction_may_match(
    conjunction: Sequence[ColumnPredicate],
    stats_of: Any,
    types: Mapping[str, pa.DataType],
) -> bool:
    return all(may_match(stats_of(p.column), p, types.get(p.column)) for p in conjunction)


def _partition_may_match(
    conjunction: Sequence[ColumnPredicate],
    stats_of: Any,
    types: Mapping[str, pa.DataType],
) -> bool:
    """As `_conjunction_may_match` for a partition's range, which counts only the files that have
    the column: the rows of older files without it (a column added later) read as null, so the
    predicates a null satisfies (`_null_may_match`) are left to the files' own statistics."""
    return _conjunction_may_match([p for p in conjunction if not _null_may_match(p)], stats_of, types)


def _null_may_match(p: ColumnPredicate) -> bool:
    """Whether a null value satisfies `p`: `is null`, `in` a list holding None, `not in` a list
    without None (the filters' `is_in` matches nulls to None only)."""
    if p.op == "is null":
        return True
    if p.op in ("in", "not in"):
        listed = any(v is None for v in p.value)
        return listed if p.op == "in" else not listed
    return False


def _partition_range(ranges: Mapping[str, ColumnRange], partition_path: str, column: str) -> ColumnRange | None:
    return ranges.get(partition_stats_key(column, partition_path))


def _prunable(dnf: Dnf | None) -> bool:
    return dnf is not None and all(any(p.op in PRUNING_OPS for p in conj) for conj in dnf)


@dataclass(frozen=True)
class StatsPruner:
    """Drops the slices whose partition (`partition_stats`) or files (`column_stats`) rule the
    filters out; keeps everything when the metadata table has neither, or is unreadable."""

    storage: Storage
    config: TableConfig
    schema: pa.Schema | None
    #: Consult `partition_stats` too (only for reads of the latest snapshot: a partition's range
    #: covers its latest file slices, not older ones a time-travel read sees).
    use_partition_stats: bool = True
    name: str = "column stats"

    def prune(self, slices: Sequence[FileSlice], filters: Filters) -> Pruning:
        dnf = parse_filters(filters)
        partitions = metadata_partitions(self.config.to_properties())
        use_files = COLUMN_STATS_PARTITION in partitions
        use_partitions = (
            self.use_partition_stats and PARTITION_STATS_PARTITION in partitions and self.config.is_partitioned
        )
        if not _prunable(dnf) or not (use_files or use_partitions) or not self.config.version.metadata_table_listing:
            return Pruning(tuple(slices))
        assert dnf is not None
        try:
            keep = columns_filter({p.column for conj in dnf for p in conj if p.op in PRUNING_OPS})
            file_ranges = read_ranges(self.storage, COLUMN_STATS_PARTITION, keep) if use_files else {}
            partition_ranges = read_ranges(self.storage, PARTITION_STATS_PARTITION, keep) if use_partitions else {}
        except (LakewardError, OSError, ValueError, KeyError, IndexError, EOFError) as exc:
            log.warning(
                "data skipping off for this read of %s: its statistics are unreadable (%s)", self.storage.uri, exc
            )
            return Pruning(tuple(slices))
        types = {f.name: f.type for f in self.schema} if self.schema is not None else {}
        kept: list[FileSlice] = []
        pruned: list[PrunedSlice] = []
        partition_verdicts: dict[str, bool] = {}
        for s in slices:
            where = s.partition_path
            if use_partitions and where not in partition_verdicts:
                partition_verdicts[where] = any(
                    _partition_may_match(conj, partial(_partition_range, partition_ranges, where), types)
                    for conj in dnf
                )
            if use_partitions and not partition_verdicts[where]:
                reason = f"partition_stats of {where!r} rule out the filters"
                pruned.append(PrunedSlice(where, s.file_id, "partition stats", reason))
                continue
            files = _slice_files(s)
            if use_files and files and not self._slice_may_match(s, files, dnf, file_ranges, types):
                reason = f"column_stats of {', '.join(files)} rule out the filters"
                pruned.append(PrunedSlice(where, s.file_id, self.name, reason))
                continue
            kept.append(s)
        return Pruning(tuple(kept), tuple(pruned))

    @staticmethod
    def _slice_may_match(
        s: FileSlice,
        files: list[str],
        dnf: Dnf,
        ranges: Mapping[str, ColumnRange],
        types: Mapping[str, pa.DataType],
    ) -> bool:
        def any_file(predicate: ColumnPredicate) -> bool:
            return any(
                may_match(
                    ranges.get(column_stats_key(predicate.column, s.partition_path, f)),
                    predicate,
                    types.get(predicate.column),
                )
                for f in files
            )

        return any(all(any_file(p) for p in conj) for conj in dnf)
