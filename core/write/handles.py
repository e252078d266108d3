"""Per-file-group write work: create a new base file, or merge incoming records into a slice.

`write_file_group` is a plain function of (context, task) over Arrow data: the local engine
runs it in threads and the Spark engine as tasks, with the same results. It creates the
marker before the data file, so a failed attempt can always be cleaned up.
"""

from __future__ import annotations

import posixpath
import time
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakeward.core.file_group.base_file import BloomSettings, read_base_file, reusable_bloom, write_base_file
from lakeward.core.file_group.file_group import BaseFile
from lakeward.core.file_group.naming import base_file_name, write_token
from lakeward.core.file_group.partition_metadata import ensure_partition_metadata
from lakeward.core.merge import merge_records
from lakeward.core.schema import META_COLUMNS, conform_batch, with_meta
from lakeward.core.storage import Storage
from lakeward.core.timeline import WriteStat
from lakeward.core.write.markers import create_marker


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

    @cached_property
    def storage(self) -> Storage:
        return Storage.for_uri(self.storage_uri, dict(self.storage_options))

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


def _with_meta_columns(ctx: WriteContext, rows: pa.Table, file_name: str, task_id: int) -> pa.Table:
    """Incoming rows with fresh commit time, sequence numbers and file name."""
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
    return pa.table({**meta, **{name: data.column(name) for name in ctx.data_schema.names}}, schema=ctx.full_schema)


def _renamed(ctx: WriteContext, kept: pa.Table, file_name: str) -> pa.Table:
    """Stored rows carried over unchanged, except `_hoodie_file_name`, in the current schema."""
    kept = conform_batch(kept, ctx.full_schema, allow_missing=True)
    idx = kept.schema.get_field_index("_hoodie_file_name")
    return kept.set_column(idx, "_hoodie_file_name", pa.repeat(pa.scalar(file_name, pa.string()), kept.num_rows))


def write_file_group(ctx: WriteContext, task: FileGroupWrite) -> WriteStat:
    """Write the new version of one file group and describe it as Hudi's write stat."""
    started = time.monotonic()
    storage = ctx.storage
    token = write_token(task.task_id, ctx.stage_id, task.attempt)
    name = base_file_name(task.file_id, token, ctx.instant_time)
    path = posixpath.join(task.partition_path, name) if task.partition_path else name
    create_marker(storage, ctx.instant_time, task.partition_path, name, "MERGE" if task.base_file else "CREATE")
    ensure_partition_metadata(storage, task.partition_path, ctx.instant_time)

    incoming = task.incoming
    if task.base_file is not None:
        base = read_base_file(storage, task.base_file.path)
        outcome = merge_records(
            base,
            incoming,
            task.delete_keys,
            ctx.ordering_field,
            ctx.event_time_ordering,
            task.match_keys,
            task.delete_orderings,
        )
        parts = [_renamed(ctx, outcome.kept_base, name)]
        if outcome.written_incoming.num_rows:
            parts.append(_with_meta_columns(ctx, outcome.written_incoming, name, task.task_id))
        table = pa.concat_tables(parts)
        updates, inserts, deletes = outcome.num_updates, outcome.num_inserts, outcome.num_deletes
        prev_commit = task.base_file.instant_time
        previous = reusable_bloom(storage, task.base_file.path, ctx.bloom)
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

    size = write_base_file(storage, path, table, ctx.avro_schema_with_meta, ctx.bloom, ctx.compression, extend)
    elapsed_ms = int((time.monotonic() - started) * 1000)
    return WriteStat(
        fileId=task.file_id,
        path=path,
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
