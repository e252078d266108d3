"""Reading file slices: `FileGroupReader`, the one reader of a slice's rows that every query,
CDC, index and table service uses (as hudi-rs's `file_group/reader.rs`).

Slices without log files (every copy-on-write slice, and every slice of a read-optimized
query) are read with pyarrow's dataset scanner over exactly their base files: column
projection and row-group pruning by statistics come from Parquet itself. Slices with
log files (merge-on-read) are merged slice by slice, and the filter and projection are
applied to the merged rows, since a log record can change whether a row matches.

Merge-on-read: the rows of a file slice = its base file merged with its log blocks by record key.

Which log blocks count (format doc 8.4), scanning the slice's log files in order
(base instant, version, write token) and each file's blocks in order:

1. blocks written after the query instant (`as_of`) are ignored (time travel);
2. data and delete blocks whose `INSTANT_TIME` is not a completed write instant (nor
   older than the active timeline, i.e. archived) are ignored: a failed write that was
   never rolled back stays invisible;
3. every rollback command block (itself not after `as_of`) voids all data and delete
   blocks of its `TARGET_INSTANT_TIME`, wherever they are in the slice;
4. a log-compacted block (`COMPACTED_BLOCK_TIMES` header) replaces the blocks of the
   instants it lists;
5. corrupt blocks are skipped with a warning (see `log_file.reader`) only when they are
   the torn blocks of a write that never completed; damage to a completed instant's
   blocks is a CorruptFileError naming the file and the instant (`file_group.integrity`).

How versions of one key combine (`lakeward.core.merge.winning_versions`), by the
table's payload class, as lakeward's copy-on-write merge does:

- OverwriteWithLatestAvroPayload (commit-time ordering): the latest write wins: a log
  record replaces the base record and earlier log records; a delete removes the key.
- DefaultHoodieRecordPayload with an ordering field (event-time ordering): the version
  with the largest ordering value wins, ties to the later one; a delete-block entry
  with an ordering value competes like a record (it wins -> the key is gone); one
  without (null, or an Integer 0 as Spark SQL writes it: "natural order") removes all earlier versions.
- A winning record with `_hoodie_is_deleted = true` is a delete.

Differences from Apache Hudi 0.14 Java worth knowing: Java's log scanner combines two
log records of one key with `preCombine` (larger ordering value wins) even for
OverwriteWithLatestAvroPayload, while hudi-rs 0.5.0 (the test oracle) and lakeward let
the later write win; and Java lets a record written after an ordered delete win,
whereas here the larger ordering value decides. Both only differ when one file slice
holds a later write with a smaller ordering value than an earlier one.

Base records whose keys no log block touches are passed through untouched (base-only
slices are not de-duplicated, as in Hudi). Everything is vectorised over Arrow; the only
per-record Python work is decoding Avro data blocks.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakeward.core.config.table import DEFAULT_PAYLOAD, TableConfig
from lakeward.core.engine.local import LocalEngine
from lakeward.core.exceptions import LakewardError, SchemaError
from lakeward.core.file_group.base_file import first_unreadable_base_file, read_base_file
from lakeward.core.file_group.file_group import FileSlice, LogFile
from lakeward.core.file_group.integrity import CHECK_HINT, log_damage, writers_of
from lakeward.core.file_group.log_file import (
    BlockType,
    CommandBlock,
    CommandType,
    DataBlock,
    DeleteBlock,
    HeaderKey,
    LogFileReader,
    RawBlock,
    decode_blocks,
)
from lakeward.core.file_group.log_file.content import DELETE_ORDERING_VALUE, DELETE_RECORD_KEY
from lakeward.core.file_group.slice_keys import CommittedInstants
from lakeward.core.merge import RECORD_KEY, winning_versions
from lakeward.core.schema import META_SCHEMA, conform_batch, key_text, promotes_to, with_meta
from lakeward.core.storage import Storage
from lakeward.core.table_version import LogSlicing, rules_for_layout
from lakeward.core.timeline import Timeline

if TYPE_CHECKING:
    import pyarrow.dataset as ds

IS_DELETED_FIELD = "_hoodie_is_deleted"
#: Meta columns with one or few values per file are decoded as Arrow dictionaries:
#: the same strings, without materialising one copy per row.
DICTIONARY_META_COLUMNS = ("_hoodie_commit_time", "_hoodie_partition_path", "_hoodie_file_name")


def _statistics_may_drop_nan(filter: pc.Expression, schema: pa.Schema) -> bool:
    """Whether pushing `filter` into a Parquet scan may lose NaN rows: Parquet's min/max leave NaN out, so
    a row group whose other values are all `v` is taken as holding only `v`, and the scan folds
    `f != v`, `not in` and `is_nan(f)` to false there. Such filters (negations or NaN tests on a
    floating-point column, as far as the expression's text tells) are applied after the scan instead."""
    text = str(filter)
    if not any(token in text for token in ("!=", "invert(", "is_nan(", "not_equal(")):
        return False
    return any(pa.types.is_floating(f.type) and f.name in text for f in schema)


@cache
def _parquet_format() -> ds.ParquetFileFormat:
    """The Parquet format of every scan, made once: meta columns decoded as dictionaries."""
    import pyarrow.dataset as ds  # lazy: pyarrow.dataset imports pandas (~0.3 s), too slow for CLI start-up

    return ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(dictionary_columns=DICTIONARY_META_COLUMNS))


@dataclass(frozen=True)
class VisibleInstants:
    """Which instants' log blocks a read may see: completed writes, up to `as_of`.

    `archived_before`: instants older than the active timeline's first instant were
    archived, so they completed (Hudi's `containsOrBeforeTimelineStarts`).
    """

    completed: frozenset[str]
    archived_before: str | None = None
    as_of: str | None = None
    #: The timeline the instants come from: lets a read that meets a damaged log block
    #: find which completed instants wrote that file (their commit metadata).
    timeline: Timeline | None = field(default=None, compare=False, repr=False)
    #: Log file names carry the instant that wrote them (versions 8+): a log file of an instant
    #: the read does not see is not opened (a write in flight may be rolled back meanwhile,
    #: deleting it, as Hudi 1.x's file-system view leaves such logs out).
    logs_named_by_writer: bool = False

    @classmethod
    def from_timeline(cls, timeline: Timeline, as_of: str | None = None) -> VisibleInstants:
        """Completed write instants of `timeline`; with `as_of`, none after it (time travel)."""
        first = timeline.instants[0].time if timeline.instants else None
        by_writer = rules_for_layout(timeline.layout).log_slicing is LogSlicing.COMPLETION_TIME
        return cls(timeline.completed_write_times(), first, as_of, timeline, by_writer)

    def in_range(self, instant_time: str) -> bool:
        """Not after the query instant."""
        return self.as_of is None or instant_time <= self.as_of

    def is_visible(self, instant_time: str) -> bool:
        """A completed (or archived) write not after the query instant."""
        if not self.in_range(instant_time):
            return False
        return instant_time in self.completed or (
            self.archived_before is not None and instant_time < self.archived_before
        )


@dataclass(frozen=True)
class MergeSettings:
    """How versions of one record combine: the ordering (precombine) field and the payload semantics."""

    ordering_field: str | None = None
    #: DefaultHoodieRecordPayload: the larger ordering value wins (else: the later write wins).
    event_time_ordering: bool = False
    #: Virtual keys (`TableConfig.virtual_key_field`): the data column records are merged by,
    #: as the stored `_hoodie_record_key` is null.
    key_field: str | None = None

    @classmethod
    def from_config(cls, config: TableConfig) -> MergeSettings:
        """The settings a table's `hoodie.properties` implies (payload class, precombine field, virtual key)."""
        return cls(config.precombine_field, config.payload_class == DEFAULT_PAYLOAD, config.virtual_key_field)


def _log_order(files: Iterable[LogFile]) -> list[LogFile]:
    return sorted(files, key=lambda f: (f.base_instant_time, f.version, f.write_token))


def visible_log_blocks(
    storage: Storage, log_files: Sequence[LogFile], instants: VisibleInstants
) -> list[DataBlock | DeleteBlock]:
    """The data and delete blocks of a slice's log files that a read at `instants` sees, in order.

    Blocks that do not count (module docstring, 1-5) are never decoded.
    """
    raws: list[RawBlock] = []
    for log_file in _log_order(log_files):
        if instants.logs_named_by_writer and not instants.is_visible(log_file.base_instant_time):
            continue
        reader = LogFileReader(storage, log_file.path)
        found = list(reader.raw_blocks())
        if reader.corrupt_blocks:
            _refuse_damage(storage, log_file.path, reader, found, instants)
        raws.extend(found)
    rolled_back: set[str] = set()
    replaced: set[str] = set()
    for raw in raws:
        instant = raw.instant_time
        if instant is None or not instants.in_range(instant):
            continue
        if raw.block_type is BlockType.COMMAND:
            command = CommandBlock(header=raw.header)
            if command.command_type is CommandType.ROLLBACK and command.target_instant_time:
                rolled_back.add(command.target_instant_time)
        elif raw.block_type in (BlockType.AVRO_DATA, BlockType.PARQUET_DATA, BlockType.DELETE):
            compacted = raw.header.get(HeaderKey.COMPACTED_BLOCK_TIMES)
            if compacted and instants.is_visible(instant):
                replaced.update(t.strip() for t in compacted.split(",") if t.strip())
    counted: list[RawBlock] = []
    for raw in raws:
        instant = raw.instant_time
        if instant is None or not instants.is_visible(instant) or instant in rolled_back:
            continue
        if raw.block_type is BlockType.HFILE_DATA:
            raise LakewardError("HFile log blocks (metadata table) are not supported in data tables")
        if raw.block_type not in (BlockType.AVRO_DATA, BlockType.PARQUET_DATA, BlockType.DELETE):
            continue  # command, CDC and corrupt-marker blocks hold no rows of the slice
        if instant in replaced and not raw.header.get(HeaderKey.COMPACTED_BLOCK_TIMES):
            continue
        counted.append(raw)
    # The Avro data blocks of one schema decode in one pass (a slice's log holds many small ones).
    return [block for block in decode_blocks(counted) if isinstance(block, DataBlock | DeleteBlock)]


def _refuse_damage(
    storage: Storage, path: str, reader: LogFileReader, found: Sequence[RawBlock], instants: VisibleInstants
) -> None:
    """Raise CorruptFileError if a corrupt stretch of the log file belongs to a visible instant.

    Torn blocks of writes that never completed are left skipped (module docstring, 5).
    """
    writers = writers_of(storage, instants.timeline, path)
    problems = log_damage(storage, path, reader.corrupt_blocks, found, instants.is_visible, writers)
    if problems:
        error = problems[0].error()
        error.args = (f"{problems[0]}; {CHECK_HINT}",)
        raise error


def _merge_schema(schema: pa.Schema) -> pa.Schema:
    """`schema` with dictionary columns as their value type, except the few-valued meta columns.

    Those (`DICTIONARY_META_COLUMNS`) stay dictionaries when the caller asks for them: the
    base file's values are read as a dictionary, merged as one and returned as one, never
    materialised one string per row (the log records are few, and are encoded instead).
    """
    return pa.schema(
        [
            f.with_type(f.type.value_type)
            if pa.types.is_dictionary(f.type) and f.name not in DICTIONARY_META_COLUMNS
            else f
            for f in schema
        ],
        schema.metadata,
    )


def _dictionary_columns(schema: pa.Schema) -> list[str]:
    """The meta columns `schema` holds as dictionaries (read from base files as dictionaries)."""
    return [f.name for f in schema if f.name in DICTIONARY_META_COLUMNS and pa.types.is_dictionary(f.type)]


def _conform(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """Rows in the merge schema: columns the schema lacks are dropped, missing ones are null."""
    targets = {f.name: f.type for f in schema}  # `schema.names` builds a list on every call
    known = [c for c in rows.column_names if c in targets]
    if len(known) != rows.num_columns:
        rows = rows.select(known)
    for i, f in enumerate(rows.schema):
        target = targets[f.name]
        if pa.types.is_dictionary(f.type) and not pa.types.is_dictionary(target):
            rows = rows.set_column(i, f.name, pc.cast(rows.column(i), f.type.value_type))
        elif pa.types.is_dictionary(target) and not pa.types.is_dictionary(f.type):
            rows = rows.set_column(i, f.name, pc.cast(rows.column(i), target))
    return conform_batch(rows, schema, allow_missing=True)


def _delete_orderings(block: DeleteBlock, ordering_type: pa.DataType) -> tuple[pa.Array, np.ndarray]:
    """(ordering values cast to the ordering field's type, natural-order flags) of a delete block."""
    values = block.records.column(DELETE_ORDERING_VALUE).combine_chunks()
    n = len(values)
    natural = pc.is_null(values).to_numpy(zero_copy_only=False)
    if pa.types.is_null(values.type):
        return pa.nulls(n, ordering_type), np.ones(n, dtype=bool)
    if pa.types.is_int32(values.type):
        # Hudi's "no ordering value" is Java's Integer 0 (`HoodieRecord.DEFAULT_ORDERING_VALUE`, compared
        # with `equals`): an IntWrapper 0. A Long, double or decimal 0 is an ordinary ordering value.
        natural |= pc.fill_null(pc.equal(values, 0), False).to_numpy(zero_copy_only=False)
    if natural.all():  # e.g. Spark SQL's Integer 0 for a timestamp ordering field: nothing to compare
        return pa.nulls(n, ordering_type), natural
    try:
        cast = pc.cast(values, ordering_type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise SchemaError(
            f"delete block of instant {block.instant_time}: ordering values of type {values.type} "
            f"cannot be compared with the ordering field's type {ordering_type}: {exc}"
        ) from exc
    return pc.if_else(pa.array(natural), pa.nulls(n, ordering_type), cast), natural


@dataclass(frozen=True)
class SliceContents:
    """What a read of one file slice decodes: its base file's rows (None without one) and
    the visible data and delete blocks of its log files, in log order.

    Read once, it can serve several computations over the slice (compaction merges it
    and folds its changes for CDC from the same decoded rows).
    """

    base: pa.Table | None
    blocks: Sequence[DataBlock | DeleteBlock]


def read_slice_contents(
    storage: Storage, file_slice: FileSlice, instants: VisibleInstants, dictionary: Sequence[str] = ()
) -> SliceContents:
    """Read the slice's base file and decode its visible log blocks (each file opened once).

    `dictionary`: base-file columns to read as Arrow dictionaries.
    """
    base = None
    if file_slice.base_file is not None:
        base = read_base_file(storage, file_slice.base_file.path, dictionary=dictionary)
    return SliceContents(base, visible_log_blocks(storage, file_slice.log_files, instants))


@dataclass(frozen=True)
class MergedSlice:
    """The merged rows of a slice, and the record keys among them that its base file did not hold."""

    rows: pa.Table
    #: Keys of log records that won and that no base record had: what a bloom filter of the
    #: base file lacks for the merged rows (a rewrite can extend it instead of rebuilding it).
    new_keys: pa.Array


def merge_log_blocks(
    base: pa.Table | None,
    blocks: Sequence[DataBlock | DeleteBlock],
    schema: pa.Schema,
    settings: MergeSettings = MergeSettings(),
) -> pa.Table:
    """The rows of a slice: `base` rows (may be None) merged with visible log `blocks` (in log order).

    `schema` (meta columns first) is the schema of the result; base rows and log records
    are conformed to it. Its columns are plain types, except that the few-valued meta
    columns may be dictionaries (`DICTIONARY_META_COLUMNS`).
    """
    return merge_slice(base, blocks, schema, settings).rows


def merge_slice(
    base: pa.Table | None,
    blocks: Sequence[DataBlock | DeleteBlock],
    schema: pa.Schema,
    settings: MergeSettings = MergeSettings(),
) -> MergedSlice:
    """`merge_log_blocks`, also telling which keys of the result are new to the base file."""
    schema = _merge_schema(schema)
    base_rows = _keyed(_conform(base, schema), settings) if base is not None else schema.empty_table()
    ordering = settings.ordering_field if settings.ordering_field in schema.names else None
    event_time = settings.event_time_ordering and ordering is not None
    ordering_type = schema.field(ordering).type if ordering is not None else None

    data_parts: list[pa.Table] = []
    data_positions: list[np.ndarray] = []
    delete_keys: list[pa.Array] = []
    delete_positions: list[np.ndarray] = []
    delete_orderings: list[pa.Array] = []
    delete_natural: list[np.ndarray] = []
    position = 0
    for block in blocks:
        n = block.records.num_rows
        if n == 0:
            continue
        positions = np.arange(position, position + n, dtype=np.int64)
        position += n
        if isinstance(block, DataBlock):
            data_parts.append(_keyed(_conform(block.records, schema), settings))
            data_positions.append(positions)
            continue
        delete_keys.append(block.records.column(DELETE_RECORD_KEY).combine_chunks().cast(pa.string()))
        delete_positions.append(positions)
        if event_time and ordering_type is not None:
            values, natural = _delete_orderings(block, ordering_type)
            delete_orderings.append(values)
            delete_natural.append(natural)
    if not data_parts and not delete_keys:
        return MergedSlice(base_rows, pa.array([], pa.string()))

    log_rows = pa.concat_tables(data_parts) if data_parts else schema.empty_table()
    deleted = pa.concat_arrays(delete_keys) if delete_keys else pa.array([], pa.string())
    touched = pc.unique(pa.concat_arrays([log_rows.column(RECORD_KEY).combine_chunks(), deleted]))
    hit = pc.is_in(base_rows.column(RECORD_KEY), value_set=touched)
    untouched = base_rows.filter(pc.invert(hit))
    candidates = pa.concat_tables([base_rows.filter(hit), log_rows])
    num_base_touched = candidates.num_rows - log_rows.num_rows

    keys = pa.concat_arrays([candidates.column(RECORD_KEY).combine_chunks(), deleted])
    # Base records come first (-1), then the log in order.
    positions = np.concatenate([np.full(num_base_touched, -1, dtype=np.int64), *data_positions, *delete_positions])
    orderings = None
    resets = None
    if event_time and ordering is not None and ordering_type is not None:
        orderings = pa.concat_arrays(
            [candidates.column(ordering).combine_chunks().cast(ordering_type), *delete_orderings]
        )
        resets = np.concatenate([np.zeros(candidates.num_rows, dtype=bool), *delete_natural])
        if pa.types.is_null(ordering_type):
            orderings = None
    winners = winning_versions(keys, positions, orderings, resets)
    winners = winners[winners < candidates.num_rows]
    merged = candidates.take(pa.array(winners))
    # Log records that won; those whose key no base record had are new to the file group.
    from_log = pa.array(winners >= num_base_touched)
    if IS_DELETED_FIELD in merged.column_names and pa.types.is_boolean(merged.schema.field(IS_DELETED_FIELD).type):
        alive = pc.invert(pc.fill_null(merged.column(IS_DELETED_FIELD), False))
        merged, from_log = merged.filter(alive), pc.filter(from_log, alive)
    logged_keys = merged.column(RECORD_KEY).filter(from_log).combine_chunks()
    base_keys = candidates.column(RECORD_KEY).slice(0, num_base_touched).combine_chunks()
    new_keys = logged_keys.filter(pc.invert(pc.is_in(logged_keys, value_set=base_keys)))
    return MergedSlice(pa.concat_tables([untouched, merged]), new_keys)


def live_keys_among(
    storage: Storage, file_slice: FileSlice, instants: VisibleInstants, settings: MergeSettings, keys: pa.Array
) -> pa.Array:
    """Those of `keys` the slice holds live as a read merges it (`merge_slice`, merge settings included):
    under event-time ordering a delete that lost to a version with a larger ordering value leaves its
    key live. Reads only the key, ordering and `_hoodie_is_deleted` columns of the base file's rows
    for `keys`, and the slice's visible log blocks."""
    keys = keys.cast(pa.string())
    wanted = [c for c in (RECORD_KEY, settings.key_field, settings.ordering_field, IS_DELETED_FIELD) if c]
    base = None
    if file_slice.base_file is not None:
        names = set(_physical_schema(storage, storage.full_path(file_slice.base_file.path)).names)
        base = read_base_file(
            storage,
            file_slice.base_file.path,
            columns=[c for c in wanted if c in names],
            # Virtual keys are rendered from the key column (`_keyed`) after the read.
            filter=pc.field(RECORD_KEY).isin(keys) if settings.key_field is None else None,
        )
    blocks = visible_log_blocks(storage, file_slice.log_files, instants)
    fields: dict[str, pa.Field] = {RECORD_KEY: pa.field(RECORD_KEY, pa.string())}
    for rows in [base, *(b.records for b in blocks if isinstance(b, DataBlock))]:
        for f in rows.schema if rows is not None else ():
            if f.name in wanted and f.name not in fields:
                fields[f.name] = f.with_type(f.type.value_type) if pa.types.is_dictionary(f.type) else f
    schema = pa.schema([fields[c] for c in wanted if c in fields])
    merged = merge_slice(base, blocks, schema, settings).rows
    return keys.filter(pc.is_in(keys, value_set=merged.column(RECORD_KEY).combine_chunks().cast(pa.string())))


def still_deleted(
    storage: Storage,
    file_slice: FileSlice,
    committed: CommittedInstants,
    settings: MergeSettings | None,
    dead: pa.Array,
) -> pa.Array:
    """Of `dead` (keys whose last log event is a delete: `slice_keys.deleted_last`, which weighs no
    ordering value), those a read of the slice finds deleted. Under event-time ordering (`settings`) a
    delete whose ordering value lost to a stored version's leaves its key live (`live_keys_among`)."""
    if not len(dead) or settings is None or not settings.event_time_ordering:
        return dead
    dead = pc.unique(dead.cast(pa.string()))
    instants = VisibleInstants(
        committed.completed, committed.archived_before, logs_named_by_writer=committed.logs_named_by_writer
    )
    live = live_keys_among(storage, file_slice, instants, settings, dead)
    return dead.filter(pc.invert(pc.is_in(dead, value_set=live))) if len(live) else dead


def _keyed(rows: pa.Table, settings: MergeSettings) -> pa.Table:
    """`rows` with `_hoodie_record_key` taken from the virtual key field (`MergeSettings.key_field`).

    Rendered as the simple key generator renders it, so that the keys of delete blocks (written
    from the generated keys) match.
    """
    if settings.key_field is None or settings.key_field not in rows.column_names:
        return rows
    keys = key_text(rows.column(settings.key_field), settings.key_field)
    return rows.set_column(rows.schema.get_field_index(RECORD_KEY), RECORD_KEY, keys)


def read_merged_file_slice(
    storage: Storage,
    file_slice: FileSlice,
    schema: pa.Schema,
    instants: VisibleInstants,
    settings: MergeSettings = MergeSettings(),
) -> pa.Table:
    """The merged rows of one file slice (base file, if any, plus its visible log blocks), in `schema`.

    `schema` holds the meta columns first. Dictionary columns come back as plain values,
    except the few-valued meta columns (`DICTIONARY_META_COLUMNS`), which stay dictionaries.
    A plain function of its arguments, so engine tasks can run it per slice.
    """
    contents = read_slice_contents(storage, file_slice, instants, _dictionary_columns(schema))
    return merge_log_blocks(contents.base, contents.blocks, schema, settings)


@dataclass(frozen=True)
class FileGroupReader:
    """Reads file slices of one table as one query sees them (which log blocks count, how
    versions of a key combine), into Arrow: the reader of hudi-rs's `file_group/reader.rs`.

    `instants`: the completed instants the read may see, up to the query instant
    (`VisibleInstants.from_timeline(timeline, as_of)`); needed only for slices with log
    files. `merge`: the table's merge settings (`MergeSettings.from_config(config)`;
    default: the latest write wins). A plain value, so engine tasks can carry it.
    """

    storage: Storage
    instants: VisibleInstants | None = None
    merge: MergeSettings = MergeSettings()

    def _visible(self) -> VisibleInstants:
        if self.instants is None:
            raise LakewardError(
                "file slices with log files (merge-on-read) need the visible instants: pass "
                "instants=VisibleInstants.from_timeline(timeline, as_of), or read_optimized=True"
            )
        return self.instants

    def log_blocks(self, file_slice: FileSlice) -> list[DataBlock | DeleteBlock]:
        """The data and delete blocks of the slice's log files the read sees, in log order."""
        return visible_log_blocks(self.storage, file_slice.log_files, self._visible())

    def read_file_slice(self, file_slice: FileSlice, schema: pa.Schema) -> pa.Table:
        """The merged rows of one file slice (base file plus visible log blocks) in `schema`
        (meta columns first; dictionary columns come back as plain values)."""
        return read_merged_file_slice(self.storage, file_slice, schema, self._visible(), self.merge)

    def read_file_slices(
        self,
        slices: Sequence[FileSlice],
        schema: pa.Schema | None,
        columns: Sequence[str] | None = None,
        filter: pc.Expression | None = None,
        *,
        read_optimized: bool = False,
    ) -> pa.Table:
        """Rows of the given slices, in the table's current schema (meta columns first).

        Slices with log files are merged with them (snapshot and time travel of
        merge-on-read tables); `read_optimized=True` reads base files only and ignores
        log files, as Hudi's read-optimized query does.
        """
        storage = self.storage
        merged_slices = [] if read_optimized else [s for s in slices if s.log_files]
        if merged_slices:
            self._visible()
        plain_paths = [
            storage.full_path(s.base_file.path)
            for s in slices
            if s.base_file is not None and (read_optimized or not s.log_files)
        ]
        all_paths = [storage.full_path(s.base_file.path) for s in slices if s.base_file is not None]
        if not plain_paths and not merged_slices:
            full = with_meta(schema) if schema is not None else META_SCHEMA
            empty = dictionary_meta(full).empty_table()
            return empty.select(list(columns)) if columns is not None else empty
        dataset_schema = self._dataset_schema(all_paths, schema)
        wanted = list(columns) if columns is not None else None
        parts: list[pa.Table] = []
        if plain_paths:
            import pyarrow.dataset as ds  # lazy: pyarrow.dataset imports pandas (~0.3 s), too slow for CLI start-up

            try:  # (the dataset looks the files up: one lost raises here)
                dataset = ds.dataset(
                    plain_paths, schema=dataset_schema, format=_parquet_format(), filesystem=storage.fs
                )
                if filter is not None and _statistics_may_drop_nan(filter, dataset_schema):
                    parts.append(dataset.to_table().filter(filter).select(wanted or dataset_schema.names))
                else:
                    parts.append(dataset.to_table(columns=wanted, filter=filter))
            except (pa.ArrowInvalid, OSError) as exc:  # Parquet's errors do not say which file
                _raise_damaged(storage, plain_paths, exc)
                raise

        def merged(file_slice: FileSlice) -> pa.Table:
            rows = self.read_file_slice(file_slice, dataset_schema).cast(dataset_schema)
            if filter is not None:
                rows = rows.filter(filter)
            return rows.select(wanted) if wanted is not None else rows

        # Slices merge independently, mostly in Arrow and Avro code that releases the GIL.
        parts.extend(LocalEngine().map(merged, merged_slices, "merge file slices"))
        table = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
        return table.replace_schema_metadata(None)

    def _dataset_schema(self, full_paths: Sequence[str], schema: pa.Schema | None) -> pa.Schema:
        """The schema rows are read in: the newest base file's, plus table columns no file has yet."""
        if full_paths:
            try:
                if schema is None:
                    return dictionary_meta(_physical_schema(self.storage, full_paths[-1]))
                return _aligned_schema(self.storage, full_paths, schema)
            except (pa.ArrowInvalid, OSError) as exc:
                _raise_damaged(self.storage, full_paths, exc)
                raise
        if schema is not None:
            return dictionary_meta(with_meta(schema))
        raise LakewardError("log files cannot be merged without a table schema (no completed write records one)")


def read_file_slices(
    storage: Storage,
    slices: Sequence[FileSlice],
    schema: pa.Schema | None,
    columns: Sequence[str] | None = None,
    filter: pc.Expression | None = None,
    *,
    instants: VisibleInstants | None = None,
    merge: MergeSettings | None = None,
    read_optimized: bool = False,
) -> pa.Table:
    """`FileGroupReader(storage, instants, merge).read_file_slices(...)` in one call."""
    reader = FileGroupReader(storage, instants, merge or MergeSettings())
    return reader.read_file_slices(slices, schema, columns, filter, read_optimized=read_optimized)


def _raise_damaged(storage: Storage, full_paths: Sequence[str], exc: BaseException) -> None:
    """Raise a CorruptFileError naming the damaged file if one of `full_paths` is why `exc` happened."""
    damaged = first_unreadable_base_file(storage, full_paths)
    if damaged is not None:
        raise damaged from exc


def _physical_schema(storage: Storage, path: str) -> pa.Schema:
    return pq.read_schema(path, filesystem=storage.fs).remove_metadata()


def _aligned_schema(storage: Storage, paths: Sequence[str], schema: pa.Schema) -> pa.Schema:
    """`aligned_schema` of the newest of the base files `paths` (full paths)."""
    newest = max(paths, key=lambda p: p.rsplit("_", 1)[-1])
    return aligned_schema(_physical_schema(storage, newest), schema)


def aligned_schema(physical: pa.Schema, schema: pa.Schema) -> pa.Schema:
    """The schema rows of a table of data schema `schema` are read in, from `physical`, the newest
    base file's: its columns, plus table columns no file has yet (all null), with the table's type
    for nested columns the table has grown fields in (a struct field added by a write whose records
    are still in log files: they would not fit the base file's narrower type) and for columns the
    table promoted since that file was written (`schema.promotes_to`: int -> long, ...)."""
    table = with_meta(schema)
    fields = []
    for f in physical:
        i = table.get_field_index(f.name)
        wider = table.field(i).type if i >= 0 else f.type
        widened = wider != f.type and (pa.types.is_nested(f.type) or promotes_to(f.type, wider))
        fields.append(f.with_type(wider) if widened else f)
    missing = [f for f in table if f.name not in physical.names]
    return dictionary_meta(pa.schema(fields + missing, physical.metadata))


def dictionary_meta(schema: pa.Schema) -> pa.Schema:
    """`schema` with the few-valued meta columns (`DICTIONARY_META_COLUMNS`) as Arrow dictionaries."""
    for name in DICTIONARY_META_COLUMNS:
        i = schema.get_field_index(name)
        if i >= 0:
            schema = schema.set(i, pa.field(name, pa.dictionary(pa.int32(), pa.string())))
    return schema
