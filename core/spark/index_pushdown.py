"""Filter push-down of the `lakeward` Spark data source into secondary indexes.

Spark hands the data source reader the conjunction of filters it can push
(`DataSourceReader.pushFilters`, enabled by `spark.sql.python.filterPushdown.enabled`,
which `lakeward.spark.register` sets). They become DNF tuples, and each file slice is
then read through the table's secondary indexes exactly as `Table.read(filters=...)`
does. Every filter is also handed back to Spark, which evaluates it again on the rows
read: the pushed filters only decide which rows are read, never which rows are returned.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from lakeward.core.file_group.file_group import FileSlice
from lakeward.core.index.secondary.definitions import IndexDefinition, load_definitions
from lakeward.core.index.secondary.read import read_with_indexes
from lakeward.core.index.secondary.storage import (
    CommittedInstants,
    IndexCatalog,
    IndexFile,
    committed_instants,
    list_index_files,
)
from lakeward.core.storage import Storage
from lakeward.core.timeline import Timeline


def _column(attribute: Any) -> str | None:
    parts = tuple(attribute) if isinstance(attribute, tuple | list) else (attribute,)
    return str(parts[0]) if len(parts) == 1 else None  # nested fields are not indexed


def _like_literal(text: str) -> str | None:
    return None if any(c in text for c in "%_\\") else text


def _plain_value(value: Any) -> bool:
    import datetime as dt
    from decimal import Decimal

    if isinstance(value, tuple | list):
        return all(_plain_value(v) for v in value)
    if isinstance(value, dt.datetime):
        return False
    return value is None or isinstance(value, bool | int | float | str | Decimal | dt.date)


def to_dnf(filters: Iterable[Any]) -> list[tuple[str, str, Any]]:
    """The Spark filters lakeward's indexes can use, as one AND of (column, op, value) tuples.

    Each tuple keeps at least the rows Spark's filter keeps (Spark filters the rows again).
    """
    # lazy: PySpark is optional (lakeward[spark]) and slow to import
    from pyspark.sql import datasource as sds

    simple = {
        sds.EqualTo: "=",
        sds.GreaterThan: ">",
        sds.GreaterThanOrEqual: ">=",
        sds.LessThan: "<",
        sds.LessThanOrEqual: "<=",
    }
    out: list[tuple[str, str, Any]] = []
    for f in filters:
        column = _column(getattr(f, "attribute", None)) if hasattr(f, "attribute") else None
        op = simple.get(type(f))
        if column is not None and not _plain_value(getattr(f, "value", None)):
            continue  # timestamps and the like: their zone handling is Spark's; Spark filters them
        if op is not None and column is not None and f.value is not None:
            out.append((column, op, f.value))
        elif isinstance(f, sds.In) and column is not None and None not in f.value:
            out.append((column, "in", list(f.value)))
        elif isinstance(f, sds.IsNull) and column is not None:
            out.append((column, "is null", None))
        elif isinstance(f, sds.IsNotNull) and column is not None:
            out.append((column, "is not null", None))
        elif isinstance(f, sds.StringStartsWith) and column is not None:
            literal = _like_literal(f.value)
            if literal:
                out.append((column, "like", literal + "%"))
        elif isinstance(f, sds.Not) and isinstance(f.child, sds.EqualTo):
            child_column = _column(f.child.attribute)
            if child_column is not None and f.child.value is not None:
                out.append((child_column, "!=", f.child.value))
    return out


@dataclass
class IndexReadContext:
    """What executors need to read slices through the indexes (picklable, built on the driver)."""

    filters: list[tuple[str, str, Any]]
    definitions: tuple[IndexDefinition, ...]
    files: tuple[IndexFile, ...]
    committed: CommittedInstants

    @classmethod
    def for_table(
        cls, storage: Storage, timeline: Timeline, filters: Sequence[tuple[str, str, Any]]
    ) -> IndexReadContext | None:
        """None when there is nothing to push or no index on the pushed columns."""
        if not filters:
            return None
        columns = {f[0] for f in filters}
        definitions = tuple(d for d in load_definitions(storage) if columns & set(d.columns))
        if not definitions:
            return None
        names = {d.name for d in definitions}
        files = tuple(f for f in list_index_files(storage) if f.index_name in names)
        return cls(list(filters), definitions, files, committed_instants(timeline))

    def read_slice(
        self, storage: Storage, file_slice: FileSlice, schema: pa.Schema | None, merge_options: dict[str, Any]
    ) -> pa.Table:
        stem = file_slice.base_file.name.rsplit(".", 1)[0] if file_slice.base_file is not None else None
        catalog = IndexCatalog([f for f in self.files if f.base_stem == stem], self.committed)
        table, _ = read_with_indexes(
            storage, [file_slice], schema, None, self.filters, self.definitions, catalog, **merge_options
        )
        return table
