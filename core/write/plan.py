"""What a data plane hands the write client: the batch prepared, then the plan of file-group writes.

A data plane holds the records of a write (in this process for the local engine, on the
executors for Spark) and does the per-record work: key extraction, de-duplication,
tagging, assignment to file groups and the file-group writes. The write client keeps the
control plane (instants, locks, markers, commit) and is the same for every engine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa

from lakeward.core.file_group.view import FileSystemView
from lakeward.core.metadata_table.record_index import RecordIndexChange
from lakeward.core.timeline import Timeline, WriteStat
from lakeward.core.write.handles import WriteContext
from lakeward.core.write.operation import WriteOperation


@dataclass(frozen=True)
class WorkloadEntry:
    """One file group a write will produce, for the inflight workload profile."""

    partition_path: str
    file_id: str
    base_instant_time: str | None
    num_records: int


@dataclass
class Prepared:
    """A validated batch, before any instant exists. `schema` is the data schema to commit."""

    schema: pa.Schema
    records: Any
    release: Callable[[], None] = field(default=lambda: None)


@dataclass
class WritePlan:
    """The file-group writes of one instant: run them with `run(context)` to get the write stats."""

    workload: Sequence[WorkloadEntry]
    run: Callable[[WriteContext], list[WriteStat]]
    #: (partition, file id) of existing file groups the write rewrites (for conflict checks).
    touched: set[tuple[str, str]] = field(default_factory=set)
    #: partition -> file ids replaced by a replacecommit.
    replaced: dict[str, list[str]] = field(default_factory=dict)
    #: The record-index change of the write given its instant time, when the plane knows it exactly
    #: from its tagging (`record_index.tagged_change`); None: derived from the files written.
    index_change: Callable[[str], RecordIndexChange] | None = None


class DataPlane(Protocol):
    """Per-record work of a write on one engine."""

    def prepare(
        self, data: Any, operation: WriteOperation, timeline: Timeline, partitions: Sequence[str] | None
    ) -> Prepared:
        """Validate the batch and compute keys; raise before any instant is created."""

    def plan(
        self, prepared: Prepared, operation: WriteOperation, view: FileSystemView, partitions: Sequence[str] | None
    ) -> WritePlan:
        """Tag and assign the records to file groups."""
