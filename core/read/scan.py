"""`Scan`: the one planner of every read, whatever the query type and the engine.

A scan describes one read: its query type (snapshot, read-optimized, time travel,
incremental, CDC), the columns and filters, and the engine that runs it. `plan()`
resolves it against the timeline into a `ScanPlan` (the instants it sees, the file
slices and splits it reads, what the pruners dropped); `to_arrow()` and `to_spark()` run
that plan; `explain()` says how each slice would be read. `Table.read`,
`read_incremental`, `read_changes`, `explain`, the Spark data source and its CDC
surfaces all build a `Scan` (the shape of pyiceberg's `DataScan.plan_files / to_arrow`
and of hudi-rs's read dispatch on query type).

A scan reads the table as its timeline was when the scan was made (`Table.scan` loads it).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from lakeward.core.cdc.changes import empty_changes
from lakeward.core.cdc.extract import ChangeSplit, plan_change_splits
from lakeward.core.config.table import TableConfig
from lakeward.core.engine import Engine, LocalEngine
from lakeward.core.exceptions import ConfigError
from lakeward.core.file_group.file_group import FileSlice, LogFile
from lakeward.core.file_group.integrity import verify_listing
from lakeward.core.file_group.reader import MergeSettings, VisibleInstants, read_file_slices
from lakeward.core.file_group.view import FileSystemView
from lakeward.core.index.secondary.api import IndexRead
from lakeward.core.index.secondary.read import MERGE, SCAN, IndexReadExplain, SliceChoice, read_planned
from lakeward.core.read import spark as spark_read
from lakeward.core.read.changes import Images, collect_changes, folds_logs, format_changes
from lakeward.core.read.data_skipping import StatsPruner
from lakeward.core.read.filters import (
    Filters,
    check_columns_fit,
    check_filters_fit,
    conform_number_literals,
    conform_time_literals,
    to_expression,
)
from lakeward.core.read.incremental import IncrementalRange, incremental_slices
from lakeward.core.read.pruning import PartitionPruner, PrunedSlice, Pruner, SecondaryIndexPruner
from lakeward.core.read.ranges import begins_in_version_6_archive, change_range, incremental_range, resolve_as_of
from lakeward.core.read.spark_changes import ChangeQuery, changes_dataframe
from lakeward.core.schema import META_COLUMNS
from lakeward.core.storage import Storage
from lakeward.core.table_schema import resolve_table_schema
from lakeward.core.timeline import InstantTime, Timeline, normalize_instant_time

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


class QueryType(str, Enum):
    """What a scan reads (`hoodie.datasource.query.type`, plus time travel and CDC)."""

    #: The latest committed state, log files merged (merge-on-read).
    SNAPSHOT = "snapshot"
    #: Base files only, log files ignored (Hudi's read-optimized query); may be `as_of` an instant.
    READ_OPTIMIZED = "read_optimized"
    #: The state as of a completed instant (`as_of`), log files merged.
    TIME_TRAVEL = "time_travel"
    #: The latest state of records written in (begin, end].
    INCREMENTAL = "incremental"
    #: Every change (insert, update, delete) of the commits in (begin, end].
    CDC = "cdc"

    @classmethod
    def parse(cls, value: QueryType | str) -> QueryType:
        try:
            return cls(str(getattr(value, "value", value)).strip().lower())
        except ValueError:
            names = ", ".join(q.value for q in cls)
            raise ConfigError(f"query type {value!r} is not one of {names}") from None

    @property
    def ranged(self) -> bool:
        """Incremental and CDC queries read a range (begin, end], the others one state."""
        return self in (QueryType.INCREMENTAL, QueryType.CDC)


@dataclass(frozen=True)
class SliceRead:
    """One file slice of a plan, and the files its read opens."""

    file_slice: FileSlice
    #: Read-optimized: the base file alone, log files ignored.
    base_only: bool = False

    @property
    def log_files(self) -> tuple[LogFile, ...]:
        """The log files merged into the base file's rows (none for a base-only read)."""
        return () if self.base_only else self.file_slice.log_files

    @property
    def merges(self) -> bool:
        return bool(self.log_files)

    @property
    def files(self) -> tuple[str, ...]:
        """Paths (relative to the table) of the base file and the log files read."""
        base = self.file_slice.base_file
        return ((base.path,) if base is not None else ()) + tuple(f.path for f in self.log_files)


@dataclass(frozen=True)
class ScanPlan:
    """A scan resolved against the timeline: what it sees, and exactly what it reads."""

    query_type: QueryType
    timeline: Timeline = field(repr=False)
    #: The table's data schema (no meta columns); None before the first write.
    schema: pa.Schema | None
    #: Snapshot family: the completed instant read as of (None: the latest).
    as_of: str | None = None
    #: Incremental and CDC: the resolved range (begin, end] (end None: up to the latest).
    begin: str | None = None
    end: str | None = None
    #: Incremental: the range as the read applies it (row filter, visible instants).
    window: IncrementalRange | None = field(default=None, repr=False)
    #: The file slices read, after pruning, each with the files it opens (not CDC).
    splits: tuple[SliceRead, ...] = ()
    #: CDC: one split per (commit, file group) whose changes the query returns.
    change_splits: tuple[ChangeSplit, ...] = ()
    #: Slices the pruners ruled out, and why.
    pruned: tuple[PrunedSlice, ...] = ()
    instants: VisibleInstants | None = field(default=None, repr=False)
    merge: MergeSettings = MergeSettings()
    #: The secondary indexes' row selections (None: every kept slice is read whole).
    index: IndexRead | None = field(default=None, repr=False)

    @property
    def slices(self) -> tuple[FileSlice, ...]:
        return tuple(s.file_slice for s in self.splits)

    @property
    def files(self) -> tuple[str, ...]:
        """Every base and log file the plan reads (relative paths), slice by slice."""
        return tuple(path for s in self.splits for path in s.files)


class ScanExplain(IndexReadExplain):
    """`Scan.explain()`: how each planned slice is read (`IndexReadExplain`), plus the slices pruned."""

    def __init__(self, base: IndexReadExplain, pruned: Sequence[PrunedSlice] = ()):
        super().__init__(base.predicates, base.slices, base.seconds)
        self.pruned = list(pruned)

    def __str__(self) -> str:
        lines = [super().__str__()]
        if self.pruned:
            lines.append(f"pruned file slices: {len(self.pruned)}")
            lines.extend(f"  {p}" for p in self.pruned)
        return "\n".join(lines)


@dataclass(frozen=True)
class Scan:
    """One read of a table (build it with `Table.scan(...)`): plan it, run it, or explain it."""

    storage: Storage
    config: TableConfig
    timeline: Timeline = field(repr=False)
    query_type: QueryType = QueryType.SNAPSHOT
    #: The columns to read (a list, or one name); None: every column.
    columns: str | Sequence[str] | None = None
    #: DNF tuples (as pyarrow.parquet takes them, plus lakeward's index operators) or an Expression.
    filters: Filters = None
    as_of: InstantTime | None = None
    begin: InstantTime | None = None
    end: InstantTime | None = None
    #: CDC: the `before` / `after` images as JSON strings or typed structs.
    images: Images = "json"
    #: Runs the per-file-group work of CDC scans (local threads, or Spark tasks).
    engine: Engine = field(default_factory=LocalEngine, repr=False)
    #: Let the secondary indexes select rows (Hudi's `hoodie.enable.data.skipping`).
    use_index: bool = True

    def __post_init__(self) -> None:
        query = QueryType.parse(self.query_type)
        if query is QueryType.SNAPSHOT and self.as_of is not None:
            query = QueryType.TIME_TRAVEL
        object.__setattr__(self, "query_type", query)
        if isinstance(self.columns, str):  # one column named alone
            object.__setattr__(self, "columns", [self.columns])
        if query is QueryType.TIME_TRAVEL and self.as_of is None:
            raise ConfigError("a time-travel scan needs as_of (a completed instant time or a timestamp)")
        if query.ranged and self.as_of is not None:
            raise ConfigError(f"as_of applies to snapshot, read-optimized and time-travel scans, not {query.value}")
        if not query.ranged and (self.begin is not None or self.end is not None):
            raise ConfigError(f"begin and end apply to incremental and CDC scans, not {query.value}")
        if query is QueryType.INCREMENTAL and self.begin is None:
            raise ConfigError("an incremental scan needs begin (exclusive: records written after it)")
        if query is QueryType.CDC and (self.columns is not None or self.filters is not None):
            raise ConfigError("a CDC scan returns every change (op, ts_ms, before, after): no columns or filters")

    # -- planning -------------------------------------------------------------------------
    def plan(self) -> ScanPlan:
        """Resolve the scan: the instants it sees and the slices (or CDC splits) it reads.

        Checks the file listing against the commit metadata (a CorruptFileError names a
        missing or cut file), and consults the pruners (partitions, secondary indexes).
        """
        return self._plan(verify=True, use_index=self.use_index)

    def _plan(self, *, verify: bool, use_index: bool, explain: bool = False, use_stats: bool | None = None) -> ScanPlan:
        merge = MergeSettings.from_config(self.config)
        if self.query_type is QueryType.CDC:
            return self._plan_changes(merge)
        schema = resolve_table_schema(self.storage, self.timeline, self.config)
        # naive datetimes on UTC columns (and the reverse) compare as written, for every reader
        object.__setattr__(self, "filters", conform_time_literals(self.filters, schema))
        # float literals on integer columns, which pyarrow compares through a cast that fails on large values
        object.__setattr__(self, "filters", conform_number_literals(self.filters, schema))
        check_filters_fit(self.filters, schema, meta_fields=self.config.populate_meta_fields)
        check_columns_fit(self.columns, schema)
        if self.query_type is QueryType.INCREMENTAL:
            assert self.begin is not None
            window = incremental_range(self.storage, self.config, self.timeline, self.begin, self.end)
            into_archive = begins_in_version_6_archive(self.storage, self.config, self.timeline, window.begin)
            slices = incremental_slices(
                self.storage, self.timeline, window.begin, window.end, into_archive=into_archive
            )
            return ScanPlan(
                self.query_type,
                self.timeline,
                schema,
                begin=window.begin,
                end=window.end,
                window=window,
                splits=tuple(SliceRead(s) for s in slices),
                instants=window.visible,
                merge=merge,
            )
        as_of = resolve_as_of(self.storage, self.config, self.timeline, self.as_of)
        view = FileSystemView.load(self.storage, self.timeline)
        if verify:
            verify_listing(self.storage, self.timeline, view, as_of)
        asked = None if self.as_of is None else normalize_instant_time(self.as_of, self.config.timeline_timezone)
        kept: Sequence[FileSlice] = view.snapshot_file_slices(as_of, query_time=asked)
        pruned: list[PrunedSlice] = []
        index: IndexRead | None = None
        for pruner in self._pruners(schema, use_index, explain, use_stats):
            pruning = pruner.prune(kept, self.filters)
            kept, index = pruning.kept, pruning.index or index
            pruned.extend(pruning.pruned)
        base_only = self.query_type is QueryType.READ_OPTIMIZED
        return ScanPlan(
            self.query_type,
            self.timeline,
            schema,
            as_of=as_of,
            splits=tuple(SliceRead(s, base_only) for s in kept),
            pruned=tuple(pruned),
            instants=VisibleInstants.from_timeline(self.timeline, as_of),
            merge=merge,
            index=index,
        )

    def _pruners(
        self, schema: pa.Schema | None, use_index: bool, explain: bool, use_stats: bool | None = None
    ) -> list[Pruner]:
        """Partition pruning, data skipping (`use_stats`, default `use_index`) and secondary indexes."""
        pruners: list[Pruner] = [PartitionPruner(self.config, schema)]
        stats = use_index if use_stats is None else use_stats
        if self.use_index and (stats or explain):  # Hudi's data skipping: column and partition stats
            pruners.append(StatsPruner(self.storage, self.config, schema, use_partition_stats=self.as_of is None))
        if use_index or (explain and self.use_index):
            read_optimized = self.query_type is QueryType.READ_OPTIMIZED
            pruners.append(SecondaryIndexPruner(self.storage, self.timeline, read_optimized, explain))
        return pruners

    def _plan_changes(self, merge: MergeSettings) -> ScanPlan:
        begin, end = change_range(self.storage, self.config, self.timeline, self.begin, self.end)
        schema = resolve_table_schema(self.storage, self.timeline, self.config)
        splits: list[ChangeSplit] = []
        if schema is not None:
            table_type, fold = self.config.table_type, folds_logs(self.config)
            splits = plan_change_splits(self.storage, self.timeline, table_type, begin, end, fold_logs=fold)
        return ScanPlan(
            QueryType.CDC, self.timeline, schema, begin=begin, end=end, change_splits=tuple(splits), merge=merge
        )

    # -- running ----------------------------------------------------------------------------
    def to_arrow(self) -> pa.Table:
        """Run the scan into a pyarrow Table (CDC: its per-file-group work on the scan's engine)."""
        plan = self.plan()
        if plan.query_type is QueryType.CDC:
            return self._changes(plan)
        if plan.query_type is QueryType.INCREMENTAL:
            assert plan.window is not None
            time_filter = plan.window.row_filter() if self.config.populate_meta_fields else pc.scalar(True)
            condition = to_expression(self.filters)
            combined = time_filter if condition is None else time_filter & condition
            columns = self._read_columns(plan.schema)
            rows = read_file_slices(
                self.storage, plan.slices, plan.schema, columns, combined, instants=plan.instants, merge=plan.merge
            )
        else:
            rows = read_planned(
                self.storage,
                plan.slices,
                plan.index.plans if plan.index is not None else (),
                plan.schema,
                self._read_columns(plan.schema),
                self.filters,
                instants=plan.instants,
                merge=plan.merge,
                read_optimized=plan.query_type is QueryType.READ_OPTIMIZED,
            )
        return self._without_empty_meta_columns(rows)

    def _changes(self, plan: ScanPlan) -> pa.Table:
        if plan.schema is None:
            return format_changes(empty_changes(pa.schema([])), self.images)
        assert plan.begin is not None
        changes = collect_changes(
            self.storage, self.config, plan.schema, plan.begin, plan.end, plan.change_splits, self.engine
        )
        return format_changes(changes, self.images)

    def _read_columns(self, schema: pa.Schema | None) -> Sequence[str] | None:
        """The columns to read: those asked for, else every column, except on a table written
        without meta fields, whose null `_hoodie_*` columns are not read at all (the result drops them)."""
        if self.columns is not None or self.config.populate_meta_fields or schema is None:
            return self.columns
        return [name for name in schema.names if name not in META_COLUMNS]

    def _without_empty_meta_columns(self, result: pa.Table) -> pa.Table:
        """Drop the `_hoodie_*` columns of a table whose writers did not populate them."""
        if self.config.populate_meta_fields:
            return result
        return result.drop_columns([c for c in result.column_names if c.startswith("_hoodie_")])

    def to_spark(self, spark: SparkSession) -> DataFrame:
        """Run the scan as a Spark DataFrame: base-only slices through Spark's Parquet scan,
        merged slices and CDC splits as Python tasks (the filters are applied by Spark). Data
        skipping drops the slices the metadata table's statistics rule out, as for local reads
        (the secondary indexes are not used: Spark applies the filters itself)."""
        plan = self._plan(verify=True, use_index=False, use_stats=True)
        if plan.pruned:
            log.info(
                "spark read of %s: data skipping pruned %d file slice(s): %s",
                self.storage.uri,
                len(plan.pruned),
                "; ".join(str(p) for p in plan.pruned),
            )
        if plan.query_type is QueryType.CDC:
            return changes_dataframe(spark, ChangeQuery.of(self, plan), plan.change_splits)
        condition = spark_read.dnf_to_column(self.filters)
        options: dict[str, Any] = {"instants": plan.instants, "merge": plan.merge}
        if plan.query_type is QueryType.INCREMENTAL:
            assert plan.window is not None
            if self.config.populate_meta_fields:
                in_range = spark_read.dnf_to_column([plan.window.commit_time_conjunction()])
                condition = in_range if condition is None else in_range & condition
        else:
            options["read_optimized"] = plan.query_type is QueryType.READ_OPTIMIZED
        return spark_read.read_slices(spark, self.storage, plan.slices, plan.schema, self.columns, condition, **options)

    # -- explaining -------------------------------------------------------------------------
    def explain(self) -> ScanExplain:
        """How the scan would read each file slice (through an index, scanned, merged) and why,
        and which slices the pruners ruled out; reads no data."""
        if self.query_type is QueryType.CDC:
            raise ConfigError("explain() describes reads of file slices; a CDC scan's plan() lists its change splits")
        plan = self._plan(verify=False, use_index=False, explain=True)
        if plan.index is not None:
            return ScanExplain(plan.index.explain, plan.pruned)
        base = IndexReadExplain("none" if self.filters is None else str(self.filters))
        for s in plan.splits:
            f = s.file_slice
            path = f.base_file.path if f.base_file is not None else None
            if not self.use_index:
                reason = "use_index=False: no secondary index nor statistics consulted"
            else:
                reason = "incremental reads do not use secondary indexes"
            base.slices.append(SliceChoice(f.partition_path, f.file_id, path, MERGE if s.merges else SCAN, reason))
        return ScanExplain(base, plan.pruned)
