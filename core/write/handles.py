"""Per-file-group write work: create a new base file, merge incoming records into a slice,
or (merge-on-read) append them to the slice's log.

`write_file_group` is a plain function of (context, task) over Arrow data: the local engine
runs it in threads and the Spark engine as tasks, with the same results. It creates the
marker before the data file, so a failed attempt can always be cleaned up.

Which of the three a task does (Hudi's create, merge and append handles):

- `append_to` set (merge-on-read): the incoming records become a data block (Avro, or
  Parquet with `hoodie.logfile.data.block.format=parquet`) and the deletes a delete block,
  written as the next log file version of that slice (`LogFileWriter`), named with the
  slice's base instant and the task's write token, each file behind an APPEND marker.
- else `base_file` set: the base file is rewritten with the records merged in (copy-on-write
  updates; merge-on-read small files that receive inserts, which never have log files).
  On a merge-on-read table a slice that has log files on storage is never rewritten from
  its base file alone (the log's records would be lost): the task appends to its log
  instead. That keeps a data plane that passes only base files (not slices) correct.
- else: a new base file (a new file group).
"""

from __future__ import annotations

import posixpath
import time
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakeward.core.cdc.changes import diff_states
from lakeward.core.cdc.records import cdc_block, write_cdc_file
from lakeward.core.config.cdc import SupplementalLoggingMode
from lakeward.core.config.table import DEFAULT_PAYLOAD, TableConfig
from lakeward.core.context import TableContext
from lakeward.core.file_group.base_file import BloomSettings, read_base_file, reusable_bloom, write_base_file
from lakeward.core.file_group.file_group import BaseFile, FileSlice, LogFile
from lakeward.core.file_group.log_file import (
    DEFAULT_MAX_LOG_FILE_SIZE,
    DataBlockFormat,
    DeleteBlock,
    LogBlock,
    LogFileWriter,
    data_block,
)
from lakeward.core.file_group.naming import base_file_name, log_file_instant, parse_log_file_name, write_token
from lakeward.core.file_group.partition_metadata import ensure_partition_metadata
from lakeward.core.keygen import with_virtual_keys
from lakeward.core.merge import merge_records
from lakeward.core.schema import META_COLUMNS, VIRTUAL_META_COLUMNS, avro_schema_json, conform_batch, with_meta
from lakeward.core.storage import Storage
from lakeward.core.table_version import LogSlicing
from lakeward.core.timeline import WriteStat
from lakeward.core.write.markers import create_marker, delete_marker

#: Marker IO types (Hudi's `IOType`).
CREATE, MERGE, APPEND = "CREATE", "MERGE", "APPEND"


@dataclass(frozen=True)
class WriteContext:
    """Everything a write task needs; picklable so it can travel to Spark executors."""

    storage_uri: str
    storage_options: tuple[tuple[str, str], ...]
    instant_time: str
    data_schema: pa.Schema
    avro_schema_with_meta: str
    bloom: BloomSettings
    compression: str
    ordering_field: str | None
    event_time_ordering: bool
    stage_id: int = 0
    #: The table is MERGE_ON_READ (writes to existing file groups may go to their logs).
    merge_on_read: bool = False
    #: `hoodie.logfile.data.block.format`: "avro" (Hudi's default) or "parquet".
    log_block_format: str = DataBlockFormat.AVRO.value
    #: `hoodie.logfile.max.size`: a log file rolls over to the next version past this size.
    log_max_size: int = DEFAULT_MAX_LOG_FILE_SIZE
    #: `hoodie.table.cdc.supplemental.logging.mode` when CDC is on (None: off). A rewrite
    #: of an existing file group then also writes the changes it made into a `.cdc` file.
    cdc_mode: SupplementalLoggingMode | None = None
    #: The table version's log slicing: which instant new log files are named with.
    log_slicing: LogSlicing = LogSlicing.BASE_INSTANT
    #: The table's config when it is written without meta fields (virtual keys): files get
    #: null `_hoodie_*` values (but `_hoodie_file_name`) and no bloom filter or key range in
    #: their footer, as Hudi writes them; stored rows get their keys from the key generator.
    virtual_keys: TableConfig | None = None

    @classmethod
    def of(cls, table: TableContext, instant_time: str, schema: pa.Schema) -> WriteContext:
        """What the per-file-group tasks of `instant_time` on `table` need (writes and table services alike)."""
        wc, config = table.write_config, table.config
        return cls(
            storage_uri=table.storage.uri,
            storage_options=tuple(sorted(table.storage.options.items())),
            instant_time=instant_time,
            data_schema=schema,
            avro_schema_with_meta=avro_schema_json(schema, config.name, with_meta=True),
            bloom=BloomSettings(wc.bloom_num_entries, wc.bloom_fpp, wc.bloom_max_entries, wc.bloom_filter_type),
            compression=wc.compression,
            ordering_field=config.precombine_field,
            event_time_ordering=config.payload_class == DEFAULT_PAYLOAD,
            merge_on_read=table.merge_on_read,
            log_block_format=wc.log_block_format,
            log_max_size=wc.log_max_size,
            cdc_mode=config.cdc_mode if config.cdc_enabled else None,
            log_slicing=config.version.log_slicing,
            virtual_keys=config.virtual_keys,
        )

    @cached_property
    def storage(self) -> Storage:
        return Storage.for_uri(self.storage_uri, dict(self.storage_options))

    @property
    def footer_bloom(self) -> BloomSettings | None:
        """The bloom filter base files get (None: no filter nor key range, as Hudi's virtual-key files)."""
        return self.bloom if self.virtual_keys is None else None

    @cached_property
    def full_schema(self) -> pa.Schema:
        return with_meta(self.data_schema)

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state.pop("storage", None)
        state.pop("full_schema", None)
        return state


@dataclass(frozen=True)
class FileGroupWrite:
    """One task: write one new file version of one file group."""

    partition_path: str
    file_id: str
    task_id: int
    base_file: BaseFile | None = None
    incoming: pa.Table | None = None
    delete_keys: pa.Array | None = None
    #: Ordering values of delete markers, aligned with `delete_keys` (None: plain deletes).
    delete_orderings: pa.Array | None = None
    attempt: int = 0
    #: False for plain inserts: incoming rows are appended, never matched to stored keys.
    match_keys: bool = True
    #: Merge-on-read: append the incoming records (a data block) and `delete_keys` (a
    #: delete block) to the log of this slice, the file group's latest, as a new log file
    #: version. Its base instant names the log file; its log files give the latest version
    #: (a hint: a version taken meanwhile is skipped) and the write stat's `logFiles`.
    append_to: FileSlice | None = None


def _with_meta_columns(ctx: WriteContext, rows: pa.Table, file_name: str, task_id: int) -> pa.Table:
    """Incoming rows with fresh commit time, sequence numbers and file name (log records: the file id)."""
    n = rows.num_rows
    counters = pc.cast(pa.array(np.arange(n, dtype=np.int64)), pa.string())
    seqno = pc.binary_join_element_wise(f"{ctx.instant_time}_{task_id}_", counters, "")
    meta = {
        "_hoodie_commit_time": pa.repeat(pa.scalar(ctx.instant_time, pa.string()), n),
        "_hoodie_commit_seqno": seqno,
        "_hoodie_record_key": rows.column("_hoodie_record_key"),
        "_hoodie_partition_path": rows.column("_hoodie_partition_path"),
        "_hoodie_file_name": pa.repeat(pa.scalar(file_name, pa.string()), n),
    }
    data = rows.drop_columns([c for c in META_COLUMNS if c in rows.column_names])
    data = conform_batch(data, ctx.data_schema, allow_missing=True)
    table = pa.table({**meta, **{name: data.column(name) for name in ctx.data_schema.names}}, schema=ctx.full_schema)
    return _stored_meta(ctx, table)


#: Meta columns with one or a few values per file, read as Arrow dictionaries when a file is
#: rewritten: decoding and filtering them as strings costs more than the dictionary's indices.
FEW_VALUED_META_COLUMNS = ("_hoodie_commit_time", "_hoodie_partition_path")


def carried_over(ctx: WriteContext, kept: pa.Table, file_name: str) -> pa.Table:
    """Stored rows carried over unchanged, except `_hoodie_file_name`, in the current schema.

    Dictionary-typed meta columns (`read_stored_rows`) become strings again here, after the
    merge filtered them: the file keeps the schema Hudi readers (and `ARROW:schema`) expect.
    """
    for name in FEW_VALUED_META_COLUMNS:
        idx = kept.schema.get_field_index(name)
        if idx >= 0 and pa.types.is_dictionary(kept.schema.field(idx).type):
            kept = kept.set_column(idx, name, kept.column(idx).cast(kept.schema.field(idx).type.value_type))
    kept = conform_batch(kept, ctx.full_schema, allow_missing=True)
    idx = kept.schema.get_field_index("_hoodie_file_name")
    kept = kept.set_column(idx, "_hoodie_file_name", pa.repeat(pa.scalar(file_name, pa.string()), kept.num_rows))
    return _stored_meta(ctx, kept)


def _stored_meta(ctx: WriteContext, table: pa.Table) -> pa.Table:
    """`table` as a file of the table stores it: on a virtual-key table, every meta column but
    `_hoodie_file_name` null (what Hudi 1.x writes with `hoodie.populate.meta.fields=false`)."""
    if ctx.virtual_keys is None:
        return table
    for name in VIRTUAL_META_COLUMNS:
        idx = table.schema.get_field_index(name)
        table = table.set_column(idx, table.schema.field(idx), pa.nulls(table.num_rows, table.schema.field(idx).type))
    return table


def read_stored_rows(ctx: WriteContext, path: str, for_rewrite: bool = False) -> pa.Table:
    """A base file's rows, with the record keys and partition paths of a virtual-key table derived.

    `for_rewrite`: the rows go through `merge_records` into `carried_over` only (no CDC images),
    so `_hoodie_file_name`, which the rewrite replaces, is not read and the few-valued meta
    columns come as dictionaries (a third less CPU to read a file of the upsert benchmark).
    """
    if for_rewrite:
        rows = read_base_file(ctx.storage, path, dictionary=FEW_VALUED_META_COLUMNS, exclude=("_hoodie_file_name",))
    else:
        rows = read_base_file(ctx.storage, path)
    return rows if ctx.virtual_keys is None else with_virtual_keys(rows, ctx.virtual_keys)


def _stored_log_files(ctx: WriteContext, task: FileGroupWrite, base: BaseFile) -> tuple[LogFile, ...]:
    """Log files on storage of the slice whose base file is `base` (one listing of the partition)."""
    found = []
    for entry in ctx.storage.list_dir(task.partition_path):
        parsed = parse_log_file_name(entry.name)
        if (
            parsed is not None
            and not parsed.is_cdc
            and parsed.file_id == task.file_id
            and parsed.base_instant_time >= base.instant_time
        ):
            found.append(
                LogFile(
                    entry.path,
                    parsed.file_id,
                    parsed.base_instant_time,
                    parsed.version,
                    parsed.write_token,
                    entry.size,
                )
            )
    return tuple(sorted(found, key=lambda f: (f.base_instant_time, f.version, f.write_token)))


def write_file_group(ctx: WriteContext, task: FileGroupWrite) -> WriteStat:
    """Write the new version of one file group and describe it as Hudi's write stat."""
    if task.append_to is not None:
        return append_to_log(ctx, task, task.append_to)
    if ctx.merge_on_read and task.base_file is not None:
        logs = _stored_log_files(ctx, task, task.base_file)
        if logs:
            base = task.base_file
            return append_to_log(ctx, task, FileSlice(task.partition_path, task.file_id, base.instant_time, base, logs))
    started = time.monotonic()
    storage = ctx.storage
    token = write_token(task.task_id, ctx.stage_id, task.attempt)
    name = base_file_name(task.file_id, token, ctx.instant_time)
    path = posixpath.join(task.partition_path, name) if task.partition_path else name
    create_marker(storage, ctx.instant_time, task.partition_path, name, MERGE if task.base_file else CREATE)
    ensure_partition_metadata(storage, task.partition_path, ctx.instant_time)

    incoming = task.incoming
    if task.base_file is not None:
        base = read_stored_rows(ctx, task.base_file.path, for_rewrite=ctx.cdc_mode is None)
        outcome = merge_records(
            base,
            incoming,
            task.delete_keys,
            ctx.ordering_field,
            ctx.event_time_ordering,
            task.match_keys,
            task.delete_orderings,
        )
        parts = [carried_over(ctx, outcome.kept_base, name)]
        if outcome.written_incoming.num_rows:
            parts.append(_with_meta_columns(ctx, outcome.written_incoming, name, task.task_id))
        table = pa.concat_tables(parts)
        updates, inserts, deletes = outcome.num_updates, outcome.num_inserts, outcome.num_deletes
        prev_commit = task.base_file.instant_time
        previous = reusable_bloom(storage, task.base_file.path, ctx.bloom) if ctx.virtual_keys is None else None
        extend = (previous, outcome.inserted_keys) if previous is not None else None
    else:
        rows = (
            incoming
            if incoming is not None
            else pa.table(
                {"_hoodie_record_key": pa.array([], pa.string()), "_hoodie_partition_path": pa.array([], pa.string())}
            )
        )
        table = _with_meta_columns(ctx, rows, name, task.task_id)
        updates, inserts, deletes = 0, table.num_rows, 0
        prev_commit = "null"
        extend = None

    size = write_base_file(storage, path, table, ctx.avro_schema_with_meta, ctx.footer_bloom, ctx.compression, extend)
    cdc_stats = None
    if ctx.cdc_mode is not None and task.base_file is not None and (table.num_rows or not deletes):
        cdc_stats = _write_rewrite_changes(ctx, task, token, base, table)
    elapsed_ms = int((time.monotonic() - started) * 1000)
    return WriteStat(
        fileId=task.file_id,
        path=path,
        cdcStats=cdc_stats,
        prevCommit=prev_commit,
        numWrites=table.num_rows,
        numDeletes=deletes,
        numUpdateWrites=updates,
        numInserts=inserts,
        totalWriteBytes=size,
        partitionPath=task.partition_path,
        fileSizeInBytes=size,
        runtimeStats={
            "totalScanTime": 0,
            "totalUpsertTime": elapsed_ms if task.base_file else 0,
            "totalCreateTime": 0 if task.base_file else elapsed_ms,
        },
    )


def _touched_keys(task: FileGroupWrite) -> pa.Array | None:
    """Record keys a write task upserts or deletes: the only records of the group it can change."""
    parts = []
    if task.incoming is not None:
        parts.append(task.incoming.column("_hoodie_record_key").combine_chunks().cast(pa.string()))
    if task.delete_keys is not None:
        parts.append(task.delete_keys.cast(pa.string()))
    return pc.unique(pa.concat_arrays(parts)) if parts else None


def _write_rewrite_changes(
    ctx: WriteContext, task: FileGroupWrite, token: str, before: pa.Table, after: pa.Table
) -> dict[str, int] | None:
    """Persist the changes a rewrite of a file group made (CDC on): `{cdc file path: size}`.

    A rewrite that deletes every record of the group persists nothing, as Hudi: readers
    infer those deletes from the previous base file (BASE_FILE_DELETE). New file groups
    never get here (readers infer inserts from the new base file: BASE_FILE_INSERT).
    """
    assert ctx.cdc_mode is not None
    schema = ctx.full_schema
    keys = _touched_keys(task)
    changes = diff_states(ctx.instant_time, conform_batch(before, schema, allow_missing=True), after, schema, keys)
    if changes.num_rows == 0:
        return None
    block = cdc_block(changes, ctx.instant_time, ctx.cdc_mode, ctx.avro_schema_with_meta)
    path, size = write_cdc_file(
        ctx.storage,
        task.partition_path,
        task.file_id,
        ctx.instant_time,
        token,
        [block],
        before_create=lambda name: create_marker(ctx.storage, ctx.instant_time, task.partition_path, name, CREATE),
    )
    return {path: size}


def _log_blocks(ctx: WriteContext, task: FileGroupWrite) -> list[LogBlock]:
    """The blocks one append writes: a data block of the incoming records, then a delete block."""
    blocks: list[LogBlock] = []
    if task.incoming is not None and task.incoming.num_rows:
        records = _with_meta_columns(ctx, task.incoming, task.file_id, task.task_id)
        compression = "none" if ctx.compression == "uncompressed" else ctx.compression
        blocks.append(
            data_block(
                records, ctx.instant_time, ctx.avro_schema_with_meta, ctx.log_block_format, compression=compression
            )
        )
    if task.delete_keys is not None and len(task.delete_keys):
        blocks.append(
            DeleteBlock.create(
                ctx.instant_time,
                ctx.avro_schema_with_meta,
                task.delete_keys,
                task.partition_path,
                task.delete_orderings if ctx.ordering_field else None,
            )
        )
    return blocks


def append_to_log(ctx: WriteContext, task: FileGroupWrite, file_slice: FileSlice) -> WriteStat:
    """Append the task's records and deletes to the log of `file_slice` (a new log file version).

    The write stat is Hudi's `HoodieDeltaWriteStat`. Every record appended counts as an
    update, as Hudi's append handle counts the records the index located in the file
    group (with the BUCKET index that includes keys new to the bucket). If the blocks
    roll over into several log files (`hoodie.logfile.max.size`), the one stat names the
    last file in `path` and lists every file written in `logFiles`; Hudi writes one stat
    per file there. `logFiles` names only the files written now, on every version: Hudi 0.x
    also lists the slice's other log files, but on version 6 their names (the slice's base
    instant) cannot tell a committed log from one of a write still in flight, which a
    rollback may delete after this commit vouched for it (in the metadata table's `files`).
    """
    started = time.monotonic()
    storage = ctx.storage
    partition = task.partition_path
    token = write_token(task.task_id, ctx.stage_id, task.attempt)
    log_instant = log_file_instant(ctx.log_slicing, file_slice.base_instant_time, ctx.instant_time)
    base_name = file_slice.base_file.name if file_slice.base_file is not None else ""
    if log_instant != file_slice.base_instant_time:
        # As Hudi 1.x: no base file, and this delta commit as the previous commit (format doc v8/v9 5.2).
        base_name = ""
    stat = WriteStat(
        fileId=task.file_id,
        path="",
        prevCommit=log_instant,
        partitionPath=partition,
        logVersion=0,
        logOffset=0,
        baseFile=base_name,
        logFiles=[],
        recordsStats={"val": None},
    )
    blocks = _log_blocks(ctx, task)
    if not blocks:
        return stat  # nothing to write: the client leaves such a stat out of the commit
    ensure_partition_metadata(storage, partition, ctx.instant_time)

    def marker(path: str) -> None:
        create_marker(storage, ctx.instant_time, partition, posixpath.basename(path), APPEND)

    def taken(path: str) -> None:
        delete_marker(storage, ctx.instant_time, partition, posixpath.basename(path), APPEND)

    latest = max((f.version for f in file_slice.log_files if f.base_instant_time == log_instant), default=0)
    writer = LogFileWriter(
        storage,
        partition,
        task.file_id,
        log_instant,
        token,
        max_file_size=ctx.log_max_size,
        latest_version=latest,
        before_create=marker,
        on_taken=taken,
    )
    written = writer.append(blocks)
    last = written[-1].log_file
    elapsed_ms = int((time.monotonic() - started) * 1000)
    records = sum(w.num_records for w in written)
    stat.path = last.path
    stat.numWrites = records
    stat.numUpdateWrites = records
    stat.numDeletes = sum(w.num_deletes for w in written)
    stat.totalWriteBytes = sum(w.log_file.size for w in written)
    stat.fileSizeInBytes = last.size
    stat.runtimeStats = {"totalScanTime": 0, "totalUpsertTime": elapsed_ms, "totalCreateTime": 0}
    stat.logVersion = last.version
    stat.logFiles = [w.log_file.name for w in written]
    return stat
