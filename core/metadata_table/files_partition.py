"""The metadata table's `files` partition: its records, built from a listing of the data table.

What Hudi 1.x writes when it initialises the partition from storage
(`HoodieBackedTableMetadataWriter.initializeFromFilesystem`, `HoodieTableMetadataUtil.DirectoryInfo`):

- a folder is a data partition when it holds `.hoodie_partition_metadata`; folders below a
  partition and everything under `.hoodie/` are not searched;
- a partition lists its data files (base files and log files, by Hudi's naming) whose
  instant (the one in the file name: the writing delta commit's for log files on table
  versions 8+) is at or before the initialisation instant and not a pending one;
- one record per partition, keyed by the partition path (`.` for the table's root, i.e. a
  non-partitioned table), type FILE_LIST, mapping each file name to `{size, isDeleted=false}`;
- one `__all_partitions__` record, type ALL_PARTITIONS, mapping every partition key to
  `{size 0, isDeleted false}`.

Record values are Avro binary of `HoodieMetadataRecord` with the `key` field `""` and the
`_hoodie_*` fields null (the HFile cell holds the key), as in Hudi's initialisation HFiles.
"""

from __future__ import annotations

import io
import posixpath
from collections import defaultdict
from collections.abc import Iterable, Mapping, Set
from typing import Any

import fastavro

from lakeward.core.file_group.metadata_listing import ALL_PARTITIONS_KEY, NON_PARTITIONED_KEY
from lakeward.core.file_group.naming import PARTITION_METADATA_FILE, parse_base_file_name, parse_log_file_name
from lakeward.core.metadata_table.schema import METADATA_RECORD_SCHEMA, MetadataRecordType
from lakeward.core.storage import FileEntry
from lakeward.core.timeline import METAFOLDER

#: The single file group of the `files` partition (Hudi: prefix `files-`, index 0000, suffix `-0`).
FILES_FILE_GROUP_ID = "files-0000-0"

_PARSED_SCHEMA = fastavro.parse_schema(METADATA_RECORD_SCHEMA)

#: Partition path ("" for the table's root) -> file name -> size in bytes.
PartitionFiles = dict[str, dict[str, int]]


def placing_instant(name: str, pending: Set[str], pending_logs: Set[str]) -> tuple[str, bool] | None:
    """(the instant that placed data file `name`, whether that instant is pending), or None when
    `name` is no data file. A base file's instant is its own, a log's its base instant; `pending`
    rules out base files, `pending_logs` logs (see `list_partition_files`)."""
    base = parse_base_file_name(name)
    if base is not None:
        return base.instant_time, base.instant_time in pending
    log = parse_log_file_name(name)
    if log is not None:
        return log.base_instant_time, log.base_instant_time in pending_logs
    return None


def list_partition_files(
    entries: Iterable[FileEntry], as_of: str, pending: Set[str] = frozenset(), pending_logs: Set[str] | None = None
) -> PartitionFiles:
    """The data partitions and their files in a recursive listing of the table, as of `as_of`.

    `entries`: paths relative to the table's base path (`Storage.list_dir("", recursive=True)`).
    A file counts when its instant is at or before `as_of` and not in `pending` (Hudi's rule);
    `pending_logs`: the pending instants that rule out a log file, when they differ (version 6
    names a log over a pending compaction after the compaction, yet its delta commit completed).
    """
    log_pending = pending if pending_logs is None else pending_logs
    by_folder: dict[str, list[FileEntry]] = defaultdict(list)
    for entry in entries:
        if entry.is_dir or entry.path == METAFOLDER or entry.path.startswith(METAFOLDER + "/"):
            continue
        by_folder[posixpath.dirname(entry.path)].append(entry)
    partitions = {f for f, files in by_folder.items() if any(e.name == PARTITION_METADATA_FILE for e in files)}

    def nested(folder: str) -> bool:
        parent = posixpath.dirname(folder) if folder else None
        while parent is not None:
            if parent in partitions:
                return True
            parent = posixpath.dirname(parent) if parent else None
        return False

    listing: PartitionFiles = {}
    for folder in sorted(p for p in partitions if not nested(p)):
        files = {}
        for entry in by_folder[folder]:
            placed = placing_instant(entry.name, pending, log_pending)
            if placed is not None and not placed[1] and placed[0] <= as_of:
                files[entry.name] = entry.size
        listing[folder] = dict(sorted(files.items()))
    return listing


def partition_key(partition_path: str) -> str:
    """The `files` partition's key of a data partition: its path, `.` for the table's root."""
    return partition_path or NON_PARTITIONED_KEY


def _record(record_type: MetadataRecordType, files: Mapping[str, int]) -> dict[str, Any]:
    return {
        "key": "",
        "type": int(record_type),
        "filesystemMetadata": {name: {"size": size, "isDeleted": False} for name, size in files.items()},
    }


def files_partition_records(listing: PartitionFiles) -> list[tuple[str, dict[str, Any]]]:
    """(key, record) of every `files` partition record of `listing`, sorted by key bytes (HFile order)."""
    records = [
        (ALL_PARTITIONS_KEY, _record(MetadataRecordType.ALL_PARTITIONS, dict.fromkeys(map(partition_key, listing), 0)))
    ]
    records += [(partition_key(p), _record(MetadataRecordType.FILE_LIST, files)) for p, files in listing.items()]
    return sorted(records, key=lambda kv: kv[0].encode())


def encode_record(record: Mapping[str, Any]) -> bytes:
    """Avro binary of one `HoodieMetadataRecord` (absent fields null)."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, _PARSED_SCHEMA, dict(record))
    return out.getvalue()
