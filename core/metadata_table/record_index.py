"""The metadata table's `record_index` partition: record key -> (data partition, file id), as Hudi 1.x.

Layout (format doc 7.7, `HoodieTableMetadataUtil`): file groups `record-index-0000-0` …
`record-index-NNNN-0` (their number fixed when the partition is initialised); a key lives in group
`abs(abs(javaStringHash(key)) % n)` (`mapRecordKeyToFileGroupIndex`, index version 1). Each cell
is the record key -> Avro `HoodieMetadataRecord` of type 5 whose `recordIndexMetadata` holds the
data partition, the file id (a `<uuid>-<n>` id as two signed 64-bit halves and `fileIndex`,
encoding 0; any other id raw, encoding 1) and the epoch milliseconds of the instant that put the
key in that file. A deleted key is a DELETE block entry (`partitionPath` "record_index",
ordering value 0) in its group's log.

lakeward maintains it from files, not from the write's bookkeeping, so that every commit-like
instant (writes of both data planes, compaction, clustering) is kept by one rule
(`record_index_change`): for each file group a commit rewrites (a new base file), the keys its
latest slice held before the commit and the keys its new base file holds decide what is added
(new keys, or keys that moved there: clustering) and what is gone; log appends add the keys of
their delete blocks as removals (updates in logs do not move keys). Compaction moves no key.
The change is written into the same metadata delta commit as the `files` change
(`metadata_table.writer`), one log file per touched group.

Lookups (`RecordIndex.locate`) read, per file group the batch's keys hash to, the latest base HFile
(only the blocks that can hold the keys) and the committed log blocks, newest last.
"""

from __future__ import annotations

import bisect
import io
import math
import posixpath
import struct
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakeward.core.file_group import log_file
from lakeward.core.file_group.base_file import read_base_file
from lakeward.core.file_group.file_group import FileSlice
from lakeward.core.file_group.hfile import HFileReader
from lakeward.core.file_group.hfile_writer import java_string_hash
from lakeward.core.file_group.log_file.log_block import BlockType
from lakeward.core.file_group.metadata_listing import metadata_storage
from lakeward.core.file_group.naming import parse_base_file_name, parse_log_file_name
from lakeward.core.file_group.slice_keys import RECORD_KEY, CommittedInstants, base_record_keys
from lakeward.core.file_group.view import FileSystemView
from lakeward.core.metadata_table.schema import METADATA_RECORD_SCHEMA, MetadataRecordType
from lakeward.core.storage import Storage
from lakeward.core.table_version import TimelineLayout
from lakeward.core.timeline import CommitMetadata, Timeline, WriteStat
from lakeward.core.timeline.instant_time import parse_instant_time

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
_COMPACT = "compact"
#: The Avro bytes every record-index value starts with when its `key` field is "" (Hudi's and
#: lakeward's writers): 5 null meta fields, key "", type 5, three null unions, then branch 1.
_VALUE_PREFIX = b"\x00" * 5 + b"\x00" + bytes([int(MetadataRecordType.RECORD_INDEX) * 2]) + b"\x00" * 3 + b"\x02"
_PARSED_SCHEMA = fastavro.parse_schema(METADATA_RECORD_SCHEMA)
_CELL = struct.Struct(">ii")


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


def _read_long(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


def _read_string(data: bytes, pos: int) -> tuple[str, int]:
    length, pos = _read_long(data, pos)
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
    branch, pos = _read_long(data, pos)
    if branch == 0:
        return None, pos
    return read(data, pos)  # type: ignore[operator]


def decode_location(value: bytes) -> tuple[str, str]:
    """(data partition, file id) of a record-index cell value."""
    if value.startswith(_VALUE_PREFIX):
        pos = len(_VALUE_PREFIX)
        partition, pos = _optional(value, pos, _read_string)
        high, pos = _optional(value, pos, _read_long)
        low, pos = _optional(value, pos, _read_long)
        index, pos = _optional(value, pos, _read_long)
        raw_id, pos = _optional(value, pos, _read_string)
        _instant, pos = _optional(value, pos, _read_long)
        encoding, pos = _read_long(value, pos)
        info = {"partitionName": partition, "fileIdHighBits": high, "fileIdLowBits": low, "fileIndex": index}
        info |= {"fileId": raw_id, "fileIdEncoding": encoding}
    else:  # another writer's layout (a non-empty `key` field): the general decoder
        record = fastavro.schemaless_reader(io.BytesIO(value), _PARSED_SCHEMA, None)
        info = record["recordIndexMetadata"]  # type: ignore[index,call-overload]
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


def _latest_slices(mdt: Storage, completion: dict[str, str]) -> dict[str, _GroupSlice]:
    """Per record-index file group: its latest completed base HFile and the committed logs after it."""
    entries = [e for e in mdt.list_dir(RECORD_INDEX_PARTITION) if not e.is_dir]
    groups: dict[str, _GroupSlice] = defaultdict(_GroupSlice)
    for entry in entries:
        base = parse_base_file_name(entry.name)
        if base is not None and entry.name.endswith(".hfile") and base.instant_time in completion:
            group = groups[base.file_id]
            if base.instant_time > group.base_time:
                group.base, group.base_time = entry.path, base.instant_time
    for entry in entries:
        parsed = parse_log_file_name(entry.name)
        if parsed is None:
            continue
        group = groups[parsed.file_id]
        done = completion.get(parsed.base_instant_time)
        if done is not None and done >= group.base_time:
            group.logs.append((done, parsed.version, parsed.write_token, entry.path))
    return dict(groups)


class RecordIndex:
    """The merged `record_index` partition of a table's metadata table, for key lookups."""

    def __init__(self, storage: Storage):
        self.mdt = metadata_storage(storage)
        timeline = Timeline.load(self.mdt, TimelineLayout.V2)
        self._completion = {t: c for t, c in timeline.completion_times().items() if c}
        self._groups = _latest_slices(self.mdt, self._completion)
        self.num_groups = len(self._groups)

    def locate(self, keys: pa.Array) -> tuple[pa.Array, pa.Array]:
        """(data partition, file id) of every key; both null where the index has no such key."""
        partitions: list[str | None] = [None] * len(keys)
        file_ids: list[str | None] = [None] * len(keys)
        if self.num_groups and len(keys):
            groups = file_group_indexes(keys, self.num_groups)
            py_keys = keys.cast(pa.string()).to_pylist()
            for index in np.unique(groups):
                rows = np.flatnonzero(groups == index)
                wanted = {py_keys[r].encode(): r for r in rows}
                for key, value in self._lookup(file_group_id(int(index)), wanted).items():
                    row = wanted[key]
                    partitions[row], file_ids[row] = decode_location(value)
        return pa.array(partitions, pa.string()), pa.array(file_ids, pa.string())

    def _lookup(self, file_id: str, wanted: dict[bytes, int]) -> dict[bytes, bytes]:
        group = self._groups.get(file_id)
        if group is None:
            return {}
        found: dict[bytes, bytes | None] = {}
        if group.base is not None:
            found.update(_hfile_lookup(HFileReader(self.mdt.read_bytes(group.base), group.base), sorted(wanted)))
        for _, _, _, path in sorted(group.logs):
            for block in log_file.scan_blocks(self.mdt.read_bytes(path)):
                if isinstance(block, log_file.CorruptBlock) or block.instant_time not in self._completion:
                    continue
                if block.block_type is BlockType.HFILE_DATA:
                    reader = HFileReader(block.content, path)
                    found.update(_hfile_lookup(reader, sorted(k for k in wanted if reader.index)))
                elif block.block_type is BlockType.DELETE:
                    deleted = log_file.decode_block(block).records.column(0).to_pylist()  # type: ignore[attr-defined]
                    found.update({k.encode(): None for k in deleted if k is not None and k.encode() in wanted})
        return {k: v for k, v in found.items() if v is not None}


def _hfile_lookup(reader: HFileReader, keys: Sequence[bytes]) -> dict[bytes, bytes]:
    """Cells of `reader` whose key is among the sorted `keys`, reading only blocks that can hold one."""
    found: dict[bytes, bytes] = {}
    index = reader.index
    if not keys or not index:
        return found
    wanted = set(keys)
    firsts = [entry.first_key for entry in index]
    for i, entry in enumerate(index):
        lo = bisect.bisect_left(keys, firsts[i])
        hi = bisect.bisect_left(keys, firsts[i + 1]) if i + 1 < len(index) else len(keys)
        if i == 0:
            lo = 0
        if lo >= hi:
            continue
        for key, value in reader._cells_of_block(entry):
            if key in wanted:
                found[key] = value
    return found


# -- what a commit changes ---------------------------------------------------------------------
@dataclass
class RecordIndexChange:
    """Keys a data-table instant adds or moves (key -> (partition, file id, instant)) and removes."""

    upserts: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    deletes: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.upserts or self.deletes)


def live_slice_keys(storage: Storage, file_slice: FileSlice, committed: CommittedInstants) -> set[str]:
    """The keys a slice holds live: its base file's, then each committed log block in order
    (data blocks add their keys, delete blocks remove theirs)."""
    keys = set(base_record_keys(storage, file_slice).to_pylist())
    for log in sorted(file_slice.log_files, key=lambda f: (f.base_instant_time, f.version, f.write_token)):
        if committed.logs_named_by_writer and log.base_instant_time not in committed:
            continue
        for raw in log_file.LogFileReader(storage, log.path).raw_blocks():
            if raw.block_type not in (BlockType.AVRO_DATA, BlockType.PARQUET_DATA, BlockType.DELETE):
                continue
            if raw.instant_time not in committed:
                continue
            block_keys = _block_keys(raw)
            if raw.block_type is BlockType.DELETE:
                keys.difference_update(block_keys)
            else:
                keys.update(block_keys)
    return keys


def _block_keys(raw: log_file.RawBlock) -> list[str]:
    block = log_file.decode_block(raw)
    records: pa.Table = block.records  # type: ignore[attr-defined]
    column = records.column(0) if raw.block_type is BlockType.DELETE else records.column("_hoodie_record_key")
    return [k for k in column.to_pylist() if k is not None]


def _log_delete_keys(storage: Storage, stat: WriteStat, instant_time: str) -> set[str]:
    partition = stat.partitionPath or ""
    out: set[str] = set()
    for name in stat.logFiles or [posixpath.basename(stat.path)]:
        path = posixpath.join(partition, name) if partition else name
        for raw in log_file.LogFileReader(storage, path).raw_blocks():
            if raw.block_type is BlockType.DELETE and raw.instant_time == instant_time:
                out.update(_block_keys(raw))
    return out


def record_index_change(storage: Storage, instant_time: str, metadata: CommitMetadata) -> RecordIndexChange:
    """What the commit-like instant `instant_time` (pending: not yet completed) changes in the
    record index: see the module docstring. Compaction moves no key (an empty change)."""
    change = RecordIndexChange()
    if (metadata.operationType or "").lower() == _COMPACT:
        return change
    timeline = Timeline.load(storage)
    view = FileSystemView.load(storage, timeline)
    committed = CommittedInstants.of(timeline)
    before = {(s.partition_path, s.file_id): s for s in view.latest_file_slices()}
    rewritten: set[tuple[str, str]] = set()
    new_keys: dict[tuple[str, str], set[str]] = {}
    for partition, stats in metadata.partitionToWriteStats.items():
        for stat in stats:
            group = (stat.partitionPath or partition or "", stat.fileId)
            if stat.is_delta:
                change.deletes |= _log_delete_keys(storage, stat, instant_time)
                continue
            new_keys[group] = set(pc.drop_null(_file_keys(storage, stat.path)).to_pylist())
            rewritten.add(group)
    for partition, ids in (metadata.partitionToReplaceFileIds or {}).items():
        rewritten |= {(partition, f) for f in ids}
    old_keys = {g: live_slice_keys(storage, before[g], committed) for g in rewritten if g in before}
    kept: set[str] = set()
    for (partition, file_id), keys in new_keys.items():
        known = old_keys.get((partition, file_id), set())
        kept |= keys
        for key in keys - known:
            change.upserts[key] = (partition, file_id, instant_time)
    for keys in old_keys.values():
        change.deletes |= keys - kept
    change.deletes -= set(change.upserts)
    return change


def _file_keys(storage: Storage, path: str) -> pa.Array:
    return read_base_file(storage, path, columns=[RECORD_KEY]).column(0).combine_chunks().cast(pa.string())
