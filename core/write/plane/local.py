"""The local data plane: the write's records live in this process as one Arrow table.

Keys are computed and the batch de-duplicated in Arrow; tagging uses the BLOOM, SIMPLE,
BUCKET or RECORD_INDEX index over the file slices; each file group's write runs as a task on the engine
(threads for the local engine).

Merge-on-read routing (Hudi's delta commit): updates and deletes of records in an
existing file group are appended to that group's log (`FileGroupWrite.append_to`);
inserts go to new file groups, or fill small files, which are only slices WITHOUT log
files (their base file is rewritten with the inserts and any updates of the group, as
Hudi does when the index cannot see into log files); with the BUCKET index everything
bound for an existing bucket goes to its log, and a new bucket starts a base file.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakeward.core.engine import Engine, is_spark_dataframe
from lakeward.core.file_group.file_group import FileSlice
from lakeward.core.file_group.reader import MergeSettings
from lakeward.core.file_group.slice_keys import CommittedInstants
from lakeward.core.file_group.view import FileSystemView
from lakeward.core.index import bloom as bloom_index
from lakeward.core.index import bucket as bucket_index
from lakeward.core.index import simple as simple_index
from lakeward.core.index.base import Locations, every_location
from lakeward.core.index.bloom import FilterSource
from lakeward.core.keygen import partition_paths, record_keys
from lakeward.core.merge import PARTITION_PATH, RECORD_KEY, deduplicate
from lakeward.core.metadata_table.bloom_filters import MetadataBloomFilters, keeps_bloom_filters
from lakeward.core.metadata_table.record_index import (
    RecordIndex,
    RecordIndexChange,
    located_by_record_index,
    tagged_change,
)
from lakeward.core.metadata_table.record_index_writer import keeps_record_index
from lakeward.core.schema import META_COLUMNS, cast_columns
from lakeward.core.timeline import Timeline, WriteStat
from lakeward.core.timeline.clustering_plan import pending_clustering_file_groups
from lakeward.core.write.handles import FileGroupWrite, WriteContext, write_file_group
from lakeward.core.write.operation import WriteOperation
from lakeward.core.write.partitioner import LOCATION, Bucket, assign_inserts, merge_buckets, split_by
from lakeward.core.write.plan import Prepared, WorkloadEntry, WritePlan
from lakeward.core.write.validation import IS_DELETED, check_batch_rows

if TYPE_CHECKING:
    from lakeward.core.write.client import WriteClient

log = logging.getLogger(__name__)


def to_arrow(data: Any) -> pa.Table:
    """Accept a pyarrow Table or RecordBatch, a pandas or Spark DataFrame, or a list of dicts; columns
    of dictionary or view types (pandas categoricals, polars strings) come out as their plain types."""
    if isinstance(data, pa.Table):
        table = data
    elif isinstance(data, pa.RecordBatch):
        table = pa.Table.from_batches([data])
    elif isinstance(data, list):
        table = pa.Table.from_pylist(data)
    elif is_spark_dataframe(data):
        table = data.toArrow()  # the local engine was chosen explicitly: collect to this process
    elif type(data).__module__.startswith("pandas"):
        table = pa.Table.from_pandas(data, preserve_index=False)
    else:
        raise TypeError(f"cannot write data of type {type(data).__name__}; pass a pyarrow Table")
    return _plain_types(table)


#: Arrow's alternative layouts of a type, and the type Hudi (Avro) knows them as.
_VIEW_TYPES = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}


def _plain_types(table: pa.Table) -> pa.Table:
    """The batch with dictionary-encoded and view-typed columns cast to their plain value types."""
    for i, field in enumerate(table.schema):
        typ = field.type.value_type if pa.types.is_dictionary(field.type) else field.type
        typ = _VIEW_TYPES.get(typ, typ)
        if typ != field.type:
            table = table.set_column(i, field.with_type(typ), table.column(i).cast(typ))
    return table


#: Operations that honour `_hoodie_is_deleted`: an upsert deletes the flagged keys; the others, which look
#: no key up, write no flagged row (Hudi's create and merge handles skip delete records). `bulk_insert`
#: writes every row, as Hudi's row writer does.
FLAGGED_ROWS_DELETE = frozenset(
    {
        WriteOperation.UPSERT,
        WriteOperation.INSERT,
        WriteOperation.INSERT_OVERWRITE,
        WriteOperation.INSERT_OVERWRITE_TABLE,
    }
)


def _column_or_none(table: pa.Table | None, name: str | None) -> pa.Array | None:
    if table is None or name is None or name not in table.column_names:
        return None
    return table.column(name).combine_chunks()


def _slices_by_partition(view: FileSystemView) -> dict[str, list[FileSlice]]:
    out: dict[str, list[FileSlice]] = {}
    for s in view.latest_file_slices():
        out.setdefault(s.partition_path, []).append(s)
    return out


class LocalDataPlane:
    def __init__(self, client: WriteClient, engine: Engine):
        self._record_index: RecordIndex | None = None
        #: The metadata table's bloom filters, read on the first BLOOM lookup of a write (None: not yet).
        self._bloom_filters: MetadataBloomFilters | None = None
        #: File groups pending clusterings will replace, read on the first BLOOM lookup of a write.
        self._clustering_groups: dict[tuple[str, str], str] | None = None
        #: Keys the tagging found new to the table (RECORD_INDEX upserts), per partition.
        self._new_keys: list[pa.Array] = []
        self.client = client
        self.engine = engine
        self.config = client.config
        self.write_config = client.write_config
        self.storage = client.storage

    # -- prepare ------------------------------------------------------------------------------
    def prepare(
        self, data: Any, operation: WriteOperation, timeline: Timeline, partitions: Sequence[str] | None
    ) -> Prepared:
        if operation is WriteOperation.DELETE_PARTITION:
            schema = self.client.partitions_to_delete_schema(timeline, partitions)
            empty = pa.table({RECORD_KEY: pa.array([], pa.string()), PARTITION_PATH: pa.array([], pa.string())})
            return Prepared(schema, empty)
        batch = to_arrow(data)
        batch = batch.drop_columns([c for c in META_COLUMNS if c in batch.column_names])
        schema = self.client.write_schema(batch.schema, operation, timeline)
        batch = cast_columns(batch, schema)  # a value the table's types cannot hold: refused before any instant
        check_batch_rows(batch, self.config, operation)
        records = batch.append_column(RECORD_KEY, record_keys(batch, self.config, schema))
        records = records.append_column(PARTITION_PATH, partition_paths(batch, self.config, schema))
        if self.client.combines(operation):
            ordering = self.config.precombine_field if operation is not WriteOperation.DELETE else None
            records = deduplicate(records, ordering, by_key_only=self.client.global_index)
        return Prepared(schema, records)

    # -- plan ---------------------------------------------------------------------------------
    def plan(
        self, prepared: Prepared, operation: WriteOperation, view: FileSystemView, partitions: Sequence[str] | None
    ) -> WritePlan:
        records: pa.Table = prepared.records
        deletes_by_group: dict[tuple[str, str], pa.Table] = {}
        self._record_index = None
        self._bloom_filters = None
        self._clustering_groups = None
        self._new_keys = []
        if self._tags_by_record_index(operation):
            self._record_index = RecordIndex(self.storage)
            self._record_index.prefetch(records.column(RECORD_KEY).combine_chunks())  # one pass for all partitions
        replaced: dict[str, list[str]] = {}

        if IS_DELETED in records.column_names and operation in FLAGGED_ROWS_DELETE:
            flagged = pc.fill_null(records.column(IS_DELETED), False)
            deleted_rows = records.filter(flagged)
            records = records.filter(pc.invert(flagged))
            if operation is WriteOperation.UPSERT:
                deletes_by_group = self._locate_deletes(deleted_rows, view, with_ordering=True)

        buckets: list[Bucket] = []
        #: Existing file groups that receive inserts as small files: rewritten, never appended to.
        rewrites: set[tuple[str, str]] = set()
        if operation is WriteOperation.DELETE:
            deletes_by_group = self._locate_deletes(records, view)
        elif operation is WriteOperation.DELETE_PARTITION:
            self.client.check_partitions_exist(view, partitions)
            targets = set(partitions or [])
            replaced = self.client.live_groups(view, lambda p: p in targets)
        elif operation.replaces:
            batch_partitions = set(pc.unique(records.column(PARTITION_PATH)).to_pylist())
            replaced = self.client.live_groups(
                view,
                None if operation is WriteOperation.INSERT_OVERWRITE_TABLE else (lambda p: p in batch_partitions),
            )
            buckets, rewrites = self._assign(records, view, tag=False, small_files=False, fresh=True)
        else:
            tag = operation is WriteOperation.UPSERT
            small = operation is not WriteOperation.BULK_INSERT
            buckets, rewrites = self._assign(records, view, tag=tag, small_files=small)

        slices = {(s.partition_path, s.file_id): s for s in view.latest_file_slices()}
        targeted = {(b.partition_path, b.file_id) for b in buckets}
        for key in deletes_by_group.keys() - targeted:
            buckets.append(Bucket(key[0], key[1], slices.get(key), records.schema.empty_table()))
        ordering = self.config.precombine_field
        merge_on_read = self.client.merge_on_read
        tasks = [
            FileGroupWrite(
                partition_path=b.partition_path,
                file_id=b.file_id,
                task_id=i,
                base_file=b.base.base_file if b.base is not None else None,
                incoming=b.records,
                delete_keys=_column_or_none(deletes_by_group.get((b.partition_path, b.file_id)), RECORD_KEY),
                delete_orderings=_column_or_none(deletes_by_group.get((b.partition_path, b.file_id)), ordering),
                match_keys=operation is not WriteOperation.INSERT,
                append_to=(
                    view.slice_for_append(b.base)
                    if merge_on_read and b.base is not None and (b.partition_path, b.file_id) not in rewrites
                    else None
                ),
            )
            for i, b in enumerate(buckets)
        ]
        workload = [
            WorkloadEntry(
                t.partition_path,
                t.file_id,
                t.append_to.base_instant_time
                if t.append_to is not None
                else t.base_file.instant_time
                if t.base_file
                else None,
                t.incoming.num_rows if t.incoming is not None else 0,
            )
            for t in tasks
        ]

        def run(ctx: WriteContext) -> list[WriteStat]:
            return self.engine.map(lambda t: write_file_group(ctx, t), tasks, "write file groups")

        touched = {(t.partition_path, t.file_id) for t in tasks if t.base_file is not None or t.append_to is not None}
        exact = self._exact_tagging() and operation in (WriteOperation.UPSERT, WriteOperation.DELETE)
        exact = exact and not any(t.delete_orderings is not None for t in tasks)  # a newer record may survive
        return WritePlan(workload, run, touched, replaced, self._index_change(tasks) if exact else None)

    def _tags_by_record_index(self, operation: WriteOperation) -> bool:
        """Whether this write tags through the record index: `hoodie.index.type=RECORD_INDEX` on a table
        whose metadata table keeps `record_index`. Without it (the metadata table disabled, or the
        partition not built yet beside pending instants) every key would look new, so the write tags
        as BLOOM does (footer filters confirmed by stored keys, within the batch's partitions) and says
        so, as the Spark plane falls back to its join."""
        if self.write_config.index_type != "RECORD_INDEX" or operation is WriteOperation.BULK_INSERT:
            return False
        if keeps_record_index(self.storage):
            return True
        log.warning(
            "hoodie.index.type=RECORD_INDEX but %s keeps no record_index partition: tagged as BLOOM "
            "(bloom filters and stored keys)",
            self.storage.uri,
        )
        return False

    def _exact_tagging(self) -> bool:
        """Whether tagging tells exactly which keys are new and where the others live: the record
        index, and BLOOM on merge-on-read (candidates confirmed against the slices' keys); not
        BLOOM on copy-on-write (an unconfirmed single candidate) nor BUCKET (no lookup)."""
        if self._record_index is not None:
            return True
        bloom_confirmed = self.write_config.index_type == "BLOOM" and self.client.merge_on_read
        return bloom_confirmed and self.config.populate_meta_fields

    def _index_change(self, tasks: Sequence[FileGroupWrite]) -> Callable[[str], RecordIndexChange]:
        """The record-index change of a RECORD_INDEX-tagged write: keys the tagging found new go to
        the group they are written to, located deletes are gone, updates stay (`tagged_change`)."""
        found_new = self._new_keys

        def change(instant_time: str) -> RecordIndexChange:  # only asked for when the table keeps the index
            new_keys = pa.concat_arrays(found_new) if found_new else pa.array([], pa.string())
            inserted = []
            for t in tasks:
                if t.incoming is not None and t.incoming.num_rows and len(new_keys):
                    keys = t.incoming.column(RECORD_KEY).combine_chunks()
                    inserted.append((t.partition_path, t.file_id, keys.filter(pc.is_in(keys, value_set=new_keys))))
            deleted = [t.delete_keys for t in tasks if t.delete_keys is not None]
            return tagged_change(instant_time, inserted, deleted)

        return change

    # -- tagging and assignment -----------------------------------------------------------------
    def _locate(
        self,
        partition: str,
        slices: Sequence[FileSlice],
        keys: pa.Array,
        timeline: Timeline,
        deleted: np.ndarray | None = None,
        deleting: bool = False,
    ) -> tuple[np.ndarray | None, pa.Array]:
        """(rows, file groups): the file group holding each key among the latest `slices` of
        `partition`, confirmed against base and committed log keys of the slices (or placed by the
        record index, which is global), then one more entry per further group where a key is live
        too (`index.base.every_location`; `rows`: which key each entry is, None if none).
        `deleted` (BLOOM, SIMPLE): filled with the keys located where they are held only deleted. `deleting`: the
        keys are deleted (a refusal says so)."""
        wc = self.write_config
        committed = CommittedInstants.of(timeline)
        merge = MergeSettings.from_config(self.config)
        also: Locations = []
        if not self.config.populate_meta_fields:
            # virtual keys: no bloom filter in the footers; Hudi's SIMPLE index reads the key fields
            located = simple_index.locate(
                self.storage, self.engine, slices, keys, committed, self.config, also, merge=merge, deleted=deleted
            )
        elif wc.index_type == "SIMPLE":
            located = simple_index.locate(
                self.storage, self.engine, slices, keys, committed, also=also, merge=merge, deleted=deleted
            )
        elif self._record_index is not None:
            deletes = pa.array(np.full(len(keys), deleting)) if deleting else None
            located = located_by_record_index(self._record_index, partition, slices, keys, deletes)
        else:
            # Unconfirmed single bloom candidates are exact only where the merge rewrites the group.
            located = bloom_index.locate(
                self.storage,
                self.engine,
                slices,
                keys,
                wc.bloom_prune_by_ranges,
                committed,
                unconfirmed_single=not self.client.merge_on_read,
                filters=self._metadata_filters(),
                deleted=deleted,
                also=also,
                confirm_in=self._clustered_groups(partition, timeline),
                merge=merge,
            )
        return every_location(located, also)

    def _clustered_groups(self, partition: str, timeline: Timeline) -> set[str]:
        """File ids of `partition` that a pending clustering will replace (read once per write)."""
        if self._clustering_groups is None:
            self._clustering_groups = pending_clustering_file_groups(self.storage, timeline)
        return {file_id for p, file_id in self._clustering_groups if p == partition}

    def _metadata_filters(self) -> FilterSource | None:
        """The bloom filters of `hoodie.bloom.index.use.metadata`: the metadata table's `bloom_filters`
        partition, read once per write, when the table keeps it (None: the footers' filters)."""
        if not self.write_config.bloom_index_use_metadata or not keeps_bloom_filters(self.storage):
            return None
        if self._bloom_filters is None:
            self._bloom_filters = MetadataBloomFilters(self.storage)
        return self._bloom_filters.filter_of

    def _bucket_ids(self, records: pa.Table) -> np.ndarray:
        fields = self.client.bucket_hash_fields(records.column_names)
        return bucket_index.bucket_ids_of(
            records.column(RECORD_KEY), fields, self.write_config.bucket_num_buckets, self.client.complex_key
        )

    def _assign(
        self, records: pa.Table, view: FileSystemView, tag: bool, small_files: bool, fresh: bool = False
    ) -> tuple[list[Bucket], set[tuple[str, str]]]:
        """Buckets of records per file group, and the existing groups that take inserts as small files.

        `fresh` (replace operations): only new file groups; with the BUCKET index still one
        per bucket, so that later writes find the keys in their buckets.
        """
        by_partition = {} if fresh else _slices_by_partition(view)
        all_slices = {(s.partition_path, s.file_id): s for ss in by_partition.values() for s in ss}
        updates: dict[tuple[str, str], pa.Table] = {}
        inserts: list[Bucket] = []
        policy = self.client.sizing_policy(view.timeline, records.nbytes // max(1, records.num_rows))
        for partition, rows in split_by(records, PARTITION_PATH).items():
            partition = partition or ""
            slices = by_partition.get(partition, [])
            if self.write_config.index_type == "BUCKET":
                ids, _new = bucket_index.locate(slices, self._bucket_ids(rows), self.write_config.bucket_num_buckets)
                for file_id, group in split_by(rows.append_column(LOCATION, ids), LOCATION).items():
                    assert file_id is not None
                    updates[(partition, file_id)] = group.drop_columns([LOCATION])
                continue
            if tag and (slices or self._record_index is not None):  # the record index is global
                keys = rows.column(RECORD_KEY).combine_chunks()
                deleted = np.zeros(len(keys), dtype=bool)
                taken, ids = self._locate(partition, slices, keys, view.timeline, deleted)
                located = (rows if taken is None else rows.take(taken)).append_column(LOCATION, ids)
                if deleted.any():  # held only deleted where they go: new to the record index again
                    self._new_keys.append(keys.filter(pa.array(deleted)))
                groups = split_by(located, LOCATION)
                for file_id, group in groups.items():
                    if file_id is not None:
                        updates[(partition, file_id)] = group.drop_columns([LOCATION])
                rows = groups.get(None, rows.schema.empty_table().append_column(LOCATION, pa.array([], pa.string())))
                rows = rows.drop_columns([LOCATION])
            if rows.num_rows:
                if tag:
                    self._new_keys.append(rows.column(RECORD_KEY).combine_chunks())
                inserts.extend(assign_inserts(partition, rows, slices, policy, small_files))
        rewrites = {(b.partition_path, b.file_id) for b in inserts if b.base is not None}
        return merge_buckets(inserts, updates, all_slices), rewrites

    def _locate_deletes(
        self, rows: pa.Table, view: FileSystemView, with_ordering: bool = False
    ) -> dict[tuple[str, str], pa.Table]:
        """Per file group, the keys to delete (and, for delete markers, their ordering values)."""
        by_partition = _slices_by_partition(view)
        ordering = self.config.precombine_field if with_ordering else None
        found: dict[tuple[str, str], pa.Table] = {}
        for partition, group in split_by(rows, PARTITION_PATH).items():
            slices = by_partition.get(partition or "", [])
            if not slices and self._record_index is None:
                continue  # no file group holds a key here (the record index, global, is asked anyway)
            keys = group.column(RECORD_KEY).combine_chunks()
            taken: np.ndarray | None = None  # with further locations of a key: which key each one is
            if self.write_config.index_type == "BUCKET":
                located, new_ids = bucket_index.locate(
                    slices, self._bucket_ids(group), self.write_config.bucket_num_buckets
                )
                if new_ids:  # buckets without a file group hold none of these keys
                    located = pc.if_else(pc.is_in(located, value_set=pa.array(sorted(new_ids))), None, located)
            else:
                taken, located = self._locate(partition or "", slices, keys, view.timeline, deleting=True)
            if taken is not None:
                group, keys = group.take(taken), keys.take(taken)
            columns = {RECORD_KEY: keys, LOCATION: located}
            if ordering and ordering in group.column_names:
                columns[ordering] = group.column(ordering).combine_chunks()
            for file_id, hits in split_by(pa.table(columns), LOCATION).items():
                if file_id is not None:
                    found[(partition or "", file_id)] = hits.drop_columns([LOCATION])
        return found
