"""Change data capture on Spark: CDC reads, the `hudi_table_changes` SQL function, streaming.

* Batch: `spark.read.format("lakeward")` with `hoodie.datasource.query.type=incremental` and
  `hoodie.datasource.query.incremental.format=cdc` gives the rows of `Table.read_changes`
  in no particular order (`op`, `ts_ms`, `before`, `after`; JSON images, or typed structs
  with `lakeward.cdc.images=struct`). The CDC splits of `core/cdc/extract.py` (one per
  commit and file group) run as Spark tasks, one file group's splits per task; only the splits travel,
  and the rows stay distributed (`Table.read_changes(engine="spark")` collects them).
* SQL: `hudi_table_changes(path_or_table, begin[, end])`, a Python UDTF (also Hudi's form
  `hudi_table_changes(path_or_table, 'cdc', begin[, end])`). It runs the query in one
  Python task; a catalog table name is resolved to its location on the driver.
* Streaming: `spark.readStream.format("lakeward")` (incremental, `latest_state` or `cdc`).
  Offsets are instant times, `{"instant": "<instant time>"}` (completion times on table
  versions 8+, where ranges are in completion time); a micro-batch reads the commits in
  (start, end]. The latest offset is the latest completed write with no write still in
  flight before it, so a commit that completes late is never skipped, and a restarted
  query re-reads exactly the range Spark recorded in its checkpoint.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from lakeward.core.cdc.extract import ChangeSplit, by_file_group
from lakeward.core.config.read import (
    AS_OF_INSTANT,
    CDC,
    INCREMENTAL_FORMAT,
    INCREMENTAL_FORMATS,
    LATEST_STATE,
    QUERY_TYPE,
    STREAM_START,
)
from lakeward.core.config.read import BEGIN_INSTANT as BEGIN
from lakeward.core.config.read import CDC_IMAGES as IMAGES
from lakeward.core.config.read import END_INSTANT as END
from lakeward.core.exceptions import ConfigError, InstantNotFoundError, LakewardError
from lakeward.core.instant_clock import aware, moment_instant_time
from lakeward.core.read.changes import Images, check_change_range, is_earliest
from lakeward.core.read.incremental import latest_stable_instant
from lakeward.core.read.scan import QueryType
from lakeward.core.read.spark import arrow_schema, slice_from_json, slice_to_json, spark_schema
from lakeward.core.read.spark_changes import ChangeQuery, change_schema, changes_dataframe
from lakeward.core.spark.slices import plan_read, read_slice
from lakeward.core.spark.storage_settings import open_table, storage_options_of
from lakeward.core.table import Table
from lakeward.core.table_services.clean import check_incremental_retained, first_retained_begin
from lakeward.core.table_services.rollback import rollback_target
from lakeward.core.table_services.savepoint import restore_targets
from lakeward.core.timeline import Action, State, normalize_instant_time
from lakeward.core.timeline.archived import has_archived_timeline, read_archived_entries

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

SQL_FUNCTION = "hudi_table_changes"
#: Session conf prefix under which the driver leaves the location of a catalog table named in
#: `hudi_table_changes(...)`; Spark hands `spark.*` session confs to the function's task.
LOCATION_CONF = "spark.lakeward.tableLocation."
OFFSET = "instant"
_ZERO = "0" * 17


# -- options ------------------------------------------------------------------------------------
def incremental_format(options: Mapping[str, Any]) -> str:
    value = str(options.get(INCREMENTAL_FORMAT, LATEST_STATE)).strip().lower()
    if value not in INCREMENTAL_FORMATS:
        raise ConfigError(f"{INCREMENTAL_FORMAT}={value!r} is not one of {', '.join(INCREMENTAL_FORMATS)}")
    return value


def images_option(options: Mapping[str, Any]) -> Images:
    value = str(options.get(IMAGES, "json")).strip().lower()
    if value == "json":
        return "json"
    if value == "struct":
        return "struct"
    raise ConfigError(f"{IMAGES}={value!r} must be json (JSON strings, as Hudi) or struct (typed structs)")


def is_cdc_query(options: Mapping[str, Any]) -> bool:
    """A CDC read: format cdc, and query type incremental (or not given: streams are incremental)."""
    query = str(options.get(QUERY_TYPE, "incremental")).strip().lower()
    return query == "incremental" and incremental_format(options) == CDC


def check_batch_options(options: Mapping[str, Any]) -> None:
    """The CDC-only options of a batch read: valid, and given only where they apply."""
    fmt = incremental_format(options)
    query = str(options.get(QUERY_TYPE, "snapshot")).strip().lower()
    if fmt == CDC and query != "incremental":
        raise ConfigError(f"{INCREMENTAL_FORMAT}=cdc needs {QUERY_TYPE}=incremental (the query is {query!r})")
    if STREAM_START in options:
        raise ConfigError(f"{STREAM_START} applies to spark.readStream only; batch reads use {BEGIN}")
    if IMAGES in options:
        images_option(options)
        if not is_cdc_query(options):
            raise ConfigError(
                f"{IMAGES} applies to CDC reads only ({QUERY_TYPE}=incremental, {INCREMENTAL_FORMAT}=cdc)"
            )
    if is_cdc_query(options) and not str(options.get(BEGIN) or "").strip():
        raise ConfigError(
            f"a CDC query needs {BEGIN} (exclusive; 'earliest' for every retained change), "
            f"with {QUERY_TYPE}=incremental and {INCREMENTAL_FORMAT}={fmt}"
        )


def plan_changes(table: Table, begin: str, end: str | None, images: Images) -> tuple[ChangeQuery, list[ChangeSplit]]:
    """Plan a CDC query as `Table.read_changes` does (a CDC `Scan`): the query and its splits."""
    scan = table.scan(query_type=QueryType.CDC, begin=begin, end=end, images=images)
    plan = scan.plan()
    return ChangeQuery.of(scan, plan), list(plan.change_splits)


def conform(rows: pa.Table, target: pa.Schema) -> pa.Table:
    """`rows` in the `target` schema a query declared (struct images: fields added since are dropped,
    fields missing are null), so that a stream started before a schema change keeps its schema."""
    if rows.schema.equals(target):
        return rows
    columns = []
    for field in target:
        column = rows.column(field.name).combine_chunks() if field.name in rows.column_names else None
        if column is None:
            columns.append(pa.nulls(rows.num_rows, field.type))
        elif pa.types.is_struct(field.type) and isinstance(column, pa.StructArray):
            children = [
                column.field(child.name).cast(child.type)
                if column.type.get_field_index(child.name) >= 0
                else pa.nulls(len(column), child.type)
                for child in field.type
            ]
            mask = pc.invert(pc.is_valid(column))
            columns.append(pa.StructArray.from_arrays(children, fields=list(field.type), mask=mask))
        else:
            columns.append(column.cast(field.type))
    return pa.Table.from_arrays(columns, schema=target)


# -- batch: a Spark DataFrame -------------------------------------------------------------------
def read_changes_dataframe(spark: SparkSession, path: str, options: Mapping[str, Any]) -> DataFrame:
    """The CDC query of `spark.read.format("lakeward")...load(path)`: one Spark task per file group.

    As Hudi's CDC relation, the rows come in no particular order (a global sort would run
    every split twice: once to sample the sort keys). `orderBy("ts_ms", "op")` gives commit
    order, with a delete of a key before its insert in the same commit (insert_overwrite).
    """
    check_batch_options(options)
    end = options.get(END)
    query, splits = plan_changes(
        open_table(path, options), str(options[BEGIN]), str(end) if end else None, images_option(options)
    )
    return changes_dataframe(spark, query, splits)


def fell_behind(offset: str, error: InstantNotFoundError) -> str:
    """The error of a stream whose next micro-batch begins at `offset`, which `error` says can no
    longer be read: the stream cannot move its begin itself (its checkpoint holds the offset)."""
    return (
        f"the stream fell behind: the changes after the stream's offset {offset} are no longer all readable "
        f"({error}). To go on, start it again with a new checkpoint location and startOffset earliest (the "
        "changes it missed are lost), and keep more history for streams this slow (hoodie.cleaner.commits.retained, "
        "hoodie.keep.min.commits)"
    )


# -- the registered Python data source: batch and streaming readers --------------------------------
def spark_change_schema(path: str, options: Mapping[str, Any]) -> StructType:
    """The Spark schema of a CDC read of the table at `path`."""
    return spark_schema(change_schema(open_table(path, options).schema(), images_option(options)))


@functools.cache
def _reader_classes() -> tuple[type, type]:
    # lazy: PySpark is optional (lakeward[spark]) and slow to import
    from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

    try:  # PySpark 4.2+: Trigger.AvailableNow stops at the latest offset seen when the query starts
        # lazy: PySpark is optional (lakeward[spark]) and slow to import
        from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
    except ImportError:  # pragma: no cover - older PySpark wraps the source itself
        SupportsTriggerAvailableNow = object  # type: ignore[assignment,misc]  # noqa: N806

    class ChangeReader(DataSourceReader):  # type: ignore[misc]
        """A batch CDC read: one partition per file group (its splits)."""

        def __init__(self, path: str, options: Mapping[str, Any]):
            check_batch_options(options)
            end = options.get(END)
            self.query, self.splits = plan_changes(
                open_table(path, options), str(options[BEGIN]), str(end) if end else None, images_option(options)
            )

        def partitions(self) -> Sequence[InputPartition]:
            return [InputPartition(group) for group in by_file_group(self.splits)]

        def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
            yield from self.query.rows(partition.value).to_batches()

        def __getstate__(self) -> dict[str, Any]:
            return {"query": self.query, "splits": []}  # each partition carries its own splits

    class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc,valid-type]
        """Incremental reads of (start, end] per micro-batch; offsets are instant times (versions 8+:
        completion times)."""

        def __init__(self, path: str, options: Mapping[str, Any], schema: StructType):
            self.path = path
            self.options = dict(options)
            self.format = check_stream_options(self.options)
            self.images = images_option(self.options)
            self.schema = arrow_schema(schema)
            self.target: str | None = None

        def _table(self) -> Table:
            return open_table(self.path, self.options)

        def initialOffset(self) -> dict[str, str]:
            return {OFFSET: initial_instant(self._table(), self.options, self.format)}

        def latestOffset(self, start: dict[str, str] | None = None, limit: Any = None) -> dict[str, str]:
            begin = start[OFFSET] if start else _ZERO
            table = self._table()
            timeline = table.timeline()
            check_nothing_read_was_undone(table.storage, timeline, begin, table.config.archive_folder)
            latest = latest_stable_instant(timeline, begin, table.storage)
            if self.target is not None:
                latest = max(min(latest, self.target), begin)
            return {OFFSET: latest}

        def prepareForTriggerAvailableNow(self) -> None:
            table = self._table()
            self.target = latest_stable_instant(table.timeline(), _ZERO, table.storage)

        def partitions(self, start: dict[str, str], end: dict[str, str]) -> Sequence[InputPartition]:
            begin, stop = start[OFFSET], end[OFFSET]
            if stop <= begin:
                return []
            try:  # a stream that fell behind the cleaner or archival fails rather than skip changes
                if self.format == CDC:
                    query, splits = plan_changes(self._table(), begin, stop, self.images)
                    return [InputPartition((CDC, query, group)) for group in by_file_group(splits)]
                table = self._table()
                check_incremental_retained(table.storage, table.timeline(), begin, stop)
                plan = plan_read(
                    self.path, "incremental", begin=begin, end=stop, storage_options=storage_options_of(self.options)
                )
            except InstantNotFoundError as exc:
                raise InstantNotFoundError(fell_behind(begin, exc)) from exc
            return [InputPartition((LATEST_STATE, plan, slice_to_json(s))) for s in plan.slices]

        def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
            kind, plan, item = partition.value
            if kind == CDC:
                yield from conform(plan.rows(item), self.schema).to_batches()
            else:
                for rows in read_slice(self.path, plan, slice_from_json(item)):
                    if rows.schema.names == self.schema.names:
                        yield rows
                    else:  # a write added columns since the stream started: it keeps its declared ones
                        yield from conform(pa.Table.from_batches([rows]), self.schema).to_batches()

        def commit(self, end: dict[str, str]) -> None:
            """Nothing to release: commits stay on the timeline until cleaned."""

    return ChangeReader, StreamReader


def change_reader(path: str, options: Mapping[str, Any]) -> Any:
    """The registered data source's batch reader for a CDC query."""
    return _reader_classes()[0](path, options)


def stream_reader(path: str, options: Mapping[str, Any], schema: StructType) -> Any:
    """The registered data source's stream reader (`spark.readStream.format("lakeward")`)."""
    return _reader_classes()[1](path, options, schema)


def check_stream_options(options: Mapping[str, Any]) -> str:
    """Validate the options of a streaming read; returns the incremental format."""
    query = str(options.get(QUERY_TYPE, "incremental")).strip().lower()
    if query != "incremental":
        raise ConfigError(f"spark.readStream reads {QUERY_TYPE}=incremental only (latest_state or cdc), not {query!r}")
    if END in options:
        raise ConfigError(f"{END} has no meaning for a stream: it reads every commit as it completes")
    if AS_OF_INSTANT in options:
        raise ConfigError(f"{AS_OF_INSTANT} applies to snapshot reads, not streams")
    fmt = incremental_format(options)
    if IMAGES in options:
        images_option(options)
        if fmt != CDC:
            raise ConfigError(f"{IMAGES} applies to {INCREMENTAL_FORMAT}=cdc only")
    return fmt


def check_nothing_read_was_undone(storage: Any, timeline: Any, offset: str, archive: str = "archived") -> None:
    """InstantNotFoundError when a restore (or, on table version 6, a rollback) that completed after the
    stream's offset undid a commit at or before it: rows the stream delivered are no longer the table's,
    and reading on would hide that from its consumer.

    On versions 8+ offsets are completion times, and a rollback's plan does not say whether the instant
    it undid had completed: a failed write older than the offset is rolled back routinely, so rollbacks
    are not looked at there (a restore is always deliberate); the timeline lists archived restores too.
    On version 6 a rollback or restore archived since the stream's last batch has left the active
    timeline: for a stream whose offset lies before the active timeline's first write, the archive
    (`archive`: `hoodie.archivelog.folder`) is read too."""
    by_completion = bool(timeline.completion_times())
    for instant in timeline.instants:
        if not instant.is_completed or instant.ordering_time <= offset:
            continue
        if instant.action is Action.RESTORE:
            targets = restore_targets(storage, instant)
        elif instant.action is Action.ROLLBACK and not by_completion:
            targets = [rollback_target(storage, instant)]
        else:
            continue
        _refuse_undone(instant.action.value, instant.time, targets, offset)
    writes = timeline.completed_writes()
    if not by_completion and (not writes or offset < writes[0].time) and has_archived_timeline(storage, archive):
        for entry in read_archived_entries(storage, archive):
            action, time = str(entry.get("actionType")), str(entry.get("commitTime"))
            if entry.get("actionState") != State.COMPLETED.name or time <= offset:
                continue
            if action == Action.ROLLBACK.value:
                _refuse_undone(action, time, (entry.get("hoodieRollbackMetadata") or {}).get("commitsRollback"), offset)
            elif action == Action.RESTORE.value:  # the version 6 archive keeps no restore's metadata
                raise InstantNotFoundError(
                    f"restore {time} completed after this stream's offset {offset} and was archived since; the "
                    "archive does not say which commits it undid, so the rows this stream delivered may no longer "
                    "be the table's. Rebuild the consumer from a snapshot read and start a new stream (a new "
                    "checkpoint) from there"
                )


def _refuse_undone(action: str, time: str, targets: Sequence[str] | None, offset: str) -> None:
    read = sorted(str(t) for t in targets or () if str(t) <= offset)
    if read:
        raise InstantNotFoundError(
            f"{action} {time} undid commit(s) {', '.join(read)}, which this stream had already read (its offset "
            f"is {offset}): the rows it delivered are no longer the table's. Rebuild the consumer from a "
            "snapshot read and start a new stream (a new checkpoint) from there"
        )


def initial_instant(table: Table, options: Mapping[str, Any], fmt: str) -> str:
    """Where a new stream starts: `startOffset`, else the begin option, else the earliest instant."""
    key = STREAM_START if options.get(STREAM_START) else BEGIN
    begin = str(options.get(key) or "earliest").strip()
    timeline = table.timeline()
    timezone = table.config.timeline_timezone
    if begin.lower() == "latest":
        begin = latest_stable_instant(timeline, _ZERO, table.storage)
    elif begin.lower() == "earliest":
        begin = "earliest"
    else:
        if begin.isdigit() and len(begin) not in (14, 17) and begin.strip("0"):  # `0`, `000`: the earliest
            raise ConfigError(f"{key}={begin!r} is not earliest, latest or an instant time (yyyyMMddHHmmss[SSS])")
        try:
            begin = normalize_instant_time(begin, timezone)
        except LakewardError as exc:
            raise ConfigError(f"{key}={begin!r} is not earliest, latest or an instant time: {exc}") from None
        now = moment_instant_time(aware(None), timezone)
        if begin > now:  # a typo (2099): the stream would read nothing until then
            raise ConfigError(
                f"{key}={begin} is in the future (now {now}): a stream starting there reads no commit until "
                "then; use latest for the commits from now on"
            )
    from_earliest = is_earliest(begin)
    if fmt == CDC:
        archived = has_archived_timeline(table.storage, table.config.archive_folder)
        begin = check_change_range(timeline, table.config, begin, None, archived)[0]
    elif from_earliest:
        begin = _ZERO
    # every retained change: past the writes a clean removed the files of
    if not from_earliest:
        return begin
    return first_retained_begin(table.storage, timeline, begin, changes=table.config.cdc_mode if fmt == CDC else None)


# -- SQL: hudi_table_changes --------------------------------------------------------------------
def _looks_like_path(value: str) -> bool:
    return "/" in value or "\\" in value or "://" in value


def resolve_table_location(name_or_path: str) -> str:
    """A table path as given, or the location the driver found for a catalog table of that name."""
    value = str(name_or_path or "").strip()
    if not value:
        raise ConfigError(f"{SQL_FUNCTION} needs a table path or a catalog table name as its first argument")
    if _looks_like_path(value):
        return value
    # lazy: PySpark is optional (lakeward[spark]) and slow to import
    from pyspark import TaskContext

    context = TaskContext.get()
    location = context.getLocalProperty(LOCATION_CONF + value) if context is not None else None
    if not location:
        raise ConfigError(
            f"{SQL_FUNCTION}: {value!r} is not a table path, and no Spark catalog table of that name with a "
            "location was found (a table created USING lakeward has no location in Spark's catalog); "
            "pass the table's path instead"
        )
    return location


def table_changes(table: str, first: str, second: str | None = None, third: str | None = None) -> pa.Table:
    """The rows of `hudi_table_changes(table, begin[, end])` or `(table, 'cdc', begin[, end])`."""
    if first is not None and str(first).strip().lower() in INCREMENTAL_FORMATS:
        if str(first).strip().lower() != CDC:
            raise ConfigError(
                f"{SQL_FUNCTION} gives CDC rows only; for latest_state read with spark.read.format('lakeward') "
                f"and {QUERY_TYPE}=incremental"
            )
        begin, end = second, third
    else:
        if third is not None:
            raise ConfigError(f"{SQL_FUNCTION}(path_or_table, begin[, end]): too many arguments")
        begin, end = first, second
    if begin is None or not str(begin).strip():
        raise ConfigError(f"{SQL_FUNCTION} needs a begin instant ('earliest' for every retained change)")
    location = resolve_table_location(table)
    return Table.open(location).read_changes(str(begin), str(end) if end else None, engine="local")


@functools.cache
def _udtf_class() -> type:
    class HudiTableChanges:
        """`hudi_table_changes(path_or_table, begin[, end])`: the CDC rows, JSON images."""

        def eval(self, table: str, first: str, second: str | None = None, third: str | None = None) -> Iterator[Any]:
            result = table_changes(table, first, second, third)
            for batch in result.to_batches():
                yield from zip(*(column.to_pylist() for column in batch.columns), strict=True)

    return HudiTableChanges


def register_sql_function(spark: SparkSession) -> None:
    """Register `hudi_table_changes` in this session, and let its table names resolve through the catalog."""
    # lazy: PySpark is optional (lakeward[spark]) and slow to import
    from pyspark.sql.functions import udtf

    function = udtf(_udtf_class(), returnType="op string, ts_ms string, before string, after string")
    spark.udtf.register(SQL_FUNCTION, function)  # type: ignore[arg-type]
    _install_sql_hook()


_CALL = re.compile(SQL_FUNCTION + r"""\s*\(\s*(?:'([^'\\]*)'|"([^"\\]*)")""", re.I)


def named_tables(sql: str) -> list[str]:
    """The first arguments of `hudi_table_changes(...)` calls in a statement that are not paths."""
    names = []
    for match in _CALL.finditer(sql):
        value = next(g for g in match.groups() if g is not None)
        if value and not _looks_like_path(value):
            names.append(value)
    return names


def catalog_location(spark: SparkSession, name: str, sql: Any = None) -> str | None:
    """The location of catalog table `name`, when the catalog knows it and gives one."""
    run = sql or spark.sql
    try:
        rows = run(f"DESCRIBE TABLE EXTENDED {name}").collect()
    except Exception:  # not a table (the function then fails naming it); any error of Spark's own
        return None
    for row in rows:
        if str(row[0]).strip() == "Location" and row[1]:
            return str(row[1]).strip()
    return None


def _install_sql_hook() -> None:
    """Before `spark.sql(...)` runs a statement naming a table in `hudi_table_changes`, put the
    table's catalog location in the session conf, which Spark passes to the function's task
    (a Python UDTF has no access to the catalog)."""
    # lazy: PySpark is optional (lakeward[spark]) and slow to import
    from pyspark.sql.session import SparkSession

    if getattr(SparkSession, "_lakeward_sql_hooked", False):
        return
    original = SparkSession.sql

    @functools.wraps(original)
    def sql(self: Any, sqlQuery: str, *args: Any, **kwargs: Any) -> Any:  # noqa: N803 - Spark's name
        if isinstance(sqlQuery, str) and SQL_FUNCTION in sqlQuery.lower():
            for name in named_tables(sqlQuery):
                location = catalog_location(self, name, functools.partial(original, self))
                key = LOCATION_CONF + name
                if location:
                    self.conf.set(key, location)
                else:
                    self.conf.unset(key)
        return original(self, sqlQuery, *args, **kwargs)

    SparkSession.sql = sql  # type: ignore[method-assign]
    SparkSession._lakeward_sql_hooked = True  # type: ignore[attr-defined]


__all__ = [
    "CDC",
    "IMAGES",
    "INCREMENTAL_FORMATS",
    "LATEST_STATE",
    "SQL_FUNCTION",
    "STREAM_START",
    "ChangeQuery",
    "change_reader",
    "change_schema",
    "check_batch_options",
    "check_stream_options",
    "plan_changes",
    "read_changes_dataframe",
    "register_sql_function",
    "stream_reader",
]
