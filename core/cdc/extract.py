"""Which commits and file groups a CDC query covers, and how each one's changes are found.

Hudi's inference cases, one `ChangeSplit` per (commit, file group), except LOG_FILE
splits, which take every wanted delta commit of one file slice at once:

- AS_IS: `.cdc` files hold the commit's changes to the group (a copy-on-write rewrite,
  or a merge-on-read delta commit whose changes a compaction or the change-tracking
  service persisted). Images the logging mode did not persist are looked up, for the
  changed keys only, in the group's rows before / after the commit.
- BASE_FILE_INSERT: a new file group: every record of its base file is an insert.
- BASE_FILE_DELETE: a rewrite with no `.cdc` file (it deleted every record of the
  group): records of the previous base file that are gone are deletes.
- LOG_FILE: a merge-on-read delta commit without persisted changes: its blocks are
  applied to the slice one instant at a time (`changes.fold_log_changes`).
- REPLACE_COMMIT: every record of a group replaced by insert_overwrite or
  delete_partition is a delete. Clustering changes no data and yields nothing.

Splits are plain data, and `split_changes` a plain function of one split, so the local
and Spark engines run the same code.
"""

from __future__ import annotations

import functools
import json
import posixpath
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakeward.core.cdc.changes import (
    AFTER,
    BEFORE,
    DELETE,
    INSERT,
    KEY,
    OP,
    TS,
    UPDATE,
    as_images,
    block_keys,
    diff_states,
    empty_changes,
    fold_log_changes,
    fold_log_changes_at_once,
    inserts_of,
)
from lakeward.core.cdc.image_versions import image_versions
from lakeward.core.cdc.records import cdc_block_changes
from lakeward.core.cdc.splits import ChangeSplit, FileGroupState, InferenceCase
from lakeward.core.config.cdc import SupplementalLoggingMode
from lakeward.core.config.table import TableType
from lakeward.core.exceptions import InstantNotFoundError
from lakeward.core.file_group.base_file import corrupt_base_file
from lakeward.core.file_group.file_group import FileGroup, FileSlice
from lakeward.core.file_group.log_file import DataBlock, DeleteBlock, LogFileReader, RawBlock, block_instant_times
from lakeward.core.file_group.naming import parse_log_file_name
from lakeward.core.file_group.reader import MergeSettings, VisibleInstants, merge_log_blocks, visible_log_blocks
from lakeward.core.file_group.view import FileSystemView
from lakeward.core.merge import RECORD_KEY
from lakeward.core.storage import Storage
from lakeward.core.timeline import Action, Instant, Timeline
from lakeward.core.timeline.clustering_plan import CLUSTER
from lakeward.core.timeline.metadata import WriteStat
from lakeward.core.timeline.transitions import read_commit_metadata

#: Commit metadata key of compactions and change-tracking runs: `{cdc file: [instants]}`,
#: the delta commits whose changes each `.cdc` file they wrote holds.
PERSISTED_KEY = "lakeward.cdc.persisted"
#: Commit metadata key of change-tracking runs: `[[partition, file id, delta commit], ...]`, the
#: delta commits tracked that changed nothing in their group (no `.cdc` block holds them).
UNCHANGED_KEY = "lakeward.cdc.unchanged"


def persisted_changes(storage: Storage, timeline: Timeline) -> dict[tuple[str, str, str], list[str]]:
    """(partition, file id, delta commit) -> `.cdc` files holding that commit's changes to the group
    (no file: a change-tracking run found the commit changed nothing there)."""
    out: dict[tuple[str, str, str], list[str]] = {}
    for instant in timeline.completed({Action.COMMIT, Action.CHANGE_TRACKING}):
        meta = read_commit_metadata(storage, instant)
        raw = meta.extraMetadata.get(PERSISTED_KEY)
        for path, instants in (json.loads(raw) if raw else {}).items():
            parsed = parse_log_file_name(posixpath.basename(path))
            if parsed is None:
                continue
            for t in instants:
                out.setdefault((posixpath.dirname(path), parsed.file_id, t), []).append(path)
        unchanged = meta.extraMetadata.get(UNCHANGED_KEY)
        for partition, file_id, t in json.loads(unchanged) if unchanged else ():
            out.setdefault((str(partition), str(file_id), str(t)), [])
    return out


def persisted_instants(storage: Storage, stats: Sequence[WriteStat]) -> dict[str, list[str]]:
    """`{cdc file: [delta commits]}` of the `.cdc` files a compaction or change-tracking run
    wrote (`PERSISTED_KEY` of its commit metadata), read from the files' block headers."""
    out: dict[str, list[str]] = {}
    for stat in stats:
        for path in stat.cdcStats or {}:
            out[path] = sorted(block_instant_times(storage, path) or ())
    return out


def visible_before(visible: VisibleInstants, instant_time: str) -> VisibleInstants:
    """What a reader saw right before `instant_time` completed."""
    return replace(visible, completed=frozenset(t for t in visible.completed if t < instant_time), as_of=None)


def visible_through(visible: VisibleInstants, instant_time: str) -> VisibleInstants:
    """What a reader saw right after `instant_time` completed."""
    return replace(visible, completed=frozenset(t for t in visible.completed if t <= instant_time), as_of=None)


def slice_with_log(group: FileGroup, log_name: str) -> FileSlice | None:
    """The slice of `group` holding the log file named `log_name` (None once it was cleaned)."""
    for s in group.slices:
        if any(f.name == log_name for f in s.log_files):
            return s
    return None


def _slice_with_base(group: FileGroup, path: str | None = None, instant_time: str | None = None) -> FileSlice | None:
    for s in group.slices:
        if s.base_file is None:
            continue
        if path is not None and s.base_file.path == path:
            return s
        if instant_time is not None and s.base_instant_time == instant_time:
            return s
    return None


def changes_still_readable(
    storage: Storage, timeline: Timeline, instant: Instant, mode: SupplementalLoggingMode
) -> bool:
    """Whether every file a CDC query reads `instant`'s changes from is still on storage. For a
    savepointed write after a clean: the savepoint keeps the write's own file slices, but not the
    versions before them, which its images come from unless its `.cdc` files hold them (logging modes
    with before-images; a delete that empties a file group writes none), nor the file groups an
    overwrite replaced. Conservative: a rewrite of an earlier version counts as needing it."""
    meta = read_commit_metadata(storage, instant)
    view = FileSystemView.load(storage, timeline, partitions=set(meta.touched_partitions()))
    groups = {(g.partition_path, g.file_id): g for g in view.file_groups()}
    live_cdc = {f.path for g in groups.values() for s in g.slices for f in s.cdc_files}
    for stat in meta.write_stats():
        if not stat.fileId or not stat.path:
            continue
        group = groups.get((stat.partitionPath, stat.fileId))
        if group is None:
            return False
        if stat.is_delta:  # folded from its own slice's log, which the savepoint keeps
            if slice_with_log(group, posixpath.basename(stat.path)) is None:
                return False
            continue
        if _slice_with_base(group, path=stat.path) is None:
            return False
        if stat.prevCommit in ("", "null", None):
            continue
        if stat.cdcStats and mode.has_before and all(path in live_cdc for path in stat.cdcStats):
            continue
        if _slice_with_base(group, instant_time=stat.prevCommit) is None:
            return False
    return all(
        (group := groups.get((partition, file_id))) is not None
        and version_before(storage, timeline, group, instant.time) is not None
        for partition, file_ids in (meta.partitionToReplaceFileIds or {}).items()
        for file_id in file_ids
    )


def version_before(storage: Storage, timeline: Timeline, group: FileGroup, instant_time: str) -> FileSlice | None:
    """The slice of `group` a reader saw right before `instant_time` (None: cleaned): its latest slice
    as of then, unless a write between that slice and `instant_time` gave the group a newer base file,
    which a clean deleted since (a savepoint keeps the savepointed write's files, and may keep an older
    version of the group through another savepoint, not the version right before)."""
    kept = group.latest_slice(as_of=instant_time)
    if kept is None:
        return None
    for write in timeline.completed_writes():
        if kept.base_instant_time < write.time < instant_time and any(
            stat.fileId == group.file_id and stat.partitionPath == group.partition_path and not stat.is_delta
            for stat in read_commit_metadata(storage, write).write_stats()
        ):
            return None
    return kept


def plan_change_splits(
    storage: Storage,
    timeline: Timeline,
    table_type: TableType,
    begin: str,
    end: str | None,
    *,
    fold_logs: bool = False,
) -> list[ChangeSplit]:
    """The splits of the completed commits in (begin, end], oldest commit first.

    `fold_logs`: the table's `.cdc` files lack images (logging modes KEY_OP, DATA_BEFORE).
    Merge-on-read delta commits whose changes were persisted are then still folded from
    their slice's log while it is retained (LOG_FILE: one pass over the slice gives every
    image), not read AS_IS (which would read the slice twice per commit for the images).
    """
    commits = []
    for instant in timeline.completed_writes_between(begin, end):
        if table_type is TableType.MERGE_ON_READ and instant.action is Action.COMMIT:
            continue  # a compaction: no change of its own (it may carry persisted ones)
        meta = read_commit_metadata(storage, instant)
        if instant.action is Action.REPLACE_COMMIT and meta.operationType.upper() == CLUSTER:
            continue  # clustering rewrites records without changing them
        commits.append((instant.time, meta))
    view = FileSystemView.load(
        storage, timeline, partitions={p for _, meta in commits for p in meta.touched_partitions()}
    )
    groups = {(g.partition_path, g.file_id): g for g in view.file_groups()}
    persisted = persisted_changes(storage, timeline) if table_type is TableType.MERGE_ON_READ else {}
    visible = VisibleInstants.from_timeline(timeline)
    # What a reader saw right before / after each instant: one set per instant, not per split.
    seen_before = functools.cache(lambda t: visible_before(visible, t))
    seen_through = functools.cache(lambda t: visible_through(visible, t))
    with_log = {
        (g.partition_path, g.file_id, f.name): s for g in groups.values() for s in g.slices for f in s.log_files
    }
    # `.cdc` files still there: a savepoint keeps a delta commit's slice, not the compacted slice a
    # later compaction persisted its changes in, which a clean may have deleted since
    live_cdc = {f.path for g in groups.values() for s in g.slices for f in s.cdc_files}
    splits: list[ChangeSplit] = []
    log_splits: dict[tuple[str, str, str], tuple[FileSlice, list[str]]] = {}

    def group_of(partition: str, file_id: str, instant_time: str) -> FileGroup:
        group = groups.get((partition, file_id))
        if group is None:
            raise InstantNotFoundError(
                f"the files instant {instant_time} wrote for file group {file_id} in {partition or '(root)'} "
                "are gone (cleaned); its changes can no longer be read"
            )
        return group

    def missing(instant_time: str, what: str) -> InstantNotFoundError:
        return InstantNotFoundError(
            f"{what} of instant {instant_time} is gone (cleaned); its changes can no longer be read: "
            "begin the range after it"
        )

    savepointed = {i.time for i in timeline.completed(Action.SAVEPOINT)}
    for t, meta in commits:
        for stat in meta.write_stats():
            if not stat.fileId or not stat.path:
                continue
            partition = stat.partitionPath
            group = group_of(partition, stat.fileId, t)
            if stat.is_delta:
                file_slice = with_log.get((group.partition_path, group.file_id, posixpath.basename(stat.path)))
                if file_slice is None:
                    raise missing(t, f"log file {stat.path}")
                cdc = [path for path in persisted.get((partition, stat.fileId, t), ()) if path in live_cdc]
                if cdc and not fold_logs:
                    splits.append(
                        ChangeSplit(
                            InferenceCase.AS_IS,
                            t,
                            partition,
                            stat.fileId,
                            FileGroupState(file_slice, seen_before(t)),
                            FileGroupState(file_slice, seen_through(t)),
                            (cdc[0],),  # several runs may have persisted it: read one
                        )
                    )
                else:
                    key = (partition, stat.fileId, file_slice.base_instant_time)
                    log_splits.setdefault(key, (file_slice, []))[1].append(t)
                continue
            current = _slice_with_base(group, path=stat.path)
            if current is None:
                raise missing(t, f"base file {stat.path}")
            after = FileGroupState(current, seen_through(t))
            previous = None
            if stat.prevCommit and stat.prevCommit != "null":
                prev_slice = _slice_with_base(group, instant_time=stat.prevCommit)
                if prev_slice is not None:
                    previous = FileGroupState(prev_slice, seen_before(t))
                elif not stat.cdcStats:
                    raise missing(t, f"the previous version ({stat.prevCommit}) of file group {stat.fileId}")
            if stat.cdcStats:
                case = InferenceCase.AS_IS
            elif stat.prevCommit in ("", "null", None):
                case = InferenceCase.BASE_FILE_INSERT
            else:
                case = InferenceCase.BASE_FILE_DELETE
            splits.append(ChangeSplit(case, t, partition, stat.fileId, previous, after, tuple(stat.cdcStats or ())))
        for partition, file_ids in (meta.partitionToReplaceFileIds or {}).items():
            for file_id in file_ids:
                group = groups.get((partition, file_id))
                if group is None:
                    replaced = None
                elif t in savepointed:  # the only writes before the last clean's bound a range may cover
                    replaced = version_before(storage, timeline, group, t)
                else:
                    replaced = group.latest_slice(as_of=t)
                if replaced is None:
                    raise missing(t, f"replaced file group {file_id}")
                splits.append(
                    ChangeSplit(
                        InferenceCase.REPLACE_COMMIT,
                        t,
                        partition,
                        file_id,
                        FileGroupState(replaced, seen_before(t)),
                    )
                )
    for (partition, file_id, _), (file_slice, instants) in log_splits.items():
        splits.append(
            ChangeSplit(
                InferenceCase.LOG_FILE,
                min(instants),
                partition,
                file_id,
                after=FileGroupState(file_slice, visible),
                instants=tuple(sorted(instants)),
            )
        )
    return splits


#: Meta columns a CDC query's images never show (the query drops every meta column; the
#: diffs work on the record key and the commit time): base files are read without them.
_UNSHOWN_META = frozenset({"_hoodie_commit_seqno", "_hoodie_partition_path", "_hoodie_file_name"})
#: Base file versions a task keeps: a file group's commits are taken in order, and commit k
#: reads the version commit k-1 wrote (before) and its own (after).
_KEPT_BASE_FILES = 3


def _dictionary_encoded_strings(parquet: pq.ParquetFile, columns: Sequence[str]) -> list[str]:
    """The top-level string columns among `columns` that every row group stores with a dictionary."""
    meta = parquet.metadata
    schema = parquet.schema_arrow
    wanted = {name for name in columns if name in schema.names and pa.types.is_string(schema.field(name).type)}
    encoded = set(wanted)
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for c in range(group.num_columns):
            chunk = group.column(c)
            if chunk.path_in_schema in encoded and not chunk.has_dictionary_page:
                encoded.discard(chunk.path_in_schema)
    return [name for name in columns if name in encoded]


class SliceReads:
    """The reads of one task over one file group's splits: each base file and each log file's
    visible blocks are read once (splits of consecutive commits share file versions), base
    files only in the columns a CDC query shows."""

    def __init__(self, storage: Storage, full_schema: pa.Schema):
        self.storage = storage
        self.full_schema = full_schema
        self.columns = [n for n in full_schema.names if n not in _UNSHOWN_META]
        self._bases: dict[str, pa.Table] = {}
        self._blocks: dict[tuple[tuple[str, ...], VisibleInstants], list[DataBlock | DeleteBlock]] = {}
        self._cdc: dict[str, list[RawBlock]] = {}
        #: (`.cdc` file, instant) -> the changes its blocks of that instant hold, once decoded.
        self._cdc_changes: dict[tuple[str, str], list[pa.Table]] = {}

    def cdc_blocks(self, path: str) -> list[RawBlock]:
        """The sound blocks of a `.cdc` file, undecoded, read once (it holds many instants' blocks)."""
        if path not in self._cdc:
            self._cdc[path] = list(LogFileReader(self.storage, path).raw_blocks())
        return self._cdc[path]

    def decode_cdc(self, wanted: Mapping[str, Collection[str]]) -> None:
        """Decode the blocks of the instants `wanted` of each `.cdc` file (path -> instants), all in
        one pass (`records.cdc_block_changes`); those decoded already are skipped."""
        todo = {path: {t for t in instants if (path, t) not in self._cdc_changes} for path, instants in wanted.items()}
        picked = {
            path: [raw for raw in self.cdc_blocks(path) if raw.instant_time in instants]
            for path, instants in todo.items()
            if instants
        }
        if not picked:
            return
        for path, found in cdc_block_changes(picked, self.full_schema).items():
            for t in todo[path]:
                self._cdc_changes[(path, t)] = [changes for instant, changes in found if instant == t]

    def cdc_changes(self, paths: Sequence[str], instant_time: str) -> pa.Table:
        """The changes of `instant_time` held in `.cdc` files (`changes.change_schema`; images that
        the files' mode does not persist are null)."""
        self.decode_cdc({path: (instant_time,) for path in paths})
        parts = [changes for path in paths for changes in self._cdc_changes[(path, instant_time)]]
        return pa.concat_tables(parts) if parts else empty_changes(self.full_schema)

    def _read(self, path: str, *, dictionaries: bool = False) -> pa.Table:
        """A base file's rows in the query's columns. `dictionaries`: string columns whose every
        chunk is dictionary-encoded come as Arrow dictionaries (decoding one to strings costs
        as much as a numeric column; callers that keep a few rows cast those afterwards)."""
        try:
            with self.storage.open_input_file(path) as source:
                # One footer parse (read_table parses it more than once); columns a
                # file of an older schema lacks are skipped (and conformed to null later).
                # One thread: a task reads small files one after another, and the query
                # runs file groups in parallel already (threads here cost more CPU than they save).
                # No pre-buffering on a local disk: it coalesces reads for object stores, and
                # costs ~10% of the CPU of reading a small file here.
                pre_buffer = not self.storage.is_local
                parquet = pq.ParquetFile(source, pre_buffer=pre_buffer)
                if dictionaries:
                    encoded = _dictionary_encoded_strings(parquet, self.columns)
                    if encoded:
                        parquet = pq.ParquetFile(
                            source, metadata=parquet.metadata, read_dictionary=encoded, pre_buffer=pre_buffer
                        )
                rows = parquet.read(columns=self.columns, use_threads=False)
        except (pa.ArrowInvalid, OSError) as exc:
            raise corrupt_base_file(self.storage, path, exc) from exc
        return rows.replace_schema_metadata(None)

    def base(self, path: str) -> pa.Table:
        """The rows of a base file (the query's columns), read once."""
        rows = self._bases.pop(path, None)
        if rows is None:
            rows = self._read(path)
            if len(self._bases) >= _KEPT_BASE_FILES:
                del self._bases[next(iter(self._bases))]
        self._bases[path] = rows  # most recently used last
        return rows

    def base_rows(self, path: str, keys: pa.Array) -> pa.Table:
        """The rows of a base file whose record key is one of `keys` (the query's columns).

        A file this task holds already is filtered; another is read with its dictionary-encoded
        string columns left as dictionaries until the filter (only the rows kept are decoded to
        strings) and not kept: a slice's fold (LOG_FILE) reads its base once, and the lookups
        of images (`_fill_images`) read each version once, after every other read of the task.
        """
        rows = self.base(path) if path in self._bases else self._read(path, dictionaries=True)
        stored = rows.column(RECORD_KEY)
        rows = rows.filter(pc.is_in(stored, value_set=keys.cast(stored.type)))
        for i, field in enumerate(rows.schema):
            if pa.types.is_dictionary(field.type):
                value_type = field.type.value_type
                rows = rows.set_column(i, field.with_type(value_type), rows.column(i).cast(value_type))
        return rows

    def blocks(self, file_slice: FileSlice, visible: VisibleInstants) -> list[DataBlock | DeleteBlock]:
        """The log blocks of a slice that a read at `visible` sees, decoded once."""
        key = (tuple(f.path for f in file_slice.log_files), visible)
        if key not in self._blocks:
            self._blocks[key] = visible_log_blocks(self.storage, file_slice.log_files, visible)
        return self._blocks[key]


def read_state(
    storage: Storage,
    state: FileGroupState,
    full_schema: pa.Schema,
    settings: MergeSettings,
    keys: pa.Array | None = None,
    reads: SliceReads | None = None,
) -> pa.Table:
    """The rows of a file group at `state` (only those of `keys`, when given).

    With `reads`, files come from (and stay in) that task's reads, in the query's columns.
    """
    reads = reads if reads is not None else SliceReads(storage, full_schema)
    file_slice = state.file_slice
    base = None
    if file_slice.base_file is not None:
        path = file_slice.base_file.path
        base = reads.base(path) if keys is None else reads.base_rows(path, keys)
    blocks = reads.blocks(file_slice, state.visible) if file_slice.log_files else []
    rows = merge_log_blocks(base, blocks, full_schema, settings)
    if keys is not None and blocks:
        rows = rows.filter(pc.is_in(rows.column(RECORD_KEY), value_set=keys))
    return rows


#: The images `_fill_images` looks up: column, the ops that have one.
_IMAGE_SOURCES = ((BEFORE, (UPDATE, DELETE)), (AFTER, (INSERT, UPDATE)))


def _fill_images(
    storage: Storage,
    pairs: Sequence[tuple[ChangeSplit, pa.Table]],
    full_schema: pa.Schema,
    settings: MergeSettings,
    reads: SliceReads,
) -> list[pa.Table]:
    """The AS_IS changes of splits with the images their `.cdc` files did not persist (KEY_OP,
    DATA_BEFORE) looked up, for the changed keys only, in the file group's versions.

    All splits of a task are filled at once: `image_versions` picks the version each image
    is read from (as few as the changes allow), each version is read once for every key
    looked up in it, and each image is then one `index_in` of its keys in that version's rows.
    """
    if not pairs:
        return []
    parts = [changes for _, changes in pairs]
    sizes = [changes.num_rows for changes in parts]
    # Chunks, not chunked arrays: `pa.chunked_array` converts a chunked array element by element
    # in Python (~1.4 µs a row: ~0.2 s of a 2,000,000-row query per file group).
    ops = pa.chunked_array([chunk for changes in parts for chunk in changes.column(OP).chunks], pa.string())
    missing = {
        column: pc.and_(
            pc.is_in(ops, value_set=pa.array(has_image)),
            pa.chunked_array(
                [chunk for changes in parts for chunk in changes.column(column).is_null().chunks], pa.bool_()
            ),
        )
        for column, has_image in _IMAGE_SOURCES
    }
    flags = {column: m.to_numpy() for column, m in missing.items()}
    if not any(f.any() for f in flags.values()):
        return parts
    changes = pa.concat_tables(parts).combine_chunks()
    keys = changes.column(KEY).combine_chunks()
    splits = [split for split, _ in pairs]
    sources = image_versions(splits, sizes, keys, flags[BEFORE], flags[AFTER])
    row_state = {BEFORE: sources.before, AFTER: sources.after}
    looked_for: dict[int, np.ndarray] = {}
    for column in missing:
        for version in np.unique(row_state[column][flags[column]]):
            rows = flags[column] & (row_state[column] == version)
            looked_for[int(version)] = looked_for[int(version)] | rows if int(version) in looked_for else rows
    found_rows: dict[int, pa.Table] = {}
    for version in sorted(looked_for):
        state = sources.versions[version]
        if state is None:
            split = sources.introduced_by[version]
            raise InstantNotFoundError(
                f"the images of instant {split.instant_time}'s changes to file group {split.file_id} were not "
                "persisted (logging mode) and the file version they come from is gone (cleaned): begin the "
                "range after this instant"
            )
        wanted = pc.unique(keys.filter(pa.array(looked_for[version])))
        found_rows[version] = read_state(storage, state, full_schema, settings, wanted, reads)
    found = pa.concat_tables(list(found_rows.values()))
    offsets = dict(zip(found_rows, np.cumsum([0] + [rows.num_rows for rows in found_rows.values()]).tolist()))
    found_images = as_images(found, full_schema)
    for column in missing:
        if not flags[column].any():
            continue
        # Each missing image's row in `found` (-1: not found, null image): one `index_in` per
        # version, of the keys whose image that version holds.
        at = np.full(changes.num_rows, -1, np.int64)
        for version in np.unique(row_state[column][flags[column]]).tolist():
            rows = np.flatnonzero(flags[column] & (row_state[column] == version))
            found_keys = found_rows[version].column(RECORD_KEY)
            position = pc.index_in(keys.take(pa.array(rows)), value_set=found_keys)
            at[rows] = pc.fill_null(pc.add(position, offsets[version]), -1).to_numpy()
        looked_up = found_images.take(pa.array(at, mask=at < 0))
        existing = changes.column(column)
        filled = looked_up if existing.null_count == len(existing) else pc.if_else(missing[column], looked_up, existing)
        changes = changes.set_column(changes.schema.get_field_index(column), column, filled)
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return [changes.slice(starts[i], sizes[i]) for i in range(len(pairs))]


def split_changes(
    storage: Storage,
    split: ChangeSplit,
    full_schema: pa.Schema,
    settings: MergeSettings,
    reads: SliceReads | None = None,
    *,
    fill: bool = True,
) -> pa.Table:
    """The changes of one split, in `changes.change_schema(full_schema)`.

    Images hold the columns a CDC query shows (the record key, the commit time and the data
    columns; other meta fields may be null). `reads`: the task's reads, shared by the splits
    of one file group (`file_group_changes`). `fill=False`: AS_IS changes come with the images
    their `.cdc` files hold only (the caller fills many splits' at once, `_fill_images`).
    """
    reads = reads if reads is not None else SliceReads(storage, full_schema)
    if split.case is InferenceCase.AS_IS:
        changes = reads.cdc_changes(split.cdc_files, split.instant_time)
        return _fill_images(storage, [(split, changes)], full_schema, settings, reads)[0] if fill else changes
    if split.case is InferenceCase.LOG_FILE:
        assert split.after is not None
        file_slice = split.after.file_slice
        blocks = reads.blocks(file_slice, split.after.visible)
        base = None
        if file_slice.base_file is not None:
            path = file_slice.base_file.path
            # With stored record keys, the folds use only the base records of the keys the log
            # touches (`changes._touched_base`): those alone are decoded in full.
            stored_keys = settings.key_field is None and RECORD_KEY in reads.columns
            base = reads.base_rows(path, block_keys(blocks)) if stored_keys else reads.base(path)
        at_once = fold_log_changes_at_once(base, blocks, full_schema, settings, frozenset(split.instants))
        if at_once is not None:
            return at_once
        by_instant = fold_log_changes(base, blocks, full_schema, settings, frozenset(split.instants))
        parts = [by_instant[t] for t in split.instants if t in by_instant]
        return pa.concat_tables(parts) if parts else empty_changes(full_schema)
    before = read_state(storage, split.before, full_schema, settings, reads=reads) if split.before is not None else None
    after = read_state(storage, split.after, full_schema, settings, reads=reads) if split.after is not None else None
    return diff_states(split.instant_time, before, after, full_schema)


#: New file groups (one insert of one base file each) packed into one task, at most.
_PACKED_INSERTS = 32


def _new_base_file(split: ChangeSplit) -> bool:
    """A split of a new file group whose changes are its base file's rows, every one an insert."""
    return (
        split.case is InferenceCase.BASE_FILE_INSERT
        and split.after is not None
        and split.after.file_slice.base_file is not None
        and not split.after.file_slice.log_files
    )


def by_file_group(splits: Sequence[ChangeSplit], *, pack_new: bool = False) -> list[tuple[ChangeSplit, ...]]:
    """The splits grouped into tasks: one per file group (commit order kept within a group).

    `pack_new`: file groups whose only split is a new base file (`_new_base_file`: merge-on-read
    inserts go to new file groups, one per partition and commit) share tasks, `_PACKED_INSERTS`
    at most (the Spark surfaces keep one partition per file group).
    """
    groups: dict[tuple[str, str], list[ChangeSplit]] = {}
    for split in splits:
        groups.setdefault((split.partition_path, split.file_id), []).append(split)
    tasks, new = [], []
    for group in groups.values():
        if pack_new and len(group) == 1 and _new_base_file(group[0]):
            new.append(group[0])
        else:
            tasks.append(tuple(group))
    tasks.extend(tuple(new[i : i + _PACKED_INSERTS]) for i in range(0, len(new), _PACKED_INSERTS))
    return tasks


def _new_base_file_inserts(reads: SliceReads, splits: Sequence[ChangeSplit], settings: MergeSettings) -> pa.Table:
    """The changes of `_new_base_file` splits: the rows each base file's commit wrote, all
    inserts, found in one pass over the files' rows (read once each, conformed together)."""
    files = [reads.base(split.after.file_slice.base_file.path) for split in splits]  # type: ignore[union-attr]
    if all(f.schema.equals(files[0].schema) for f in files):
        rows = merge_log_blocks(pa.concat_tables(files), [], reads.full_schema, settings)
    else:
        rows = pa.concat_tables([merge_log_blocks(f, [], reads.full_schema, settings) for f in files])
    instants = pa.array(np.repeat([split.instant_time for split in splits], [f.num_rows for f in files]))
    return inserts_of(instants, rows, reads.full_schema)


def file_group_changes(
    storage: Storage, splits: Sequence[ChangeSplit], full_schema: pa.Schema, settings: MergeSettings
) -> pa.Table:
    """The changes of the splits of one task (`by_file_group`), reading each file once."""
    reads = SliceReads(storage, full_schema)
    wanted: dict[str, set[str]] = {}
    for split in splits:
        if split.case is InferenceCase.AS_IS:
            for path in split.cdc_files:
                wanted.setdefault(path, set()).add(split.instant_time)
    reads.decode_cdc(wanted)  # every `.cdc` block of the group in one decoding pass
    new = [split for split in splits if _new_base_file(split)]
    rest = [split for split in splits if not _new_base_file(split)] if len(new) > 1 else list(splits)
    parts = [split_changes(storage, split, full_schema, settings, reads, fill=False) for split in rest]
    if len(new) > 1:
        parts.append(_new_base_file_inserts(reads, new, settings))
    as_is = [i for i, split in enumerate(rest) if split.case is InferenceCase.AS_IS]
    filled = _fill_images(storage, [(rest[i], parts[i]) for i in as_is], full_schema, settings, reads)
    for i, changes in zip(as_is, filled):
        parts[i] = changes
    changes = pa.concat_tables(parts) if parts else empty_changes(full_schema)
    return of_planned_instants(changes, splits)


def planned_instants(splits: Sequence[ChangeSplit]) -> frozenset[str]:
    """The instant times of the commits whose changes `splits` were planned for."""
    return frozenset(t for split in splits for t in (split.instants or (split.instant_time,)))


def of_planned_instants(changes: pa.Table, splits: Sequence[ChangeSplit]) -> pa.Table:
    """The `changes` of the commits `splits` were planned for (by `ts_ms`, the commit's instant time).

    The plan alone decides which commits a range holds (`plan_change_splits`: by instant time
    on version 6, by completion time on 8+), so rows are never compared with the range's
    bounds: on 8+ a commit in (begin, end] may have an instant time at or before `begin` (it
    completed after a later-requested one, or `begin` is its own instant time). This is
    only a guard that a task returns no change of another commit (a `.cdc` file and a
    slice's log hold several commits' blocks; the cases pick the planned ones already).
    """
    times = changes.column(TS)
    wanted = pa.array(sorted(planned_instants(splits)), pa.string())
    found = pc.unique(times)  # the few commit times of one task: checked before any row is copied
    if pc.all(pc.is_in(found, value_set=wanted)).as_py() is not False:
        return changes
    return changes.filter(pc.is_in(times, value_set=wanted))
