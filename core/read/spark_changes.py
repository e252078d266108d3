"""A planned CDC query as Spark rows: one Python task per file group (the Spark read data plane of CDC).

`Scan.to_spark` and the Spark CDC surfaces (`core/spark/changes.py`) share it. PySpark is
imported only by the functions that run on a session (it is an optional dependency).
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from lakeward.core.cdc.changes import empty_changes
from lakeward.core.cdc.extract import ChangeSplit, by_file_group, file_group_changes
from lakeward.core.file_group.reader import MergeSettings
from lakeward.core.read.changes import Images, format_changes
from lakeward.core.read.spark import spark_schema
from lakeward.core.schema import with_meta
from lakeward.core.storage import Storage

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakeward.core.read.scan import Scan, ScanPlan


# -- a CDC query, resolved on the driver ----------------------------------------------------------
@dataclass(frozen=True)
class ChangeQuery:
    """What each split's task needs: the table's storage, the checked range and the images wanted."""

    storage_uri: str
    storage_options: tuple[tuple[str, str], ...]
    begin: str
    end: str | None
    schema: pa.Schema | None
    settings: MergeSettings
    images: Images

    @classmethod
    def of(cls, scan: Scan, plan: ScanPlan) -> ChangeQuery:
        """The query of a planned CDC scan."""
        storage = scan.storage
        assert plan.begin is not None
        options = tuple(sorted(storage.options.items()))
        return cls(storage.uri, options, plan.begin, plan.end, plan.schema, plan.merge, scan.images)

    @property
    def output_schema(self) -> pa.Schema:
        """`op`, `ts_ms`, `before`, `after`, as `Table.read_changes` returns them."""
        return change_schema(self.schema, self.images)

    def rows(self, splits: Sequence[ChangeSplit]) -> pa.Table:
        """The changes of one file group's splits (`by_file_group`), formatted: the commits the
        plan took for (begin, end] (on 8+ by completion time), whatever their `ts_ms`.

        One task per file group, as on the local engine: each file is read and each `.cdc`
        file decoded once, and a Python task's fixed cost is paid once per group, not per commit.
        """
        storage = Storage.for_uri(self.storage_uri, dict(self.storage_options))
        assert self.schema is not None
        changes = file_group_changes(storage, splits, with_meta(self.schema), self.settings)
        return format_changes(changes, self.images).cast(self.output_schema)


def change_schema(schema: pa.Schema | None, images: Images) -> pa.Schema:
    """The Arrow schema of a CDC result for a table of `schema` (None: a table without data yet)."""
    full = with_meta(schema) if schema is not None else pa.schema([])
    return format_changes(empty_changes(full), images).schema


def changes_dataframe(spark: SparkSession, query: ChangeQuery, splits: Sequence[ChangeSplit]) -> DataFrame:
    """The rows of a planned CDC query as a DataFrame: one Spark task per file group, in no particular order."""
    schema = spark_schema(query.output_schema)
    if not splits:
        return spark.createDataFrame([], schema)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for blob in batch.column(0).to_pylist():
                yield from query.rows(pickle.loads(blob)).to_batches()

    payload = [(pickle.dumps(group),) for group in by_file_group(splits)]
    tasks = spark.createDataFrame(payload, "split binary").repartition(len(payload))
    return tasks.mapInArrow(run, schema)
