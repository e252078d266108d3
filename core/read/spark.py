"""Reads on the Spark engine: Spark DataFrames over exactly the file slices a query needs.

Slices without log files are read by Spark's own Parquet scan over the exact latest base
files (column pruning and predicate push-down come from Spark). Slices that need merging
(base file plus log files) are read by Python tasks over Arrow, one slice per task, with
the same function as the local engine; the two parts are unioned.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import pyarrow as pa

from lakeward.core.exceptions import ConfigError
from lakeward.core.file_group.file_group import BaseFile, FileSlice, LogFile
from lakeward.core.file_group.reader import read_file_slices
from lakeward.core.index.secondary.predicates import text_mask
from lakeward.core.schema import META_SCHEMA, with_meta
from lakeward.core.storage import Storage

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)


def spark_path(storage: Storage, rel: str) -> str:
    """The URI Spark's file sources use for a file of the table (s3:// is read through s3a)."""
    if storage.is_local:
        return "file://" + storage.full_path(rel)
    uri = storage.uri_of(rel)
    parsed = urlparse(uri)
    return uri.replace("s3://", "s3a://", 1) if parsed.scheme == "s3" else uri


#: (SparkContext, URI scheme) -> whether Spark's own file sources can open files of that scheme.
_NATIVE_SCAN: dict[tuple[int, str], bool] = {}


def native_scan_reaches(spark: SparkSession, storage: Storage) -> bool:
    """Whether Spark's own Parquet scan can open the table's files: always on local storage; on S3
    only when the session's Hadoop has a file system for `s3a` (hadoop-aws on its classpath).

    Without it, the base files Spark would scan are read by lakeward's Python tasks, through the
    table's own storage options, as the slices that need merging are (slower, same rows).
    """
    if storage.is_local:
        return True
    scheme = urlparse(spark_path(storage, "")).scheme
    key = (id(spark.sparkContext), scheme)
    if key not in _NATIVE_SCAN:
        # lazy: PySpark is optional (lakeward[spark]) and slow to import
        from py4j.protocol import Py4JError

        context = spark.sparkContext
        try:
            hadoop = context._jsc.hadoopConfiguration()  # type: ignore[union-attr]
            context._jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(scheme, hadoop)  # type: ignore[union-attr]
            _NATIVE_SCAN[key] = True
        except Py4JError as exc:
            log.warning(
                "Spark has no file system for %s:// (%s): lakeward reads the table's base files in Python "
                "tasks instead of Spark's Parquet scan; add hadoop-aws to the session and configure "
                "spark.hadoop.fs.s3a.* for Spark's own scan (docs/spark.md)",
                scheme,
                str(exc).strip().splitlines()[0][:200],
            )
            _NATIVE_SCAN[key] = False
    return _NATIVE_SCAN[key]


def spark_schema(schema: pa.Schema) -> StructType:
    """The Spark schema of an Arrow schema (Arrow dictionaries read as their value type)."""
    # lazy: PySpark is optional (lakeward[spark]) and slow to import
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(without_dictionaries(schema))


def arrow_schema(struct: StructType) -> pa.Schema:
    """The Arrow schema of a Spark schema; Spark TIMESTAMP (an instant) is `timestamp[us, tz=UTC]`.

    (PySpark's converter needs a time zone for TIMESTAMP; the table keeps UTC-adjusted
    timestamps whatever the session's time zone, and Arrow casts between zones losslessly.)
    """
    # lazy: PySpark is optional (lakeward[spark]) and slow to import
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(struct, timezone="UTC")


def read_slices(
    spark: SparkSession,
    storage: Storage,
    slices: Sequence[FileSlice],
    schema: pa.Schema | None,
    columns: Sequence[str] | None = None,
    condition: Column | None = None,
    **merge_options: Any,
) -> DataFrame:
    """A DataFrame of the slices' rows, in the table's schema (meta columns first).

    `merge_options` (instants, merge, read_optimized) are passed to `read_file_slices`
    for the slices that need merging.
    """
    full = with_meta(schema) if schema is not None else META_SCHEMA
    struct = spark_schema(full)
    read_optimized = bool(merge_options.get("read_optimized"))
    plain = [s for s in slices if s.base_file is not None and (read_optimized or not s.log_files)]
    merged = [] if read_optimized else [s for s in slices if s.log_files]
    if plain and not native_scan_reaches(spark, storage):  # Python tasks read them (read-optimized: base files)
        merged, plain = merged + plain, []
    parts: list[DataFrame] = []
    if plain:
        assert all(s.base_file is not None for s in plain)
        paths = [spark_path(storage, s.base_file.path) for s in plain if s.base_file is not None]
        parts.append(spark.read.schema(struct).parquet(*paths))
    if merged:
        parts.append(_merged_slices(spark, storage, merged, full, struct, merge_options))
    if not parts:
        df = spark.createDataFrame([], struct)
    else:
        df = parts[0]
        for other in parts[1:]:
            df = df.unionByName(other)
    if condition is not None:
        df = df.filter(condition)
    if columns is not None:
        unknown = [c for c in columns if c not in df.columns]
        if unknown:
            raise ConfigError(f"columns {unknown} are not in the table; it has {df.columns}")
        df = df.select(*columns)
    return df


def _merged_slices(
    spark: SparkSession,
    storage: Storage,
    slices: Sequence[FileSlice],
    full: pa.Schema,
    struct: StructType,
    merge_options: dict[str, Any],
) -> DataFrame:
    storage_uri, options = storage.uri, dict(storage.options)
    data_schema = pa.schema([f for f in full if f.name not in META_SCHEMA.names])

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        local = Storage.for_uri(storage_uri, options)
        for batch in batches:
            for text in batch.column(0).to_pylist():
                table = read_file_slices(local, [slice_from_json(text)], data_schema, **merge_options)
                plain = table.cast(without_dictionaries(table.schema))
                yield from plain.select(full.names).to_batches()

    payload = [(slice_to_json(s),) for s in slices]
    return spark.createDataFrame(payload, "slice string").repartition(len(payload)).mapInArrow(read, struct)


def without_dictionaries(schema: pa.Schema) -> pa.Schema:
    """The schema with dictionary-encoded columns as their plain value type (Spark has no dictionaries)."""
    return pa.schema([pa.field(f.name, f.type.value_type) if pa.types.is_dictionary(f.type) else f for f in schema])


def slice_to_json(s: FileSlice) -> str:
    """A file slice as JSON, to hand to Spark tasks."""
    base = s.base_file
    return json.dumps(
        {
            "partition": s.partition_path,
            "file_id": s.file_id,
            "base_instant": s.base_instant_time,
            "base": None if base is None else [base.path, base.instant_time, base.size],
            "logs": [[f.path, f.base_instant_time, f.version, f.write_token, f.size] for f in s.log_files],
        }
    )


def slice_from_json(text: str) -> FileSlice:
    d = json.loads(text)
    base = d["base"]
    return FileSlice(
        d["partition"],
        d["file_id"],
        d["base_instant"],
        BaseFile(base[0], d["file_id"], base[1], base[2]) if base else None,
        tuple(LogFile(p, d["file_id"], b, v, t, n) for p, b, v, t, n in d.get("logs", [])),
    )


def _text_udf(phrase: bool, query: str) -> Any:
    """`match` / `phrase` as a Spark UDF with the text index's words (case-insensitive)."""
    # lazy: PySpark is optional (lakeward[spark]) and slow to import
    from pyspark.sql import functions as F
    from pyspark.sql.types import BooleanType

    def matches(value):  # type: ignore[no-untyped-def]  # no hints: Spark would read them as an Arrow UDF's
        return None if value is None else bool(text_mask(pa.array([value], pa.string()), query, phrase)[0].as_py())

    return F.udf(matches, BooleanType())


def dnf_to_column(filters: Any) -> Column | None:
    """DNF filter tuples (as Table.read takes them) as a Spark Column."""
    # lazy: PySpark is optional (lakeward[spark]) and slow to import
    from pyspark.sql import functions as F

    if filters is None or (isinstance(filters, list | tuple) and not filters):
        return None
    if not isinstance(filters, list | tuple):
        raise ConfigError(
            "filters for engine='spark' are DNF tuples like [('city', '=', 'sf')]; "
            "or filter the returned DataFrame (Spark pushes the predicate down)"
        )
    disjuncts = [list(filters)] if isinstance(filters[0], tuple) else [list(c) for c in filters]
    ops = {
        "=": lambda c, v: c == v,
        "==": lambda c, v: c == v,
        "!=": lambda c, v: c != v,
        "<": lambda c, v: c < v,
        "<=": lambda c, v: c <= v,
        ">": lambda c, v: c > v,
        ">=": lambda c, v: c >= v,
        "in": lambda c, v: c.isin(list(v)),
        "not in": lambda c, v: ~c.isin(list(v)),
        # lakeward's extra operators (lakeward.core.index.secondary.predicates)
        "is null": lambda c, v: c.isNull(),
        "is not null": lambda c, v: c.isNotNull(),
        "like": lambda c, v: c.like(v),
        "match": lambda c, v: _text_udf(False, v)(c),
        "phrase": lambda c, v: _text_udf(True, v)(c),
    }
    result = None
    for conjunction in disjuncts:
        term = None
        for item in conjunction:
            if not (isinstance(item, tuple) and len(item) == 3) or str(item[1]).lower() not in ops:
                raise ConfigError(f"filter {item!r} is not (column, op, value) with op in {sorted(ops)}")
            name, op, value = item
            piece = ops[str(op).lower()](F.col(name), value)
            term = piece if term is None else term & piece
        if term is not None:
            result = term if result is None else result | term
    return result


__all__ = [
    "arrow_schema",
    "dnf_to_column",
    "read_slices",
    "slice_from_json",
    "slice_to_json",
    "spark_path",
    "spark_schema",
]
