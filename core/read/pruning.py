"""Pruners: what a scan consults to read less than every planned file slice.

A pruner gets the slices a query planned and its filters, and says which slices to read,
which it dropped and why, and for the slices it kept, optionally which rows to read (a
row selection). `Scan` applies its pruners in order, each to what the one before kept:

- `PartitionPruner`: slices of partitions the filters rule out (partition-field conjuncts);
- `SecondaryIndexPruner`: rows of base files the secondary indexes rule out.

Column statistics prune row groups inside Parquet's own scan. Later data skipping with
the metadata table plugs in as one more `Pruner`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from lakeward.core.config.table import TableConfig
from lakeward.core.file_group.file_group import FileSlice
from lakeward.core.index.secondary.api import IndexRead, plan_index_read
from lakeward.core.read.filters import Filters, partition_pruner
from lakeward.core.storage import Storage
from lakeward.core.timeline import Timeline


@dataclass(frozen=True)
class PrunedSlice:
    """A file slice a pruner ruled out, and why."""

    partition_path: str
    file_id: str
    pruner: str
    reason: str

    def __str__(self) -> str:
        where = f"{self.partition_path}/{self.file_id}" if self.partition_path else self.file_id
        return f"{where}: pruned by {self.pruner} - {self.reason}"


@dataclass(frozen=True)
class Pruning:
    """What a pruner kept of the slices it was given, what it dropped, and its row selections."""

    kept: tuple[FileSlice, ...]
    pruned: tuple[PrunedSlice, ...] = ()
    #: Row selections of kept slices through the secondary indexes (None: read every row).
    index: IndexRead | None = None


class Pruner(Protocol):
    """Given the planned slices and a query's filters, the slices (and rows) to read."""

    name: str

    def prune(self, slices: Sequence[FileSlice], filters: Filters) -> Pruning: ...


@dataclass(frozen=True)
class PartitionPruner:
    """Drops slices of partitions that the filters' partition-field conjuncts rule out."""

    config: TableConfig
    schema: pa.Schema | None
    name: str = "partition"

    def prune(self, slices: Sequence[FileSlice], filters: Filters) -> Pruning:
        accept = partition_pruner(filters, self.config, self.schema)
        if accept is None:
            return Pruning(tuple(slices))
        matches: dict[str, bool] = {}
        kept: list[FileSlice] = []
        pruned: list[PrunedSlice] = []
        for s in slices:
            if s.partition_path not in matches:
                matches[s.partition_path] = accept(s.partition_path)
            if matches[s.partition_path]:
                kept.append(s)
            else:
                reason = f"partition {s.partition_path!r} does not match the filters"
                pruned.append(PrunedSlice(s.partition_path, s.file_id, self.name, reason))
        return Pruning(tuple(kept), tuple(pruned))


@dataclass(frozen=True)
class SecondaryIndexPruner:
    """Selects the rows of base files that the table's secondary indexes say may match.

    Keeps every slice (a slice the index rules out entirely is read as zero rows, without
    opening its base file); `explain=True` always records each slice's choice and why.
    """

    storage: Storage
    timeline: Timeline
    read_optimized: bool = False
    explain: bool = False
    name: str = "secondary index"

    def prune(self, slices: Sequence[FileSlice], filters: Filters) -> Pruning:
        planned = plan_index_read(
            self.storage, self.timeline, slices, filters, self.read_optimized, explain=self.explain
        )
        return Pruning(tuple(slices), index=planned)
