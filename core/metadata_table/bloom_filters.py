"""The metadata table's `bloom_filters` partition: each base file's record-key bloom filter, as Hudi 1.x.

Hudi's BLOOM index reads one bloom filter per candidate base file; from the files' parquet
footers that is one ranged read per file. With `hoodie.metadata.index.bloom.filter.enable` the
writer also keeps every base file's filter in the metadata table, and with
`hoodie.bloom.index.use.metadata` the index reads them from there instead (a few HFiles).

Layout (format reference 7.8a; `HoodieMetadataPayload.createBloomFilterMetadataRecord`):

- file groups `bloom-filters-0000-0` … (4 by default, `hoodie.metadata.index.bloom.filter.file.group.count`,
  fixed at initialisation); a key lives in group `abs(abs(javaStringHash(key)) % n)`;
- key `partition id + file id` (`index_ids`: base64 XXHash64 of the data partition, `.` for the
  root, then base64 MD5 of the base file's name);
- value a `HoodieMetadataRecord` of type 4 whose `BloomFilterMetadata` holds the filter's type code,
  the instant that recorded it, the UTF-8 bytes of the filter as serialised in the file's footer
  (the same string, byte for byte) and `isDeleted`.

Upkeep (`HoodieTableMetadataUtil.convertMetadataToBloomFilterRecords`), in the metadata delta
commit that also carries the `files` change: every base file a commit, delta commit, compaction
or clustering adds gets its footer's filter (log files get none; a base file whose footer has
no filter is skipped, as Hudi does); every base file a clean, restore or recorded rollback
removes gets a tombstone (type "", no bytes, `isDeleted=true`). A newer record replaces an older
one of its key (merge rule `combineMetadataPayloads`: bloom filters are never merged), so the
metadata table's compaction keeps the newest cell of each key, tombstones included.

Initialisation (Hudi's `initializeBloomFiltersPartition`): one metadata delta commit with a
reserved time, a base HFile per file group of the filters of every base file listed as of the
data table's latest completed instant (stamped with that instant), then `bloom_filters` joins
`hoodie.table.metadata.partitions`, last.
"""

from __future__ import annotations

import io
import logging
import posixpath
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TypeAlias

import fastavro
import pyarrow as pa

from lakeward.core.config.table import TableConfig
from lakeward.core.exceptions import MetadataTableError
from lakeward.core.file_group import log_file
from lakeward.core.file_group.base_file import read_footer_keys
from lakeward.core.file_group.hfile import HFileReader
from lakeward.core.file_group.metadata_listing import (
    committed_blocks,
    load_metadata_timeline,
    metadata_partitions,
    metadata_storage,
    metadata_table_version,
    read_table_properties,
    slice_times,
)
from lakeward.core.file_group.naming import parse_base_file_name
from lakeward.core.metadata_table.bootstrap import NO_INSTANT
from lakeward.core.metadata_table.files_partition import encode_record, list_partition_files
from lakeward.core.metadata_table.index_ids import file_id, partition_id
from lakeward.core.metadata_table.index_partition import (
    append_log_file,
    hfile_data_block,
    prepare_build,
    write_partition,
)
from lakeward.core.metadata_table.record_index import file_group_indexes, latest_slices
from lakeward.core.metadata_table.schema import (
    METADATA_RECORD_SCHEMA,
    MetadataRecordType,
)
from lakeward.core.storage import Storage
from lakeward.core.timeline import Timeline, WriteStat

log = logging.getLogger(__name__)

BLOOM_FILTERS_PARTITION = "bloom_filters"
#: Hudi's `hoodie.metadata.index.bloom.filter.file.group.count` default.
DEFAULT_FILE_GROUPS = 4
_PARSED_SCHEMA = fastavro.parse_schema(METADATA_RECORD_SCHEMA)


def file_group_id(index: int) -> str:
    """The id of bloom-filters file group `index` (`bloom-filters-0002-0`)."""
    return f"bloom-filters-{index:04d}-0"


def record_key(partition_path: str, file_name: str) -> str:
    """The partition's key of a base file's filter: partition id + file id."""
    return partition_id(partition_path) + file_id(file_name)


def encode_bloom_record(type_code: str, instant_time: str, filter_bytes: bytes, deleted: bool) -> bytes:
    """Avro binary of a type-4 `HoodieMetadataRecord` (key "" as in every cell: the HFile key holds it)."""
    bloom = {"type": type_code, "timestamp": instant_time, "bloomFilter": filter_bytes, "isDeleted": deleted}
    return encode_record({"key": "", "type": int(MetadataRecordType.BLOOM_FILTER), "BloomFilterMetadata": bloom})


@dataclass(frozen=True)
class BloomEntry:
    """One decoded `bloom_filters` record."""

    type_code: str
    instant_time: str
    #: The filter as its footer serialises it (UTF-8 bytes of the text); b"" for a tombstone.
    filter_bytes: bytes
    deleted: bool


def decode_bloom_record(value: bytes) -> BloomEntry:
    """The `BloomFilterMetadata` of a record value (MetadataTableError: not a bloom-filter record)."""
    record = fastavro.schemaless_reader(io.BytesIO(value), _PARSED_SCHEMA, None)
    bloom = record.get("BloomFilterMetadata") if isinstance(record, dict) else None
    if bloom is None:
        raise MetadataTableError("a bloom_filters record without BloomFilterMetadata")
    return BloomEntry(bloom["type"], bloom["timestamp"], bytes(bloom["bloomFilter"]), bool(bloom["isDeleted"]))


def keeps_bloom_filters(storage: Storage) -> bool:
    """Whether the table's `hoodie.properties` (read now) lists the `bloom_filters` partition."""
    return BLOOM_FILTERS_PARTITION in metadata_partitions(read_table_properties(storage))


def footer_filter(storage: Storage, path: str) -> tuple[str, bytes] | None:
    """(type code, serialised filter bytes) of a base file's footer bloom filter; None: it has none."""
    footer = read_footer_keys(storage, path)
    text = footer.bloom_source() if footer.bloom_source is not None else footer.bloom_text
    if text is None:
        return None
    return footer.bloom_type, text.encode("utf-8") if isinstance(text, str) else bytes(text)


def _is_base_file(name: str) -> bool:
    return parse_base_file_name(name) is not None


def added_cells(storage: Storage, instant_time: str, added: Mapping[str, Iterable[str]]) -> dict[str, bytes]:
    """Key -> value of the filters of the base files `added` (partition -> file names), stamped `instant_time`."""
    cells = {}
    for partition, names in added.items():
        for name in names:
            if not _is_base_file(name):
                continue
            found = footer_filter(storage, posixpath.join(partition, name))
            if found is None:
                log.warning("base file %s/%s has no footer bloom filter: not indexed in bloom_filters", partition, name)
                continue
            cells[record_key(partition, name)] = encode_bloom_record(found[0], instant_time, found[1], False)
    return cells


def removed_cells(instant_time: str, deleted: Mapping[str, Iterable[str]]) -> dict[str, bytes]:
    """Key -> tombstone of every base file of `deleted` (partition -> file names), as Hudi's clean writes them."""
    tombstone = encode_bloom_record("", instant_time, b"", True)
    return {record_key(p, n): tombstone for p, names in deleted.items() for n in names if _is_base_file(n)}


def _by_group(cells: Mapping[str, bytes], num_groups: int) -> dict[int, list[tuple[str, bytes]]]:
    """Cells per file group index, each group's sorted by key bytes (HFile order)."""
    out: dict[int, list[tuple[str, bytes]]] = defaultdict(list)
    keys = sorted(cells, key=str.encode)
    if keys:
        for key, index in zip(keys, file_group_indexes(pa.array(keys, pa.string()), num_groups).tolist(), strict=True):
            out[index].append((key, cells[key]))
    return out


def _num_groups(mdt: Storage) -> int:
    ids = {
        name.split("_")[0].lstrip(".")
        for e in mdt.list_dir(BLOOM_FILTERS_PARTITION)
        if not e.is_dir and (name := e.name).lstrip(".").startswith("bloom-filters-")
    }
    if not ids:
        raise MetadataTableError(f"{mdt.uri}: the bloom_filters partition has no file group")
    return len(ids)


def write_bloom_change(
    storage: Storage,
    instant_time: str,
    added: Mapping[str, Iterable[str]],
    deleted: Mapping[str, Iterable[str]],
) -> list[WriteStat]:
    """Write the `bloom_filters` records of a data instant's files change as log files of the metadata
    delta commit `instant_time` (inflight): filters of the base files `added`, tombstones of those
    `deleted` (partition -> file names). Their stats (none when no base file changed)."""
    started = time.monotonic()
    cells = removed_cells(instant_time, deleted) | added_cells(storage, instant_time, added)
    if not cells:
        return []
    mdt = metadata_storage(storage)
    version = metadata_table_version(mdt)
    stats = []
    for index, group_cells in sorted(_by_group(cells, _num_groups(mdt)).items()):
        data = hfile_data_block(instant_time, group_cells)
        group = file_group_id(index)
        stats.append(
            append_log_file(
                mdt, version, instant_time, BLOOM_FILTERS_PARTITION, group, data, started, updates=len(group_cells)
            )
        )
    return stats


def table_base_files(storage: Storage, as_of: str | None) -> dict[str, list[str]]:
    """Partition -> the base files a listing of the table holds as of `as_of` (what `files` lists)."""
    listing = list_partition_files(storage.list_dir("", recursive=True), as_of or NO_INSTANT)
    return {p: [n for n in files if _is_base_file(n)] for p, files in listing.items()}


def initialize_bloom_filters(
    storage: Storage, config: TableConfig, timeline: Timeline, *, file_groups: int = DEFAULT_FILE_GROUPS
) -> str:
    """Build the `bloom_filters` partition of a table whose metadata table has `files` (module
    docstring); call under the table lock with nothing pending. Returns the metadata instant."""
    prepare_build(storage, timeline, BLOOM_FILTERS_PARTITION)
    completed = timeline.completed()
    as_of = completed[-1].time if completed else None
    cells = added_cells(storage, as_of or NO_INSTANT, table_base_files(storage, as_of))
    grouped = _by_group(cells, file_groups)
    file_ids = [file_group_id(i) for i in range(file_groups)]
    return write_partition(storage, config, timeline, BLOOM_FILTERS_PARTITION, file_ids, lambda i: grouped.get(i, []))


#: One source of a file group's records, newest first: an HFile (base or log block) or a DELETE block's keys.
_Source: TypeAlias = HFileReader | frozenset[bytes]


class MetadataBloomFilters:
    """The `bloom_filters` partition of a table's metadata table, for the bloom lookups of one write.

    A lookup reads only the file group its key hashes to (its latest base HFile and committed log
    blocks, each read once, on first use) and only the HFile blocks that can hold the key; the
    newest record of the key wins, as the metadata compaction merges them.
    """

    def __init__(self, storage: Storage):
        self.mdt = metadata_storage(storage)
        timeline = load_metadata_timeline(self.mdt)
        self._completion = slice_times(timeline)
        first = timeline.instants[0].time if timeline.instants else None
        self._groups = latest_slices(self.mdt, self._completion, first, BLOOM_FILTERS_PARTITION)
        self._sources: dict[str, list[_Source]] = {}

    def _group_sources(self, group_id: str) -> list[_Source]:
        """The group's sources, newest first."""
        sources = self._sources.get(group_id)
        if sources is None:
            sources = []
            group = self._groups.get(group_id)
            if group is not None:
                if group.base is not None:
                    sources.append(HFileReader(self.mdt.read_bytes(group.base), group.base))
                logs = [path for *_, path in sorted(group.logs)]
                for path, block in committed_blocks(self.mdt, logs, self._completion):
                    if block.block_type is log_file.BlockType.HFILE_DATA:
                        sources.append(HFileReader(block.content, path))
                    elif block.block_type is log_file.BlockType.DELETE:
                        keys = log_file.decode_block(block).records.column(0).to_pylist()  # type: ignore[attr-defined]
                        sources.append(frozenset(k.encode() for k in keys if k is not None))
            sources = self._sources[group_id] = sources[::-1]
        return sources

    def record(self, partition_path: str, file_name: str) -> BloomEntry | None:
        """The newest record of a base file's filter, tombstones included (None: no record)."""
        key = record_key(partition_path, file_name)
        if not self._groups:
            return None
        index = int(file_group_indexes(pa.array([key], pa.string()), len(self._groups))[0])
        raw = key.encode()
        for source in self._group_sources(file_group_id(index)):
            if isinstance(source, frozenset):
                if raw in source:
                    return None
                continue
            value = source.get(raw)
            if value is not None:
                return decode_bloom_record(value)
        return None

    def entry(self, partition_path: str, file_name: str) -> BloomEntry | None:
        """The live record of a base file's filter (None: no record, or a tombstone)."""
        found = self.record(partition_path, file_name)
        return None if found is None or found.deleted else found

    def filter_of(self, partition_path: str, file_name: str) -> bytes | None:
        """The serialised filter of a base file (None: no live record), as the BLOOM index's `FilterSource` asks."""
        found = self.entry(partition_path, file_name)
        return None if found is None else found.filter_bytes


__all__ = [
    "BLOOM_FILTERS_PARTITION",
    "DEFAULT_FILE_GROUPS",
    "BloomEntry",
    "MetadataBloomFilters",
    "added_cells",
    "decode_bloom_record",
    "encode_bloom_record",
    "file_group_id",
    "footer_filter",
    "initialize_bloom_filters",
    "keeps_bloom_filters",
    "record_key",
    "removed_cells",
    "table_base_files",
    "write_bloom_change",
]
