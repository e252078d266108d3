"""The record keys a file slice holds: its base file's, plus those of its committed log blocks.

Index lookups confirm candidate keys against these (as Hudi's key lookup handle confirms
against a file slice), so a key that lives only in a log is found, and a key no slice
holds is an insert. Keys of delete blocks count too: a key deleted in a file group's log
still belongs to that group until a compaction drops it, so a re-upsert goes there and
never makes a second copy elsewhere. Such a key is held but not live (`deleted_last`):
an `insert` (which looks nothing up, as Hudi's) can put it live into another group, and
lookups then prefer the group where it lives (`index.base.confirm`).

Which log blocks count follows the read rules (`file_group.reader`), for the latest
state: blocks of completed (or archived) write instants, minus those a rollback command
block voids and those a log-compacted block replaces. Only keys are extracted: Parquet
blocks read one column, Avro blocks are scanned for the third meta field of each record
(the record key) without decoding the rest, delete blocks are decoded (they hold keys only).
"""

from __future__ import annotations

import json
import struct
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakeward.core.exceptions import CorruptTableError
from lakeward.core.file_group.base_file import read_base_file
from lakeward.core.file_group.file_group import FileSlice, LogFile
from lakeward.core.file_group.log_file import BlockType, CommandBlock, CommandType, HeaderKey, LogFileReader, RawBlock
from lakeward.core.file_group.log_file.avro_vector import read_long
from lakeward.core.file_group.log_file.content import DELETE_RECORD_KEY, decode_avro_records, decode_delete_records
from lakeward.core.schema import key_text
from lakeward.core.storage import Storage
from lakeward.core.table_version import LogSlicing, rules_for_layout
from lakeward.core.timeline import Timeline

RECORD_KEY = "_hoodie_record_key"
_KEY_PREFIX = ("_hoodie_commit_time", "_hoodie_commit_seqno", RECORD_KEY)
_INT = struct.Struct(">i")
_DATA = (BlockType.AVRO_DATA, BlockType.PARQUET_DATA, BlockType.DELETE)


@dataclass(frozen=True)
class CommittedInstants:
    """Which write instants' log blocks count: completed ones, or ones older than the active timeline.

    Small and picklable, so engine tasks (Spark included) can take it.
    """

    completed: frozenset[str]
    archived_before: str | None = None
    #: Log file names carry the instant that wrote them (versions 8+, `LogSlicing.COMPLETION_TIME`):
    #: a log file of an instant not committed holds no committed block and is not opened (a write in
    #: flight elsewhere may roll it back, deleting it, while this process lists keys).
    logs_named_by_writer: bool = False

    @classmethod
    def of(cls, timeline: Timeline) -> CommittedInstants:
        """The completed write instants of `timeline` (and the start of its active part)."""
        first = timeline.instants[0].time if timeline.instants else None
        by_writer = rules_for_layout(timeline.layout).log_slicing is LogSlicing.COMPLETION_TIME
        return cls(timeline.completed_write_times(), first, by_writer)

    def __contains__(self, instant_time: object) -> bool:
        return isinstance(instant_time, str) and (
            instant_time in self.completed or (self.archived_before is not None and instant_time < self.archived_before)
        )


@lru_cache(maxsize=64)
def _keys_are_third_string(schema_json: str) -> bool:
    """Whether records start with the three string meta fields, the record key third."""
    try:
        fields = json.loads(schema_json).get("fields", [])
    except (ValueError, AttributeError):
        return False
    if len(fields) < 3 or tuple(f.get("name") for f in fields[:3]) != _KEY_PREFIX:
        return False
    return all(f.get("type") in ("string", ["null", "string"], ["string", "null"]) for f in fields[:3])


def _avro_keys(content: bytes, schema_json: str) -> pa.Array:
    """Record keys of an Avro data block: the third field of each framed record, the rest skipped."""
    fields = json.loads(schema_json)["fields"][:3]
    # Union branch of the string (None: a plain string field, no branch varint).
    branches = [None if f["type"] == "string" else f["type"].index("string") for f in fields]
    (count,) = _INT.unpack_from(content, 4)
    keys: list[bytes | None] = []
    pos = 8
    try:
        for _ in range(count):
            (length,) = _INT.unpack_from(content, pos)
            pos += 4
            end = pos + length
            at = pos
            key: bytes | None = None
            for i, branch in enumerate(branches):
                if branch is not None:
                    chosen, at = read_long(content, at)
                    if chosen != branch:
                        key = None
                        continue  # null
                size, at = read_long(content, at)
                if i == 2:
                    key = content[at : at + size]
                at += size
            if at > end:
                raise CorruptTableError(f"Avro record at byte {pos} is framed as {length} bytes but longer")
            keys.append(key)
            pos = end
    except (struct.error, IndexError) as exc:
        raise CorruptTableError(f"Avro data block records cannot be scanned for keys: {exc!r}") from exc
    return pa.array(keys, pa.binary()).cast(pa.string())


def block_record_keys(raw: RawBlock, key_field: str = RECORD_KEY) -> pa.Array:
    """The record keys of one data or delete block (delete entries included), as strings.

    `key_field`: the column data records hold their key in (a virtual-key table's key field).
    """
    if raw.block_type is BlockType.DELETE:
        return decode_delete_records(raw.content).column(DELETE_RECORD_KEY).combine_chunks().cast(pa.string())
    if raw.block_type is BlockType.PARQUET_DATA:
        try:
            table = pq.read_table(pa.BufferReader(raw.content), columns=[key_field])
        except (pa.ArrowInvalid, OSError, KeyError) as exc:
            raise CorruptTableError(f"Parquet data block cannot be read for keys: {exc}") from exc
        return _key_strings(table.column(0).combine_chunks(), key_field)
    schema = raw.header.get(HeaderKey.SCHEMA)
    if schema is None:
        raise CorruptTableError("Avro data block has no SCHEMA header")
    if key_field == RECORD_KEY and _keys_are_third_string(schema):
        return _avro_keys(raw.content, schema)
    return _key_strings(decode_avro_records(raw.content, schema).column(key_field).combine_chunks(), key_field)


def _key_strings(values: pa.Array, key_field: str) -> pa.Array:
    """Stored keys as strings; a virtual-key table's key field rendered as its key generator does."""
    return values.cast(pa.string()) if key_field == RECORD_KEY else key_text(values, key_field)


@dataclass(frozen=True)
class _BlockKeys:
    """What the key lookup needs of one sound block: its kind, instants and (data, delete) keys."""

    block_type: BlockType
    instant_time: str | None
    rollback_target: str | None
    compacted: str | None
    keys: pa.Array | None
    #: Why the keys could not be read (raised only if the block turns out to count).
    error: CorruptTableError | None = None


#: Per log file (uri, path, size, key field), its blocks' keys: log files are immutable once written
#: (an append by another writer changes the size), so repeated lookups scan each once.
_block_cache: OrderedDict[tuple[str, str, int, str], list[_BlockKeys]] = OrderedDict()
_block_cache_lock = threading.Lock()
_BLOCK_CACHE_FILES = 512


def _scan(raw: RawBlock, key_field: str) -> _BlockKeys:
    target = None
    if raw.block_type is BlockType.COMMAND:
        command = CommandBlock(header=raw.header)
        if command.command_type is CommandType.ROLLBACK:
            target = command.target_instant_time
    keys, error = None, None
    if raw.block_type in _DATA:
        try:
            keys = block_record_keys(raw, key_field)
        except CorruptTableError as exc:
            error = exc
    return _BlockKeys(
        raw.block_type, raw.instant_time, target, raw.header.get(HeaderKey.COMPACTED_BLOCK_TIMES), keys, error
    )


def _file_block_keys(storage: Storage, log_file: LogFile, key_field: str) -> list[_BlockKeys]:
    cache_key = (storage.uri, log_file.path, log_file.size, key_field)
    with _block_cache_lock:
        if cache_key in _block_cache:
            _block_cache.move_to_end(cache_key)
            return _block_cache[cache_key]
    blocks = [_scan(raw, key_field) for raw in LogFileReader(storage, log_file.path).raw_blocks()]
    with _block_cache_lock:
        _block_cache[cache_key] = blocks
        while len(_block_cache) > _BLOCK_CACHE_FILES:
            _block_cache.popitem(last=False)
    return blocks


def log_record_keys(
    storage: Storage, log_files: Sequence[LogFile], committed: CommittedInstants, key_field: str = RECORD_KEY
) -> pa.Array:
    """Keys of the committed data and delete blocks of `log_files` (duplicates possible).

    Blocks count as reads count them (module docstring): committed, not rolled back, not
    replaced by a log-compacted block. `key_field`: as in `block_record_keys`.
    """
    parts = [keys for _, keys in log_block_keys(storage, log_files, committed, key_field)]
    return pa.concat_arrays(parts) if parts else pa.array([], pa.string())


def log_block_keys(
    storage: Storage, log_files: Sequence[LogFile], committed: CommittedInstants, key_field: str = RECORD_KEY
) -> list[tuple[bool, pa.Array]]:
    """(is a delete block, keys) of each block `log_record_keys` counts, in log order.

    `key_field`: as in `block_record_keys`.
    """
    blocks: list[_BlockKeys] = []
    for log_file in sorted(log_files, key=lambda f: (f.base_instant_time, f.version, f.write_token)):
        if committed.logs_named_by_writer and log_file.base_instant_time not in committed:
            continue
        blocks.extend(_file_block_keys(storage, log_file, key_field))
    rolled_back = {b.rollback_target for b in blocks if b.rollback_target}
    replaced: set[str] = set()
    for b in blocks:
        if b.block_type in _DATA and b.compacted and b.instant_time in committed:
            replaced.update(t.strip() for t in b.compacted.split(",") if t.strip())
    parts = []
    for b in blocks:
        if b.block_type not in _DATA or b.instant_time not in committed or b.instant_time in rolled_back:
            continue
        if b.instant_time in replaced and not b.compacted:
            continue
        if b.error is not None:
            raise b.error
        assert b.keys is not None
        parts.append((b.block_type is BlockType.DELETE, b.keys))
    return parts


def deleted_last(blocks: Sequence[tuple[bool, pa.Array]]) -> pa.Array:
    """The keys whose last event among `blocks` ((is a delete block, keys) in log order, as
    `log_block_keys` gives them) is a delete: the slice holds them, but not live. Duplicates possible.

    A key a base file holds is live unless a delete block names it; the ordering values of
    ordered deletes are not weighed (a delete that lost to a newer record counts as a delete),
    which only costs a lookup its preference for this group, never a row."""
    dead = pa.array([], pa.string())
    for is_delete, keys in blocks:
        keys = keys.cast(pa.string())
        if is_delete:
            dead = pa.concat_arrays([dead, keys])
        elif len(dead):
            dead = dead.filter(pc.invert(pc.is_in(dead, value_set=keys)))
    return dead


def base_record_keys(storage: Storage, file_slice: FileSlice) -> pa.Array:
    """The record keys stored in a slice's base file (none without one)."""
    if file_slice.base_file is None:
        return pa.array([], pa.string())
    table = read_base_file(storage, file_slice.base_file.path, columns=[RECORD_KEY])
    return table.column(0).combine_chunks().cast(pa.string())
