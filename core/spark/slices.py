"""A read of the registered data source, resolved once on the driver and then read slice by slice.

The driver plans the read (timeline, instants, schema, file slices, the secondary indexes that can
answer the pushed filters; data skipping drops the slices whose column or partition statistics
rule the pushed filters out); each Spark partition then reads one file slice in a Python task. The
batch reader (`datasource`) and the stream reader of format `latest_state` (`changes`) share it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from lakeward.core.file_group.reader import read_file_slices
from lakeward.core.read.data_skipping import StatsPruner
from lakeward.core.read.pruning import PrunedSlice
from lakeward.core.read.scan import QueryType
from lakeward.core.read.spark import without_dictionaries
from lakeward.core.spark.index_pushdown import IndexReadContext
from lakeward.core.storage import Storage
from lakeward.core.table import Table

log = logging.getLogger(__name__)


@dataclass
class ReadPlan:
    """A data-source read resolved on the driver: the slices, the schema and how to read each slice."""

    slices: list[Any]
    schema: pa.Schema | None
    merge_options: dict[str, Any]
    #: Incremental queries: the (begin, end] range, resolved by Table.incremental_range (an IncrementalRange).
    window: Any = None
    #: Pushed filters and the secondary indexes that can answer them (an IndexReadContext), if any.
    index: Any = None
    #: The S3 settings the table is reached with (`Table.open(storage_options=)`).
    storage_options: dict[str, str] = field(default_factory=dict)
    #: Slices data skipping ruled out (`read.data_skipping`, on the pushed filters), and why.
    pruned: list[PrunedSlice] = field(default_factory=list)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["slices"] = []  # each partition carries its own slice
        return state


def plan_read(
    path: str,
    query: str,
    *,
    begin: str | None = None,
    end: str | None = None,
    as_of: str | None = None,
    pushed: Sequence[Any] = (),
    storage_options: Mapping[str, str] | None = None,
) -> ReadPlan:
    """The slices a read of `query` (snapshot, read_optimized, incremental) covers (planned by a `Scan`),
    and how to read each one."""
    settings = dict(storage_options or {})
    table = Table.open(path, storage_options=settings)
    if query == "incremental":
        scan = table.scan(query_type=QueryType.INCREMENTAL, begin=str(begin), end=end)
        plan = scan.plan()
        # a table written without meta fields has no commit times to filter by (as Table.read_incremental)
        rows = plan.window if table.config.populate_meta_fields else None
        merge = {"instants": plan.instants, "merge": plan.merge}
        return ReadPlan(list(plan.slices), plan.schema, merge, rows, storage_options=settings)
    read_optimized = query == "read_optimized"
    kind = QueryType.READ_OPTIMIZED if read_optimized else None
    plan = table.scan(query_type=kind, as_of=as_of, use_index=False).plan()
    slices: Sequence[Any] = plan.slices
    pruned: Sequence[PrunedSlice] = ()
    if pushed:  # data skipping on the pushed filters: the statistics of the metadata table
        pruning = StatsPruner(table.storage, table.config, plan.schema, use_partition_stats=as_of is None).prune(
            slices, list(pushed)
        )
        slices, pruned = pruning.kept, pruning.pruned
        if pruned:
            log.info(
                "format lakeward read of %s: data skipping pruned %d of %d file slice(s): %s",
                path,
                len(pruned),
                len(plan.slices),
                "; ".join(str(p) for p in pruned),
            )
    return ReadPlan(
        list(slices),
        plan.schema,
        {"instants": plan.instants, "merge": plan.merge, "read_optimized": read_optimized},
        index=IndexReadContext.for_table(table.storage, plan.timeline, list(pushed)),
        storage_options=settings,
        pruned=list(pruned),
    )


def read_slice(path: str, plan: ReadPlan, file_slice: Any) -> Iterator[pa.RecordBatch]:
    """The rows of one file slice of `plan` (in a Spark task), as Spark takes them (no dictionaries)."""
    storage = Storage.for_uri(path, plan.storage_options)
    condition = plan.window.row_filter() if plan.window is not None else None
    if plan.index is not None:
        rows = plan.index.read_slice(storage, file_slice, plan.schema, plan.merge_options)
    else:
        rows = read_file_slices(storage, [file_slice], plan.schema, None, condition, **plan.merge_options)
    yield from rows.cast(without_dictionaries(rows.schema)).to_batches()
