"""The `lakeward` Spark data source, with Apache Hudi's option names.

`register(spark)` does two things:

* registers a Python data source named `lakeward` (batch reads over Arrow, one Spark
  partition per file slice), so the format resolves in any session;
* hooks `DataFrameWriter.save` and `DataFrameReader.load` of this Python process for the
  `lakeward` format, so that writes run on the Spark engine's distributed pipeline
  (tagging joins, repartitioning by file group, one task per file group) and snapshot
  reads use Spark's native Parquet scan. A Python data source's writer only sees one
  input partition at a time and cannot shuffle, which a copy-on-write upsert needs;
  the hook is what lets `df.write.format("lakeward")` stay a distributed write.
  Reads of a table with secondary indexes, or whose metadata table keeps `column_stats` or
  `partition_stats`, go through the Python data source instead (unless
  `hoodie.enable.data.skipping=false`): Spark pushes the query's filters to its reader, which
  reads through the indexes and drops the file slices the statistics rule out.

Options are Hudi's documented keys; an unknown or invalid option fails before any file
is written, naming the option.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lakeward.core.config.lock import LOCK_OPTION_KEYS
from lakeward.core.config.read import AS_OF_INSTANT as AS_OF
from lakeward.core.config.read import BEGIN_INSTANT as BEGIN
from lakeward.core.config.read import DATA_SKIPPING, QUERY_TYPE, QUERY_TYPES, READ_KEYS, canonical_read_keys
from lakeward.core.config.read import END_INSTANT as END
from lakeward.core.config.values import parse_bool, parse_fields
from lakeward.core.config.write import (
    TABLE_CREATE_KEYS,
    lakeward_write_keys,
    parse_write_config,
)
from lakeward.core.engine.spark import SparkEngine
from lakeward.core.exceptions import ConfigError, TableNotFoundError, did_you_mean
from lakeward.core.file_group.metadata_listing import metadata_partitions
from lakeward.core.keygen import partition_paths
from lakeward.core.metadata_table.column_stats import COLUMN_STATS_PARTITION
from lakeward.core.metadata_table.partition_stats import PARTITION_STATS_PARTITION
from lakeward.core.read.spark import arrow_schema, slice_from_json, slice_to_json, spark_schema
from lakeward.core.schema import META_COLUMNS, with_meta
from lakeward.core.spark import changes as cdc
from lakeward.core.spark.index_pushdown import to_dnf
from lakeward.core.spark.slices import ReadPlan, plan_read, read_slice
from lakeward.core.spark.storage_settings import (
    is_storage_option,
    open_table,
    storage_options_of,
    with_session_s3_options,
)
from lakeward.core.table import Table
from lakeward.core.write.client import WriteResult
from lakeward.core.write.operation import WriteOperation

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)
FORMAT = "lakeward"

OPERATION = "hoodie.datasource.write.operation"
PARTITIONS_TO_DELETE = "hoodie.datasource.write.partitions.to.delete"
WRITE_ONLY_KEYS = frozenset({OPERATION, PARTITIONS_TO_DELETE})
SAVE_MODES = ("append", "overwrite", "error", "errorifexists", "ignore")


def _known_write_option(key: str) -> bool:
    return (
        key in WRITE_ONLY_KEYS
        or key in TABLE_CREATE_KEYS
        or key in LOCK_OPTION_KEYS
        or key == "path"
        or is_storage_option(key)
    )


def _check_option_names(options: Mapping[str, Any], allowed_extra: frozenset[str], kind: str) -> None:
    """Non-`hoodie.*` options (other than `path`, the read keys and the S3 settings `aws_*`) are unknown
    here: name them."""
    storage_options_of(options)  # an unknown aws_* option is named
    for key in options:
        if key.startswith("hoodie.") or key in allowed_extra or key == "path" or is_storage_option(key):
            continue
        raise ConfigError(
            f"unknown {kind} option {key!r} for format {FORMAT!r}{did_you_mean(key, allowed_extra)}; "
            "use Apache Hudi's hoodie.* names"
        )


def parse_operation(options: Mapping[str, Any]) -> WriteOperation:
    value = str(options.get(OPERATION, "upsert")).strip()
    try:
        return WriteOperation(value.upper())
    except ValueError:
        names = ", ".join(o.value.lower() for o in WriteOperation)
        raise ConfigError(f"{OPERATION}={value!r} is not one of {names}") from None


def _write_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options validated for a write; read options are refused."""
    opts = {str(k): v for k, v in options.items()}
    _check_option_names(opts, lakeward_write_keys(), "write")
    for key in opts:
        if key in READ_KEYS:
            raise ConfigError(f"{key} is a read option; it has no meaning for a write")
    parse_operation(opts)
    parse_write_config({k: v for k, v in opts.items() if not _known_write_option(k)}, extra_known=LOCK_OPTION_KEYS)
    return opts


#: The `Table` method of each operation: the data source writes as `Table` does, so what follows a
#: write there (inline compaction) follows a Spark write too.
_TABLE_WRITES: dict[WriteOperation, Callable[..., WriteResult]] = {
    WriteOperation.UPSERT: Table.upsert,
    WriteOperation.INSERT: Table.insert,
    WriteOperation.BULK_INSERT: Table.bulk_insert,
    WriteOperation.DELETE: Table.delete,
    WriteOperation.INSERT_OVERWRITE: Table.insert_overwrite,
    WriteOperation.INSERT_OVERWRITE_TABLE: Table.insert_overwrite_table,
}


def write_dataframe(df: DataFrame, path: str, mode: str, options: Mapping[str, Any]) -> None:
    """`df.write.format("lakeward").mode(mode).options(...).save(path)` on the Spark engine.

    Modes as Hudi's: `overwrite` creates the table, or replaces all of its data (an
    `insert_overwrite_table` commit, so older instants stay readable until cleaned);
    `append` writes with the chosen operation and creates the table when missing;
    `error`/`errorifexists` (Spark's default) and `ignore` act on an existing table.
    """
    save_mode = (mode or "errorifexists").lower()
    if save_mode not in SAVE_MODES:
        raise ConfigError(f"save mode {mode!r} is not one of {', '.join(SAVE_MODES)}")
    opts = _write_options(with_session_s3_options(df.sparkSession, path, options))
    operation = parse_operation(opts)
    if operation in (WriteOperation.DELETE, WriteOperation.DELETE_PARTITION) and save_mode != "append":
        raise ConfigError(
            f"hoodie.datasource.write.operation={operation.value} takes mode('append') only, as in Hudi; "
            f"mode({mode!r}) would replace the table's data with the rows meant to be deleted"
        )
    table_options = {
        k: v for k, v in opts.items() if k not in WRITE_ONLY_KEYS and k != "path" and not is_storage_option(k)
    }
    storage_options = storage_options_of(opts)
    engine = SparkEngine(df.sparkSession)
    try:
        table = Table.open(path, options=table_options, storage_options=storage_options, engine=engine)
        exists = True
    except TableNotFoundError:
        exists = False
    if exists and save_mode in ("error", "errorifexists"):
        raise ConfigError(f"a table already exists at {path}; use mode('append') or mode('overwrite')")
    if exists and save_mode == "ignore":
        log.info("table %s exists; mode('ignore') writes nothing", path)
        return
    if not exists:
        schema = arrow_schema(df.schema)
        table = Table.create(
            path, options=table_options, storage_options=storage_options, engine=engine, schema=_data_schema(schema)
        )
    if exists and save_mode == "overwrite" and operation not in (WriteOperation.INSERT_OVERWRITE_TABLE,):
        operation = WriteOperation.INSERT_OVERWRITE_TABLE
    if operation is WriteOperation.DELETE_PARTITION:
        table.delete_partition(_partitions_to_delete(table, df, opts), engine=engine)
        return
    _TABLE_WRITES[operation](table, df, engine=engine)


def _data_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f for f in schema if f.name not in META_COLUMNS])


def _partitions_to_delete(table: Any, df: DataFrame, options: Mapping[str, Any]) -> list[str]:
    listed = options.get(PARTITIONS_TO_DELETE)
    if listed:
        return list(parse_fields(str(listed)))

    config = table.config
    fields = list(config.partition_fields)
    missing = [f for f in fields if f not in df.columns]
    if missing:
        raise ConfigError(f"delete_partition needs {PARTITIONS_TO_DELETE} or the partition column(s) {missing}")
    values = pa.Table.from_pylist([r.asDict() for r in df.select(*fields).distinct().collect()])
    return sorted(set(partition_paths(values, config).to_pylist()))


def read_dataframe(spark: SparkSession, path: str, options: Mapping[str, Any]) -> DataFrame:
    """`spark.read.format("lakeward").options(...).load(path)` on the Spark engine."""
    opts = with_session_s3_options(spark, path, {str(k): v for k, v in options.items()})
    _check_option_names(opts, READ_KEYS, "read")
    query = str(opts.get(QUERY_TYPE, "snapshot")).lower()
    if query not in QUERY_TYPES:
        raise ConfigError(f"{QUERY_TYPE}={query!r} is not one of {', '.join(QUERY_TYPES)}")
    cdc.check_batch_options(opts)
    for key in opts:
        if key.startswith("hoodie.") and key not in READ_KEYS:
            raise ConfigError(
                f"unknown read option {key!r}{did_you_mean(key, READ_KEYS)}; supported: {sorted(READ_KEYS)}"
            )
    if query == "incremental" and not opts.get(BEGIN):
        raise ConfigError(f"{QUERY_TYPE}=incremental needs {BEGIN}")
    if query != "incremental" and (BEGIN in opts or END in opts):
        raise ConfigError(f"{BEGIN} and {END} apply to {QUERY_TYPE}=incremental only")
    if query == "incremental" and AS_OF in opts:
        raise ConfigError(f"{AS_OF} applies to snapshot and read_optimized queries, not incremental")
    if cdc.is_cdc_query(opts):
        return cdc.read_changes_dataframe(spark, path, opts)
    table = open_table(path, opts, SparkEngine(spark))
    skipping = query != "incremental" and parse_bool(opts.get(DATA_SKIPPING, True), DATA_SKIPPING)
    if skipping and (table.indexes() or _keeps_statistics(table)):
        # Secondary indexes, column or partition statistics: the Python data source, so that Spark
        # pushes the filters down to them (Spark's native Parquet scan never tells lakeward its filters).
        from pyspark.sql.readwriter import DataFrameReader

        load = _ORIGINAL_LOAD[0] or DataFrameReader.load
        return load(spark.read.format(FORMAT).options(**opts), path)
    if query == "incremental":
        return table.read_incremental(str(opts[BEGIN]), str(opts[END]) if opts.get(END) else None)
    as_of = str(opts[AS_OF]) if opts.get(AS_OF) else None
    return table.read(as_of=as_of, read_optimized=query == "read_optimized")


def _keeps_statistics(table: Table) -> bool:
    """Whether the table's metadata table keeps statistics data skipping prunes with (`column_stats`,
    `partition_stats`), on a table version whose readers list through it."""
    kept = metadata_partitions(table.config.to_properties())
    statistics = COLUMN_STATS_PARTITION in kept or PARTITION_STATS_PARTITION in kept
    return statistics and table.config.version.metadata_table_listing


# -- the registered Python data source (reads over Arrow) ------------------------------------
def _data_source_class(pushdown: bool = True) -> type:
    """Format `lakeward`. With `pushdown`, its reader pushes filters to secondary indexes, which needs
    `spark.sql.python.filterPushdown.enabled` (set by `register`): PySpark refuses such a reader without it.
    """
    # lazy: PySpark is optional (lakeward[spark]) and slow to import
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class LakewardReader(DataSourceReader):  # type: ignore[misc]
        def __init__(self, path: str, options: dict[str, str]):
            self.path = path
            self.options = options
            self.pushed: list[Any] = []

        def partitions(self) -> Sequence[InputPartition]:
            """One partition per file slice; the query is resolved once, here (timeline, instants, schema)."""
            plan = _plan_read(self.path, self.options, self.pushed)
            return [InputPartition((slice_to_json(s), plan)) for s in plan.slices]

        def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
            if partition is None or partition.value is None:
                return  # no file slices (e.g. an empty incremental range): Spark still reads one empty partition
            text, plan = partition.value
            yield from read_slice(self.path, plan, slice_from_json(text))

    class LakewardPushdownReader(LakewardReader):
        def pushFilters(self, filters: list[Any]) -> Iterator[Any]:  # noqa: N802 - Spark's name
            """Filters become index predicates; all of them go back to Spark, which applies them again."""
            if parse_bool(self.options.get(DATA_SKIPPING, True), DATA_SKIPPING):
                self.pushed = to_dnf(filters)
            yield from filters

    class LakewardDataSource(DataSource):  # type: ignore[misc]
        @classmethod
        def name(cls) -> str:
            return FORMAT

        def _path(self) -> str:
            path = self.options.get("path")
            if not path:
                raise ConfigError("format lakeward needs a table path: .load(path)")
            return str(path)

        def schema(self) -> Any:
            if cdc.is_cdc_query(self.options):
                return cdc.spark_change_schema(self._path(), self.options)
            schema = open_table(self._path(), self.options).schema()
            if schema is None:
                raise ConfigError(f"the table at {self._path()} has no data yet, so no schema to read")
            return spark_schema(with_meta(schema))

        def reader(self, schema: Any) -> DataSourceReader:
            opts = canonical_read_keys({k: v for k, v in self.options.items() if k != "path"})
            _check_option_names(opts, READ_KEYS, "read")
            cdc.check_batch_options(opts)
            if cdc.is_cdc_query(opts):
                return cdc.change_reader(self._path(), opts)  # type: ignore[no-any-return]
            return (LakewardPushdownReader if pushdown else LakewardReader)(self._path(), opts)

        def streamReader(self, schema: Any) -> Any:
            opts = canonical_read_keys({k: v for k, v in self.options.items() if k != "path"})
            _check_option_names(opts, READ_KEYS, "read")
            return cdc.stream_reader(self._path(), opts, schema)

        def writer(self, schema: Any, overwrite: bool) -> Any:
            raise ConfigError(
                "writes through format lakeward run on the driver's Spark engine: call "
                "lakeward.spark.register(spark) in the driver process before df.write"
            )

    return LakewardDataSource


def _plan_read(path: str, options: Mapping[str, str], pushed: Sequence[Any] = ()) -> ReadPlan:
    """The data-source read of `options`, resolved on the driver."""
    end = options.get(END)
    return plan_read(
        path,
        str(options.get(QUERY_TYPE, "snapshot")).lower(),
        begin=options.get(BEGIN),
        end=str(end) if end else None,
        as_of=options.get(AS_OF),
        pushed=pushed,
        storage_options=storage_options_of(options),
    )


# -- hooks on DataFrameWriter / DataFrameReader ------------------------------------------------
_STATE = "_lakeward_state"
#: Spark's own DataFrameReader.load, kept by `_install_hooks` (reads through the Python data source).
_ORIGINAL_LOAD: list[Any] = [None]


def _state(obj: Any) -> dict[str, Any]:
    state = obj.__dict__.get(_STATE)
    if state is None:
        state = {"format": None, "options": {}, "mode": None, "partition_by": None}
        obj.__dict__[_STATE] = state
    return state


def _install_hooks() -> None:
    # lazy: PySpark is optional (lakeward[spark]) and slow to import
    from pyspark.sql.readwriter import DataFrameReader, DataFrameWriter

    if getattr(DataFrameWriter, "_lakeward_hooked", False):
        return
    for cls in (DataFrameWriter, DataFrameReader):
        _wrap_recorders(cls)

    original_save = DataFrameWriter.save

    @functools.wraps(original_save)
    def save(self: Any, path: str | None = None, format: str | None = None, mode: str | None = None, **kw: Any) -> Any:
        state = _state(self)
        chosen = format or state["format"]
        if chosen is None or str(chosen).lower() != FORMAT:
            return original_save(self, path, format, mode, **kw)
        partition_by = kw.pop("partitionBy", None) or state["partition_by"]
        options = {**state["options"], **kw}
        if partition_by:
            fields = [partition_by] if isinstance(partition_by, str) else list(partition_by)
            options.setdefault("hoodie.datasource.write.partitionpath.field", ",".join(fields))
        target = path or options.pop("path", None)
        if not target:
            raise ConfigError("format lakeward needs a table path: .save(path)")
        write_dataframe(self._df, str(target), mode or state["mode"] or "errorifexists", options)
        return None

    original_load = DataFrameReader.load

    @functools.wraps(original_load)
    def load(self: Any, path: Any = None, format: str | None = None, schema: Any = None, **kw: Any) -> Any:
        state = _state(self)
        chosen = format or state["format"]
        if chosen is None or str(chosen).lower() != FORMAT:
            return original_load(self, path, format, schema, **kw)
        if schema is not None:
            raise ConfigError("format lakeward reads the table's own schema; do not pass schema=")
        options = {**state["options"], **kw}
        target = path or options.pop("path", None)
        if not target or not isinstance(target, str):
            raise ConfigError("format lakeward reads one table: .load(path)")
        return read_dataframe(self._spark, target, options)

    _ORIGINAL_LOAD[0] = original_load
    DataFrameWriter.save = save  # type: ignore[method-assign,assignment]
    DataFrameReader.load = load  # type: ignore[method-assign]
    DataFrameWriter._lakeward_hooked = True  # type: ignore[attr-defined]


def _wrap_recorders(cls: type) -> None:
    """Remember format, options and mode as they are set, and still pass them on to Spark."""
    original_format, original_option, original_options = cls.format, cls.option, cls.options  # type: ignore[attr-defined]

    def format(self: Any, source: str) -> Any:
        _state(self)["format"] = source
        return original_format(self, source)

    def option(self: Any, key: str, value: Any) -> Any:
        _state(self)["options"][key] = value
        return original_option(self, key, value)

    def options(self: Any, **opts: Any) -> Any:
        _state(self)["options"].update(opts)
        return original_options(self, **opts)

    cls.format, cls.option, cls.options = format, option, options  # type: ignore[attr-defined]
    if hasattr(cls, "mode"):
        original_mode = cls.mode  # type: ignore[attr-defined]

        def mode(self: Any, save_mode: str | None) -> Any:
            _state(self)["mode"] = save_mode
            return original_mode(self, save_mode)

        cls.mode = mode  # type: ignore[attr-defined]
    if hasattr(cls, "partitionBy"):
        original_partition_by = cls.partitionBy  # type: ignore[attr-defined]

        def partitionBy(self: Any, *cols: Any) -> Any:
            names = cols[0] if len(cols) == 1 and isinstance(cols[0], list | tuple) else cols
            _state(self)["partition_by"] = [str(c) for c in names]
            return original_partition_by(self, *cols)

        cls.partitionBy = partitionBy  # type: ignore[attr-defined]


def auto_data_source_class() -> type:
    """The data source PySpark registers by itself at session start-up (module `pyspark_lakeward`).

    Without `register(spark)` the session lacks `spark.sql.python.filterPushdown.enabled`, so this one
    reads without secondary-index pushdown; `register(spark)` replaces it with the full one.
    """
    return _data_source_class(pushdown=False)


def register(spark: SparkSession) -> None:
    """Make format `lakeward` available in this session (data source and driver hooks).

    Reads through `spark.read.format("lakeward")` work without this call where PySpark registers
    Python data sources at start-up (module `pyspark_lakeward`, installed with lakeward); this call
    adds secondary-index pushdown, `df.write.format("lakeward")` and the SQL functions.
    """
    spark.dataSource.register(_data_source_class())
    # The reader pushes filters down to secondary indexes (Spark refuses such a reader without this).
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    _install_hooks()
    cdc.register_sql_function(spark)


__all__ = ["FORMAT", "auto_data_source_class", "read_dataframe", "register", "write_dataframe"]
