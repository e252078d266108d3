"""File listing from the metadata table's `files` partition (read by lakeward on table versions 8+).

Hudi 1.x tables keep a merge-on-read metadata table under `.hoodie/metadata/`; its `files`
partition maps every data partition to its files (name -> size), so a reader lists one
folder of the metadata table instead of every partition of the data table (one storage
list call instead of one per partition, which is what matters on S3).

The `files` partition is one file group (`files-0000-0`): a base HFile plus HFile log
blocks of later metadata delta commits. Its latest slice is merged as Hudi's
`HoodieMetadataPayload` does: a newer tombstone (`isDeleted`) removes a file, a newer live
entry keeps the larger size. Only metadata instants that completed count. Keys are data
partition paths (`.` for a non-partitioned table) and `__all_partitions__`.

The result is a listing; the file-system view still decides what is committed from the
data table's timeline. Anything unusable here is reported as MetadataTableUnavailable so
that the caller can fall back to listing storage.
"""

from __future__ import annotations

import io
import json
import logging
import posixpath
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lakeward.core.config.properties import parse_properties
from lakeward.core.exceptions import LakewardError
from lakeward.core.file_group import log_file  # its modules load when a metadata table is read (issue 23)
from lakeward.core.file_group.hfile import HFileReader
from lakeward.core.file_group.naming import log_file_instant, log_file_name, parse_base_file_name, parse_log_file_name
from lakeward.core.storage import FileEntry, Storage
from lakeward.core.table_version import (
    METAFOLDER,
    SOLO_COMMIT_TIMESTAMP,
    LogSlicing,
    TableVersion,
    TimelineLayout,
    table_version,
)
from lakeward.core.timeline.timeline import Timeline

log = logging.getLogger(__name__)

METADATA_FOLDER = posixpath.join(METAFOLDER, "metadata")
FILES_PARTITION = "files"
ALL_PARTITIONS_KEY = "__all_partitions__"
#: Prefix of the metadata table's reserved initialisation instant times (Hudi's 14-zero
#: `SOLO_COMMIT_TIMESTAMP`; a partition's initialisation is this plus a 3-digit counter).
INIT_INSTANT_PREFIX = SOLO_COMMIT_TIMESTAMP
NON_PARTITIONED_KEY = "."
METADATA_PARTITIONS_KEY = "hoodie.table.metadata.partitions"
INFLIGHT_PARTITIONS_KEY = "hoodie.table.metadata.partitions.inflight"
#: The write option that drops the metadata table (`core/metadata_table/disable.py`), as Hudi's writer does.
METADATA_ENABLE_KEY = "hoodie.metadata.enable"


def base_is_committed(instant_time: str, completion: Mapping[str, str | None], first: str | None) -> bool:
    """Whether a metadata-table base file of `instant_time` is committed: its compaction (or
    initialisation) completed, or it is older than the timeline's first instant `first` (archived
    by the metadata table's archival: Hudi's `containsOrBeforeTimelineStarts`)."""
    return instant_time in completion or (first is not None and instant_time < first)


def log_slice_time(completion: Mapping[str, str], base_instant_time: str, first: str | None) -> str | None:
    """The time that places a metadata log file named after `base_instant_time` in its file slice
    (`slice_times`), None when it is not committed. A log named after an instant older than the
    timeline's first instant `first` is committed: on v6 its name is its slice's base instant, which
    the metadata table's archival may have archived while the slice still takes new logs (Hudi's
    `containsOrBeforeTimelineStarts`); on v8/v9 it is an archived delta commit, older than any
    slice's base, so no slice takes it."""
    done = completion.get(base_instant_time)
    if done is None and first is not None and base_instant_time < first:
        return base_instant_time
    return done


class MetadataTableUnavailable(LakewardError):
    """The metadata table cannot serve a listing (missing, damaged, or not as expected)."""


def metadata_storage(storage: Storage) -> Storage:
    """The metadata table's own storage (base path `.hoodie/metadata`), of the same kind."""
    return type(storage)(
        storage.fs, storage.full_path(METADATA_FOLDER), storage.uri_of(METADATA_FOLDER), storage.options
    )


def uses_files_partition(props: Mapping[str, str]) -> bool:
    """True when `hoodie.table.metadata.partitions` lists a completed `files` partition."""
    return FILES_PARTITION in {p.strip() for p in props.get(METADATA_PARTITIONS_KEY, "").split(",")}


def metadata_partitions(props: Mapping[str, str]) -> list[str]:
    """The completed metadata-table partitions `hoodie.table.metadata.partitions` lists."""
    return [p.strip() for p in props.get(METADATA_PARTITIONS_KEY, "").split(",") if p.strip()]


def keeps_metadata_table(props: Mapping[str, str]) -> bool:
    """Whether commits on a table with these `hoodie.properties` must keep its metadata table: one
    with metadata partitions in use, on every table version (Hudi 0.x writers keep it on v6 too)."""
    return bool(metadata_partitions(props))


def metadata_table_version(mdt: Storage) -> TableVersion:
    """The table version of the metadata table at `mdt` (its data table's), from its own
    `hoodie.properties`: what its timeline layout, file naming and instant times follow."""
    return table_version(read_table_properties(mdt).get("hoodie.table.version", "6"))


def load_metadata_timeline(mdt: Storage, layout: TimelineLayout | None = None) -> Timeline:
    """The active timeline of the metadata table at `mdt`, loaded now (`layout`: when the caller
    knows its data table's; otherwise read from the metadata table's `hoodie.properties`)."""
    return Timeline.load(mdt, layout or metadata_table_version(mdt).timeline_layout)


def next_log_file(
    mdt: Storage, version: TableVersion, partition: str, file_id: str, instant_time: str, token: str
) -> tuple[str, int]:
    """The name and version of the log file the metadata delta commit `instant_time` adds to a file group.

    v8+: `.<fileId>_<instant_time>.log.1_<token>`. v6 (Hudi 0.x): the log joins the group's latest
    file slice, so it carries that slice's base instant (its latest completed base HFile's) and
    the next free version of it.
    """
    if version.log_slicing is LogSlicing.COMPLETION_TIME:
        return log_file_name(file_id, instant_time, 1, token), 1
    completed = {i.time for i in load_metadata_timeline(mdt, version.timeline_layout).completed()}
    names = [e.name for e in mdt.list_dir(partition) if not e.is_dir]
    bases = [
        b.instant_time
        for n in names
        if (b := parse_base_file_name(n)) and b.file_id == file_id and b.instant_time in completed
    ]
    base = log_file_instant(version.log_slicing, max(bases, default=instant_time), instant_time)
    versions = [
        parsed.version
        for n in names
        if (parsed := parse_log_file_name(n)) and parsed.file_id == file_id and parsed.base_instant_time == base
    ]
    next_version = max(versions, default=0) + 1
    return log_file_name(file_id, base, next_version, token), next_version


def slice_times(timeline: Timeline) -> dict[str, str]:
    """Instant time -> the time that places a completed metadata write's log files in file slices.

    Layout 2 (v8+): its completion time (logs carry the delta commit that wrote them). Layout 1
    (v6): its instant time (logs carry their slice's base instant and are ordered by version).
    """
    if timeline.layout is TimelineLayout.V2:
        return timeline.completion_times()
    return {i.time: i.time for i in timeline.completed_writes()}


def read_table_properties(storage: Storage) -> dict[str, str]:
    """The table's `hoodie.properties` as they are on storage now ({} when there is none)."""
    path = posixpath.join(METAFOLDER, "hoodie.properties")
    if not storage.exists(path):
        return {}
    return parse_properties(storage.read_bytes(path).decode("utf-8"))


@dataclass(frozen=True)
class FileInfo:
    """One file of a merged `files` record: its size, and whether the entry is a tombstone."""

    size: int
    deleted: bool


#: Merged `files` partition: record key -> file name (or partition key) -> its entry.
MergedFiles = dict[str, dict[str, FileInfo]]


def _merge(into: MergedFiles, key: str, files: Mapping[str, Any] | None) -> None:
    """Apply one newer `files` record to the merged state (HoodieMetadataPayload semantics)."""
    current = into.setdefault(key, {})
    for name, info in (files or {}).items():
        newer = FileInfo(int(info.get("size") or 0), bool(info.get("isDeleted")))
        old = current.get(name)
        if newer.deleted:
            if old is not None and not old.deleted:
                del current[name]
            elif old is None:
                current[name] = newer  # a tombstone without a live entry is kept
        elif old is None or old.deleted:
            current[name] = newer
        else:
            current[name] = FileInfo(max(old.size, newer.size), False)


def _apply_hfile(
    merged: MergedFiles, data: bytes, name: str, schema_json: str | None, keys: Collection[str] | None = None
) -> None:
    """Merge the `files` records of one HFile (of `keys` only, when given) into `merged`."""
    reader = HFileReader(data, name)
    schema_text = reader.avro_schema or schema_json
    if not schema_text:
        raise MetadataTableUnavailable(f"{name}: no Avro schema for the metadata records")
    # lazy: only tables with a metadata table need fastavro; opening any other table does not (start-up
    # time of `lakeward show`, issue 23)
    import fastavro

    schema = fastavro.parse_schema(json.loads(schema_text))
    for raw_key, value in reader.items():
        key = raw_key.decode()
        if keys is not None and key not in keys:
            continue
        record = fastavro.schemaless_reader(io.BytesIO(value), schema, None)
        _merge(merged, key, record.get("filesystemMetadata"))  # type: ignore[union-attr]


def merge_files_slice(
    mdt: Storage,
    base_path: str | None,
    log_paths: Sequence[str],
    completed: Collection[str],
    keys: Collection[str] | None = None,
) -> MergedFiles:
    """Merge one `files` file slice as readers do: the base HFile (if any), then the HFile data
    blocks of `log_paths` (in the order given: completion time, version, write token) whose
    instant is in `completed`; only the records of `keys` when given (other records are not
    decoded). Shared by the listing and the metadata table's compaction.
    Raises MetadataTableUnavailable on a damaged log block."""
    merged: MergedFiles = {}
    if base_path is not None:
        _apply_hfile(merged, mdt.read_bytes(base_path), base_path, None, keys)
    for path, block in committed_blocks(mdt, log_paths, completed):
        if block.block_type is log_file.BlockType.HFILE_DATA:
            _apply_hfile(merged, block.content, path, block.header.get(log_file.HeaderKey.SCHEMA), keys)
    return merged


def committed_blocks(
    mdt: Storage, log_paths: Sequence[str], completed: Collection[str]
) -> Iterator[tuple[str, log_file.RawBlock]]:
    """(path, block) of every block of `log_paths`, in order, whose instant is in `completed`: what a
    metadata-table slice merge applies. Raises MetadataTableUnavailable on a damaged log block."""
    for path in log_paths:
        for block in log_file.scan_blocks(mdt.read_bytes(path)):
            if isinstance(block, log_file.CorruptBlock):
                raise MetadataTableUnavailable(f"{path}: damaged log block ({block.reason})")
            if block.instant_time in completed:
                yield path, block


class MetadataFileListing:
    """The merged `files` partition of a table's metadata table."""

    def __init__(
        self, storage: Storage, layout: TimelineLayout | None = None, partitions: Collection[str] | None = None
    ):
        """`layout`: the data table's timeline layout (that of its metadata table) when known.
        `partitions`: only these partition paths' records ("" for the table's root) are decoded, and
        every listing covers them only."""
        self.storage = storage
        self.layout = layout
        self._keys = None if partitions is None else {NON_PARTITIONED_KEY if p == "" else p for p in partitions}
        self.mdt = metadata_storage(storage)
        try:
            self._files = self._load()
        except MetadataTableUnavailable:
            raise
        except (LakewardError, OSError, ValueError, KeyError, IndexError, EOFError) as exc:
            raise MetadataTableUnavailable(f"metadata table of {storage.uri} is unreadable: {exc}") from exc

    def _load(self) -> MergedFiles:
        timeline = load_metadata_timeline(self.mdt, self.layout)
        completion = slice_times(timeline)
        if not completion:
            raise MetadataTableUnavailable(f"metadata table of {self.storage.uri} has no completed instant")
        entries = [e for e in self.mdt.list_dir(FILES_PARTITION) if not e.is_dir]
        first = timeline.instants[0].time if timeline.instants else None
        bases = []
        for entry in entries:
            parsed = parse_base_file_name(entry.name)
            if (
                parsed is not None
                and entry.name.endswith(".hfile")
                and base_is_committed(parsed.instant_time, completion, first)
            ):
                bases.append((parsed.instant_time, entry))
        if not bases:
            raise MetadataTableUnavailable(f"metadata table of {self.storage.uri}: `files` has no completed base HFile")
        base_time, base = max(bases, key=lambda b: b[0])
        logs = []
        for entry in entries:
            parsed_log = parse_log_file_name(entry.name)
            if parsed_log is None:
                continue
            done = log_slice_time(completion, parsed_log.base_instant_time, first)
            if done is not None and done >= base_time:  # the latest slice (v6: logs named after its base)
                logs.append((done, parsed_log.version, parsed_log.write_token, entry))
        ordered = [entry.path for _, _, _, entry in sorted(logs, key=lambda x: x[:3])]
        return merge_files_slice(self.mdt, base.path, ordered, completion, self._keys)

    def partitions(self) -> list[str]:
        """Data partition paths ("" for a non-partitioned table); of a listing read for some
        partitions, those of them that hold live files."""
        if self._keys is not None:
            return sorted(p for p, files in self.partition_files().items() if files)
        listed = self._files.get(ALL_PARTITIONS_KEY, {})
        return sorted("" if p == NON_PARTITIONED_KEY else p for p, info in listed.items() if not info.deleted)

    def partition_files(self) -> dict[str, dict[str, int]]:
        """Every partition key's live files (name -> size), partitions removed from
        `__all_partitions__` included; keys are partition paths ("" for the table's root)."""
        return {
            ("" if key == NON_PARTITIONED_KEY else key): {n: i.size for n, i in files.items() if not i.deleted}
            for key, files in self._files.items()
            if key != ALL_PARTITIONS_KEY
        }

    def file_entries(self) -> list[FileEntry]:
        """Every live file of every partition, as a storage listing would give them.

        Partitions `__all_partitions__` no longer lists (a delete_partition) are listed too while
        their files are live: the data table's timeline hides their replaced file groups from
        reads after the replace, and a time-travel read before it still needs them.
        """
        out = []
        for partition, files in sorted(self.partition_files().items()):
            for name, size in sorted(files.items()):
                out.append(FileEntry(posixpath.join(partition, name) if partition else name, size, False))
        return out
