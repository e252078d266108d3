"""The metadata table's `record_index` partition: record key -> (data partition, file id), as Hudi 1.x.

Layout (format doc 7.7, `HoodieTableMetadataUtil`): file groups `record-index-0000-0` …
`record-index-NNNN-0` (their number fixed when the partition is initialised); a key lives in group
`abs(abs(javaStringHash(key)) % n)` (`mapRecordKeyToFileGroupIndex`, index version 1). Each cell
is the record key -> Avro `HoodieMetadataRecord` of type 5 whose `recordIndexMetadata` holds the
data partition, the file id (a `<uuid>-<n>` id as two signed 64-bit halves and `fileIndex`,
encoding 0; any other id raw, encoding 1) and the epoch milliseconds of the instant that put the
key in that file. A deleted key is a DELETE block entry (`partitionPath` "record_index",
ordering value 0) in its group's log.

A write whose tagging is exact (the record index's own lookups, on the local and the Spark data
planes; BLOOM on merge-on-read on the local data plane, its candidates confirmed) keeps it from
what the tagging found (`tagged_change`): keys found new go to the file group they are written to,
located deletes are gone, updates keep their location. Every other commit-like instant
(compaction, clustering, replace operations, Spark-plane writes tagged by its join, delete
markers with ordering values, BUCKET and copy-on-write BLOOM writes) is kept from files
(`record_index_change`): for each file group a commit rewrites (a new base file), the keys its
latest slice held before the commit and the keys its new base file holds decide what is added
(new keys, or keys that moved there: clustering) and what is gone; log appends add the keys of
their delete blocks as removals, and the keys of their data blocks that the group's latest slice
did not hold before as new keys of that group (BUCKET-index inserts into an existing bucket go to
its log on merge-on-read; updates in logs do not move keys). Compaction moves no key.
The change is written into the same metadata delta commit as the `files` change
(`metadata_table.writer`), one log file per touched group.

Tagging with `hoodie.index.type=RECORD_INDEX` (`located_by_record_index`): the index is global, as
Hudi's (a key lives in one partition); a record whose key the index places in another partition is
refused rather than written twice.

Lookups (`RecordIndex.locate`) read, per file group the batch's keys hash to, the latest base HFile
and the committed log blocks, oldest to newest, each parsed once into columnar form and cached
for the process (metadata files never change once written). Of a base HFile only the data blocks
the batch's keys fall in are parsed (found by its block index) unless they are most of its blocks:
a batch of nearby keys (recent keys, clustered updates) parses a few blocks, not the file.
"""

from __future__ import annotations

import io
import math
import posixpath
import struct
import threading
import uuid
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakeward.core.config.table import TableConfig, TableType
from lakeward.core.exceptions import ConfigError
from lakeward.core.file_group import log_file
from lakeward.core.file_group.file_group import FileSlice, LogFile
from lakeward.core.file_group.hfile import HFileReader, IndexEntry
from lakeward.core.file_group.hfile_cells import block_cells
from lakeward.core.file_group.hfile_writer import java_string_hash
from lakeward.core.file_group.log_file.avro_vector import read_long
from lakeward.core.file_group.log_file.log_block import BlockType
from lakeward.core.file_group.metadata_listing import (
    base_is_committed,
    load_metadata_timeline,
    log_slice_time,
    metadata_storage,
    read_table_properties,
    slice_times,
)
from lakeward.core.file_group.naming import parse_base_file_name, parse_log_file_name
from lakeward.core.file_group.reader import MergeSettings, VisibleInstants, live_keys_among
from lakeward.core.file_group.slice_keys import (
    RECORD_KEY,
    CommittedInstants,
    block_record_keys,
)
from lakeward.core.file_group.view import FileSystemView
from lakeward.core.index.base import base_file_keys, read_key_states
from lakeward.core.metadata_table.schema import METADATA_RECORD_SCHEMA, MetadataRecordType
from lakeward.core.storage import Storage
from lakeward.core.timeline import CommitMetadata, Timeline, WriteStat
from lakeward.core.timeline.instant_time import parse_instant_time
from lakeward.core.timeline.metadata import COMPACT

RECORD_INDEX_PARTITION = "record_index"
#: `hoodie.metadata.record.index.min.filegroup.count` (Hudi's default 10) and the other sizing
#: knobs of `HoodieTableMetadataUtil.estimateFileGroupCount` (defaults as Hudi's).
MIN_FILE_GROUPS = 10
MAX_FILE_GROUPS = 10_000
MAX_FILE_GROUP_BYTES = 1024 * 1024 * 1024
RECORD_SIZE_ESTIMATE = 48
GROWTH_FACTOR = 2.0
#: Write token of the log files lakeward writes into the metadata table.
LOG_WRITE_TOKEN = "0-0-0"
_ENCODING_UUID = 0
_ENCODING_RAW = 1
_DELETE_ORDERING = 0
#: The Avro bytes every record-index value starts with when its `key` field is "" (Hudi's and
#: lakeward's writers): 5 null meta fields, key "", type 5, three null unions, then branch 1.
_VALUE_PREFIX = b"\x00" * 5 + b"\x00" + bytes([int(MetadataRecordType.RECORD_INDEX) * 2]) + b"\x00" * 3 + b"\x02"
_PARSED_SCHEMA = fastavro.parse_schema(METADATA_RECORD_SCHEMA)


def file_group_id(index: int) -> str:
    """The id of record-index file group `index` (`record-index-0003-0`)."""
    return f"record-index-{index:04d}-0"


def file_group_count(num_records: int, minimum: int = MIN_FILE_GROUPS) -> int:
    """How many file groups a new record index gets for `num_records` keys (Hudi's estimate)."""
    needed = math.ceil(num_records * RECORD_SIZE_ESTIMATE * GROWTH_FACTOR / MAX_FILE_GROUP_BYTES)
    return max(minimum, min(MAX_FILE_GROUPS, needed))


def file_group_indexes(keys: pa.Array, num_groups: int) -> np.ndarray:
    """`abs(abs(javaStringHash(key)) % num_groups)` of every key, vectorised over ASCII keys."""
    keys = keys.cast(pa.string())
    n = len(keys)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.frombuffer(keys.buffers()[1], dtype=np.int32)[keys.offset : keys.offset + n + 1].astype(np.int64)
    data_buffer = keys.buffers()[2]
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    lengths = np.diff(offsets)
    hashes = np.zeros(n, dtype=np.uint32)
    for j in range(int(lengths.max(initial=0))):
        rows = np.flatnonzero(lengths > j)
        hashes[rows] = hashes[rows] * np.uint32(31) + data[offsets[rows] + j]
    signed = hashes.view(np.int32).astype(np.int64)
    non_ascii = np.flatnonzero(
        np.add.reduceat(data[offsets[0] : offsets[-1]] >= 0x80, offsets[:-1] - offsets[0])
        if offsets[-1] > offsets[0]
        else np.zeros(n, bool)
    )
    for row in non_ascii:  # UTF-16 code units differ from UTF-8 bytes: hash those keys one by one
        if lengths[row]:
            signed[row] = np.int64(np.uint32(java_string_hash(keys[row].as_py())).view(np.int32))
    return np.abs(signed) % num_groups


# -- record values ---------------------------------------------------------------------------
def _zigzag(value: int) -> bytes:
    value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while value & ~0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _avro_string(text: str) -> bytes:
    raw = text.encode()
    return _zigzag(len(raw)) + raw


def _read_string(data: bytes, pos: int) -> tuple[str, int]:
    length, pos = read_long(data, pos)
    return data[pos : pos + length].decode(), pos + length


def _signed64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def encode_location(partition: str, file_id: str, instant_ms: int) -> bytes:
    """The Avro value of a record-index cell (`key` ""), byte for byte what fastavro writes."""
    head, _, index = file_id.rpartition("-")
    try:
        parsed = uuid.UUID(head) if index.isdigit() and len(head) == 36 else None
    except ValueError:
        parsed = None
    out = [_VALUE_PREFIX, b"\x02", _avro_string(partition)]
    if parsed is not None and str(parsed) == head:
        high, low = struct.unpack(">qq", parsed.bytes)
        out += [b"\x02", _zigzag(high), b"\x02", _zigzag(low), b"\x02", _zigzag(int(index)), b"\x02", b"\x00"]
        encoding = _ENCODING_UUID
    else:
        out += [b"\x00", b"\x00", b"\x00", b"\x02", _avro_string(file_id)]
        encoding = _ENCODING_RAW
    out += [b"\x02", _zigzag(instant_ms), _zigzag(encoding), b"\x00", b"\x00"]  # position, secondary index: null
    return b"".join(out)


def _optional(data: bytes, pos: int, read: object) -> tuple[object, int]:
    branch, pos = read_long(data, pos)
    if branch == 0:
        return None, pos
    return read(data, pos)  # type: ignore[operator]


def decode_location(value: bytes) -> tuple[str, str]:
    """(data partition, file id) of a record-index cell value."""
    if value.startswith(_VALUE_PREFIX):
        pos = len(_VALUE_PREFIX)
        partition, pos = _optional(value, pos, _read_string)
        high, pos = _optional(value, pos, read_long)
        low, pos = _optional(value, pos, read_long)
        index, pos = _optional(value, pos, read_long)
        raw_id, pos = _optional(value, pos, _read_string)
        _instant, pos = _optional(value, pos, read_long)
        encoding, pos = read_long(value, pos)
        info: dict[str, object] = {"partitionName": partition, "fileIdHighBits": high, "fileIdLowBits": low}
        info["fileIndex"] = index
        info |= {"fileId": raw_id, "fileIdEncoding": encoding}
    else:  # another writer's layout (a non-empty `key` field): the general decoder
        record = fastavro.schemaless_reader(io.BytesIO(value), _PARSED_SCHEMA, None)
        info = record["recordIndexMetadata"]  # type: ignore[index,call-overload,assignment]
    return str(info["partitionName"] or ""), _file_id_of(info)


def _file_id_of(info: dict[str, object]) -> str:
    if info.get("fileIdEncoding") == _ENCODING_UUID:
        high, low = int(info["fileIdHighBits"]), int(info["fileIdLowBits"])  # type: ignore[call-overload]
        parsed = uuid.UUID(bytes=struct.pack(">qq", _signed64(high), _signed64(low)))
        return f"{parsed}-{info['fileIndex']}"
    return str(info["fileId"])


def instant_epoch_ms(instant_time: str) -> int:
    """Epoch milliseconds of an instant time (read as UTC: the record index stores it, lookups ignore it)."""
    moment = parse_instant_time(instant_time)
    return int(moment.timestamp() * 1000) if moment.tzinfo else int((moment - _EPOCH).total_seconds() * 1000)


_EPOCH = parse_instant_time("19700101000000000")


# -- the partition's file groups ---------------------------------------------------------------
@dataclass
class _GroupSlice:
    base: str | None = None
    base_time: str = ""
    logs: list[tuple[str, int, str, str]] = field(default_factory=list)  # (completion, version, token, path)


def latest_slices(
    mdt: Storage, completion: dict[str, str], first: str | None, partition: str = RECORD_INDEX_PARTITION
) -> dict[str, _GroupSlice]:
    """Per file group of a metadata `partition` (whose records live in several groups): its latest
    committed base HFile and the committed logs after it (`first`: the metadata timeline's first
    instant; bases before it were archived, so committed)."""
    entries = [e for e in mdt.list_dir(partition) if not e.is_dir]
    groups: dict[str, _GroupSlice] = defaultdict(_GroupSlice)
    for entry in entries:
        base = parse_base_file_name(entry.name)
        if (
            base is not None
            and entry.name.endswith(".hfile")
            and base_is_committed(base.instant_time, completion, first)
        ):
            group = groups[base.file_id]
            if base.instant_time > group.base_time:
                group.base, group.base_time = entry.path, base.instant_time
    for entry in entries:
        parsed = parse_log_file_name(entry.name)
        if parsed is None:
            continue
        group = groups[parsed.file_id]
        done = log_slice_time(completion, parsed.base_instant_time, first)
        if done is not None and done >= group.base_time:
            group.logs.append((done, parsed.version, parsed.write_token, entry.path))
    return dict(groups)


@dataclass(frozen=True)
class _Cells:
    """One HFile's (or DELETE block's) keys in columnar form: `keys[i]` is at `locations[where[i]]`
    (None: deleted)."""

    keys: pa.Array
    where: np.ndarray
    locations: tuple[tuple[str, str] | None, ...]


#: Parsed HFiles and blocks by (storage uri, path, size, block offset): immutable once written.
_cells_cache: OrderedDict[tuple[str, str, int, int], _Cells] = OrderedDict()
_cells_cache_lock = threading.Lock()
_CACHE_MAX_CELLS = 20_000_000
#: The block offset that stands for a whole base HFile in `_cells_cache`.
_WHOLE_FILE = -1
#: A lookup parses a base HFile whole when its keys fall in more than this share of its blocks.
WHOLE_FILE_SHARE = 0.5


def _parse_hfile_cells(reader: HFileReader) -> _Cells:
    """Every cell of a record-index HFile (see `_parse_blocks`)."""
    return _parse_blocks(list(reader.data_blocks()), reader.name)


def _parse_blocks(payloads: Sequence[bytes], name: str) -> _Cells:
    """Every cell of these HFile data blocks, located as arrays (`hfile_cells.block_cells`); each
    distinct value decoded once (keys at one location share their value bytes)."""
    cells = block_cells(payloads, name)
    values = cells.values().dictionary_encode()
    return _Cells(
        cells.rows().cast(pa.string()),
        values.indices.to_numpy(zero_copy_only=False).astype(np.int32, copy=False),
        tuple(decode_location(v) for v in values.dictionary.to_pylist()),
    )


def _joined(parts: Sequence[_Cells]) -> _Cells:
    """The cells of several sources (disjoint key ranges of one HFile) as one."""
    if len(parts) == 1:
        return parts[0]
    if not parts:
        return _Cells(pa.array([], pa.string()), np.zeros(0, np.int32), ())
    shifts = np.cumsum([0] + [len(p.locations) for p in parts[:-1]])
    return _Cells(
        pa.concat_arrays([p.keys for p in parts]),
        np.concatenate([p.where + np.int32(shift) for p, shift in zip(parts, shifts)]),
        tuple(location for p in parts for location in p.locations),
    )


def blocks_holding(first_keys: Sequence[bytes], keys: pa.Array) -> list[int]:
    """Indexes of the HFile data blocks (by their first keys, in order) that can hold any of `keys`:
    block i holds the keys from its first key up to the next block's."""
    if not first_keys or not len(keys):
        return []
    firsts = np.array(first_keys, dtype=object)
    probe = np.unique(keys.cast(pa.binary()).to_numpy(zero_copy_only=False))
    positions = np.searchsorted(firsts, probe, side="right") - 1
    return sorted(set(positions[positions >= 0].tolist()))


def _peek(key: tuple[str, str, int, int]) -> _Cells | None:
    with _cells_cache_lock:
        cells = _cells_cache.get(key)
        if cells is not None:
            _cells_cache.move_to_end(key)
        return cells


def _deleted_cells(keys: list[str]) -> _Cells:
    return _Cells(pa.array(keys, pa.string()), np.zeros(len(keys), dtype=np.int32), (None,))


def _cached(key: tuple[str, str, int, int], build: Callable[[], _Cells]) -> _Cells:
    with _cells_cache_lock:
        if key in _cells_cache:
            _cells_cache.move_to_end(key)
            return _cells_cache[key]
    cells = build()
    with _cells_cache_lock:
        _cells_cache[key] = cells
        while len(_cells_cache) > 1 and sum(len(c.keys) for c in _cells_cache.values()) > _CACHE_MAX_CELLS:
            _cells_cache.popitem(last=False)
    return cells


def clear_cache() -> None:
    """Forget every parsed HFile and block (the next lookups parse them again, as a fresh process)."""
    with _cells_cache_lock:
        _cells_cache.clear()
    _block_index_cache.clear()
    _hfile_index_cache.clear()


class RecordIndex:
    """The merged `record_index` partition of a table's metadata table, for key lookups.

    Each base HFile and log block is parsed once into columnar form (and kept in a process-wide
    cache: metadata files never change once written); a lookup is then a vectorised hash probe
    of the batch's keys per source, applied oldest to newest.
    """

    def __init__(self, storage: Storage):
        self.mdt = metadata_storage(storage)
        timeline = load_metadata_timeline(self.mdt)
        self._completion = slice_times(timeline)
        first = timeline.instants[0].time if timeline.instants else None
        self._groups = latest_slices(self.mdt, self._completion, first)
        self.num_groups = len(self._groups)
        self._known: pa.Table | None = None

    def prefetch(self, keys: pa.Array) -> None:
        """Locate `keys` now, in one pass; later `locate` calls of any of them answer from it."""
        partitions, file_ids = self._locate(keys.cast(pa.string()))
        self._known = pa.table({"key": keys.cast(pa.string()), "partition": partitions, "file_id": file_ids})

    def locate(self, keys: pa.Array) -> tuple[pa.Array, pa.Array]:
        """(data partition, file id) of every key; both null where the index has no such key."""
        keys = keys.cast(pa.string())
        if self._known is not None:
            # hash `keys` (one partition's share) and probe the prefetched batch, not the other way round
            known = self._known.column("key")
            matched = self._known.filter(pc.is_in(known, value_set=keys))
            order = pc.index_in(keys, value_set=matched.column("key"))
            if order.null_count == 0 and matched.num_rows == len(keys):
                found = matched.take(order)
                return found.column("partition").combine_chunks(), found.column("file_id").combine_chunks()
        return self._locate(keys)

    def _locate(self, keys: pa.Array) -> tuple[pa.Array, pa.Array]:
        n = len(keys)
        codes = np.full(n, -1, dtype=np.int64)  # index into `places`; -1: not in the index
        places: dict[tuple[str, str], int] = {}
        if self.num_groups and n:
            groups = file_group_indexes(keys, self.num_groups)
            order = np.argsort(groups, kind="stable")
            bounds = np.searchsorted(groups[order], np.arange(self.num_groups + 1))
            for index in range(self.num_groups):
                rows = order[bounds[index] : bounds[index + 1]]
                if len(rows):
                    self._lookup(file_group_id(index), keys.take(pa.array(rows)), rows, codes, places)
        found = pa.array(codes, pa.int64(), mask=codes < 0)
        return (
            pa.array([p for p, _ in places], pa.string()).take(found),
            pa.array([f for _, f in places], pa.string()).take(found),
        )

    def _sources(self, file_id: str, keys: pa.Array) -> list[_Cells]:
        """The group's cells that can hold `keys`, oldest first: its base HFile's (only the blocks
        the keys fall in, `_base_cells`), then each committed log block's."""
        group = self._groups.get(file_id)
        if group is None:
            return []
        uri = self.mdt.uri
        sources = [] if group.base is None else [self._base_cells(group.base, keys)]
        for _, _, _, path in sorted(group.logs):
            size = self.mdt.size(path)
            data: bytes | None = None
            blocks = _block_index_cache.get((uri, path, size))
            if blocks is None:
                data = self.mdt.read_bytes(path)
                blocks = [
                    (b.offset, b.block_type, b.instant_time)
                    for b in log_file.scan_blocks(data)
                    if not isinstance(b, log_file.CorruptBlock)
                ]
                _block_index_cache[(uri, path, size)] = blocks
            for offset, block_type, instant in blocks:
                if instant not in self._completion or block_type not in (BlockType.HFILE_DATA, BlockType.DELETE):
                    continue
                sources.append(_cached((uri, path, size, offset), partial(self._block_cells, path, offset)))
        return sources

    def _base_cells(self, path: str, keys: pa.Array) -> _Cells:
        """The cells of the base HFile `path` in the data blocks `keys` fall in (found by the
        file's block index), each block parsed once and cached; the whole file at once (and
        cached whole) when the keys fall in more than `WHOLE_FILE_SHARE` of its blocks. A batch
        of keys near each other (recent keys) parses a few blocks instead of the file."""
        uri, size = self.mdt.uri, self.mdt.size(path)
        whole = _peek((uri, path, size, _WHOLE_FILE))
        if whole is not None:
            return whole
        reader: HFileReader | None = None
        index = _hfile_index_cache.get((uri, path, size))
        if index is None:
            reader = HFileReader(self.mdt.read_bytes(path), path)
            index = _hfile_index_cache[(uri, path, size)] = reader.index
        wanted = [index[i] for i in blocks_holding([e.first_key for e in index], keys)]
        if len(wanted) > WHOLE_FILE_SHARE * len(index):
            reader = reader or HFileReader(self.mdt.read_bytes(path), path)
            return _cached((uri, path, size, _WHOLE_FILE), partial(_parse_hfile_cells, reader))
        parts = []
        for entry in wanted:
            cells = _peek((uri, path, size, entry.offset))
            if cells is None:
                reader = reader or HFileReader(self.mdt.read_bytes(path), path)
                parse = partial(_parse_blocks, [reader.data_block(entry)], path)
                cells = _cached((uri, path, size, entry.offset), parse)
            parts.append(cells)
        return _joined(parts)

    def _block_cells(self, path: str, offset: int) -> _Cells:
        block = next(
            b
            for b in log_file.scan_blocks(self.mdt.read_bytes(path))
            if not isinstance(b, log_file.CorruptBlock) and b.offset == offset
        )
        if block.block_type is BlockType.HFILE_DATA:
            return _parse_hfile_cells(HFileReader(block.content, path))
        deleted = log_file.decode_block(block).records.column(0).to_pylist()  # type: ignore[attr-defined]
        return _deleted_cells([k for k in deleted if k is not None])

    def _lookup(
        self, file_id: str, keys: pa.Array, rows: np.ndarray, codes: np.ndarray, places: dict[tuple[str, str], int]
    ) -> None:
        """Set `codes[rows]` for `keys` from the group's sources, newest winning (-1: deleted)."""
        for cells in self._sources(file_id, keys):
            # hash the group's share of the batch (small) and probe the source's keys (large)
            matched = np.flatnonzero(pc.is_in(cells.keys, value_set=keys).to_numpy(zero_copy_only=False))
            if not len(matched):
                continue
            batch_rows = pc.index_in(cells.keys.take(pa.array(matched)), value_set=keys).to_numpy(zero_copy_only=False)
            mapped = np.array(
                [-1 if place is None else places.setdefault(place, len(places)) for place in cells.locations],
                dtype=np.int64,
            )
            codes[rows[batch_rows.astype(np.int64)]] = mapped[cells.where[matched]]


#: Base HFile (uri, path, size) -> its root data index.
_hfile_index_cache: dict[tuple[str, str, int], list[IndexEntry]] = {}
#: Log file (uri, path, size) -> its blocks' (offset, type, instant).
_block_index_cache: dict[tuple[str, str, int], list[tuple[int, BlockType, str | None]]] = {}


def _refuse_first(mask: pa.Array, message: Callable[[int], str]) -> None:
    """ConfigError with `message(row)` of the first row `mask` flags, if any."""
    if pc.any(mask).as_py():
        raise ConfigError(message(pc.index(mask, True).as_py()))


def located_by_record_index(
    index: RecordIndex,
    partition: str,
    slices: Sequence[FileSlice],
    keys: pa.Array,
    deletes: pa.Array | None = None,
) -> pa.Array:
    """File id holding each key (null: a new key) among `slices`, the latest slices of `partition` (none
    for a partition without file groups yet: a key the index places anywhere is then refused too).
    `deletes` (booleans, aligned with `keys`; None: none): which rows delete their key, for the message."""
    partitions, file_ids = index.locate(keys)
    if not len(keys):
        return file_ids
    elsewhere = pc.and_(pc.is_valid(partitions), pc.not_equal(partitions, pa.scalar(partition)))

    def refusal(row: int) -> str:
        key, stored = keys[row].as_py(), partitions[row].as_py()
        if deletes is not None and deletes[row].as_py():
            return (
                f"delete of record key {key!r} names partition {partition!r}, but the record index holds the key "
                f"in {stored!r}: give the delete the key's partition, or delete by key alone "
                "(delete(keys=[...])). Nothing was written"
            )
        return (
            f"record key {key!r} is in partition {stored!r} according to the record index, and the write puts "
            f"it in {partition!r}: hoodie.index.type=RECORD_INDEX is a global index (a key lives in one "
            "partition) and moving keys between partitions is not supported. Nothing was written"
        )

    _refuse_first(elsewhere, refusal)
    live = pc.is_in(file_ids, value_set=pa.array(sorted({s.file_id for s in slices}), pa.string()))
    _refuse_first(
        pc.and_(pc.is_valid(file_ids), pc.invert(live)),
        lambda row: (
            f"the record index places key {keys[row].as_py()!r} in file group {file_ids[row].as_py()} of "
            f"partition {partition!r}, which is not a live file group: the record_index partition is out of date. "
            "Rebuild it (drop it with hoodie.metadata.record.index.enable=false, then enable it again). "
            "Nothing was written"
        ),
    )
    return file_ids


# -- what a commit changes ---------------------------------------------------------------------
@dataclass
class RecordIndexChange:
    """Keys a data-table instant adds or moves (key -> (partition, file id, instant)) and removes."""

    upserts: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    deletes: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.upserts or self.deletes)


def tagged_change(
    instant_time: str, inserted: Sequence[tuple[str, str, pa.Array]], deleted: Sequence[pa.Array]
) -> RecordIndexChange:
    """The change of a write whose tagging was exact (the record index's own lookups): each key new
    to the table goes to the file group it was written to (`inserted`: partition, file id, keys),
    located keys deleted are gone (`deleted`), updates keep their location. What the write already
    knows, instead of re-reading the file groups it rewrote (`record_index_change`)."""
    change = RecordIndexChange()
    for partition, file_id, keys in inserted:
        change.upserts.update(dict.fromkeys(keys.cast(pa.string()).to_pylist(), (partition, file_id, instant_time)))
    gone = [keys.cast(pa.string()) for keys in deleted]
    change.deletes = set(_concat(gone).to_pylist()) - change.upserts.keys()
    return change


def without_live_deletes(
    storage: Storage,
    instant_time: str,
    change: RecordIndexChange,
    commit: CommitMetadata,
    config: TableConfig | None = None,
) -> RecordIndexChange:
    """`change` without the deletes of keys the commit leaves live: on a merge-on-read table with event-time
    ordering a delete (a `_hoodie_is_deleted` row, a delete marker) whose ordering value is smaller than the
    stored version's loses, and the key stays where it is. Dropping it from the index made the next upsert
    of the key an insert elsewhere (the key twice) and a `delete()` of it a no-op. Checked against the
    slices the index places the keys in, merged as a read merges them with this commit's log blocks; only
    where the commit appended logs: a group it rewrote or replaced holds what its new files hold.
    `config`: the table's config, when the caller holds it (else read now)."""
    if not change.deletes:
        return change
    config = config or table_config_of(storage)
    settings = MergeSettings.from_config(config)
    if config.table_type is not TableType.MERGE_ON_READ or not settings.event_time_ordering:
        return change  # the last event wins: a delete written is a delete
    appended = _logs_written(commit)
    if not appended:
        return change
    keys = pa.array(sorted(change.deletes), pa.string())
    partitions, file_ids = RecordIndex(storage).locate(keys)
    timeline = Timeline.load(storage)
    slices = {(s.partition_path, s.file_id): s for s in FileSystemView.load(storage, timeline).latest_file_slices()}
    for group, logs in appended.items():  # the view leaves out logs of instants not completed
        if group in slices:
            known = {f.path for f in slices[group].log_files}
            slices[group] = replace(
                slices[group], log_files=(*slices[group].log_files, *(f for f in logs if f.path not in known))
            )
    visible = VisibleInstants.from_timeline(timeline)
    with_this = replace(visible, completed=visible.completed | {instant_time})
    by_group: dict[tuple[str, str], list[str]] = defaultdict(list)
    for key, partition, file_id in zip(keys.to_pylist(), partitions.to_pylist(), file_ids.to_pylist()):
        if file_id is not None:
            by_group[(partition, file_id)].append(key)
    live: set[str] = set()
    for group, group_keys in by_group.items():
        file_slice = slices.get(group)
        if file_slice is not None and group in appended:
            found = live_keys_among(storage, file_slice, with_this, settings, pa.array(group_keys, pa.string()))
            live |= set(found.to_pylist())
    if live:
        change.deletes -= live
    return change


def _logs_written(commit: CommitMetadata) -> dict[tuple[str, str], list[LogFile]]:
    """The log files a commit's delta write stats name, by (partition, file id)."""
    found: dict[tuple[str, str], list[LogFile]] = defaultdict(list)
    for partition, stats in commit.partitionToWriteStats.items():
        for stat in stats:
            if not stat.is_delta:
                continue
            part = stat.partitionPath or partition or ""
            for name in stat.logFiles or [posixpath.basename(stat.path)]:
                parsed = parse_log_file_name(name)
                if parsed is not None:
                    path = posixpath.join(part, name) if part else name
                    found[(part, stat.fileId)].append(
                        LogFile(path, parsed.file_id, parsed.base_instant_time, parsed.version, parsed.write_token, 0)
                    )
    return found


def live_slice_keys(
    storage: Storage, file_slice: FileSlice, committed: CommittedInstants, config: TableConfig
) -> pa.Array:
    """The distinct keys a slice holds live: its base file's and its committed log blocks', minus those
    whose last event is a delete that a read finds deleted (`index.base.read_key_states`: under event-time
    ordering a delete whose ordering value lost keeps its key live). Without meta fields the keys are
    made from the table's key fields."""
    held, dead = read_key_states(
        storage, file_slice, committed, virtual_keys=config.virtual_keys, merge=MergeSettings.from_config(config)
    )
    return _without(pc.unique(pc.drop_null(held)), dead)


def table_config_of(storage: Storage) -> TableConfig:
    """The table's config, from its `hoodie.properties` (read now)."""
    return TableConfig.from_properties(read_table_properties(storage))


def _without(keys: pa.Array, others: pa.Array) -> pa.Array:
    """`keys` not among `others`."""
    return keys.filter(pc.invert(pc.is_in(keys, value_set=others))) if len(others) else keys


def _log_keys(
    storage: Storage, stat: WriteStat, instant_time: str, key_field: str
) -> tuple[list[pa.Array], list[pa.Array]]:
    """(data keys, delete keys) of the blocks `instant_time` appended to the log file(s) of a delta stat
    (`key_field`: the column data records hold their key in, as in `block_record_keys`)."""
    partition = stat.partitionPath or ""
    written, deleted = [], []
    for name in stat.logFiles or [posixpath.basename(stat.path)]:
        path = posixpath.join(partition, name) if partition else name
        for raw in log_file.LogFileReader(storage, path).raw_blocks():
            if raw.instant_time != instant_time:
                continue
            if raw.block_type is BlockType.DELETE:
                deleted.append(block_record_keys(raw))
            elif raw.block_type in (BlockType.AVRO_DATA, BlockType.PARQUET_DATA):
                written.append(block_record_keys(raw, key_field))
    return written, deleted


def _concat(parts: list[pa.Array]) -> pa.Array:
    return pc.unique(pa.concat_arrays(parts)) if parts else pa.array([], pa.string())


def record_index_change(
    storage: Storage, instant_time: str, metadata: CommitMetadata, config: TableConfig | None = None
) -> RecordIndexChange:
    """What the commit-like instant `instant_time` (pending: not yet completed) changes in the
    record index: see the module docstring. Compaction moves no key (an empty change).
    `config`: the table's config, when the caller holds it (else read now)."""
    change = RecordIndexChange()
    if (metadata.operationType or "").upper() == COMPACT:
        return change
    timeline = Timeline.load(storage)
    view = FileSystemView.load(storage, timeline)
    committed = CommittedInstants.of(timeline)
    config = config or table_config_of(storage)
    virtual = config.virtual_keys
    before = {(s.partition_path, s.file_id): s for s in view.latest_file_slices()}
    rewritten: set[tuple[str, str]] = set()
    new_keys: dict[tuple[str, str], pa.Array] = {}
    #: Keys appended to a group's logs (merge-on-read; BUCKET-index inserts into existing buckets too).
    log_keys: dict[tuple[str, str], pa.Array] = {}
    log_deletes: list[pa.Array] = []
    for partition, stats in metadata.partitionToWriteStats.items():
        for stat in stats:
            group = (stat.partitionPath or partition or "", stat.fileId)
            if not stat.path and not stat.logFiles:
                continue  # no data file: change tracking's stats name `.cdc` files only
            if stat.is_delta:
                written, deleted = _log_keys(storage, stat, instant_time, config.virtual_key_field or RECORD_KEY)
                log_deletes += deleted
                if written:
                    log_keys[group] = pc.drop_null(_concat(written))
                continue
            new_keys[group] = pc.drop_null(base_file_keys(storage, stat.path, virtual))
            rewritten.add(group)
    for partition, ids in (metadata.partitionToReplaceFileIds or {}).items():
        rewritten |= {(partition, f) for f in ids}
    old_keys = {
        g: live_slice_keys(storage, before[g], committed, config) for g in rewritten | log_keys.keys() if g in before
    }
    added: list[pa.Array] = []
    for (partition, file_id), keys in [*new_keys.items(), *log_keys.items()]:
        fresh = _without(keys, old_keys.get((partition, file_id), pa.array([], pa.string())))
        change.upserts.update(dict.fromkeys(fresh.to_pylist(), (partition, file_id, instant_time)))
        added.append(fresh)
    kept = _concat(list(new_keys.values()))
    gone = _without(_concat([keys for g, keys in old_keys.items() if g in rewritten]), kept)
    change.deletes = set(_without(_concat([gone, *log_deletes]), _concat(added)).to_pylist())
    return change
